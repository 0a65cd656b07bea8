//! Lock cycles: each client is one tokio task with its own session, looping
//! acquire → release, either on a lock name of its own
//! ([`Workload::Distinct`]) or all on one hot name ([`Workload::Hot`]: every
//! cycle after the first is a hand-off from one client to the next). A
//! [`Workload::Pair`] cycle takes two names of the client's own at once and
//! releases both (leasehold in one multi-acquire, the others one after the
//! other). A [`Workload::Herd`] is the hot name with hundreds or thousands of
//! waiters, each session pinned to one node in turn (where the system lets
//! a client choose), as a fleet of workers behind a load balancer would be.
//! A [`Workload::Semaphore`] cycle is the hot one with a counting semaphore
//! of [`SEMAPHORE_LIMIT`] in place of the lock: one permit, waited for,
//! then released; the harness counts holders in the server's order of
//! grants ([`holders_at_grants`]).
//!
//! Cycles that end between the warm-up and the stop time count, wherever
//! they began (on a hot name a cycle's wait can be longer than the window);
//! their cycle and acquire latencies go into HDR histograms in microseconds.
//! After the stop time each client finishes the cycle it is in (so it
//! releases what it holds), bounded by [`DRAIN`].

use std::cmp::Reverse;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::{cpu, AdapterError, LockSession};
use crate::bench::{histogram, BenchRow, SemaphoreCount, CDF_QUANTILES};

/// What the clients contend for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// A lock name per client: no contention, measures the write path.
    Distinct,
    /// One lock name for all clients, waiting for it: hand-offs.
    Hot,
    /// The hot name with a herd of waiters spread over the nodes.
    Herd,
    /// Distinct names while a flood of idle connections is held open
    /// against one server ([`super::flood`]).
    Flood,
    /// Two names per client, taken and released together: a transfer
    /// between two accounts, without contention.
    Pair,
    /// One counting semaphore for all clients: each cycle takes one of its
    /// [`SEMAPHORE_LIMIT`] permits, waiting for it, and releases it.
    Semaphore,
    /// Not a lock cycle: rounds of leader crash → next leader's first
    /// fenced write, run by [`super::election`] rather than by clients here.
    Election,
    /// Not a lock cycle: rounds of leader crash during a stream of writes
    /// through a surviving node, the gap in acknowledged writes measured by
    /// [`super::failover`].
    Failover,
}

impl Workload {
    pub const ALL: [Workload; 8] = [
        Workload::Distinct,
        Workload::Hot,
        Workload::Herd,
        Workload::Flood,
        Workload::Pair,
        Workload::Semaphore,
        Workload::Election,
        Workload::Failover,
    ];

    /// Every cycle waits for the one name: cycles are hand-offs.
    pub fn hands_off(self) -> bool {
        matches!(self, Workload::Hot | Workload::Herd)
    }

    /// Clients wait for what they take: on the one name, or for a permit.
    fn waits(self) -> bool {
        self.hands_off() || self == Workload::Semaphore
    }

    /// The workload's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Distinct => "distinct",
            Workload::Hot => "hot",
            Workload::Herd => "herd",
            Workload::Flood => "flood",
            Workload::Pair => "pair",
            Workload::Semaphore => "semaphore",
            Workload::Election => "election",
            Workload::Failover => "failover",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Workload::Distinct => "cycle-distinct",
            Workload::Hot => "hot-handoff",
            Workload::Herd => "herd-handoff",
            Workload::Flood => "cycle-distinct-flooded",
            Workload::Pair => "cycle-pair",
            Workload::Semaphore => "semaphore-permit",
            Workload::Election => "election-failover",
            Workload::Failover => "failover-write-gap",
        }
    }
}

/// How long a hot-name client waits for the lock (or a semaphore client
/// for a permit) before giving up a cycle.
const HOT_WAIT: Duration = Duration::from_secs(60);
/// The permits of the semaphore workload's one semaphore.
pub const SEMAPHORE_LIMIT: u32 = 8;
/// How long after the stop time a client may take to finish its cycle.
pub const DRAIN: Duration = Duration::from_secs(10);
/// A failed cycle pauses its client this long, so a client whose lock
/// outlived a failed release does not spin against the server.
const AFTER_ERROR: Duration = Duration::from_millis(10);

/// One measurement.
pub struct Plan {
    pub system: String,
    pub workload: Workload,
    pub clients: usize,
    pub run: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub ttl: Duration,
    /// The system's server processes, whose CPU time is measured (none for
    /// a cluster the benchmark did not start).
    pub server_pids: Vec<u32>,
}

impl Plan {
    /// The names one client's cycle takes. They are new for every
    /// measurement, and name the system (two systems can share servers:
    /// etcd and etcd-session, leasehold-N and leasehold-N-spread), so
    /// nothing left by an earlier one (a lease whose release failed) is in
    /// the way.
    fn lock_names(&self, client: usize) -> Vec<String> {
        let (system, run, clients) = (&self.system, self.run, self.clients);
        match self.workload {
            Workload::Distinct => vec![format!("bench/{system}/{run}/{clients}/{client}")],
            Workload::Flood => vec![format!("bench/{system}/flooded/{run}/{clients}/{client}")],
            Workload::Hot => vec![format!("bench/{system}/hot/{run}/{clients}")],
            Workload::Herd => vec![format!("bench/{system}/herd/{run}/{clients}")],
            Workload::Semaphore => vec![format!("bench/{system}/semaphore/{run}/{clients}")],
            Workload::Pair => {
                ["from", "to"].map(|end| format!("bench/{system}/pair/{run}/{clients}/{client}/{end}")).into()
            }
            Workload::Election | Workload::Failover => vec![format!("bench/{system}/{}/{run}", self.workload.name())],
        }
    }
}

struct ClientResult {
    errors: u64,
    first_error: Option<String>,
}

/// The latencies of every client of one measurement, in one pair of
/// histograms: one pair per client would cost a herd of 5 000 clients
/// gigabytes (each histogram of these bounds is about 270 KiB).
#[derive(Clone)]
struct Latencies(Arc<Mutex<(Histogram<u64>, Histogram<u64>)>>);

impl Latencies {
    fn record(&self, cycle: Duration, acquired: Duration) {
        let mut histograms = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = histograms.0.record(micros(cycle));
        let _ = histograms.1.record(micros(acquired));
    }
}

/// One permit as the harness saw it.
#[derive(Debug, Clone, Copy)]
struct Permit {
    /// Its grant's place in the server's order (the grant's token).
    token: u64,
    /// When its client learned it held it.
    answered: Instant,
    /// When its client started to give it back.
    released: Instant,
}

/// The permits of one measurement, in the order their releases started.
#[derive(Clone, Default)]
struct Permits(Arc<Mutex<Vec<Permit>>>);

impl Permits {
    /// A permit answered at `answered` whose release starts now.
    fn releasing(&self, token: u64, answered: Instant) {
        let permit = Permit { token, answered, released: Instant::now() };
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(permit);
    }

    /// The harness's count of holders over the permits seen.
    fn count(&self) -> SemaphoreCount {
        let permits = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let at_grants = holders_at_grants(&permits);
        let limit = SEMAPHORE_LIMIT as usize;
        SemaphoreCount {
            limit: SEMAPHORE_LIMIT,
            most_holders: at_grants.iter().copied().max().unwrap_or(0) as u64,
            over_limit: at_grants.iter().filter(|&&n| n > limit).count() as u64,
        }
    }
}

/// How many clients certainly held a permit at each grant, taken in the
/// server's order of grants (the tokens): the grant's own client, and every
/// other one whose grant came no later and whose release started after this
/// grant's answer arrived, so the server applied that release after this
/// grant. (Unless its lease had run out first, which takes a ttl: far
/// longer than any cycle here.) More than the limit is a violation, whatever
/// the timing. Not every overlap is seen: a client that started its release
/// may hold its permit a while longer, and as this workload's clients
/// release at once, the count catches only grants whose answers crossed
/// (a grant answered after a later one): a tripwire, not a proof.
fn holders_at_grants(permits: &[Permit]) -> Vec<usize> {
    let mut tokens: Vec<u64> = permits.iter().map(|p| p.token).collect();
    tokens.sort_unstable();
    tokens.dedup();
    // A Fenwick tree over the tokens' ranks (1-based) counts the permits
    // added so far with a token at most some rank.
    let slot = |token: u64| tokens.partition_point(|&t| t < token) + 1;
    let mut tree = vec![0_usize; tokens.len() + 1];
    let mut by_release: Vec<&Permit> = permits.iter().collect();
    by_release.sort_by_key(|p| Reverse(p.released));
    let mut by_answer: Vec<usize> = (0..permits.len()).collect();
    by_answer.sort_by_key(|&i| Reverse(permits[i].answered));
    let mut counts = vec![0; permits.len()];
    let mut added = 0;
    // Latest answer first: every release that started after an answer was
    // added for the answers after it too.
    for i in by_answer {
        let this = &permits[i];
        while let Some(other) = by_release.get(added).filter(|p| p.released > this.answered) {
            let mut k = slot(other.token);
            while k < tree.len() {
                tree[k] += 1;
                k += k & k.wrapping_neg();
            }
            added += 1;
        }
        let (mut k, mut held) = (slot(this.token), 0);
        while k > 0 {
            held += tree[k];
            k -= k & k.wrapping_neg();
        }
        // Its own client is among them unless its two instants tie.
        counts[i] = held + usize::from(this.released <= this.answered);
    }
    counts
}

fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

/// Runs one client per session for `plan`, all together.
pub async fn run_cycles(sessions: Vec<Box<dyn LockSession>>, plan: &Plan) -> BenchRow {
    let measure_from = Instant::now() + plan.warmup;
    let stop_at = measure_from + plan.duration;
    let wait = if plan.workload.waits() { HOT_WAIT } else { Duration::ZERO };
    let semaphore = plan.workload == Workload::Semaphore;
    let permits = Permits::default();
    // CPU time over exactly the measured window: the servers' and this
    // process's (every client), read when the window opens and closes.
    let cpu_window = {
        let pids = plan.server_pids.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(measure_from.into()).await;
            let start = (cpu::cpu_time_of(&pids), cpu::own_cpu_time());
            tokio::time::sleep_until(stop_at.into()).await;
            let end = (cpu::cpu_time_of(&pids), cpu::own_cpu_time());
            let used = |a: Option<Duration>, b: Option<Duration>| Some(b?.saturating_sub(a?));
            let servers = if pids.is_empty() { None } else { used(start.0, end.0) };
            (servers, used(start.1, end.1))
        })
    };
    let latencies = Latencies(Arc::new(Mutex::new((histogram(), histogram()))));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, mut session) in sessions.into_iter().enumerate() {
        let names = plan.lock_names(i);
        let ttl = plan.ttl;
        let latencies = latencies.clone();
        let permits = permits.clone();
        tasks.spawn(async move {
            let mut result = ClientResult { errors: 0, first_error: None };
            while Instant::now() < stop_at {
                let began = Instant::now();
                let cycle = async {
                    let acquired = match names.as_slice() {
                        [name] if semaphore => {
                            let grant = session.acquire_permit(name, SEMAPHORE_LIMIT, ttl, wait).await?;
                            let answered = Instant::now();
                            if let Some(token) = grant.token {
                                permits.releasing(token, answered);
                            }
                            session.release_permit(&grant).await?;
                            answered - began
                        }
                        [name] => {
                            let grant = session.acquire(name, ttl, wait).await?;
                            let acquired = began.elapsed();
                            session.release(&grant).await?;
                            acquired
                        }
                        names => {
                            let grants = session.acquire_all(names, ttl, wait).await?;
                            let acquired = began.elapsed();
                            session.release_all(&grants).await?;
                            acquired
                        }
                    };
                    Ok::<_, AdapterError>(acquired)
                };
                match tokio::time::timeout_at((stop_at + DRAIN).into(), cycle).await {
                    Err(_) => break,
                    Ok(Ok(acquired)) => {
                        let done = Instant::now();
                        if (measure_from..=stop_at).contains(&done) {
                            latencies.record(began.elapsed(), acquired);
                        }
                    }
                    Ok(Err(e)) => {
                        result.errors += 1;
                        result.first_error.get_or_insert_with(|| e.to_string());
                        tokio::time::sleep(AFTER_ERROR).await;
                    }
                }
            }
            result
        });
    }
    let (mut errors, mut first_error) = (0, None);
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(r) => {
                errors += r.errors;
                first_error = first_error.or(r.first_error);
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert_with(|| format!("client task failed: {e}"));
            }
        }
    }
    let (cycles, acquires) = {
        let histograms = latencies.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        (histograms.0.clone(), histograms.1.clone())
    };
    let ops_per_sec = cycles.len() as f64 / plan.duration.as_secs_f64();
    let (server_cpu, client_cpu) = cpu_window.await.unwrap_or((None, None));
    let per_cycle = |cpu: Option<Duration>| {
        cpu.filter(|_| !cycles.is_empty()).map(|cpu| cpu.as_secs_f64() * 1e6 / cycles.len() as f64)
    };
    BenchRow {
        system: plan.system.clone(),
        workload: plan.workload.label().into(),
        clients: plan.clients,
        run: plan.run,
        cycles: cycles.len(),
        errors,
        first_error,
        ops_per_sec,
        handoffs_per_sec: plan.workload.hands_off().then_some(ops_per_sec),
        p50_us: cycles.value_at_quantile(0.5),
        p99_us: cycles.value_at_quantile(0.99),
        p999_us: cycles.value_at_quantile(0.999),
        acquire_p50_us: acquires.value_at_quantile(0.5),
        acquire_p99_us: acquires.value_at_quantile(0.99),
        acquire_p999_us: acquires.value_at_quantile(0.999),
        cycle_cdf_us: CDF_QUANTILES.iter().map(|&q| cycles.value_at_quantile(q)).collect(),
        server_cpu_us_per_cycle: per_cycle(server_cpu),
        client_cpu_us_per_cycle: per_cycle(client_cpu),
        leader_changes: None,
        term_watched_ms: None,
        server_rss_mib: None,
        idle_connections: None,
        semaphore: semaphore.then(|| permits.count()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A permit granted at `token`, answered and released `ms` after `t0`.
    fn permit(t0: Instant, token: u64, answered: u64, released: u64) -> Permit {
        let at = |ms| t0 + Duration::from_millis(ms);
        Permit { token, answered: at(answered), released: at(released) }
    }

    // Permits one after the other overlap nowhere; a release that started
    // after a later grant's answer counts at that grant, and so does one
    // granted earlier but answered later (answers crossed), while a later
    // grant does not count at an earlier one.
    #[test]
    fn holders_counted_in_the_servers_order() {
        let t0 = Instant::now();
        let apart = [permit(t0, 1, 0, 1), permit(t0, 2, 2, 3), permit(t0, 3, 4, 5)];
        assert_eq!(holders_at_grants(&apart), [1, 1, 1]);
        // 1 answered before 2 and released after 2's answer; 3 granted
        // before 4 but answered after 4's answer.
        let crossed = [permit(t0, 1, 0, 11), permit(t0, 2, 10, 12), permit(t0, 4, 20, 21), permit(t0, 3, 22, 23)];
        assert_eq!(holders_at_grants(&crossed), [1, 2, 2, 1]);
        // Nine grants answered before any release starts: the ninth is over a limit of 8.
        let nine: Vec<Permit> = (0..9).map(|i| permit(t0, i + 1, i, 100)).collect();
        assert_eq!(holders_at_grants(&nine), (1..=9).collect::<Vec<_>>());
        // Two grants of one entry share a token and both count.
        assert_eq!(holders_at_grants(&[permit(t0, 5, 0, 2), permit(t0, 5, 1, 3)]), [2, 2]);
        assert!(holders_at_grants(&[]).is_empty());
    }
}
