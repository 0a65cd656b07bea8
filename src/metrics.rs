//! The node's Prometheus metrics (`GET /metrics`), kept with `prometheus-client`.
//!
//! Three kinds of series, by where they are known:
//! - requests served by this node (acquires, renews, releases by result,
//!   forwarded requests): counted by the API where the request is answered,
//!   so a request forwarded from a follower counts once on the follower
//!   (`forwarded`) and once on the leader (its result);
//! - lock events (expiries, wait and hold times): counted where entries are
//!   applied, on every replica alike. Wait and hold times are measured in
//!   committed ticks times the tick period: cluster time, the time leases
//!   are measured in, identical on every replica and after a restart;
//! - state (queue depth, live leases, tick, Raft term and indexes, each
//!   quota's use and limit): read when scraped;
//! - refusals for want of room, by quota: counted where they are answered
//!   (a 507 `full` on the leader, a refused event stream on the node asked).
//!
//! Nothing in here reads the lock table or Raft itself; the node and the
//! stores push what they see.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Metric, Registry};

use leasehold_core::{EventKind, LockEvent};
use leasehold_proto::cluster::QuotaUse;

/// The content type of [`Metrics::encode`]'s output (OpenMetrics text, which
/// Prometheus scrapes natively).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A `result` label: what a request or an expiry came to.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

/// A `follower` label: the member a replication series is about.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FollowerLabel {
    pub follower: String,
}

/// A `quota` label: what a quota bounds (`leases`, `waiters`, `subscribers`, ...).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuotaLabel {
    pub quota: String,
}

/// The labels of a semaphore request series: what was asked, what it came to.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SemaphoreRequestLabel {
    pub request: String,
    pub result: String,
}

/// A `semaphore` label: the semaphore a series is about.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SemaphoreLabel {
    pub semaphore: String,
}

/// A `lock` label: the lock a series is about.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LockLabel {
    pub lock: String,
}

/// Semaphores, and locks held shared, that get series of their own at one
/// scrape, at most (the first in name order): the totals count them all.
pub const MAX_NAMED_SERIES: usize = 1000;

/// The labels of `leasehold_build_info`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabel {
    version: String,
    commit: String,
}

type Results = Family<ResultLabel, Counter>;

/// Every series of one node. Cheap to share behind an `Arc`.
pub struct Metrics {
    registry: Registry,
    acquires: Results,
    renews: Results,
    releases: Results,
    multi_acquires: Results,
    multi_releases: Results,
    expiries: Results,
    forwarded: Results,
    wait_seconds: Histogram,
    hold_seconds: Histogram,
    pub queue_depth: Gauge,
    pub live_leases: Gauge,
    pub live_sessions: Gauge,
    session_expiries: Counter,
    pub tick: Gauge,
    tick_lag_seconds: Gauge<f64, AtomicU64>,
    pub term: Gauge,
    pub is_leader: Gauge,
    leader_changes: Counter,
    commit_index: Gauge,
    pub applied_index: Gauge,
    pub last_log_index: Gauge,
    pub replication_lag: Family<FollowerLabel, Gauge>,
    quota_used: Family<QuotaLabel, Gauge>,
    quota_limit: Family<QuotaLabel, Gauge>,
    quota_refused: Family<QuotaLabel, Counter>,
    append_seconds: Histogram,
    flush_seconds: Histogram,
    entry_commands: Histogram,
    entry_commit_seconds: Histogram,
    /// (lock name, owner) → tick it joined the queue, of every waiter seen
    /// queued, to turn its grant or its end into a wait time. (A lease's
    /// hold time comes with its end, from the table.)
    queued: Mutex<HashMap<(String, String), u64>>,
    semaphore_requests: Family<SemaphoreRequestLabel, Counter>,
    permits_in_use: Family<SemaphoreLabel, Gauge>,
    permits_limit: Family<SemaphoreLabel, Gauge>,
    permits_waiting: Family<SemaphoreLabel, Gauge>,
    shared_holders: Family<LockLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("leasehold");
        let r = &mut registry;
        // Cluster time comes in whole ticks (100 ms by default): buckets from
        // one tick to about 14 minutes. Disk latencies: 50 µs to about 1.6 s.
        let cluster_time = || Histogram::new(exponential_buckets(0.1, 2.0, 14));
        let disk_time = || Histogram::new(exponential_buckets(0.000_05, 2.0, 16));
        let by_result = Results::default;
        // Always 1: the labels say which build runs, so a dashboard can
        // show a rolling upgrade's progress (count by version).
        let build_info = registered(
            r,
            "build_info",
            "1, labelled with this node's version and git commit",
            Family::<BuildLabel, Gauge>::default(),
        );
        build_info.get_or_create(&BuildLabel { version: crate::VERSION.into(), commit: crate::COMMIT.into() }).set(1);
        Metrics {
            acquires: registered(r, "acquires", "Acquire requests answered by this node, by result", by_result()),
            renews: registered(r, "renews", "Renew requests answered by this node, by result", by_result()),
            releases: registered(r, "releases", "Release requests answered by this node, by result", by_result()),
            multi_acquires: registered(
                r,
                "multi_acquires",
                "Multi-acquire requests answered by this node, by result",
                by_result(),
            ),
            multi_releases: registered(
                r,
                "multi_releases",
                "Multi-release requests answered by this node, by result",
                by_result(),
            ),
            expiries: registered(
                r,
                "expiries",
                "Leases expired by a Tick, applied on this replica (result: freed, handed_over to a waiter, or delayed by a lock delay)",
                by_result(),
            ),
            forwarded: registered(
                r,
                "forwarded_requests",
                "Client requests this follower forwarded to the leader, by result",
                by_result(),
            ),
            wait_seconds: registered(
                r,
                "acquire_wait_seconds",
                "Cluster time a waiter spent in a queue before the lock passed to it (applied on this replica)",
                cluster_time(),
            ),
            hold_seconds: registered(
                r,
                "hold_seconds",
                "Cluster time a lease was held, from grant to release, expiry or hand-over (applied on this replica)",
                cluster_time(),
            ),
            queue_depth: registered(
                r,
                "queue_depth",
                "Owners waiting in lock queues (this replica's applied table)",
                Gauge::default(),
            ),
            live_leases: registered(r, "live_leases", "Locks held (this replica's applied table)", Gauge::default()),
            live_sessions: registered(
                r,
                "live_sessions",
                "Live sessions (this replica's applied table)",
                Gauge::default(),
            ),
            session_expiries: registered(
                r,
                "session_expiries",
                "Sessions expired by a Tick, applied on this replica (their locks count in expiries too)",
                Counter::default(),
            ),
            tick: registered(r, "tick", "Committed ticks applied on this replica: the cluster clock", Gauge::default()),
            tick_lag_seconds: registered(
                r,
                "tick_lag_seconds",
                "Leader only (0 elsewhere): real time elapsed on the leader's monotonic clock since it began ticking \
                 in its term, minus the ticks committed since times their period. Leases run long by this much.",
                Gauge::default(),
            ),
            term: registered(r, "raft_term", "Current Raft term seen by this node", Gauge::default()),
            is_leader: registered(r, "raft_is_leader", "1 while this node is the leader", Gauge::default()),
            leader_changes: registered(
                r,
                "raft_leader_changes",
                "Times this node saw the leader change",
                Counter::default(),
            ),
            commit_index: registered(
                r,
                "raft_commit_index",
                "Highest log index this node knows committed",
                Gauge::default(),
            ),
            applied_index: registered(
                r,
                "raft_applied_index",
                "Highest log index applied to this node's state machine",
                Gauge::default(),
            ),
            last_log_index: registered(
                r,
                "raft_last_log_index",
                "Highest log index in this node's log",
                Gauge::default(),
            ),
            replication_lag: registered(
                r,
                "raft_replication_lag_entries",
                "Leader only: entries the follower's log is behind the leader's",
                Family::default(),
            ),
            quota_used: registered(
                r,
                "quota_used",
                "In use on this node, by quota: leases and waiters (queue places), sessions, records and gates of \
                 the applied table; subscribers (open event streams)",
                Family::default(),
            ),
            quota_limit: registered(
                r,
                "quota_limit",
                "The limit of each quota on this node (for leases and waiters: what it stamps on entries as leader)",
                Family::default(),
            ),
            quota_refused: registered(
                r,
                "quota_refused",
                "Requests this node refused for want of room, by quota (507 full, or 503 overloaded for subscribers)",
                Family::default(),
            ),
            append_seconds: registered(
                r,
                "log_append_seconds",
                "Time from a log append until its entries are flushed to disk (group commit)",
                disk_time(),
            ),
            flush_seconds: registered(r, "log_flush_seconds", "Time of one group-commit flush of the log: writing the batch and its fdatasync", disk_time()),
            entry_commands: registered(
                r,
                "entry_commands",
                "Leader only: client commands batched into one proposed log entry",
                Histogram::new(exponential_buckets(1.0, 2.0, 9)),
            ),
            entry_commit_seconds: registered(
                r,
                "entry_commit_seconds",
                "Leader only: time from proposing an entry of client commands until it is applied",
                disk_time(),
            ),
            queued: Mutex::default(),
            semaphore_requests: registered(
                r,
                "semaphore_requests",
                "Semaphore acquire, renew and release requests answered by this node, by request and result",
                Family::default(),
            ),
            permits_in_use: registered(
                r,
                "semaphore_permits_in_use",
                "Permits in use, per live semaphore (this replica's applied table)",
                Family::default(),
            ),
            permits_limit: registered(
                r,
                "semaphore_permits_limit",
                "The limit of each live semaphore (this replica's applied table)",
                Family::default(),
            ),
            permits_waiting: registered(
                r,
                "semaphore_waiters",
                "Owners waiting for permits, per live semaphore (this replica's applied table)",
                Family::default(),
            ),
            shared_holders: registered(
                r,
                "lock_shared_holders",
                "Shared holders, per lock held in shared mode (this replica's applied table)",
                Family::default(),
            ),
            registry,
        }
    }

    /// The registry in OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing into a String cannot fail");
        out
    }

    /// One answered acquire: `result` is the outcome (`granted`,
    /// `reacquired`, `granted_after_wait`) or the error code.
    pub fn acquire(&self, result: &str) {
        count(&self.acquires, result);
    }

    pub fn renew(&self, result: &str) {
        count(&self.renews, result);
    }

    pub fn release(&self, result: &str) {
        count(&self.releases, result);
    }

    /// One answered multi-acquire, labelled as [`acquire`](Self::acquire).
    pub fn multi_acquire(&self, result: &str) {
        count(&self.multi_acquires, result);
    }

    pub fn multi_release(&self, result: &str) {
        count(&self.multi_releases, result);
    }

    /// One answered semaphore `request` (`acquire`, `renew`, `release`):
    /// `result` is `ok` or the error code.
    pub fn semaphore_request(&self, request: &str, result: &str) {
        let label = SemaphoreRequestLabel { request: request.to_owned(), result: result.to_owned() };
        self.semaphore_requests.get_or_create(&label).inc();
    }

    /// The live semaphores now, `(name, limit, in use, waiting)`, and the
    /// shared holders of each lock held shared, `(name, holders)`, at most
    /// [`MAX_NAMED_SERIES`] of each: series of names gone since the last
    /// scrape go with them.
    pub fn shared_state(&self, semaphores: &[(String, u32, u32, usize)], shared: &[(String, usize)]) {
        for family in [&self.permits_in_use, &self.permits_limit, &self.permits_waiting] {
            family.clear();
        }
        self.shared_holders.clear();
        for (name, limit, in_use, waiting) in semaphores {
            let label = SemaphoreLabel { semaphore: name.clone() };
            self.permits_in_use.get_or_create(&label).set(i64::from(*in_use));
            self.permits_limit.get_or_create(&label).set(i64::from(*limit));
            self.permits_waiting.get_or_create(&label).set(*waiting as i64);
        }
        for (name, holders) in shared {
            self.shared_holders.get_or_create(&LockLabel { lock: name.clone() }).set(*holders as i64);
        }
    }

    pub fn forwarded(&self, result: &str) {
        count(&self.forwarded, result);
    }

    /// The use of `quota` now.
    pub fn quota(&self, quota: &str, used: QuotaUse) {
        let label = QuotaLabel { quota: quota.to_owned() };
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.quota_used.get_or_create(&label).set(gauge(used.used));
        self.quota_limit.get_or_create(&label).set(gauge(used.limit));
    }

    /// One request refused because `quota` was used up.
    pub fn quota_refused(&self, quota: &str) {
        self.quota_refused.get_or_create(&QuotaLabel { quota: quota.to_owned() }).inc();
    }

    pub fn leader_changed(&self) {
        self.leader_changes.inc();
    }

    pub fn committed(&self, index: u64) {
        self.commit_index.set(index as i64);
    }

    pub fn tick_lag(&self, lag_seconds: f64) {
        self.tick_lag_seconds.set(lag_seconds);
    }

    /// One log append became durable `seconds` after it was made.
    pub fn appended(&self, seconds: f64) {
        self.append_seconds.observe(seconds);
    }

    pub fn flushed(&self, seconds: f64) {
        self.flush_seconds.observe(seconds);
    }

    /// The leader proposed one entry carrying `commands` client commands.
    pub fn proposed(&self, commands: usize) {
        self.entry_commands.observe(commands as f64);
    }

    /// An entry of client commands was applied `seconds` after it was proposed.
    pub fn entry_committed(&self, seconds: f64) {
        self.entry_commit_seconds.observe(seconds);
    }

    /// The events of one applied entry, after which the clock reads
    /// `now_tick` with period `tick_ms`.
    pub fn applied(&self, events: &[LockEvent], now_tick: u64, tick_ms: u64) {
        let ticks = |n: u64| n as f64 * tick_ms as f64 / 1000.0;
        let seconds = |from: u64| ticks(now_tick.saturating_sub(from));
        let mut queued = self.queued.lock().unwrap_or_else(|p| p.into_inner());
        for event in events {
            let name = &event.name;
            match &event.kind {
                // A waiter is granted a free lock when a lock delay ends.
                EventKind::Acquired { owner, .. } | EventKind::HandedOver { owner, .. } => {
                    if let Some(since) = queued.remove(&(name.clone(), owner.clone())) {
                        self.wait_seconds.observe(seconds(since));
                    }
                }
                EventKind::Released { held_ticks, .. } => self.hold_seconds.observe(ticks(*held_ticks)),
                EventKind::Expired { token, delayed_until_tick, held_ticks, .. } => {
                    // The lock table hands an expired lock to its first
                    // waiter in the same entry, right after the expiry,
                    // unless the lease had a lock delay.
                    let handed_over = events.iter().any(|e| {
                        e.name == *name
                            && matches!(&e.kind, EventKind::HandedOver { from_token, .. } if from_token == token)
                    });
                    let outcome = match (delayed_until_tick, handed_over) {
                        (Some(_), _) => "delayed",
                        (None, true) => "handed_over",
                        (None, false) => "freed",
                    };
                    count(&self.expiries, outcome);
                    self.hold_seconds.observe(ticks(*held_ticks));
                }
                EventKind::Queued { owner, .. } => {
                    queued.entry((name.clone(), owner.clone())).or_insert(now_tick);
                }
                EventKind::WaitTimeout { owner } | EventKind::Cancelled { owner } => {
                    queued.remove(&(name.clone(), owner.clone()));
                }
                EventKind::SessionExpired { .. } => {
                    self.session_expiries.inc();
                }
                EventKind::Renewed { .. }
                | EventKind::Proclaimed { .. }
                | EventKind::DelayEnded { .. }
                | EventKind::SessionCreated { .. }
                | EventKind::SessionDeleted { .. }
                | EventKind::PermitsGranted { .. }
                | EventKind::PermitsRenewed { .. }
                | EventKind::PermitsReleased { .. }
                | EventKind::PermitsExpired { .. }
                | EventKind::PermitsQueued { .. }
                | EventKind::PermitWaitEnded { .. }
                | EventKind::AccessChanged { .. } => {}
            }
        }
    }

    /// The applied state jumped to a snapshot: the waiters this replica saw
    /// queue may have left in entries it will never apply.
    pub fn snapshot_installed(&self) {
        self.queued.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// `metric`, after registering a handle on it under `name`.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

fn count(family: &Results, result: &str) {
    family.get_or_create(&ResultLabel { result: result.to_owned() }).inc();
}
