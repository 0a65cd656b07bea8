//! The classic single-instance Redis lock: `SET name value NX PX ttl` to
//! acquire, a compare-and-delete Lua script to release, so a client whose
//! lease ran out cannot delete the next holder's key. No fencing token.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::resp::{Reply, RespConnection};
use super::{drift_margin, random_value, AdapterError, BoxFuture, Grant, LockSession, LockSystem, TryAcquire};

/// How long a single Redis may take to answer before the call fails.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// Deletes KEYS[1] only while it still holds ARGV[1]: 1 if deleted, else 0.
const RELEASE_SCRIPT: &[u8] =
    b"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// `SET name value NX PX ttl_ms`, answered `+OK` when acquired and nil when
/// the key exists.
pub(super) fn set_nx_px<'a>(name: &'a str, value: &'a str, ttl_ms: &'a str) -> [&'a [u8]; 6] {
    [b"SET", name.as_bytes(), value.as_bytes(), b"NX", b"PX", ttl_ms.as_bytes()]
}

/// The compare-and-delete release of `name` held under `value`.
pub(super) fn release_if_ours<'a>(name: &'a str, value: &'a str) -> [&'a [u8]; 5] {
    [b"EVAL", RELEASE_SCRIPT, b"1", name.as_bytes(), value.as_bytes()]
}

/// Whether a `SET NX` reply says the key was set.
pub(super) fn acquired(reply: &Reply) -> Result<bool, AdapterError> {
    match reply {
        Reply::Simple(ok) if ok == "OK" => Ok(true),
        Reply::Bulk(None) => Ok(false),
        other => Err(AdapterError::Unexpected(format!("SET NX answered {other:?}"))),
    }
}

/// Whether a release script reply says the key was deleted.
pub(super) fn released(reply: &Reply) -> Result<bool, AdapterError> {
    match reply {
        Reply::Integer(deleted) => Ok(*deleted == 1),
        other => Err(AdapterError::Unexpected(format!("release script answered {other:?}"))),
    }
}

/// One Redis server.
pub struct RedisSystem {
    addr: SocketAddr,
}

impl RedisSystem {
    pub fn new(addr: SocketAddr) -> Self {
        RedisSystem { addr }
    }
}

impl LockSystem for RedisSystem {
    fn connect(&self) -> BoxFuture<'_, Result<Box<dyn LockSession>, AdapterError>> {
        Box::pin(async move {
            let connection = RespConnection::connect(self.addr).await?;
            Ok(Box::new(RedisSession { connection }) as Box<dyn LockSession>)
        })
    }

    /// One server, no consensus: no term.
    fn term(&self) -> BoxFuture<'_, Option<u64>> {
        Box::pin(async { None })
    }

    fn flood_target(&self) -> BoxFuture<'_, Option<SocketAddr>> {
        Box::pin(async move { Some(self.addr) })
    }
}

struct RedisSession {
    connection: RespConnection,
}

impl TryAcquire for RedisSession {
    fn try_acquire<'a>(
        &'a mut self,
        name: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Option<Grant>, AdapterError>> {
        Box::pin(async move {
            let value = random_value();
            let ttl_ms = ttl.as_millis().to_string();
            let sent = Instant::now();
            let reply = self.connection.command(&set_nx_px(name, &value, &ttl_ms), REPLY_TIMEOUT).await?;
            Ok(acquired(&reply)?.then(|| Grant {
                name: name.to_string(),
                token: None,
                anchor: sent,
                valid_until: sent + ttl - drift_margin(ttl),
                release_key: value,
                own_lease: None,
            }))
        })
    }

    fn try_release<'a>(&'a mut self, grant: &'a Grant) -> BoxFuture<'a, Result<bool, AdapterError>> {
        Box::pin(async move {
            let release = release_if_ours(&grant.name, &grant.release_key);
            released(&self.connection.command(&release, REPLY_TIMEOUT).await?)
        })
    }
}
