//! `GET /openapi.json`: the HTTP API described in OpenAPI 3.1 (utoipa).
//!
//! The document is built from [`OPERATIONS`], one row per routed method and
//! path; `tests/openapi.rs` checks it against the router both ways, so a
//! route added without a row (or a row without a route) fails the suite.
//! The refusals that come before any handler (a missing or wrong token,
//! the request deadline, the in-flight bound) are added to every row they
//! apply to from the row's part of the API, as the router layers them.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::routing::get;
use axum::{Json, Router};
use utoipa::openapi::path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn, PathItem};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::response::{ResponseBuilder, ResponsesBuilder};
use utoipa::openapi::schema::{Object, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, InfoBuilder, OpenApi, OpenApiBuilder, PathsBuilder, Ref, RefOr, Required, Schema};
use utoipa::{IntoParams, OpenApi as _, PartialSchema};

use super::auth::Part;
use crate::node::Node;
use leasehold_proto::cluster::{InitRequest, MembershipRequest, NewMember};
use leasehold_proto::fence::{
    CheckRequest, CheckResponse, GateRequest, GateResponse, PutRecordRequest, PutRecordResponse,
};
use leasehold_proto::locks::{AcquireRequest, ListQuery, ReleaseRequest, ReleaseResponse, RenewRequest};

pub fn routes() -> Router<Arc<Node>> {
    Router::new().route("/openapi.json", get(|| async { Json(document()) }))
}

/// A request or response body: a named schema, or JSON of any shape.
#[derive(Clone, Copy)]
enum Body {
    Named(&'static str),
    AnyJson,
    Text(&'static str),
    None,
}

/// One routed method on one path: method, path, tag, the part of the API
/// whose token it asks for (`None`: open to all), summary, request body, the
/// success answer's status and body, and the error statuses its handler
/// answers with (body: `Error`).
struct Operation(HttpMethod, &'static str, &'static str, Option<Part>, &'static str, Body, (u16, Body), &'static [u16]);

use Body::{AnyJson, Named, Text};
use HttpMethod::{Delete, Get, Post, Put};
use Part::{Admin, Client, Raft};

/// Every routed method and path. Leader-only operations may also answer 503
/// (no leader, or the leader unreachable from the node asked).
#[rustfmt::skip]
const OPERATIONS: &[Operation] = &[
    Operation(Get, "/v1/locks", "locks", Some(Client), "Held locks in name order (`prefix`, `limit` query parameters); linearizable", Body::None, (200, AnyJson), &[400, 503]),
    Operation(Get, "/v1/locks/{name}", "locks", Some(Client), "One held lock with its queue; 404 `not_held` when free; linearizable", Body::None, (200, AnyJson), &[400, 404, 503]),
    Operation(Post, "/v1/locks/{name}/acquire", "locks", Some(Client), "Acquire, or with `wait_ms` wait in the lock's FIFO queue; the grant carries the fencing token", Named("AcquireRequest"), (200, AnyJson), &[400, 409, 503]),
    Operation(Post, "/v1/locks/{name}/renew", "locks", Some(Client), "Restart the lease of the holder of `token`", Named("RenewRequest"), (200, AnyJson), &[400, 404, 409, 503]),
    Operation(Post, "/v1/locks/{name}/release", "locks", Some(Client), "Release the lease held under `token`", Named("ReleaseRequest"), (200, Named("ReleaseResponse")), &[400, 404, 409, 503]),
    Operation(Get, "/v1/locks/{name}/events", "events", Some(Client), "The lock's applied events as Server-Sent Events", Body::None, (200, Text("text/event-stream")), &[400]),
    Operation(Get, "/v1/events", "events", Some(Client), "Every lock's applied events as Server-Sent Events", Body::None, (200, Text("text/event-stream")), &[]),
    Operation(Post, "/v1/fence/check", "fence", Some(Client), "Is `token` the current token of `lock`? (linearizable)", Named("CheckRequest"), (200, Named("CheckResponse")), &[400, 503]),
    Operation(Post, "/v1/fence/gate/{resource}", "fence", Some(Client), "Admit `token` if no higher token of the same lock was admitted", Named("GateRequest"), (200, Named("GateResponse")), &[400, 409, 503]),
    Operation(Put, "/v1/records/{key}", "fence", Some(Client), "Write a record only if `token` is current, in the same Raft entry as the check", Named("PutRecordRequest"), (200, Named("PutRecordResponse")), &[400, 409, 503]),
    Operation(Get, "/v1/records/{key}", "fence", Some(Client), "Read a fenced record (linearizable)", Body::None, (200, AnyJson), &[400, 404, 503]),
    Operation(Get, "/v1/cluster/status", "admin", None, "This node's view: role, leader, term, indexes, tick, members, replication (leader)", Body::None, (200, AnyJson), &[]),
    Operation(Get, "/v1/cluster/nodes", "admin", None, "Every member's own status, with the replication lag the leader reports", Body::None, (200, AnyJson), &[]),
    Operation(Post, "/v1/cluster/init", "admin", Some(Admin), "Initialize a new cluster with these members (this node alone when empty)", Named("InitRequest"), (200, AnyJson), &[400, 409]),
    Operation(Post, "/v1/cluster/learners", "admin", Some(Admin), "Add a non-voting member and wait until it has caught up", Named("NewMember"), (200, AnyJson), &[400, 503]),
    Operation(Post, "/v1/cluster/membership", "admin", Some(Admin), "Make exactly these members voters", Named("MembershipRequest"), (200, AnyJson), &[400, 409, 503]),
    Operation(Post, "/v1/cluster/members/{id}/promote", "admin", Some(Admin), "Make learner `id` a voter", Body::None, (200, AnyJson), &[400, 404, 409, 503]),
    Operation(Delete, "/v1/cluster/members/{id}", "admin", Some(Admin), "Remove member `id` from the cluster", Body::None, (200, AnyJson), &[400, 404, 409, 503]),
    Operation(Post, "/v1/cluster/snapshot", "admin", Some(Admin), "This node snapshots everything it has applied; answers once stored (no leader needed)", Body::None, (200, AnyJson), &[503]),
    Operation(Get, "/v1/cluster/snapshot", "admin", Some(Admin), "This node's stored snapshot as a backup file for `leasehold restore`", Body::None, (200, AnyJson), &[404]),
    Operation(Get, "/healthz", "admin", None, "200 while the process serves; names the leader if known", Body::None, (200, AnyJson), &[]),
    Operation(Get, "/metrics", "observe", None, "Prometheus series in OpenMetrics text", Body::None, (200, Text("application/openmetrics-text")), &[]),
    Operation(Get, "/", "observe", None, "The status page", Body::None, (200, Text("text/html")), &[]),
    Operation(Get, "/ui", "observe", None, "The status page", Body::None, (200, Text("text/html")), &[]),
    Operation(Get, "/openapi.json", "observe", None, "This document", Body::None, (200, AnyJson), &[]),
    Operation(Post, crate::raft::APPEND_PATH, "raft", Some(Raft), "Inbound Raft AppendEntries (members only)", AnyJson, (200, AnyJson), &[400, 500]),
    Operation(Post, crate::raft::VOTE_PATH, "raft", Some(Raft), "Inbound Raft vote request (members only)", AnyJson, (200, AnyJson), &[400, 500]),
    Operation(Post, crate::raft::SNAPSHOT_PATH, "raft", Some(Raft), "Inbound Raft snapshot chunk (members only)", Text("application/octet-stream"), (200, AnyJson), &[400, 500]),
];

/// The named schemas of the request and response bodies.
#[derive(utoipa::OpenApi)]
#[openapi(components(schemas(
    AcquireRequest,
    RenewRequest,
    ReleaseRequest,
    ReleaseResponse,
    CheckRequest,
    CheckResponse,
    GateRequest,
    GateResponse,
    PutRecordRequest,
    PutRecordResponse,
    InitRequest,
    NewMember,
    MembershipRequest
)))]
struct Schemas;

/// The whole document.
pub fn document() -> OpenApi {
    let mut paths = PathsBuilder::new();
    for o in OPERATIONS {
        paths = paths.path(o.1, PathItem::new(o.0.clone(), operation(o)));
    }
    // The request and response schemas, and those they refer to.
    let mut components = Schemas::openapi().components.unwrap_or_default();
    components.schemas.insert("Error".into(), RefOr::T(error_schema()));
    for part in [Client, Admin, Raft] {
        let scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some(token_meaning(part))).build();
        components.security_schemes.insert(security_scheme(part).into(), SecurityScheme::Http(scheme));
    }
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("leasehold")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(env!("CARGO_PKG_DESCRIPTION")))
                .build(),
        )
        .paths(paths.build())
        .components(Some(components))
        .build()
}

fn operation(o: &Operation) -> utoipa::openapi::path::Operation {
    let Operation(_, path, tag, part, summary, request, ok, _) = o;
    let mut builder = OperationBuilder::new().tag(*tag).summary(Some(*summary));
    if let Some(part) = part {
        builder = builder.security(SecurityRequirement::new(security_scheme(*part), Vec::<String>::new()));
    }
    for name in path_parameters(path) {
        let parameter = ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Path)
            .required(Required::True)
            .schema(Some(if name == "id" { u64::schema() } else { String::schema() }));
        builder = builder.parameter(parameter);
    }
    if *path == "/v1/locks" {
        builder = builder.parameters(Some(ListQuery::into_params(|| Some(ParameterIn::Query))));
    }
    if let Some(content) = content(*request) {
        builder = builder.request_body(Some(
            RequestBodyBuilder::new().content(content.0, content.1).required(Some(Required::True)).build(),
        ));
    }
    let mut success = ResponseBuilder::new().description("success");
    if let Some((media, body)) = content(ok.1) {
        success = success.content(media, body);
    }
    let mut responses = ResponsesBuilder::new().response(ok.0.to_string(), success.build());
    for status in error_statuses(o) {
        let error = ResponseBuilder::new()
            .description(error_meaning(status))
            .content("application/json", Content::new(Some(Ref::from_schema_name("Error"))))
            .build();
        responses = responses.response(status.to_string(), error);
    }
    builder.responses(responses.build()).build()
}

/// The statuses `o` can be refused with: its handler's, and those of the
/// layers in front of it (see [`super::router`]): a token check (401, 403)
/// where its part asks for one, the request deadline (408) on every route,
/// and the in-flight bound (503 `overloaded`) on all but Raft RPC.
fn error_statuses(o: &Operation) -> BTreeSet<u16> {
    let Operation(_, _, _, part, _, _, _, handler) = o;
    let mut statuses: BTreeSet<u16> = handler.iter().copied().collect();
    statuses.insert(408);
    if part.is_some() {
        statuses.extend([401, 403]);
    }
    if *part != Some(Raft) {
        statuses.insert(503);
    }
    statuses
}

/// The name of the security scheme of a part's token.
fn security_scheme(part: Part) -> &'static str {
    match part {
        Client => "client_token",
        Admin => "admin_token",
        Raft => "cluster_secret",
    }
}

fn token_meaning(part: Part) -> &'static str {
    match part {
        Client => "The client token, or the admin token; asked for only when the node has a client token",
        Admin => "The admin token; asked for only when the node has one",
        Raft => "The cluster secret the members share; asked for only when the node has one",
    }
}

/// The `{name}` segments of `path`.
fn path_parameters(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
}

fn content(body: Body) -> Option<(&'static str, Content)> {
    match body {
        Named(name) => Some(("application/json", Content::new(Some(Ref::from_schema_name(name))))),
        AnyJson => Some(("application/json", Content::new(Some(Object::new())))),
        Text(media) => Some((media, Content::new(Some(Object::with_type(Type::String))))),
        Body::None => None,
    }
}

fn error_meaning(status: u16) -> &'static str {
    match status {
        400 => "invalid input (`invalid_argument` and kin); nothing changed",
        404 => "not found (`not_held`, `not_member`, ...)",
        401 => "no bearer token, where this part of the API asks for one (`unauthenticated`, WWW-Authenticate)",
        403 => "a token that does not open this part of the API (`permission_denied`)",
        408 => {
            "not received and answered within the request deadline (`request_timeout`); a write may still take effect"
        }
        409 => "conflict (`held`, `stale_token`, `wait_timeout`, `would_lose_quorum`, ...)",
        500 => "internal error",
        503 => "no leader or no quorum now, or too many requests in flight (`overloaded`); retry (Retry-After)",
        _ => "error",
    }
}

/// `{"error": {"code": .., "message": .., ..details}}`, every error's body.
fn error_schema() -> Schema {
    use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder};
    let inner = ObjectBuilder::new()
        .property("code", String::schema())
        .required("code")
        .property("message", String::schema())
        .required("message")
        .additional_properties(Some(AdditionalProperties::FreeForm(true)));
    Schema::Object(ObjectBuilder::new().property("error", inner).required("error").build())
}
