//! `leasehold-lab demo payments`: money moved between accounts of a real
//! PostgreSQL database by worker processes that lock the accounts with
//! leasehold, while one worker is paused (SIGSTOP) past its lease. With
//! fencing tokens PostgreSQL itself refuses the paused worker's late
//! transaction (its `WHERE fence <= $token` touches no row) and the total
//! stays put; with `--no-fencing` the late write overwrites newer balances
//! and money appears or vanishes.
//!
//! - [`postgres`] — the throwaway PostgreSQL server the demo starts (unless
//!   given `--postgres URL`).
//! - [`ledger`] — the tables, the statements the workers run, the
//!   coordinator's queries.
//! - [`worker`] — one worker process (`leasehold-lab demo payments-worker`).
//! - [`payments`] — the coordinator: cluster, database, workers, the fault,
//!   the progress lines.
//! - [`report`] — the result table, the latency figures, the timeline SVG.
//! - `processes` — the coordinator's handle on the worker processes:
//!   spawning, the line protocol on their pipes, stopping and reaping.
//!
//! The processes talk over pipes with a tiny line protocol: the coordinator
//! writes `pause` to a worker's stdin; that worker prints `holding ...` on
//! stdout once it holds its next two locks and has read the balances, then
//! waits until the coordinator writes `stopped` (sent once the SIGSTOP has
//! taken effect), so the pause lands exactly between read and write. At the
//! end every worker prints its counts as one JSON line ([`WorkerReport`]).

pub mod ledger;
pub mod payments;
pub mod postgres;
mod processes;
pub mod report;
pub mod worker;

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use leasehold_client::ClientError;
use leasehold_local::LocalClusterError;

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
    /// Drop the fence predicate (and the fence raise) from the statements.
    pub no_fencing: bool,
    /// Use this cluster instead of starting a local 3-node one.
    pub endpoints: Vec<String>,
    /// Use this database (`postgresql://user:password@host:port/db`, no TLS)
    /// instead of starting a PostgreSQL server; the demo's tables live in a
    /// schema of its own, dropped at the end.
    pub postgres: Option<String>,
    /// Where the report (Markdown, JSON, timeline SVG) goes; a new temporary
    /// folder when not given.
    pub out: Option<PathBuf>,
    /// The command line as typed, for the report.
    pub command: String,
}

#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The database, `postgresql://user:password@host:port/db`.
    pub postgres: String,
    /// The demo's schema in it.
    pub schema: String,
    pub endpoints: Vec<String>,
    pub seconds: u64,
    pub ttl: Duration,
    pub worker_id: u32,
    /// Run the statements without the fence predicate.
    pub no_fencing: bool,
}

/// What a worker did, printed by it as one JSON line when it ends.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerReport {
    pub worker: u32,
    /// Transactions committed, each recording a new transfer id.
    pub transfers_applied: u64,
    /// Fenced reads that touched no row (a newer token had been there); the
    /// transfer was dropped.
    pub stale_reads_refused: u64,
    /// Write transactions rolled back because a fenced write touched no row.
    pub stale_writes_refused: u64,
    /// Replays of an applied transfer (as after a lost commit reply) that
    /// found its id recorded and were rolled back.
    pub retried_idempotently: u64,
    /// Replays that committed: a transfer applied twice (never, with the
    /// primary key).
    pub applied_twice: u64,
    /// Acquires that failed (wait timed out, cluster unavailable).
    pub acquire_failures: u64,
    /// Releases the cluster refused (the lease had already ended).
    pub releases_refused: u64,
    /// Database statements that failed for another reason.
    pub errors: u64,
    /// Per applied transfer, in microseconds: acquiring both locks, the
    /// database's two transactions (read, write), releasing both locks.
    pub acquire_us: Vec<u64>,
    pub db_us: Vec<u64>,
    pub release_us: Vec<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("local cluster: {0}")]
    Cluster(#[from] LocalClusterError),
    #[error("leasehold: {0}")]
    Client(#[from] ClientError),
    #[error("PostgreSQL is not installed: {0}")]
    PostgresMissing(String),
    #[error("PostgreSQL: {0}")]
    Postgres(String),
    #[error("database: {0}")]
    Database(#[from] tokio_postgres::Error),
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

/// The environment variable that carries the database URL to a worker
/// process, where a password in it is not on every `ps`.
pub const POSTGRES_ENV: &str = "LEASEHOLD_DEMO_POSTGRES";

/// The lock that guards account `n`.
pub fn account_lock(account: usize) -> String {
    format!("account-{account}")
}
