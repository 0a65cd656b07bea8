//! `leasehold-lab bench --workloads failover`: how long writes stop when the
//! leader's process dies, as a client writing through a surviving node sees it.
//!
//! Each round, per system (leasehold-3 and a 3-member etcd, alternating):
//! find the leader; start a writer that begins a write every
//! [`WRITE_EVERY`], each on a task of its own so that a write stuck in
//! retries does not hold back the next, through a survivor (the member after
//! the leader); kill -9 the leader's process; then measure the *gap*: from
//! the kill to the first acknowledgement of a write sent after it. A write
//! sent before the kill can be acknowledged just after it (a reply in
//! flight) and says nothing about the next leader, so it does not end the
//! gap; the longest pause between consecutive acknowledgements around the
//! kill is recorded beside it, and the two differ by about one write's
//! latency. Then the killed member is started again, and the round ends
//! once every member has applied the leader's log: the next round crashes
//! a whole cluster.
//!
//! A write, for leasehold: an acquire of a fresh lock name with the least
//! ttl the cluster grants ([`WRITE_TTL_MS`]), never released — one Raft
//! entry, as etcd's put is — by the real [`Client`], built with every
//! endpoint, the survivor first. As users get it, the client follows the
//! leader's hints once the survivor answers, and moves on to the next node
//! when the leader stops answering, retrying within its budget. For etcd: a
//! put of a fresh key through the survivor's JSON gateway, which forwards it
//! to the leader; the gateway does not retry, a write that fails is not
//! acknowledged, and the next one comes 10 ms later.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::Serialize;
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use super::etcd::Gateway;
use super::report::Machine;
use super::report::BUILD;
use super::rounds::{self, per_round_chart, RoundCluster, RoundStats, SystemRound};
use super::servers::{ServerError, START_BOUND};
use super::{AdapterError, SystemKind};
use leasehold_client::{Client, ClientError};
use leasehold_local::LocalClusterError;

/// Time between the starts of two writes.
pub const WRITE_EVERY: Duration = Duration::from_millis(10);
/// The ttl of leasehold's writes: the least a cluster grants, so the
/// abandoned leases leave the table soon.
const WRITE_TTL_MS: u64 = 3_000;
/// Acknowledged writes before the kill: the writer is in its stride.
const WRITES_BEFORE_KILL: usize = 50;
/// How long a gap may be before the round gives up on it.
const GAP_BOUND: Duration = Duration::from_secs(60);
/// Writing goes on this long after the first write acknowledged after the
/// kill, so the acknowledgements around it are all in.
const WRITES_AFTER: Duration = Duration::from_millis(300);
/// How long a restarted member may take to catch up.
const REJOIN_BOUND: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum FailoverError {
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("local leasehold cluster: {0}")]
    Cluster(#[from] LocalClusterError),
    #[error("leasehold client: {0}")]
    Client(#[from] ClientError),
    #[error(transparent)]
    Adapter(#[from] AdapterError),
    #[error("{0} did not happen within {1:?}")]
    Timeout(&'static str, Duration),
    #[error("results folder: {0}")]
    Io(#[from] std::io::Error),
}

/// What to run.
pub struct FailoverOptions {
    /// leasehold-N and etcd.
    pub systems: Vec<SystemKind>,
    pub rounds: usize,
    /// The `leasehold` binary, for the nodes.
    pub binary: PathBuf,
    /// failover.json, README.md and failover.svg go here.
    pub out: PathBuf,
    pub command: String,
}

/// One round of one system.
#[derive(Debug, Clone, Serialize)]
pub struct GapRow {
    pub system: String,
    pub round: usize,
    /// The leader's client endpoint, whose process was killed.
    pub killed: String,
    /// The endpoint the writes went to first.
    pub survivor: String,
    /// Kill → the first acknowledgement of a write sent after the kill.
    pub gap_ms: f64,
    /// The longest pause between consecutive acknowledgements, from the last
    /// one before the kill to the first one that ends the gap.
    pub longest_pause_ms: f64,
    pub writes_acked: usize,
    pub writes_failed: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Restart of the killed member → every member caught up.
    pub rejoin_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FailoverReport {
    pub command: String,
    pub machine: Machine,
    pub build: String,
    pub rounds: usize,
    pub write_every_ms: u64,
    pub rows: Vec<GapRow>,
    /// Rounds that failed, with why.
    pub failures: Vec<String>,
}

/// One write: when it was sent, and when it was acknowledged or why not.
#[derive(Debug, Clone)]
struct Write {
    sent: Instant,
    answer: Result<Instant, String>,
}

impl Write {
    fn acked(&self) -> Option<Instant> {
        self.answer.as_ref().ok().copied()
    }
}

/// What a kill did to a stream of writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Gap {
    /// Kill → the first acknowledgement of a write sent after the kill.
    after_kill: Duration,
    /// The longest pause between consecutive acknowledgements, from the last
    /// one before the kill to that first one.
    longest_pause: Duration,
}

/// The gap a kill at `killed` made in `writes`; `None` when no write was
/// acknowledged before the kill, or none sent after it was.
fn write_gap(writes: &[Write], killed: Instant) -> Option<Gap> {
    let first = writes.iter().filter(|w| w.sent >= killed).filter_map(Write::acked).min()?;
    let mut acks: Vec<Instant> = writes.iter().filter_map(Write::acked).filter(|&a| a <= first).collect();
    acks.sort();
    let last_before = acks.iter().rposition(|&a| a < killed)?;
    let longest_pause = acks[last_before..].windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default();
    Some(Gap { after_kill: first - killed, longest_pause })
}

/// Where a round's writes go first: a member that survives the crash.
#[derive(Clone)]
enum Survivor {
    Leasehold(Arc<Client>),
    Etcd(Gateway),
}

impl Survivor {
    /// A writer's way to `survivor` of `servers`.
    fn of(servers: &RoundCluster, survivor: usize) -> Result<Survivor, FailoverError> {
        let endpoints = servers.endpoints();
        Ok(match servers {
            RoundCluster::Leasehold(_) => {
                // Every endpoint, the survivor first: the client as users build it.
                let mut ordered = vec![endpoints[survivor].clone()];
                ordered.extend(endpoints.iter().enumerate().filter(|(i, _)| *i != survivor).map(|(_, e)| e.clone()));
                Survivor::Leasehold(Arc::new(Client::new(&ordered)?))
            }
            RoundCluster::Etcd(_) => Survivor::Etcd(Gateway::new(&endpoints[survivor])?),
        })
    }

    /// Writes `key` once: `Ok` when acknowledged.
    async fn write(&self, key: &str) -> Result<(), String> {
        match self {
            Survivor::Leasehold(client) => {
                client.acquire(key, "failover-writer", WRITE_TTL_MS).await.map(drop).map_err(|e| e.to_string())
            }
            Survivor::Etcd(gateway) => {
                let put = json!({ "key": STANDARD.encode(key), "value": STANDARD.encode("written") });
                gateway.call("/v3/kv/put", put, Duration::ZERO).await.map(drop).map_err(|e| e.to_string())
            }
        }
    }
}

/// A write started every [`WRITE_EVERY`] until [`finish`](Self::finish),
/// each recorded when it ends.
struct Writer {
    writes: Arc<Mutex<Vec<Write>>>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    /// Writes keys `prefix/0`, `prefix/1`, ... to `survivor`.
    fn start(survivor: Survivor, prefix: String) -> Writer {
        let writes = Arc::new(Mutex::new(Vec::new()));
        let (stop, mut stopped) = oneshot::channel::<()>();
        let recorded = writes.clone();
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(WRITE_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut in_flight = JoinSet::new();
            for n in 0u64.. {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = every.tick() => {}
                }
                let (survivor, key, recorded) = (survivor.clone(), format!("{prefix}/{n}"), recorded.clone());
                in_flight.spawn(async move {
                    let sent = Instant::now();
                    let answer = survivor.write(&key).await.map(|()| Instant::now());
                    recorded.lock().unwrap_or_else(PoisonError::into_inner).push(Write { sent, answer });
                });
            }
            while in_flight.join_next().await.is_some() {}
        });
        Writer { writes, stop, task }
    }

    /// Waits up to `bound` until the writes recorded so far satisfy `done`.
    async fn until(
        &self,
        what: &'static str,
        bound: Duration,
        done: impl Fn(&[Write]) -> bool,
    ) -> Result<(), FailoverError> {
        let poll = async {
            while !done(&self.writes.lock().unwrap_or_else(PoisonError::into_inner)) {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        tokio::time::timeout(bound, poll).await.map_err(|_| FailoverError::Timeout(what, bound))
    }

    /// Stops starting writes, waits for those in flight; every write.
    async fn finish(self) -> Vec<Write> {
        let _ = self.stop.send(());
        let _ = self.task.await;
        std::mem::take(&mut *self.writes.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// A system's servers.
struct Contender {
    kind: SystemKind,
    servers: RoundCluster,
}

/// One round on one system: the leader killed during the writes, then
/// restarted, and the cluster whole again before it returns.
async fn round(contender: &mut Contender, n: usize, rounds: usize) -> Result<GapRow, FailoverError> {
    let system = contender.kind.to_string();
    let servers = &mut contender.servers;
    let endpoints = servers.endpoints();
    let leader = servers.leader::<FailoverError>(START_BOUND).await?;
    let survivor = (leader + 1) % endpoints.len();
    eprintln!(
        "bench: failover round {n}/{rounds}, {system}: writing through {}, killing the leader {} ...",
        endpoints[survivor], endpoints[leader]
    );
    let writer = Writer::start(Survivor::of(servers, survivor)?, format!("bench/failover/{system}/{n}"));
    let steady = writer
        .until("writes before the kill", START_BOUND, |w| {
            w.iter().filter(|w| w.answer.is_ok()).count() >= WRITES_BEFORE_KILL
        })
        .await;
    if let Err(e) = steady {
        writer.finish().await;
        return Err(e);
    }
    let killed = Instant::now();
    servers.kill(leader);
    let recovered = writer
        .until("a write after the kill", GAP_BOUND, |w| w.iter().any(|w| w.sent >= killed && w.answer.is_ok()))
        .await;
    tokio::time::sleep(WRITES_AFTER).await;
    let writes = writer.finish().await;
    // Whatever the writes showed, the next round needs the member back.
    let restarted = Instant::now();
    servers.restart::<FailoverError>(leader)?;
    if !servers.wait_whole(REJOIN_BOUND).await {
        return Err(FailoverError::Timeout("the restarted member's catching up", REJOIN_BOUND));
    }
    let rejoin = restarted.elapsed();
    recovered?;
    let gap = write_gap(&writes, killed).ok_or(FailoverError::Timeout("a write gap", GAP_BOUND))?;
    let failed: Vec<&String> = writes.iter().filter_map(|w| w.answer.as_ref().err()).collect();
    Ok(GapRow {
        system,
        round: n,
        killed: endpoints[leader].clone(),
        survivor: endpoints[survivor].clone(),
        gap_ms: gap.after_kill.as_secs_f64() * 1e3,
        longest_pause_ms: gap.longest_pause.as_secs_f64() * 1e3,
        writes_acked: writes.len() - failed.len(),
        writes_failed: failed.len(),
        first_error: failed.first().map(|e| e.to_string()),
        rejoin_ms: rejoin.as_secs_f64() * 1e3,
    })
}

/// Starts every system's servers, runs the rounds (systems alternating in
/// each), writes the results into `options.out`.
pub async fn run(options: &FailoverOptions) -> Result<FailoverReport, FailoverError> {
    std::fs::create_dir_all(&options.out)?;
    let mut report = FailoverReport {
        command: options.command.clone(),
        machine: Machine::probe(),
        build: BUILD.into(),
        rounds: options.rounds,
        write_every_ms: WRITE_EVERY.as_millis() as u64,
        rows: Vec::new(),
        failures: Vec::new(),
    };
    let mut contenders = Vec::new();
    for &kind in &options.systems {
        eprintln!("bench: failover, starting {kind} ...");
        let dir = options.out.join("servers").join(kind.to_string());
        match RoundCluster::start::<FailoverError>(kind, &options.binary, &dir).await {
            Ok(servers) => contenders.push(Contender { kind, servers }),
            Err(e) => report.failures.push(format!("{kind}: not started: {e}")),
        }
    }
    for n in 1..=options.rounds {
        for contender in &mut contenders {
            match round(contender, n, options.rounds).await {
                Ok(row) => {
                    eprintln!(
                        "bench:   failover round {n}, {}: gap {:.0} ms (longest pause {:.0} ms), {} writes acknowledged, {} failed; whole again {:.0} ms after the restart",
                        row.system, row.gap_ms, row.longest_pause_ms, row.writes_acked, row.writes_failed, row.rejoin_ms
                    );
                    report.rows.push(row);
                }
                Err(e) => {
                    eprintln!("bench:   failover round {n}, {}: failed: {e}", contender.kind);
                    report.failures.push(format!("{} round {n}: {e}", contender.kind));
                }
            }
        }
    }
    drop(contenders);
    rounds::clean_up(&options.out, &mut report.machine)?;
    rounds::write_report(&options.out, "failover", &report, report.plot(), report.markdown())?;
    Ok(report)
}

impl SystemRound for GapRow {
    fn system(&self) -> &str {
        &self.system
    }

    fn round(&self) -> usize {
        self.round
    }
}

impl FailoverReport {
    pub fn markdown(&self) -> String {
        let title = "leasehold bench, failover: leader crash → first write acknowledged through a survivor";
        let mut out = rounds::preamble(title, &self.command, &self.machine);
        out.push_str(&format!(
            "Each round, per system (alternating): a writer starts a write every {} ms, each on its own task, \
             through a member that is not the leader; the leader's process is killed -9; the **gap** runs from \
             the kill to the first acknowledgement of a write sent after it. The longest pause between \
             consecutive acknowledgements around the kill is beside it (a write sent before the kill may be \
             acknowledged just after it). Then the killed member is restarted, and the next round waits until \
             every member has applied the leader's log.\n\n\
             - leasehold: one write is an acquire of a fresh lock name with a ttl of {} ms, never released \
             (one Raft entry), by leasehold's Rust client built with every endpoint, the survivor first; as \
             users get it, it follows the leader's hints, and after the crash tries the next node and retries \
             within its budget.\n\
             - etcd: one write is a put of a fresh key through the survivor's JSON gateway, which forwards it \
             to the leader; no client retry (the next write comes {} ms later).\n\n\
             ## Summary (ms)\n\n\
             | system | rounds | median gap | min | max | median longest pause |\n|---|---:|---:|---:|---:|---:|\n",
            self.write_every_ms, WRITE_TTL_MS, self.write_every_ms,
        ));
        for system in rounds::systems(&self.rows) {
            let gaps = RoundStats::of(rounds::of(&self.rows, &system).map(|r| r.gap_ms).collect());
            let pauses = RoundStats::of(rounds::of(&self.rows, &system).map(|r| r.longest_pause_ms).collect());
            out.push_str(&format!(
                "| {system} | {} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
                gaps.rounds, gaps.median, gaps.min, gaps.max, pauses.median
            ));
        }
        out.push_str("\n![write gap per round](failover.svg)\n\n## Every round\n\n");
        out.push_str(
            "| system | round | killed leader | written through | gap ms | longest pause ms | writes acknowledged | failed | whole again after restart ms |\n\
             |---|---:|---|---|---:|---:|---:|---:|---:|\n",
        );
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {:.1} | {:.1} | {} | {} | {:.0} |\n",
                r.system,
                r.round,
                r.killed,
                r.survivor,
                r.gap_ms,
                r.longest_pause_ms,
                r.writes_acked,
                r.writes_failed,
                r.rejoin_ms
            ));
        }
        let errors: Vec<String> = self
            .rows
            .iter()
            .filter_map(|r| r.first_error.as_ref().map(|e| format!("- {} round {}: {e}\n", r.system, r.round)))
            .collect();
        if !errors.is_empty() {
            out.push_str("\n## First failed write of a round\n\n");
            out.push_str(&errors.concat());
        }
        if !self.failures.is_empty() {
            out.push_str("\n## Failed rounds\n\n");
            for f in &self.failures {
                out.push_str(&format!("- {f}\n"));
            }
        }
        out
    }

    fn plot(&self) -> String {
        let title = "leader crash → first write acknowledged through a survivor";
        per_round_chart(title, self.rounds, &self.rows, |r| r.gap_ms, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(base: Instant, sent_ms: u64, acked_ms: Option<u64>) -> Write {
        let at = |ms| base + Duration::from_millis(ms);
        Write { sent: at(sent_ms), answer: acked_ms.map(at).ok_or_else(|| "unavailable".to_string()) }
    }

    // The gap ends at the first acknowledgement of a write sent after the
    // kill; a reply in flight at the kill does not end it, but splits the
    // longest pause.
    #[test]
    fn gap_ends_at_first_write_sent_after_the_kill() {
        let base = Instant::now();
        let writes = [
            write(base, 0, Some(2)),
            write(base, 10, Some(12)),
            // In flight at the kill (20 ms): acknowledged at 21.
            write(base, 19, Some(21)),
            // Stuck in retries until the next leader, at 1 500.
            write(base, 30, Some(1_505)),
            write(base, 40, None),
            write(base, 1_490, Some(1_502)),
            write(base, 1_510, Some(1_512)),
        ];
        let gap = write_gap(&writes, base + Duration::from_millis(20)).expect("a gap");
        assert_eq!(gap.after_kill, Duration::from_millis(1_482));
        assert_eq!(gap.longest_pause, Duration::from_millis(1_481));
    }

    // Without an acknowledgement before the kill, or of a write sent after
    // it, there is no gap to speak of.
    #[test]
    fn no_gap_without_writes_on_both_sides() {
        let base = Instant::now();
        let killed = base + Duration::from_millis(20);
        assert_eq!(write_gap(&[write(base, 30, Some(40))], killed), None);
        assert_eq!(write_gap(&[write(base, 0, Some(5)), write(base, 30, None)], killed), None);
    }

    fn row(system: &str, round: usize, gap_ms: f64) -> GapRow {
        GapRow {
            system: system.into(),
            round,
            killed: "127.0.0.1:1".into(),
            survivor: "127.0.0.1:2".into(),
            gap_ms,
            longest_pause_ms: gap_ms - 5.0,
            writes_acked: 100,
            writes_failed: 0,
            first_error: None,
            rejoin_ms: 800.0,
        }
    }

    // The summary is the median, min and max gap per system; every round
    // has a row; the plot a series per system.
    #[test]
    fn report_summarizes_every_system() {
        let report = FailoverReport {
            command: "leasehold-lab bench --workloads failover --rounds 3".into(),
            machine: Machine::probe(),
            build: BUILD.into(),
            rounds: 3,
            write_every_ms: 10,
            rows: vec![
                row("leasehold-3", 1, 900.0),
                row("etcd", 1, 1_200.0),
                row("leasehold-3", 2, 700.0),
                row("etcd", 2, 1_100.0),
                row("leasehold-3", 3, 1_000.0),
                row("etcd", 3, 1_300.0),
            ],
            failures: vec!["etcd round 4: a write after the kill did not happen within 60s".into()],
        };
        let markdown = report.markdown();
        assert!(markdown.contains("| leasehold-3 | 3 | 900 | 700 | 1000 | 895 |"), "{markdown}");
        assert!(markdown.contains("| etcd | 3 | 1200 | 1100 | 1300 | 1195 |"), "{markdown}");
        assert!(
            markdown.contains("| etcd | 2 | 127.0.0.1:1 | 127.0.0.1:2 | 1100.0 | 1095.0 | 100 | 0 | 800 |"),
            "{markdown}"
        );
        assert!(markdown.contains("## Failed rounds\n\n- etcd round 4"), "{markdown}");
        let svg = report.plot();
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
    }
}
