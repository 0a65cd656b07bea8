//! `leasehold-lab bench --workloads election`: how long a service is without
//! a leader that can write, after the leader's process dies.
//!
//! Each round, per system: candidate `a` (a process of its own, the hidden
//! `leasehold-lab election-candidate`) campaigns and is elected, candidate
//! `b` campaigns and waits; the leader writes to the harness's fenced
//! [`FencedResource`] under its token every few ms. The harness kills `a`
//! with SIGKILL (the candidate, not a cluster node) and measures from the
//! kill to the resource's receipt of `b`'s first accepted write. Nobody
//! tells the service that `a` died, so its lease must run out first: the
//! ttl is the floor, and both systems get the same one.
//!
//! Fences: leasehold's token is the index of the entry that elected the
//! leader; etcd's is the create revision of the leader's key under the
//! election prefix (`leader.rev` of `/v3/election/campaign`), which grows
//! with every campaign and so orders leaders the same way. The resource
//! refuses a token below the highest it accepted.

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use super::etcd::{int64, Gateway, SessionLease};
use super::holder::SystemSpec;
use super::report::Machine;
use super::rounds::{self, per_round_chart, RoundCluster, RoundStats, SystemRound};
use super::servers::{self, ServerError};
use super::{AdapterError, SystemKind};
use crate::history::{FencedResource, HarnessClock, Phase, ResourceError, ResourceMode, WriteRequest};
use leasehold_client::{Client, LockOptions};
use leasehold_local::LocalClusterError;

/// How long a candidate may wait in a campaign: longer than any round.
const CAMPAIGN_WAIT: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("local leasehold cluster: {0}")]
    Cluster(#[from] LocalClusterError),
    #[error(transparent)]
    Resource(#[from] ResourceError),
    #[error("candidate {candidate}: {what}")]
    Candidate { candidate: String, what: String },
    #[error("{0} did not happen within {1:?}")]
    Timeout(&'static str, Duration),
    #[error("results folder: {0}")]
    Io(#[from] std::io::Error),
}

/// What a candidate does.
#[derive(Debug, Clone)]
pub struct CandidateOptions {
    pub system: SystemSpec,
    pub election: String,
    pub candidate: String,
    pub ttl: Duration,
    pub fenced_url: String,
    /// Time between the leader's fenced writes.
    pub every: Duration,
}

/// One line of a candidate's stdout.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "event")]
pub enum CandidateEvent {
    /// Elected with this fence and lease (etcd rounds the ttl up).
    Elected { token: u64, ttl_ms: u64 },
    /// The campaign or a write failed; the candidate stops.
    Failed { what: String },
}

fn emit(event: &CandidateEvent) {
    let mut out = std::io::stdout().lock();
    // A closed pipe means the harness is gone; nothing is left to tell.
    let _ = writeln!(out, "{}", serde_json::to_string(event).expect("events serialize"));
    let _ = out.flush();
}

/// Campaigns, then writes under its token until killed, refused, or the
/// leadership is lost.
pub async fn candidate(options: &CandidateOptions) {
    if let Err(what) = lead(options).await {
        emit(&CandidateEvent::Failed { what });
    }
}

async fn lead(options: &CandidateOptions) -> Result<(), String> {
    let http = crate::http_client();
    let write = |token| {
        let request = WriteRequest {
            resource: options.election.clone(),
            client: options.candidate.clone(),
            lock: options.election.clone(),
            token,
            phase: Phase::Begin,
        };
        let http = http.clone();
        async move { FencedResource::submit(&http, &options.fenced_url, &request).await.map_err(|e| e.to_string()) }
    };
    match &options.system {
        SystemSpec::Leasehold(endpoints) => {
            let client = Arc::new(Client::new(endpoints).map_err(|e| e.to_string())?);
            let mut lock_options = LockOptions::new(options.ttl).with_owner(options.candidate.clone());
            lock_options.wait = Some(CAMPAIGN_WAIT);
            let leadership = client
                .election(&options.election)
                .campaign(json!(options.candidate), lock_options)
                .await
                .map_err(|e| e.to_string())?;
            let token = leadership.token().get();
            emit(&CandidateEvent::Elected { token, ttl_ms: options.ttl.as_millis() as u64 });
            // The watchdog renews the lease; writing stops once it says lost.
            while !leadership.is_lost() && write(token).await? {
                tokio::time::sleep(options.every).await;
            }
            Err("leadership lost or write refused".into())
        }
        SystemSpec::Etcd(url) => {
            let etcd_error = |e: AdapterError| e.to_string();
            let gateway = Gateway::new(url).map_err(etcd_error)?;
            // The lease is kept alive at ttl/3 as etcd's concurrency.Session does.
            let lease = SessionLease::start(gateway.clone(), options.ttl).await.map_err(etcd_error)?;
            let body = json!({
                "name": STANDARD.encode(&options.election),
                "lease": lease.id.to_string(),
                "value": STANDARD.encode(&options.candidate),
            });
            let reply = gateway.call("/v3/election/campaign", body, CAMPAIGN_WAIT).await.map_err(etcd_error)?;
            let token = int64(&reply["leader"]["rev"]).map_err(etcd_error)? as u64;
            emit(&CandidateEvent::Elected { token, ttl_ms: lease.ttl.as_millis() as u64 });
            while write(token).await? {
                tokio::time::sleep(options.every).await;
            }
            Err("write refused".into())
        }
        other => Err(format!("{other}: no election API")),
    }
}

/// What to run.
pub struct ElectionOptions {
    pub systems: Vec<SystemKind>,
    pub rounds: usize,
    pub ttl: Duration,
    /// The `leasehold` binary, for the nodes.
    pub binary: PathBuf,
    /// The `leasehold-lab` binary, for the candidates.
    pub candidate_binary: PathBuf,
    /// election.json, README.md and election.svg go here.
    pub out: PathBuf,
    pub command: String,
}

/// One round of one system.
#[derive(Debug, Clone, Serialize)]
pub struct RoundRow {
    pub system: String,
    pub round: usize,
    /// The lease the dead leader held, as the service granted it.
    pub ttl_ms: u64,
    /// SIGKILL of the leader → the resource accepted the next leader's first write.
    pub failover_ms: f64,
    pub old_token: u64,
    pub new_token: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ElectionReport {
    pub command: String,
    pub machine: Machine,
    pub ttl_ms: u64,
    pub rounds: usize,
    pub rows: Vec<RoundRow>,
    /// Rounds that failed, with why.
    pub failures: Vec<String>,
}

/// A system's servers and the spec its candidates are given.
struct Contender {
    kind: SystemKind,
    spec: SystemSpec,
    // Held so the servers live as long as the contender; killed by PID on drop.
    _servers: RoundCluster,
}

impl Contender {
    async fn start(kind: SystemKind, options: &ElectionOptions) -> Result<Contender, ElectionError> {
        let dir = options.out.join("servers").join(kind.to_string());
        let servers = RoundCluster::start::<ElectionError>(kind, &options.binary, &dir).await?;
        let spec = match &servers {
            RoundCluster::Leasehold(cluster) => SystemSpec::Leasehold(cluster.endpoints()),
            RoundCluster::Etcd(etcd) => SystemSpec::Etcd(etcd.leader_url().await?),
        };
        Ok(Contender { kind, spec, _servers: servers })
    }
}

/// A running candidate process, killed by PID on drop.
struct Candidate {
    name: String,
    child: tokio::process::Child,
    events: mpsc::UnboundedReceiver<CandidateEvent>,
}

impl Candidate {
    fn spawn(
        options: &ElectionOptions,
        spec: &SystemSpec,
        election: &str,
        name: &str,
        fenced: &str,
    ) -> Result<Self, ElectionError> {
        let failed = |e: std::io::Error| ElectionError::Candidate { candidate: name.into(), what: e.to_string() };
        let mut child = tokio::process::Command::new(&options.candidate_binary)
            .arg("election-candidate")
            .args(["--system", &spec.to_string(), "--election", election, "--candidate", name])
            .args(["--ttl-ms", &options.ttl.as_millis().to_string(), "--fenced", fenced])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(failed)?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (events, received) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(event) = serde_json::from_str(&line) {
                    let _ = events.send(event);
                }
            }
        });
        Ok(Candidate { name: name.into(), child, events: received })
    }

    /// Waits for the election; its token and lease.
    async fn elected(&mut self, bound: Duration) -> Result<(u64, u64), ElectionError> {
        let failed = |what: String| ElectionError::Candidate { candidate: self.name.clone(), what };
        match tokio::time::timeout(bound, self.events.recv()).await {
            Ok(Some(CandidateEvent::Elected { token, ttl_ms })) => Ok((token, ttl_ms)),
            Ok(Some(CandidateEvent::Failed { what })) => Err(failed(what)),
            Ok(None) => Err(failed("exited before it was elected".into())),
            Err(_) => Err(ElectionError::Timeout("an election", bound)),
        }
    }

    /// kill -9, as a crash: the process gets no chance to resign.
    async fn crash(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
        let _ = self.child.wait().await;
    }
}

/// The first accepted write of `client` to `resource` received at or after
/// `since_us`, polled until `bound` has passed.
async fn first_write(
    resource: &FencedResource,
    election: &str,
    client: &str,
    since_us: u64,
    bound: Duration,
) -> Result<u64, ElectionError> {
    let poll = async {
        loop {
            let found = resource.writes().into_iter().find(|w| {
                w.accepted && w.request.resource == election && w.request.client == client && w.received_us >= since_us
            });
            if let Some(write) = found {
                return write.received_us;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(bound, poll).await.map_err(|_| ElectionError::Timeout("a fenced write", bound))
}

/// One round on one system.
async fn round(
    options: &ElectionOptions,
    contender: &Contender,
    resource: &FencedResource,
    clock: HarnessClock,
    n: usize,
) -> Result<RoundRow, ElectionError> {
    let election = format!("bench/election/{}/{n}", contender.kind);
    let bound = servers::START_BOUND + options.ttl * 4;
    let fenced = resource.url();
    let mut a = Candidate::spawn(options, &contender.spec, &election, "a", &fenced)?;
    let (old_token, ttl_ms) = a.elected(bound).await?;
    let mut b = Candidate::spawn(options, &contender.spec, &election, "b", &fenced)?;
    first_write(resource, &election, "a", 0, bound).await?;
    // No event says b's campaign reached the service; give it that long
    // before the crash so the round measures the hand-over, not b's start.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed_us = clock.now_us();
    a.crash().await;
    let written_us = first_write(resource, &election, "b", killed_us, bound).await?;
    let (new_token, _) = b.elected(Duration::from_secs(1)).await?;
    b.crash().await;
    Ok(RoundRow {
        system: contender.kind.to_string(),
        round: n,
        ttl_ms,
        failover_ms: written_us.saturating_sub(killed_us) as f64 / 1000.0,
        old_token,
        new_token,
    })
}

/// Starts every system's servers, runs the rounds (systems alternating in
/// each), writes the results into `options.out`.
pub async fn run(options: &ElectionOptions) -> Result<ElectionReport, ElectionError> {
    std::fs::create_dir_all(&options.out)?;
    let clock = HarnessClock::new();
    let resource = FencedResource::start(([127, 0, 0, 1], 0).into(), ResourceMode::Fenced, clock).await?;
    let mut report = ElectionReport {
        command: options.command.clone(),
        machine: Machine::probe(),
        ttl_ms: options.ttl.as_millis() as u64,
        rounds: options.rounds,
        rows: Vec::new(),
        failures: Vec::new(),
    };
    let mut contenders = Vec::new();
    for &kind in &options.systems {
        eprintln!("bench: election, starting {kind} ...");
        match Contender::start(kind, options).await {
            Ok(contender) => contenders.push(contender),
            Err(e) => report.failures.push(format!("{kind}: not started: {e}")),
        }
    }
    for n in 1..=options.rounds {
        for contender in &contenders {
            match round(options, contender, &resource, clock, n).await {
                Ok(row) => {
                    eprintln!(
                        "bench:   election round {n}, {}: {:.0} ms (ttl {} ms, token {} → {})",
                        row.system, row.failover_ms, row.ttl_ms, row.old_token, row.new_token
                    );
                    report.rows.push(row);
                }
                Err(e) => report.failures.push(format!("{} round {n}: {e}", contender.kind)),
            }
        }
    }
    drop(contenders);
    rounds::clean_up(&options.out, &mut report.machine)?;
    rounds::write_report(&options.out, "election", &report, report.plot(), report.markdown())?;
    Ok(report)
}

impl SystemRound for RoundRow {
    fn system(&self) -> &str {
        &self.system
    }

    fn round(&self) -> usize {
        self.round
    }
}

impl ElectionReport {
    pub fn markdown(&self) -> String {
        let title = "leasehold bench, election: leader crash → next leader's first fenced write";
        let mut out = rounds::preamble(title, &self.command, &self.machine);
        out.push_str(&format!(
            "Each round, per system: candidate `a` is elected, `b` campaigns and waits, `a` writes to a \
             fenced resource under its token every 10 ms; `a`'s process is killed -9 and the time runs \
             until the resource accepts `b`'s first write. Requested ttl {} ms for both (etcd grants whole \
             seconds). Fences: leasehold's election token; etcd's leader key create revision. A failover can \
             come in under the ttl: the dead leader's lease runs from its last renewal (every ttl/3), which \
             came before the crash.\n\n\
             ## Summary (ms)\n\n| system | ttl ms | rounds | median | max | min | median − ttl |\n|---|---:|---:|---:|---:|---:|---:|\n",
            self.ttl_ms
        ));
        for system in rounds::systems(&self.rows) {
            let s = RoundStats::of(rounds::of(&self.rows, &system).map(|r| r.failover_ms).collect());
            let ttl = rounds::of(&self.rows, &system).map(|r| r.ttl_ms).max().unwrap_or(0);
            out.push_str(&format!(
                "| {system} | {ttl} | {} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
                s.rounds,
                s.median,
                s.max,
                s.min,
                s.median - ttl as f64
            ));
        }
        out.push_str("\n![failover time per round](election.svg)\n\n## Every round\n\n");
        out.push_str(
            "| system | round | ttl ms | failover ms | old token | new token |\n|---|---:|---:|---:|---:|---:|\n",
        );
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {:.1} | {} | {} |\n",
                r.system, r.round, r.ttl_ms, r.failover_ms, r.old_token, r.new_token
            ));
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
        // The floor both systems share: the dead leader's lease must run out.
        let floor = Some(("ttl", self.ttl_ms as f64));
        let title = "leader crash → next leader's first fenced write";
        per_round_chart(title, self.rounds, &self.rows, |r| r.failover_ms, floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(system: &str, round: usize, failover_ms: f64) -> RoundRow {
        RoundRow { system: system.into(), round, ttl_ms: 3000, failover_ms, old_token: 1, new_token: 2 }
    }

    // The summary is the median and the max over rounds per system, beside
    // the ttl, and the plot has a line per system and the ttl's.
    #[test]
    fn summary_has_median_and_max_per_system() {
        let report = ElectionReport {
            command: "leasehold-lab bench --workloads election".into(),
            machine: Machine::probe(),
            ttl_ms: 3000,
            rounds: 3,
            rows: vec![
                row("leasehold-3", 1, 2800.0),
                row("etcd", 1, 2600.0),
                row("leasehold-3", 2, 3100.0),
                row("etcd", 2, 2700.0),
                row("leasehold-3", 3, 2900.0),
                row("etcd", 3, 2500.0),
            ],
            failures: Vec::new(),
        };
        let markdown = report.markdown();
        assert!(markdown.contains("| leasehold-3 | 3000 | 3 | 2900 | 3100 | 2800 | -100 |"), "{markdown}");
        assert!(markdown.contains("| etcd | 3000 | 3 | 2600 | 2700 | 2500 | -400 |"), "{markdown}");
        let svg = report.plot();
        assert_eq!(svg.matches("<polyline").count(), 3, "{svg}");
    }
}
