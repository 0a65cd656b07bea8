//! The `leasehold-lab` command line, for people comparing and testing
//! leasehold: the benchmark, the fault suite, the payment demo, and the
//! hidden helper processes they start. The same commands, flags, defaults
//! and exit statuses as when they were `leasehold bench|chaos|demo`; the
//! pieces they share with `leasehold` (durations, credential flags, logging,
//! exit statuses) come from `leasehold-cli`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};

use leasehold_cli::logging::LogFormatArg;
use leasehold_cli::{duration, CredentialFiles};
use leasehold_client::signals::Signals;
use leasehold_client::Credentials;
use leasehold_lab::chaos::{self, ChaosOptions};
use leasehold_lab::compare::election::{self, CandidateOptions, ElectionOptions};
use leasehold_lab::compare::failover::{self, FailoverOptions};
use leasehold_lab::compare::holder::{self, HolderOptions, SystemSpec};
use leasehold_lab::compare::safety::{self, SafetyOptions};
use leasehold_lab::compare::{self, rounds, CompareOptions, SystemKind, Workload};
use leasehold_lab::demo::{payments, worker, PaymentsOptions, WorkerOptions};
use leasehold_lab::fault::FaultKind;
use leasehold_lab::scale::{self, Holders, ScaleOptions};
use leasehold_lab::soak::{self, SoakOptions};

/// What `leasehold-lab --help` says before the commands.
const ABOUT: &str = "\
leasehold's harness: the benchmark against Redis, Redlock and etcd, the fault
suite, the payment demo.

Nodes: processes of the leasehold binary beside this one (cargo build builds
both), or of the one $LEASEHOLD_BIN names.

Durations: as in leasehold, 10s, 250ms, 2m, 1h, 1.5s or 1m30s. On the flags
that used to take a number a bare number keeps its unit: milliseconds for
--ttl-ms, --warmup-ms and --safety-ttl-ms, seconds for --duration-secs and
--seconds, minutes for --minutes.

The whole reference is docs/cli.md.";

#[derive(Parser)]
#[command(
    name = "leasehold-lab",
    version,
    about = "leasehold's harness: the benchmark, the fault suite, the payment demo",
    long_about = ABOUT
)]
pub struct Cli {
    #[command(flatten)]
    pub logging: LogFormatArg,
    #[command(subcommand)]
    command: LabCmd,
}

impl Cli {
    /// Runs the command; `Ok` carries the process exit status.
    pub async fn run(self) -> Result<i32> {
        self.command.run().await
    }
}

#[derive(Subcommand)]
enum LabCmd {
    /// Measure lock cycles/s and latency: leasehold against Redis, Redlock and etcd.
    // Boxed: its many flags would make every command's value this large.
    Bench(Box<BenchArgs>),
    /// The fault suite: faults under load, judged by the history checker.
    Chaos(ChaosArgs),
    /// Judge a fault-suite run's history.json again with this build's checkers
    /// (the per-property rules and linearizability); exit 1 on a violation.
    Recheck {
        /// The history.json a `chaos` run wrote in its --out folder.
        history: PathBuf,
    },
    /// One lock holder of `bench --safety`, a process the harness can SIGSTOP.
    #[command(hide = true)]
    SafetyHolder(HolderArgs),
    /// One candidate of `bench --workloads election`, a process the harness kills -9.
    #[command(hide = true)]
    ElectionCandidate(CandidateArgs),
    /// Demonstrations: `demo payments` (fencing tokens vs. a paused worker).
    Demo {
        #[command(subcommand)]
        demo: DemoCmd,
    },
}

/// `leasehold-lab demo ...`.
#[derive(Subcommand)]
enum DemoCmd {
    /// Payments by worker processes, one of them paused past its lease.
    ///
    /// The money is in a real PostgreSQL (started by the demo, or --postgres).
    /// With fencing tokens PostgreSQL refuses the paused worker's late
    /// transaction and the total stays put; with --no-fencing the late write
    /// overwrites newer balances. Exit status: 0 when the money adds up and
    /// every transfer was applied exactly once, 1 when not, 2 when the demo
    /// itself failed (or PostgreSQL is not installed).
    Payments(PaymentsArgs),
    /// One worker of `demo payments` (started by it).
    #[command(hide = true)]
    PaymentsWorker(WorkerArgs),
}

#[derive(Args)]
struct PaymentsArgs {
    /// Worker processes moving money (at least 2: one is paused, the others
    /// take its expired locks).
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Accounts; fewer accounts make the paused worker's accounts more
    /// likely to change while it is stopped.
    #[arg(long, default_value_t = 8)]
    accounts: usize,
    /// How long the workers run, in whole seconds (--seconds: a bare number is seconds).
    #[arg(long, alias = "seconds", default_value = "20s", value_parser = duration::or_bare(Duration::from_secs, Duration::from_secs(1)..=Duration::MAX))]
    duration: Duration,
    /// Lease ttl of every account lock (the cluster accepts 3s to 1h); the
    /// paused worker is stopped for twice this.
    #[arg(long, default_value = "3s", value_parser = duration::parse)]
    ttl: Duration,
    /// Drop the fence predicate (and the fence raise) from the statements.
    #[arg(long)]
    no_fencing: bool,
    /// Use this cluster instead of starting a local 3-node one.
    #[arg(long, value_delimiter = ',')]
    endpoints: Vec<String>,
    /// Use this database (postgresql://user:password@host:port/db, no TLS)
    /// instead of starting a PostgreSQL server; the demo's tables go in a
    /// schema of its own, dropped at the end.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// Where the report goes (report.md, report.json, timeline.svg); default
    /// a new temporary folder, printed at the end.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(Args)]
struct WorkerArgs {
    /// The database URL (in the environment: a password in it stays off `ps`).
    #[arg(long, env = leasehold_lab::demo::POSTGRES_ENV, hide_env_values = true)]
    postgres: String,
    /// The demo's schema in it.
    #[arg(long)]
    schema: String,
    #[arg(long, value_delimiter = ',', required = true)]
    endpoints: Vec<String>,
    #[arg(long)]
    seconds: u64,
    #[arg(long, value_parser = duration::parse)]
    ttl: Duration,
    #[arg(long)]
    worker_id: u32,
    /// Run the statements without the fence predicate.
    #[arg(long)]
    no_fencing: bool,
}

/// `leasehold-lab bench`: starts every system's servers itself (by PID, on
/// 127.0.0.1), alternates them inside each run, and writes `latest.json`,
/// `README.md` and SVG plots into `--out`.
#[derive(Args)]
struct BenchArgs {
    /// Systems to compare: leasehold-N (a local N-node cluster, each client
    /// following the leader), leasehold-N-spread (the same cluster, each
    /// client pinned to one node in turn as behind a load balancer, so
    /// followers forward most requests), leasehold-N-tokens (a cluster with
    /// client and admin tokens), leasehold-N-users (that cluster with 20
    /// users and 50 roles, clients sending a user's token), redis,
    /// redis-aof, redlock, etcd, etcd-session. Default: all of them but the
    /// -spread, -tokens and -users ones, or
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
    /// Concurrent clients on distinct names (and of the pair and semaphore
    /// workloads), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    clients: Vec<usize>,
    /// Concurrent clients on the one hot name, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    hot_clients: Vec<usize>,
    /// Waiting clients of a herd on one lock, each pinned to one node in turn, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "64,1000")]
    herd_clients: Vec<usize>,
    /// Clients on distinct names during a connection flood, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "64")]
    flood_clients: Vec<usize>,
    /// Idle connections a flood holds open against one server.
    #[arg(long, default_value_t = 10_000)]
    flood_connections: usize,
    /// distinct: a lock per client; hot: all clients on one lock; herd: hot
    /// with many waiters spread over the nodes (server memory reported);
    /// flood: distinct while --flood-connections idle connections are held
    /// open against the leader (or the one server); pair: two locks per
    /// client taken together; semaphore: all clients on one counting
    /// semaphore of 8 permits, each taking one (waiting for it) and
    /// releasing it, leasehold-N and etcd only (etcd by the usual recipe of
    /// keys ranked by create revision; the others are left out, as the
    /// report says). Each of these reports the elections (Raft term moves)
    /// during its measurements. election: --rounds of
    /// leader-candidate kill -9 → the next leader's first fenced write,
    /// leasehold-3 vs etcd, with --ttl as both leases (election.json,
    /// election.svg, README.md). failover: --rounds of the leader's process
    /// killed -9 during a write every 10 ms through a surviving node, the
    /// gap in acknowledged writes measured, the member restarted and caught
    /// up, leasehold-3 vs etcd (failover.json, failover.svg, README.md).
    /// election, failover and the lock cycles each write README.md: give
    /// each its own --out.
    #[arg(long, value_delimiter = ',', default_value = "distinct,hot", value_parser = workload_parser())]
    workloads: Vec<Workload>,
    /// Measured time per (system, workload, clients, run) (--duration-secs: a bare number is seconds).
    #[arg(long, alias = "duration-secs", default_value = "10s", value_parser = duration::or_bare(Duration::from_secs, Duration::from_secs(1)..=Duration::MAX))]
    duration: Duration,
    /// Unmeasured warm-up before each measurement (--warmup-ms: a bare number is milliseconds).
    #[arg(long, alias = "warmup-ms", default_value = "1s", value_parser = duration::or_bare(Duration::from_millis, Duration::ZERO..=Duration::MAX))]
    warmup: Duration,
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// Rounds of the election and failover workloads (a leader crash each, per system).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
    /// Lock ttl, 1s to 10m (--ttl-ms: a bare number is milliseconds).
    #[arg(long, alias = "ttl-ms", default_value = "10s", value_parser = duration::or_bare(Duration::from_millis, Duration::from_secs(1)..=Duration::from_secs(600)))]
    ttl: Duration,
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
    /// With --bulk N: the N holders are sessions, each holding this many
    /// locks taken in one multi-acquire (N × this many live leases).
    #[arg(long, requires = "bulk", value_parser = clap::value_parser!(u64).range(1..=64))]
    bulk_sessions: Option<u64>,
    /// Instead of lock cycles: a storage soak. A local cluster holds
    /// --soak-locks live locks and churns them (release, acquire, fenced
    /// record, request ids) until this many log entries committed, sampling
    /// every node's data folder against the documented bound (soak.json,
    /// soak.md, soak.svg; exit 1 when a sample is over the bound).
    #[arg(long, conflicts_with_all = ["bulk", "endpoints", "safety"])]
    soak: Option<u64>,
    /// Live locks of the --soak.
    #[arg(long, requires = "soak", default_value_t = 10_000)]
    soak_locks: u64,
    /// Churning clients of the --soak.
    #[arg(long, requires = "soak", default_value_t = 32)]
    soak_clients: usize,
    /// `--snapshot-every` of the --soak cluster's nodes (their default when absent).
    #[arg(long, requires = "soak", value_parser = clap::value_parser!(u64).range(100..))]
    soak_snapshot_every: Option<u64>,
    /// Instead of lock cycles: every system under faults (paused holder,
    /// clock jump, failover, paused leader, Kleppmann's Redlock case),
    /// counting safety violations (safety.json, safety.md, a section of
    /// README.md).
    #[arg(long, conflicts_with_all = ["bulk", "endpoints"])]
    safety: bool,
    /// The lock ttl of the --safety run, 3s (leasehold's least) to 1m (--safety-ttl-ms: a bare
    /// number is milliseconds).
    #[arg(long, alias = "safety-ttl-ms", default_value = "3s", value_parser = duration::or_bare(Duration::from_millis, Duration::from_secs(3)..=Duration::from_secs(60)))]
    safety_ttl: Duration,
}

/// `leasehold-lab election-candidate`: campaign, then write to the fenced
/// resource under the leader's token until killed.
#[derive(Args)]
struct CandidateArgs {
    /// KIND=ADDRESSES: leasehold=URL,... or etcd=URL.
    #[arg(long)]
    system: SystemSpec,
    #[arg(long)]
    election: String,
    #[arg(long)]
    candidate: String,
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    ttl_ms: u64,
    /// Base URL of the fenced resource.
    #[arg(long)]
    fenced: String,
    #[arg(long, default_value_t = 10)]
    every_ms: u64,
}

/// `leasehold-lab safety-holder`: acquire → write to both resources → hold →
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

#[derive(Args)]
struct ChaosArgs {
    /// Keep injecting faults for this long (one full round at least) (--minutes: a bare number
    /// is minutes).
    #[arg(long, alias = "minutes", default_value = "5m", value_parser = duration::or_bare(|n| Duration::from_secs(n.saturating_mul(60)), Duration::ZERO..=Duration::MAX))]
    duration: Duration,
    /// Voters of the fault suite's cluster: 3 or 5.
    #[arg(long, default_value = "3", value_parser = PossibleValuesParser::new(["3", "5"]).map(|n| n.parse::<usize>().unwrap_or(3)))]
    nodes: usize,
    /// Concurrent workload clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Faults of a round, comma-separated (default: all, in this order).
    #[arg(
        long,
        value_delimiter = ',',
        default_values_t = FaultKind::ALL,
        value_parser = fault_parser()
    )]
    faults: Vec<FaultKind>,
    /// How long each fault lasts.
    #[arg(long, default_value = "4s", value_parser = duration::parse)]
    hold: Duration,
    /// Quiet time after each fault.
    #[arg(long, default_value = "5s", value_parser = duration::parse)]
    quiet: Duration,
    /// Run on loopback even when network namespaces are available.
    #[arg(long)]
    loopback: bool,
    /// Folder for chaos.md, chaos.json, timeline.svg, history.json and node data.
    #[arg(long, default_value = "./chaos-results")]
    out: PathBuf,
}

/// `--faults` values: the fault names, listed in `--help`.
fn fault_parser() -> impl TypedValueParser<Value = FaultKind> {
    PossibleValuesParser::new(FaultKind::ALL.map(FaultKind::name))
        .map(|name| name.parse::<FaultKind>().expect("a listed fault name"))
}

/// `--workloads` values.
fn workload_parser() -> impl TypedValueParser<Value = Workload> {
    PossibleValuesParser::new(Workload::ALL.map(Workload::name))
        .map(|name| Workload::ALL.into_iter().find(|w| w.name() == name).expect("a listed workload name"))
}

/// Runs `command` (a bench or a chaos run) until it ends or a stop signal
/// (SIGINT, SIGTERM, SIGHUP) comes. Then the command is dropped, so the
/// servers, clusters and network namespaces it started are stopped and
/// removed by their owners' `Drop` (by PID) before the process exits with
/// 128 + the signal's number, as a shell reports it. (Without this, Ctrl-C
/// left every server of a bench running.)
async fn until_stopped(command: impl std::future::Future<Output = Result<i32>>) -> Result<i32> {
    let mut signals = Signals::new().context("installing signal handlers")?;
    tokio::select! {
        code = command => code,
        signal = signals.recv() => {
            eprintln!("leasehold-lab: {signal}: stopping what this run started");
            Ok(128 + signal as i32)
        }
    }
}

impl LabCmd {
    /// Runs the command; `Ok` carries the exit status.
    async fn run(self) -> Result<i32> {
        match self {
            LabCmd::Bench(args) => until_stopped(bench(*args)).await,
            LabCmd::Chaos(args) => until_stopped(run_chaos(args)).await,
            LabCmd::Recheck { history } => match chaos::recheck(&history)? {
                0 => Ok(0),
                violations => {
                    eprintln!("chaos: {violations} violations");
                    Ok(EXIT_VIOLATIONS)
                }
            },
            LabCmd::SafetyHolder(args) => run_holder(args).await.map(|()| 0),
            LabCmd::ElectionCandidate(args) => {
                let options = CandidateOptions {
                    system: args.system,
                    election: args.election,
                    candidate: args.candidate,
                    ttl: Duration::from_millis(args.ttl_ms),
                    fenced_url: args.fenced,
                    every: Duration::from_millis(args.every_ms),
                };
                election::candidate(&options).await;
                Ok(0)
            }
            LabCmd::Demo { demo: DemoCmd::Payments(args) } => Ok(payments::run(&args.into()).await),
            LabCmd::Demo { demo: DemoCmd::PaymentsWorker(args) } => Ok(worker::run(&args.into()).await),
        }
    }
}

impl From<PaymentsArgs> for PaymentsOptions {
    fn from(a: PaymentsArgs) -> Self {
        PaymentsOptions {
            workers: a.workers,
            accounts: a.accounts,
            seconds: a.duration.as_secs(),
            ttl: a.ttl,
            no_fencing: a.no_fencing,
            endpoints: a.endpoints,
            postgres: a.postgres,
            out: a.out,
            command: command_line(),
        }
    }
}

impl From<WorkerArgs> for WorkerOptions {
    fn from(a: WorkerArgs) -> Self {
        WorkerOptions {
            postgres: a.postgres,
            schema: a.schema,
            endpoints: a.endpoints,
            seconds: a.seconds,
            ttl: a.ttl,
            worker_id: a.worker_id,
            no_fencing: a.no_fencing,
        }
    }
}

/// The command line as typed, for reports: the binary by name only, so a
/// committed report names no path of the machine it ran on.
fn command_line() -> String {
    let mut args = std::env::args();
    let program = args
        .next()
        .map(|p| std::path::Path::new(&p).file_name().map_or(p.clone(), |name| name.to_string_lossy().into_owned()));
    program.into_iter().chain(args).collect::<Vec<_>>().join(" ")
}

/// Exit status of `bench --safety` and `chaos` when leasehold broke a
/// guarantee (a failure of the harness itself follows the table in `exit`).
const EXIT_VIOLATIONS: i32 = 1;

/// `leasehold-lab bench`; `Ok` carries the exit status.
async fn bench(args: BenchArgs) -> Result<i32> {
    if let Some(holders) = args.bulk {
        let options = ScaleOptions {
            binary: leasehold_lab::leasehold_binary()?,
            nodes: args.nodes.unwrap_or(3) as usize,
            holders,
            holder_kind: match args.bulk_sessions {
                Some(locks_each) => Holders::Sessions { locks_each: locks_each as usize },
                None => Holders::Leases,
            },
            clients: args.bulk_clients,
            out: args.out,
        };
        let report = scale::run(&options).await?;
        println!("{}", scale::markdown(&report));
        eprintln!("bench: results in {}", options.out.display());
        return Ok(0);
    }
    if let Some(entries) = args.soak {
        let options = SoakOptions {
            binary: leasehold_lab::leasehold_binary()?,
            nodes: args.nodes.unwrap_or(3) as usize,
            entries,
            live_locks: args.soak_locks,
            clients: args.soak_clients,
            snapshot_every: args.soak_snapshot_every.unwrap_or(soak::NODE_DEFAULT_SNAPSHOT_EVERY),
            out: args.out,
            command: command_line(),
        };
        let report = soak::run(&options).await?;
        println!("{}", soak::markdown(&report));
        eprintln!("bench: results in {}", options.out.display());
        let over = report.over_bound().len();
        if over > 0 {
            eprintln!("leasehold: {over} samples over the documented bound of {} bytes", report.bound_bytes);
            return Ok(EXIT_VIOLATIONS);
        }
        return Ok(0);
    }
    let systems = match (args.systems.is_empty(), args.nodes) {
        (false, _) => args.systems.clone(),
        (true, Some(nodes)) => vec![SystemKind::leasehold(nodes as usize)],
        (true, None) => SystemKind::ALL.to_vec(),
    };
    if args.safety {
        let options = SafetyOptions {
            systems: match (args.systems.is_empty(), args.nodes) {
                (true, None) => safety::DEFAULT_SYSTEMS.to_vec(),
                _ => systems,
            },
            binary: leasehold_lab::leasehold_binary()?,
            holder_binary: std::env::current_exe().context("locating the leasehold-lab binary")?,
            ttl: args.safety_ttl,
            out: args.out,
            command: command_line(),
        };
        let report = safety::run(&options).await?;
        println!("{}", report.markdown());
        if report.leasehold_violations() > 0 {
            eprintln!("leasehold: {} safety violations", report.leasehold_violations());
            return Ok(EXIT_VIOLATIONS);
        }
        return Ok(0);
    }
    let mut workloads = args.workloads.clone();
    // Only leasehold-N and etcd have an election API and a leader to crash;
    // the others in --systems are left out.
    let round_systems = match args.systems.is_empty() && args.nodes.is_none() {
        true => rounds::SYSTEMS.to_vec(),
        false => systems
            .iter()
            .map(|s| match *s {
                // The same servers here, whatever way clients reach them: measured once.
                SystemKind::EtcdSession => SystemKind::Etcd,
                SystemKind::Leasehold { nodes, .. } => SystemKind::leasehold(nodes),
                other => other,
            })
            .filter(|s| matches!(s, SystemKind::Leasehold { .. } | SystemKind::Etcd))
            .fold(Vec::new(), |mut kept, s| {
                if !kept.contains(&s) {
                    kept.push(s);
                }
                kept
            }),
    };
    let mut measured_rounds = false;
    if workloads.contains(&Workload::Election) {
        workloads.retain(|w| *w != Workload::Election);
        let options = ElectionOptions {
            systems: round_systems.clone(),
            rounds: args.rounds as usize,
            ttl: args.ttl,
            binary: leasehold_lab::leasehold_binary()?,
            candidate_binary: std::env::current_exe().context("locating the leasehold-lab binary")?,
            out: args.out.clone(),
            command: command_line(),
        };
        let report = election::run(&options).await?;
        println!("{}", report.markdown());
        measured_rounds |= !report.rows.is_empty();
    }
    if workloads.contains(&Workload::Failover) {
        workloads.retain(|w| *w != Workload::Failover);
        let options = FailoverOptions {
            systems: round_systems,
            rounds: args.rounds as usize,
            binary: leasehold_lab::leasehold_binary()?,
            out: args.out.clone(),
            command: command_line(),
        };
        let report = failover::run(&options).await?;
        println!("{}", report.markdown());
        eprintln!("bench: results in {}", options.out.display());
        measured_rounds |= !report.rows.is_empty();
    }
    if workloads.is_empty() {
        return Ok(if measured_rounds { 0 } else { 2 });
    }
    // A herd of clients needs a socket each (Redlock five).
    leasehold_cli::raise_fd_limit();
    // Loaded only for an existing cluster: a token in the environment must
    // not stop a run against the bench's own clusters.
    let credentials = if args.endpoints.is_empty() { Credentials::default() } else { args.credentials.load()? };
    let options = CompareOptions {
        systems,
        endpoints: args.endpoints,
        credentials,
        binary: leasehold_lab::leasehold_binary()?,
        workloads,
        clients: args.clients,
        hot_clients: args.hot_clients,
        herd_clients: args.herd_clients,
        flood_clients: args.flood_clients,
        flood_connections: args.flood_connections,
        runs: args.runs as usize,
        warmup: args.warmup,
        duration: args.duration,
        ttl: args.ttl,
        out: args.out,
        command: command_line(),
    };
    let report = compare::run(&options).await?;
    println!("{}", std::fs::read_to_string(options.out.join("README.md"))?);
    if report.rows.is_empty() {
        bail!("no system could be measured");
    }
    Ok(0)
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

/// `leasehold-lab chaos`; `Ok` carries the exit status.
async fn run_chaos(args: ChaosArgs) -> Result<i32> {
    let options = ChaosOptions {
        nodes: args.nodes,
        duration: args.duration,
        faults: args.faults,
        clients: args.clients,
        hold: args.hold,
        quiet: args.quiet,
        network: !args.loopback,
        binary: leasehold_lab::leasehold_binary()?,
        out: args.out,
    };
    let report = chaos::run(&options).await?;
    println!("{}", report.markdown());
    eprintln!("chaos: results in {}", options.out.display());
    if report.violations() > 0 {
        eprintln!("chaos: {} violations", report.violations());
        return Ok(EXIT_VIOLATIONS);
    }
    Ok(0)
}
