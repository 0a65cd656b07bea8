//! Application and script commands: take, renew and release locks, read
//! them, use the fence API, run a command under a lock or while leading an
//! election, and watch the applied events.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};

use leasehold_client::run::{self, RunOptions};
use leasehold_client::{AcquireOptions, FencingToken, WatchEvent};
use leasehold_proto::fence::{CheckResponse, PutRecordResponse};
use leasehold_proto::locks::ReleaseResponse;

use super::exit::{self, Exit, No, UsageError};
use super::{duration, output, ClusterArgs, Target};

// Every command ends its --help with its exit-status table.
#[derive(Subcommand)]
pub enum ClientCmd {
    /// Acquire a lock; prints the grant with its fencing token. Several names:
    /// all of them atomically, in one log entry under one token, or none;
    /// prints one grant per lock.
    #[command(after_long_help = exit::TABLE)]
    Acquire {
        #[command(flatten)]
        target: Target,
        #[arg(value_name = "NAME", required = true, num_args = 1..)]
        names: Vec<String>,
        /// Holder identity; must be unique per holder.
        #[arg(long)]
        owner: String,
        /// Lease ttl, e.g. 10s (--ttl-ms: a bare number is milliseconds).
        #[arg(long, alias = "ttl-ms", default_value = "10s", value_parser = duration::or_bare(Duration::from_millis, ANY))]
        ttl: Duration,
        /// Wait up to this long in the lock's queue when it is held, e.g. 30s
        /// (--wait-ms: a bare number is milliseconds).
        #[arg(long, alias = "wait-ms", value_parser = duration::or_bare(Duration::from_millis, ANY))]
        wait: Option<Duration>,
        #[arg(long)]
        request_id: Option<String>,
        /// Should the lease expire (not be released), nobody gets the lock for
        /// this long after, e.g. 15s (a bare number is milliseconds).
        #[arg(long, value_parser = duration::or_bare(Duration::from_millis, ANY))]
        lock_delay: Option<Duration>,
    },
    /// Renew a lease under its token.
    #[command(after_long_help = exit::TABLE)]
    Renew {
        #[command(flatten)]
        target: Target,
        name: String,
        #[arg(long)]
        token: FencingToken,
        /// New ttl (default: the lease's), e.g. 10s (--ttl-ms: a bare number is milliseconds).
        #[arg(long, alias = "ttl-ms", value_parser = duration::or_bare(Duration::from_millis, ANY))]
        ttl: Option<Duration>,
    },
    /// Release a lock under its token.
    #[command(after_long_help = exit::TABLE)]
    Release {
        #[command(flatten)]
        target: Target,
        name: String,
        #[arg(long)]
        token: FencingToken,
    },
    /// Show a lock (linearizable read); exits 1 when it is free.
    #[command(after_long_help = exit::TABLE)]
    Get {
        #[command(flatten)]
        target: Target,
        name: String,
    },
    /// List held locks.
    #[command(after_long_help = exit::TABLE)]
    List {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value = "")]
        prefix: String,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Ask whether a token is the current one of a lock (linearizable).
    #[command(after_long_help = exit::TABLE)]
    Check {
        #[command(flatten)]
        target: Target,
        lock: String,
        #[arg(long)]
        token: FencingToken,
    },
    /// Write a fenced record: applied only if the token is current for the lock.
    #[command(after_long_help = exit::TABLE)]
    PutRecord {
        #[command(flatten)]
        target: Target,
        key: String,
        #[arg(long)]
        lock: String,
        #[arg(long)]
        token: FencingToken,
        /// The value, as JSON (e.g. '"settled"' or '{"amount":5}').
        #[arg(long)]
        value: String,
    },
    /// Read a fenced record; exits 1 when there is none.
    #[command(after_long_help = exit::TABLE)]
    GetRecord {
        #[command(flatten)]
        target: Target,
        key: String,
    },
    /// Pass a token through a resource's gate (admitted if it is the lock's current token, never lower than any before).
    #[command(after_long_help = exit::TABLE)]
    Gate {
        #[command(flatten)]
        target: Target,
        resource: String,
        #[arg(long)]
        lock: String,
        #[arg(long)]
        token: FencingToken,
    },
    /// Run a command while holding a lock (several: under one session); stop it if they are lost.
    #[command(after_long_help = exit::RUN_TABLE)]
    Run(RunArgs),
    /// Run a command while this process leads an election; stop it if the leadership is lost.
    #[command(after_long_help = exit::RUN_TABLE)]
    Elect(ElectArgs),
    /// Print applied events as JSON lines (`id` first), resuming after the
    /// last one on another node when a node fails; exits 1 on `410
    /// compacted` (re-read, then watch again with --after the read's index).
    #[command(after_long_help = exit::TABLE)]
    Watch {
        #[command(flatten)]
        target: Target,
        /// Only events of locks and elections whose names start with this.
        #[arg(long)]
        prefix: Option<String>,
        /// Resume after this log index (default: from now on).
        #[arg(long)]
        after: Option<u64>,
        /// Observe this election's leadership changes instead (starting
        /// with its current leader, without --after).
        #[arg(long, conflicts_with = "prefix")]
        election: Option<String>,
    },
}

/// No range of the client's own: the cluster answers an out-of-range ttl or
/// wait with `invalid_argument`, naming its limits.
const ANY: std::ops::RangeInclusive<Duration> = Duration::ZERO..=Duration::MAX;

/// `leasehold run --lock NAME [--ttl 10s] [--wait 30s] -- CMD ARGS...`: the
/// command gets LEASEHOLD_LOCK, LEASEHOLD_TOKEN and LEASEHOLD_OWNER. Exit
/// status: the command's (128 + signal when killed), 2 when the lock could
/// not be acquired, 3 when it was lost (the command is then stopped).
#[derive(Args)]
pub struct RunArgs {
    /// Lock to hold while the command runs. Repeat it to take several: all
    /// at once, in one log entry under one token, under one session that
    /// ends (freeing them all) when the command does or this process dies.
    #[arg(long = "lock", value_name = "NAME", required_unless_present = "semaphore")]
    locks: Vec<String>,
    /// Hold the lock in shared mode (a read lock): other shared holders may
    /// run beside this command, an exclusive holder may not. One lock only.
    #[arg(long, conflicts_with = "semaphore")]
    shared: bool,
    /// Instead of a lock, hold one permit of the counting semaphore NAME of
    /// LIMIT permits (the limit is set by the first holder; another is refused).
    /// The command gets LEASEHOLD_SEMAPHORE, LEASEHOLD_TOKEN and LEASEHOLD_OWNER.
    #[arg(long, value_name = "NAME:LIMIT", value_parser = semaphore_arg, conflicts_with = "locks")]
    semaphore: Option<(String, u32)>,
    #[command(flatten)]
    hold: HoldArgs,
}

/// `leasehold elect NAME --value V [--ttl 10s] [--wait 30s] -- CMD ARGS...`:
/// runs the command while this process leads election NAME, as `run` runs
/// one under a lock (LEASEHOLD_LOCK is the election, LEASEHOLD_TOKEN the
/// leader's token), and resigns when it exits. Same exit statuses as `run`.
#[derive(Args)]
pub struct ElectArgs {
    /// The election.
    name: String,
    /// What this candidate announces once elected, as JSON (e.g.
    /// '"10.0.0.5:8080"' or '{"addr":"10.0.0.5"}').
    #[arg(long)]
    value: String,
    #[command(flatten)]
    hold: HoldArgs,
}

/// What `run` and `elect` share: the cluster, the lease, and the command.
#[derive(Args)]
struct HoldArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Lease ttl, renewed every ttl/3 (e.g. 10s, 500ms, 2m); the session's, for several locks.
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    ttl: Duration,
    /// Wait up to this long for the lock when it is held (default: fail at once).
    #[arg(long, value_parser = duration::parse)]
    wait: Option<Duration>,
    /// Holder identity (default: hostname-pid-random).
    #[arg(long)]
    owner: Option<String>,
    /// Time between SIGTERM and SIGKILL when the renewals fail: SIGTERM this
    /// long before the safe deadline, SIGKILL at that deadline whatever it is.
    /// (2 s by default: with the default ttl the renewals may then fail for
    /// 3.7 s, through a leader election, before the command is stopped.)
    #[arg(long, default_value = "2s", value_parser = duration::parse)]
    grace: Duration,
    /// Safety margin subtracted from every lease for clock drift (default: ttl/10).
    #[arg(long, value_parser = duration::parse)]
    drift_margin: Option<Duration>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<OsString>,
}

impl ClientCmd {
    /// Runs the command; `Ok` carries the exit status (`run` passes its command's on).
    pub async fn run(self) -> Result<i32> {
        match self {
            ClientCmd::Acquire { target, names, owner, ttl, wait, request_id, lock_delay } => {
                let (ttl_ms, options) = (duration::millis(ttl), AcquireOptions { wait, request_id, lock_delay });
                let client = target.client()?;
                match names.as_slice() {
                    [name] => target.output.print(&client.acquire_with(name, &owner, ttl_ms, &options).await?.grant)?,
                    names => {
                        let names: Vec<&str> = names.iter().map(String::as_str).collect();
                        target.output.print(&client.acquire_many(&names, &owner, ttl_ms, &options).await?.grants)?
                    }
                }
            }
            ClientCmd::Renew { target, name, token, ttl } => {
                let ttl_ms = ttl.map(duration::millis);
                target.output.print(&target.client()?.renew(&name, token, ttl_ms).await?.grant)?
            }
            ClientCmd::Release { target, name, token } => {
                target.client()?.release(&name, token).await?;
                target.output.print(&ReleaseResponse { name, token, released: true })?
            }
            ClientCmd::Get { target, name } => match target.client()?.get(&name).await? {
                Some(view) => target.output.print(&view)?,
                None => return Err(No(format!("lock {name:?} is not held")).into()),
            },
            ClientCmd::List { target, prefix, limit } => {
                target.output.print(&target.client()?.list(&prefix, limit).await?)?
            }
            ClientCmd::Check { target, lock, token } => {
                let (current, current_token) = target.client()?.check(&lock, token).await?;
                target.output.print(&CheckResponse { lock: lock.clone(), current, token: current_token })?;
                if !current {
                    return Err(No(format!("token {token} is not the current one of lock {lock:?}")).into());
                }
            }
            ClientCmd::PutRecord { target, key, lock, token, value } => {
                let value: serde_json::Value =
                    serde_json::from_str(&value).map_err(|e| UsageError(format!("--value is not JSON: {e}")))?;
                let index = target.client()?.put_record(&key, &lock, token, &value).await?;
                target.output.print(&PutRecordResponse { key, lock, token, index })?
            }
            ClientCmd::GetRecord { target, key } => match target.client()?.get_record(&key).await? {
                Some(record) => target.output.print(&record)?,
                None => return Err(No(format!("no record {key:?}")).into()),
            },
            ClientCmd::Gate { target, resource, lock, token } => {
                target.client()?.gate(&resource, &lock, token).await?;
                target.output.print(
                    &serde_json::json!({ "resource": resource, "lock": lock, "token": token, "admitted": true }),
                )?
            }
            ClientCmd::Run(args) => {
                let holding =
                    Holding { locks: args.locks, shared: args.shared, semaphore: args.semaphore, campaign: None };
                return Ok(run_locked(holding, args.hold).await);
            }
            ClientCmd::Elect(args) => {
                let value: serde_json::Value =
                    serde_json::from_str(&args.value).map_err(|e| UsageError(format!("--value is not JSON: {e}")))?;
                let holding = Holding { locks: vec![args.name], shared: false, semaphore: None, campaign: Some(value) };
                return Ok(run_locked(holding, args.hold).await);
            }
            ClientCmd::Watch { target, prefix, after, election } => {
                let client = std::sync::Arc::new(target.client()?);
                let mut watch = match &election {
                    Some(name) => client.observe(name, after),
                    None => client.watch(prefix.as_deref(), after),
                };
                loop {
                    let WatchEvent { id, event } = watch.next().await?;
                    let mut line = serde_json::json!({ "id": id });
                    if let (Some(line), serde_json::Value::Object(event)) =
                        (line.as_object_mut(), serde_json::to_value(&event)?)
                    {
                        line.extend(event);
                    }
                    output::write_stdout(format!("{line}\n").as_bytes())?;
                }
            }
        }
        Ok(Exit::Ok.code())
    }
}

/// `--semaphore NAME:LIMIT`: the name (which may hold colons itself) and
/// the limit after the last colon.
fn semaphore_arg(text: &str) -> std::result::Result<(String, u32), String> {
    let (name, limit) = text.rsplit_once(':').ok_or("expected NAME:LIMIT, e.g. exports:3")?;
    let limit: u32 = limit.parse().map_err(|_| format!("{limit:?} is not a limit (a whole number of permits)"))?;
    if name.is_empty() || limit == 0 {
        return Err("expected a non-empty NAME and a LIMIT of at least 1".into());
    }
    Ok((name.to_owned(), limit))
}

/// What `run` or `elect` holds while the command runs: the locks (held
/// `shared` or not), one permit of a `semaphore`, or the leadership of an
/// election (the value to `campaign` with).
struct Holding {
    locks: Vec<String>,
    shared: bool,
    semaphore: Option<(String, u32)>,
    campaign: Option<serde_json::Value>,
}

/// `leasehold run` or `elect`; returns the exit status.
async fn run_locked(holding: Holding, args: HoldArgs) -> i32 {
    let credentials = match args.cluster.credentials.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("leasehold run: {e}");
            return run::EXIT_ACQUIRE_FAILED;
        }
    };
    let options = RunOptions {
        credentials,
        endpoints: args.cluster.endpoints,
        locks: holding.locks,
        shared: holding.shared,
        semaphore: holding.semaphore,
        ttl: args.ttl,
        wait: args.wait,
        owner: args.owner,
        drift_margin: args.drift_margin,
        grace: args.grace,
        command: args.command,
        campaign: holding.campaign,
    };
    run::run(&options).await
}
