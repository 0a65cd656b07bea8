//! `leasehold-lab bench --bulk N`: a real cluster holding N live leases.
//!
//! Creates the leases through the client API with many concurrent clients,
//! and at each checkpoint (1k, 10k, 100k, 1M, then N) lets 64 Ticks pass and
//! reads every node's status: Tick apply time (p50 and max of the last 64
//! Ticks, which now all ran over this many leases), resident memory
//! (`VmRSS`, once no node has written a checkpoint for 5 s) against the empty
//! cluster's, hence bytes per lease, with each node's peak RSS sampled
//! meanwhile, the data folder's size and the log's length. Then the leader checkpoints (what
//! openraft calls a snapshot) to absorb the creation, a fixed churn of
//! [`CHURN_CYCLES`] lock cycles runs, and the leader checkpoints again: that
//! checkpoint's time, rows and bytes are what the same churn costs at this
//! table size. Then a backup is downloaded: the snapshot file streamed from
//! sled, its size and time. At the end a follower is killed (-9) and
//! restarted, timed until it has applied what the leader had; and a new
//! node joins as a learner: it catches up by installing the snapshot, and
//! its install time is reported. Writes `scale.json` and `scale.md` into the
//! results folder.
//!
//! With `--bulk-sessions K` the N holders are sessions instead, each holding
//! K locks taken in one multi-acquire (N × K live leases): what is measured
//! then is that a Tick's apply time does not grow with the sessions either.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use leasehold_client::{Client, ClientError, Session};
use leasehold_local::{LocalCluster, LocalClusterError, NodeLogs};
use leasehold_proto::cluster::ClusterStatus;
use leasehold_proto::NodeId;

/// Longest ttl a lease may have: the leases must outlive the whole run.
const BULK_TTL_MS: u64 = 3_600_000;
/// Enough Ticks (at 100 ms) for the status's Tick window to cover only the
/// current lease count.
const SETTLE: Duration = Duration::from_millis(7_000);
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// How long no voter may have written a checkpoint before their RSS is read.
const REST_QUIET: Duration = Duration::from_secs(5);
/// The longest wait for that.
const REST_BOUND: Duration = Duration::from_secs(120);
/// How often the voters' RSS is sampled for its peak.
const RSS_EVERY: Duration = Duration::from_millis(250);
/// Whole acquires of one lease before it counts as failed.
const ACQUIRE_ATTEMPTS: usize = 5;
/// How long a new learner may take to apply what it was sent.
const CATCH_UP_BOUND: Duration = Duration::from_secs(300);
/// The churn between two measured checkpoints: the same at every table size.
const CHURN_CYCLES: u64 = 2_000;
/// Names the churn cycles on, apart from the live leases.
const CHURN_NAMES: u64 = 100;

#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    #[error("local cluster: {0}")]
    Cluster(#[from] LocalClusterError),
    #[error("client: {0}")]
    Client(#[from] ClientError),
    #[error("writing results: {0}")]
    Io(#[from] std::io::Error),
    #[error("node {0} is not running")]
    NodeDown(NodeId),
    #[error("{failed} of {wanted} acquires failed, last: {last}")]
    Acquires { failed: u64, wanted: u64, last: String },
}

/// Who holds the live leases.
#[derive(Debug, Clone, Copy)]
pub enum Holders {
    /// One lease per holder, each with its own ttl.
    Leases,
    /// Sessions of `locks_each` locks, acquired in one multi-acquire each.
    Sessions { locks_each: usize },
}

impl Holders {
    fn noun(self) -> &'static str {
        match self {
            Holders::Leases => "leases",
            Holders::Sessions { .. } => "sessions",
        }
    }

    /// Live leases per holder.
    fn leases_each(self) -> u64 {
        match self {
            Holders::Leases => 1,
            Holders::Sessions { locks_each } => locks_each as u64,
        }
    }
}

pub struct ScaleOptions {
    pub binary: PathBuf,
    pub nodes: usize,
    /// Holders to create: leases, or sessions.
    pub holders: u64,
    pub holder_kind: Holders,
    /// Concurrent acquiring clients.
    pub clients: usize,
    pub out: PathBuf,
}

/// The cluster's figures at one live-lease count.
#[derive(Debug, Clone, Serialize)]
pub struct Checkpoint {
    pub leases: u64,
    /// Live sessions holding the leases (none: each lease has its own ttl).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<u64>,
    /// Holders (leases or sessions) created per second.
    pub acquires_per_sec: f64,
    pub tick_apply_p50_us: u64,
    pub tick_apply_max_us: u64,
    /// Mean over the voters of (RSS − RSS of the empty cluster) / leases,
    /// the RSS read once no voter has written a checkpoint for a while
    /// (see [`at_rest`]).
    pub bytes_per_lease: u64,
    pub rss_mb: Vec<u64>,
    /// Each voter's largest RSS (sampled every [`RSS_EVERY`]) since the
    /// previous count: checkpoints made while the leases were created
    /// take memory of their own for a while.
    pub peak_rss_mb: Vec<u64>,
    pub data_dir_mb: Vec<u64>,
    /// Entries in the longest log (last index − purged index).
    pub max_log_entries: u64,
    /// The leader's checkpoint after [`CHURN_CYCLES`] cycles: time, rows
    /// written, bytes written.
    pub checkpoint_ms: u64,
    pub checkpoint_rows: u64,
    pub checkpoint_bytes: u64,
    /// The snapshot file (a backup, as a follower is sent it): size, and
    /// the time to stream it from sled and download it.
    pub snapshot_bytes: u64,
    pub snapshot_ms: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    /// The command line that reproduces this run.
    pub command: String,
    pub nodes: usize,
    pub checkpoints: Vec<Checkpoint>,
    /// The joining learner: time from being added to having caught up, and
    /// its snapshot install time.
    pub learner_catch_up_ms: u64,
    pub learner_install_ms: Option<u64>,
    pub learner_locks_held: usize,
    /// The learner's RSS once caught up: the table loaded from a snapshot,
    /// without the history of a node that applied every entry.
    pub learner_rss_mb: u64,
    /// A follower killed (-9) and started again: time until it had applied
    /// what the leader had applied when it was killed.
    pub restart_ms: u64,
    /// Its RSS once it had: the table loaded from sled and the log replayed.
    pub restarted_rss_mb: u64,
}

/// Runs the scale measurement; prints progress to stderr.
pub async fn run(options: &ScaleOptions) -> Result<ScaleReport, ScaleError> {
    std::fs::create_dir_all(&options.out)?;
    let data = options.out.join("scale-cluster");
    if data.exists() {
        std::fs::remove_dir_all(&data)?;
    }
    let addrs = LocalCluster::free_addrs(options.nodes + 1)?;
    let mut cluster =
        LocalCluster::new(&options.binary, &data, &addrs, 100, NodeLogs::Files).with_initial_members(options.nodes);
    for id in 1..=options.nodes as NodeId {
        cluster.start(id)?;
    }
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await?;
    let voters: Vec<NodeId> = (1..=options.nodes as NodeId).collect();
    let client = Arc::new(Client::new(&cluster.endpoints()[..options.nodes])?);
    let empty_rss = voters.iter().map(|id| rss_bytes(&cluster, *id)).collect::<Result<Vec<_>, _>>()?;
    let pids = voters.iter().map(|id| cluster.pid(*id).ok_or(ScaleError::NodeDown(*id))).collect::<Result<_, _>>()?;
    let peaks = PeakRss::sample(pids);

    let mut checkpoints = Vec::new();
    let mut created = 0;
    // Sessions must outlive the run: held here, dropped after the cluster stops.
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (what, locks_each) = (options.holder_kind.noun(), options.holder_kind.leases_each());
    for target in checkpoint_targets(options.holders) {
        eprintln!("bulk: creating {what} {created}..{target} with {} clients", options.clients);
        let started = Instant::now();
        create_holders(&client, options.holder_kind, created, target, options.clients, &held).await?;
        let rate = (target - created) as f64 / started.elapsed().as_secs_f64();
        created = target;
        let leases = target * locks_each;
        tokio::time::sleep(SETTLE).await;
        let statuses = at_rest(&client, &voters).await?;
        let rss = voters.iter().map(|id| rss_bytes(&cluster, *id)).collect::<Result<Vec<_>, _>>()?;
        let grown: u64 = rss.iter().zip(&empty_rss).map(|(now, empty)| now.saturating_sub(*empty)).sum();
        let peak_rss_mb = peaks.take().iter().zip(&rss).map(|(peak, now)| (*peak).max(*now) >> 20).collect();
        let on_leader = (leader - 1) as usize;
        client.snapshot_of(on_leader).await?;
        churn(&client, CHURN_CYCLES).await?;
        client.snapshot_of(on_leader).await?;
        let checkpoint = client.status_of(on_leader).await?.storage;
        let downloading = Instant::now();
        let (_, backup) = client.backup_of(on_leader).await?;
        let snapshot_ms = downloading.elapsed().as_millis() as u64;
        let leader_status = &statuses[on_leader];
        let checkpoint = Checkpoint {
            leases,
            sessions: matches!(options.holder_kind, Holders::Sessions { .. }).then_some(target),
            acquires_per_sec: rate,
            tick_apply_p50_us: leader_status.storage.tick_apply_p50_us,
            tick_apply_max_us: leader_status.storage.tick_apply_max_us,
            bytes_per_lease: grown / voters.len() as u64 / leases,
            rss_mb: rss.iter().map(|b| b >> 20).collect(),
            peak_rss_mb,
            data_dir_mb: statuses.iter().map(|s| s.data_dir_bytes >> 20).collect(),
            max_log_entries: statuses.iter().map(log_entries).max().unwrap_or(0),
            checkpoint_ms: checkpoint.snapshot_build_ms.unwrap_or(0),
            checkpoint_rows: checkpoint.checkpoint_rows.unwrap_or(0),
            checkpoint_bytes: checkpoint.checkpoint_bytes.unwrap_or(0),
            snapshot_bytes: backup.len() as u64,
            snapshot_ms,
        };
        eprintln!("bulk: {checkpoint:?}");
        checkpoints.push(checkpoint);
    }

    drop(peaks);
    let follower = voters.iter().copied().find(|id| *id != leader).unwrap_or(leader);
    eprintln!("bulk: node {follower} is killed (-9) and started again");
    let target = client.status_of((leader - 1) as usize).await?.applied_index.unwrap_or(0);
    cluster.kill(follower);
    let restarting = Instant::now();
    cluster.start(follower)?;
    applied_through(&Client::new(&[cluster.endpoint(follower)])?, target).await?;
    let restart_ms = restarting.elapsed().as_millis() as u64;
    let restarted_rss_mb = rss_bytes(&cluster, follower)? >> 20;

    let learner = options.nodes as NodeId + 1;
    eprintln!("bulk: node {learner} joins as a learner and installs the snapshot");
    cluster.start(learner)?;
    let started = Instant::now();
    let added_at = client.add_learner(learner, &cluster.endpoint(learner)).await?;
    let joined = applied_through(&Client::new(&[cluster.endpoint(learner)])?, added_at).await?;
    let learner_catch_up_ms = started.elapsed().as_millis() as u64;
    let learner_rss_mb = rss_bytes(&cluster, learner)? >> 20;
    let sessions = match options.holder_kind {
        Holders::Leases => String::new(),
        Holders::Sessions { locks_each } => format!(" --bulk-sessions {locks_each}"),
    };
    let report = ScaleReport {
        command: format!(
            "leasehold-lab bench --bulk {}{sessions} --nodes {} --bulk-clients {}",
            options.holders, options.nodes, options.clients
        ),
        nodes: options.nodes,
        checkpoints,
        learner_catch_up_ms,
        learner_install_ms: joined.storage.snapshot_install_ms,
        learner_locks_held: joined.locks_held,
        learner_rss_mb,
        restart_ms,
        restarted_rss_mb,
    };
    cluster.stop_all(Duration::from_secs(10));
    // Outside the runtime a dropped Session does not try to delete itself
    // from the cluster that is gone.
    let sessions = std::mem::take(&mut *held.lock().expect("no worker panicked"));
    std::thread::spawn(move || drop(sessions)).join().expect("dropping sessions does not panic");
    std::fs::write(options.out.join("scale.json"), serde_json::to_vec_pretty(&report).expect("report serializes"))?;
    std::fs::write(options.out.join("scale.md"), markdown(&report))?;
    Ok(report)
}

/// 1k, 10k, 100k, 1M … below `leases`, then `leases` itself.
fn checkpoint_targets(leases: u64) -> Vec<u64> {
    let mut targets: Vec<u64> =
        std::iter::successors(Some(1_000u64), |t| t.checked_mul(10)).take_while(|t| *t < leases).collect();
    targets.push(leases);
    targets
}

/// Creates holder `i` for every i in `from..to`, `clients` at a time: the
/// lease `bulk/{i}`, or a session holding `bulk/{i}/0`.. in one multi-acquire
/// (kept in `held`).
async fn create_holders(
    client: &Arc<Client>,
    kind: Holders,
    from: u64,
    to: u64,
    clients: usize,
    held: &Arc<std::sync::Mutex<Vec<Session>>>,
) -> Result<(), ScaleError> {
    let what = kind.noun();
    let next = Arc::new(AtomicU64::new(from));
    let done = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (client, next, done, held) = (client.clone(), next.clone(), done.clone(), held.clone());
            tokio::spawn(async move {
                let (mut failed, mut last) = (Vec::new(), String::new());
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= to {
                        return (failed, last);
                    }
                    match create_holder(&client, kind, i, &held).await {
                        Ok(()) => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            failed.push(i);
                            last = e.to_string();
                        }
                    }
                }
            })
        })
        .collect();
    let progress = tokio::spawn(async move {
        let started = Instant::now();
        loop {
            tokio::time::sleep(PROGRESS_EVERY).await;
            let n = done.load(Ordering::Relaxed);
            eprintln!("bulk:   {} / {} {what}, {:.0}/s", from + n, to, n as f64 / started.elapsed().as_secs_f64());
        }
    });
    let (mut failed, mut last) = (Vec::new(), String::new());
    for worker in workers {
        let (f, l) = worker.await.expect("acquire worker does not panic");
        if !f.is_empty() {
            last = l;
        }
        failed.extend(f);
    }
    progress.abort();
    if !failed.is_empty() && matches!(kind, Holders::Sessions { .. }) {
        // A session whose create was applied but whose answer was lost (a
        // stall past the client's retries) is opened again under a new
        // request id, and the first one holds a place until its hour is
        // up. Once every holder is done, a session without locks is such
        // an orphan: delete them, then try the failed holders once more.
        let orphans = delete_orphan_sessions(client).await?;
        eprintln!("bulk: {} holders failed ({last}); deleted {orphans} sessions without locks, retrying", failed.len());
        let mut still = Vec::new();
        for i in failed {
            if let Err(e) = create_holder(client, kind, i, held).await {
                still.push(i);
                last = e.to_string();
            }
        }
        failed = still;
    }
    match failed.len() as u64 {
        0 => Ok(()),
        failed => Err(ScaleError::Acquires { failed, wanted: to - from, last }),
    }
}

/// Deletes every live session that holds no lock; returns how many.
async fn delete_orphan_sessions(client: &Client) -> Result<usize, ClientError> {
    let (mut after, mut orphans) = (0, Vec::new());
    loop {
        let page = client.list_sessions(after, leasehold_proto::MAX_LIST_LIMIT).await?;
        let Some(last) = page.last() else { break };
        after = last.session;
        orphans.extend(page.iter().filter(|s| s.lock_count == 0).map(|s| s.session));
    }
    for id in &orphans {
        client.delete_session(*id).await?;
    }
    Ok(orphans.len())
}

/// Creates holder `i`: the lease `bulk/{i}`, or a session holding
/// `bulk/{i}/0`.. in one multi-acquire (kept in `held`). A session is opened
/// once and its multi-acquire retried within it, so a failed attempt does
/// not cost a session: at 100 000 of them the table has no room for spares.
async fn create_holder(
    client: &Arc<Client>,
    kind: Holders,
    i: u64,
    held: &std::sync::Mutex<Vec<Session>>,
) -> Result<(), ClientError> {
    let name = format!("bulk/{i:08}");
    match kind {
        Holders::Leases => retried(|| client.acquire(&name, "bulk", BULK_TTL_MS)).await.map(drop),
        Holders::Sessions { locks_each } => {
            let session = retried(|| client.session("bulk", Duration::from_millis(BULK_TTL_MS))).await?;
            let names: Vec<String> = (0..locks_each).map(|k| format!("{name}/{k}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            retried(|| session.lock_many(&names, None)).await?;
            held.lock().expect("no worker panicked").push(session);
            Ok(())
        }
    }
}

/// Runs `attempt` until it succeeds, at most [`ACQUIRE_ATTEMPTS`] times: a
/// request is retried as a whole when the client's own retries run out (a
/// snapshot of a million leases or an election can stall commits for
/// seconds). Re-acquiring one's own locks is idempotent.
async fn retried<T, F>(mut attempt: impl FnMut() -> F) -> Result<T, ClientError>
where
    F: std::future::Future<Output = Result<T, ClientError>>,
{
    let mut outcome = attempt().await;
    for _ in 1..ACQUIRE_ATTEMPTS {
        if outcome.is_ok() {
            break;
        }
        outcome = attempt().await;
    }
    outcome
}

/// [`CHURN_CYCLES`] acquire/release cycles over [`CHURN_NAMES`] names, 16
/// at a time, each call with its request id.
async fn churn(client: &Arc<Client>, cycles: u64) -> Result<(), ScaleError> {
    let next = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let (client, next) = (client.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= cycles {
                        return Ok::<(), ClientError>(());
                    }
                    let name = format!("churn/{:03}", i % CHURN_NAMES);
                    let lease = retried(|| client.acquire(&name, "churn", 10_000)).await?;
                    retried(|| client.release(&name, lease.token())).await?;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("churn worker does not panic")?;
    }
    Ok(())
}

/// Waits (bounded) until the one node `client` talks to has applied `index`.
async fn applied_through(client: &Client, index: u64) -> Result<ClusterStatus, ScaleError> {
    let give_up = Instant::now() + CATCH_UP_BOUND;
    loop {
        // A node that is starting refuses connections until it has opened
        // its data folder: not an answer yet.
        match client.status_of(0).await {
            Ok(status) if status.applied_index >= Some(index) => return Ok(status),
            Err(e) if Instant::now() > give_up => return Err(e.into()),
            Ok(status) if Instant::now() > give_up => return Ok(status),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The voters' statuses once none of them has written a checkpoint for
/// [`REST_QUIET`] (or after [`REST_BOUND`], as they are then): the memory a
/// checkpoint takes for a while is reported as the peak, not as what the
/// leases cost. (The allocator gives a checkpoint's memory back to the
/// system a second or two after it ends: read at once, an RSS still held
/// up to 200 MB of it.)
async fn at_rest(client: &Client, voters: &[NodeId]) -> Result<Vec<ClusterStatus>, ClientError> {
    let give_up = Instant::now() + REST_BOUND;
    let mut quiet_since = Instant::now();
    loop {
        let statuses = statuses(client, voters).await?;
        if statuses.iter().any(|s| s.storage.checkpoint_in_progress) {
            quiet_since = Instant::now();
        }
        if Instant::now() > give_up || quiet_since.elapsed() >= REST_QUIET {
            return Ok(statuses);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn statuses(client: &Client, voters: &[NodeId]) -> Result<Vec<ClusterStatus>, ClientError> {
    let mut statuses = Vec::with_capacity(voters.len());
    for id in voters {
        statuses.push(client.status_of((*id - 1) as usize).await?);
    }
    Ok(statuses)
}

fn log_entries(status: &ClusterStatus) -> u64 {
    status.last_log_index.unwrap_or(0).saturating_sub(status.purged_index.unwrap_or(0))
}

/// The largest RSS of each of some processes, sampled every [`RSS_EVERY`]
/// until dropped.
struct PeakRss {
    peaks: Arc<std::sync::Mutex<Vec<u64>>>,
    sampler: tokio::task::JoinHandle<()>,
}

impl PeakRss {
    fn sample(pids: Vec<u32>) -> PeakRss {
        let peaks = Arc::new(std::sync::Mutex::new(vec![0; pids.len()]));
        let shared = peaks.clone();
        let sampler = tokio::spawn(async move {
            loop {
                for (i, pid) in pids.iter().enumerate() {
                    // A process that is gone has no peak to add.
                    if let Ok(rss) = pid_rss(*pid) {
                        let mut peaks = shared.lock().expect("no sampler panicked");
                        peaks[i] = peaks[i].max(rss);
                    }
                }
                tokio::time::sleep(RSS_EVERY).await;
            }
        });
        PeakRss { peaks, sampler }
    }

    /// The peaks since the last take, starting over.
    fn take(&self) -> Vec<u64> {
        let mut peaks = self.peaks.lock().expect("no sampler panicked");
        let taken = peaks.clone();
        peaks.iter_mut().for_each(|p| *p = 0);
        taken
    }
}

impl Drop for PeakRss {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

/// Resident memory of node `id`'s process.
fn rss_bytes(cluster: &LocalCluster, id: NodeId) -> Result<u64, ScaleError> {
    pid_rss(cluster.pid(id).ok_or(ScaleError::NodeDown(id))?)
}

/// Resident memory of process `pid`.
fn pid_rss(pid: u32) -> Result<u64, ScaleError> {
    proc_rss(&Path::new("/proc").join(pid.to_string()).join("status"))
}

/// Resident memory from a `/proc/PID/status` file.
fn proc_rss(path: &Path) -> Result<u64, ScaleError> {
    let status = std::fs::read_to_string(path)?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or_else(|| std::io::Error::other(format!("no VmRSS in {}", path.display())))?;
    Ok(kb * 1024)
}

pub fn markdown(report: &ScaleReport) -> String {
    let sessions = report.checkpoints.iter().any(|c| c.sessions.is_some());
    let (holders, per_sec) = if sessions { ("live sessions | ", "sessions/s") } else { ("", "acquires/s") };
    let mut out = format!(
        "# leasehold lock scale: {}-node cluster\n\nCommand: `{}`\n\n\
         | {holders}live leases | {per_sec} | Tick apply p50 µs | Tick apply max µs | bytes/lease (RSS) | RSS MB per node | peak RSS MB per node since the row before | data dir MB per node | longest log (entries) | checkpoint after {CHURN_CYCLES} cycles: ms | rows | KB | snapshot file MB | streamed and downloaded in ms |\n\
         |{}---:|---:|---:|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|\n",
        report.nodes,
        report.command,
        if sessions { "---:|" } else { "" },
    );
    for c in &report.checkpoints {
        if let Some(n) = c.sessions {
            out.push_str(&format!("| {n} "));
        }
        out.push_str(&format!(
            "| {} | {:.0} | {} | {} | {} | {:?} | {:?} | {:?} | {} | {} | {} | {:.1} | {:.1} | {} |\n",
            c.leases,
            c.acquires_per_sec,
            c.tick_apply_p50_us,
            c.tick_apply_max_us,
            c.bytes_per_lease,
            c.rss_mb,
            c.peak_rss_mb,
            c.data_dir_mb,
            c.max_log_entries,
            c.checkpoint_ms,
            c.checkpoint_rows,
            c.checkpoint_bytes as f64 / 1e3,
            c.snapshot_bytes as f64 / 1e6,
            c.snapshot_ms
        ));
    }
    out.push_str(&format!(
        "\nA follower killed (-9) and started again had applied what the leader had in {} ms \
         (RSS then {} MB). A new learner caught up in {} ms (snapshot install {} ms), holds {} locks \
         and has an RSS of {} MB.\n",
        report.restart_ms,
        report.restarted_rss_mb,
        report.learner_catch_up_ms,
        report.learner_install_ms.map_or("n/a".to_string(), |ms| ms.to_string()),
        report.learner_locks_held,
        report.learner_rss_mb
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures checkpoints grow by tens and always end at the requested count.
    #[test]
    fn checkpoints_grow_by_tens_up_to_the_count() {
        assert_eq!(checkpoint_targets(1_000_000), vec![1_000, 10_000, 100_000, 1_000_000]);
        assert_eq!(checkpoint_targets(250_000), vec![1_000, 10_000, 100_000, 250_000]);
        assert_eq!(checkpoint_targets(500), vec![500]);
    }

    // Ensures VmRSS is read in bytes from a /proc status file.
    #[test]
    fn reads_vm_rss() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("status");
        std::fs::write(&path, "Name:\tleasehold\nVmRSS:\t   12345 kB\nThreads:\t9\n").unwrap();
        assert_eq!(proc_rss(&path).unwrap(), 12345 * 1024);
    }
}
