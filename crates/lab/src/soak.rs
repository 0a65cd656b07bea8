//! `leasehold-lab bench --soak ENTRIES`: does disk use level off?
//!
//! Starts a local cluster, takes [`SoakOptions::live_locks`] locks for an
//! hour, then churns them (release, acquire again, write the lock's fenced
//! record, every call with a request id) while Ticks and churn commit at
//! least `entries` log entries. Every few seconds it samples each node's
//! data folder, split into the Raft log, the state (sled) and the snapshot
//! files, and its log length, and checks each sample against the bound
//! [`documented_bound`] derives from the layout (`cluster/README.md`,
//! "Snapshots and disk"). Writes `soak.json`, `soak.md` and `soak.svg`.
//! `tests/lab/storage_bound.rs` runs a short one and asserts the bound.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::plot::{Chart, LineStyle};
use leasehold_client::{Client, ClientError, FencingToken};
use leasehold_local::{LocalCluster, LocalClusterError, NodeLogs};
use leasehold_proto::NodeId;

/// The live locks must outlive the run.
const LIVE_TTL_MS: u64 = 3_600_000;
const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Log bytes after a checkpoint that make a node take the next
/// (`raft::SNAPSHOT_LOG_BYTES`), and the log's segment size.
const LOG_BYTES_PER_CHECKPOINT: u64 = 64 << 20;
const SEGMENT_BYTES: u64 = 8 << 20;
/// A row in a snapshot file, upper bound: a request record or a lease with
/// its key is 100–250 bytes of MessagePack, plus 8 bytes of frames.
const FILE_BYTES_PER_ROW: u64 = 260;
/// A row in a freshly written sled generation, upper bound: sled 0.34
/// takes about 3× the rows' bytes (measured with this soak: 510–650 bytes
/// per row right after a rewrite; see `cluster/README.md`).
const FRESH_BYTES_PER_ROW: u64 = 700;
/// A generation grows to at most `raft::state_store::COMPACT_FACTOR` (2) ×
/// its fresh size, plus one checkpoint more than estimated (at most every
/// row rewritten: one fresh size), while the next generation is written
/// beside it (one fresh size).
const GENERATIONS_ON_DISK: u64 = 2 + 1 + 1;
/// The request records a node keeps at most (the core's `MAX_REQUESTS`,
/// documented in docs/api.md; the lab sees servers only from the outside).
const REQUEST_ROWS: u64 = 50_000;
/// `serve --snapshot-every`'s default (the server's
/// `node::DEFAULT_SNAPSHOT_EVERY`, which the lab does not link), the soak's
/// when not given one; `tests/lab/storage_bound.rs` keeps the two equal.
pub const NODE_DEFAULT_SNAPSHOT_EVERY: u64 = 50_000;

#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    #[error("local cluster: {0}")]
    Cluster(#[from] LocalClusterError),
    #[error("client: {0}")]
    Client(#[from] ClientError),
    #[error("writing results: {0}")]
    Io(#[from] std::io::Error),
    #[error("no entries committed for 60 s (at {0})")]
    Stalled(u64),
}

pub struct SoakOptions {
    pub binary: PathBuf,
    pub nodes: usize,
    /// Log entries to commit.
    pub entries: u64,
    pub live_locks: u64,
    /// Concurrent churning clients.
    pub clients: usize,
    /// `--snapshot-every` of the nodes.
    pub snapshot_every: u64,
    pub out: PathBuf,
    pub command: String,
}

/// One node at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub node: NodeId,
    pub seconds: f64,
    /// Entries committed since the soak started.
    pub entries: u64,
    pub log_entries: u64,
    pub log_bytes: u64,
    pub state_bytes: u64,
    pub snapshot_bytes: u64,
    pub data_dir_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    pub command: String,
    pub nodes: usize,
    pub live_locks: u64,
    pub snapshot_every: u64,
    pub entries: u64,
    pub seconds: f64,
    pub cycles: u64,
    pub failed_calls: u64,
    /// The per-node data-folder bound every sample was checked against.
    pub bound_bytes: u64,
    pub samples: Vec<Sample>,
}

impl SoakReport {
    /// The samples over the bound.
    pub fn over_bound(&self) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.data_dir_bytes > self.bound_bytes).collect()
    }

    /// Each node's largest data folder in the first and in the second half
    /// of the run: a plateau has the second no larger than about the first.
    pub fn halves(&self) -> Vec<(NodeId, u64, u64)> {
        let mut nodes: Vec<NodeId> = self.samples.iter().map(|s| s.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let half = self.entries / 2;
        nodes
            .into_iter()
            .map(|node| {
                let max = |second: bool| {
                    self.samples
                        .iter()
                        .filter(|s| s.node == node && (s.entries >= half) == second)
                        .map(|s| s.data_dir_bytes)
                        .max()
                        .unwrap_or(0)
                };
                (node, max(false), max(true))
            })
            .collect()
    }
}

/// The per-node data-folder bound, from the layout: the log (up to one
/// checkpoint interval of bytes, what commits during a checkpoint, a partly
/// purged segment on each side, and two segments' worth of zeros: the
/// unwritten rest of the active segment and the spare made ahead of it),
/// the state's rows in sled (the live
/// locks, their fenced records, the request records, in generations as
/// [`GENERATIONS_ON_DISK`] says), and two snapshot files of those rows (the
/// current one, and one being received or written).
pub fn documented_bound(live_locks: u64) -> u64 {
    let log = LOG_BYTES_PER_CHECKPOINT + 4 * SEGMENT_BYTES;
    let rows = 2 * live_locks + REQUEST_ROWS;
    let state = GENERATIONS_ON_DISK * rows * FRESH_BYTES_PER_ROW;
    let snapshots = 2 * rows * FILE_BYTES_PER_ROW;
    log + state + snapshots
}

/// Runs the soak; prints progress to stderr.
pub async fn run(options: &SoakOptions) -> Result<SoakReport, SoakError> {
    std::fs::create_dir_all(&options.out)?;
    let data = options.out.join("soak-cluster");
    if data.exists() {
        std::fs::remove_dir_all(&data)?;
    }
    let addrs = LocalCluster::free_addrs(options.nodes)?;
    let every = options.snapshot_every.to_string();
    let mut cluster = LocalCluster::new(&options.binary, &data, &addrs, 100, NodeLogs::Files)
        .with_serve_args(&["--snapshot-every", &every]);
    cluster.start_all()?;
    cluster.wait_for_leader(Duration::from_secs(30)).await?;
    let client = Arc::new(cluster.client());

    eprintln!("soak: taking {} live locks", options.live_locks);
    let mut tokens = Vec::with_capacity(options.live_locks as usize);
    for i in 0..options.live_locks {
        tokens.push(client.acquire(&lock_name(i), "soak", LIVE_TTL_MS).await?.token());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (cycles, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let share = tokens.len().div_ceil(options.clients.max(1)).max(1);
    let workers: Vec<_> = tokens
        .chunks(share)
        .enumerate()
        .map(|(w, chunk)| {
            let (client, stop, cycles, failed) = (client.clone(), stop.clone(), cycles.clone(), failed.clone());
            let mut held: Vec<(u64, FencingToken)> =
                chunk.iter().enumerate().map(|(k, t)| ((w * share + k) as u64, *t)).collect();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    for (i, token) in held.iter_mut() {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        match churn(&client, *i, *token).await {
                            Ok(new) => {
                                *token = new;
                                cycles.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
            })
        })
        .collect();

    let bound = documented_bound(options.live_locks);
    let started = Instant::now();
    let first = committed(&cluster).await;
    let (mut samples, mut last_progress, mut seen) = (Vec::new(), Instant::now(), first);
    loop {
        tokio::time::sleep(SAMPLE_EVERY).await;
        let statuses = cluster.statuses().await;
        let now = committed(&cluster).await.max(seen);
        if now > seen {
            (seen, last_progress) = (now, Instant::now());
        } else if last_progress.elapsed() > Duration::from_secs(60) {
            return Err(SoakError::Stalled(now - first));
        }
        let seconds = started.elapsed().as_secs_f64();
        for (id, status) in &statuses {
            let dir = cluster.data_dir(*id);
            let sample = Sample {
                node: *id,
                seconds,
                entries: now - first,
                log_entries: status.last_log_index.unwrap_or(0).saturating_sub(status.purged_index.unwrap_or(0)),
                log_bytes: folder_bytes(&dir.join("raft-log")),
                state_bytes: folder_bytes(&dir.join("state")),
                snapshot_bytes: folder_bytes(&dir.join("snapshots")),
                data_dir_bytes: folder_bytes(&dir),
            };
            eprintln!(
                "soak: {:>8} / {} entries  {:>5.0} s  node {id}: data {:>4} MiB (log {} MiB, state {} MiB, snapshots {} MiB), log {} entries{}",
                sample.entries,
                options.entries,
                seconds,
                sample.data_dir_bytes >> 20,
                sample.log_bytes >> 20,
                sample.state_bytes >> 20,
                sample.snapshot_bytes >> 20,
                sample.log_entries,
                if sample.data_dir_bytes > bound { "  OVER THE BOUND" } else { "" },
            );
            samples.push(sample);
        }
        if now - first >= options.entries {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        let _ = worker.await;
    }
    cluster.stop_all(Duration::from_secs(10));
    let report = SoakReport {
        command: options.command.clone(),
        nodes: options.nodes,
        live_locks: options.live_locks,
        snapshot_every: options.snapshot_every,
        entries: seen - first,
        seconds: started.elapsed().as_secs_f64(),
        cycles: cycles.load(Ordering::Relaxed),
        failed_calls: failed.load(Ordering::Relaxed),
        bound_bytes: bound,
        samples,
    };
    std::fs::write(options.out.join("soak.json"), serde_json::to_vec_pretty(&report).expect("report serializes"))?;
    std::fs::write(options.out.join("soak.md"), markdown(&report))?;
    std::fs::write(options.out.join("soak.svg"), svg(&report))?;
    std::fs::remove_dir_all(&data)?;
    Ok(report)
}

fn lock_name(i: u64) -> String {
    format!("soak/{i:06}")
}

/// One churn cycle on live lock `i`: release it, take it again, write its
/// record under the new token. Returns the new token.
async fn churn(client: &Client, i: u64, token: FencingToken) -> Result<FencingToken, ClientError> {
    let name = lock_name(i);
    // A release already applied (its answer lost) leaves it free: the
    // acquire below then still takes it.
    let _ = client.release(&name, token).await;
    let lease = client.acquire(&name, "soak", LIVE_TTL_MS).await?;
    client.put_record(&name, &name, lease.token(), &serde_json::json!({ "cycle": lease.token() })).await?;
    Ok(lease.token())
}

/// The highest applied index any node reports.
async fn committed(cluster: &LocalCluster) -> u64 {
    cluster.statuses().await.values().filter_map(|s| s.applied_index).max().unwrap_or(0)
}

/// Bytes of the files under `dir` (0 when it does not exist).
fn folder_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => folder_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

pub fn markdown(report: &SoakReport) -> String {
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let mut out = format!(
        "# Storage soak: does disk use level off?\n\nCommand: `{}`\n\n\
         {} nodes, {} live locks churned (release, acquire, fenced record; request ids on every call), \
         `--snapshot-every {}`: {} entries committed in {:.0} s, {} churn cycles, {} failed calls. \
         Documented per-node bound for this table: **{:.0} MiB** (`cluster/README.md`, \"Snapshots and disk\").\n\n\
         | node | largest data folder, first half (MiB) | second half (MiB) | samples over the bound |\n|---:|---:|---:|---:|\n",
        report.command,
        report.nodes,
        report.live_locks,
        report.snapshot_every,
        report.entries,
        report.seconds,
        report.cycles,
        report.failed_calls,
        mib(report.bound_bytes),
    );
    for (node, first, second) in report.halves() {
        let over = report.over_bound().iter().filter(|s| s.node == node).count();
        out.push_str(&format!("| {node} | {:.1} | {:.1} | {over} |\n", mib(first), mib(second)));
    }
    out.push_str(
        "\nSamples (every tenth), per node: entries committed, then MiB of data folder = log + state (sled) + snapshot files, and log length in entries.\n\n\
         | entries | node | data MiB | log MiB | state MiB | snapshots MiB | log entries |\n|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let nodes = report.nodes.max(1);
    for (k, s) in report.samples.iter().enumerate() {
        if (k / nodes) % 10 == 0 || k + nodes >= report.samples.len() {
            out.push_str(&format!(
                "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |\n",
                s.entries,
                s.node,
                mib(s.data_dir_bytes),
                mib(s.log_bytes),
                mib(s.state_bytes),
                mib(s.snapshot_bytes),
                s.log_entries
            ));
        }
    }
    out
}

/// Every node's data folder over the committed entries, with the bound.
pub fn svg(report: &SoakReport) -> String {
    let x_max = report.entries.max(1) as f64;
    let y_max = report.bound_bytes as f64 * 1.1;
    let mut chart = Chart::new("leasehold storage soak: data folder per node", "log entries committed", "MiB");
    for i in 0..=4 {
        let f = f64::from(i) / 4.0;
        chart.tick_x(f, &crate::plot::short(x_max * f));
        chart.tick_y(f, &format!("{:.0}", y_max * f / f64::from(1 << 20)));
    }
    let mut nodes: Vec<NodeId> = report.samples.iter().map(|s| s.node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    for node in nodes {
        let points: Vec<(f64, f64)> = report
            .samples
            .iter()
            .filter(|s| s.node == node)
            .map(|s| (s.entries as f64 / x_max, s.data_dir_bytes as f64 / y_max))
            .collect();
        chart.line(&format!("node {node}"), &points, LineStyle::Trace);
    }
    let bound = report.bound_bytes as f64 / y_max;
    chart.line("bound", &[(0.0, bound), (1.0, bound)], LineStyle::Points);
    chart.finish()
}
