//! leasehold-local: a local cluster of `leasehold serve` processes on
//! 127.0.0.1, each with its own sled data folder. Used by `leasehold up`, the
//! integration tests and the lab (benchmark, fault suite, demo): a crate of
//! its own so the product and the lab share it without linking each other.
//! Every process is tracked by PID and only those PIDs are ever signalled;
//! dropping a [`LocalCluster`] kills what is still running.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use leasehold_client::{load_ca, Secret, SecretError};
use leasehold_client::{Client, Credentials};
use leasehold_proto::cluster::{ClusterStatus, NewMember};
use leasehold_proto::NodeId;

/// The secret and certificate files a local cluster's nodes are started
/// with, as `leasehold serve` flags (tokens given through the environment
/// reach the nodes by inheritance instead).
#[derive(Debug, Clone, Default)]
pub struct NodeSecurity {
    pub client_token_file: Option<PathBuf>,
    pub admin_token_file: Option<PathBuf>,
    pub cluster_secret_file: Option<PathBuf>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    /// `--client-trusted-ca`: the CA clients' certificates chain to.
    pub client_trusted_ca: Option<PathBuf>,
    pub peer_cert: Option<PathBuf>,
    pub peer_key: Option<PathBuf>,
    pub peer_trusted_ca: Option<PathBuf>,
}

impl NodeSecurity {
    /// The `leasehold serve` flags naming these files.
    pub fn serve_args(&self) -> Vec<std::ffi::OsString> {
        let flags = [
            ("--client-token-file", &self.client_token_file),
            ("--admin-token-file", &self.admin_token_file),
            ("--cluster-secret-file", &self.cluster_secret_file),
            ("--tls-cert-file", &self.tls_cert_file),
            ("--tls-key-file", &self.tls_key_file),
            ("--ca-file", &self.ca_file),
            ("--client-trusted-ca", &self.client_trusted_ca),
            ("--peer-cert", &self.peer_cert),
            ("--peer-key", &self.peer_key),
            ("--peer-trusted-ca", &self.peer_trusted_ca),
        ];
        flags
            .into_iter()
            .filter_map(|(flag, path)| Some([flag.into(), path.as_ref()?.clone().into_os_string()]))
            .flatten()
            .collect()
    }

    /// What a client of these nodes presents: the client token, else the
    /// admin token (which opens the client API too), else the cluster secret
    /// (which opens only the nodes' status, all that waiting for a leader
    /// needs), each from its file or variable as the nodes read it; and the
    /// CA. Once any secret is set, the nodes answer nothing but health
    /// without one.
    pub fn credentials(&self) -> Result<Credentials, SecretError> {
        let sources = [
            (&self.client_token_file, "LEASEHOLD_CLIENT_TOKEN", "client token"),
            (&self.admin_token_file, "LEASEHOLD_ADMIN_TOKEN", "admin token"),
            (&self.cluster_secret_file, "LEASEHOLD_CLUSTER_SECRET", "cluster secret"),
        ];
        let mut token = None;
        for (file, var, what) in sources {
            token = Secret::load(file.as_deref(), var, what)?;
            if token.is_some() {
                break;
            }
        }
        Ok(Credentials { token, ca: self.ca_file.as_deref().map(load_ca).transpose()?, identity: None })
    }
}

/// Where node output goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeLogs {
    /// To this process's stdout, each line prefixed with `[node N]`, or, for
    /// a JSON log line (`--log-format json`), with `"node": N` added to it.
    Prefixed,
    /// To `<data>/node<N>.log`.
    Files,
}

/// One node process of the cluster.
struct NodeProcess {
    id: NodeId,
    addr: SocketAddr,
    /// Its own peer port (`serve --peer-addr`); without one, the other
    /// nodes reach it on `addr`.
    peer_addr: Option<SocketAddr>,
    /// Command prefix the node runs under (e.g. `ip netns exec NS`); the
    /// prefix must exec the node so the PID stays the node's.
    launcher: Vec<String>,
    /// Extra environment (e.g. libfaketime's) from the node's next start on.
    env: Vec<(String, String)>,
    child: Option<Child>,
    /// The threads copying a [`NodeLogs::Prefixed`] node's output; they end
    /// when the node has exited and its last lines are printed.
    log_threads: Vec<JoinHandle<()>>,
}

#[derive(Debug, thiserror::Error)]
pub enum LocalClusterError {
    #[error("starting node {id}: {source}")]
    Spawn { id: NodeId, source: std::io::Error },
    #[error("no leader within {0:?}")]
    NoLeader(Duration),
    #[error("not every node answered within {0:?}")]
    NotAnswering(Duration),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("secrets: {0}")]
    Secret(#[from] SecretError),
}

/// `serve --worker-threads` as a variable: a value the caller set wins,
/// and so does a `--worker-threads` among [`LocalCluster::with_serve_args`].
const WORKER_THREADS: &str = "LEASEHOLD_WORKER_THREADS";

pub struct LocalCluster {
    binary: PathBuf,
    data: PathBuf,
    tick_ms: u64,
    logs: NodeLogs,
    /// More `leasehold serve` flags for every node.
    serve_args: Vec<String>,
    /// Token and TLS files of every node (no flags when empty).
    security: NodeSecurity,
    /// What [`client`](Self::client) presents: the client token, the CA.
    credentials: Credentials,
    /// Nodes 1..=initial form the cluster; later ids start empty and join
    /// through the admin API.
    initial: usize,
    /// `--initial-cluster-state` of the initial members (none: the flag is
    /// left out). `new` on every start: a node that has state ignores it.
    initial_cluster_state: Option<&'static str>,
    /// Start each node in a process group of its own (see
    /// [`with_own_process_groups`](Self::with_own_process_groups)).
    own_groups: bool,
    nodes: Vec<NodeProcess>,
}

impl LocalCluster {
    /// A cluster of `addrs.len()` nodes with ids 1..=n (not started yet).
    pub fn new(binary: &Path, data: &Path, addrs: &[SocketAddr], tick_ms: u64, logs: NodeLogs) -> Self {
        let nodes: Vec<NodeProcess> = addrs
            .iter()
            .enumerate()
            .map(|(i, addr)| NodeProcess {
                id: i as NodeId + 1,
                addr: *addr,
                peer_addr: None,
                launcher: Vec::new(),
                env: Vec::new(),
                child: None,
                log_threads: Vec::new(),
            })
            .collect();
        let initial = nodes.len();
        LocalCluster {
            binary: binary.to_owned(),
            data: data.to_owned(),
            tick_ms,
            logs,
            serve_args: Vec::new(),
            security: NodeSecurity::default(),
            credentials: Credentials::default(),
            initial,
            initial_cluster_state: Some("new"),
            own_groups: false,
            nodes,
        }
    }

    /// Starts every node in a process group of its own, so a Ctrl-C on the
    /// terminal reaches only this process, which then stops the nodes in the
    /// order it chooses (`leasehold up`: the leader first, so no follower
    /// vanishes under a replicating leader). Tests keep the default: nodes
    /// in the test's group die with it on Ctrl-C.
    pub fn with_own_process_groups(mut self) -> Self {
        self.own_groups = true;
        self
    }

    /// Only nodes 1..=`initial` form the cluster at first; the others start
    /// without `--peers`, uninitialized, to be added as learners.
    pub fn with_initial_members(mut self, initial: usize) -> Self {
        self.initial = initial.min(self.nodes.len());
        self
    }

    /// The initial members' `--initial-cluster-state` from their next start
    /// on (`None`: the flag is not given).
    pub fn set_initial_cluster_state(&mut self, state: Option<&'static str>) {
        self.initial_cluster_state = state;
    }

    /// Gives node i (from 1) the peer port `peer_addrs[i - 1]` (`serve
    /// --peer-addr`, and in the `--peers` of the initial members) from its
    /// next start on. A node joining later is then added with
    /// [`new_member`](Self::new_member).
    pub fn with_peer_addrs(mut self, peer_addrs: &[SocketAddr]) -> Self {
        for (node, peer_addr) in self.nodes.iter_mut().zip(peer_addrs) {
            node.peer_addr = Some(*peer_addr);
        }
        self
    }

    /// Passes `args` to every node's `leasehold serve` from its next start on.
    pub fn with_serve_args(mut self, args: &[&str]) -> Self {
        self.serve_args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    /// Runs node `id` under `prefix` (a program and its arguments, given the
    /// node's command line after them) from its next start on.
    pub fn set_launcher(&mut self, id: NodeId, prefix: Vec<String>) {
        self.node_mut(id).launcher = prefix;
    }

    /// Gives node `id` these extra environment variables from its next start on.
    pub fn set_env(&mut self, id: NodeId, env: Vec<(String, String)>) {
        self.node_mut(id).env = env;
    }

    /// Starts every node with these token and TLS files; the cluster's
    /// clients then trust its CA and send its client token.
    pub fn with_security(mut self, security: NodeSecurity) -> Result<Self, SecretError> {
        self.credentials = security.credentials()?;
        self.security = security;
        Ok(self)
    }

    /// `n` loopback addresses with ports that were free a moment ago.
    pub fn free_addrs(n: usize) -> std::io::Result<Vec<SocketAddr>> {
        let listeners = (0..n).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<Vec<_>, _>>()?;
        listeners.iter().map(|l| l.local_addr()).collect()
    }

    /// Ids of all nodes, started or not.
    pub fn ids(&self) -> Vec<NodeId> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// `host:port` of every node.
    pub fn endpoints(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr.to_string()).collect()
    }

    /// `host:port` of node `id`.
    pub fn endpoint(&self, id: NodeId) -> String {
        self.node(id).addr.to_string()
    }

    /// `host:port` of node `id`'s own peer port, if it has one.
    pub fn peer_endpoint(&self, id: NodeId) -> Option<String> {
        self.node(id).peer_addr.map(|a| a.to_string())
    }

    /// Node `id` as the admin API adds it (`POST /v1/cluster/learners`).
    pub fn new_member(&self, id: NodeId) -> NewMember {
        NewMember { id, addr: self.endpoint(id), peer_addr: self.peer_endpoint(id) }
    }

    pub fn data_dir(&self, id: NodeId) -> PathBuf {
        self.data.join(format!("node{id}"))
    }

    /// PID of node `id` while it runs.
    pub fn pid(&self, id: NodeId) -> Option<u32> {
        self.node(id).child.as_ref().map(|c| c.id())
    }

    /// Each node's share of this machine's CPUs (at least one thread): the
    /// nodes of a local cluster compete for the same cores, and one runtime
    /// thread per core each would mostly trade wake-ups across threads.
    fn worker_threads(&self) -> usize {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cpus / self.nodes.len().max(1)).max(1)
    }

    /// Starts every node that is not running.
    pub fn start_all(&mut self) -> Result<(), LocalClusterError> {
        for id in self.ids() {
            if self.pid(id).is_none() {
                self.start(id)?;
            }
        }
        Ok(())
    }

    /// Starts node `id`; on its first start, the node with the lowest id
    /// initializes the cluster from the initial member list (with the
    /// default `--initial-cluster-state new`).
    pub fn start(&mut self, id: NodeId) -> Result<(), LocalClusterError> {
        let initial = &self.nodes[..self.initial];
        let member = |n: &NodeProcess| match n.peer_addr {
            Some(peer_addr) => format!("{}={}@{peer_addr}", n.id, n.addr),
            None => format!("{}={}", n.id, n.addr),
        };
        let peers = initial.iter().map(member).collect::<Vec<_>>().join(",");
        let joins_later = !initial.iter().any(|n| n.id == id);
        let data = self.data_dir(id);
        std::fs::create_dir_all(&data)?;
        let node = self.node(id);
        let addr = node.addr;
        let mut command = match node.launcher.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&self.binary);
                command
            }
            None => Command::new(&self.binary),
        };
        if std::env::var_os(WORKER_THREADS).is_none() {
            command.env(WORKER_THREADS, self.worker_threads().to_string());
        }
        command
            .envs(node.env.iter().map(|(k, v)| (k, v)))
            .arg("serve")
            .args(["--id", &id.to_string()])
            .args(["--addr", &addr.to_string()])
            .args(node.peer_addr.map(|a| ["--peer-addr".to_owned(), a.to_string()]).into_iter().flatten())
            .arg("--data")
            .arg(&data)
            .args(["--tick-ms", &self.tick_ms.to_string()])
            .args(if joins_later { vec![] } else { vec!["--peers", &peers] })
            .args(match self.initial_cluster_state {
                Some(state) if !joins_later => vec!["--initial-cluster-state", state],
                _ => vec![],
            })
            .args(&self.serve_args)
            .args(self.security.serve_args())
            .stdin(Stdio::null());
        match self.logs {
            NodeLogs::Files => {
                let log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.data.join(format!("node{id}.log")))?;
                command.stdout(log.try_clone()?).stderr(log);
            }
            NodeLogs::Prefixed => {
                command.stdout(Stdio::piped()).stderr(Stdio::piped());
            }
        }
        if self.own_groups {
            command.process_group(0);
        }
        let mut child = command.spawn().map_err(|source| LocalClusterError::Spawn { id, source })?;
        let mut log_threads = Vec::new();
        if self.logs == NodeLogs::Prefixed {
            let out = child.stdout.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>);
            let err = child.stderr.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>);
            for stream in [out, err].into_iter().flatten() {
                log_threads.push(std::thread::spawn(move || {
                    for line in BufReader::new(stream).lines().map_while(Result::ok) {
                        println!("{}", label_line(id, line));
                    }
                }));
            }
        }
        let node = self.node_mut(id);
        node.child = Some(child);
        node.log_threads = log_threads;
        Ok(())
    }

    /// Node `id`'s exit status once its process has ended (reaped then).
    pub fn exited(&mut self, id: NodeId) -> Option<std::process::ExitStatus> {
        let node = self.node_mut(id);
        let status = node.child.as_mut()?.try_wait().ok()??;
        node.child = None;
        Some(status)
    }

    /// Sends `signal` to node `id` (e.g. SIGSTOP, SIGCONT) if it runs.
    pub fn signal(&self, id: NodeId, signal: Signal) {
        if let Some(pid) = self.pid(id) {
            let _ = kill(Pid::from_raw(pid as i32), signal);
        }
    }

    /// kill -9 node `id` and reap it.
    pub fn kill(&mut self, id: NodeId) {
        if let Some(mut child) = self.node_mut(id).child.take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
    }

    /// Stops node `id` as [`stop_all`](Self::stop_all) stops every node.
    pub fn stop(&mut self, id: NodeId, grace: Duration) {
        let node = self.node_mut(id);
        let children: Vec<Child> = node.child.take().into_iter().collect();
        let log_threads = std::mem::take(&mut node.log_threads);
        stop_children(children, log_threads, grace);
    }

    /// Stops every node: SIGTERM, then SIGKILL for those still running after
    /// `grace`; returns once their last output lines are printed.
    pub fn stop_all(&mut self, grace: Duration) {
        let children: Vec<Child> = self.nodes.iter_mut().filter_map(|n| n.child.take()).collect();
        let log_threads = self.nodes.iter_mut().flat_map(|n| std::mem::take(&mut n.log_threads)).collect();
        stop_children(children, log_threads, grace);
    }

    /// A client for every node of the cluster, with the client token.
    pub fn client(&self) -> Client {
        self.client_as(self.credentials.token.clone())
    }

    /// A client for every node of the cluster that sends `token` (none:
    /// no `authorization` header) and trusts the cluster's CA.
    pub fn client_as(&self, token: Option<Secret>) -> Client {
        let credentials = Credentials { token, ..self.credentials.clone() };
        Client::with_credentials(&self.endpoints(), &credentials).expect("loopback endpoints are valid")
    }

    /// The statuses of the running nodes that answer.
    pub async fn statuses(&self) -> BTreeMap<NodeId, ClusterStatus> {
        let client = self.client();
        let mut out = BTreeMap::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if node.child.is_some() {
                if let Ok(status) = client.status_of(i).await {
                    out.insert(node.id, status);
                }
            }
        }
        out
    }

    /// Waits until every running node answers its status endpoint.
    pub async fn wait_answering(&self, timeout: Duration) -> Result<(), LocalClusterError> {
        let give_up = Instant::now() + timeout;
        let running = self.nodes.iter().filter(|n| n.child.is_some()).count();
        while self.statuses().await.len() < running {
            if Instant::now() >= give_up {
                return Err(LocalClusterError::NotAnswering(timeout));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Waits until a running node leads, every running node that answers
    /// agrees on it, and it has ticked once (so it serves requests). Returns
    /// the leader's id.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<NodeId, LocalClusterError> {
        let give_up = Instant::now() + timeout;
        while Instant::now() < give_up {
            let statuses = self.statuses().await;
            let leaders: Vec<NodeId> = statuses.values().filter(|s| s.role == "leader").map(|s| s.id).collect();
            if let [leader] = leaders[..] {
                let agreed = statuses.values().all(|s| s.leader == Some(leader));
                let running = self.nodes.iter().any(|n| n.id == leader && n.child.is_some());
                if agreed && running && statuses[&leader].tick > 0 {
                    return Ok(leader);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(LocalClusterError::NoLeader(timeout))
    }

    fn node(&self, id: NodeId) -> &NodeProcess {
        self.nodes.iter().find(|n| n.id == id).expect("node id of this cluster")
    }

    fn node_mut(&mut self, id: NodeId) -> &mut NodeProcess {
        self.nodes.iter_mut().find(|n| n.id == id).expect("node id of this cluster")
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for id in self.ids() {
            self.kill(id);
        }
    }
}

/// SIGTERM to `children`, SIGKILL to those still running after `grace`;
/// then waits for their output to be copied.
fn stop_children(mut children: Vec<Child>, log_threads: Vec<JoinHandle<()>>, grace: Duration) {
    for child in &children {
        // A stopped (SIGSTOP) process must be continued to act on SIGTERM.
        let pid = Pid::from_raw(child.id() as i32);
        let _ = kill(pid, Signal::SIGTERM);
        let _ = kill(pid, Signal::SIGCONT);
    }
    let give_up = Instant::now() + grace;
    for child in &mut children {
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(child.try_wait(), Ok(None)) {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        }
        let _ = child.wait();
    }
    for thread in log_threads {
        let _ = thread.join();
    }
}

/// A node's output line as [`NodeLogs::Prefixed`] prints it.
fn label_line(id: NodeId, line: String) -> String {
    match serde_json::from_str::<serde_json::Value>(&line) {
        Ok(serde_json::Value::Object(mut event)) => {
            event.insert("node".to_string(), id.into());
            serde_json::Value::Object(event).to_string()
        }
        _ => format!("[node {id}] {line}"),
    }
}
