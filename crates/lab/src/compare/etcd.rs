//! etcd's lock service through its v3 JSON gateway (keys base64):
//! `/v3/lease/grant`, `/v3/lock/lock` (waits in etcd's queue of keys under
//! the lock name), `/v3/lock/unlock`, `/v3/lease/revoke`. Two ways to use it:
//!
//! - a lease per cycle: grant → lock → unlock → revoke, what a client does
//!   that opens a `concurrency.Session` per critical section;
//! - one lease per client session, kept alive every ttl/3 by the session:
//!   lock → unlock per cycle, what a long-lived etcd client does.
//!
//! The lock response's revision is the grant's fencing token: revisions only
//! grow, and the next holder's lock answers after the previous key's delete.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use leasehold_client::http::JsonClient;
use serde_json::{json, Value};

use super::{drift_margin, AdapterError, BoxFuture, Grant, LockSession, LockSystem};

/// How long one gateway request may take, on top of a lock wait.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// An etcd cluster, reached at one member's client URL.
pub struct EtcdSystem {
    url: String,
    ttl: Duration,
    session_lease: bool,
}

impl EtcdSystem {
    /// With `session_lease`, each session grants one lease of `ttl` and
    /// keeps it alive; otherwise each acquire grants its own.
    pub fn new(url: String, ttl: Duration, session_lease: bool) -> Self {
        EtcdSystem { url, ttl, session_lease }
    }
}

impl LockSystem for EtcdSystem {
    fn connect(&self) -> BoxFuture<'_, Result<Box<dyn LockSession>, AdapterError>> {
        Box::pin(async move {
            let gateway = Gateway::new(&self.url)?;
            let session = match self.session_lease {
                false => None,
                true => Some(SessionLease::start(gateway.clone(), self.ttl).await?),
            };
            Ok(Box::new(EtcdSession { gateway, session }) as Box<dyn LockSession>)
        })
    }

    /// The member the sessions talk to.
    fn flood_target(&self) -> BoxFuture<'_, Option<std::net::SocketAddr>> {
        Box::pin(async move { self.url.trim_start_matches("http://").trim_end_matches('/').parse().ok() })
    }

    /// The Raft term of the member the sessions talk to.
    fn term(&self) -> BoxFuture<'_, Option<u64>> {
        Box::pin(async move {
            let gateway = Gateway::new(&self.url).ok()?;
            let status = gateway.call("/v3/maintenance/status", json!({}), Duration::ZERO).await.ok()?;
            int64(&status["header"]["raft_term"]).ok().map(|t| t as u64)
        })
    }
}

/// One client's keep-alive connections to the gateway: plain HTTP/1.1
/// through the same lean client the leasehold adapter uses, so both
/// systems' clients cost alike per request.
#[derive(Clone)]
pub(super) struct Gateway {
    http: Arc<JsonClient>,
}

impl Gateway {
    pub(super) fn new(url: &str) -> Result<Gateway, AdapterError> {
        let http = JsonClient::new(url).ok_or_else(|| AdapterError::Etcd(format!("not an http endpoint: {url}")))?;
        Ok(Gateway { http: Arc::new(http) })
    }

    /// POSTs `body` to `path`; a non-2xx answer is an error with etcd's message.
    pub(super) async fn call(&self, path: &str, body: Value, wait: Duration) -> Result<Value, AdapterError> {
        let failed = |e: &dyn std::fmt::Display| AdapterError::Etcd(format!("{path}: {e}"));
        let body = serde_json::to_vec(&body).map_err(|e| failed(&e))?;
        let reply = tokio::time::timeout(REQUEST_TIMEOUT + wait, self.http.post(path, &body))
            .await
            .map_err(|_| failed(&"no answer in time"))?
            .map_err(|e| failed(&e))?;
        let body: Value = serde_json::from_slice(&reply.body).map_err(|e| failed(&e))?;
        if !(200..300).contains(&reply.status) {
            return Err(failed(&format!("{} {}", reply.status, body["message"])));
        }
        Ok(body)
    }

    /// Grants a lease of `ttl` (whole seconds, at least 1); returns its id
    /// and the ttl etcd granted (it raises ttls below its minimum).
    async fn grant(&self, ttl: Duration) -> Result<(i64, Duration), AdapterError> {
        let seconds = ttl.as_millis().div_ceil(1000).max(1) as u64;
        let reply = self.call("/v3/lease/grant", json!({ "TTL": seconds }), Duration::ZERO).await?;
        Ok((int64(&reply["ID"])?, Duration::from_secs(int64(&reply["TTL"])? as u64)))
    }

    async fn revoke(&self, lease: i64) -> Result<(), AdapterError> {
        self.call("/v3/lease/revoke", json!({ "ID": lease.to_string() }), Duration::ZERO).await.map(drop)
    }
}

/// etcd's JSON gateway writes int64 fields as strings.
pub(super) fn int64(field: &Value) -> Result<i64, AdapterError> {
    field
        .as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| field.as_i64())
        .ok_or_else(|| AdapterError::Unexpected(format!("etcd int64 field {field}")))
}

/// A session's lease and the send time of the request that last restarted
/// it (grant or keep-alive): the anchor of every lock held under it.
pub(super) struct SessionLease {
    pub(super) id: i64,
    pub(super) ttl: Duration,
    anchor: Arc<Mutex<Instant>>,
    keepalive: tokio::task::JoinHandle<()>,
}

impl SessionLease {
    pub(super) async fn start(gateway: Gateway, ttl: Duration) -> Result<SessionLease, AdapterError> {
        let sent = Instant::now();
        let (id, ttl) = gateway.grant(ttl).await?;
        let anchor = Arc::new(Mutex::new(sent));
        let renewed = anchor.clone();
        // Like etcd's own clients, renew at a third of the ttl.
        let keepalive = tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                let sent = Instant::now();
                let body = json!({ "ID": id.to_string() });
                if let Ok(reply) = gateway.call("/v3/lease/keepalive", body, Duration::ZERO).await {
                    if int64(&reply["result"]["TTL"]).is_ok_and(|t| t > 0) {
                        *renewed.lock().expect("anchor lock") = sent;
                    }
                }
            }
        });
        Ok(SessionLease { id, ttl, anchor, keepalive })
    }
}

impl Drop for SessionLease {
    fn drop(&mut self) {
        // The lease then runs out within its ttl on its own.
        self.keepalive.abort();
    }
}

struct EtcdSession {
    gateway: Gateway,
    session: Option<SessionLease>,
}

impl LockSession for EtcdSession {
    fn acquire<'a>(
        &'a mut self,
        name: &'a str,
        ttl: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Grant, AdapterError>> {
        Box::pin(async move {
            let (lease, anchor, ttl, own_lease) = match &self.session {
                Some(s) => (s.id, *s.anchor.lock().expect("anchor lock"), s.ttl, None),
                None => {
                    let sent = Instant::now();
                    let (id, granted) = self.gateway.grant(ttl).await?;
                    (id, sent, granted, Some(id))
                }
            };
            let body = json!({ "name": STANDARD.encode(name), "lease": lease.to_string() });
            let locked = match self.gateway.call("/v3/lock/lock", body, wait).await {
                Ok(reply) => reply,
                Err(e) => {
                    if let Some(id) = own_lease {
                        let _ = self.gateway.revoke(id).await;
                    }
                    return Err(e);
                }
            };
            let key = locked["key"].as_str().ok_or_else(|| AdapterError::Unexpected(format!("lock: {locked}")))?;
            Ok(Grant {
                name: name.to_string(),
                token: Some(int64(&locked["header"]["revision"])? as u64),
                anchor,
                valid_until: anchor + ttl - drift_margin(ttl),
                release_key: key.to_string(),
                own_lease,
            })
        })
    }

    fn release<'a>(&'a mut self, grant: &'a Grant) -> BoxFuture<'a, Result<(), AdapterError>> {
        Box::pin(async move {
            self.gateway.call("/v3/lock/unlock", json!({ "key": grant.release_key }), Duration::ZERO).await?;
            match grant.own_lease {
                Some(id) => self.gateway.revoke(id).await,
                None => Ok(()),
            }
        })
    }
}
