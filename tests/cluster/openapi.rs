//! `GET /openapi.json` is kept true: the document served by a real node lists
//! exactly the routes of the router (read from the `.route(..)` calls in
//! `src/api/`), and every documented method answers on the live node while
//! every other method on a documented path is refused as not allowed; and the
//! refusals of a token-secured node are documented.

use std::collections::BTreeSet;

use crate::common::{bounded, start_cluster, start_secured_cluster, step, Material, CLIENT_TOKEN};
use serde_json::Value;

const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

/// (path, method) of every `.route(path, method_router)` call in `src/api/`.
fn routed() -> BTreeSet<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api");
    let mut routes = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("src/api") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        for unsupported in [".nest(", ".route_service(", ".nest_service("] {
            assert!(!source.contains(unsupported), "{}: {unsupported} is not understood by this test", path.display());
        }
        let mut rest = source.as_str();
        while let Some(at) = rest.find(".route(") {
            rest = &rest[at + ".route(".len()..];
            let (call, after) = split_call(rest);
            rest = after;
            let (first, method_router) = call.split_once(',').expect("route(path, methods)");
            let route = route_path(first.trim());
            for method in top_level_calls(method_router) {
                assert!(METHODS.contains(&method.as_str()), "{}: unknown method router {method}", path.display());
                routes.insert((route.clone(), method));
            }
        }
    }
    routes
}

/// The text of a call's arguments (up to its closing parenthesis) and what follows.
fn split_call(s: &str) -> (&str, &str) {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '{' | '[' => depth += 1,
            ')' | '}' | ']' if depth == 0 => return (&s[..i], &s[i + 1..]),
            ')' | '}' | ']' => depth -= 1,
            _ => {}
        }
    }
    panic!("unbalanced call: {s}");
}

/// The names called at the top level of `expr`: `put(a).get(b)` → put, get.
fn top_level_calls(expr: &str) -> Vec<String> {
    let mut calls = Vec::new();
    let mut rest = expr;
    loop {
        let trimmed = rest.trim_start().trim_start_matches('.');
        let name: String = trimmed.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            return calls;
        }
        let after = trimmed[name.len()..].trim_start();
        let Some(args) = after.strip_prefix('(') else { return calls };
        calls.push(name);
        rest = split_call(args).1;
    }
}

/// A route's path: a string literal, or one of the crate's path constants.
fn route_path(arg: &str) -> String {
    if let Some(literal) = arg.strip_prefix('"').and_then(|a| a.strip_suffix('"')) {
        return literal.to_owned();
    }
    match arg {
        "crate::raft::APPEND_PATH" => leasehold::raft::APPEND_PATH.to_owned(),
        "crate::raft::VOTE_PATH" => leasehold::raft::VOTE_PATH.to_owned(),
        "crate::raft::SNAPSHOT_PATH" => leasehold::raft::SNAPSHOT_PATH.to_owned(),
        other => panic!("route path {other} is neither a literal nor a known constant: teach this test"),
    }
}

/// (path, method) of every operation in the document.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let paths = doc["paths"].as_object().expect("paths");
    let mut ops = BTreeSet::new();
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys().filter(|k| METHODS.contains(&k.as_str())) {
            ops.insert((path.clone(), method.clone()));
        }
    }
    ops
}

/// `path` with its `{parameters}` filled in with values no test data uses.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|s| match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some("id") => "999".to_owned(),
            Some(_) => "openapi-probe".to_owned(),
            None => s.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The error code of a reply, if it is an API error.
async fn code_of(reply: reqwest::Response) -> Option<String> {
    let is_json = reply.headers().get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !is_json {
        return None;
    }
    let body: Value = reply.json().await.ok()?;
    Some(body["error"]["code"].as_str()?.to_owned())
}

// Ensures the served OpenAPI document and the router agree: the same paths
// with the same methods, every documented operation routed on a live node,
// and every undocumented method on a documented path refused with 405.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document_matches_the_router() {
    bounded(async {
        let cluster = start_cluster(1).await;
        let endpoint = cluster.endpoint(1);
        let http = reqwest::Client::builder().no_proxy().build().unwrap();

        step("the served document lists exactly the routed paths and methods");
        let reply = http.get(format!("http://{endpoint}/openapi.json")).send().await.unwrap();
        assert!(reply.status().is_success());
        let doc: Value = reply.json().await.unwrap();
        assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")), "an OpenAPI 3 document");
        let documented = documented(&doc);
        let routed = routed();
        assert!(routed.len() > 20, "the router source was read: {routed:?}");
        let undocumented: Vec<_> = routed.difference(&documented).collect();
        let unrouted: Vec<_> = documented.difference(&routed).collect();
        assert!(undocumented.is_empty(), "routed but not documented: {undocumented:?}");
        assert!(unrouted.is_empty(), "documented but not routed: {unrouted:?}");

        step("every documented operation is routed on the live node; other methods are refused");
        let paths: BTreeSet<&String> = documented.iter().map(|(p, _)| p).collect();
        for path in paths {
            let url = format!("http://{endpoint}{}", concrete(path));
            for method in METHODS {
                // No body: requests that need one are refused before they
                // change anything.
                let request = http.request(method.to_uppercase().parse().unwrap(), &url);
                let reply = request.send().await.unwrap();
                let status = reply.status().as_u16();
                let code = code_of(reply).await;
                let fell_through = (status == 404 && code.as_deref() == Some("not_found"))
                    || (status == 405 && code.as_deref() == Some("method_not_allowed"));
                if documented.contains(&(path.clone(), method.to_owned())) {
                    assert!(!fell_through, "{method} {path} is documented but not routed ({status} {code:?})");
                } else {
                    assert_eq!(
                        (status, code.as_deref()),
                        (405, Some("method_not_allowed")),
                        "{method} {path} is not documented"
                    );
                }
            }
        }

        step("every documented operation has responses and its path parameters");
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                assert!(op["responses"].as_object().is_some_and(|r| !r.is_empty()), "{method} {path}: responses");
                let declared: BTreeSet<&str> = op["parameters"]
                    .as_array()
                    .map(|ps| ps.iter().filter(|p| p["in"] == "path").filter_map(|p| p["name"].as_str()).collect())
                    .unwrap_or_default();
                let in_path: BTreeSet<&str> =
                    path.split('/').filter_map(|s| s.strip_prefix('{')?.strip_suffix('}')).collect();
                assert_eq!(declared, in_path, "{method} {path}: path parameters");
            }
        }

        step("every documented query parameter is accepted (unknown ones are refused with 400)");
        let locks = &doc["paths"]["/v1/locks"]["get"]["parameters"];
        let query: Vec<&str> = locks
            .as_array()
            .map(|ps| ps.iter().filter(|p| p["in"] == "query").filter_map(|p| p["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(query, ["prefix", "limit"], "GET /v1/locks query parameters");
        let url = format!(
            "http://{endpoint}/v1/locks?{}",
            query.iter().map(|q| format!("{q}=1")).collect::<Vec<_>>().join("&")
        );
        let reply = http.get(&url).send().await.unwrap();
        assert!(reply.status().is_success(), "{url}: {}", reply.status());
        let unknown = http.get(format!("http://{endpoint}/v1/locks?owner=1")).send().await.unwrap();
        assert_eq!(unknown.status().as_u16(), 400, "an undocumented query parameter is refused");

        for reference in references(&doc) {
            let name = reference.strip_prefix("#/components/schemas/").expect("a schema reference");
            assert!(doc["components"]["schemas"][name].is_object(), "dangling reference {reference}");
        }
    })
    .await;
}

// Ensures the document lists the refusals that come before any handler:
// only health, readiness, metrics and the status page are open on a node with
// secrets; every operation behind a token lists 401 and 403 and names its token, every
// operation lists 408 (the request deadline) and all but Raft RPC 503 (the
// in-flight bound); and that on a real token-secured node a request without
// a token gets a status the document lists for that operation (401 where it
// names a token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_lists_the_refusals_of_a_secured_node() {
    bounded(async {
        let material = Material::new();
        let cluster = start_secured_cluster(1, material.secrets(), &[]).await;
        let endpoint = cluster.endpoint(1);
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let doc = http.get(format!("http://{endpoint}/openapi.json")).bearer_auth(CLIENT_TOKEN).send().await.unwrap();
        let doc: Value = doc.json().await.unwrap();
        let schemes = doc["components"]["securitySchemes"].as_object().expect("security schemes");

        step("every operation lists the refusals of the layers in front of it, with the error body");
        let mut secured = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let responses = op["responses"].as_object().unwrap();
                let lists = |status: &str| responses.contains_key(status);
                let tokens: Vec<&String> = op["security"]
                    .as_array()
                    .map(|s| s.iter().flat_map(|r| r.as_object().unwrap().keys()).collect())
                    .unwrap_or_default();
                if !tokens.is_empty() {
                    secured += 1;
                    assert!(lists("401") && lists("403"), "{method} {path} names a token but not 401 and 403");
                    for token in tokens {
                        assert_eq!(schemes[token]["scheme"], "bearer", "{method} {path}: scheme {token}");
                    }
                }
                assert!(lists("408"), "{method} {path}: the request deadline (408)");
                assert_eq!(lists("503"), !path.starts_with("/raft/"), "{method} {path}: the in-flight bound (503)");
                for (status, response) in responses.iter().filter(|(s, _)| s.as_str() >= "400") {
                    let schema = &response["content"]["application/json"]["schema"]["$ref"];
                    assert_eq!(schema, "#/components/schemas/Error", "{method} {path} {status}: the error body");
                }
            }
        }
        assert!(secured > 20, "the client, admin and Raft operations name their token ({secured})");
        let open: BTreeSet<String> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, item)| item.as_object().unwrap().iter().map(move |(method, op)| (path, method, op)))
            .filter(|(_, _, op)| op["security"].is_null())
            .map(|(path, method, _)| format!("{method} {path}"))
            .collect();
        let meant: BTreeSet<String> =
            ["get /healthz", "get /readyz", "get /metrics", "get /", "get /ui"].map(String::from).into();
        assert_eq!(open, meant, "once a node has secrets, only these are open to all");

        step("without a token, the secured node answers each operation with a status it lists");
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let url = format!("http://{endpoint}{}", concrete(path));
                let reply = http.request(method.to_uppercase().parse().unwrap(), &url).send().await.unwrap();
                let status = reply.status().as_u16();
                let listed = op["responses"].as_object().unwrap().contains_key(&status.to_string());
                assert!(listed, "{method} {path} answered {status}, which the document does not list");
                if op["security"].is_array() {
                    assert_eq!(status, 401, "{method} {path} without a token");
                }
            }
        }
    })
    .await;
}

/// Every `$ref` in the document.
fn references(v: &Value) -> Vec<String> {
    match v {
        Value::Object(map) => map
            .iter()
            .flat_map(|(k, v)| match (k.as_str(), v) {
                ("$ref", Value::String(r)) => vec![r.clone()],
                _ => references(v),
            })
            .collect(),
        Value::Array(items) => items.iter().flat_map(references).collect(),
        _ => vec![],
    }
}
