//! The other systems' servers, started from their Debian packages on free
//! 127.0.0.1 ports with data in a folder of the results directory. Each
//! process is tracked by PID and killed (SIGKILL, then reaped) when its
//! [`ServerProcess`] is dropped; only those PIDs are ever signalled.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

use super::resp::{Reply, RespConnection};
use leasehold_client::proto::auth::Permission;
use leasehold_client::{Client, ClientError, Secret, SecretError};
use leasehold_local::{LocalCluster, LocalClusterError, NodeLogs, NodeSecurity};

/// How long a server or cluster may take to start serving.
pub const START_BOUND: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{binary} not found in PATH (apt-get install {package})")]
    Missing { binary: &'static str, package: &'static str },
    #[error("starting {what}: {source}")]
    Spawn { what: String, source: std::io::Error },
    #[error("{what} did not serve within {bound:?}; see {log}")]
    NotReady { what: String, bound: Duration, log: String },
    #[error("etcd: {0}")]
    Etcd(String),
}

/// One server process, killed by PID on drop.
pub struct ServerProcess {
    child: Child,
    addr: SocketAddr,
}

impl ServerProcess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The client address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn spawn(what: &str, command: &mut Command, log: &Path, addr: SocketAddr) -> Result<Self, ServerError> {
        let log = std::fs::File::create(log).map_err(|source| ServerError::Spawn { what: what.to_string(), source })?;
        ServerProcess::spawn_logging(what, command, log, addr)
    }

    /// [`spawn`](Self::spawn) with stdout and stderr to `log`, already open.
    fn spawn_logging(
        what: &str,
        command: &mut Command,
        log: std::fs::File,
        addr: SocketAddr,
    ) -> Result<Self, ServerError> {
        let spawn_error = |source| ServerError::Spawn { what: what.to_string(), source };
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(spawn_error)?)
            .stderr(log)
            .spawn()
            .map_err(spawn_error)?;
        Ok(ServerProcess { child, addr })
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// `binary` from PATH, or [`ServerError::Missing`] naming its package.
pub fn find_binary(binary: &'static str, package: &'static str) -> Result<PathBuf, ServerError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
        .ok_or(ServerError::Missing { binary, package })
}

/// How a single Redis keeps its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// No RDB snapshots, no AOF: a restart forgets every lock.
    Volatile,
    /// AOF with an fsync before every write is acknowledged.
    FsyncAlways,
}

/// Starts one redis-server in `dir` and waits until it answers PING.
pub async fn start_redis(dir: &Path, durability: Durability) -> Result<ServerProcess, ServerError> {
    let binary = find_binary("redis-server", "redis-server")?;
    let persistence: &[&str] = match durability {
        Durability::Volatile => &["--save", "", "--appendonly", "no"],
        Durability::FsyncAlways => &["--save", "", "--appendonly", "yes", "--appendfsync", "always"],
    };
    start_redis_with(dir, &binary, persistence, &[]).await
}

/// Starts `binary` as a redis-server in `dir` with `args` after the
/// address ones and `env` added (e.g. libfaketime's), and waits until it
/// answers PING.
pub async fn start_redis_with(
    dir: &Path,
    binary: &Path,
    args: &[&str],
    env: &[(String, String)],
) -> Result<ServerProcess, ServerError> {
    let addr = free_addr().map_err(|source| ServerError::Spawn { what: "redis-server".into(), source })?;
    start_redis_at(addr, dir, binary, args, env).await
}

/// [`start_redis_with`] on a given address: a restarted instance comes back
/// where its clients know it.
pub async fn start_redis_at(
    addr: SocketAddr,
    dir: &Path,
    binary: &Path,
    args: &[&str],
    env: &[(String, String)],
) -> Result<ServerProcess, ServerError> {
    let spawn_error = |source| ServerError::Spawn { what: "redis-server".into(), source };
    std::fs::create_dir_all(dir).map_err(spawn_error)?;
    let mut command = Command::new(binary);
    command
        .args(["--bind", "127.0.0.1", "--port", &addr.port().to_string(), "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)));
    let log = dir.join("redis.log");
    let server = ServerProcess::spawn("redis-server", &mut command, &log, addr)?;
    let give_up = Instant::now() + START_BOUND;
    while Instant::now() < give_up {
        if let Ok(mut connection) = RespConnection::connect(addr).await {
            let pong = connection.command(&[b"PING"], Duration::from_secs(1)).await;
            if matches!(pong, Ok(Reply::Simple(ref s)) if s == "PONG") {
                return Ok(server);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(ServerError::NotReady {
        what: format!("redis-server on {addr}"),
        bound: START_BOUND,
        log: log.display().to_string(),
    })
}

fn free_addr() -> std::io::Result<SocketAddr> {
    Ok(LocalCluster::free_addrs(1)?[0])
}

/// Starts a local leasehold cluster of `nodes` durable nodes (tick 100 ms,
/// logs in files under `dir`), with `tokens` when given, and waits until it
/// has a leader that serves.
pub async fn start_leasehold(
    binary: &Path,
    dir: &Path,
    nodes: usize,
    tokens: Option<&BenchTokens>,
) -> Result<LocalCluster, LocalClusterError> {
    let addrs = LocalCluster::free_addrs(nodes)?;
    let mut cluster = LocalCluster::new(binary, dir, &addrs, 100, NodeLogs::Files);
    if let Some(tokens) = tokens {
        cluster = cluster.with_security(tokens.node_security(dir)?)?;
    }
    cluster.start_all()?;
    cluster.wait_for_leader(START_BOUND).await?;
    Ok(cluster)
}

/// The client and admin tokens of a benchmark cluster that checks them.
pub struct BenchTokens {
    pub client: Secret,
    pub admin: Secret,
}

impl BenchTokens {
    /// Fresh random tokens (the cluster listens on loopback only and lives
    /// for one benchmark).
    pub fn generate() -> Result<BenchTokens, SecretError> {
        let random = || format!("{:032x}", fastrand::u128(..));
        Ok(BenchTokens {
            client: Secret::new(&random(), "client token")?,
            admin: Secret::new(&random(), "admin token")?,
        })
    }

    /// Writes both tokens into `dir` as the nodes' token files.
    fn node_security(&self, dir: &Path) -> std::io::Result<NodeSecurity> {
        std::fs::create_dir_all(dir)?;
        let write = |name: &str, secret: &Secret| {
            let path = dir.join(name);
            std::fs::write(&path, secret.expose())?;
            Ok::<_, std::io::Error>(path)
        };
        Ok(NodeSecurity {
            client_token_file: Some(write("client-token", &self.client)?),
            admin_token_file: Some(write("admin-token", &self.admin)?),
            ..NodeSecurity::default()
        })
    }
}

/// Users and roles the `-users` systems are measured with: as many as a
/// shared cluster of a few teams might hold, so that resolving a token and
/// matching prefixes is not measured on an empty table.
pub const BENCH_USERS: usize = 20;
pub const BENCH_ROLES: usize = 50;

/// Adds [`BENCH_USERS`] users and [`BENCH_ROLES`] roles, each role granting
/// `lock` and `read` on a prefix of its own, three roles per user; the first
/// user's roles also cover the benchmark's names (`bench/`). Returns that
/// user's token.
pub async fn add_bench_users(admin: &Client) -> Result<Secret, ClientError> {
    for role in 0..BENCH_ROLES {
        let name = format!("team-{role:02}");
        admin.create_role(&name).await?;
        // The last role covers the benchmark's names.
        let prefix = if role + 1 == BENCH_ROLES { "bench/".to_string() } else { format!("{name}/") };
        for permission in [Permission::Lock, Permission::Read] {
            admin.grant(&name, permission, &prefix).await?;
        }
    }
    let mut first_token = None;
    for user in 0..BENCH_USERS {
        let name = format!("user-{user:02}");
        let created = admin.create_user(&name).await?;
        // Three distinct roles each: user u has roles u, u + 20 and 49 - u,
        // so user 0 has role 49, the one on `bench/`.
        for role in [user, user + BENCH_USERS, BENCH_ROLES - 1 - user] {
            admin.assign_role(&name, &format!("team-{role:02}")).await?;
        }
        first_token.get_or_insert(created.token);
    }
    let token = first_token.expect("BENCH_USERS > 0");
    Secret::new(&token, "user token").map_err(|e| ClientError::Decode(e.to_string()))
}

/// A local etcd cluster (Debian's etcd-server), each member with its own
/// data folder, client and peer port. Clients use the v3 JSON gateway.
pub struct EtcdCluster {
    binary: PathBuf,
    dir: PathBuf,
    /// `--initial-cluster`: every member's name and peer URL.
    initial_cluster: String,
    token: String,
    members: Vec<EtcdMember>,
    http: reqwest::Client,
}

/// One member: its name and ports, and its process while it runs.
struct EtcdMember {
    name: String,
    client: SocketAddr,
    peer: SocketAddr,
    process: Option<ServerProcess>,
}

impl EtcdMember {
    fn url(&self) -> String {
        format!("http://{}", self.client)
    }
}

impl EtcdCluster {
    /// Starts `n` members and waits until every one reports healthy.
    pub async fn start(dir: &Path, n: usize) -> Result<EtcdCluster, ServerError> {
        let binary = find_binary("etcd", "etcd-server")?;
        std::fs::create_dir_all(dir).map_err(etcd_spawn_error)?;
        let ports = LocalCluster::free_addrs(2 * n).map_err(etcd_spawn_error)?;
        let (clients, peers) = ports.split_at(n);
        let members: Vec<EtcdMember> = clients
            .iter()
            .zip(peers)
            .enumerate()
            .map(|(i, (client, peer))| EtcdMember {
                name: format!("e{}", i + 1),
                client: *client,
                peer: *peer,
                process: None,
            })
            .collect();
        let initial_cluster =
            members.iter().map(|m| format!("{}=http://{}", m.name, m.peer)).collect::<Vec<_>>().join(",");
        let mut cluster = EtcdCluster {
            binary,
            dir: dir.to_owned(),
            initial_cluster,
            token: format!("leasehold-bench-{}", std::process::id()),
            members,
            http: crate::http_client(),
        };
        for member in 0..n {
            cluster.spawn(member)?;
        }
        cluster.wait_healthy().await?;
        Ok(cluster)
    }

    /// Starts member `member`'s process. On a restart its data folder holds
    /// its WAL, and etcd then ignores the initial-cluster flags and rejoins.
    fn spawn(&mut self, member: usize) -> Result<(), ServerError> {
        let m = &self.members[member];
        let mut command = Command::new(&self.binary);
        command
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(self.dir.join(&m.name))
            .args(["--listen-client-urls", &m.url()])
            .args(["--advertise-client-urls", &m.url()])
            .args(["--listen-peer-urls", &format!("http://{}", m.peer)])
            .args(["--initial-advertise-peer-urls", &format!("http://{}", m.peer)])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", "new", "--initial-cluster-token", &self.token]);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", m.name)))
            .map_err(etcd_spawn_error)?;
        let process = ServerProcess::spawn_logging(&format!("etcd {}", m.name), &mut command, log, m.client)?;
        self.members[member].process = Some(process);
        Ok(())
    }

    /// PIDs of the running members.
    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().filter_map(|m| m.process.as_ref().map(ServerProcess::pid)).collect()
    }

    /// Every member's client URL, running or not, in member order.
    pub fn urls(&self) -> Vec<String> {
        self.members.iter().map(EtcdMember::url).collect()
    }

    /// kill -9 member `member` (an index into [`urls`](Self::urls)) and reap it.
    pub fn kill(&mut self, member: usize) {
        // Dropping the process kills it by PID.
        self.members[member].process = None;
    }

    /// Starts a killed member again, on its ports and data folder.
    pub fn restart(&mut self, member: usize) -> Result<(), ServerError> {
        match self.members[member].process {
            Some(_) => Ok(()),
            None => self.spawn(member),
        }
    }

    async fn wait_healthy(&self) -> Result<(), ServerError> {
        let give_up = Instant::now() + START_BOUND;
        for member in &self.members {
            loop {
                let reply = self.http.get(format!("{}/health", member.url())).send().await;
                let healthy = match reply {
                    Ok(r) => r.json::<Value>().await.is_ok_and(|v| v["health"] == "true"),
                    Err(_) => false,
                };
                if healthy {
                    break;
                }
                if Instant::now() > give_up {
                    return Err(ServerError::NotReady {
                        what: format!("etcd member {}", member.client),
                        bound: START_BOUND,
                        log: self.dir.display().to_string(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// Member `member`'s own view (`/v3/maintenance/status`).
    async fn status(&self, member: usize) -> Result<Value, ServerError> {
        let failed = |e: reqwest::Error| ServerError::Etcd(e.to_string());
        let url = self.members[member].url();
        self.http
            .post(format!("{url}/v3/maintenance/status"))
            .json(&json!({}))
            .send()
            .await
            .map_err(failed)?
            .json()
            .await
            .map_err(failed)
    }

    /// The member that says it leads (an index into [`urls`](Self::urls));
    /// members that do not answer (killed ones) are passed over.
    pub async fn leader(&self) -> Result<usize, ServerError> {
        for member in 0..self.members.len() {
            if let Ok(status) = self.status(member).await {
                if status["leader"].is_string() && status["leader"] == status["header"]["member_id"] {
                    return Ok(member);
                }
            }
        }
        Err(ServerError::Etcd("no member says it leads".into()))
    }

    /// The client URL of the current leader: the benchmark sends every etcd
    /// client there, sparing etcd the forwarding hop a follower would add.
    pub async fn leader_url(&self) -> Result<String, ServerError> {
        Ok(self.members[self.leader().await?].url())
    }

    /// Whether, within `bound`, every member answers, one leads, and every
    /// member has applied the leader's log as it was once the leader was
    /// found: the cluster is whole again after a member's restart.
    pub async fn wait_caught_up(&self, bound: Duration) -> bool {
        let give_up = Instant::now() + bound;
        let mut target = None;
        loop {
            if target.is_none() {
                if let Ok(leader) = self.leader().await {
                    target = self.status(leader).await.ok().and_then(|s| raft_index(&s, "raftIndex"));
                }
            }
            if let Some(index) = target {
                let mut applied = Vec::with_capacity(self.members.len());
                for member in 0..self.members.len() {
                    applied.push(self.status(member).await.ok().and_then(|s| raft_index(&s, "raftAppliedIndex")));
                }
                if applied.iter().all(|a| a.is_some_and(|a| a >= index)) {
                    return true;
                }
            }
            if Instant::now() > give_up {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A raft index of a status answer. etcd 3.4's gateway names these fields
/// in camelCase (its header's in snake_case) and writes a uint64 as a string.
fn raft_index(status: &Value, name: &str) -> Option<u64> {
    let field = &status[name];
    field.as_str().and_then(|s| s.parse().ok()).or_else(|| field.as_u64())
}

fn etcd_spawn_error(source: std::io::Error) -> ServerError {
    ServerError::Spawn { what: "etcd".into(), source }
}
