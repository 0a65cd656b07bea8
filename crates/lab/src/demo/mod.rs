//! `leasehold demo payments`: money moved between accounts by worker
//! processes that lock the accounts with leasehold, while one worker is
//! paused (SIGSTOP) past its lease. With fencing tokens the bank refuses the
//! paused worker's late write and the total stays put; with `--no-fencing`
//! the late write overwrites newer balances and money appears or vanishes.
//!
//! - [`bank`] — the protected resource: an HTTP service standing in for a SQL
//!   database, which checks tokens per account (the coordinator runs it).
//! - [`worker`] — one worker process (`leasehold demo payments-worker`).
//! - [`payments`] — the coordinator: cluster, bank, workers, the fault, the
//!   progress lines and the result table.
//! - `processes` — the coordinator's handle on the worker processes:
//!   spawning, the line protocol on their pipes, stopping and reaping.
//!
//! The processes talk over pipes with a tiny line protocol: the coordinator
//! writes `pause` to a worker's stdin; that worker prints `holding ...` on
//! stdout once it holds its next two locks and has read the balances, then
//! waits until the coordinator writes `stopped` (sent once the SIGSTOP has
//! taken effect), so the pause lands exactly between read and write. At the
//! end every worker prints its counts as one JSON line ([`WorkerReport`]).

pub mod bank;
pub mod payments;
mod processes;
pub mod worker;

use std::io::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::local::LocalClusterError;
use leasehold_client::ClientError;

#[derive(Debug, Clone)]
pub struct PaymentsOptions {
    /// Worker processes moving money (at least 2: one is paused, the others
    /// take its expired locks).
    pub workers: usize,
    /// Accounts; fewer accounts make the paused worker's accounts more
    /// likely to change while it is stopped.
    pub accounts: usize,
    /// How long the workers run.
    pub seconds: u64,
    /// Lease ttl of every account lock (the cluster accepts 3s to 1h); the
    /// paused worker is stopped for twice this.
    pub ttl: Duration,
    /// Let the bank apply every write, whatever its token.
    pub no_fencing: bool,
    /// Use this cluster instead of starting a local 3-node one.
    pub endpoints: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Base URL of the bank, e.g. http://127.0.0.1:4000.
    pub bank: String,
    pub endpoints: Vec<String>,
    pub seconds: u64,
    pub ttl: Duration,
    pub worker_id: u32,
    /// Send no tokens to the bank.
    pub no_fencing: bool,
}

/// What a worker did, printed by it as one JSON line when it ends.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerReport {
    pub worker: u32,
    pub transfers_applied: u64,
    /// Transfers the bank refused because a token was below an account's fence.
    pub stale_writes_rejected: u64,
    /// Reads the bank refused for the same reason (the transfer was dropped).
    pub stale_reads_rejected: u64,
    /// Acquires that failed (wait timed out, cluster unavailable).
    pub acquire_failures: u64,
    /// Releases the cluster refused (the lease had already ended).
    pub releases_refused: u64,
    /// Bank requests that failed for another reason.
    pub errors: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("local cluster: {0}")]
    Cluster(#[from] LocalClusterError),
    #[error("leasehold: {0}")]
    Client(#[from] ClientError),
    #[error("bank: {0}")]
    Bank(#[from] bank::BankError),
    #[error("starting worker {worker}: {source}")]
    SpawnWorker { worker: u32, source: std::io::Error },
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("interrupted by {0}")]
    Interrupted(&'static str),
}

/// Writes one line to stdout and flushes it, so the reader at the other end
/// of a pipe sees it at once. A closed stdout (the reader is gone, or `|
/// head`) is no reason to panic as `println!` would.
pub(crate) fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// The lock that guards account `n`.
pub fn account_lock(account: usize) -> String {
    format!("account-{account}")
}
