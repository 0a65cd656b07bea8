//! The CI-bounded fault suite: one round of every fault against a 3-node
//! cluster under load (nodes in network namespaces when the machine allows),
//! judged by the history checker.

use std::time::Duration;

use leasehold_lab::chaos::{self, ChaosOptions};
use leasehold_lab::fault::FaultKind;
use leasehold_lab::history::{check_linearizable, OpKind, OpResult, Operation, Verdict, DEFAULT_BUDGET};

/// Upper bound on the whole run (one round is a few minutes on a loaded machine).
const RUN_BOUND: Duration = Duration::from_secs(900);

// Every fault is injected once, grants resume after each, and the checkers
// find no violation in the history or at the fenced resource: the rules
// none, and the linearizability check a linearizable history, which one
// changed answer makes not linearizable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_round_of_every_fault_has_no_violations() {
    let _alone = crate::exclusive().await;
    let out = tempfile::tempdir().expect("temp dir");
    let options = ChaosOptions {
        nodes: 3,
        duration: Duration::ZERO,
        faults: FaultKind::ALL.to_vec(),
        clients: 6,
        hold: Duration::from_secs(3),
        quiet: Duration::from_secs(3),
        network: true,
        binary: std::path::Path::new(env!("CARGO_BIN_EXE_leasehold")).to_owned(),
        out: out.path().to_owned(),
    };
    let report = tokio::time::timeout(RUN_BOUND, chaos::run(&options))
        .await
        .expect("the fault suite exceeded its time bound")
        .expect("the fault suite runs");
    eprintln!("{}", report.markdown());
    let namespaces = report.hosts.starts_with("network namespaces");
    if nix::unistd::geteuid().is_root() {
        assert!(namespaces, "root, yet the nodes ran on {}", report.hosts);
    }
    assert_eq!(report.violations(), 0, "{:?}", report.violation_examples);
    for fault in &report.faults {
        let r = &fault.record;
        if namespaces || !r.kind.needs_network() {
            assert!(r.injected, "{:?} not injected: {}", r.kind, r.note);
            assert!(fault.granted_after_heal, "no grant after {:?} was healed", r.kind);
        }
        if r.kind == FaultKind::PausedClient {
            assert!(r.note.contains("late writes refused/refused"), "paused client: {}", r.note);
        }
    }
    assert_eq!(report.faults.len(), FaultKind::ALL.len());
    // The sharing side's checks judged something: its clients got grants.
    let sharing = report.sharing.as_ref().expect("the sharing side ran");
    assert!(sharing.grants > 0, "no semaphore or read/write grant: {sharing:?}");
    for file in ["chaos.md", "chaos.json", "timeline.svg", "history.json"] {
        assert!(out.path().join(file).exists(), "{file} written");
    }
    let linearizability = report.linearizability.as_ref().expect("the linearizability check ran");
    assert_eq!(linearizability.report.verdict, Verdict::Linearizable, "{}", linearizability.markdown());
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("history.json")).expect("history.json")).expect("json");
    let mut operations: Vec<Operation> = serde_json::from_value(saved["operations"].clone()).expect("operations");
    let read = read_of_a_fresh_grant(&operations).expect("a read of a lock its reader had just been granted");
    let mut mutated = operations.clone();
    mutated[read].result = OpResult::Free;
    assert_eq!(check_linearizable(&mutated, DEFAULT_BUDGET).verdict, Verdict::NotLinearizable);
    // A late record write under a stale token (the paused client's, an
    // abandoned session's) that the cluster had taken: a lost write.
    let stale = |op: &Operation| {
        op.kind == OpKind::PutRecord
            && matches!(&op.result, OpResult::Refused { code } if code == "stale_token")
            && operations.iter().any(|grant| {
                grant.locks().any(|l| l == op.lock)
                    && grant.received_us < op.sent_us
                    && grant.observed_token() > op.token
                    && grant.kind.is_acquire()
            })
    };
    if let Some(late) = operations.iter().position(stale) {
        operations[late].result = OpResult::Written { index: u64::MAX };
        assert_eq!(check_linearizable(&operations, DEFAULT_BUDGET).verdict, Verdict::NotLinearizable);
    }
}

/// A read that saw its own client hold the lock, answered within 2 s of the
/// send of that client's grant (ttl 3 s, no session): the lease cannot have
/// ended by then, so the read must not see the lock free.
fn read_of_a_fresh_grant(operations: &[Operation]) -> Option<usize> {
    operations.iter().position(|read| {
        let OpResult::Held { owner, token } = &read.result else { return false };
        read.kind == OpKind::Read
            && *owner == read.client
            && operations.iter().any(|grant| {
                grant.kind == OpKind::AcquireTry
                    && grant.session.is_none()
                    && grant.client == read.client
                    && grant.lock == read.lock
                    && grant.observed_token() == Some(*token)
                    && read.received_us < grant.sent_us + 2_000_000
            })
    })
}
