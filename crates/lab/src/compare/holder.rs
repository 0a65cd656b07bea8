//! The lock holder of `leasehold-lab bench --safety`: a process of its own (the
//! hidden `leasehold-lab safety-holder` subcommand), so the harness can SIGSTOP
//! it like a real client stalled by a GC pause or a swapped-out page.
//!
//! It opens one session on a system named by a [`SystemSpec`] and runs
//! cycles of acquire → `begin` write to the fenced and the unfenced resource
//! → hold → `end` writes → release, printing one JSON [`HolderEvent`] per
//! line on stdout for the harness. Times are µs on the machine's monotonic
//! clock (CLOCK_MONOTONIC, which every process shares), which the harness
//! maps onto its own [`HarnessClock`](crate::history::HarnessClock).
//!
//! The holder writes without re-checking its lease, as a client does whose
//! pause falls between its check and its write: that is the case fencing
//! exists for.

use std::fmt;
use std::io::Write;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{AdapterError, EtcdSystem, Grant, LeaseholdSystem, LockSystem, RedisSystem, RedlockSystem};
use crate::history::{FencedResource, OpKind, OpResult, Operation, Phase, WriteRequest};

/// Where a holder finds the lock service, on its command line:
/// `leasehold=http://a,http://b`, `redis=127.0.0.1:6379`,
/// `redlock=127.0.0.1:1,127.0.0.1:2,...`, `etcd=http://127.0.0.1:2379`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemSpec {
    Leasehold(Vec<String>),
    Redis(SocketAddr),
    Redlock(Vec<SocketAddr>),
    Etcd(String),
}

impl SystemSpec {
    /// The system's client, as the speed benchmark uses it; etcd with a
    /// lease per lock cycle, so a paused holder's lease runs out.
    pub fn system(&self, ttl: Duration) -> Result<Box<dyn LockSystem>, AdapterError> {
        Ok(match self {
            SystemSpec::Leasehold(endpoints) => Box::new(LeaseholdSystem::new(endpoints)?),
            SystemSpec::Redis(addr) => Box::new(RedisSystem::new(*addr)),
            SystemSpec::Redlock(addrs) => Box::new(RedlockSystem::new(addrs.clone())),
            SystemSpec::Etcd(url) => Box::new(EtcdSystem::new(url.clone(), ttl, false)),
        })
    }
}

impl fmt::Display for SystemSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SystemSpec::Leasehold(endpoints) => write!(f, "leasehold={}", endpoints.join(",")),
            SystemSpec::Redis(addr) => write!(f, "redis={addr}"),
            SystemSpec::Redlock(addrs) => {
                let addrs: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
                write!(f, "redlock={}", addrs.join(","))
            }
            SystemSpec::Etcd(url) => write!(f, "etcd={url}"),
        }
    }
}

impl FromStr for SystemSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, rest) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected KIND=ADDRESSES"))?;
        let addrs = || -> Result<Vec<SocketAddr>, String> {
            rest.split(',').map(|a| a.parse().map_err(|e| format!("{a:?}: {e}"))).collect()
        };
        match kind {
            "leasehold" => Ok(SystemSpec::Leasehold(rest.split(',').map(str::to_string).collect())),
            "redis" => Ok(SystemSpec::Redis(rest.parse().map_err(|e| format!("{rest:?}: {e}"))?)),
            "redlock" => Ok(SystemSpec::Redlock(addrs()?)),
            "etcd" => Ok(SystemSpec::Etcd(rest.to_string())),
            _ => Err(format!("{kind:?}: one of leasehold, redis, redlock, etcd")),
        }
    }
}

/// What a holder does.
#[derive(Debug, Clone)]
pub struct HolderOptions {
    pub system: SystemSpec,
    pub lock: String,
    /// This holder's name in the history and at the resources.
    pub client: String,
    pub ttl: Duration,
    /// How long an acquire may wait for the lock.
    pub wait: Duration,
    /// Time between the `begin` and the `end` writes.
    pub hold: Duration,
    pub cycles: u32,
    pub fenced_url: String,
    pub unfenced_url: String,
}

/// One line of a holder's stdout.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "event")]
pub enum HolderEvent {
    /// An acquire or release completed (times: monotonic µs).
    Op { op: Box<Operation> },
    /// Both `begin` writes were answered: the holder is in its critical
    /// section.
    Began,
    /// The holder finished its cycles.
    Done,
}

/// µs on CLOCK_MONOTONIC, the clock [`Instant`] reads on Linux.
pub fn monotonic_us() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always there");
    now.tv_sec() as u64 * 1_000_000 + now.tv_nsec() as u64 / 1_000
}

/// µs on CLOCK_MONOTONIC at `instant`.
fn monotonic_at(instant: Instant) -> u64 {
    let now = Instant::now();
    let now_us = monotonic_us();
    match now.checked_duration_since(instant) {
        Some(ago) => now_us.saturating_sub(ago.as_micros() as u64),
        None => now_us + instant.duration_since(now).as_micros() as u64,
    }
}

fn emit(event: &HolderEvent) {
    let mut out = std::io::stdout().lock();
    // The harness reads lines; a closed pipe means it is gone, and so may we be.
    let _ = writeln!(out, "{}", serde_json::to_string(event).expect("events serialize"));
    let _ = out.flush();
}

/// Runs the holder's cycles; errors of single steps are reported as
/// events and end the cycle, not the process.
pub async fn run(options: &HolderOptions) -> Result<(), AdapterError> {
    let system = options.system.system(options.ttl)?;
    let mut session = system.connect().await?;
    let http = crate::http_client();
    for cycle in 1..=options.cycles {
        let op = |kind, token, sent_us, result| {
            Box::new(Operation {
                kind,
                lock: options.lock.clone(),
                names: Vec::new(),
                session: None,
                client: options.client.clone(),
                request_id: None,
                token,
                key: None,
                holder: None,
                sent_us,
                received_us: monotonic_us(),
                result,
            })
        };
        let sent_us = monotonic_us();
        let grant = session.acquire(&options.lock, options.ttl, options.wait).await;
        let grant = match grant {
            Ok(grant) => grant,
            Err(e) => {
                let result = match e {
                    AdapterError::NotAcquired { .. } => OpResult::Refused { code: "not_acquired".into() },
                    other => OpResult::Unknown { reason: other.to_string() },
                };
                emit(&HolderEvent::Op { op: op(OpKind::AcquireWait, None, sent_us, result) });
                continue;
            }
        };
        let token = history_token(&grant, cycle);
        let valid_ms = grant.valid_until.saturating_duration_since(grant.anchor).as_millis() as u64;
        let granted = OpResult::Granted { token, ttl_ms: valid_ms };
        emit(&HolderEvent::Op { op: op(OpKind::AcquireWait, None, monotonic_at(grant.anchor), granted) });
        write_both(&http, options, &grant, token, Phase::Begin).await;
        emit(&HolderEvent::Began);
        tokio::time::sleep(options.hold).await;
        write_both(&http, options, &grant, token, Phase::End).await;
        let sent_us = monotonic_us();
        let result = match session.release(&grant).await {
            Ok(()) => OpResult::Released,
            Err(AdapterError::NotHeld { .. }) => OpResult::Refused { code: "not_held".into() },
            Err(e) => OpResult::Unknown { reason: e.to_string() },
        };
        emit(&HolderEvent::Op { op: op(OpKind::Release, Some(token), sent_us, result) });
    }
    emit(&HolderEvent::Done);
    Ok(())
}

/// The token the history knows the grant by: the system's fencing token, or
/// for systems without one (Redis, Redlock) the cycle number, so that each
/// of a client's grants is told apart.
fn history_token(grant: &Grant, cycle: u32) -> u64 {
    grant.token.unwrap_or(u64::from(cycle))
}

/// Writes `phase` to the fenced resource under the system's token (0 when
/// it has none: a store can fence only with what the lock service gives),
/// and to the unfenced one under the history token.
async fn write_both(http: &reqwest::Client, options: &HolderOptions, grant: &Grant, token: u64, phase: Phase) {
    let request = |token| WriteRequest {
        resource: options.lock.clone(),
        client: options.client.clone(),
        lock: options.lock.clone(),
        token,
        phase,
    };
    // A refused or failed write is in the resource's own log; the holder
    // carries on to its release either way.
    let _ = FencedResource::submit(http, &options.fenced_url, &request(grant.token.unwrap_or(0))).await;
    let _ = FencedResource::submit(http, &options.unfenced_url, &request(token)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    // A spec prints as it parses, so the harness can hand it to a holder.
    #[test]
    fn system_specs_round_trip() {
        for text in [
            "leasehold=http://127.0.0.1:1,http://127.0.0.1:2",
            "redis=127.0.0.1:6379",
            "redlock=127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
            "etcd=http://127.0.0.1:2379",
        ] {
            let spec: SystemSpec = text.parse().expect("parses");
            assert_eq!(spec.to_string(), text);
        }
        assert!("redis=nowhere".parse::<SystemSpec>().is_err());
        assert!("memcached=127.0.0.1:1".parse::<SystemSpec>().is_err());
    }
}
