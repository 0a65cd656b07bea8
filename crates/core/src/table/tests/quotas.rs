//! Unit tests of the quotas an entry carries: what a full table refuses,
//! and everything it keeps doing so that it empties again by itself.

use super::*;

/// A log whose entries carry these limits.
fn log_within(max_leases: u64, max_waiters: u64) -> Log {
    let mut log = Log::new();
    log.quotas = Quotas { max_leases, max_waiters };
    log
}

fn full(what: &str, limit: usize) -> LockError {
    LockError::Full { what: what.into(), limit }
}

// Ensures a new grant past max_leases is refused, naming the quota and
// changing nothing, while renew, release, a re-acquire by the holder, a
// replayed request id and expiry still apply; room made by a release or an
// expiry is granted again.
#[test]
fn a_full_table_refuses_new_grants_only() {
    let mut log = log_within(2, 10);
    let a = log.token("a", "x", 3000);
    let replayed = Command::Acquire {
        name: "b".into(),
        owner: "y".into(),
        ttl_ms: Some(3000),
        session: None,
        wait_ms: None,
        request_id: Some("r".into()),
        lock_delay_ms: None,
        seq: None,
    };
    let b = log.apply(replayed.clone()).unwrap();
    let before = log.table.clone();
    assert_eq!(log.acquire("c", "z", 3000), Err(full("leases", 2)));
    assert_eq!(log.table, before, "a refusal changes nothing");

    assert_eq!(log.apply(replayed).unwrap(), b, "a retry is answered as before");
    assert!(matches!(log.acquire("a", "x", 6000), Ok(Outcome::Granted { reacquired: true, .. })));
    assert!(log.renew("a", a, None).is_ok());
    assert!(log.release("a", a).is_ok());
    log.token("c", "z", 3000);
    assert_eq!(log.acquire("d", "z", 3000), Err(full("leases", 2)));

    // b and c were granted on the same tick, with the same ttl: they expire
    // on the same Tick, and the table empties by itself.
    let expired = log.ticks(32);
    assert_eq!(expired.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["b", "c"]);
    assert!(log.table.is_empty());
    log.token("d", "z", 3000);
}

// Ensures a multi-acquire counts every lock it would be granted: refused
// whole when they do not all fit, granted when they do, and re-acquired by
// its holder when the table is full.
#[test]
fn a_multi_acquire_needs_room_for_all_its_locks() {
    let mut log = log_within(4, 10);
    log.token("a", "x", 3000);
    log.token("b", "x", 3000);
    let refused = log.acquire_many(&["c", "d", "e"], "y", None, None);
    assert_eq!(refused.result, Err(full("leases", 4)));
    assert!(refused.events.is_empty());
    assert_eq!(log.table.len(), 2);
    let token = log.many_token(&["c", "d"], "y");
    match log.acquire_many(&["c", "d"], "y", None, None).result {
        Ok(Outcome::GrantedMany { grants, reacquired: true }) => assert!(grants.iter().all(|g| g.token == token)),
        other => panic!("{other:?}"),
    }
    assert!(log.release_many(&["c", "d"], token).result.is_ok());
    assert_eq!(log.table.len(), 2);
}

// Ensures a new place in a queue past max_waiters is refused, a multi-acquire
// counting a place in each of its queues, while a queued owner's retry keeps
// its place and a cancel or a hand-over makes room again.
#[test]
fn a_full_set_of_queues_refuses_new_waits_only() {
    let mut log = log_within(10, 2);
    let a = log.token("a", "x", 60_000);
    log.token("b", "x", 60_000);
    assert!(matches!(log.wait("a", "w1", 60_000, None).result, Ok(Outcome::Queued { position: 1, .. })));
    let refused = log.acquire_many(&["a", "b"], "m", Some(60_000), None);
    assert_eq!((refused.result, log.table.waiting()), (Err(full("waiters", 2)), 1), "two places do not fit");
    assert!(matches!(log.wait("b", "w2", 60_000, None).result, Ok(Outcome::Queued { .. })));
    assert_eq!(log.wait("a", "w3", 60_000, None).result, Err(full("waiters", 2)));
    let retry = log.wait("a", "w1", 60_000, None).result;
    assert!(matches!(retry, Ok(Outcome::Queued { position: 1, .. })), "a queued owner keeps its place: {retry:?}");

    log.cancel("a", "w1");
    assert!(matches!(log.wait("a", "w3", 60_000, None).result, Ok(Outcome::Queued { position: 1, .. })));
    assert_eq!(log.wait("a", "w4", 60_000, None).result, Err(full("waiters", 2)));
    log.release("a", a).unwrap();
    assert_eq!(log.holder("a"), Some(("w3".into(), t(log.index))), "handed to its first waiter");
    assert!(matches!(log.wait("a", "w4", 60_000, None).result, Ok(Outcome::Queued { position: 1, .. })));
}

// Ensures a waiter admitted to a queue is granted the lock when its turn
// comes even if the table holds max_leases by then (here when a lock delay
// ends): it was counted when it joined the queue. New grants stay refused.
#[test]
fn an_admitted_waiter_is_granted_even_past_max_leases() {
    let mut log = log_within(2, 10);
    log.delayed_token("a", "x", 1000);
    assert!(matches!(log.wait("a", "y", 60_000, None).result, Ok(Outcome::Queued { .. })));
    log.ticks(32);
    assert!(log.table.delayed_until("a").is_some() && log.table.is_empty(), "a expired into its lock delay");
    log.token("b", "z", 60_000);
    log.token("c", "z", 60_000);
    log.ticks(10);
    assert_eq!(log.holder("a").map(|(owner, _)| owner), Some("y".into()), "granted when the delay ended");
    assert_eq!(log.table.len(), 3);
    assert_eq!(log.acquire("d", "z", 3000), Err(full("leases", 2)));
}
