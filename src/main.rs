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

use leasehold::client::{AcquireOptions, Client};
use leasehold::compare::{self, CompareOptions, SystemKind, Workload};
use leasehold::local::{LocalCluster, NodeLogs};
use leasehold::node::{self, NodeConfig};
use leasehold::run::{self, RunOptions};

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
    /// Show every endpoint's view of the cluster.
    Status {
        #[command(flatten)]
        target: Target,
    },
    /// Run a command while holding a lock; stop it if the lock is lost.
    Run(RunArgs),
    /// Measure lock cycles/s and latency: leasehold against Redis, Redlock and etcd.
    Bench(BenchArgs),
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
    /// Benchmark an existing leasehold cluster (system `leasehold`) instead.
    #[arg(long, value_delimiter = ',')]
    endpoints: Vec<String>,
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
        Cmd::Demo { demo } => std::process::exit(leasehold::demo::run(demo).await),
    }
}

fn client(target: &Target) -> Result<Client> {
    Ok(Client::new(&target.endpoints)?)
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
    let mut initial_members = BTreeMap::new();
    for peer in &args.peers {
        let (id, addr) = peer.split_once('=').with_context(|| format!("peer {peer:?} is not id=host:port"))?;
        initial_members.insert(id.parse().with_context(|| format!("peer id {id:?}"))?, addr.to_string());
    }
    if !initial_members.is_empty() && !initial_members.contains_key(&args.id) {
        bail!("--peers does not list this node's id {}", args.id);
    }
    let config = NodeConfig {
        id: args.id,
        listen,
        advertise: args.addr,
        data_dir: args.data,
        tick_ms: args.tick_ms,
        initial_members,
        snapshot_every: args.snapshot_every,
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
    let mut cluster = LocalCluster::new(&binary, &args.data, &addrs, args.tick_ms, NodeLogs::Prefixed);
    cluster.start_all()?;
    let pids: Vec<String> = cluster.ids().iter().map(|id| format!("{id} {}", cluster.pid(*id).unwrap_or(0))).collect();
    std::fs::write(args.data.join("pids"), pids.join("\n") + "\n")?;
    let endpoints = cluster.endpoints().join(",");
    match cluster.wait_for_leader(Duration::from_secs(30)).await {
        Ok(leader) => {
            println!("leasehold: {} nodes up, leader is node {leader}, data in {}", args.nodes, args.data.display());
            println!("leasehold: endpoints {endpoints}");
            println!(
                "leasehold: try  curl -s -XPOST http://{}/v1/locks/demo/acquire -d '{{\"owner\":\"me\",\"ttl_ms\":10000}}' -H 'content-type: application/json'",
                cluster.endpoint(1)
            );
        }
        Err(e) => println!("leasehold: {e}; nodes keep running, see their logs"),
    }
    println!("leasehold: Ctrl-C stops the nodes");
    shutdown_signal().await;
    println!("leasehold: stopping nodes");
    cluster.stop_all(Duration::from_secs(5));
    Ok(())
}

/// `leasehold run`; returns the exit status.
async fn run_locked(args: RunArgs) -> i32 {
    let options = RunOptions {
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
    let systems = match (args.systems.is_empty(), args.nodes) {
        (false, _) => args.systems,
        (true, Some(nodes)) => vec![SystemKind::Leasehold(nodes as usize)],
        (true, None) => SystemKind::ALL.to_vec(),
    };
    let options = CompareOptions {
        systems,
        endpoints: args.endpoints,
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
