//! The end of `leasehold-lab demo payments`: the result table on stdout, and
//! the report in `--out`: `report.md`, `report.json` and `timeline.svg`
//! (transfers per second, the pause, the refused transactions), drawn with
//! [`crate::plot`].

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::ledger::{AccountRow, Refusal};
use super::{say, PaymentsOptions, WorkerReport};
use crate::plot::{short, Chart, LineStyle};

/// What happened to the paused worker.
#[derive(Debug, Clone, Default)]
pub struct FaultRecord {
    pub worker: u32,
    /// The worker's own description of the locks it held when stopped.
    pub holding: String,
    /// When it was stopped, counted from the workers' start.
    pub since_start: Duration,
    pub stopped_for: Duration,
    /// What became of its late write, as the worker reported it.
    pub late_write: Option<String>,
}

impl FaultRecord {
    /// PostgreSQL rolled the late write back.
    pub fn late_write_refused(&self) -> bool {
        self.late_write.as_deref().is_some_and(|w| w.contains("refused by PostgreSQL"))
    }
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub fencing: bool,
    pub total_before: i64,
    pub total_after: i64,
    pub accounts: Vec<AccountRow>,
    /// Rows of `transfers`: transfer ids recorded, each once.
    pub transfers_recorded: i64,
    pub fault: Option<FaultRecord>,
    pub workers: Vec<WorkerReport>,
    /// How long the workers ran.
    pub elapsed: Duration,
}

impl Outcome {
    pub fn sum(&self, f: impl Fn(&WorkerReport) -> u64) -> u64 {
        self.workers.iter().map(f).sum()
    }

    pub fn applied(&self) -> u64 {
        self.sum(|w| w.transfers_applied)
    }

    pub fn refused_stale(&self) -> u64 {
        self.sum(|w| w.stale_reads_refused + w.stale_writes_refused)
    }

    pub fn applied_twice(&self) -> u64 {
        self.sum(|w| w.applied_twice)
    }

    pub fn lost_updates(&self) -> usize {
        self.accounts.iter().filter(|a| a.lost_updates()).count()
    }

    /// Every commit the workers counted recorded its own transfer id (none
    /// is missing, none extra), and no replay committed.
    pub fn applied_once(&self) -> bool {
        self.transfers_recorded == self.applied() as i64 && self.applied_twice() == 0
    }

    /// The money is all there, every balance is its opening balance plus
    /// the transfers applied to it (no update was lost), and every transfer
    /// was applied exactly once.
    pub fn invariant_holds(&self) -> bool {
        self.total_after == self.total_before && self.lost_updates() == 0 && self.applied_once()
    }

    pub fn exit_code(&self) -> i32 {
        if self.invariant_holds() {
            0
        } else {
            1
        }
    }
}

/// What the timeline shows, in seconds since the workers started.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// When each transfer was applied (its commit, by the database's clock).
    pub applied_s: Vec<f64>,
    pub refusals: Vec<Refusal>,
    /// The pause: SIGSTOP to SIGCONT.
    pub pause: Option<(f64, f64)>,
    pub seconds: f64,
}

/// p50 and p99 of samples in microseconds, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spread {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
}

impl Spread {
    pub fn of(samples: &[u64]) -> Spread {
        if samples.is_empty() {
            return Spread::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let at = |q: f64| sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1] as f64 / 1e3;
        let mean = sorted.iter().sum::<u64>() as f64 / sorted.len() as f64 / 1e3;
        Spread { p50_ms: at(0.50), p99_ms: at(0.99), mean_ms: mean }
    }
}

/// The latency of the applied transfers by part, and the lock's share.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    pub acquire: Spread,
    pub db: Spread,
    pub release: Spread,
    /// (acquire + release) / (acquire + database + release), of the means.
    pub lock_share: f64,
}

impl Latency {
    pub fn of(outcome: &Outcome) -> Latency {
        let all = |f: fn(&super::WorkerReport) -> &Vec<u64>| -> Vec<u64> {
            outcome.workers.iter().flat_map(|w| f(w).iter().copied()).collect()
        };
        let acquire = Spread::of(&all(|w| &w.acquire_us));
        let db = Spread::of(&all(|w| &w.db_us));
        let release = Spread::of(&all(|w| &w.release_us));
        let total = acquire.mean_ms + db.mean_ms + release.mean_ms;
        let lock_share = if total > 0.0 { (acquire.mean_ms + release.mean_ms) / total } else { 0.0 };
        Latency { acquire, db, release, lock_share }
    }
}

fn rows(outcome: &Outcome) -> Vec<(&'static str, String)> {
    vec![
        ("transfers applied", outcome.applied().to_string()),
        ("refused as stale", outcome.refused_stale().to_string()),
        ("retried idempotently", outcome.sum(|w| w.retried_idempotently).to_string()),
        ("transfers applied twice", outcome.applied_twice().to_string()),
        ("transfer ids recorded", outcome.transfers_recorded.to_string()),
        ("accounts with lost updates", outcome.lost_updates().to_string()),
        ("total before", outcome.total_before.to_string()),
        ("total after", outcome.total_after.to_string()),
        ("invariant holds", if outcome.invariant_holds() { "yes" } else { "NO" }.to_string()),
    ]
}

fn table(outcome: &Outcome) -> String {
    let mut table = String::new();
    table.push_str(&format!("| {:<26} | {:>8} |\n", "", "value"));
    table.push_str(&format!("|{:-<28}|{:->9}:|\n", "", ""));
    for (name, value) in rows(outcome) {
        table.push_str(&format!("| {name:<26} | {value:>8} |\n"));
    }
    table
}

/// Accounts listed one by one up to this many; past it only those with
/// lost updates (report.json has them all).
const LISTED_ACCOUNTS: usize = 32;

fn listed(outcome: &Outcome) -> impl Iterator<Item = &AccountRow> {
    let all = outcome.accounts.len() <= LISTED_ACCOUNTS;
    outcome.accounts.iter().filter(move |a| all || a.lost_updates())
}

fn fence_range(outcome: &Outcome) -> String {
    let fences = outcome.accounts.iter().map(|a| a.fence);
    match (fences.clone().min(), fences.max()) {
        (Some(lo), Some(hi)) => format!("{} accounts, fences {lo} to {hi}", outcome.accounts.len()),
        _ => "no accounts".to_string(),
    }
}

fn accounts_table(outcome: &Outcome) -> String {
    let mut table = String::new();
    if outcome.accounts.len() > LISTED_ACCOUNTS {
        table.push_str(&format!("{}; those with lost updates:\n\n", fence_range(outcome)));
    }
    table.push_str("| account | balance | journal | fence |\n|---|---:|---:|---:|\n");
    for a in listed(outcome) {
        let journal = if a.lost_updates() { format!("**{}**", a.journal) } else { a.journal.to_string() };
        table.push_str(&format!("| {} | {} | {journal} | {} |\n", a.id, a.balance, a.fence));
    }
    table
}

fn verdict(outcome: &Outcome) -> String {
    let holds = outcome.invariant_holds();
    let delta = outcome.total_after - outcome.total_before;
    let damage = match delta {
        0 => format!("{} accounts lost updates, the total happens to be intact", outcome.lost_updates()),
        d if d > 0 => format!("{d:+} money created"),
        d => format!("{} money destroyed", -d),
    };
    match (outcome.fencing, holds) {
        (true, true) if outcome.fault.as_ref().is_some_and(|f| f.late_write_refused()) => {
            "invariant holds: the paused worker's late transaction carried stale tokens and PostgreSQL refused it"
                .to_string()
        }
        (true, true) if outcome.refused_stale() > 0 => {
            "invariant holds: stale transactions reached the database and PostgreSQL refused them".to_string()
        }
        (true, true) => "invariant holds (no stale transaction reached the database this run)".to_string(),
        (false, false) => format!(
            "invariant broken, as expected without fencing: the paused worker's late write replaced newer \
             balances ({damage})"
        ),
        (false, true) if outcome.fault.is_none() => "invariant holds: no worker could be paused this run".to_string(),
        (false, true) => {
            "invariant holds this time, by luck: nobody changed the paused worker's accounts while it was stopped"
                .to_string()
        }
        (true, false) => format!(
            "invariant BROKEN with fencing on ({damage}, {} applied twice, {} ids recorded for {} commits): \
             this is a bug",
            outcome.applied_twice(),
            outcome.transfers_recorded,
            outcome.applied()
        ),
    }
}

/// The result table and the verdict on stdout.
pub fn print(outcome: &Outcome) {
    say(&format!("\nresult (fencing {}):\n{}", if outcome.fencing { "on" } else { "off" }, table(outcome)));
    let mut workers = outcome.workers.clone();
    workers.sort_by_key(|w| w.worker);
    for w in &workers {
        say(&format!(
            "worker {}: applied {}, refused as stale {} (reads {}, writes {}), retried idempotently {}, \
             acquire failures {}, releases refused {}, errors {}",
            w.worker,
            w.transfers_applied,
            w.stale_reads_refused + w.stale_writes_refused,
            w.stale_reads_refused,
            w.stale_writes_refused,
            w.retried_idempotently,
            w.acquire_failures,
            w.releases_refused,
            w.errors
        ));
    }
    // Each account's final balance, journal (bold where they differ: lost
    // updates) and fence.
    say(&format!("\n{}", accounts_table(outcome)));
    let latency = Latency::of(outcome);
    say(&format!(
        "throughput: {:.1} transfers/s; per transfer p50/p99: acquire {:.2}/{:.2} ms, database {:.2}/{:.2} ms, \
         release {:.2}/{:.2} ms; the lock's share {:.0}%",
        throughput(outcome),
        latency.acquire.p50_ms,
        latency.acquire.p99_ms,
        latency.db.p50_ms,
        latency.db.p99_ms,
        latency.release.p50_ms,
        latency.release.p99_ms,
        latency.lock_share * 100.0
    ));
    say(&verdict(outcome));
}

fn throughput(outcome: &Outcome) -> f64 {
    outcome.applied() as f64 / outcome.elapsed.as_secs_f64().max(1e-9)
}

/// Writes `report.md`, `report.json` and `timeline.svg` into `out`.
pub fn write(out: &Path, args: &PaymentsOptions, outcome: &Outcome, timeline: &Timeline) -> std::io::Result<()> {
    std::fs::create_dir_all(out)?;
    let latency = Latency::of(outcome);
    let spread = |s: Spread| json!({"p50_ms": s.p50_ms, "p99_ms": s.p99_ms, "mean_ms": s.mean_ms});
    let report = json!({
        "command": args.command,
        "fencing": outcome.fencing,
        "workers": args.workers,
        "accounts": args.accounts,
        "seconds": args.seconds,
        "ttl_ms": args.ttl.as_millis() as u64,
        "elapsed_s": outcome.elapsed.as_secs_f64(),
        "transfers_per_s": throughput(outcome),
        "result": rows(outcome).into_iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "latency": {
            "acquire": spread(latency.acquire),
            "database": spread(latency.db),
            "release": spread(latency.release),
            "lock_share": latency.lock_share,
        },
        "accounts_final": outcome.accounts,
        "fault": outcome.fault.as_ref().map(|f| json!({
            "worker": f.worker,
            "holding": f.holding,
            "stopped_at_s": f.since_start.as_secs_f64(),
            "stopped_for_s": f.stopped_for.as_secs_f64(),
            "late_write": f.late_write,
        })),
        "refusals": timeline.refusals,
        "workers_reports": outcome.workers.iter().map(|w| json!({
            "worker": w.worker,
            "transfers_applied": w.transfers_applied,
            "stale_reads_refused": w.stale_reads_refused,
            "stale_writes_refused": w.stale_writes_refused,
            "retried_idempotently": w.retried_idempotently,
            "applied_twice": w.applied_twice,
            "acquire_failures": w.acquire_failures,
            "releases_refused": w.releases_refused,
            "errors": w.errors,
        })).collect::<Vec<_>>(),
    });
    std::fs::write(out.join("report.json"), serde_json::to_string_pretty(&report)? + "\n")?;
    std::fs::write(out.join("timeline.svg"), svg(outcome, timeline))?;
    std::fs::write(out.join("report.md"), markdown(args, outcome, &latency))?;
    Ok(())
}

fn markdown(args: &PaymentsOptions, outcome: &Outcome, latency: &Latency) -> String {
    let fault = match &outcome.fault {
        Some(f) => format!(
            "Worker {} was stopped (SIGSTOP) {:.1} s in, while it held {}, for {:.1} s (ttl {:?}); \
             its late write: {}.",
            f.worker,
            f.since_start.as_secs_f64(),
            f.holding,
            f.stopped_for.as_secs_f64(),
            args.ttl,
            f.late_write.as_deref().unwrap_or("none reported")
        ),
        None => "No worker could be paused this run.".to_string(),
    };
    let part = |name: &str, s: Spread| format!("| {name} | {:.2} | {:.2} | {:.2} |\n", s.p50_ms, s.p99_ms, s.mean_ms);
    format!(
        "# leasehold demo payments (fencing {})\n\n\
         ```sh\n{}\n```\n\n\
         {} workers, {} accounts, {} s, lease ttl {:?}; {:.1} s of work.\n\n{fault}\n\n\
         {}\n{}\n\n## Accounts\n\n{}\n\
         ## Throughput and latency\n\n\
         {:.1} transfers/s. Per applied transfer (the simulated work between read and write not counted):\n\n\
         | part | p50 ms | p99 ms | mean ms |\n|---|---:|---:|---:|\n{}{}{}\n\
         The lock (acquire + release) is {:.0}% of a transfer's mean time outside the simulated work. The p99 \
         of acquire includes the waits behind the paused worker's expiring leases.\n\n\
         ![timeline](timeline.svg)\n",
        if outcome.fencing { "on" } else { "off" },
        args.command,
        args.workers,
        args.accounts,
        args.seconds,
        args.ttl,
        outcome.elapsed.as_secs_f64(),
        table(outcome),
        verdict(outcome),
        accounts_table(outcome),
        throughput(outcome),
        part("acquire both locks", latency.acquire),
        part("database (read + write transactions)", latency.db),
        part("release both locks", latency.release),
        latency.lock_share * 100.0,
    )
}

/// Transfers applied and refused per second, the pause as a band, each
/// stale refusal as a thin band.
pub fn svg(outcome: &Outcome, timeline: &Timeline) -> String {
    // Whole seconds only: a last, partial second would show as a drop.
    let seconds = timeline.seconds.floor().max(1.0) as usize;
    let per_second = |times: &mut dyn Iterator<Item = f64>| {
        let mut bins = vec![0u64; seconds];
        for t in times {
            if let Some(bin) = bins.get_mut(t.max(0.0) as usize) {
                *bin += 1;
            }
        }
        bins
    };
    let applied = per_second(&mut timeline.applied_s.iter().copied());
    let stale: Vec<&Refusal> = timeline.refusals.iter().filter(|r| r.kind.starts_with("stale")).collect();
    let refused = per_second(&mut stale.iter().map(|r| r.at_s));
    let top = applied.iter().chain(&refused).copied().max().unwrap_or(0).max(1) as f64 * 1.1;
    let title =
        format!("leasehold demo payments on PostgreSQL (fencing {})", if outcome.fencing { "on" } else { "off" });
    let mut chart = Chart::new(&title, "seconds since the workers started", "per second");
    let step = if seconds > 30 { 10 } else { 5 };
    for s in (0..=seconds).step_by(step) {
        chart.tick_x(s as f64 / seconds as f64, &s.to_string());
    }
    for i in 0..=4 {
        let v = top / 4.0 * i as f64;
        chart.tick_y(i as f64 / 4.0, &short(v.round()));
    }
    let x = |t: f64| t / seconds as f64;
    if let Some((from, to)) = timeline.pause {
        let worker = outcome.fault.as_ref().map_or(0, |f| f.worker);
        chart.band(x(from), x(to), &format!("worker {worker} stopped (SIGSTOP)"));
    }
    for r in stale.iter().take(20) {
        chart.band(x(r.at_s), x(r.at_s), &format!("refused ({}) {}", r.kind, r.transfer_id));
    }
    let points = |bins: &[u64]| -> Vec<(f64, f64)> {
        bins.iter().enumerate().map(|(i, n)| (x(i as f64 + 0.5), *n as f64 / top)).collect()
    };
    chart.line("transfers applied /s", &points(&applied), LineStyle::Trace);
    chart.line("refused as stale /s", &points(&refused), LineStyle::Trace);
    chart.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::WorkerReport;
    use std::time::Duration;

    fn outcome(fencing: bool, balances: &[(i64, i64)]) -> Outcome {
        let worker = WorkerReport {
            worker: 1,
            transfers_applied: 3,
            stale_writes_refused: 1,
            acquire_us: vec![1000, 2000, 3000],
            db_us: vec![3000, 3000, 3000],
            release_us: vec![1000, 1000, 1000],
            ..WorkerReport::default()
        };
        Outcome {
            fencing,
            total_before: 1000 * balances.len() as i64,
            total_after: balances.iter().map(|b| b.0).sum(),
            accounts: balances
                .iter()
                .enumerate()
                .map(|(i, &(balance, journal))| AccountRow { id: i as i32, balance, fence: 7, journal })
                .collect(),
            transfers_recorded: 3,
            fault: None,
            workers: vec![worker],
            elapsed: Duration::from_secs(3),
        }
    }

    // Ensures the invariant needs the total, the journal and the ids, and
    // the figures come out of the workers' samples.
    #[test]
    fn invariant_and_figures() {
        let good = outcome(true, &[(990, 990), (1010, 1010)]);
        assert!(good.invariant_holds());
        assert_eq!(good.exit_code(), 0);
        let lost = outcome(false, &[(1000, 990), (1000, 1010)]);
        assert_eq!((lost.lost_updates(), lost.exit_code()), (2, 1), "total intact, updates lost");
        let mut missing = outcome(true, &[(1000, 1000)]);
        missing.transfers_recorded = 2;
        assert!(!missing.invariant_holds(), "a commit without its record");
        let latency = Latency::of(&good);
        assert_eq!((latency.acquire.p50_ms, latency.acquire.p99_ms), (2.0, 3.0));
        assert!((latency.lock_share - 0.5).abs() < 1e-9, "{latency:?}");
        assert!((throughput(&good) - 1.0).abs() < 1e-9);
        assert!(table(&good).contains("| refused as stale           |        1 |"), "{}", table(&good));
    }

    // Ensures many accounts are summed up, not listed, except those with
    // lost updates.
    #[test]
    fn many_accounts_list_only_the_damaged() {
        let mut balances = vec![(1000, 1000); 40];
        balances[7] = (1010, 1000);
        let table = accounts_table(&outcome(false, &balances));
        assert!(table.starts_with("40 accounts, fences 7 to 7; those with lost updates:"), "{table}");
        assert_eq!(table.lines().filter(|l| l.starts_with("| 7 |")).count(), 1, "{table}");
        assert_eq!(table.lines().count(), 5, "{table}");
    }

    // Ensures the timeline has both lines, the pause and each refusal.
    #[test]
    fn timeline_shows_the_pause_and_the_refusals() {
        let good = outcome(true, &[(1000, 1000)]);
        let timeline = Timeline {
            applied_s: vec![0.2, 0.4, 2.5],
            refusals: vec![Refusal { at_s: 2.1, kind: "stale-write".into(), transfer_id: "w1-9-4".into() }],
            pause: Some((0.5, 2.0)),
            seconds: 3.0,
        };
        let svg = svg(&good, &timeline);
        for text in [">transfers applied /s<", ">refused as stale /s<", "stopped (SIGSTOP)<", "w1-9-4<"] {
            assert!(svg.contains(text), "{text} missing: {svg}");
        }
    }
}
