//! The model check: the lease protocol explored exhaustively within small
//! bounds, and each mutation of its tick rule caught.

use std::time::Instant;

use leasehold_model::{
    representative, Action, LeaseProtocol, Mutation, A_LEASE_EXPIRES, A_LEASE_IS_RENEWED, A_TICK_HANDS_OVER,
    COMMITTED_STAYS, NO_EARLY_EXPIRY, NO_EARLY_EXPIRY_AFTER_COMMIT, TOKENS_INCREASE,
};
use stateright::{Checker, HasDiscoveries, Model};

/// Every state within the bounds, nodes and clients up to renaming (depth
/// first: Stateright applies symmetry there).
fn explore_all(model: LeaseProtocol) -> impl Checker<LeaseProtocol> {
    let started = Instant::now();
    let checker = model.checker().threads(2).symmetry_fn(representative).spawn_dfs().join();
    eprintln!(
        "{} states, {} unique, in {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        started.elapsed()
    );
    assert!(checker.is_done(), "the model check stopped before it explored every state");
    checker
}

/// The shortest path (breadth first) to a state that breaks `property`, printed.
fn counterexample(model: LeaseProtocol, property: &'static str) -> Vec<Action> {
    let started = Instant::now();
    let checker = model.checker().threads(2).finish_when(HasDiscoveries::AnyOf([property].into())).spawn_bfs().join();
    let path = checker.discovery(property).unwrap_or_else(|| panic!("no counterexample to \"{property}\""));
    let actions: Vec<Action> = path.into_actions();
    eprintln!("counterexample to \"{property}\", found in {:.1?}:", started.elapsed());
    for action in &actions {
        eprintln!("  {action}");
    }
    actions
}

fn assert_safe(checker: &impl Checker<LeaseProtocol>) {
    for property in [NO_EARLY_EXPIRY, TOKENS_INCREASE, COMMITTED_STAYS] {
        checker.assert_no_discovery(property);
    }
}

// Ensures two clients competing for the lock, under every order of
// elections, replication, acknowledgements, Ticks and requests, never see a
// lease expire early or a token go backwards, and that expiry and hand-over
// to the waiter are reached (the properties are not vacuous).
#[test]
fn competing_clients_never_see_early_expiry_or_a_token_go_back() {
    let checker = explore_all(LeaseProtocol::small());
    assert_safe(&checker);
    checker.assert_any_discovery(A_LEASE_EXPIRES);
    checker.assert_any_discovery(A_TICK_HANDS_OVER);
}

// Ensures a renewal re-anchors the lease safely: a client that acquires and
// renews never sees its lease expire within ttl of the renew's send time.
#[test]
fn a_renewing_client_never_sees_early_expiry() {
    let checker = explore_all(LeaseProtocol { requests: [2, 0], ..LeaseProtocol::small() });
    assert_safe(&checker);
    checker.assert_any_discovery(A_LEASE_IS_RENEWED);
    checker.assert_any_discovery(A_LEASE_EXPIRES);
}

// Ensures the guarantee is the client contract, counted from the request's
// send time, and not from the grant's commit: a grant appended just before
// its leader is re-elected commits only with the new term's entries, which
// can include the Tick that ends it, since the deadline is counted in Ticks
// from the grant's place in the log.
#[test]
fn expiry_is_counted_from_the_request_not_from_the_commit() {
    let model = LeaseProtocol { requests: [1, 0], ..LeaseProtocol::small() };
    let actions = counterexample(model, NO_EARLY_EXPIRY_AFTER_COMMIT);
    assert!(actions.iter().filter(|a| matches!(a, Action::Campaign { .. })).count() >= 2);
}

// Ensures the checker catches tokio's default `MissedTickBehavior::Burst`:
// after a stalled Tick, catch-up Ticks expire a lease granted in the stall.
#[test]
fn burst_catch_up_ticks_are_caught() {
    let model = LeaseProtocol { max_log: 4, requests: [1, 0], ..LeaseProtocol::small() };
    counterexample(model.with(Mutation::BurstCatchUpTicks), NO_EARLY_EXPIRY);
}

// Ensures the checker catches a new leader that ticks at once: the old
// leader's Tick and the new leader's first Tick come less than a period apart.
#[test]
fn a_new_leader_ticking_at_once_is_caught() {
    counterexample(LeaseProtocol::small().with(Mutation::NewLeaderTicksAtOnce), NO_EARLY_EXPIRY);
}

// Ensures the checker catches deadlines without the +1 for the period in
// progress at the grant.
#[test]
fn a_deadline_without_the_partial_tick_is_caught() {
    counterexample(LeaseProtocol::small().with(Mutation::DeadlineWithoutPartialTick), NO_EARLY_EXPIRY);
}

// Ensures the token property is not vacuous: with votes that ignore Raft's
// up-to-date check, a new leader replaces a committed grant and hands out a
// token no greater than one a client already holds.
#[test]
fn votes_that_ignore_the_log_are_caught() {
    let model = LeaseProtocol { max_time: 2, ..LeaseProtocol::small() };
    counterexample(model.with(Mutation::VoteIgnoresLog), TOKENS_INCREASE);
}
