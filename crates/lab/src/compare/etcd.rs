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
//!
//! Semaphores: etcd has none (its `concurrency` package offers a Mutex and
//! an election, no semaphore), so a permit is taken by the usual recipe, the
//! "lowest N sequence nodes" scheme Curator's InterProcessSemaphoreV2 runs
//! on ZooKeeper. Each client puts a key of its own under `<name>/` with its
//! lease (`/v3/kv/put`); the key's create revision is its place in line.
//! It ranges `<name>/` sorted by create revision (`/v3/kv/range`) and holds
//! a permit once its key is among the first `limit`; until then it waits
//! and ranges again. It releases by deleting its key (`/v3/kv/deleterange`);
//! a crashed holder's key goes when its lease ends. The permit's fencing
//! token is the revision of the range that found it among the first
//! `limit`, as a lock's is the revision its lock answered at.
//!
//! A waiter polls rather than watches: the gateway's `/v3/watch` answers
//! with a stream that never ends, which the lean HTTP client below cannot
//! read, and one watch per waiter on the whole prefix would wake every
//! waiter at every release anyway. It polls with the back-off Redis and
//! Redlock clients wait with (`Retry`: 1 ms doubling to 50 ms, jittered).
//! The polls are serializable ranges, which the member answers from its own
//! state without a Raft round. That is safe: keys ahead of ours have lower
//! create revisions, so every one of them alive now was alive in any
//! earlier state that has our key, and an older state can only place our
//! key further back, never forward into the first `limit`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use leasehold_client::http::JsonClient;
use serde_json::{json, Value};

use super::{drift_margin, AdapterError, BoxFuture, Grant, LockSession, LockSystem, Retry};

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

    /// By the recipe of the module comment.
    fn semaphores(&self) -> bool {
        true
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

/// The lease one grant lives by.
struct GrantLease {
    id: i64,
    /// The send time of the request that last started it.
    anchor: Instant,
    ttl: Duration,
    /// Set when the lease is this grant's alone, to revoke on release.
    own: Option<i64>,
}

impl EtcdSession {
    /// The session's lease, or else a new lease of `ttl` for one grant.
    async fn lease(&self, ttl: Duration) -> Result<GrantLease, AdapterError> {
        Ok(match &self.session {
            Some(s) => GrantLease { id: s.id, anchor: *s.anchor.lock().expect("anchor lock"), ttl: s.ttl, own: None },
            None => {
                let sent = Instant::now();
                let (id, granted) = self.gateway.grant(ttl).await?;
                GrantLease { id, anchor: sent, ttl: granted, own: Some(id) }
            }
        })
    }

    /// The grant of `name` under `lease` when `taken` gives its key and
    /// revision; when it failed, the grant's own lease is revoked, so
    /// nothing it made outlives the attempt.
    async fn grant(
        &self,
        name: &str,
        lease: GrantLease,
        taken: Result<(String, i64), AdapterError>,
    ) -> Result<Grant, AdapterError> {
        let (key, revision) = match taken {
            Ok(taken) => taken,
            Err(e) => {
                if let Some(id) = lease.own {
                    let _ = self.gateway.revoke(id).await;
                }
                return Err(e);
            }
        };
        Ok(Grant {
            name: name.to_string(),
            token: Some(revision as u64),
            anchor: lease.anchor,
            valid_until: lease.anchor + lease.ttl - drift_margin(lease.ttl),
            release_key: key,
            own_lease: lease.own,
        })
    }

    /// Deletes the grant's key through `path` (which takes `{"key": ...}`),
    /// then revokes the grant's own lease.
    async fn delete(&self, path: &str, grant: &Grant) -> Result<(), AdapterError> {
        self.gateway.call(path, json!({ "key": grant.release_key }), Duration::ZERO).await?;
        match grant.own_lease {
            Some(id) => self.gateway.revoke(id).await,
            None => Ok(()),
        }
    }

    /// The recipe's acquire (module comment): puts this client's key under
    /// `name/` with `lease`, then waits until it is among the first `limit`.
    /// Returns the key and the revision it was found there at.
    async fn take_permit(
        &self,
        name: &str,
        limit: u32,
        lease: i64,
        wait: Duration,
    ) -> Result<(String, i64), AdapterError> {
        // Named after the lease, as etcd's Mutex names its key: a session
        // holds at most one permit at a time, and a lease per cycle is new.
        let key = STANDARD.encode(format!("{name}/{lease:x}"));
        let put = json!({ "key": key, "lease": lease.to_string() });
        self.gateway.call("/v3/kv/put", put, Duration::ZERO).await?;
        match self.wait_in_line(name, &key, limit, wait).await {
            Ok(revision) => Ok((key, revision)),
            Err(e) => {
                // Out of line: under a session lease the key would
                // otherwise come to hold a permit nobody releases.
                let _ = self.gateway.call("/v3/kv/deleterange", json!({ "key": key }), Duration::ZERO).await;
                Err(e)
            }
        }
    }

    /// Ranges `name/` until `key` is among its first `limit` keys; the
    /// revision of that range.
    async fn wait_in_line(&self, name: &str, key: &str, limit: u32, wait: Duration) -> Result<i64, AdapterError> {
        // Every key under `name/` sorts from `name/` up to `name0`: '0' follows '/'.
        let line = json!({
            "key": STANDARD.encode(format!("{name}/")),
            "range_end": STANDARD.encode(format!("{name}0")),
            "sort_order": "ASCEND",
            "sort_target": "CREATE",
            "keys_only": true,
            "serializable": true,
        });
        let mut retry = Retry::within(wait);
        loop {
            let reply = self.gateway.call("/v3/kv/range", line.clone(), Duration::ZERO).await?;
            let keys: Vec<&str> =
                reply["kvs"].as_array().into_iter().flatten().filter_map(|kv| kv["key"].as_str()).collect();
            match place(&keys, key, limit as usize) {
                Place::Holds => return int64(&reply["header"]["revision"]),
                Place::Waits => retry.pause(name).await?,
                Place::Gone => {
                    return Err(AdapterError::Etcd(format!("{name}: the key's lease ended before a permit came")))
                }
            }
        }
    }
}

/// Where a client's key stands in a semaphore's line (the keys under its
/// prefix in create-revision order).
#[derive(Debug, PartialEq, Eq)]
enum Place {
    /// Among the first `limit`: it holds a permit.
    Holds,
    /// Further back: it waits for keys ahead of it to go.
    Waits,
    /// Not in line: its lease ended while it waited.
    Gone,
}

fn place(line: &[&str], key: &str, limit: usize) -> Place {
    match line.iter().position(|k| *k == key) {
        Some(rank) if rank < limit => Place::Holds,
        Some(_) => Place::Waits,
        None => Place::Gone,
    }
}

impl LockSession for EtcdSession {
    fn acquire<'a>(
        &'a mut self,
        name: &'a str,
        ttl: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Grant, AdapterError>> {
        Box::pin(async move {
            let lease = self.lease(ttl).await?;
            let body = json!({ "name": STANDARD.encode(name), "lease": lease.id.to_string() });
            let taken = async {
                let locked = self.gateway.call("/v3/lock/lock", body, wait).await?;
                let key = locked["key"].as_str().ok_or_else(|| AdapterError::Unexpected(format!("lock: {locked}")))?;
                Ok::<_, AdapterError>((key.to_string(), int64(&locked["header"]["revision"])?))
            };
            let taken = taken.await;
            self.grant(name, lease, taken).await
        })
    }

    fn release<'a>(&'a mut self, grant: &'a Grant) -> BoxFuture<'a, Result<(), AdapterError>> {
        Box::pin(self.delete("/v3/lock/unlock", grant))
    }

    fn acquire_permit<'a>(
        &'a mut self,
        name: &'a str,
        limit: u32,
        ttl: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Grant, AdapterError>> {
        Box::pin(async move {
            let lease = self.lease(ttl).await?;
            let taken = self.take_permit(name, limit, lease.id, wait).await;
            self.grant(name, lease, taken).await
        })
    }

    fn release_permit<'a>(&'a mut self, grant: &'a Grant) -> BoxFuture<'a, Result<(), AdapterError>> {
        Box::pin(self.delete("/v3/kv/deleterange", grant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A key holds a permit at ranks 0 to limit − 1 of the line, waits from
    // rank limit on, and is gone when not in line at all.
    #[test]
    fn a_key_holds_among_the_first_limit() {
        let line: Vec<String> = (0..64).map(|i| format!("k{i}")).collect();
        let line: Vec<&str> = line.iter().map(String::as_str).collect();
        assert_eq!(place(&line, "k0", 8), Place::Holds);
        assert_eq!(place(&line, "k7", 8), Place::Holds);
        assert_eq!(place(&line, "k8", 8), Place::Waits);
        assert_eq!(place(&line, "k63", 8), Place::Waits);
        assert_eq!(place(&line, "k64", 8), Place::Gone);
        assert_eq!(place(&[], "k0", 8), Place::Gone);
        // Deletes ahead move a key up: k8 holds once any one key before it goes.
        let after_a_release: Vec<&str> = line.iter().copied().filter(|k| *k != "k3").collect();
        assert_eq!(place(&after_a_release, "k8", 8), Place::Holds);
    }
}
