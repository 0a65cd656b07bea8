//! Unit tests of shared (read) mode: shared holders coexist, an exclusive
//! holder excludes them, the one FIFO queue starves no writer, and every
//! grant's token is above every earlier grant's of the lock.

use super::*;

impl Log {
    fn shared(&mut self, name: &str, owner: &str, wait_ms: Option<u64>) -> Result<Outcome, LockError> {
        self.apply(Command::AcquireShared {
            name: name.into(),
            owner: owner.into(),
            ttl_ms: Some(3000),
            session: None,
            wait_ms,
            request_id: None,
            seq: None,
        })
    }
    fn shared_token(&mut self, name: &str, owner: &str) -> FencingToken {
        match self.shared(name, owner, None) {
            Ok(Outcome::Granted { grant, .. }) => grant.token,
            other => panic!("expected a shared grant, got {other:?}"),
        }
    }
    fn release_shared(&mut self, name: &str, owner: &str, token: FencingToken) -> Result<Outcome, LockError> {
        self.apply(Command::ReleaseShared { name: name.into(), owner: owner.into(), token, request_id: None })
    }
    fn wait_exclusive(&mut self, name: &str, owner: &str) -> Result<Outcome, LockError> {
        self.apply(Command::Acquire {
            name: name.into(),
            owner: owner.into(),
            ttl_ms: Some(3000),
            session: None,
            wait_ms: Some(60_000),
            request_id: None,
            lock_delay_ms: None,
            seq: None,
        })
    }
}

fn owners(grants: &[Grant]) -> Vec<&str> {
    grants.iter().map(|g| g.owner.as_str()).collect()
}

// Ensures shared holders coexist, each with the token of its own granting
// entry, and that an exclusive acquire is refused while they hold.
#[test]
fn shared_holders_coexist_and_exclude_an_exclusive_acquire() {
    let mut log = Log::new();
    let r1 = log.shared_token("a", "r1");
    let r2 = log.shared_token("a", "r2");
    assert!(r2 > r1);
    assert_eq!(owners(&log.table.shared_holders("a")), ["r1", "r2"]);
    assert_eq!(log.acquire("a", "w", 3000), Err(LockError::HeldShared { name: "a".into(), holders: 2, token: r2 }));
    assert_eq!(log.table.current_token("a"), None, "fenced writes admit exclusive holders only");
    assert!(log.table.get("a").is_none());
}

// Ensures an exclusive holder excludes shared acquires, which may wait.
#[test]
fn an_exclusive_holder_excludes_shared_acquires() {
    let mut log = Log::new();
    let w = log.token("a", "w", 3000);
    assert!(matches!(log.shared("a", "r", None), Err(LockError::HeldByOther { token, .. }) if token == w));
    assert!(matches!(log.shared("a", "r", Some(10_000)), Ok(Outcome::Queued { position: 1, .. })));
    log.release("a", w).unwrap();
    let granted = log.table.shared_holders("a");
    assert_eq!((owners(&granted), granted[0].token), (vec!["r"], t(log.index)));
}

// Ensures no writer starves: a waiting exclusive acquire blocks every later
// shared acquire; when the readers leave the writer is granted, and when it
// leaves the readers that queued behind it are granted together, in one
// entry, above the writer's token.
#[test]
fn a_waiting_writer_is_not_overtaken_by_later_readers() {
    let mut log = Log::new();
    let r1 = log.shared_token("a", "r1");
    assert!(matches!(log.wait_exclusive("a", "w"), Ok(Outcome::Queued { position: 1, .. })));
    assert!(
        matches!(log.shared("a", "r2", None), Err(LockError::Reserved { first_waiter, .. }) if first_waiter == "w")
    );
    assert!(matches!(log.shared("a", "r2", Some(10_000)), Ok(Outcome::Queued { position: 2, .. })));
    assert!(matches!(log.shared("a", "r3", Some(10_000)), Ok(Outcome::Queued { position: 3, .. })));
    let applied = log.apply_with_events(Command::ReleaseShared {
        name: "a".into(),
        owner: "r1".into(),
        token: r1,
        request_id: None,
    });
    applied.result.unwrap();
    let w = log.table.current_token("a").expect("the writer was handed the lock");
    assert_eq!((log.table.holder("a").unwrap().owner.as_str(), w), ("w", t(log.index)));
    assert!(log.table.shared_holders("a").is_empty());
    log.release("a", w).unwrap();
    let readers = log.table.shared_holders("a");
    assert_eq!(owners(&readers), ["r2", "r3"]);
    assert!(readers.iter().all(|g| g.token == t(log.index) && g.token > w));
}

// Ensures the shared waiters at the front are granted up to the first
// exclusive waiter only, and that a writer leaving the queue lets the
// readers behind it join the shared holders at once.
#[test]
fn readers_are_granted_up_to_the_next_writer() {
    let mut log = Log::new();
    let w1 = log.token("a", "w1", 3000);
    log.shared("a", "r1", Some(10_000)).unwrap();
    log.wait_exclusive("a", "w2").unwrap();
    log.shared("a", "r2", Some(10_000)).unwrap();
    log.release("a", w1).unwrap();
    assert_eq!(owners(&log.table.shared_holders("a")), ["r1"]);
    assert_eq!(
        log.apply(Command::Cancel { name: "a".into(), owner: "w2".into() }).unwrap(),
        Outcome::Cancelled { name: "a".into(), owner: "w2".into(), removed: true }
    );
    assert_eq!(owners(&log.table.shared_holders("a")), ["r1", "r2"]);
}

// Ensures each shared lease expires on its own deadline tick, never
// earlier, and the last one to go hands the lock to the waiting writer.
#[test]
fn shared_leases_expire_on_their_own_deadlines() {
    let mut log = Log::new();
    let r1 = log.shared_token("a", "r1");
    log.tick();
    let r2 = log.shared_token("a", "r2");
    log.wait_exclusive("a", "w").unwrap();
    assert!(log.ticks(29).is_empty(), "expired before the deadline");
    assert_eq!(log.tick(), vec![("a".to_string(), r1)]);
    assert!(log.table.holder("a").is_none(), "r2 still holds");
    assert_eq!(log.tick(), vec![("a".to_string(), r2)]);
    assert_eq!(log.table.holder("a").unwrap().owner, "w");
}

// Ensures a shared re-acquire keeps the token and restarts the lease, that
// renew and release name the owner and its token, and that wrong ones fail
// clearly and change nothing.
#[test]
fn shared_leases_are_renewed_and_released_by_owner_and_token() {
    let mut log = Log::new();
    let r = log.shared_token("a", "r");
    log.ticks(10);
    assert!(matches!(log.shared("a", "r", None), Ok(Outcome::Granted { reacquired: true, grant }) if grant.token == r));
    let before = log.table.clone();
    assert_eq!(log.release_shared("a", "x", r), Err(LockError::NotHeld { name: "a".into() }));
    assert!(matches!(log.release_shared("a", "r", t(r.get() + 1)), Err(LockError::StaleToken { .. })));
    assert_eq!(log.table, before);
    let renew =
        Command::RenewShared { name: "a".into(), owner: "r".into(), token: r, ttl_ms: Some(5000), request_id: None };
    assert!(matches!(log.apply(renew), Ok(Outcome::Renewed { grant }) if grant.token == r && grant.ttl_ms == 5000));
    log.release_shared("a", "r", r).unwrap();
    assert!(log.table.shared_holders("a").is_empty());
}

// Ensures modes are not switched in place: an exclusive holder asking for
// shared mode is invalid, and a shared holder waiting for exclusive mode
// would wait for itself: refused as a deadlock.
#[test]
fn no_upgrade_or_downgrade_in_place() {
    let mut log = Log::new();
    log.token("a", "x", 3000);
    assert!(matches!(log.shared("a", "x", Some(1000)), Err(LockError::Invalid(e)) if e.field == "mode"));
    log.shared_token("b", "y");
    assert!(matches!(log.acquire("b", "y", 3000), Err(LockError::HeldShared { .. })));
    assert_eq!(log.wait_exclusive("b", "y"), Err(LockError::Deadlock { cycle: vec!["y".into()] }));
}

// Ensures, over random shared and exclusive acquires, releases, cancels and
// ticks on one lock: an exclusive holder and shared holders never coexist,
// every grant's token is the index of its entry and above every grant of an
// earlier entry, and a shared acquire never overtakes a waiting writer.
#[test]
fn random_runs_keep_exclusion_and_token_order() {
    let mut log = Log::new();
    let mut seed = 0x5eed_u64;
    let mut below = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut highest = t(0);
    for _ in 0..5000 {
        let owner = format!("o{}", below(6));
        let command = match below(7) {
            0 | 1 => Command::AcquireShared {
                name: "a".into(),
                owner: owner.clone(),
                ttl_ms: Some(3000),
                session: None,
                wait_ms: Some(below(2) * 2000),
                request_id: None,
                seq: None,
            },
            2 => Command::Acquire {
                name: "a".into(),
                owner: owner.clone(),
                ttl_ms: Some(3000),
                session: None,
                wait_ms: Some(below(2) * 2000),
                request_id: None,
                lock_delay_ms: None,
                seq: None,
            },
            3 => match log.table.shared_holder("a", &owner) {
                Some(g) => Command::ReleaseShared { name: "a".into(), owner, token: g.token, request_id: None },
                None => Command::Release {
                    name: "a".into(),
                    token: log.table.current_token("a").unwrap_or(t(1)),
                    request_id: None,
                    session: None,
                    seq: None,
                },
            },
            4 => Command::Cancel { name: "a".into(), owner },
            _ => Command::Tick { period_ms: TICK },
        };
        let writer_waits = log.table.queues.get("a").is_some_and(|q| q.iter().any(|w| !w.shared));
        let applied = log.apply_with_events(command.clone());
        if writer_waits && matches!(command, Command::AcquireShared { .. }) {
            assert!(!matches!(applied.result, Ok(Outcome::Granted { reacquired: false, .. })), "overtook a writer");
        }
        for e in &applied.events {
            if let EventKind::Acquired { token, .. } | EventKind::HandedOver { token, .. } = &e.kind {
                assert_eq!(*token, t(log.index));
                assert!(*token >= highest, "token order: {token} after {highest}");
                highest = *token;
            }
        }
        assert!(
            log.table.holder("a").is_none() || log.table.shared_holders("a").is_empty(),
            "exclusive and shared holders at once after {command}"
        );
    }
    assert!(highest > t(1000), "the run granted many times ({highest})");
}

// Ensures the readers waiting behind a lease that expires into a lock
// delay are granted together by the Tick that ends the delay, not before.
#[test]
fn readers_wait_out_a_lock_delay_and_are_granted_together() {
    let mut log = Log::new();
    log.apply(Command::Acquire {
        name: "a".into(),
        owner: "w".into(),
        ttl_ms: Some(3000),
        session: None,
        wait_ms: None,
        request_id: None,
        lock_delay_ms: Some(1000),
        seq: None,
    })
    .unwrap();
    log.shared("a", "r1", Some(60_000)).unwrap();
    log.shared("a", "r2", Some(60_000)).unwrap();
    log.ticks(31);
    let delayed_until = log.table.delayed_until("a").expect("the expiry started a delay");
    assert!(log.table.shared_holders("a").is_empty(), "granted during the delay");
    while log.table.now_tick() < delayed_until - 1 {
        log.tick();
        assert!(log.table.shared_holders("a").is_empty(), "granted during the delay");
    }
    log.tick();
    let readers = log.table.shared_holders("a");
    assert_eq!(owners(&readers), ["r1", "r2"]);
    assert!(readers.iter().all(|g| g.token == t(log.index)));
}

// Ensures the readers waiting behind a lock held under a session are
// granted together in the Tick that expires the session.
#[test]
fn readers_behind_a_session_lock_are_granted_when_it_expires() {
    let mut log = Log::new();
    let session =
        match log.apply(Command::CreateSession { owner: "s".into(), ttl_ms: 3000, request_id: None, by: None }) {
            Ok(Outcome::SessionCreated { session }) => session.session,
            other => panic!("{other:?}"),
        };
    log.apply(Command::Acquire {
        name: "a".into(),
        owner: "s".into(),
        ttl_ms: None,
        session: Some(session),
        wait_ms: None,
        request_id: None,
        lock_delay_ms: None,
        seq: None,
    })
    .unwrap();
    log.shared("a", "r1", Some(60_000)).unwrap();
    log.shared("a", "r2", Some(60_000)).unwrap();
    assert!(log.ticks(30).is_empty());
    assert_eq!(log.tick().len(), 1, "the session's lock expired");
    assert_eq!(owners(&log.table.shared_holders("a")), ["r1", "r2"]);
}
