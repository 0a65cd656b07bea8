//! What the workloads measured in rounds of a leader crash share
//! (`election.rs`, `failover.rs`): the systems that have a leader to crash,
//! their servers, and the report's per-system summary and per-round plot.

use std::path::Path;

use serde::Serialize;
use std::time::{Duration, Instant};

use super::report::{Machine, BUILD};
use super::servers::{self, EtcdCluster, ServerError};
use super::SystemKind;
use crate::bench::median;
use crate::plot::{Chart, LineStyle};
use leasehold_client::proto::cluster::ClusterStatus;
use leasehold_local::{LocalCluster, LocalClusterError};

/// The systems compared in rounds (the others have no leader to crash, or
/// no election API).
pub const SYSTEMS: [SystemKind; 2] = [SystemKind::leasehold(3), SystemKind::Etcd];

/// The servers of one system, killed by PID on drop.
pub enum RoundCluster {
    /// A local leasehold cluster of `leasehold-N`'s nodes (boxed: it is
    /// three times the size of the etcd variant).
    Leasehold(Box<LocalCluster>),
    /// A 3-member etcd cluster, for `etcd` (and `etcd-session`).
    Etcd(EtcdCluster),
}

impl RoundCluster {
    /// Starts `kind`'s servers with their data in `dir` and waits until
    /// they serve; `binary` is leasehold's.
    pub async fn start<E>(kind: SystemKind, binary: &Path, dir: &Path) -> Result<RoundCluster, E>
    where
        E: From<ServerError> + From<LocalClusterError>,
    {
        Ok(match kind {
            SystemKind::Leasehold { nodes, .. } => {
                RoundCluster::Leasehold(Box::new(servers::start_leasehold(binary, dir, nodes, None).await?))
            }
            _ => RoundCluster::Etcd(EtcdCluster::start(dir, 3).await?),
        })
    }
}

impl RoundCluster {
    /// The members' client endpoints, in member order: the indices the
    /// methods below take.
    pub fn endpoints(&self) -> Vec<String> {
        match self {
            RoundCluster::Leasehold(cluster) => cluster.endpoints(),
            RoundCluster::Etcd(etcd) => etcd.urls(),
        }
    }

    /// The member that leads now: leasehold's once every running node
    /// agrees on it (waiting up to `bound`), etcd's as it says itself.
    pub async fn leader<E>(&self, bound: Duration) -> Result<usize, E>
    where
        E: From<ServerError> + From<LocalClusterError>,
    {
        Ok(match self {
            RoundCluster::Leasehold(cluster) => {
                let leader = cluster.wait_for_leader(bound).await?;
                cluster.ids().iter().position(|id| *id == leader).expect("the leader is one of the nodes")
            }
            RoundCluster::Etcd(etcd) => etcd.leader().await?,
        })
    }

    /// kill -9 member `member`'s process (by PID) and reap it.
    pub fn kill(&mut self, member: usize) {
        match self {
            RoundCluster::Leasehold(cluster) => cluster.kill(cluster.ids()[member]),
            RoundCluster::Etcd(etcd) => etcd.kill(member),
        }
    }

    /// Starts a killed member again, with its data.
    pub fn restart<E>(&mut self, member: usize) -> Result<(), E>
    where
        E: From<ServerError> + From<LocalClusterError>,
    {
        match self {
            RoundCluster::Leasehold(cluster) => cluster.start(cluster.ids()[member])?,
            RoundCluster::Etcd(etcd) => etcd.restart(member)?,
        }
        Ok(())
    }

    /// Whether, within `bound`, every member answers, agrees on one leader
    /// and has applied the leader's log as it was once the leader was
    /// found: the cluster is whole again after a restart.
    pub async fn wait_whole(&self, bound: Duration) -> bool {
        match self {
            RoundCluster::Leasehold(cluster) => leasehold_whole(cluster, bound).await,
            RoundCluster::Etcd(etcd) => etcd.wait_caught_up(bound).await,
        }
    }
}

/// [`RoundCluster::wait_whole`] for a leasehold cluster.
async fn leasehold_whole(cluster: &LocalCluster, bound: Duration) -> bool {
    let give_up = Instant::now() + bound;
    let Ok(leader) = cluster.wait_for_leader(bound).await else {
        return false;
    };
    let Some(log_end) = cluster.statuses().await.get(&leader).and_then(|s| s.last_log_index) else {
        return false;
    };
    while Instant::now() < give_up {
        let statuses = cluster.statuses().await;
        let caught_up = |s: &ClusterStatus| s.leader == Some(leader) && s.applied_index >= Some(log_end);
        if statuses.len() == cluster.ids().len() && statuses.values().all(caught_up) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A row of a report measured in rounds: one round of one system.
pub trait SystemRound {
    fn system(&self) -> &str;
    fn round(&self) -> usize;
}

/// The systems of `rows`, in the order of their first row.
pub fn systems<R: SystemRound>(rows: &[R]) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for row in rows {
        if !found.iter().any(|s| s == row.system()) {
            found.push(row.system().to_string());
        }
    }
    found
}

/// The rows of `system`, in round order.
pub fn of<'a, R: SystemRound>(rows: &'a [R], system: &'a str) -> impl Iterator<Item = &'a R> + 'a {
    rows.iter().filter(move |r| r.system() == system)
}

/// The report's first lines: its title, the command that produced it, the
/// machine, and the build.
pub fn preamble(title: &str, command: &str, machine: &Machine) -> String {
    let m = machine;
    format!(
        "# {title}\n\nCommand: `{command}`\n\n\
         Machine: {} ({} CPUs usable, kernel {}); load {} → {}. Build: {BUILD}.\n\n",
        m.cpu_model, m.available_parallelism, m.kernel, m.load_at_start, m.load_at_end
    )
}

/// Once the servers are stopped: removes their data from `out` and notes
/// the load at the end.
pub fn clean_up(out: &Path, machine: &mut Machine) -> std::io::Result<()> {
    let servers = out.join("servers");
    if servers.exists() {
        std::fs::remove_dir_all(servers)?;
    }
    machine.load_at_end = Machine::probe().load_at_start;
    Ok(())
}

/// Writes `{name}.json`, `{name}.svg` and README.md into `out`.
pub fn write_report(
    out: &Path,
    name: &str,
    report: &impl Serialize,
    svg: String,
    markdown: String,
) -> std::io::Result<()> {
    std::fs::write(out.join(format!("{name}.json")), serde_json::to_vec_pretty(report).expect("report serializes"))?;
    std::fs::write(out.join(format!("{name}.svg")), svg)?;
    std::fs::write(out.join("README.md"), markdown)
}

/// One system's figure over its rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoundStats {
    pub rounds: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl RoundStats {
    /// The median (upper, for an even count), least and most of `values`;
    /// all 0 when there are none.
    pub fn of(values: Vec<f64>) -> RoundStats {
        let rounds = values.len();
        let min = values.iter().copied().reduce(f64::min).unwrap_or(0.0);
        let max = values.iter().copied().reduce(f64::max).unwrap_or(0.0);
        RoundStats { rounds, median: median(values), min, max }
    }
}

/// A chart of one figure of the rows, `ms`, per round: a series of points
/// per system, with a horizontal `floor` line (name, ms) where there is one.
pub fn per_round_chart<R: SystemRound>(
    title: &str,
    rounds: usize,
    rows: &[R],
    ms: impl Fn(&R) -> f64,
    floor: Option<(&str, f64)>,
) -> String {
    let top = rows.iter().map(&ms).chain(floor.map(|(_, ms)| ms)).fold(1.0, f64::max) * 1.1;
    let last = rounds.max(2) as f64;
    let x = |round: usize| (round as f64 - 1.0) / (last - 1.0);
    let mut chart = Chart::new(title, "round", "ms");
    for round in 1..=rounds {
        chart.tick_x(x(round), &round.to_string());
    }
    for i in 0..=4 {
        let ms = top * f64::from(i) / 4.0;
        chart.tick_y(ms / top, &format!("{ms:.0}"));
    }
    for system in systems(rows) {
        let points: Vec<(f64, f64)> = of(rows, &system).map(|r| (x(r.round()), ms(r) / top)).collect();
        chart.line(&system, &points, LineStyle::Points);
    }
    if let Some((name, ms)) = floor {
        chart.line(name, &[(0.0, ms / top), (1.0, ms / top)], LineStyle::Trace);
    }
    chart.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    // A system's summary is the median, least and most of its rounds, and
    // no rounds give zeros rather than infinities.
    #[test]
    fn stats_are_median_min_max() {
        assert_eq!(RoundStats::of(vec![3.0, 1.0, 2.0]), RoundStats { rounds: 3, median: 2.0, min: 1.0, max: 3.0 });
        assert_eq!(RoundStats::of(Vec::new()), RoundStats { rounds: 0, median: 0.0, min: 0.0, max: 0.0 });
    }

    impl SystemRound for (&str, usize) {
        fn system(&self) -> &str {
            self.0
        }
        fn round(&self) -> usize {
            self.1
        }
    }

    // Systems keep the order of their first row, and their rows the order
    // of the rounds.
    #[test]
    fn systems_in_first_seen_order() {
        let rows = [("leasehold-3", 1), ("etcd", 1), ("leasehold-3", 2), ("etcd", 2)];
        assert_eq!(systems(&rows), ["leasehold-3", "etcd"]);
        assert_eq!(of(&rows, "etcd").map(|r| r.1).collect::<Vec<_>>(), [1, 2]);
    }
}
