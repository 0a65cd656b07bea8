//! The `leasehold` binary: parses arguments and calls into the library.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use leasehold::api::{self, RequestLimits};
use leasehold::chaos::nemesis::FaultKind;
use leasehold::chaos::{self, ChaosOptions};
use leasehold::client::{AcquireOptions, Client, Credentials};
use leasehold::compare::holder::{self, HolderOptions, SystemSpec};
use leasehold::compare::safety::{self, SafetyOptions};
use leasehold::compare::{self, CompareOptions, SystemKind, Workload};
use leasehold::local::{LocalCluster, NodeLogs};
use leasehold::node::{self, NodeConfig};
use leasehold::run::{self, RunOptions};
use leasehold::scale::{self, ScaleOptions};
use leasehold::security::{self, Secret, SecurityFiles};
use leasehold::server::{self, ConnectionLimits};

#[derive(Parser)]
#[command(name = "leasehold", version, about = "A Raft-replicated lease lock service with fencing tokens")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one node.
    Serve(ServeArgs),
    /// Run a local cluster on 127.0.0.1 (node i on port-base + i) until Ctrl-C.
    Up(UpArgs),
    /// Acquire a lock; prints the grant with its fencing token.
    Acquire {
        #[command(flatten)]
        target: Target,
        name: String,
        /// Holder identity; must be unique per holder.
        #[arg(long)]
        owner: String,
        #[arg(long, default_value_t = 10_000)]
        ttl_ms: u64,
        /// Wait up to this long in the lock's queue when it is held.
        #[arg(long)]
        wait_ms: Option<u64>,
        #[arg(long)]
        request_id: Option<String>,
    },
    /// Renew a lease under its token.
    Renew {
        #[command(flatten)]
        target: Target,
        name: String,
        #[arg(long)]
        token: u64,
        #[arg(long)]
        ttl_ms: Option<u64>,
    },
    /// Release a lock under its token.
    Release {
        #[command(flatten)]
        target: Target,
        name: String,
        #[arg(long)]
        token: u64,
    },
    /// Show a lock (linearizable read); exits 1 when it is free.
    Get {
        #[command(flatten)]
        target: Target,
        name: String,
    },
    /// List held locks.
    List {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value = "")]
        prefix: String,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Ask whether a token is the current one of a lock (linearizable).
    Check {
        #[command(flatten)]
        target: Target,
        lock: String,
        #[arg(long)]
        token: u64,
    },
    /// Write a fenced record: applied only if the token is current for the lock.
    PutRecord {
        #[command(flatten)]
        target: Target,
        key: String,
        #[arg(long)]
        lock: String,
        #[arg(long)]
        token: u64,
        /// The value, as JSON (e.g. '"settled"' or '{"amount":5}').
        #[arg(long)]
        value: String,
    },
    /// Read a fenced record; exits 1 when there is none.
    GetRecord {
        #[command(flatten)]
        target: Target,
        key: String,
    },
    /// Pass a token through a resource's gate (admitted if not lower than any before).
    Gate {
        #[command(flatten)]
        target: Target,
        resource: String,
        #[arg(long)]
        lock: String,
        #[arg(long)]
        token: u64,
    },
    /// Cluster membership: list, add (as learner), promote, remove.
    Member {
        #[command(flatten)]
        target: Target,
        #[command(subcommand)]
        action: MemberAction,
    },
    /// Back up a node: it takes a snapshot now, written to --out (the first of --endpoints).
    Backup {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        out: PathBuf,
    },
    /// Seed the empty data folder of a node of a NEW cluster from a backup.
    /// Run it for every node with the same file and --peers, then start the
    /// nodes (without --peers). See cluster/README.md.
    Restore {
        /// A file written by `leasehold backup`.
        #[arg(long)]
        from: PathBuf,
        /// The new node's data folder (must be empty or absent).
        #[arg(long)]
        data: PathBuf,
        /// The new cluster's voters, `id=host:port,...`.
        #[arg(long, value_delimiter = ',', required = true)]
        peers: Vec<String>,
        /// Continue log indexes (fencing tokens) above this, e.g. the highest
        /// token any resource has seen, when the backup may miss grants.
        #[arg(long, default_value_t = 0)]
        min_index: u64,
    },
    /// Show every endpoint's view of the cluster.
    Status {
        #[command(flatten)]
        target: Target,
    },
    /// Run a command while holding a lock; stop it if the lock is lost.
    Run(RunArgs),
    /// Measure lock cycles/s and latency: leasehold against Redis, Redlock and etcd.
    Bench(BenchArgs),
    /// The fault suite: faults under load, judged by the history checker.
    Chaos(ChaosArgs),
    /// One lock holder of `bench --safety`, a process the harness can SIGSTOP.
    #[command(hide = true)]
    SafetyHolder(HolderArgs),
    /// Demonstrations: `demo payments` (fencing tokens vs. a paused worker).
    Demo {
        #[command(subcommand)]
        demo: leasehold::demo::DemoCmd,
    },
}

#[derive(Subcommand)]
enum MemberAction {
    /// Members with their roles, as the answering node sees them.
    List,
    /// Add a node as a learner; returns once it has caught up.
    Add { id: u64, addr: String },
    /// Make a learner a voter (refused if a quorum of the new voters is not reachable).
    Promote { id: u64 },
    /// Remove a voter or learner (refused if the remaining voters could not form a quorum).
    Remove { id: u64 },
}

#[derive(Args)]
struct Target {
    /// Any nodes of the cluster, comma-separated host:port.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_ENDPOINTS",
        value_delimiter = ',',
        default_value = "127.0.0.1:7701,127.0.0.1:7702,127.0.0.1:7703"
    )]
    endpoints: Vec<String>,
    #[command(flatten)]
    credentials: CredentialFiles,
}

/// What a client presents to a cluster with auth or TLS on.
#[derive(Args)]
struct CredentialFiles {
    /// CA certificate (PEM) of https nodes; endpoints without a scheme are then https.
    #[arg(long, global = true, env = "LEASEHOLD_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// File holding the bearer token to send (or set $LEASEHOLD_TOKEN).
    #[arg(long, global = true, env = "LEASEHOLD_TOKEN_FILE")]
    token_file: Option<PathBuf>,
}

impl CredentialFiles {
    fn load(&self) -> Result<Credentials> {
        Ok(Credentials {
            token: Secret::load(self.token_file.as_deref(), "LEASEHOLD_TOKEN", "token")?,
            ca: self.ca_file.as_deref().map(security::load_ca).transpose()?,
        })
    }
}

#[derive(Args)]
struct ServeArgs {
    /// This node's id (a positive integer, unique in the cluster).
    #[arg(long, env = "LEASEHOLD_ID")]
    id: u64,
    /// host:port that peers and clients use to reach this node.
    #[arg(long, env = "LEASEHOLD_ADDR")]
    addr: String,
    /// Address to bind (defaults to --addr).
    #[arg(long, env = "LEASEHOLD_LISTEN")]
    listen: Option<SocketAddr>,
    /// Data folder (sled database).
    #[arg(long, env = "LEASEHOLD_DATA")]
    data: PathBuf,
    /// Leader tick period in milliseconds.
    #[arg(long, env = "LEASEHOLD_TICK_MS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(10..=10_000))]
    tick_ms: u64,
    /// Initial cluster, `id=host:port,...`. The node with the lowest id
    /// initializes the cluster on its first start.
    #[arg(long, env = "LEASEHOLD_PEERS", value_delimiter = ',')]
    peers: Vec<String>,
    /// Log entries between snapshots (the log is purged behind each one).
    #[arg(long, env = "LEASEHOLD_SNAPSHOT_EVERY", default_value_t = node::DEFAULT_SNAPSHOT_EVERY,
          value_parser = clap::value_parser!(u64).range(100..))]
    snapshot_every: u64,
    #[command(flatten)]
    security: SecurityFiles,
    /// Time a client has to send a request head; also closes idle connections.
    #[arg(long, env = "LEASEHOLD_HEADER_READ_TIMEOUT_MS",
          default_value_t = server::DEFAULT_HEADER_READ_TIMEOUT.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    header_read_timeout_ms: u64,
    /// Time to receive a request and answer it (an acquire's wait_ms and event streams excepted).
    #[arg(long, env = "LEASEHOLD_REQUEST_TIMEOUT_MS",
          default_value_t = api::DEFAULT_REQUEST_TIMEOUT.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    request_timeout_ms: u64,
    /// Connections open at once; more are closed at once.
    #[arg(long, env = "LEASEHOLD_MAX_CONNECTIONS", default_value_t = server::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_connections: usize,
    /// Client and admin requests served at once; more are answered 503 overloaded.
    #[arg(long, env = "LEASEHOLD_MAX_IN_FLIGHT", default_value_t = api::DEFAULT_MAX_IN_FLIGHT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_in_flight: usize,
}

#[derive(Args)]
struct UpArgs {
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=7))]
    nodes: u16,
    #[arg(long, default_value = "./data")]
    data: PathBuf,
    #[arg(long, default_value_t = 7700)]
    port_base: u16,
    #[arg(long, default_value_t = 100)]
    tick_ms: u64,
    #[command(flatten)]
    security: SecurityFiles,
}

/// `leasehold run --lock NAME [--ttl 10s] [--wait 30s] -- CMD ARGS...`: the
/// command gets LEASEHOLD_LOCK, LEASEHOLD_TOKEN and LEASEHOLD_OWNER. Exit
/// status: the command's (128 + signal when killed), 2 when the lock could
/// not be acquired, 3 when it was lost (the command is then stopped).
#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    target: Target,
    /// Lock to hold while the command runs.
    #[arg(long)]
    lock: String,
    /// Lease ttl, renewed every ttl/3 (e.g. 10s, 500ms, 2m).
    #[arg(long, default_value = "10s", value_parser = run::parse_duration)]
    ttl: Duration,
    /// Wait up to this long for the lock when it is held (default: fail at once).
    #[arg(long, value_parser = run::parse_duration)]
    wait: Option<Duration>,
    /// Holder identity (default: hostname-pid-random).
    #[arg(long)]
    owner: Option<String>,
    /// Time between SIGTERM and SIGKILL when the lock is lost.
    #[arg(long, default_value = "5s", value_parser = run::parse_duration)]
    grace: Duration,
    /// Safety margin subtracted from every lease for clock drift (default: ttl/10).
    #[arg(long, value_parser = run::parse_duration)]
    drift_margin: Option<Duration>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<OsString>,
}

/// `leasehold bench`: starts every system's servers itself (by PID, on
/// 127.0.0.1), alternates them inside each run, and writes `latest.json`,
/// `README.md` and SVG plots into `--out`.
#[derive(Args)]
struct BenchArgs {
    /// Systems to compare: leasehold-N (a local N-node cluster), redis,
    /// redis-aof, redlock, etcd, etcd-session. Default: all of them, or
    /// leasehold-<--nodes> alone when only --nodes is given.
    #[arg(long, value_delimiter = ',')]
    systems: Vec<SystemKind>,
    /// Benchmark an existing leasehold cluster (system `leasehold`) instead;
    /// with auth or TLS on, give it --token-file and --ca-file.
    #[arg(long, value_delimiter = ',')]
    endpoints: Vec<String>,
    // Used for --endpoints only: the clusters the bench starts have no auth.
    #[command(flatten)]
    credentials: CredentialFiles,
    /// Nodes of the local leasehold cluster, when --systems is not given.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=7))]
    nodes: Option<u64>,
    /// Concurrent clients on distinct names, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    clients: Vec<usize>,
    /// Concurrent clients on the one hot name, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    hot_clients: Vec<usize>,
    /// distinct: a lock per client; hot: all clients on one lock.
    #[arg(long, value_delimiter = ',', default_value = "distinct,hot")]
    workloads: Vec<Workload>,
    /// Measured seconds per (system, workload, clients, run).
    #[arg(long, default_value_t = 10)]
    duration_secs: u64,
    /// Unmeasured warm-up before each measurement.
    #[arg(long, default_value_t = 1000)]
    warmup_ms: u64,
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1_000..=600_000))]
    ttl_ms: u64,
    /// Folder for latest.json, README.md and the SVG plots.
    #[arg(long, default_value = "benches/results")]
    out: PathBuf,
    /// Instead of lock cycles: have a local cluster hold this many live
    /// leases and report Tick apply time, memory per lease, disk, and
    /// snapshot size and build/install time (scale.json, scale.md).
    #[arg(long)]
    bulk: Option<u64>,
    /// Concurrent clients creating the --bulk leases.
    #[arg(long, default_value_t = 128)]
    bulk_clients: usize,
    /// Instead of lock cycles: every system under faults (paused holder,
    /// clock jump, failover, paused leader), counting safety violations
    /// (safety.json, safety.md, a section of README.md).
    #[arg(long, conflicts_with_all = ["bulk", "endpoints"])]
    safety: bool,
    /// The lock ttl of the --safety run (leasehold takes 3 s at least).
    #[arg(long, default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(3_000..=60_000))]
    safety_ttl_ms: u64,
}

/// `leasehold safety-holder`: acquire → write to both resources → hold →
/// write → release, reporting JSON lines on stdout.
#[derive(Args)]
struct HolderArgs {
    /// KIND=ADDRESSES: leasehold=URL,..., redis=IP:PORT, redlock=IP:PORT,..., etcd=URL.
    #[arg(long)]
    system: SystemSpec,
    #[arg(long)]
    lock: String,
    #[arg(long)]
    client: String,
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    ttl_ms: u64,
    #[arg(long, default_value_t = 0)]
    wait_ms: u64,
    #[arg(long, default_value_t = 0)]
    hold_ms: u64,
    #[arg(long, default_value_t = 1)]
    cycles: u32,
    /// Base URL of the fenced resource.
    #[arg(long)]
    fenced: String,
    /// Base URL of the unfenced resource.
    #[arg(long)]
    unfenced: String,
}

/// Voters of the fault suite's cluster.
#[derive(Clone, Copy, clap::ValueEnum)]
enum ClusterSize {
    #[value(name = "3")]
    Three,
    #[value(name = "5")]
    Five,
}

#[derive(Args)]
struct ChaosArgs {
    /// Keep injecting faults for this long (one full round at least).
    #[arg(long, default_value_t = 5)]
    minutes: u64,
    #[arg(long, value_enum, default_value = "3")]
    nodes: ClusterSize,
    /// Concurrent workload clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Faults of a round, comma-separated (default: all, in this order).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kill-leader,kill-follower,kill-all,pause-leader,partition-leader,lossy-links,paused-client,clock-forward,clock-back,membership"
    )]
    faults: Vec<FaultKind>,
    /// How long each fault lasts.
    #[arg(long, default_value = "4s", value_parser = run::parse_duration)]
    hold: Duration,
    /// Quiet time after each fault.
    #[arg(long, default_value = "5s", value_parser = run::parse_duration)]
    quiet: Duration,
    /// Run on loopback even when network namespaces are available.
    #[arg(long)]
    loopback: bool,
    /// Folder for chaos.md, chaos.json, timeline.svg, history.json and node data.
    #[arg(long, default_value = "./chaos-results")]
    out: PathBuf,
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,openraft=warn,sled=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().context("tokio runtime")?;
    runtime.block_on(run(cli.command))
}

async fn run(command: Cmd) -> Result<()> {
    match command {
        Cmd::Serve(args) => serve(args).await,
        Cmd::Up(args) => up(args).await,
        Cmd::Acquire { target, name, owner, ttl_ms, wait_ms, request_id } => {
            let options = AcquireOptions { wait: wait_ms.map(Duration::from_millis), request_id };
            print(&client(&target)?.acquire_with(&name, &owner, ttl_ms, &options).await?.grant)
        }
        Cmd::Renew { target, name, token, ttl_ms } => print(&client(&target)?.renew(&name, token, ttl_ms).await?.grant),
        Cmd::Release { target, name, token } => {
            client(&target)?.release(&name, token).await?;
            print(&serde_json::json!({ "name": name, "token": token, "released": true }))
        }
        Cmd::Get { target, name } => match client(&target)?.get(&name).await? {
            Some(view) => print(&view),
            None => bail!("lock {name:?} is not held"),
        },
        Cmd::List { target, prefix, limit } => print(&client(&target)?.list(&prefix, limit).await?),
        Cmd::Check { target, lock, token } => {
            let (current, current_token) = client(&target)?.check(&lock, token).await?;
            print(&serde_json::json!({ "lock": lock, "current": current, "token": current_token }))
        }
        Cmd::PutRecord { target, key, lock, token, value } => {
            let value: serde_json::Value = serde_json::from_str(&value).context("--value is not JSON")?;
            let index = client(&target)?.put_record(&key, &lock, token, &value).await?;
            print(&serde_json::json!({ "key": key, "lock": lock, "token": token, "index": index }))
        }
        Cmd::GetRecord { target, key } => match client(&target)?.get_record(&key).await? {
            Some(record) => print(&record),
            None => bail!("no record {key:?}"),
        },
        Cmd::Gate { target, resource, lock, token } => {
            client(&target)?.gate(&resource, &lock, token).await?;
            print(&serde_json::json!({ "resource": resource, "lock": lock, "token": token, "admitted": true }))
        }
        Cmd::Member { target, action } => {
            let client = client(&target)?;
            let log_index = match action {
                MemberAction::List => return print(&client.status().await?.members),
                MemberAction::Add { id, addr } => client.add_learner(id, &addr).await?,
                MemberAction::Promote { id } => client.promote(id).await?,
                MemberAction::Remove { id } => client.remove_member(id).await?,
            };
            print(&serde_json::json!({ "log_index": log_index, "members": client.status().await?.members }))
        }
        Cmd::Backup { target, out } => {
            let (taken, backup) = client(&target)?.backup_of(0).await?;
            std::fs::write(&out, &backup).with_context(|| format!("writing {}", out.display()))?;
            print(
                &serde_json::json!({ "node": target.endpoints[0], "file": out, "bytes": backup.len(), "snapshot": taken }),
            )
        }
        Cmd::Restore { from, data, peers, min_index } => {
            let backup = std::fs::read(&from).with_context(|| format!("reading {}", from.display()))?;
            let last = leasehold::raft::restore(&data, &backup, &parse_peers(&peers)?, min_index).await?;
            print(
                &serde_json::json!({ "data": data, "continues_after_index": last.index, "term": last.leader_id.term }),
            )
        }
        Cmd::Status { target } => {
            let client = client(&target)?;
            let mut statuses = Vec::new();
            for (i, endpoint) in target.endpoints.iter().enumerate() {
                statuses.push(match client.status_of(i).await {
                    Ok(s) => serde_json::to_value(s)?,
                    Err(e) => serde_json::json!({ "endpoint": endpoint, "error": e.to_string() }),
                });
            }
            print(&statuses)
        }
        Cmd::Run(args) => std::process::exit(run_locked(args).await),
        Cmd::Bench(args) => run_bench(args).await,
        Cmd::SafetyHolder(args) => run_holder(args).await,
        Cmd::Chaos(args) => run_chaos(args).await,
        Cmd::Demo { demo } => std::process::exit(leasehold::demo::run(demo).await),
    }
}

/// `id=host:port` pairs as given to `--peers`.
fn parse_peers(peers: &[String]) -> Result<BTreeMap<u64, String>> {
    let mut members = BTreeMap::new();
    for peer in peers {
        let (id, addr) = peer.split_once('=').with_context(|| format!("peer {peer:?} is not id=host:port"))?;
        members.insert(id.parse().with_context(|| format!("peer id {id:?}"))?, addr.to_string());
    }
    Ok(members)
}

fn client(target: &Target) -> Result<Client> {
    Ok(Client::with_credentials(&target.endpoints, &target.credentials.load()?)?)
}

/// Prints `value` as JSON. A closed stdout (`leasehold list | head`) is not
/// an error.
fn print<T: Serialize>(value: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{}", serde_json::to_string_pretty(value)?) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

async fn serve(args: ServeArgs) -> Result<()> {
    let listen = match args.listen {
        Some(l) => l,
        None => args.addr.parse().with_context(|| format!("--addr {} is not ip:port; give --listen", args.addr))?,
    };
    let initial_members = parse_peers(&args.peers)?;
    if !initial_members.is_empty() && !initial_members.contains_key(&args.id) {
        bail!("--peers does not list this node's id {}", args.id);
    }
    let secrets = args.security.secrets()?;
    if args.security.tls() && args.security.ca_file.is_none() {
        tracing::warn!("TLS without --ca-file: the other nodes' certificates must chain to a built-in root");
    }
    let config = NodeConfig {
        id: args.id,
        listen,
        advertise: args.addr,
        data_dir: args.data,
        tick_ms: args.tick_ms,
        initial_members,
        snapshot_every: args.snapshot_every,
        secrets,
        tls: args.security.server_tls()?,
        peer_ca: args.security.ca()?,
        connection_limits: ConnectionLimits {
            header_read_timeout: Duration::from_millis(args.header_read_timeout_ms),
            max_connections: args.max_connections,
        },
        request_limits: RequestLimits {
            timeout: Duration::from_millis(args.request_timeout_ms),
            max_in_flight: args.max_in_flight,
        },
    };
    node::run(config, shutdown_signal()).await?;
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler installs");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

async fn up(args: UpArgs) -> Result<()> {
    let addrs: Vec<SocketAddr> =
        (1..=args.nodes).map(|i| SocketAddr::from(([127, 0, 0, 1], args.port_base + i))).collect();
    let binary = std::env::current_exe().context("locating the leasehold binary")?;
    std::fs::create_dir_all(&args.data)?;
    let mut cluster = LocalCluster::new(&binary, &args.data, &addrs, args.tick_ms, NodeLogs::Prefixed)
        .with_security(args.security.clone())?;
    cluster.start_all()?;
    let pids: Vec<String> = cluster.ids().iter().map(|id| format!("{id} {}", cluster.pid(*id).unwrap_or(0))).collect();
    std::fs::write(args.data.join("pids"), pids.join("\n") + "\n")?;
    let endpoints = cluster.endpoints().join(",");
    match cluster.wait_for_leader(Duration::from_secs(30)).await {
        Ok(leader) => {
            println!("leasehold: {} nodes up, leader is node {leader}, data in {}", args.nodes, args.data.display());
            println!("leasehold: endpoints {endpoints}");
            println!("leasehold: try  {}", try_curl(&args.security, &cluster.endpoint(1)));
        }
        Err(e) => println!("leasehold: {e}; nodes keep running, see their logs"),
    }
    println!("leasehold: Ctrl-C stops the nodes");
    shutdown_signal().await;
    println!("leasehold: stopping nodes");
    cluster.stop_all(Duration::from_secs(5));
    Ok(())
}

/// A curl command line that acquires a lock on `endpoint`, with the CA and
/// token options the cluster needs.
fn try_curl(security: &SecurityFiles, endpoint: &str) -> String {
    let mut curl = String::from("curl -s");
    let scheme = match &security.ca_file {
        Some(ca) if security.tls() => {
            curl += &format!(" --cacert {}", ca.display());
            "https"
        }
        _ if security.tls() => "https",
        _ => "http",
    };
    if let Some(file) = &security.client_token_file {
        curl += &format!(" -H \"authorization: Bearer $(cat {})\"", file.display());
    } else if std::env::var_os("LEASEHOLD_CLIENT_TOKEN").is_some() {
        curl += " -H \"authorization: Bearer $LEASEHOLD_CLIENT_TOKEN\"";
    }
    curl + &format!(
        " -XPOST {scheme}://{endpoint}/v1/locks/demo/acquire -d '{{\"owner\":\"me\",\"ttl_ms\":10000}}' -H 'content-type: application/json'"
    )
}

/// `leasehold run`; returns the exit status.
async fn run_locked(args: RunArgs) -> i32 {
    let credentials = match args.target.credentials.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("leasehold run: {e}");
            return run::EXIT_ACQUIRE_FAILED;
        }
    };
    let options = RunOptions {
        credentials,
        endpoints: args.target.endpoints,
        lock: args.lock,
        ttl: args.ttl,
        wait: args.wait,
        owner: args.owner,
        drift_margin: args.drift_margin,
        grace: args.grace,
        command: args.command,
    };
    run::run(&options).await
}

async fn run_bench(args: BenchArgs) -> Result<()> {
    if let Some(leases) = args.bulk {
        let options = ScaleOptions {
            binary: std::env::current_exe().context("locating the leasehold binary")?,
            nodes: args.nodes.unwrap_or(3) as usize,
            leases,
            clients: args.bulk_clients,
            out: args.out,
        };
        let report = scale::run(&options).await?;
        println!("{}", scale::markdown(&report));
        eprintln!("bench: results in {}", options.out.display());
        return Ok(());
    }
    let systems = match (args.systems.is_empty(), args.nodes) {
        (false, _) => args.systems.clone(),
        (true, Some(nodes)) => vec![SystemKind::Leasehold(nodes as usize)],
        (true, None) => SystemKind::ALL.to_vec(),
    };
    if args.safety {
        let options = SafetyOptions {
            systems: match (args.systems.is_empty(), args.nodes) {
                (true, None) => safety::DEFAULT_SYSTEMS.to_vec(),
                _ => systems,
            },
            binary: std::env::current_exe().context("locating the leasehold binary")?,
            ttl: Duration::from_millis(args.safety_ttl_ms),
            out: args.out,
            command: std::env::args().collect::<Vec<_>>().join(" "),
        };
        let report = safety::run(&options).await?;
        println!("{}", report.markdown());
        if report.leasehold_violations() > 0 {
            bail!("leasehold: {} safety violations", report.leasehold_violations());
        }
        return Ok(());
    }
    // Loaded only for an existing cluster: a token in the environment must
    // not stop a run against the bench's own clusters.
    let credentials = if args.endpoints.is_empty() { Credentials::default() } else { args.credentials.load()? };
    let options = CompareOptions {
        systems,
        endpoints: args.endpoints,
        credentials,
        binary: std::env::current_exe().context("locating the leasehold binary")?,
        workloads: args.workloads,
        clients: args.clients,
        hot_clients: args.hot_clients,
        runs: args.runs as usize,
        warmup: Duration::from_millis(args.warmup_ms),
        duration: Duration::from_secs(args.duration_secs),
        ttl: Duration::from_millis(args.ttl_ms),
        out: args.out,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let report = compare::run(&options).await?;
    println!("{}", std::fs::read_to_string(options.out.join("README.md"))?);
    if report.rows.is_empty() {
        bail!("no system could be measured");
    }
    Ok(())
}

async fn run_holder(args: HolderArgs) -> Result<()> {
    let options = HolderOptions {
        system: args.system,
        lock: args.lock,
        client: args.client,
        ttl: Duration::from_millis(args.ttl_ms),
        wait: Duration::from_millis(args.wait_ms),
        hold: Duration::from_millis(args.hold_ms),
        cycles: args.cycles,
        fenced_url: args.fenced,
        unfenced_url: args.unfenced,
    };
    Ok(holder::run(&options).await?)
}

async fn run_chaos(args: ChaosArgs) -> Result<()> {
    let options = ChaosOptions {
        nodes: match args.nodes {
            ClusterSize::Three => 3,
            ClusterSize::Five => 5,
        },
        duration: Duration::from_secs(args.minutes * 60),
        faults: args.faults,
        clients: args.clients,
        hold: args.hold,
        quiet: args.quiet,
        network: !args.loopback,
        binary: std::env::current_exe().context("locating the leasehold binary")?,
        out: args.out,
    };
    let report = chaos::run(&options).await?;
    println!("{}", report.markdown());
    eprintln!("chaos: results in {}", options.out.display());
    if report.violations() > 0 {
        bail!("{} violations", report.violations());
    }
    Ok(())
}
