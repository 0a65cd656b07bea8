//! `leasehold-lab bench`: the head-to-head benchmark of leasehold against Redis
//! (volatile and `appendfsync always`), Redlock over five Redis instances and
//! an etcd cluster, on real servers this harness starts and stops by PID on
//! 127.0.0.1.
//!
//! Every system sits behind the same two traits: a [`LockSystem`] makes
//! [`LockSession`]s (one client with its own keep-alive connections), and a
//! session acquires and releases locks, returning a [`Grant`] with the
//! system's fencing token (if it has one) and the client's validity anchor.
//! The workloads (`workload.rs`) and any later harness drive every system
//! through these traits only.
//!
//! - `servers.rs` — launchers for redis-server and etcd (by PID, free ports).
//! - `resp.rs` — a minimal Redis protocol connection.
//! - `redis.rs`, `redlock.rs`, `etcd.rs`, `leasehold.rs` — one adapter each.
//! - `workload.rs` — lock cycles on distinct names, on one hot name, and
//!   by a herd of waiters on one name, and on distinct names under a flood
//!   of idle connections (`flood.rs`); permit cycles on one semaphore.
//!   Every measurement reads the Raft term before and after it, so the
//!   report counts elections under load.
//! - `election.rs`, `failover.rs` — rounds of a leader crash: the next
//!   leader's first fenced write, and the gap in a stream of writes through
//!   a surviving node; `rounds.rs` — the clusters they start and their
//!   per-round summary and plot.
//! - `report.rs` — machine, CPU placement, fsync probe; JSON and Markdown.
//! - `cpu.rs` — servers' and clients' CPU time from `/proc`, per cycle.
//! - `plots.rs` — latency CDFs and throughput vs clients, drawn with [`crate::plot`].
//! - `safety/` — `leasehold-lab bench --safety`: every system under faults
//!   (paused holder, clock jump, failover, paused leader), judged by the
//!   [`history`](crate::history) checker (`mod.rs`: the faults, options and
//!   `run`; `scenarios.rs`: servers, faults and holders of one scenario;
//!   `report.rs`: the counts, JSON and Markdown); `holder.rs` — the holder
//!   process (`leasehold-lab safety-holder`) it starts and SIGSTOPs.

pub mod cpu;
pub mod election;
mod etcd;
pub mod failover;
mod flood;
pub mod holder;
mod leasehold;
mod plots;
mod redis;
mod redlock;
pub mod report;
pub mod resp;
pub mod rounds;
pub mod safety;
pub mod servers;
pub mod workload;

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::str::FromStr;
use std::time::{Duration, Instant};

pub use etcd::EtcdSystem;
pub use leasehold::LeaseholdSystem;
pub use redis::RedisSystem;
pub use redlock::RedlockSystem;
pub use workload::Workload;

use crate::bench::BenchRow;
use leasehold_client::{ClientError, Credentials, Secret};
use leasehold_local::{LocalCluster, LocalClusterError};
use report::{Placement, Report};
use resp::RespError;
use servers::{BenchTokens, Durability, EtcdCluster, ServerError, ServerProcess};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A lock service under test.
pub trait LockSystem: Send + Sync {
    /// Opens one client: its own connections, kept alive across cycles.
    fn connect(&self) -> BoxFuture<'_, Result<Box<dyn LockSession>, AdapterError>>;

    /// Opens the `nth` client of a herd: pinned to one node in turn where
    /// the system lets a client choose (by default, as [`connect`](Self::connect)).
    fn connect_pinned(&self, nth: usize) -> BoxFuture<'_, Result<Box<dyn LockSession>, AdapterError>> {
        let _ = nth;
        self.connect()
    }

    /// The consensus term now, for systems that have one: a herd must not
    /// move it.
    fn term(&self) -> BoxFuture<'_, Option<u64>>;

    /// The server a connection flood is aimed at: the one every request
    /// reaches (leasehold's leader, etcd's member, the first Redis).
    fn flood_target(&self) -> BoxFuture<'_, Option<SocketAddr>>;

    /// Whether its sessions take semaphore permits (leasehold natively,
    /// etcd by a recipe): the `semaphore` workload leaves the others out.
    fn semaphores(&self) -> bool {
        false
    }
}

/// One client of a [`LockSystem`].
pub trait LockSession: Send {
    /// Acquires `name` for `ttl`. When another client holds it, waits up to
    /// `wait` the way the system offers (leasehold and etcd in their queues,
    /// Redis and Redlock by retrying with jittered back-off), then fails
    /// with [`AdapterError::NotAcquired`].
    fn acquire<'a>(
        &'a mut self,
        name: &'a str,
        ttl: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Grant, AdapterError>>;

    /// Releases `grant`; [`AdapterError::NotHeld`] when the system no longer
    /// had it for this client (it expired, or another client took it).
    fn release<'a>(&'a mut self, grant: &'a Grant) -> BoxFuture<'a, Result<(), AdapterError>>;

    /// Acquires every lock of `names` (a transfer between two accounts):
    /// one after the other in the order given, as a client of a system
    /// without multi-locks does, giving back what it took when one fails.
    /// leasehold overrides it with one atomic multi-acquire.
    fn acquire_all<'a>(
        &'a mut self,
        names: &'a [String],
        ttl: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Grant>, AdapterError>> {
        Box::pin(async move {
            let mut grants = Vec::with_capacity(names.len());
            for name in names {
                match self.acquire(name, ttl, wait).await {
                    Ok(grant) => grants.push(grant),
                    Err(e) => {
                        // The acquire's error is the one to report.
                        let _ = self.release_all(&grants).await;
                        return Err(e);
                    }
                }
            }
            Ok(grants)
        })
    }

    /// Releases `grants`, last taken first; the first error, after trying all.
    fn release_all<'a>(&'a mut self, grants: &'a [Grant]) -> BoxFuture<'a, Result<(), AdapterError>> {
        Box::pin(async move {
            let mut outcome = Ok(());
            for grant in grants.iter().rev() {
                let released = self.release(grant).await;
                outcome = outcome.and(released);
            }
            outcome
        })
    }

    /// Takes one permit of the counting semaphore `name` of `limit` permits
    /// for `ttl`, waiting up to `wait` for one to be free, then failing with
    /// [`AdapterError::NotAcquired`]. Only where
    /// [`LockSystem::semaphores`] says so; elsewhere [`AdapterError::NoSemaphore`].
    fn acquire_permit<'a>(
        &'a mut self,
        name: &'a str,
        limit: u32,
        ttl: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Grant, AdapterError>> {
        let _ = (name, limit, ttl, wait);
        Box::pin(async { Err(AdapterError::NoSemaphore) })
    }

    /// Returns a permit [`acquire_permit`](Self::acquire_permit) granted.
    fn release_permit<'a>(&'a mut self, grant: &'a Grant) -> BoxFuture<'a, Result<(), AdapterError>> {
        let _ = grant;
        Box::pin(async { Err(AdapterError::NoSemaphore) })
    }
}

/// A lock a session was told it holds.
#[derive(Debug, Clone)]
pub struct Grant {
    pub name: String,
    /// The system's fencing token: leasehold's token, etcd's revision of the
    /// lock response (of a permit: of the range that found its key among
    /// the first `limit`); Redis and Redlock have none.
    pub token: Option<u64>,
    /// The client's monotonic time the validity counts from: the send time
    /// of the request that started the lease (for an etcd session lease, of
    /// its last keep-alive).
    pub anchor: Instant,
    /// Until when the client may act as holder: anchor + ttl − drift margin
    /// (Redlock: minus the elapsed acquire time too, as its algorithm says).
    pub valid_until: Instant,
    /// What the system needs to release it: the random value (Redis,
    /// Redlock) or the lock key (etcd).
    release_key: String,
    /// The etcd lease created for this grant alone, revoked on release.
    own_lease: Option<i64>,
}

/// The clock-drift allowance subtracted from every lease's validity, for
/// every system alike: Redlock's ttl × 1 % + 2 ms.
pub fn drift_margin(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    #[error(transparent)]
    Redis(#[from] RespError),
    #[error("etcd: {0}")]
    Etcd(String),
    #[error(transparent)]
    Leasehold(#[from] ClientError),
    #[error("{name} not acquired within {waited:?}")]
    NotAcquired { name: String, waited: Duration },
    #[error("{name} was no longer held by this client at release")]
    NotHeld { name: String },
    #[error("this system has no semaphore")]
    NoSemaphore,
    #[error("unexpected reply: {0}")]
    Unexpected(String),
}

/// A lock service with no queue to wait in (Redis, Redlock): a client
/// polls. Every such session is a [`LockSession`] that waits by retrying.
trait TryAcquire: Send {
    /// One attempt: `None` when another client holds `name`.
    fn try_acquire<'a>(
        &'a mut self,
        name: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Option<Grant>, AdapterError>>;

    /// Deletes the grant's key if it is still this grant's: whether it was.
    fn try_release<'a>(&'a mut self, grant: &'a Grant) -> BoxFuture<'a, Result<bool, AdapterError>>;
}

impl<T: TryAcquire> LockSession for T {
    fn acquire<'a>(
        &'a mut self,
        name: &'a str,
        ttl: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Grant, AdapterError>> {
        Box::pin(acquire_with_retry(self, name, ttl, wait))
    }

    fn release<'a>(&'a mut self, grant: &'a Grant) -> BoxFuture<'a, Result<(), AdapterError>> {
        Box::pin(async move {
            match self.try_release(grant).await? {
                true => Ok(()),
                false => Err(AdapterError::NotHeld { name: grant.name.clone() }),
            }
        })
    }
}

/// Attempts until one succeeds or `wait` is spent ([`Retry`]).
async fn acquire_with_retry(
    session: &mut dyn TryAcquire,
    name: &str,
    ttl: Duration,
    wait: Duration,
) -> Result<Grant, AdapterError> {
    let mut retry = Retry::within(wait);
    loop {
        if let Some(grant) = session.try_acquire(name, ttl).await? {
            return Ok(grant);
        }
        retry.pause(name).await?;
    }
}

/// How a client without a server-side queue waits (Redis and Redlock for a
/// lock, etcd's semaphore recipe for a permit): it asks again after a random
/// pause in [cap/2, cap], the cap doubling from 1 ms to 50 ms. The jitter
/// keeps waiting clients from asking in lockstep.
struct Retry {
    began: Instant,
    wait: Duration,
    cap: Duration,
}

impl Retry {
    fn within(wait: Duration) -> Retry {
        Retry { began: Instant::now(), wait, cap: Duration::from_millis(1) }
    }

    /// Sleeps until the next attempt, or fails with
    /// [`AdapterError::NotAcquired`] when that would be past the wait.
    async fn pause(&mut self, name: &str) -> Result<(), AdapterError> {
        let pause = self.cap.mul_f64(0.5 + fastrand::f64() / 2.0);
        if self.began.elapsed() + pause > self.wait {
            return Err(AdapterError::NotAcquired { name: name.to_string(), waited: self.began.elapsed() });
        }
        tokio::time::sleep(pause).await;
        self.cap = (self.cap * 2).min(Duration::from_millis(50));
        Ok(())
    }
}

/// A value no other grant shares, so a release deletes only its own key.
fn random_value() -> String {
    format!("{:032x}", fastrand::u128(..))
}

/// A system `leasehold-lab bench` can start and measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SystemKind {
    /// A local leasehold cluster of this many nodes (durable). Each client
    /// knows every node and follows the leader (`leasehold-N`), or, with
    /// `spread`, is pinned to one node in turn as behind a load balancer, so
    /// most requests reach a follower that forwards them (`leasehold-N-spread`).
    /// `access` says how its clients are let in.
    Leasehold { nodes: usize, spread: bool, access: ClientAccess },
    /// One Redis, no persistence (`--save "" --appendonly no`).
    Redis,
    /// One Redis, `--appendonly yes --appendfsync always`.
    RedisAof,
    /// Redlock over five independent volatile Redis instances.
    Redlock,
    /// A 3-node etcd cluster, one lease per lock cycle.
    Etcd,
    /// The same etcd cluster, one lease per client session.
    EtcdSession,
}

/// How a leasehold system's clients are let in: what the benchmark varies
/// to measure the cost of authorization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAccess {
    /// No secrets: every request is let in unchecked (`leasehold-N`).
    Open,
    /// Client and admin tokens; clients send the client token
    /// (`leasehold-N-tokens`).
    Tokens,
    /// The same, with [`servers::BENCH_USERS`] users and
    /// [`servers::BENCH_ROLES`] roles; clients send one user's token, whose
    /// roles grant `lock` and `read` on the benchmark's names
    /// (`leasehold-N-users`).
    Users,
}

impl ClientAccess {
    /// The suffix of the system's name.
    fn suffix(self) -> &'static str {
        match self {
            ClientAccess::Open => "",
            ClientAccess::Tokens => "-tokens",
            ClientAccess::Users => "-users",
        }
    }
}

impl SystemKind {
    /// A leasehold cluster of `nodes` whose clients follow the leader, open.
    pub const fn leasehold(nodes: usize) -> SystemKind {
        SystemKind::Leasehold { nodes, spread: false, access: ClientAccess::Open }
    }

    /// Every system, in the order the report lists them.
    pub const ALL: [SystemKind; 7] = [
        SystemKind::leasehold(3),
        SystemKind::leasehold(5),
        SystemKind::Redis,
        SystemKind::RedisAof,
        SystemKind::Redlock,
        SystemKind::Etcd,
        SystemKind::EtcdSession,
    ];
}

impl fmt::Display for SystemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SystemKind::Leasehold { nodes, spread, access } => {
                let spread = if *spread { "-spread" } else { "" };
                write!(f, "leasehold-{nodes}{spread}{}", access.suffix())
            }
            SystemKind::Redis => f.write_str("redis"),
            SystemKind::RedisAof => f.write_str("redis-aof"),
            SystemKind::Redlock => f.write_str("redlock"),
            SystemKind::Etcd => f.write_str("etcd"),
            SystemKind::EtcdSession => f.write_str("etcd-session"),
        }
    }
}

impl FromStr for SystemKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(rest) = s.strip_prefix("leasehold-") {
            let (rest, access) = [ClientAccess::Tokens, ClientAccess::Users]
                .into_iter()
                .find_map(|access| Some((rest.strip_suffix(access.suffix())?, access)))
                .unwrap_or((rest, ClientAccess::Open));
            let (nodes, spread) = match rest.strip_suffix("-spread") {
                Some(nodes) => (nodes, true),
                None => (rest, false),
            };
            return match nodes.parse::<usize>() {
                Ok(nodes @ 1..=7) => Ok(SystemKind::Leasehold { nodes, spread, access }),
                _ => Err(format!("{s:?}: leasehold-N[-spread][-tokens|-users] take 1 to 7 nodes")),
            };
        }
        SystemKind::ALL.into_iter().find(|k| k.to_string() == s).ok_or_else(|| {
            format!(
                "unknown system {s:?}; one of leasehold-N[-spread][-tokens|-users], redis, redis-aof, redlock, etcd, \
                 etcd-session"
            )
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("local leasehold cluster: {0}")]
    Cluster(#[from] LocalClusterError),
    #[error("{system}: opening a client: {source}")]
    Connect { system: String, source: AdapterError },
    #[error("{system}: opening {clients} clients took longer than {bound:?}")]
    ConnectTimeout { system: String, clients: usize, bound: Duration },
    #[error("leasehold client: {0}")]
    Client(#[from] ClientError),
    #[error("results folder: {0}")]
    Io(#[from] std::io::Error),
}

/// What to measure, and where.
pub struct CompareOptions {
    /// Systems to start and measure (skipped when their server is missing).
    pub systems: Vec<SystemKind>,
    /// Instead of `systems`: an existing leasehold cluster, reported as
    /// system `leasehold`.
    pub endpoints: Vec<String>,
    /// The token and CA sent to the `endpoints` cluster.
    pub credentials: Credentials,
    /// The `leasehold` binary for local clusters.
    pub binary: PathBuf,
    pub workloads: Vec<Workload>,
    /// Concurrent clients on distinct names, on pairs of names, and on the
    /// one semaphore.
    pub clients: Vec<usize>,
    /// Concurrent clients on the hot name.
    pub hot_clients: Vec<usize>,
    /// Waiting clients in a herd on one name.
    pub herd_clients: Vec<usize>,
    /// Clients on distinct names during a connection flood.
    pub flood_clients: Vec<usize>,
    /// Idle connections in a flood.
    pub flood_connections: usize,
    pub runs: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub ttl: Duration,
    /// Results folder: `latest.json`, `README.md`, SVG plots; server data
    /// goes to `servers/` inside it while the benchmark runs.
    pub out: PathBuf,
    /// The command line, for the report.
    pub command: String,
}

/// A system that runs, with the processes that serve it.
struct Contender {
    name: String,
    system: Box<dyn LockSystem>,
    pids: Vec<u32>,
}

/// Everything the benchmark started; dropped (killed by PID) at the end.
#[derive(Default)]
struct Fleet {
    processes: Vec<ServerProcess>,
    clusters: Vec<BenchCluster>,
    etcd: Option<EtcdCluster>,
}

/// A leasehold cluster the systems of its size and kind of access share
/// (`leasehold-3`, `-spread`; `-tokens` and `-users` share a cluster with
/// tokens).
struct BenchCluster {
    cluster: LocalCluster,
    tokens: Option<BenchTokens>,
    /// The token of the user the `-users` systems run as, once added.
    user: Option<Secret>,
}

/// How long opening all clients of one measurement may take.
const CONNECT_BOUND: Duration = Duration::from_secs(30);

/// Starts the systems, runs every (run, workload, clients) with the systems
/// alternating inside it, stops the servers and writes the report into
/// `options.out`. Progress goes to stderr.
pub async fn run(options: &CompareOptions) -> Result<Report, CompareError> {
    std::fs::create_dir_all(&options.out)?;
    let server_dir = options.out.join("servers");
    if server_dir.exists() {
        std::fs::remove_dir_all(&server_dir)?;
    }
    eprintln!("bench: probing fsync latency in {} and loopback round trips", options.out.display());
    let loopback = report::loopback_probe()?;
    let mut report = Report::new(options, report::fsync_probe(&options.out)?, loopback);
    let mut fleet = Fleet::default();
    let contenders = if options.endpoints.is_empty() {
        start_contenders(options, &server_dir, &mut fleet, &mut report).await?
    } else {
        let system = LeaseholdSystem::with_credentials(&options.endpoints, options.credentials.clone())?;
        vec![Contender { name: "leasehold".into(), system: Box::new(system), pids: Vec::new() }]
    };
    report.placement.extend(contenders.iter().map(|c| Placement::of(&c.name, &c.pids)));
    if options.workloads.contains(&Workload::Semaphore) {
        for contender in contenders.iter().filter(|c| !c.system.semaphores()) {
            let why = "it has no semaphore, so the semaphore workload runs without it";
            eprintln!("bench: {}: {why}", contender.name);
            report.left_out.push((contender.name.clone(), why.into()));
        }
    }
    let measured = measure(options, &contenders, &mut report.rows).await;
    for mut started in fleet.clusters.drain(..) {
        started.cluster.stop_all(Duration::from_secs(5));
    }
    drop(fleet);
    if server_dir.exists() {
        std::fs::remove_dir_all(&server_dir)?;
    }
    measured?;
    report.write(&options.out)?;
    eprintln!("bench: results in {}", options.out.display());
    Ok(report)
}

/// Every (workload, clients) pair of one run, in order.
fn pairs(options: &CompareOptions) -> Vec<(Workload, usize)> {
    let mut pairs = Vec::new();
    for &workload in &options.workloads {
        let clients = match workload {
            Workload::Distinct | Workload::Pair | Workload::Semaphore => &options.clients,
            Workload::Hot => &options.hot_clients,
            Workload::Herd => &options.herd_clients,
            Workload::Flood => &options.flood_clients,
            // Measured in rounds by `election::run` and `failover::run`,
            // not by cycling clients.
            Workload::Election | Workload::Failover => continue,
        };
        pairs.extend(clients.iter().map(|&c| (workload, c)));
    }
    pairs
}

async fn measure(
    options: &CompareOptions,
    contenders: &[Contender],
    rows: &mut Vec<BenchRow>,
) -> Result<(), CompareError> {
    let pairs = pairs(options);
    let total =
        options.runs * pairs.iter().map(|&(workload, _)| able_to_run(contenders, workload).len()).sum::<usize>();
    let each = options.warmup + options.duration;
    eprintln!("bench: {total} measurements of {each:?} each, about {:?} in all", each * total as u32);
    for run in 1..=options.runs {
        for &(workload, clients) in &pairs {
            // A B A B ...: every system is measured once per pair before
            // the next pair, so drift on a shared machine hits all of them;
            // the order rotates with the run so none is always first.
            let able = able_to_run(contenders, workload);
            for k in 0..able.len() {
                let contender = able[(k + run - 1) % able.len()];
                let plan = workload::Plan {
                    system: contender.name.clone(),
                    workload,
                    clients,
                    run,
                    warmup: options.warmup,
                    duration: options.duration,
                    ttl: options.ttl,
                    server_pids: contender.pids.clone(),
                };
                eprintln!(
                    "bench: [{}/{total}] run {run}, {}, {}, {clients} clients, {:?} ...",
                    rows.len() + 1,
                    contender.name,
                    workload.label(),
                    options.duration
                );
                let herd = workload == Workload::Herd;
                let watched = herd || workload == Workload::Flood;
                let sessions = connect(contender, clients, herd).await?;
                // Every measurement watches the term: an election under
                // load (a missed heartbeat on a busy node) is a finding.
                let term_before = contender.system.term().await;
                let watch_began = Instant::now();
                let flood = match workload {
                    Workload::Flood => match contender.system.flood_target().await {
                        Some(target) => Some(flood::Flood::start(target, options.flood_connections).await),
                        None => None,
                    },
                    _ => None,
                };
                let mut row = workload::run_cycles(sessions, &plan).await;
                if watched {
                    row.idle_connections = flood.as_ref().map(flood::Flood::open_now);
                    drop(flood);
                    row.server_rss_mib = cpu::rss_mib_of(&contender.pids);
                }
                let term_after = contender.system.term().await;
                row.leader_changes = term_before.zip(term_after).map(|(b, a)| a.saturating_sub(b));
                row.term_watched_ms = row.leader_changes.map(|_| watch_began.elapsed().as_millis() as u64);
                let per_cycle = |cpu: Option<f64>| cpu.map_or("–".to_string(), |us| format!("{us:.0}"));
                eprintln!(
                    "bench:   {:.0} cycles/s, p50 {} µs, p99 {} µs, CPU µs/cycle servers {} + clients {}, elections {}, errors {}{}",
                    row.ops_per_sec,
                    row.p50_us,
                    row.p99_us,
                    per_cycle(row.server_cpu_us_per_cycle),
                    per_cycle(row.client_cpu_us_per_cycle),
                    row.leader_changes.map_or("–".to_string(), |n| n.to_string()),
                    row.errors,
                    row.first_error.as_ref().map(|e| format!(" (first: {e})")).unwrap_or_default()
                );
                rows.push(row);
            }
        }
    }
    Ok(())
}

/// The contenders that can run `workload`: only systems with semaphores
/// run the semaphore workload.
fn able_to_run(contenders: &[Contender], workload: Workload) -> Vec<&Contender> {
    contenders.iter().filter(|c| workload != Workload::Semaphore || c.system.semaphores()).collect()
}

/// Opens `clients` sessions (pinned to the nodes in turn for a `herd`),
/// bounded by [`CONNECT_BOUND`].
async fn connect(contender: &Contender, clients: usize, herd: bool) -> Result<Vec<Box<dyn LockSession>>, CompareError> {
    let open = async {
        let mut sessions = Vec::with_capacity(clients);
        for nth in 0..clients {
            let session = if herd { contender.system.connect_pinned(nth) } else { contender.system.connect() };
            let session =
                session.await.map_err(|source| CompareError::Connect { system: contender.name.clone(), source })?;
            sessions.push(session);
        }
        Ok(sessions)
    };
    tokio::time::timeout(CONNECT_BOUND, open).await.unwrap_or_else(|_| {
        Err(CompareError::ConnectTimeout { system: contender.name.clone(), clients, bound: CONNECT_BOUND })
    })
}

/// Starts the servers of every requested system. A system whose server
/// binary is missing is skipped with a message saying how to install it.
async fn start_contenders(
    options: &CompareOptions,
    server_dir: &std::path::Path,
    fleet: &mut Fleet,
    report: &mut Report,
) -> Result<Vec<Contender>, CompareError> {
    let mut contenders = Vec::new();
    for &kind in &options.systems {
        let name = kind.to_string();
        let dir = server_dir.join(&name);
        eprintln!("bench: starting {name}");
        let started = match kind {
            SystemKind::Leasehold { nodes, spread, access } => {
                start_leasehold(options, server_dir, (nodes, spread, access), fleet).await
            }
            SystemKind::Redis | SystemKind::RedisAof => {
                let durability = if kind == SystemKind::Redis { Durability::Volatile } else { Durability::FsyncAlways };
                start_redis_set(&dir, 1, durability, fleet)
                    .await
                    .map(|addrs| (Box::new(RedisSystem::new(addrs[0])) as Box<dyn LockSystem>, pids_of(fleet, 1)))
            }
            SystemKind::Redlock => start_redis_set(&dir, 5, Durability::Volatile, fleet)
                .await
                .map(|addrs| (Box::new(RedlockSystem::new(addrs)) as Box<dyn LockSystem>, pids_of(fleet, 5))),
            SystemKind::Etcd | SystemKind::EtcdSession => {
                start_etcd(&server_dir.join("etcd"), fleet).await.map(|(leader, pids)| {
                    let session = kind == SystemKind::EtcdSession;
                    (Box::new(EtcdSystem::new(leader, options.ttl, session)) as Box<dyn LockSystem>, pids)
                })
            }
        };
        match started {
            Ok((system, pids)) => contenders.push(Contender { name, system, pids }),
            Err(CompareError::Server(ServerError::Missing { binary, package })) => {
                let why =
                    format!("{binary} not found; install it with `apt-get install {package}` (skipping only {name})");
                eprintln!("bench: {why}");
                report.skipped.push((name, why));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(contenders)
}

/// PIDs of the last `n` processes started.
fn pids_of(fleet: &Fleet, n: usize) -> Vec<u32> {
    fleet.processes[fleet.processes.len() - n..].iter().map(|p| p.pid()).collect()
}

/// Starts a local cluster of `nodes` once per kind of access (`leasehold-N`
/// and `leasehold-N-spread` are the same servers reached two ways, as etcd
/// and etcd-session are; so are `-tokens` and `-users`); adds the users the
/// first time a `-users` system asks; returns the system its clients see
/// and the nodes' PIDs.
async fn start_leasehold(
    options: &CompareOptions,
    server_dir: &std::path::Path,
    (nodes, spread, access): (usize, bool, ClientAccess),
    fleet: &mut Fleet,
) -> Result<(Box<dyn LockSystem>, Vec<u32>), CompareError> {
    let secured = access != ClientAccess::Open;
    let started =
        match fleet.clusters.iter().position(|c| c.cluster.ids().len() == nodes && c.tokens.is_some() == secured) {
            Some(started) => &mut fleet.clusters[started],
            None => {
                let dir = server_dir.join(format!("leasehold-{nodes}{}", if secured { "-tokens" } else { "" }));
                let tokens = secured.then(BenchTokens::generate).transpose().map_err(LocalClusterError::from)?;
                let cluster = servers::start_leasehold(&options.binary, &dir, nodes, tokens.as_ref()).await?;
                fleet.clusters.push(BenchCluster { cluster, tokens, user: None });
                fleet.clusters.last_mut().expect("pushed just above")
            }
        };
    let token = match (&started.tokens, access) {
        (None, _) | (_, ClientAccess::Open) => None,
        (Some(tokens), ClientAccess::Tokens) => Some(tokens.client.clone()),
        (Some(tokens), ClientAccess::Users) => match &started.user {
            Some(user) => Some(user.clone()),
            None => {
                let admin = started.cluster.client_as(Some(tokens.admin.clone()));
                let user = servers::add_bench_users(&admin).await?;
                Some(started.user.insert(user).clone())
            }
        },
    };
    let credentials = Credentials { token, ..Credentials::default() };
    let system = LeaseholdSystem::with_credentials(&started.cluster.endpoints(), credentials)?;
    let system = if spread { system.spread_over_nodes() } else { system };
    let cluster = &started.cluster;
    let pids = cluster.ids().iter().filter_map(|id| cluster.pid(*id)).collect();
    Ok((Box::new(system), pids))
}

/// Starts `n` independent Redis instances; returns their addresses.
async fn start_redis_set(
    dir: &std::path::Path,
    n: usize,
    durability: Durability,
    fleet: &mut Fleet,
) -> Result<Vec<SocketAddr>, CompareError> {
    let mut addrs = Vec::with_capacity(n);
    for i in 1..=n {
        let server = servers::start_redis(&dir.join(format!("redis{i}")), durability).await?;
        addrs.push(server.addr());
        fleet.processes.push(server);
    }
    Ok(addrs)
}

/// Starts the 3-node etcd cluster once (both etcd variants share it);
/// returns its leader's client URL and the members' PIDs.
async fn start_etcd(dir: &std::path::Path, fleet: &mut Fleet) -> Result<(String, Vec<u32>), CompareError> {
    if fleet.etcd.is_none() {
        fleet.etcd = Some(EtcdCluster::start(dir, 3).await?);
    }
    let etcd = fleet.etcd.as_ref().expect("started just above");
    Ok((etcd.leader_url().await?, etcd.pids()))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every system's name parses back to it, the spread mode included, and
    // a node count out of range is refused with a message, not a panic.
    #[test]
    fn system_names_round_trip() {
        let spread = SystemKind::Leasehold { nodes: 3, spread: true, access: ClientAccess::Open };
        let users = SystemKind::Leasehold { nodes: 3, spread: true, access: ClientAccess::Users };
        let tokens = SystemKind::Leasehold { nodes: 5, spread: false, access: ClientAccess::Tokens };
        for kind in SystemKind::ALL.into_iter().chain([spread, users, tokens]) {
            assert_eq!(kind.to_string().parse::<SystemKind>(), Ok(kind));
        }
        assert_eq!(spread.to_string(), "leasehold-3-spread");
        assert_eq!(users.to_string(), "leasehold-3-spread-users");
        assert_eq!(tokens.to_string(), "leasehold-5-tokens");
        assert!("leasehold-3-users-spread".parse::<SystemKind>().is_err());
        assert!("leasehold-0-spread".parse::<SystemKind>().is_err());
        assert!("leasehold-x".parse::<SystemKind>().is_err());
    }
}
