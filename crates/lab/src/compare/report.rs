//! The comparison's report: the machine it ran on (CPU model, cores, where
//! each server and the clients may run, an fsync-latency probe of the
//! results disk and a loopback round-trip probe), every measured row, medians over runs with ratios to
//! leasehold-3 taken within the same run, and the targets. Written
//! as `latest.json`, `README.md` and SVG plots.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use super::{plots, CompareOptions};
use crate::bench::{cpu_cell, histogram, median, rows_table, BenchRow, SemaphoreCount, Summary};

/// Which build measured: a debug build's leasehold is slower everywhere, so
/// only the ratio to etcd (a release binary from Debian) is then the point.
pub const BUILD: &str = if cfg!(debug_assertions) {
    "debug (unoptimized) leasehold and harness; etcd is Debian's release binary"
} else {
    "release"
};

/// The system every ratio is taken against.
pub const BASELINE: &str = "leasehold-3";

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu_model: String,
    /// CPUs this process may use (sched_getaffinity).
    pub available_parallelism: usize,
    /// /sys/devices/system/cpu/online.
    pub cpus_online: String,
    pub kernel: String,
    /// /proc/loadavg when the benchmark started and when it ended.
    pub load_at_start: String,
    pub load_at_end: String,
}

impl Machine {
    pub(super) fn probe() -> Machine {
        let cpuinfo = read_trimmed("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim()))
            .unwrap_or("unknown")
            .to_string();
        Machine {
            cpu_model,
            available_parallelism: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpus_online: read_trimmed("/sys/devices/system/cpu/online"),
            kernel: read_trimmed("/proc/sys/kernel/osrelease"),
            load_at_start: read_trimmed("/proc/loadavg"),
            load_at_end: String::new(),
        }
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_else(|_| "unknown".into())
}

/// Which CPUs a system's processes may run on (`Cpus_allowed_list`).
#[derive(Debug, Clone, Serialize)]
pub struct Placement {
    pub system: String,
    pub pids: Vec<u32>,
    pub cpus_allowed: Vec<String>,
}

impl Placement {
    pub fn of(system: &str, pids: &[u32]) -> Placement {
        let cpus = |pid: &str| {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|s| {
                    s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:").map(|c| c.trim().to_string()))
                })
                .unwrap_or_else(|| "unknown".into())
        };
        let cpus_allowed =
            if pids.is_empty() { vec![cpus("self")] } else { pids.iter().map(|p| cpus(&p.to_string())).collect() };
        Placement { system: system.to_string(), pids: pids.to_vec(), cpus_allowed }
    }
}

/// fsync latency of the results folder's disk: appends of 4 KiB, each
/// followed by fsync, as a write-ahead log does.
#[derive(Debug, Clone, Serialize)]
pub struct FsyncProbe {
    pub samples: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

const FSYNC_SAMPLES: usize = 200;

pub fn fsync_probe(dir: &Path) -> std::io::Result<FsyncProbe> {
    let path = dir.join(".fsync-probe");
    let mut file = std::fs::OpenOptions::new().create(true).truncate(true).write(true).open(&path)?;
    let block = [0x5a_u8; 4096];
    let mut latencies = histogram();
    for _ in 0..FSYNC_SAMPLES {
        let began = Instant::now();
        file.write_all(&block)?;
        file.sync_all()?;
        let _ = latencies.record((began.elapsed().as_micros() as u64).max(1));
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(FsyncProbe {
        samples: latencies.len(),
        p50_us: latencies.value_at_quantile(0.5),
        p99_us: latencies.value_at_quantile(0.99),
        max_us: latencies.max(),
    })
}

/// Round trips of 64 bytes over one loopback TCP connection (nodelay) to an
/// echo thread: what one network hop between two processes on this machine
/// costs, for the hot lock's floor.
#[derive(Debug, Clone, Serialize)]
pub struct RoundTripProbe {
    pub samples: u64,
    pub p50_us: u64,
    pub p99_us: u64,
}

const ROUND_TRIP_SAMPLES: usize = 1000;

pub fn loopback_probe() -> std::io::Result<RoundTripProbe> {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        stream.set_nodelay(true)?;
        let mut message = [0_u8; 64];
        for _ in 0..ROUND_TRIP_SAMPLES {
            stream.read_exact(&mut message)?;
            stream.write_all(&message)?;
        }
        Ok(())
    });
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let mut latencies = histogram();
    let mut message = [0x5a_u8; 64];
    for _ in 0..ROUND_TRIP_SAMPLES {
        let began = Instant::now();
        stream.write_all(&message)?;
        stream.read_exact(&mut message)?;
        let _ = latencies.record((began.elapsed().as_micros() as u64).max(1));
    }
    echo.join().map_err(|_| std::io::Error::other("loopback echo thread panicked"))??;
    Ok(RoundTripProbe {
        samples: latencies.len(),
        p50_us: latencies.value_at_quantile(0.5),
        p99_us: latencies.value_at_quantile(0.99),
    })
}

/// One of the targets for leasehold-3, as measured.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub goal: String,
    /// leasehold-3's figure ÷ the other system's, median of same-run ratios.
    pub measured: f64,
    pub met: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub command: String,
    pub started_unix: u64,
    pub runs: usize,
    pub warmup_ms: u64,
    pub duration_ms: u64,
    pub ttl_ms: u64,
    pub machine: Machine,
    /// Debug or release: the harness's and leasehold's build.
    pub build: String,
    pub fsync: FsyncProbe,
    pub loopback: RoundTripProbe,
    pub placement: Vec<Placement>,
    /// Systems not measured, and why.
    pub skipped: Vec<(String, String)>,
    /// Systems measured, but left out of a workload they cannot run, and why.
    pub left_out: Vec<(String, String)>,
    pub targets: Vec<Target>,
    pub summary: Vec<Summary>,
    pub rows: Vec<BenchRow>,
}

impl Report {
    pub fn new(options: &CompareOptions, fsync: FsyncProbe, loopback: RoundTripProbe) -> Report {
        Report {
            command: options.command.clone(),
            started_unix: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            runs: options.runs,
            warmup_ms: options.warmup.as_millis() as u64,
            duration_ms: options.duration.as_millis() as u64,
            ttl_ms: options.ttl.as_millis() as u64,
            machine: Machine::probe(),
            build: BUILD.into(),
            fsync,
            loopback,
            placement: vec![Placement::of("harness (all clients)", &[])],
            skipped: Vec::new(),
            left_out: Vec::new(),
            targets: Vec::new(),
            summary: Vec::new(),
            rows: Vec::new(),
        }
    }

    /// Computes the medians and targets, then writes `latest.json`,
    /// `README.md` and the plots into `out`.
    pub fn write(&mut self, out: &Path) -> std::io::Result<()> {
        self.machine.load_at_end = read_trimmed("/proc/loadavg");
        self.summary = summarize(&self.rows);
        self.targets = targets(&self.rows);
        let plots = plots::write_all(&self.rows, &self.summary, out)?;
        std::fs::write(out.join("latest.json"), serde_json::to_vec_pretty(self).expect("report serializes"))?;
        std::fs::write(out.join("README.md"), self.markdown(&plots))
    }

    fn markdown(&self, plots: &[(String, String)]) -> String {
        let m = &self.machine;
        let mut out = format!(
            "# leasehold bench: leasehold vs Redis, Redlock and etcd\n\n\
             Command: `{}`\n\n\
             Runs: {}, each measuring {} ms after {} ms of warm-up per (system, workload, clients); lock ttl {} ms. \
             Systems alternate inside every run; medians are over runs, and every ratio is the median of \
             the ratios taken within one run.\n\n\
             ## Machine\n\n\
             - CPU: {} — {} CPUs usable by the harness, online: {}\n\
             - kernel {}\n\
             - build: {}\n\
             - load average at start: {}; at end: {}\n\
             - fsync probe of the results disk ({} appends of 4 KiB + fsync): p50 {} µs, p99 {} µs, max {} µs\n\
             - loopback round trip ({} of 64 bytes over TCP): p50 {} µs, p99 {} µs\n\n\
             ### CPU placement\n\n\
             Every server and the harness (all benchmark clients, one tokio runtime) share the CPUs below; \
             nothing is pinned.\n\n\
             | system | pids | CPUs allowed |\n|---|---|---|\n",
            self.command,
            self.runs,
            self.duration_ms,
            self.warmup_ms,
            self.ttl_ms,
            m.cpu_model,
            m.available_parallelism,
            m.cpus_online,
            m.kernel,
            self.build,
            m.load_at_start,
            m.load_at_end,
            self.fsync.samples,
            self.fsync.p50_us,
            self.fsync.p99_us,
            self.fsync.max_us,
            self.loopback.samples,
            self.loopback.p50_us,
            self.loopback.p99_us,
        );
        for p in &self.placement {
            let pids = p.pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
            out.push_str(&format!("| {} | {} | {} |\n", p.system, pids, p.cpus_allowed.join(", ")));
        }
        for (system, why) in &self.skipped {
            out.push_str(&format!("\n**Skipped {system}**: {why}\n"));
        }
        for (system, why) in &self.left_out {
            out.push_str(&format!("\n**{system} left out of a workload**: {why}\n"));
        }
        if !self.targets.is_empty() {
            out.push_str("\n## Targets (ratios within one run, medians over runs; CPU per cycle as measured)\n\n| target | measured | met |\n|---|---:|---|\n");
            for t in &self.targets {
                out.push_str(&format!("| {} | {:.2} | {} |\n", t.goal, t.measured, if t.met { "yes" } else { "no" }));
            }
        }
        out.push_str(&self.floor_table());
        out.push_str(&herd_table(&self.rows));
        out.push_str(&flood_table(&self.rows));
        out.push_str(&semaphore_table(&self.rows));
        out.push_str(&elections_table(&self.rows));
        out.push_str(&format!(
            "\n## Medians\n\n\
             `× {BASELINE}` is the system's cycles/s divided by {BASELINE}'s in the same run (median over runs). \
             On the hot name every cycle is a hand-off, so cycles/s is hand-offs/s; in `{SEMAPHORE}` a cycle \
             is one permit's acquire → release. Latencies in ms.\n\n\
             CPU µs/cycle: CPU time (user + system, from `/proc`) used in the measured window, divided by the \
             cycles completed in it — by the system's servers, and by the harness process that runs every client.\n\n\
             | workload | clients | system | cycles/s | × {BASELINE} | cycle p50 | p99 | p99.9 | acquire p50 | p99 | p99.9 | server CPU µs/cycle | client CPU µs/cycle | errors |\n\
             |---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        ));
        for s in &self.summary {
            out.push_str(&format!(
                "| {} | {} | {} | {:.0} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {} |\n",
                s.workload,
                s.clients,
                s.system,
                s.ops_per_sec,
                s.ops_vs_baseline.map_or("–".into(), |r| format!("{r:.2}")),
                s.p50_us / 1e3,
                s.p99_us / 1e3,
                s.p999_us / 1e3,
                s.acquire_p50_us / 1e3,
                s.acquire_p99_us / 1e3,
                s.acquire_p999_us / 1e3,
                cpu_cell(s.server_cpu_us_per_cycle),
                cpu_cell(s.client_cpu_us_per_cycle),
                s.errors
            ));
        }
        out.push_str("\n## Plots\n\n");
        for (file, title) in plots {
            out.push_str(&format!("![{title}]({file})\n\n"));
        }
        out.push_str("## Every run\n\n");
        out.push_str(&rows_table(&self.rows));
        out
    }
}

impl Report {
    /// The hot lock against its floor, per leasehold system and client
    /// count. A hand-off on one hot name is strictly sequential: the
    /// holder's release travels to the leader, the entry is made durable on
    /// a quorum (one round trip to the followers, each fsyncing as the
    /// leader does), and the next holder is answered and sends its own
    /// release: one fsync, one round trip between nodes and one between
    /// client and node per hand-off, whatever the hardware does in
    /// parallel. The CPU bound is the machine's cores divided by the CPU
    /// every hand-off costs the servers and the client. Empty without
    /// hot-handoff rows.
    fn floor_table(&self) -> String {
        let keys: Vec<(usize, &str)> =
            points_of(&self.rows, HOT).into_iter().filter(|(_, system)| system.starts_with("leasehold")).collect();
        if keys.is_empty() {
            return String::new();
        }
        let floor_us = self.fsync.p50_us + 2 * self.loopback.p50_us;
        let cores = self.machine.available_parallelism as f64;
        let mut out = format!(
            "\n## The hot lock and its floor\n\n\
             A hand-off on one name is sequential: one durable commit (the fsync probe's p50, {} µs, paid by \
             the leader and the followers in parallel) plus one round trip between nodes and one between a \
             client and a node (the loopback probe's p50, {} µs each): {floor_us} µs, a floor of {:.0} \
             hand-offs/s. The CPU bound is {cores:.0} cores ÷ the CPU one hand-off costs the servers and the \
             client (median over runs).\n\n\
             | system | clients | hand-offs/s | ÷ latency floor | CPU µs/hand-off (servers + client) | CPU bound hand-offs/s |\n\
             |---|---:|---:|---:|---:|---:|\n",
            self.fsync.p50_us,
            self.loopback.p50_us,
            1e6 / floor_us.max(1) as f64,
        );
        for (clients, system) in keys {
            let runs = point(&self.rows, HOT, clients, system);
            let rate = median(runs.iter().map(|r| r.ops_per_sec).collect());
            let cpu = median_of(&runs, |r| Some(r.server_cpu_us_per_cycle? + r.client_cpu_us_per_cycle?));
            out.push_str(&format!(
                "| {system} | {clients} | {rate:.0} | {:.2} | {} | {} |\n",
                rate * floor_us as f64 / 1e6,
                cpu.map_or("–".into(), |c| format!("{c:.0}")),
                cpu.map_or("–".into(), |c| format!("{:.0}", cores * 1e6 / c)),
            ));
        }
        out
    }
}

/// The hot-name workload's label in the rows.
const HOT: &str = "hot-handoff";

/// The herds: per system and herd size, the median hand-offs/s and servers'
/// resident memory at the end of a run, the leader changes and errors
/// summed over runs. Empty without herd rows.
fn herd_table(rows: &[BenchRow]) -> String {
    let keys = points_of(rows, HERD);
    if keys.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\n## Herds\n\n\
         Every client waits in the queue of one lock (leasehold, etcd) or retries with jittered back-off \
         (Redis, Redlock); leasehold's clients are pinned to one node each in turn (a follower serves its \
         waiters itself and hands the leader their commands, over one peer connection) and wait over \
         HTTP/2; etcd's talk to its leader. Leader \
         changes: how far the Raft term moved during the measurements (– where the system has no term).\n\n\
         | system | waiters | hand-offs/s | leader changes | server RSS MiB | errors |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for (clients, system) in keys {
        let runs = point(rows, HERD, clients, system);
        let changes: Option<u64> = runs.iter().map(|r| r.leader_changes).sum();
        let rss = median_of(&runs, |r| r.server_rss_mib);
        out.push_str(&format!(
            "| {system} | {clients} | {:.0} | {} | {} | {} |\n",
            median(runs.iter().map(|r| r.ops_per_sec).collect()),
            changes.map_or("–".to_string(), |c| c.to_string()),
            rss.map_or("–".to_string(), |m| format!("{m:.0}")),
            runs.iter().map(|r| r.errors).sum::<u64>(),
        ));
    }
    out
}

/// The floods: per system, distinct-name cycles/s with the flood open and
/// without it in the same run, the idle connections open at the end, and
/// the leader changes. Empty without flood rows.
fn flood_table(rows: &[BenchRow]) -> String {
    let keys = points_of(rows, FLOOD);
    if keys.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\n## Connection flood\n\n\
         Distinct-name cycles while idle connections (from 64 loopback addresses, reopened as soon as the \
         server closes one) are held open against leasehold's leader, etcd's member, the single Redis or \
         the first Redlock instance. × unflooded: cycles/s ÷ the same system's `cycle-distinct` at the same \
         clients in the same run (median over runs).\n\n\
         | system | clients | idle connections open | cycles/s | × unflooded | leader changes | server RSS MiB | errors |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (clients, system) in keys {
        let runs = point(rows, FLOOD, clients, system);
        let plain = point(rows, "cycle-distinct", clients, system);
        let changes: Option<u64> = runs.iter().map(|r| r.leader_changes).sum();
        out.push_str(&format!(
            "| {system} | {clients} | {} | {:.0} | {} | {} | {} | {} |\n",
            median_of(&runs, |r| r.idle_connections.map(|n| n as f64)).map_or("–".into(), |n| format!("{n:.0}")),
            median(runs.iter().map(|r| r.ops_per_sec).collect()),
            same_run_ratio(&runs, &plain, |r| r.ops_per_sec).map_or("–".into(), |x| format!("{x:.2}")),
            changes.map_or("–".to_string(), |c| c.to_string()),
            median_of(&runs, |r| r.server_rss_mib).map_or("–".into(), |m| format!("{m:.0}")),
            runs.iter().map(|r| r.errors).sum::<u64>(),
        ));
    }
    out
}

/// The semaphore workload's label in the rows.
const SEMAPHORE: &str = "semaphore-permit";

/// The semaphores: per system and clients, the median permit cycles/s and
/// its ratio to leasehold-3's, and the harness's count of holders over the
/// runs. Empty without semaphore rows.
fn semaphore_table(rows: &[BenchRow]) -> String {
    let keys = points_of(rows, SEMAPHORE);
    if keys.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n## Semaphore\n\n\
         `{SEMAPHORE}`: every client takes one permit of one counting semaphore, waiting for it, and \
         releases it at once, so a cycle is a permit's acquire → release. leasehold: its semaphore API \
         (`/v1/semaphores/{{name}}/acquire` waiting in the server's FIFO queue, release by token). etcd has \
         no semaphore: the usual recipe (Curator's InterProcessSemaphoreV2 on ZooKeeper, the lowest N \
         keys), a key per client under the semaphore's prefix with its lease, a permit held once the key is \
         among the first `limit` by create revision, the others polling with serializable ranges \
         (jittered, 1 ms doubling to 50 ms), release by deleting the key. Holders: at each grant, in the \
         server's order (leasehold's token, the index of the granting entry; etcd's revision of the range \
         that found the key among the first `limit`), the clients that certainly held a permit: the \
         grant's own and every one granted no later whose release started after this grant's answer. A \
         grant with more than the limit is a violation. As releases follow at once, the count catches only \
         grants whose answers crossed: a tripwire, not a proof.\n\n\
         | system | clients | limit | cycles/s | × {BASELINE} | most holders at a grant | grants over the limit | errors |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (clients, system) in keys {
        let runs = point(rows, SEMAPHORE, clients, system);
        let baseline = point(rows, SEMAPHORE, clients, BASELINE);
        let counts: Vec<SemaphoreCount> = runs.iter().filter_map(|r| r.semaphore).collect();
        let vs = if system == BASELINE { None } else { same_run_ratio(&runs, &baseline, |r| r.ops_per_sec) };
        out.push_str(&format!(
            "| {system} | {clients} | {} | {:.0} | {} | {} | {} | {} |\n",
            counts.first().map_or("–".to_string(), |c| c.limit.to_string()),
            median(runs.iter().map(|r| r.ops_per_sec).collect()),
            vs.map_or("–".into(), |x| format!("{x:.2}")),
            counts.iter().map(|c| c.most_holders).max().map_or("–".to_string(), |m| m.to_string()),
            counts.iter().map(|c| c.over_limit).sum::<u64>(),
            runs.iter().map(|r| r.errors).sum::<u64>(),
        ));
    }
    out
}

/// Elections under load: per (workload, clients, system) that reports a
/// Raft term, how far the term moved over all runs and how long it was
/// watched, and that as elections per hour. Empty when no system has a term.
fn elections_table(rows: &[BenchRow]) -> String {
    let mut keys: Vec<(&str, usize, &str)> = Vec::new();
    for r in rows.iter().filter(|r| r.leader_changes.is_some()) {
        let key = (r.workload.as_str(), r.clients, r.system.as_str());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    if keys.is_empty() {
        return String::new();
    }
    keys.sort();
    let mut out = String::from(
        "\n## Elections during the measurements\n\n\
         How far the Raft term moved from before a measurement's first cycle to after its last (warm-up \
         and drain included), summed over runs: each election a candidate starts moves it by one, so 0 \
         means the leader held under the load.\n\n\
         | workload | clients | system | runs | minutes watched | elections | elections per hour |\n\
         |---|---:|---|---:|---:|---:|---:|\n",
    );
    for (workload, clients, system) in keys {
        let runs = point(rows, workload, clients, system);
        let watched = Elections::of(&runs);
        out.push_str(&format!(
            "| {workload} | {clients} | {system} | {} | {:.1} | {} | {:.1} |\n",
            runs.len(),
            watched.hours * 60.0,
            watched.elections,
            watched.per_hour(),
        ));
    }
    out
}

/// The elections counted over some measurements, and the time watched.
struct Elections {
    elections: u64,
    hours: f64,
}

impl Elections {
    /// Over the runs that report a term.
    fn of(runs: &[&BenchRow]) -> Elections {
        let watched = runs.iter().filter(|r| r.leader_changes.is_some());
        Elections {
            elections: watched.clone().filter_map(|r| r.leader_changes).sum(),
            hours: watched.filter_map(|r| r.term_watched_ms).sum::<u64>() as f64 / 3_600_000.0,
        }
    }

    fn per_hour(&self) -> f64 {
        if self.hours > 0.0 {
            self.elections as f64 / self.hours
        } else {
            0.0
        }
    }
}

/// The clients of the elections-under-load target.
const ELECTION_CLIENTS: usize = 64;

/// No election while [`ELECTION_CLIENTS`] clients cycle on distinct names:
/// a busy leader still heartbeats in time.
fn election_target(rows: &[BenchRow]) -> Option<Target> {
    let runs = point(rows, "cycle-distinct", ELECTION_CLIENTS, BASELINE);
    let watched = Elections::of(&runs);
    (watched.hours > 0.0).then(|| Target {
        goal: format!(
            "{BASELINE} elections during cycle-distinct at {ELECTION_CLIENTS} clients ({:.1} minutes watched) = 0",
            watched.hours * 60.0
        ),
        measured: watched.elections as f64,
        met: watched.elections == 0,
    })
}

/// The flood workload's label in the rows.
const FLOOD: &str = "cycle-distinct-flooded";
/// The clients of the flood target.
const FLOOD_CLIENTS: usize = 64;

/// The flood targets for leasehold-3: distinct-name cycles/s at
/// [`FLOOD_CLIENTS`] clients with the flood open ≥ 0.8× without, in the same
/// run, and the leader unchanged.
fn flood_targets(rows: &[BenchRow]) -> Vec<Target> {
    let flooded = point(rows, FLOOD, FLOOD_CLIENTS, BASELINE);
    if flooded.is_empty() {
        return Vec::new();
    }
    let open = median_of(&flooded, |r| r.idle_connections.map(|n| n as f64)).unwrap_or(0.0);
    let mut targets = Vec::new();
    let plain = point(rows, "cycle-distinct", FLOOD_CLIENTS, BASELINE);
    if let Some(measured) = same_run_ratio(&flooded, &plain, |r| r.ops_per_sec) {
        targets.push(Target {
            goal: format!(
                "{BASELINE} cycles/s at {FLOOD_CLIENTS} clients with {open:.0} idle connections on the leader ÷ without, same run ≥ 0.80"
            ),
            measured,
            met: measured >= 0.8,
        });
    }
    let changes: u64 = flooded.iter().filter_map(|r| r.leader_changes).sum();
    targets.push(Target {
        goal: format!("{BASELINE} leader changes during the floods = 0"),
        measured: changes as f64,
        met: changes == 0,
    });
    targets
}

/// The (clients, system) points measured in `workload`, by clients.
fn points_of<'a>(rows: &'a [BenchRow], workload: &str) -> Vec<(usize, &'a str)> {
    let mut keys: Vec<(usize, &str)> = Vec::new();
    for r in rows.iter().filter(|r| r.workload == workload) {
        if !keys.contains(&(r.clients, r.system.as_str())) {
            keys.push((r.clients, &r.system));
        }
    }
    keys.sort();
    keys
}

/// The herd workload's label in the rows.
const HERD: &str = "herd-handoff";
/// The herd size the others are compared with.
const HERD_BASE: usize = 64;

/// The herd targets for leasehold-3: each herd larger than [`HERD_BASE`]
/// hands off at least 0.8× as fast as [`HERD_BASE`] waiters in the same
/// run, with the leader unchanged and no answer but grants.
fn herd_targets(rows: &[BenchRow]) -> Vec<Target> {
    let base = point(rows, HERD, HERD_BASE, BASELINE);
    let mut sizes: Vec<usize> = rows
        .iter()
        .filter(|r| r.workload == HERD && r.system == BASELINE && r.clients > HERD_BASE)
        .map(|r| r.clients)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut targets = Vec::new();
    for n in sizes {
        let herd = point(rows, HERD, n, BASELINE);
        if let Some(measured) = same_run_ratio(&herd, &base, |r| r.ops_per_sec) {
            targets.push(Target {
                goal: format!("{BASELINE} hand-offs/s with {n} waiters ÷ with {HERD_BASE}, same run ≥ 0.80"),
                measured,
                met: measured >= 0.8,
            });
        }
        let changes: u64 = herd.iter().filter_map(|r| r.leader_changes).sum();
        targets.push(Target {
            goal: format!("{BASELINE} leader changes during the herds of {n} waiters = 0"),
            measured: changes as f64,
            met: changes == 0,
        });
        let errors: u64 = herd.iter().map(|r| r.errors).sum();
        targets.push(Target {
            goal: format!("{BASELINE} errors during the herds of {n} waiters = 0"),
            measured: errors as f64,
            met: errors == 0,
        });
    }
    targets
}

/// The rows of one measurement point, in run order.
fn point<'a>(rows: &'a [BenchRow], workload: &str, clients: usize, system: &str) -> Vec<&'a BenchRow> {
    rows.iter().filter(|r| r.workload == workload && r.clients == clients && r.system == system).collect()
}

/// Median over runs of `f(row of system) / f(row of other)` where both ran.
fn same_run_ratio(a: &[&BenchRow], b: &[&BenchRow], f: fn(&BenchRow) -> f64) -> Option<f64> {
    let ratios: Vec<f64> = a
        .iter()
        .filter_map(|ra| b.iter().find(|rb| rb.run == ra.run).map(|rb| f(ra) / f(rb)))
        .filter(|r| r.is_finite())
        .collect();
    (!ratios.is_empty()).then(|| median(ratios))
}

/// The median of `f` over the runs that measured it; `None` when none did.
fn median_of(runs: &[&BenchRow], f: fn(&BenchRow) -> Option<f64>) -> Option<f64> {
    let values: Vec<f64> = runs.iter().filter_map(|r| f(r)).collect();
    (!values.is_empty()).then(|| median(values))
}

fn summarize(rows: &[BenchRow]) -> Vec<Summary> {
    let mut keys: Vec<(&str, usize, &str)> = Vec::new();
    for r in rows {
        let key = (r.workload.as_str(), r.clients, r.system.as_str());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.sort_by_key(|&(w, c, _)| (w, c));
    keys.into_iter()
        .map(|(workload, clients, system)| {
            let runs = point(rows, workload, clients, system);
            let baseline = point(rows, workload, clients, BASELINE);
            let of = |f: fn(&BenchRow) -> f64| median(runs.iter().map(|r| f(r)).collect());
            let vs =
                |f| if system == BASELINE || baseline.is_empty() { None } else { same_run_ratio(&runs, &baseline, f) };
            Summary {
                workload: workload.into(),
                clients,
                system: system.into(),
                runs: runs.len(),
                ops_per_sec: of(|r| r.ops_per_sec),
                ops_vs_baseline: vs(|r| r.ops_per_sec),
                p50_vs_baseline: vs(|r| r.p50_us as f64),
                p50_us: of(|r| r.p50_us as f64),
                p99_us: of(|r| r.p99_us as f64),
                p999_us: of(|r| r.p999_us as f64),
                acquire_p50_us: of(|r| r.acquire_p50_us as f64),
                acquire_p99_us: of(|r| r.acquire_p99_us as f64),
                acquire_p999_us: of(|r| r.acquire_p999_us as f64),
                server_cpu_us_per_cycle: median_of(&runs, |r| r.server_cpu_us_per_cycle),
                client_cpu_us_per_cycle: median_of(&runs, |r| r.client_cpu_us_per_cycle),
                errors: runs.iter().map(|r| r.errors).sum(),
            }
        })
        .collect()
}

/// The write-path targets for leasehold, for every compared system present:
/// ratios of medians taken within one run, and the CPU budget per cycle.
fn targets(rows: &[BenchRow]) -> Vec<Target> {
    /// `system`'s figure ÷ `other`'s: at least `bound` (throughput), or at
    /// most `bound` when lower is better (latency).
    struct Ratio {
        system: &'static str,
        workload: &'static str,
        clients: usize,
        other: &'static str,
        lower: bool,
        bound: f64,
    }
    let ratio =
        |system, workload, clients, other, lower, bound| Ratio { system, workload, clients, other, lower, bound };
    let ratios = [
        ratio(BASELINE, "cycle-distinct", 64, "redlock", false, 2.0),
        ratio(BASELINE, "cycle-distinct", 64, "etcd-session", false, 5.0),
        ratio(BASELINE, "cycle-distinct", 1, "etcd-session", true, 0.5),
        ratio(BASELINE, HOT, 64, "etcd-session", false, 5.0),
        ratio("leasehold-5", "cycle-distinct", 64, BASELINE, false, 0.7),
        ratio("leasehold-5", HOT, 64, BASELINE, false, 0.7),
    ];
    let mut targets: Vec<Target> = ratios
        .iter()
        .filter_map(|g| {
            let ours = point(rows, g.workload, g.clients, g.system);
            let theirs = point(rows, g.workload, g.clients, g.other);
            let f: fn(&BenchRow) -> f64 = if g.lower { |r| r.p50_us as f64 } else { |r| r.ops_per_sec };
            let measured = same_run_ratio(&ours, &theirs, f)?;
            let (what, relation) = if g.lower { ("cycle p50", "≤") } else { ("cycles/s", "≥") };
            Some(Target {
                goal: format!(
                    "{} {what} ÷ {}'s, {} at {} clients {relation} {:.2}",
                    g.system, g.other, g.workload, g.clients, g.bound
                ),
                measured,
                met: if g.lower { measured <= g.bound } else { measured >= g.bound },
            })
        })
        .collect();
    // A third of the 444 µs (346 in the servers + 98 in the client) one
    // cycle cost before the write-path work, on 64 clients and distinct names.
    const CPU_BUDGET_US: f64 = 148.0;
    let busy = point(rows, "cycle-distinct", 64, BASELINE);
    let total: Vec<f64> =
        busy.iter().filter_map(|r| Some(r.server_cpu_us_per_cycle? + r.client_cpu_us_per_cycle?)).collect();
    if !total.is_empty() {
        let measured = median(total);
        targets.push(Target {
            goal: format!(
                "{BASELINE} CPU µs per cycle (servers + client), cycle-distinct at 64 clients ≤ {CPU_BUDGET_US:.0}"
            ),
            measured,
            met: measured <= CPU_BUDGET_US,
        });
    }
    targets.extend(herd_targets(rows));
    targets.extend(flood_targets(rows));
    targets.extend(pair_target(rows));
    targets.extend(election_target(rows));
    targets
}

/// A cycle of two locks taken together (one multi-acquire, one
/// multi-release) costs leasehold-3 at most 1.3× a single-lock cycle in
/// cycles/s at 64 clients: one entry each way, not two.
fn pair_target(rows: &[BenchRow]) -> Option<Target> {
    let single = point(rows, "cycle-distinct", 64, BASELINE);
    let pair = point(rows, "cycle-pair", 64, BASELINE);
    let measured = same_run_ratio(&single, &pair, |r| r.ops_per_sec)?;
    Some(Target {
        goal: format!(
            "{BASELINE} single-lock cycles/s ÷ two-lock (cycle-pair) cycles/s at 64 clients, same run ≤ 1.30"
        ),
        measured,
        met: measured <= 1.3,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(system: &str, run: usize, elections: Option<u64>) -> BenchRow {
        BenchRow {
            system: system.into(),
            workload: "cycle-distinct".into(),
            clients: 64,
            run,
            cycles: 1000,
            errors: 0,
            first_error: None,
            ops_per_sec: 100.0,
            handoffs_per_sec: None,
            p50_us: 1,
            p99_us: 1,
            p999_us: 1,
            acquire_p50_us: 1,
            acquire_p99_us: 1,
            acquire_p999_us: 1,
            cycle_cdf_us: Vec::new(),
            server_cpu_us_per_cycle: None,
            client_cpu_us_per_cycle: None,
            leader_changes: elections,
            term_watched_ms: elections.map(|_| 600_000),
            server_rss_mib: None,
            idle_connections: None,
            semaphore: None,
        }
    }

    // Elections are summed over runs and counted per hour watched; a
    // system without a term has no row, and one election misses the target.
    #[test]
    fn elections_per_hour_over_the_runs() {
        let rows =
            [row(BASELINE, 1, Some(0)), row(BASELINE, 2, Some(1)), row(BASELINE, 3, Some(0)), row("redis", 1, None)];
        let table = elections_table(&rows);
        assert!(table.contains("| cycle-distinct | 64 | leasehold-3 | 3 | 30.0 | 1 | 2.0 |"), "{table}");
        assert!(!table.contains("redis"), "{table}");
        let target = election_target(&rows).expect("leasehold-3 was watched");
        assert_eq!((target.measured, target.met), (1.0, false));
        assert_eq!(elections_table(&[row("redis", 1, None)]), "");
    }

    // The semaphore table gives each system's median cycles/s, its ratio
    // to leasehold-3's within the run, the most holders seen and the
    // violations summed over the runs; without semaphore rows it is empty.
    #[test]
    fn semaphore_rows_in_their_table() {
        let semaphore = |system: &str, run, ops_per_sec, most_holders, over_limit| BenchRow {
            workload: SEMAPHORE.into(),
            ops_per_sec,
            semaphore: Some(SemaphoreCount { limit: 8, most_holders, over_limit }),
            ..row(system, run, None)
        };
        let rows = [
            semaphore(BASELINE, 1, 400.0, 2, 0),
            semaphore("etcd", 1, 100.0, 1, 0),
            semaphore(BASELINE, 2, 500.0, 1, 0),
            semaphore("etcd", 2, 100.0, 2, 1),
            row("redis", 1, None),
        ];
        let table = semaphore_table(&rows);
        assert!(table.contains("| leasehold-3 | 64 | 8 | 500 | – | 2 | 0 | 0 |"), "{table}");
        assert!(table.contains("| etcd | 64 | 8 | 100 | 0.25 | 2 | 1 | 0 |"), "{table}");
        assert!(!table.contains("redis"), "{table}");
        assert_eq!(semaphore_table(&[row("redis", 1, None)]), "");
    }
}
