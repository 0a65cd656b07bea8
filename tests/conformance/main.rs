//! The conformance suite: every client of leasehold held to one behaviour.
//!
//! One real 3-node cluster, a fault-injecting proxy in front of each node
//! (`proxy.rs`), and, for each language whose driver exists under
//! `clients/conformance/drivers/<language>`, every scenario of
//! `clients/conformance/scenarios.json` (interpreted by `scenarios.rs`) run
//! through that driver (`driver.rs`, speaking
//! `clients/conformance/PROTOCOL.md`).
//! Each scenario gets a fresh driver process, bounded in time and killed by
//! its PID afterwards. The languages run a scenario all at once (each on
//! locks of its own, with faults on its own paths), except the scenarios
//! that act on the whole cluster (a leader kill, every node hung), which
//! they run one after another. The test prints one table, scenario ×
//! language, and fails if any cell failed.
//!
//! `LEASEHOLD_CONFORMANCE_DRIVERS=rust,python` runs only those languages;
//! `LEASEHOLD_CONFORMANCE_SCENARIOS=fifo_waiting,...` only those scenarios.
//! The drivers must be built first, so a plain `cargo test` leaves the suite
//! out (`#[ignore]`): `clients/conformance/run-tests.sh` builds them and runs it.

#[path = "../common/mod.rs"]
mod common;

mod driver;
mod proxy;
mod scenarios;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{start_cluster, TestCluster, ELECTION_BOUND};
use driver::Driver;
use futures_util::future::join_all;
use leasehold_client::Client;
use proxy::Proxies;
use scenarios::Scenario;

/// Upper bound on one scenario, driver start included.
const SCENARIO_BOUND: Duration = Duration::from_secs(60);

/// The cluster, its proxies, and a client of the harness's own that talks
/// to the nodes directly (to set the stage and check outcomes).
pub struct Harness {
    pub cluster: TestCluster,
    pub proxies: Proxies,
    pub client: Arc<Client>,
}

impl Harness {
    pub async fn leader(&self) -> u64 {
        self.cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", self.cluster.logs()))
    }
}

fn drivers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients").join("conformance").join("drivers")
}

/// The program that starts `language`'s driver: `clients/conformance/drivers/<language>`,
/// or `run` inside it when that is a folder.
fn driver_program(language: &str) -> Option<PathBuf> {
    let path = drivers_dir().join(language);
    let program = if path.is_dir() { path.join("run") } else { path };
    program.is_file().then_some(program)
}

/// The languages to run: those named in `LEASEHOLD_CONFORMANCE_DRIVERS`
/// (each must have a driver), else every driver there is.
fn languages() -> Vec<(String, PathBuf)> {
    let names: Vec<String> = match std::env::var("LEASEHOLD_CONFORMANCE_DRIVERS") {
        Ok(list) if !list.trim().is_empty() => list.split(',').map(|l| l.trim().to_string()).collect(),
        _ => {
            let entries = std::fs::read_dir(drivers_dir()).expect("clients/conformance/drivers exists");
            let mut names: Vec<String> =
                entries.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
            names.sort();
            names
        }
    };
    names
        .into_iter()
        .map(|language| {
            let program = driver_program(&language)
                .unwrap_or_else(|| panic!("no driver for {language} under {}", drivers_dir().display()));
            (language, program)
        })
        .collect()
}

fn selected_scenarios() -> Vec<Scenario> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients").join("conformance").join("scenarios.json");
    let all = scenarios::load(&path);
    match std::env::var("LEASEHOLD_CONFORMANCE_SCENARIOS") {
        Ok(list) if !list.trim().is_empty() => list
            .split(',')
            .map(|name| {
                all.iter().find(|s| s.name == name.trim()).cloned().unwrap_or_else(|| panic!("no scenario {name:?}"))
            })
            .collect(),
        _ => all,
    }
}

/// Runs `scenario` through a fresh driver of `language` (`program`), whose
/// first endpoint is `endpoints[0]`: `Ok` or why not.
async fn run_one(
    harness: &Harness,
    language: &str,
    program: &Path,
    scenario: &Scenario,
    endpoints: &[String],
    run: usize,
) -> Result<(), String> {
    let mut driver = Driver::start(program, endpoints, harness.cluster.dir.path(), run).await?;
    let prefix = format!("{language}-{}", scenario.name);
    let outcome = tokio::time::timeout(SCENARIO_BOUND, scenario.run(harness, &mut driver, &prefix))
        .await
        .unwrap_or_else(|_| Err(format!("still running after {SCENARIO_BOUND:?}")));
    harness.proxies.clear_faults(&prefix);
    let _ = nix::sys::signal::kill(driver.pid(), nix::sys::signal::Signal::SIGCONT);
    let outcome = outcome
        .map_err(|e| format!("{e}\n--- driver stderr ---\n{}{}", driver.stderr(), requests(&harness.proxies, &prefix)));
    driver.shutdown().await;
    outcome
}

/// Runs `scenario` for every language: all at once, or one after another
/// when the scenario acts on the whole cluster. Each language gets a fresh
/// driver whose first endpoint is a follower (the client has to find the
/// leader itself); after each round, killed nodes are restarted and a
/// leader awaited, so the next round starts from a whole cluster.
async fn run_scenario(
    harness: &mut Harness,
    languages: &[(String, PathBuf)],
    scenario: &Scenario,
    runs: &mut usize,
) -> Vec<Result<(), String>> {
    let rounds: Vec<&[(String, PathBuf)]> =
        if scenario.alone { languages.chunks(1).collect() } else { vec![languages] };
    let mut outcomes = Vec::new();
    for round in rounds {
        let leader = harness.leader().await;
        let endpoints = harness.proxies.endpoints_from(harness.cluster.follower_of(leader));
        let shared: &Harness = harness;
        let first_run = *runs;
        *runs += round.len();
        let started = Instant::now();
        let round_outcomes =
            join_all(round.iter().enumerate().map(|(i, (language, program))| {
                run_one(shared, language, program, scenario, &endpoints, first_run + i)
            }))
            .await;
        for ((language, _), outcome) in round.iter().zip(&round_outcomes) {
            let verdict = if outcome.is_ok() { "pass" } else { "FAIL" };
            eprintln!("=== {language} {}: {verdict} (round of {:.1?})", scenario.name, started.elapsed());
            if let Err(e) = outcome {
                eprintln!("{e}");
            }
        }
        outcomes.extend(round_outcomes);
        harness.proxies.clear_faults("");
        for id in harness.cluster.ids() {
            // Reaps a node a scenario killed, so start_all starts it again.
            harness.cluster.exited(id);
        }
        harness.cluster.start_all().expect("restart stopped nodes");
        harness.leader().await;
    }
    outcomes
}

/// The requests for locks of `prefix` the proxies saw (the last 40), for a
/// failure message.
fn requests(proxies: &Proxies, prefix: &str) -> String {
    let seen: Vec<_> = proxies.seen().into_iter().filter(|s| s.path.contains(prefix)).collect();
    let Some(start) = seen.first().map(|s| s.at) else { return String::new() };
    let mut out = "--- requests (ms since the first, node, status) ---\n".to_string();
    for s in seen.iter().rev().take(40).rev() {
        let id = s.request_id.as_deref().unwrap_or("-");
        out.push_str(&format!(
            "{:>6} n{} {} {} {:?} {id}\n",
            (s.at - start).as_millis(),
            s.node,
            s.method,
            s.path,
            s.status
        ));
    }
    out
}

// Ensures every client whose driver exists behaves as PROTOCOL.md says in
// every scenario, against a real cluster with injected faults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the drivers built: run clients/conformance/run-tests.sh"]
async fn every_client_passes_every_scenario() {
    let languages = languages();
    assert!(!languages.is_empty(), "no driver under {}", drivers_dir().display());
    let scenarios = selected_scenarios();
    let cluster = start_cluster(3).await;
    let nodes: BTreeMap<u64, String> = cluster.ids().into_iter().map(|id| (id, cluster.endpoint(id))).collect();
    let proxies = Proxies::start(&nodes).await;
    let client = Arc::new(cluster.client());
    let mut harness = Harness { cluster, proxies, client };

    let mut results: BTreeMap<(usize, String), Result<(), String>> = BTreeMap::new();
    let mut runs = 0;
    for (i, scenario) in scenarios.iter().enumerate() {
        let outcomes = run_scenario(&mut harness, &languages, scenario, &mut runs).await;
        for ((language, _), outcome) in languages.iter().zip(outcomes) {
            results.insert((i, language.clone()), outcome);
        }
    }

    println!("{}", table(&scenarios, &languages, &results));
    let failed: Vec<String> = results
        .iter()
        .filter(|(_, outcome)| outcome.is_err())
        .map(|((i, language), _)| format!("{language}/{}", scenarios[*i].name))
        .collect();
    assert!(failed.is_empty(), "failed: {}\n{}", failed.join(", "), harness.cluster.logs());
}

/// Scenario × language, pass or FAIL.
fn table(
    scenarios: &[Scenario],
    languages: &[(String, PathBuf)],
    results: &BTreeMap<(usize, String), Result<(), String>>,
) -> String {
    let width = scenarios.iter().map(|s| s.name.len()).max().unwrap_or(8).max(8);
    let mut out = format!("{:width$}", "scenario");
    for (language, _) in languages {
        out.push_str(&format!(" | {language:>10}"));
    }
    out.push('\n');
    for (i, scenario) in scenarios.iter().enumerate() {
        out.push_str(&format!("{:width$}", scenario.name));
        for (language, _) in languages {
            let cell = match results.get(&(i, language.clone())) {
                Some(Ok(())) => "pass",
                Some(Err(_)) => "FAIL",
                None => "-",
            };
            out.push_str(&format!(" | {cell:>10}"));
        }
        out.push('\n');
    }
    out.push_str(&format!("{} scenarios × {} languages\n", scenarios.len(), languages.len()));
    out
}
