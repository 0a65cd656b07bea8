//! A fault-injecting HTTP proxy in front of every node: the drivers talk to
//! the proxies only, so the harness sees every request a client sends (when
//! it arrived, to which node, with which request id) and can make the
//! cluster misbehave in ways a client must survive: an answer lost after the
//! cluster applied the request, `503 overloaded` with `Retry-After`, every
//! node hanging.
//!
//! It speaks HTTP/1.1 and h2c (prior knowledge) to clients, as the nodes do,
//! and forwards over HTTP/1.1. The `x-leasehold-leader-addr` header of an
//! answer names a node; the proxy rewrites it to that node's proxy, so a
//! client that follows the leader stays behind the proxies.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use leasehold_proto::LEADER_ADDR_HEADER;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What the proxies do to the requests they get, all nodes alike. Faults
/// on a path apply to that path only, so scenarios of several languages
/// can run at once, each with its own.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Forward the request, then close the connection instead of passing
    /// the answer on, for the next `remaining` requests whose path ends with
    /// `suffix`: the cluster applied the request, the client never heard.
    DropAnswer { suffix: String, remaining: usize },
    /// Answer `503 overloaded` with `Retry-After: retry_after_s` to every
    /// request whose path ends with `suffix`, until `until`.
    Overloaded { suffix: String, until: Instant, retry_after_s: u64 },
    /// Hold every request unanswered while this fault lasts, then close its
    /// connection: nodes that hang.
    Blackhole,
}

/// One request a proxy received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    /// The node whose proxy received it.
    pub node: u64,
    pub method: String,
    pub path: String,
    pub request_id: Option<String>,
    /// The status the client got, `None` when it got no answer.
    pub status: Option<u16>,
}

#[derive(Default)]
struct Shared {
    faults: Vec<Fault>,
    seen: Vec<Seen>,
}

/// The proxies of one cluster.
pub struct Proxies {
    shared: Arc<Mutex<Shared>>,
    /// Proxy address of each node.
    addrs: BTreeMap<u64, SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Proxies {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What a proxy needs to forward one request.
struct Route {
    node: u64,
    upstream: String,
    /// Node address → proxy address, for the leader header.
    rewrites: Vec<(String, String)>,
    http: reqwest::Client,
    shared: Arc<Mutex<Shared>>,
}

impl Proxies {
    /// One proxy per node of `nodes` (id → the node's `host:port`).
    pub async fn start(nodes: &BTreeMap<u64, String>) -> Proxies {
        let mut listeners = BTreeMap::new();
        for id in nodes.keys() {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a proxy port");
            listeners.insert(*id, listener);
        }
        let addrs: BTreeMap<u64, SocketAddr> =
            listeners.iter().map(|(id, l)| (*id, l.local_addr().expect("proxy address"))).collect();
        let rewrites: Vec<(String, String)> =
            nodes.iter().map(|(id, node)| (node.clone(), addrs[id].to_string())).collect();
        let shared = Arc::new(Mutex::new(Shared::default()));
        // Answers are passed on as they are: no redirects, no pooling
        // surprises across a killed node.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(2))
            .build()
            .expect("HTTP client");
        let tasks = listeners
            .into_iter()
            .map(|(node, listener)| {
                let route = Arc::new(Route {
                    node,
                    upstream: format!("http://{}", nodes[&node]),
                    rewrites: rewrites.clone(),
                    http: http.clone(),
                    shared: Arc::clone(&shared),
                });
                tokio::spawn(accept(listener, route))
            })
            .collect();
        Proxies { shared, addrs, tasks }
    }

    /// `http://` base URLs of the proxies, `first` first.
    pub fn endpoints_from(&self, first: u64) -> Vec<String> {
        let mut ids: Vec<u64> = self.addrs.keys().copied().collect();
        ids.sort_by_key(|id| *id != first);
        ids.iter().map(|id| format!("http://{}", self.addrs[id])).collect()
    }

    pub fn add_fault(&self, fault: Fault) {
        self.shared.lock().unwrap().faults.push(fault);
    }

    /// Ends the faults on paths that contain `scope`, and a blackhole.
    pub fn clear_faults(&self, scope: &str) {
        self.shared.lock().unwrap().faults.retain(|fault| match fault {
            Fault::DropAnswer { suffix, .. } | Fault::Overloaded { suffix, .. } => !suffix.contains(scope),
            Fault::Blackhole => false,
        });
    }

    /// Every request received so far, in order of arrival.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.lock().unwrap().seen.clone()
    }
}

async fn accept(listener: TcpListener, route: Arc<Route>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let route = Arc::clone(&route);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                let route = Arc::clone(&route);
                async move { route.pass(request).await }
            });
            // A connection closed on purpose (a dropped answer) ends here.
            let _ = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// Why a request got no answer: hyper closes the connection.
#[derive(Debug)]
struct NoAnswer(&'static str);

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for NoAnswer {}

/// What the fault in force makes of one request.
enum Verdict {
    Forward,
    ForwardThenDrop,
    Overloaded(u64),
    Hold,
}

impl Route {
    async fn pass(&self, request: hyper::Request<Incoming>) -> Result<hyper::Response<Body>, NoAnswer> {
        let at = Instant::now();
        let (parts, body) = request.into_parts();
        let body = axum::body::to_bytes(Body::new(body), 1 << 20).await.map_err(|_| NoAnswer("body unreadable"))?;
        let request_id = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("request_id").and_then(|r| r.as_str()).map(str::to_string));
        let path = parts.uri.path().to_string();
        let index = {
            let mut shared = self.shared.lock().unwrap();
            let seen = Seen { at, node: self.node, method: parts.method.to_string(), path, request_id, status: None };
            shared.seen.push(seen);
            shared.seen.len() - 1
        };
        let verdict = self.verdict(parts.uri.path());
        let answer = match verdict {
            Verdict::Hold => {
                while self.shared.lock().unwrap().faults.iter().any(|f| matches!(f, Fault::Blackhole)) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                return Err(NoAnswer("held, then let go"));
            }
            Verdict::Overloaded(retry_after_s) => overloaded(retry_after_s),
            Verdict::Forward | Verdict::ForwardThenDrop => {
                let answer = self.forward(&parts, body).await?;
                if matches!(verdict, Verdict::ForwardThenDrop) {
                    return Err(NoAnswer("answer dropped"));
                }
                answer
            }
        };
        self.shared.lock().unwrap().seen[index].status = Some(answer.status().as_u16());
        Ok(answer)
    }

    fn verdict(&self, path: &str) -> Verdict {
        let mut shared = self.shared.lock().unwrap();
        for fault in shared.faults.iter_mut() {
            match fault {
                Fault::Blackhole => return Verdict::Hold,
                Fault::DropAnswer { suffix, remaining } if *remaining > 0 && path.ends_with(suffix.as_str()) => {
                    *remaining -= 1;
                    return Verdict::ForwardThenDrop;
                }
                Fault::Overloaded { suffix, until, retry_after_s }
                    if Instant::now() < *until && path.ends_with(suffix.as_str()) =>
                {
                    return Verdict::Overloaded(*retry_after_s);
                }
                _ => {}
            }
        }
        Verdict::Forward
    }

    async fn forward(
        &self,
        parts: &axum::http::request::Parts,
        body: bytes::Bytes,
    ) -> Result<hyper::Response<Body>, NoAnswer> {
        let url = format!("{}{}", self.upstream, parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
        let mut request = self.http.request(parts.method.clone(), url).body(body);
        for (name, value) in &parts.headers {
            if name != axum::http::header::HOST && name != axum::http::header::CONTENT_LENGTH {
                request = request.header(name, value);
            }
        }
        let answer = request.send().await.map_err(|_| NoAnswer("node unreachable"))?;
        let mut response = hyper::Response::builder().status(answer.status());
        for (name, value) in answer.headers() {
            if name == axum::http::header::CONTENT_LENGTH || name == axum::http::header::TRANSFER_ENCODING {
                continue;
            }
            if name.as_str() == LEADER_ADDR_HEADER {
                let mut addr = value.to_str().unwrap_or_default().to_string();
                for (node, proxy) in &self.rewrites {
                    addr = addr.replace(node.as_str(), proxy);
                }
                response = response.header(name, addr);
            } else {
                response = response.header(name, value);
            }
        }
        let body = answer.bytes().await.map_err(|_| NoAnswer("answer unreadable"))?;
        response.body(Body::from(body)).map_err(|_| NoAnswer("answer unusable"))
    }
}

fn overloaded(retry_after_s: u64) -> hyper::Response<Body> {
    let body = serde_json::json!({"error": {"code": "overloaded", "message": "the proxy says so"}});
    hyper::Response::builder()
        .status(503)
        .header("content-type", "application/json")
        .header("retry-after", retry_after_s.to_string())
        .body(Body::from(body.to_string()))
        .expect("a static answer")
}
