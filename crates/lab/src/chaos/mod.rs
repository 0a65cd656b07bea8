//! `leasehold-lab chaos`: the fault suite. A 3- or 5-node cluster, each node its
//! own host (network namespace) when the machine allows, under a workload
//! of concurrent clients, while a nemesis injects one fault after another;
//! then the [`history`](crate::history) checkers judge the recorded history
//! and the fenced resource's log: the per-property rules, and the
//! linearizability check of the whole history against a model of the lock table.
//!
//! - [`hosts`] — namespaces, bridge, veths and iptables faults.
//! - [`workload`] — the clients, a third each: single-lock cycles (acquire → write → read →
//!   renew → write → release), multi-lock cycles (2–3 names under one token) and session
//!   cycles (locks under a kept-alive session, released, deleted or abandoned to expire).
//! - [`election`] — candidates campaigning for one election and observers following it through
//!   every fault, and the check of their record (one leader per token, no gap, no reordering).
//! - [`sharing`] — semaphore clients, readers and writers through every fault, and the check
//!   of their record (permits within the limit, exclusion, token order).
//! - [`nemesis`] — the faults and their healing.
//! - [`report`] — the table per fault (Markdown, JSON) and the timeline (SVG).

pub mod election;
pub mod hostile;
pub mod hosts;
pub mod nemesis;
pub mod report;
pub mod sharing;
pub mod workload;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::history::{
    self, CheckReport, FencedResource, HarnessClock, History, Operation, ResourceMode, ResourceWrite,
};
use election::Elections;
use hosts::Hosts;
use leasehold_client::Client;
use leasehold_local::{LocalCluster, NodeLogs};
use leasehold_proto::NodeId;
use nemesis::{FaultKind, FaultRecord, Nemesis};
use report::{ChaosReport, Linearizability, RunSetup, SharingTotals};
use sharing::{Role, Sharing};
use workload::{Target, Workload};

/// Candidates and observers of the election side.
const CANDIDATES: usize = 3;
const OBSERVERS: usize = 2;
/// The sharing side: three clients on a semaphore of limit 2 (so that it
/// is often full), and readers outnumbering writers on two locks.
const SHARING: [Role; 8] = [
    Role::Semaphore,
    Role::Semaphore,
    Role::Semaphore,
    Role::Reader,
    Role::Reader,
    Role::Reader,
    Role::Writer,
    Role::Writer,
];
/// Node slots: a 3-node cluster keeps two spare ones for the membership fault.
const SLOTS: usize = 5;
const TICK_MS: u64 = 100;

#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    #[error("{0}")]
    Cluster(#[from] leasehold_local::LocalClusterError),
    #[error("{0}")]
    Resource(#[from] history::ResourceError),
    #[error("{0}")]
    Client(#[from] leasehold_client::ClientError),
    #[error("writing results: {0}")]
    Io(#[from] std::io::Error),
}

/// What to run.
pub struct ChaosOptions {
    /// 3 or 5 voters.
    pub nodes: usize,
    /// Keep injecting faults until this much time has passed (one full round
    /// at least); the fault under way then is finished.
    pub duration: Duration,
    /// The faults of a round, in order.
    pub faults: Vec<FaultKind>,
    pub clients: usize,
    /// How long each fault lasts.
    pub hold: Duration,
    /// Quiet time after each fault.
    pub quiet: Duration,
    /// Use network namespaces when possible (else loopback, process faults only).
    pub network: bool,
    /// The `leasehold` binary the nodes run.
    pub binary: PathBuf,
    /// Folder for chaos.md, chaos.json, timeline.svg, history.json and the
    /// nodes' data and logs.
    pub out: PathBuf,
}

/// Runs the suite, printing progress to stderr, and writes the results
/// into `options.out`.
pub async fn run(options: &ChaosOptions) -> Result<ChaosReport, ChaosError> {
    let data = options.out.join("cluster");
    if data.exists() {
        std::fs::remove_dir_all(&data)?;
    }
    std::fs::create_dir_all(&data)?;
    let clock = HarnessClock::new();
    let history = History::new(clock);
    let (hosts, described) = match options.network.then(|| Hosts::create(SLOTS)) {
        Some(Ok(hosts)) => {
            let described = hosts.describe();
            (Some(hosts), described)
        }
        Some(Err(e)) => (None, format!("loopback, process-level faults only ({e})")),
        None => (None, "loopback, process-level faults only (--loopback)".to_string()),
    };
    eprintln!("chaos: nodes on {described}");
    let addrs = match &hosts {
        Some(h) => h.node_addrs(),
        None => LocalCluster::free_addrs(SLOTS)?,
    };
    // A lease quota the hostile-clients fault's flood reaches in a second
    // or two, far above what the workload holds.
    let quota = hostile::LEASE_QUOTA.to_string();
    let mut serve_args = vec!["--max-leases", quota.as_str()];
    if hosts.is_some() {
        // The nodes run open on the namespaces' private addresses, which only
        // this run reaches; outside loopback that takes --insecure.
        serve_args.push("--insecure");
    }
    let mut cluster = LocalCluster::new(&options.binary, &data, &addrs, TICK_MS, NodeLogs::Files)
        .with_initial_members(options.nodes)
        .with_serve_args(&serve_args);
    if let Some(h) = &hosts {
        for id in cluster.ids() {
            cluster.set_launcher(id, h.launcher(id));
        }
    }
    let members: BTreeSet<NodeId> = (1..=options.nodes as NodeId).collect();
    for id in &members {
        cluster.start(*id)?;
    }
    cluster.wait_for_leader(Duration::from_secs(60)).await?;
    eprintln!("chaos: {}-node cluster up, data and logs in {}", options.nodes, data.display());
    let resource = FencedResource::start(SocketAddr::from(([127, 0, 0, 1], 0)), ResourceMode::Fenced, clock).await?;
    // The pinned clients talk to the first members only: the other slots
    // join and leave with the membership fault.
    let pinned =
        members.iter().map(|id| Client::new(&[cluster.endpoint(*id)]).map(Arc::new)).collect::<Result<Vec<_>, _>>()?;
    let target = Target {
        client: Arc::new(Client::new(&cluster.endpoints())?),
        resource_url: resource.url(),
        http: crate::http_client(),
        history: history.clone(),
    };
    let mut nemesis = Nemesis::new(cluster, hosts, members, options.hold, target.clone());
    let workload = Workload::start(&target, options.clients, &pinned);
    let elections = Elections::start(&target.client, clock, CANDIDATES, OBSERVERS);
    let sharing = Sharing::start(&target.client, clock, &SHARING);
    tokio::time::sleep(options.quiet).await;
    let records = inject_rounds(&mut nemesis, options, clock).await;
    workload.stop().await;
    let election_record = elections.stop().await;
    let sharing_record = sharing.stop().await;
    let end_us = clock.now_us();
    nemesis.stop_cluster(Duration::from_secs(5));
    drop(nemesis);

    let operations = history.operations();
    let writes = resource.writes();
    let (mut check, linearizability) = judge(&operations, &writes);
    let leaderships = election_record.elected.len();
    let observed: usize = election_record.observers.iter().map(Vec::len).sum();
    eprintln!("chaos: checking {leaderships} leaderships and {observed} observed leadership events ...");
    check.violations.extend(election::check(&election_record));
    eprintln!("chaos: checking {} semaphore and read/write operations ...", sharing_record.operations.len());
    let sharing_violations = sharing::check(&sharing_record);
    for v in sharing_violations.iter().take(3) {
        eprintln!("chaos: violation: {:?} on {}: {}", v.kind, v.lock, v.detail);
    }
    check.violations.extend(sharing_violations);
    let setup = RunSetup {
        nodes: options.nodes,
        clients: options.clients,
        workload: workload::CycleKind::describe(options.clients),
        hosts: described,
        end_us,
    };
    let mut report = ChaosReport::build(setup, &operations, &writes, &records, &check);
    report.linearizability = Some(linearizability);
    report.sharing = Some(SharingTotals::of(&sharing_record, &check.violations));
    std::fs::write(options.out.join("chaos.md"), report.markdown())?;
    std::fs::write(options.out.join("chaos.json"), serde_json::to_vec_pretty(&report).expect("report serializes"))?;
    std::fs::write(options.out.join("timeline.svg"), report.timeline_svg(&operations))?;
    let not_linearizable = report.linearizability.as_ref().map(|l| &l.report.violations);
    let saved = serde_json::json!({
        "operations": operations,
        "writes": writes,
        "elections": election_record,
        "sharing": sharing_record,
        "violations": check.violations,
        "not_linearizable": not_linearizable,
    });
    std::fs::write(options.out.join("history.json"), serde_json::to_vec(&saved).expect("history serializes"))?;
    Ok(report)
}

/// Both judgements of a history: the per-property rules and the
/// linearizability check, with what each found on standard error.
fn judge(operations: &[Operation], writes: &[ResourceWrite]) -> (CheckReport, Linearizability) {
    eprintln!("chaos: checking {} operations and {} resource writes ...", operations.len(), writes.len());
    let check = history::check(operations, writes);
    for example in check.examples(3) {
        eprintln!("chaos: violation: {example}");
    }
    let began = Instant::now();
    let linearizable = history::check_linearizable(operations, history::DEFAULT_BUDGET);
    let linearizability = Linearizability { report: linearizable, seconds: began.elapsed().as_secs_f64() };
    eprintln!("chaos: linearizability: {} ({:.1} s)", linearizability.report.summary(), linearizability.seconds);
    (check, linearizability)
}

/// What a run saves in `history.json` that a later check reads.
#[derive(serde::Deserialize)]
struct SavedHistory {
    operations: Vec<Operation>,
    writes: Vec<ResourceWrite>,
    /// Absent from runs before the sharing side.
    #[serde(default)]
    sharing: sharing::SharingRecord,
}

/// Judges the `history.json` of an earlier run again, with this build's
/// checkers (`leasehold-lab recheck`): violations of the rules plus
/// components found not linearizable.
pub fn recheck(path: &std::path::Path) -> Result<usize, ChaosError> {
    let saved: SavedHistory = serde_json::from_slice(&std::fs::read(path)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))?;
    let (check, linearizability) = judge(&saved.operations, &saved.writes);
    let sharing_violations = sharing::check(&saved.sharing).len();
    if linearizability.report.verdict != history::Verdict::Linearizable {
        eprintln!("{}", linearizability.markdown());
    }
    Ok(check.violations.len() + sharing_violations + linearizability.report.violations.len())
}

/// Faults in rounds until the duration has passed, one full round at least.
/// A fault that fails (no leader in time, a refused membership change) is
/// recorded as not injected, and the run goes on.
async fn inject_rounds(nemesis: &mut Nemesis, options: &ChaosOptions, clock: HarnessClock) -> Vec<FaultRecord> {
    let began = Instant::now();
    let mut records = Vec::new();
    let round_length = options.faults.len();
    for (n, kind) in options.faults.iter().cycle().enumerate() {
        if n >= round_length && began.elapsed() >= options.duration {
            break;
        }
        eprintln!(
            "chaos: [round {}, {}/{round_length}, {:.0}s] {} ...",
            n / round_length + 1,
            n % round_length + 1,
            began.elapsed().as_secs_f64(),
            kind.label()
        );
        let now_us = clock.now_us();
        let record = nemesis.inject(*kind).await.unwrap_or_else(|e| FaultRecord {
            kind: *kind,
            injected: false,
            started_us: now_us,
            healed_us: now_us,
            note: format!("failed: {e}"),
        });
        eprintln!("chaos:   {}", record.note);
        records.push(record);
        tokio::time::sleep(options.quiet).await;
    }
    records
}
