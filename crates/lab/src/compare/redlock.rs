//! Redlock as its description gives it: the same `SET name value NX PX ttl`
//! sent to every one of N independent Redis instances at once, acquired when
//! a majority said yes and time is left: validity = ttl − elapsed − drift,
//! drift = ttl × 1 % + 2 ms. A failed attempt, and every release, runs the
//! compare-and-delete script on all instances. No fencing token.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::redis::{acquired, release_if_ours, released, set_nx_px};
use super::resp::{Reply, RespConnection, RespError};
use super::{drift_margin, random_value, AdapterError, BoxFuture, Grant, LockSession, LockSystem, TryAcquire};

/// Independent Redis instances.
pub struct RedlockSystem {
    addrs: Vec<SocketAddr>,
}

impl RedlockSystem {
    pub fn new(addrs: Vec<SocketAddr>) -> Self {
        RedlockSystem { addrs }
    }
}

impl LockSystem for RedlockSystem {
    fn connect(&self) -> BoxFuture<'_, Result<Box<dyn LockSession>, AdapterError>> {
        Box::pin(async move {
            let mut instances = Vec::with_capacity(self.addrs.len());
            for addr in &self.addrs {
                instances.push(RespConnection::connect(*addr).await?);
            }
            Ok(Box::new(RedlockSession { instances }) as Box<dyn LockSession>)
        })
    }

    /// Independent instances, no consensus: no term.
    fn term(&self) -> BoxFuture<'_, Option<u64>> {
        Box::pin(async { None })
    }

    /// The first instance: every acquire needs a majority, so it is in
    /// every cycle's path.
    fn flood_target(&self) -> BoxFuture<'_, Option<SocketAddr>> {
        Box::pin(async move { self.addrs.first().copied() })
    }
}

struct RedlockSession {
    instances: Vec<RespConnection>,
}

/// How long one instance may take to answer: small against the ttl, so a
/// stopped instance costs an attempt little of its validity.
fn instance_timeout(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

impl RedlockSession {
    fn quorum(&self) -> usize {
        self.instances.len() / 2 + 1
    }

    /// Sends `command` to every instance before reading any reply (the
    /// requests are in flight together), then collects the replies; an
    /// instance that fails or is late counts as a no.
    async fn round(&mut self, command: &[&[u8]], timeout: Duration) -> Vec<Result<Reply, RespError>> {
        let mut sent = Vec::with_capacity(self.instances.len());
        for instance in &mut self.instances {
            sent.push(instance.send(command).await);
        }
        let mut replies = Vec::with_capacity(self.instances.len());
        for (instance, sent) in self.instances.iter_mut().zip(sent) {
            replies.push(match sent {
                Ok(()) => instance.read_reply(timeout).await,
                Err(e) => Err(e),
            });
        }
        replies
    }

    /// Compare-and-delete on every instance; how many deleted the key.
    async fn release_all(&mut self, name: &str, value: &str, timeout: Duration) -> usize {
        let replies = self.round(&release_if_ours(name, value), timeout).await;
        replies.iter().filter(|r| r.as_ref().ok().is_some_and(|reply| released(reply).unwrap_or(false))).count()
    }
}

impl TryAcquire for RedlockSession {
    fn try_acquire<'a>(
        &'a mut self,
        name: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Option<Grant>, AdapterError>> {
        Box::pin(async move {
            let value = random_value();
            let ttl_ms = ttl.as_millis().to_string();
            let timeout = instance_timeout(ttl);
            let started = Instant::now();
            let replies = self.round(&set_nx_px(name, &value, &ttl_ms), timeout).await;
            let mut votes = 0;
            for reply in replies.iter().flatten() {
                votes += usize::from(acquired(reply)?);
            }
            let elapsed = started.elapsed();
            let validity = ttl.checked_sub(elapsed + drift_margin(ttl));
            if votes >= self.quorum() && validity.is_some_and(|v| !v.is_zero()) {
                return Ok(Some(Grant {
                    name: name.to_string(),
                    token: None,
                    anchor: started,
                    valid_until: started + elapsed + validity.unwrap_or_default(),
                    release_key: value,
                    own_lease: None,
                }));
            }
            // A minority of keys, or no validity left: undo them all.
            self.release_all(name, &value, timeout).await;
            Ok(None)
        })
    }

    /// Released when a majority of instances still had the key.
    fn try_release<'a>(&'a mut self, grant: &'a Grant) -> BoxFuture<'a, Result<bool, AdapterError>> {
        Box::pin(async move {
            let ttl = grant.valid_until.saturating_duration_since(grant.anchor);
            Ok(self.release_all(&grant.name, &grant.release_key, instance_timeout(ttl)).await >= self.quorum())
        })
    }
}
