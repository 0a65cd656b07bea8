//! `leasehold-lab bench --safety`: the same lock cycle for every system, under
//! the faults that break lease locks, judged by one checker.
//!
//! Each (system, fault) gets fresh servers, a fenced and an unfenced
//! [`FencedResource`](crate::history::FencedResource), and two holder processes ([`holder`](super::holder)):
//! holder `A` acquires and enters its critical section, the fault strikes,
//! then holder `B` acquires the same lock, and both finish their writes and
//! release. The faults:
//!
//! - [`FaultKind::PausedClient`] — A is SIGSTOPped for 1.5 × ttl inside its
//!   section, B acquires once A's lease runs out, A is resumed and writes.
//! - [`FaultKind::ClockForward`] — the wall clock jumps 1 h forward (libfaketime,
//!   `DONT_FAKE_MONOTONIC=1`, read from a file so the running servers see
//!   the jump) on the single Redis, on one of Redlock's five, and on every
//!   leasehold node, while A holds the lock.
//! - [`FaultKind::KillLeader`] — Redis with an async replica: replication is
//!   cut (replica SIGSTOPped, its link killed by `CLIENT KILL TYPE replica`)
//!   before A acquires on the master; the master is killed -9 right after
//!   A's grant, the replica resumed and promoted (`REPLICAOF NO ONE`), and B
//!   acquires there. For leasehold: kill -9 of the leader right after A's
//!   grant.
//! - [`FaultKind::PauseLeader`] — leasehold's leader SIGSTOPped for longer
//!   than the election timeout while A holds the lock, then resumed.
//! - [`FaultKind::KillFollower`] — Kleppmann's Redlock case ("How to do
//!   distributed locking", 2016): A reaches only Redis A, B, C of the five
//!   (D and E are black holes on its side of a partition) and gets the lock
//!   on that majority; C is killed -9 and restarted without persistence
//!   (`--save "" --appendonly no`) while A holds; B then asks all five and
//!   gets C, D, E — a majority too. For leasehold the same shape: a node of
//!   the majority that committed A's grant (a follower) is killed -9 and
//!   restarted while A holds, then B asks.
//!
//! The faults are the lab's one vocabulary ([`FaultKind`]), the same the
//! fault suite injects. The counts all come from the history checker:
//! double grants ([`history::check`]'s overlapping grant windows),
//! overlapping critical sections at the unfenced resource (also
//! [`history::check`]'s), and [`history::check_hand_over`]'s writes
//! accepted under a superseded grant and acknowledged grants taken while
//! still valid.

mod report;
mod scenarios;

use std::path::PathBuf;
use std::time::Duration;

pub use self::report::{SafetyReport, SafetyRow};
use self::scenarios::Scenario;
use super::report::Machine;
use super::servers::{self, find_binary, ServerError};
use super::SystemKind;
use crate::fault::FaultKind;
use crate::history;
use leasehold_local::LocalClusterError;

/// The faults of the safety run, from the lab's one fault vocabulary, in
/// the report's order.
pub const FAULTS: [FaultKind; 5] = [
    FaultKind::PausedClient,
    FaultKind::ClockForward,
    FaultKind::KillLeader,
    FaultKind::PauseLeader,
    FaultKind::KillFollower,
];

/// What a fault does in the safety run: the report's heading for it.
pub fn title(fault: FaultKind) -> &'static str {
    match fault {
        FaultKind::PausedClient => "(a) holder paused (SIGSTOP) longer than the ttl",
        FaultKind::ClockForward => "(b) wall clock jumps 1 h forward",
        FaultKind::KillLeader => "(c) kill -9 of the master / leader right after an acknowledged grant",
        FaultKind::PauseLeader => "(d) leader paused (SIGSTOP) longer than the election timeout",
        FaultKind::KillFollower => {
            "(e) Kleppmann's Redlock case: a member of A's majority restarts while A holds (Redis: without persistence)"
        }
        other => other.label(),
    }
}

/// Whether the safety run injects `fault` into `kind` (the others are not run).
pub fn applies(fault: FaultKind, kind: SystemKind) -> bool {
    match fault {
        FaultKind::PausedClient => true,
        FaultKind::ClockForward => {
            matches!(kind, SystemKind::Leasehold { .. } | SystemKind::Redis | SystemKind::Redlock)
        }
        FaultKind::KillLeader => matches!(kind, SystemKind::Leasehold { .. } | SystemKind::Redis),
        FaultKind::PauseLeader => matches!(kind, SystemKind::Leasehold { .. }),
        // The case is about a majority of independent instances: the
        // single Redis and etcd have no shape to match it.
        FaultKind::KillFollower => matches!(kind, SystemKind::Leasehold { .. } | SystemKind::Redlock),
        _ => false,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SafetyError {
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("local leasehold cluster: {0}")]
    Cluster(#[from] LocalClusterError),
    #[error(transparent)]
    Resource(#[from] history::ResourceError),
    #[error("redis: {0}")]
    Redis(#[from] super::resp::RespError),
    #[error("holder {client}: {what}")]
    Holder { client: String, what: String },
    #[error("{0:?} is not one of the safety run's faults")]
    NotASafetyFault(FaultKind),
    #[error("{0} did not finish within its bound")]
    Timeout(String),
    #[error("results folder: {0}")]
    Io(#[from] std::io::Error),
}

/// What to run.
pub struct SafetyOptions {
    /// Systems (leasehold-N, redis, redlock, etcd; the others are the same
    /// servers under other settings and are left out).
    pub systems: Vec<SystemKind>,
    /// The `leasehold` binary, for the nodes.
    pub binary: PathBuf,
    /// The `leasehold-lab` binary, for the holder processes (its hidden
    /// `safety-holder` command).
    pub holder_binary: PathBuf,
    /// The lock's ttl for every system (etcd rounds it up to whole seconds
    /// and to its minimum).
    pub ttl: Duration,
    /// Results folder: safety.json, safety.md, and a section of README.md.
    pub out: PathBuf,
    pub command: String,
}

/// What `bench --safety` runs without `--systems`: one of each kind of
/// server.
pub const DEFAULT_SYSTEMS: [SystemKind; 4] =
    [SystemKind::leasehold(3), SystemKind::Redis, SystemKind::Redlock, SystemKind::Etcd];

/// Bound on one (system, fault): server start and the holders' waits,
/// pauses and holds, all a few ttls at most.
fn scenario_bound(ttl: Duration) -> Duration {
    servers::START_BOUND * 2 + ttl * 12
}

/// Runs every applicable (system, fault), prints progress to stderr, and
/// writes safety.json, safety.md and the README section into `options.out`.
pub async fn run(options: &SafetyOptions) -> Result<SafetyReport, SafetyError> {
    std::fs::create_dir_all(&options.out)?;
    let mut report = SafetyReport {
        command: options.command.clone(),
        machine: Machine::probe(),
        ttl_ms: options.ttl.as_millis() as u64,
        rows: Vec::new(),
        skipped: Vec::new(),
    };
    let mut systems: Vec<SystemKind> = Vec::new();
    for kind in &options.systems {
        let kind = match kind {
            SystemKind::EtcdSession => SystemKind::Etcd,
            SystemKind::RedisAof => continue,
            other => *other,
        };
        if !systems.contains(&kind) {
            systems.push(kind);
        }
    }
    for kind in systems {
        if let Err(why) = installed(kind) {
            eprintln!("bench: {why}");
            report.skipped.push((kind.to_string(), why));
            continue;
        }
        for fault in FAULTS.into_iter().filter(|f| applies(*f, kind)) {
            eprintln!("bench: safety, {kind}, {} ...", title(fault));
            let dir = options.out.join("servers").join(format!("{kind}-{}", fault.name()));
            let scenario = Scenario { kind, fault, options, dir: &dir };
            // A scenario that fails is reported as not run, with why, and
            // the others go on; its servers and holders die with it.
            let bound = scenario_bound(options.ttl);
            let row = match tokio::time::timeout(bound, scenario.run()).await {
                Ok(Ok(row)) => row,
                Ok(Err(e)) => scenario.not_run(format!("failed: {e}")),
                Err(_) => scenario.not_run(format!("failed: not done within {bound:?}")),
            };
            eprintln!(
                "bench:   {} grants, {} double, {} superseded writes accepted, {} overlapping sections, {} taken while valid: {}",
                row.grants,
                row.double_grants,
                row.superseded_writes_accepted,
                row.overlapping_sections,
                row.grants_taken_while_valid,
                row.note
            );
            report.rows.push(row);
        }
    }
    let servers = options.out.join("servers");
    if servers.exists() {
        std::fs::remove_dir_all(servers)?;
    }
    report.machine.load_at_end = Machine::probe().load_at_start;
    report.write(&options.out)?;
    eprintln!("bench: safety results in {}", options.out.display());
    Ok(report)
}

/// Ok when `kind`'s server is installed, else why not and how to fix it.
fn installed(kind: SystemKind) -> Result<(), String> {
    let found = match kind {
        SystemKind::Leasehold { .. } => Ok(PathBuf::new()),
        SystemKind::Etcd | SystemKind::EtcdSession => find_binary("etcd", "etcd-server"),
        _ => find_binary("redis-server", "redis-server"),
    };
    found.map(drop).map_err(|e| match e {
        ServerError::Missing { binary, package } => {
            format!("{binary} not found; install it with `apt-get install {package}` (skipping only {kind})")
        }
        other => other.to_string(),
    })
}
