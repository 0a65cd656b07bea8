//! The fenced resource: a small HTTP service standing in for the storage a
//! lock protects. Every write names the resource, the client, the lock and
//! the token it holds, and whether it opens or closes the client's critical
//! section. Every write is recorded with whether it was accepted and its
//! receive time on the harness's monotonic clock.
//!
//! - `POST /v1/write {"resource","client","lock","token","phase":"begin"|"end"}`
//!   → `200 {"accepted":true}`, or in fenced mode `409 {"error":{"code":
//!   "stale_token","message",..},"highest":N}` when `token` is below the
//!   highest token accepted for `resource`. Tokens equal to it pass: one
//!   holder writes several times under one token.
//! - `GET /v1/writes` → every write so far, in receive order.
//!
//! In unfenced mode everything is accepted, as a store that knows nothing of
//! tokens would; the checker then finds overlapping critical sections from
//! the recorded begin/end writes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::task::JoinHandle;

use super::HarnessClock;

#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    #[error("binding the resource to {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("resource request: {0}")]
    Request(#[from] reqwest::Error),
    #[error("resource answered {status}: {body}")]
    Answer { status: u16, body: String },
}

/// Whether the resource checks tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceMode {
    /// Refuses a token below the highest accepted for the resource.
    Fenced,
    /// Accepts everything.
    Unfenced,
}

/// Which end of a critical section a write is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Begin,
    End,
}

/// The body of `POST /v1/write`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteRequest {
    pub resource: String,
    pub client: String,
    pub lock: String,
    pub token: u64,
    pub phase: Phase,
}

/// One recorded write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceWrite {
    #[serde(flatten)]
    pub request: WriteRequest,
    pub accepted: bool,
    /// Receive time, µs on the harness clock.
    pub received_us: u64,
}

struct Store {
    mode: ResourceMode,
    clock: HarnessClock,
    /// Highest accepted token per resource.
    highest: HashMap<String, u64>,
    writes: Vec<ResourceWrite>,
}

type Shared = Arc<Mutex<Store>>;

/// A running resource; the server stops when this is dropped.
pub struct FencedResource {
    addr: SocketAddr,
    store: Shared,
    server: JoinHandle<()>,
}

impl FencedResource {
    /// Serves the resource on `bind` (e.g. `127.0.0.1:0`).
    pub async fn start(bind: SocketAddr, mode: ResourceMode, clock: HarnessClock) -> Result<Self, ResourceError> {
        let listener =
            tokio::net::TcpListener::bind(bind).await.map_err(|source| ResourceError::Bind { addr: bind, source })?;
        let addr = listener.local_addr().map_err(|source| ResourceError::Bind { addr: bind, source })?;
        let store = Arc::new(Mutex::new(Store { mode, clock, highest: HashMap::new(), writes: Vec::new() }));
        let app = Router::new()
            .route("/v1/write", post(write))
            .route("/v1/writes", get(writes))
            .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such endpoint".into()) })
            .with_state(store.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FencedResource { addr, store, server })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://addr`, the base of [`submit`](Self::submit)'s URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every write so far, in receive order.
    pub fn writes(&self) -> Vec<ResourceWrite> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner).writes.clone()
    }

    /// Sends `request` to the resource at `url`; `Ok(true)` when accepted,
    /// `Ok(false)` when refused as stale.
    pub async fn submit(http: &reqwest::Client, url: &str, request: &WriteRequest) -> Result<bool, ResourceError> {
        let reply = http.post(format!("{url}/v1/write")).json(request).send().await?;
        match reply.status() {
            StatusCode::OK => Ok(true),
            StatusCode::CONFLICT => Ok(false),
            status => {
                Err(ResourceError::Answer { status: status.as_u16(), body: reply.text().await.unwrap_or_default() })
            }
        }
    }
}

impl Drop for FencedResource {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn error(status: StatusCode, code: &str, message: String) -> Response {
    (status, Json(json!({ "error": { "code": code, "message": message } }))).into_response()
}

async fn write(State(store): State<Shared>, body: Bytes) -> Response {
    let request: WriteRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, "invalid_body", e.to_string()),
    };
    let mut store = store.lock().unwrap_or_else(PoisonError::into_inner);
    let received_us = store.clock.now_us();
    let highest = store.highest.get(&request.resource).copied();
    let accepted = store.mode == ResourceMode::Unfenced || highest.is_none_or(|h| request.token >= h);
    if accepted && highest.is_none_or(|h| request.token > h) {
        store.highest.insert(request.resource.clone(), request.token);
    }
    store.writes.push(ResourceWrite { request, accepted, received_us });
    if accepted {
        (StatusCode::OK, Json(json!({ "accepted": true }))).into_response()
    } else {
        let highest = highest.unwrap_or_default();
        let body = json!({
            "error": { "code": "stale_token", "message": format!("a write under token {highest} was accepted already") },
            "highest": highest,
        });
        (StatusCode::CONFLICT, Json(body)).into_response()
    }
}

async fn writes(State(store): State<Shared>) -> Json<Vec<ResourceWrite>> {
    Json(store.lock().unwrap_or_else(PoisonError::into_inner).writes.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(client: &str, token: u64, phase: Phase) -> WriteRequest {
        WriteRequest { resource: "r".into(), client: client.into(), lock: "l".into(), token, phase }
    }

    async fn started(mode: ResourceMode) -> FencedResource {
        FencedResource::start(SocketAddr::from(([127, 0, 0, 1], 0)), mode, HarnessClock::new()).await.expect("binds")
    }

    // The fenced mode refuses a token below the highest accepted, with 409,
    // passes equal tokens, and records every write.
    #[tokio::test]
    async fn fenced_mode_refuses_stale_tokens() {
        let resource = started(ResourceMode::Fenced).await;
        let http = crate::http_client();
        let url = resource.url();
        let submit = |r: WriteRequest| {
            let (http, url) = (http.clone(), url.clone());
            async move { FencedResource::submit(&http, &url, &r).await.expect("answers") }
        };
        assert!(submit(request("a", 5, Phase::Begin)).await);
        assert!(submit(request("b", 9, Phase::Begin)).await);
        assert!(!submit(request("a", 5, Phase::End)).await);
        assert!(submit(request("b", 9, Phase::End)).await);
        let accepted: Vec<bool> = resource.writes().iter().map(|w| w.accepted).collect();
        assert_eq!(accepted, vec![true, true, false, true]);
        let reply = http.post(format!("{url}/v1/write")).json(&request("a", 1, Phase::Begin)).send().await.unwrap();
        assert_eq!(reply.status(), StatusCode::CONFLICT);
        let body: serde_json::Value = reply.json().await.unwrap();
        assert_eq!((body["error"]["code"].as_str(), body["highest"].as_u64()), (Some("stale_token"), Some(9)));
    }

    // The unfenced mode accepts everything; bad input gets a JSON 400 and
    // is not recorded.
    #[tokio::test]
    async fn unfenced_mode_accepts_everything_and_bad_input_is_refused() {
        let resource = started(ResourceMode::Unfenced).await;
        let http = crate::http_client();
        for token in [9, 5] {
            assert!(FencedResource::submit(&http, &resource.url(), &request("a", token, Phase::Begin)).await.unwrap());
        }
        let reply = http.post(format!("{}/v1/write", resource.url())).body("{\"token\":-1}").send().await.unwrap();
        assert_eq!(reply.status(), StatusCode::BAD_REQUEST);
        let body: serde_json::Value = reply.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_body");
        assert_eq!(resource.writes().len(), 2);
    }
}
