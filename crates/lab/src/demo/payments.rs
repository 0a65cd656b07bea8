//! The coordinator of `leasehold-lab demo payments`.
//!
//! It starts a local 3-node cluster of `leasehold` processes
//! ([`crate::leasehold_binary`]; unless given `--endpoints`) and a PostgreSQL
//! server (unless given `--postgres`), creates the ledger in a schema of its
//! own, starts the workers as processes of this binary (`leasehold-lab`), and
//! prints progress once a second. A few seconds in, it picks a worker, asks
//! it to announce its next held pair of locks, stops it with SIGSTOP right
//! then (between its read and its write), keeps it stopped for twice the
//! lease ttl so the leases expire and other workers take the accounts, then
//! continues it: the worker writes the balances it read before the pause. At
//! the end it prints the result table and writes the report; the exit status
//! is 0 when the invariant holds (the money is all there, no update was lost,
//! every transfer was applied exactly once), 1 otherwise, 2 when the demo
//! itself failed.
//!
//! Every process it starts is tracked by PID and killed and reaped on every
//! path, by drop guards (`WorkerProcess`, [`LocalCluster`], [`PgServer`]);
//! SIGTERM and SIGINT end the run through those same guards.

use std::time::{Duration, Instant};

use leasehold_client::signals::Signals;
use nix::sys::signal::{kill, Signal};
use tempfile::TempDir;
use tokio::sync::mpsc;

use super::ledger::{Ledger, INITIAL_BALANCE};
use super::postgres::{find_bin_dir, PgServer};
use super::processes::{is_stopped, WorkerLine, WorkerProcess, WorkerSpec};
use super::report::{self, FaultRecord, Outcome, Timeline};
use super::{say, DemoError, PaymentsOptions, WorkerReport};
use leasehold_local::{LocalCluster, NodeLogs};

/// When the fault is injected, counted from the workers' start: late enough
/// for every worker to be busy.
const FAULT_AFTER: Duration = Duration::from_secs(3);
/// Run time left after the paused worker is continued, for its late write.
const FAULT_TAIL: Duration = Duration::from_secs(2);
/// How long the chosen worker has to report that it holds two locks.
const HOLDING_BOUND: Duration = Duration::from_secs(10);
/// How long workers may take to finish after `--seconds` (their queue waits
/// end by then; this bounds a hang) before they are killed.
const WORKER_GRACE: Duration = Duration::from_secs(20);
const LEADER_BOUND: Duration = Duration::from_secs(30);
const NODES: usize = 3;
const TICK_MS: u64 = 100;
/// The cluster's ttl limits; outside them every acquire would be refused.
const MIN_TTL: Duration = Duration::from_secs(3);
const MAX_TTL: Duration = Duration::from_secs(3600);

/// Runs the demo; prints progress and the result, returns the exit status.
pub async fn run(args: &PaymentsOptions) -> i32 {
    match payments(args).await {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            eprintln!("leasehold-lab demo payments: {e}");
            2
        }
    }
}

fn validate(args: &PaymentsOptions) -> Result<(), DemoError> {
    let invalid = |m: String| Err(DemoError::InvalidArgument(m));
    if args.workers < 2 {
        return invalid("--workers must be at least 2: one is paused, the others take its locks".into());
    }
    if args.accounts < 2 {
        return invalid("--accounts must be at least 2: a transfer touches two".into());
    }
    if args.ttl < MIN_TTL || args.ttl > MAX_TTL {
        return invalid(format!("--ttl must be between {MIN_TTL:?} and {MAX_TTL:?} (the cluster's limits)"));
    }
    let needed = FAULT_AFTER + 2 * args.ttl + FAULT_TAIL;
    if Duration::from_secs(args.seconds) < needed {
        return invalid(format!(
            "--seconds must be at least {} with --ttl {:?}: the pause starts after {FAULT_AFTER:?}, \
             lasts 2 × ttl, and the paused worker must write before the end",
            needed.as_secs_f64().ceil(),
            args.ttl
        ));
    }
    Ok(())
}

async fn payments(args: &PaymentsOptions) -> Result<Outcome, DemoError> {
    validate(args)?;
    // Handlers first: from here on SIGTERM and SIGINT end the run through
    // the drop guards, which stop every process it started.
    let mut signals = Signals::new()?;

    // The database first: when PostgreSQL is missing, say so before
    // starting anything else.
    let mut server = None;
    let url = match &args.postgres {
        Some(url) => url.clone(),
        None => {
            let bin = find_bin_dir()?;
            let pg = tokio::select! {
                pg = PgServer::start(&bin) => pg?,
                signal = signals.recv() => return Err(DemoError::Interrupted(signal.as_str())),
            };
            say(&format!("postgres: started {}", pg.describe()));
            let url = pg.url().to_string();
            server = Some(pg);
            url
        }
    };

    let mut local = None;
    let endpoints = if args.endpoints.is_empty() {
        let nodes = tokio::select! {
            nodes = LocalNodes::start() => nodes?,
            signal = signals.recv() => return Err(DemoError::Interrupted(signal.as_str())),
        };
        say(&format!(
            "cluster: started {NODES} local nodes at {} (data in {})",
            nodes.cluster.endpoints().join(","),
            nodes.dir.path().display()
        ));
        let endpoints = nodes.cluster.endpoints();
        local = Some(nodes);
        endpoints
    } else {
        args.endpoints.clone()
    };

    let ledger = Ledger::create(&url, args.accounts).await?;
    let result = run_workers(args, &ledger, &url, &endpoints, &mut signals).await;
    // Every worker is gone by now (killed on an error path): the schema can
    // go, on every path that gets here.
    if let Err(e) = ledger.drop_schema().await {
        eprintln!("demo: dropping schema {}: {e}", ledger.schema);
    }
    drop(ledger);
    if let Some(mut pg) = server {
        pg.stop().await;
    }
    if let Some(mut nodes) = local {
        nodes.cluster.stop_all(Duration::from_secs(5));
    }
    let (outcome, timeline) = result?;
    report::print(&outcome);
    let out = match &args.out {
        Some(out) => out.clone(),
        None => tempfile::Builder::new().prefix("leasehold-demo-payments-").tempdir()?.keep(),
    };
    report::write(&out, args, &outcome, &timeline)?;
    say(&format!("report: {}", out.display()));
    Ok(outcome)
}

/// Starts the workers, drives the run, and reads the outcome from the
/// ledger before its schema goes.
async fn run_workers(
    args: &PaymentsOptions,
    ledger: &Ledger,
    url: &str,
    endpoints: &[String],
    signals: &mut Signals,
) -> Result<(Outcome, Timeline), DemoError> {
    let fencing = !args.no_fencing;
    let total_before = args.accounts as i64 * INITIAL_BALANCE;
    say(&format!(
        "ledger: {} accounts of {INITIAL_BALANCE} (total {total_before}) in schema {}, fencing {}",
        args.accounts,
        ledger.schema,
        if fencing {
            "ON: every read raises the account's fence, every statement carries WHERE fence <= $token"
        } else {
            "OFF"
        }
    ));
    say(&format!(
        "workers: {} for {}s, lease ttl {:?}; after {FAULT_AFTER:?} one is stopped for {:?} while it holds two locks",
        args.workers,
        args.seconds,
        args.ttl,
        2 * args.ttl
    ));

    let binary = std::env::current_exe()?;
    let (line_tx, lines) = mpsc::unbounded_channel();
    let mut workers = Vec::with_capacity(args.workers);
    let db_start = ledger.now().await?;
    for id in 1..=args.workers as u32 {
        let spec = WorkerSpec { binary: &binary, postgres: url, schema: &ledger.schema, endpoints, args, id };
        workers.push(WorkerProcess::spawn(&spec, line_tx.clone())?);
    }
    drop(line_tx);

    let mut run = RunState {
        args,
        ledger,
        workers,
        lines,
        rng: fastrand::Rng::new(),
        started: Instant::now(),
        fault: None,
        reports: Vec::new(),
    };
    run.drive(signals).await?;
    run.reap().await;
    let elapsed = run.started.elapsed();
    let accounts = ledger.accounts().await?;
    let outcome = Outcome {
        fencing,
        total_before,
        total_after: accounts.iter().map(|a| a.balance).sum(),
        accounts,
        transfers_recorded: ledger.counts().await?.applied,
        fault: run.fault.take(),
        workers: std::mem::take(&mut run.reports),
        elapsed,
    };
    let timeline = Timeline {
        applied_s: ledger.applied_times(db_start).await?,
        refusals: ledger.refusals(db_start).await?,
        pause: outcome
            .fault
            .as_ref()
            .map(|f| (f.since_start.as_secs_f64(), (f.since_start + f.stopped_for).as_secs_f64())),
        seconds: elapsed.as_secs_f64(),
    };
    Ok((outcome, timeline))
}

/// The local cluster and its data folder. Fields drop in order: the nodes
/// are killed before their folder is removed.
struct LocalNodes {
    cluster: LocalCluster,
    dir: TempDir,
}

impl LocalNodes {
    async fn start() -> Result<LocalNodes, DemoError> {
        let dir = tempfile::Builder::new().prefix(&format!("leasehold-demo-{}-", std::process::id())).tempdir()?;
        let binary = crate::leasehold_binary()?;
        let addrs = LocalCluster::free_addrs(NODES)?;
        // Declared after `dir`, so on an early return it is dropped (its
        // nodes killed) before the folder goes.
        let mut cluster = LocalCluster::new(&binary, dir.path(), &addrs, TICK_MS, NodeLogs::Files);
        cluster.start_all()?;
        cluster.wait_for_leader(LEADER_BOUND).await?;
        Ok(LocalNodes { cluster, dir })
    }
}

/// Where the fault stands.
enum Fault {
    Scheduled {
        at: Instant,
    },
    /// The victim was asked to announce its next held pair of locks.
    Requested {
        victim: u32,
        give_up: Instant,
    },
    Stopped {
        victim: u32,
        since: Instant,
        resume_at: Instant,
    },
    Over,
}

struct RunState<'a> {
    args: &'a PaymentsOptions,
    ledger: &'a Ledger,
    workers: Vec<WorkerProcess>,
    lines: mpsc::UnboundedReceiver<(u32, WorkerLine)>,
    rng: fastrand::Rng,
    /// When the workers were started: the timeline's zero.
    started: Instant,
    fault: Option<FaultRecord>,
    reports: Vec<WorkerReport>,
}

impl RunState<'_> {
    fn worker(&mut self, id: u32) -> Option<&mut WorkerProcess> {
        self.workers.iter_mut().find(|w| w.id == id)
    }

    /// Runs until every worker has closed its stdout, printing progress and
    /// injecting the fault.
    async fn drive(&mut self, signals: &mut Signals) -> Result<(), DemoError> {
        let started = self.started;
        let give_up = started + Duration::from_secs(self.args.seconds) + WORKER_GRACE;
        let mut state = Fault::Scheduled { at: started + FAULT_AFTER };
        let mut progress = tokio::time::interval_at((started + Duration::from_secs(1)).into(), Duration::from_secs(1));
        // One line per second even after a slow moment, not a burst.
        progress.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while self.workers.iter().any(|w| w.running) {
            let timer = match state {
                Fault::Scheduled { at } => Some(at),
                Fault::Requested { give_up, .. } => Some(give_up),
                Fault::Stopped { resume_at, .. } => Some(resume_at),
                Fault::Over => None,
            };
            tokio::select! {
                _ = progress.tick() => self.print_progress(started, &state).await,
                line = self.lines.recv() => match line {
                    Some((id, WorkerLine::Line(line))) => state = self.on_line(id, &line, state).await,
                    Some((id, WorkerLine::Closed)) => {
                        if let Some(w) = self.worker(id) {
                            w.running = false;
                        }
                    }
                    // Every reader thread has ended: nothing more will come.
                    None => break,
                },
                _ = tokio::time::sleep_until(timer.unwrap_or(give_up).into()), if timer.is_some() => {
                    state = self.on_timer(state);
                }
                _ = tokio::time::sleep_until(give_up.into()) => {
                    eprintln!("demo: workers still running {WORKER_GRACE:?} after the end; killing them");
                    break;
                }
                signal = signals.recv() => return Err(DemoError::Interrupted(signal.as_str())),
            }
        }
        if let Fault::Stopped { victim, .. } = state {
            // Only on the give-up path: let the victim be killed normally.
            if let Some(w) = self.worker(victim) {
                let _ = kill(w.pid(), Signal::SIGCONT);
            }
        }
        Ok(())
    }

    async fn print_progress(&self, started: Instant, state: &Fault) {
        let c = match self.ledger.counts().await {
            Ok(c) => c,
            Err(e) => {
                say(&format!("[{:>3}s] cannot read the ledger: {e}", started.elapsed().as_secs()));
                return;
            }
        };
        let note = match state {
            Fault::Stopped { victim, since, .. } => {
                format!("  (worker {victim} stopped for {}s)", since.elapsed().as_secs())
            }
            _ => String::new(),
        };
        say(&format!(
            "[{:>3}s] transfers applied {:>5}, refused as stale {}, retried idempotently {}{note}",
            started.elapsed().as_secs(),
            c.applied,
            c.refused_stale,
            c.retried,
        ));
    }

    async fn on_line(&mut self, id: u32, line: &str, state: Fault) -> Fault {
        if line.starts_with('{') {
            match serde_json::from_str::<WorkerReport>(line) {
                Ok(report) => self.reports.push(report),
                Err(e) => eprintln!("demo: worker {id} printed an unreadable report ({e}): {line}"),
            }
            return state;
        }
        if let Some(holding) = line.strip_prefix("holding ") {
            return match state {
                Fault::Requested { victim, .. } if victim == id => self.stop(id, holding).await,
                other => {
                    // Not (or no longer) wanted: release the worker at once.
                    if let Some(w) = self.worker(id) {
                        w.send("stopped");
                    }
                    other
                }
            };
        }
        if let Some(result) = line.strip_prefix("after-pause ") {
            say(&format!("fault: worker {id} resumed; its {result}"));
            if let Some(fault) = self.fault.as_mut().filter(|f| f.worker == id) {
                fault.late_write = Some(result.to_string());
            }
            return state;
        }
        say(&format!("[worker {id}] {line}"));
        state
    }

    /// SIGSTOPs the victim, which is waiting with its locks held, and tells
    /// it so once the stop has taken effect: it only reads that message after
    /// SIGCONT, so the pause falls exactly between its read and its write.
    async fn stop(&mut self, victim: u32, holding: &str) -> Fault {
        let ttl = self.args.ttl;
        let Some(worker) = self.worker(victim) else { return Fault::Over };
        let pid = worker.pid();
        if let Err(e) = kill(pid, Signal::SIGSTOP) {
            say(&format!("fault: cannot stop worker {victim} (pid {pid}): {e}; no pause this run"));
            worker.send("stopped");
            return Fault::Over;
        }
        let bound = Instant::now() + Duration::from_secs(1);
        while !is_stopped(pid) && Instant::now() < bound {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        worker.send("stopped");
        let since = Instant::now();
        say(&format!(
            "fault: SIGSTOP worker {victim} (pid {pid}) while it holds {holding}; SIGCONT in {:?} (ttl {ttl:?})",
            2 * ttl
        ));
        self.fault = Some(FaultRecord {
            worker: victim,
            holding: holding.to_string(),
            since_start: since - self.started,
            ..FaultRecord::default()
        });
        Fault::Stopped { victim, since, resume_at: since + 2 * ttl }
    }

    fn on_timer(&mut self, state: Fault) -> Fault {
        match state {
            Fault::Scheduled { .. } => {
                let running: Vec<u32> = self.workers.iter().filter(|w| w.running).map(|w| w.id).collect();
                if running.is_empty() {
                    return Fault::Over;
                }
                let victim = running[self.rng.u64(0..running.len() as u64) as usize];
                let asked = self.worker(victim).is_some_and(|w| w.send("pause"));
                if !asked {
                    say(&format!("fault: worker {victim} is gone; no pause this run"));
                    return Fault::Over;
                }
                say(&format!("fault: picked worker {victim}; it will be stopped once it holds two locks"));
                Fault::Requested { victim, give_up: Instant::now() + HOLDING_BOUND }
            }
            Fault::Requested { victim, .. } => {
                say(&format!("fault: worker {victim} did not report holding locks in {HOLDING_BOUND:?}; no pause"));
                Fault::Over
            }
            Fault::Stopped { victim, since, .. } => {
                if let Some(w) = self.worker(victim) {
                    let _ = kill(w.pid(), Signal::SIGCONT);
                }
                if let Some(fault) = self.fault.as_mut() {
                    fault.stopped_for = since.elapsed();
                }
                say(&format!(
                    "fault: SIGCONT worker {victim} after {:.1}s; it now writes the balances it read before the pause",
                    since.elapsed().as_secs_f64()
                ));
                Fault::Over
            }
            Fault::Over => Fault::Over,
        }
    }

    /// Waits (bounded) for every worker to exit; the drop guards kill what
    /// is left.
    async fn reap(&mut self) {
        let bound = Instant::now() + Duration::from_secs(5);
        for w in &mut self.workers {
            while !w.try_reap() && Instant::now() < bound {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            match w.status {
                Some(status) if !status.success() => eprintln!("demo: worker {} exited with {status}", w.id),
                Some(_) => {}
                None => eprintln!("demo: worker {} did not exit; killing it", w.id),
            }
        }
    }
}
