//! Unit tests of counting semaphores: the limit, each holder's own lease and
//! token, FIFO waiting, all-or-nothing multi-permit grants, expiry, release
//! and renew by owner and token, and the operator's limit change.

use super::*;

impl Log {
    fn permits(
        &mut self,
        name: &str,
        owner: &str,
        limit: u32,
        permits: u32,
        wait_ms: Option<u64>,
    ) -> Result<Outcome, LockError> {
        self.apply(Command::AcquirePermits {
            name: name.into(),
            owner: owner.into(),
            limit,
            permits: Some(permits),
            ttl_ms: Some(3000),
            session: None,
            wait_ms,
            request_id: None,
            seq: None,
        })
    }
    fn permit_token(&mut self, name: &str, owner: &str, limit: u32) -> FencingToken {
        match self.permits(name, owner, limit, 1, None) {
            Ok(Outcome::PermitsGranted { grant, .. }) => grant.token,
            other => panic!("expected permits, got {other:?}"),
        }
    }
    fn release_permits(&mut self, name: &str, owner: &str, token: FencingToken) -> Result<Outcome, LockError> {
        self.apply(Command::ReleasePermits { name: name.into(), owner: owner.into(), token, request_id: None })
    }
    fn in_use(&self, name: &str) -> u32 {
        self.table.semaphore(name).map_or(0, |s| s.in_use)
    }
    fn permit_holders(&self, name: &str) -> Vec<String> {
        self.table.semaphore(name).map_or_else(Vec::new, |s| s.holders.into_iter().map(|h| h.owner).collect())
    }
}

// Ensures up to `limit` permits are granted, each with the token of its own
// entry, and the next acquire is refused with the holders.
#[test]
fn permits_up_to_the_limit_each_with_its_own_token() {
    let mut log = Log::new();
    let a = log.permit_token("s", "a", 2);
    let b = log.permit_token("s", "b", 2);
    assert_eq!((a, b), (t(log.index - 1), t(log.index)));
    match log.permits("s", "c", 2, 1, None) {
        Err(LockError::SemaphoreFull { limit: 2, in_use: 2, waiting: 0, holders, .. }) => {
            assert_eq!(holders.iter().map(|h| (h.owner.as_str(), h.token)).collect::<Vec<_>>(), [("a", a), ("b", b)]);
        }
        other => panic!("{other:?}"),
    }
}

// Ensures the first acquire sets the limit, another limit is refused while
// the semaphore lives, and a semaphore nobody holds or waits for is
// forgotten with its limit.
#[test]
fn the_first_acquire_sets_the_limit() {
    let mut log = Log::new();
    let a = log.permit_token("s", "a", 3);
    let before = log.table.clone();
    assert_eq!(
        log.permits("s", "b", 4, 1, None),
        Err(LockError::LimitMismatch { name: "s".into(), limit: 3, given: 4 })
    );
    assert_eq!(log.table, before);
    log.release_permits("s", "a", a).unwrap();
    assert_eq!(log.table.semaphore("s"), None);
    log.permit_token("s", "b", 4);
    assert_eq!(log.table.semaphore("s").unwrap().limit, 4);
}

// Ensures waiters are served first come, first served: one asking for 2
// permits is not overtaken by a later one asking for 1 that would fit.
#[test]
fn waiters_are_served_in_order() {
    let mut log = Log::new();
    let a = log.permit_token("s", "a", 2);
    log.permit_token("s", "b", 2);
    log.release_permits("s", "a", a).unwrap();
    log.permit_token("s", "a", 2);
    let b = log.table.permits_of("s", "b").unwrap().token;
    log.release_permits("s", "b", b).unwrap();
    // One permit free: c (2) waits, d (1) would fit but queues behind c.
    assert!(matches!(log.permits("s", "c", 2, 2, Some(10_000)), Ok(Outcome::PermitsQueued { position: 1, .. })));
    assert!(matches!(log.permits("s", "d", 2, 1, None), Err(LockError::SemaphoreFull { waiting: 1, .. })));
    assert!(matches!(log.permits("s", "d", 2, 1, Some(10_000)), Ok(Outcome::PermitsQueued { position: 2, .. })));
    assert_eq!(log.in_use("s"), 1);
    let a = log.table.permits_of("s", "a").unwrap().token;
    log.release_permits("s", "a", a).unwrap();
    // Both permits free: c gets both at once, in this entry; d still waits.
    let c = log.table.permits_of("s", "c").expect("c was granted");
    assert_eq!((c.permits, c.token), (2, t(log.index)));
    assert!(log.table.is_waiting_for_permits("s", "d"));
    log.release_permits("s", "c", c.token).unwrap();
    assert_eq!(log.permit_holders("s"), ["d"]);
}

// Ensures a crashed holder's permits return on the Tick that reaches their
// deadline and not one Tick earlier, and go to the first waiter there.
#[test]
fn permits_return_at_their_deadline_never_earlier() {
    let mut log = Log::new();
    let a = log.permit_token("s", "a", 1);
    log.permits("s", "b", 1, 1, Some(60_000)).unwrap();
    assert!(log.ticks(30).is_empty(), "returned before the deadline");
    assert_eq!(log.permit_holders("s"), ["a"]);
    assert_eq!(log.tick(), vec![("s".to_string(), a)]);
    let b = log.table.permits_of("s", "b").unwrap();
    assert_eq!(b.token, t(log.index), "handed over by the expiring Tick");
}

// Ensures renew and release name the owner and the token; wrong ones fail
// clearly and change nothing; a renew moves the deadline.
#[test]
fn permits_are_renewed_and_released_by_owner_and_token() {
    let mut log = Log::new();
    let a = log.permit_token("s", "a", 2);
    let before = log.table.clone();
    assert_eq!(log.release_permits("s", "b", a), Err(LockError::NotHeld { name: "s".into() }));
    assert!(matches!(log.release_permits("s", "a", t(a.get() + 1)), Err(LockError::StaleToken { .. })));
    assert_eq!(log.release_permits("x", "a", a), Err(LockError::SemaphoreNotFound { name: "x".into() }));
    assert_eq!(log.table, before);
    log.ticks(20);
    let renew = Command::RenewPermits { name: "s".into(), owner: "a".into(), token: a, ttl_ms: None, request_id: None };
    assert!(matches!(log.apply(renew), Ok(Outcome::PermitsRenewed { grant }) if grant.token == a));
    assert!(log.ticks(30).is_empty(), "the renew moved the deadline");
    assert_eq!(log.tick(), vec![("s".to_string(), a)]);
}

// Ensures an owner's second acquire returns its own permits again (a
// retry), and one asking for another number is invalid.
#[test]
fn a_holder_reacquiring_gets_its_own_permits() {
    let mut log = Log::new();
    let a = log.permit_token("s", "a", 3);
    assert!(
        matches!(log.permits("s", "a", 3, 1, None), Ok(Outcome::PermitsGranted { reacquired: true, grant }) if grant.token == a)
    );
    assert!(matches!(log.permits("s", "a", 3, 2, None), Err(LockError::Invalid(e)) if e.field == "permits"));
    assert_eq!(log.in_use("s"), 1);
}

// Ensures a wait that runs out leaves the queue with `wait_timeout` for its
// request id, and a cancelled one leaves it and lets the next one in.
#[test]
fn waits_run_out_or_are_cancelled() {
    let mut log = Log::new();
    log.permit_token("s", "a", 1);
    let asked = Command::AcquirePermits {
        name: "s".into(),
        owner: "b".into(),
        limit: 1,
        permits: None,
        ttl_ms: Some(3000),
        session: None,
        wait_ms: Some(500),
        request_id: Some("rb".into()),
        seq: None,
    };
    log.apply(asked.clone()).unwrap();
    log.ticks(5);
    assert!(!log.table.is_waiting_for_permits("s", "b"));
    assert_eq!(log.apply(asked), Err(LockError::WaitTimeout { name: "s".into() }), "the retry is told");
    log.permits("s", "c", 1, 1, Some(10_000)).unwrap();
    let cancel = Command::CancelPermits { name: "s".into(), owner: "c".into() };
    assert!(matches!(log.apply(cancel), Ok(Outcome::PermitsCancelled { removed: true, .. })));
    assert!(!log.table.is_waiting_for_permits("s", "c"));
}

// Ensures the operator's limit change: a higher limit grants the waiters
// that now fit in its entry, a lower one revokes nothing and grants nothing
// until fewer permits are in use; an unknown semaphore is not found.
#[test]
fn the_limit_can_be_changed() {
    let mut log = Log::new();
    log.permit_token("s", "a", 1);
    log.permits("s", "b", 1, 1, Some(60_000)).unwrap();
    log.permits("s", "c", 1, 1, Some(60_000)).unwrap();
    let raised = log.apply(Command::SetSemaphoreLimit { name: "s".into(), limit: 3 });
    assert_eq!(raised, Ok(Outcome::LimitSet { name: "s".into(), limit: 3, in_use: 3 }));
    assert_eq!(log.permit_holders("s"), ["a", "b", "c"]);
    log.apply(Command::SetSemaphoreLimit { name: "s".into(), limit: 1 }).unwrap();
    assert_eq!(log.in_use("s"), 3, "a lower limit revokes nothing");
    log.permits("s", "d", 1, 1, Some(60_000)).unwrap();
    let b = log.table.permits_of("s", "b").unwrap().token;
    log.release_permits("s", "b", b).unwrap();
    assert!(log.table.is_waiting_for_permits("s", "d"), "2 in use, limit 1");
    let missing = log.apply(Command::SetSemaphoreLimit { name: "x".into(), limit: 1 });
    assert_eq!(missing, Err(LockError::SemaphoreNotFound { name: "x".into() }));
}

// Ensures, over random acquires (waiting or not, of 1 to 3 permits),
// releases, cancels and ticks by 8 owners on a semaphore of 3: permits in
// use never exceed the limit, every grant's token is its entry's index, no
// waiter is granted while one ahead of it waits, and nothing is returned
// before its deadline.
#[test]
fn random_runs_never_exceed_the_limit() {
    let mut log = Log::new();
    let mut seed = 0xfeed_u64;
    let mut below = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut grants = 0;
    for _ in 0..6000 {
        let owner = format!("o{}", below(8));
        let command = match below(6) {
            0 | 1 => Command::AcquirePermits {
                name: "s".into(),
                owner: owner.clone(),
                limit: 3,
                permits: Some(1 + below(3) as u32),
                ttl_ms: Some(3000 + 100 * below(20)),
                session: None,
                wait_ms: Some(below(2) * 3000),
                request_id: None,
                seq: None,
            },
            2 => {
                let token = log.table.permits_of("s", &owner).map_or(t(1), |g| g.token);
                Command::ReleasePermits { name: "s".into(), owner, token, request_id: None }
            }
            3 => Command::CancelPermits { name: "s".into(), owner },
            _ => Command::Tick { period_ms: TICK },
        };
        let now = log.table.now_tick();
        let deadlines: BTreeMap<String, u64> = log
            .table
            .semaphores
            .get("s")
            .map_or_else(BTreeMap::new, |s| s.holders.iter().map(|(o, p)| (o.clone(), p.deadline)).collect());
        let applied = log.apply_with_events(command);
        for e in &applied.events {
            match &e.kind {
                EventKind::PermitsGranted { token, .. } => {
                    assert_eq!(*token, t(log.index));
                    grants += 1;
                }
                EventKind::PermitsExpired { owner, .. } => assert!(now + 1 >= deadlines[owner], "returned early"),
                _ => {}
            }
        }
        assert!(log.in_use("s") <= 3, "over the limit");
        if let Some(s) = log.table.semaphores.get("s") {
            assert!(!s.first_fits(), "a waiter that fits was left waiting");
        }
    }
    assert!(grants > 150, "the run granted permits often ({grants})");
}
