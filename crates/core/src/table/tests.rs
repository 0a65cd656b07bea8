//! Unit tests of the lock table, driven through a fake log.

use super::*;
use crate::{EventKind, LockEvent, MAX_REQUEST_AGE_MS};

mod actors;
mod deadlock;
mod elections;
mod quotas;
mod semaphores;
mod session_holds;
mod sessions;
mod shared;

const TICK: u64 = 100;

/// The token of a grant by the entry at `index`.
fn t(index: u64) -> FencingToken {
    FencingToken::granted_at(index)
}

/// An exclusive acquire of `name` by `owner` for `ttl_ms`, waiting up to
/// `wait_ms` if given, with no session, request id or lock delay.
fn acquire_command(name: &str, owner: &str, ttl_ms: u64, wait_ms: Option<u64>) -> Command {
    Command::Acquire {
        name: name.into(),
        owner: owner.into(),
        ttl_ms: Some(ttl_ms),
        session: None,
        wait_ms,
        request_id: None,
        lock_delay_ms: None,
        seq: None,
    }
}

/// A table fed by a fake log: every command gets the next index, in an
/// entry that carries `quotas`.
struct Log {
    table: LockTable,
    index: u64,
    quotas: Quotas,
}

impl Log {
    /// A table that has applied one Tick of `TICK` ms, as a running cluster
    /// has, and applies entries without limits.
    fn new() -> Self {
        let mut log = Log { table: LockTable::new(), index: 0, quotas: Quotas::UNLIMITED };
        log.tick();
        log
    }
    fn apply(&mut self, c: Command) -> Result<Outcome, LockError> {
        self.apply_with_events(c).result
    }
    fn apply_with_events(&mut self, c: Command) -> Applied {
        self.index += 1;
        self.table.apply_within(&c, self.index, &self.quotas)
    }
    fn acquire(&mut self, name: &str, owner: &str, ttl_ms: u64) -> Result<Outcome, LockError> {
        self.apply(acquire_command(name, owner, ttl_ms, None))
    }
    fn token(&mut self, name: &str, owner: &str, ttl_ms: u64) -> FencingToken {
        match self.acquire(name, owner, ttl_ms) {
            Ok(Outcome::Granted { grant, .. }) => grant.token,
            other => panic!("expected a grant, got {other:?}"),
        }
    }
    fn renew(&mut self, name: &str, token: FencingToken, ttl_ms: Option<u64>) -> Result<Outcome, LockError> {
        self.apply(Command::Renew { name: name.into(), token, ttl_ms, request_id: None })
    }
    fn release(&mut self, name: &str, token: FencingToken) -> Result<Outcome, LockError> {
        self.apply(Command::Release { name: name.into(), token, request_id: None, session: None, seq: None })
    }
    fn tick(&mut self) -> Vec<(String, FencingToken)> {
        match self.apply(Command::Tick { period_ms: TICK }) {
            Ok(Outcome::Ticked { expired, .. }) => expired,
            other => panic!("tick failed: {other:?}"),
        }
    }
    fn ticks(&mut self, n: u64) -> Vec<(String, FencingToken)> {
        (0..n).flat_map(|_| self.tick()).collect()
    }
}

// Ensures a free lock is granted with the index of the granting entry as token.
#[test]
fn free_lock_is_granted_with_entry_index_as_token() {
    let mut log = Log::new();
    let token = log.token("a", "alice", 3000);
    assert_eq!(token, t(log.index));
    let view = log.table.get("a").unwrap();
    assert_eq!((view.owner.as_str(), view.token), ("alice", token));
}

// Ensures a token is the bare number in JSON, in MessagePack (stored rows)
// and as text, so the newtype changed neither the wire nor stored bytes.
#[test]
fn token_serialises_as_the_bare_number() {
    let token = t(1 << 40);
    assert_eq!(serde_json::to_string(&token).unwrap(), "1099511627776");
    assert_eq!(serde_json::from_str::<FencingToken>("1099511627776").unwrap(), token);
    let packed = rmp_serde::to_vec_named(&token).unwrap();
    assert_eq!(packed, rmp_serde::to_vec_named(&(1u64 << 40)).unwrap());
    assert_eq!(rmp_serde::from_slice::<FencingToken>(&packed).unwrap(), token);
    assert_eq!((token.to_string(), format!("{token:?}")), ("1099511627776".into(), "1099511627776".into()));
    assert_eq!("1099511627776".parse(), Ok(token));
    assert!("-1".parse::<FencingToken>().is_err());
}

// Ensures a same-owner acquire returns the same token and restarts the lease.
#[test]
fn same_owner_reacquire_keeps_token_and_restarts_lease() {
    let mut log = Log::new();
    let token = log.token("a", "alice", 3000);
    log.ticks(10);
    match log.acquire("a", "alice", 3000).unwrap() {
        Outcome::Granted { grant, reacquired } => {
            assert!(reacquired);
            assert_eq!(grant.token, token);
            assert_eq!(grant.ttl_ms, 3000);
            assert_eq!(grant.deadline_tick, log.table.now_tick() + 30 + 1);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(log.table.len(), 1);
    // The old deadline is gone from the index: nothing expires at it.
    assert!(log.ticks(30).is_empty());
    assert_eq!(log.tick(), vec![("a".to_string(), token)]);
}

// Ensures another owner is refused and told who holds the lock.
#[test]
fn other_owner_is_refused_with_the_holder() {
    let mut log = Log::new();
    let token = log.token("a", "alice", 3000);
    let err = log.acquire("a", "bob", 3000).unwrap_err();
    assert_eq!(err, LockError::HeldByOther { name: "a".into(), holder: "alice".into(), token, expires_in_ms: 3000 });
    assert_eq!(log.table.get("a").unwrap().owner, "alice");
}

// Ensures expiry happens exactly at the deadline tick: ceil(ttl/tick) + 1 ticks later.
#[test]
fn lease_expires_exactly_at_deadline_tick() {
    let mut log = Log::new();
    let token = log.token("a", "alice", 3050); // ceil(3050/100) = 31 ticks, + 1
    assert!(log.ticks(31).is_empty(), "expired before the deadline");
    assert!(log.table.get("a").is_some());
    assert_eq!(log.tick(), vec![("a".to_string(), token)]);
    assert!(log.table.get("a").is_none());
}

// Ensures tokens grow over grant -> expire -> grant, and the old token is stale.
#[test]
fn tokens_increase_over_grant_expire_grant() {
    let mut log = Log::new();
    let first = log.token("a", "alice", 3000);
    assert_eq!(log.ticks(31).len(), 1);
    let second = log.token("a", "bob", 3000);
    assert!(second > first);
    assert!(matches!(
        log.renew("a", first, None),
        Err(LockError::StaleToken { given, current, .. }) if given == first && current == second
    ));
    log.release("a", second).unwrap();
    let third = log.token("a", "alice", 3000);
    assert!(third > second);
}

// Ensures renew keeps the token, moves the deadline, and may change the ttl.
#[test]
fn renew_keeps_token_and_moves_deadline() {
    let mut log = Log::new();
    let token = log.token("a", "alice", 3000);
    log.ticks(15);
    match log.renew("a", token, None).unwrap() {
        Outcome::Renewed { grant } => {
            assert_eq!(grant.token, token);
            assert_eq!(grant.deadline_tick, log.table.now_tick() + 31);
        }
        other => panic!("{other:?}"),
    }
    assert!(log.ticks(30).is_empty());
    log.renew("a", token, Some(5000)).unwrap();
    assert!(log.ticks(50).is_empty());
    assert_eq!(log.tick().len(), 1);
}

// Ensures renew and release of a free lock say NotHeld, with a wrong token StaleToken,
// and change nothing.
#[test]
fn renew_and_release_with_unknown_or_stale_token_fail_clearly() {
    let mut log = Log::new();
    assert_eq!(log.renew("a", t(1), None), Err(LockError::NotHeld { name: "a".into() }));
    assert_eq!(log.release("a", t(1)), Err(LockError::NotHeld { name: "a".into() }));
    let token = log.token("a", "alice", 3000);
    let before = log.table.clone();
    assert!(matches!(log.renew("a", t(token.get() + 1), None), Err(LockError::StaleToken { .. })));
    assert!(matches!(log.release("a", t(token.get() - 1)), Err(LockError::StaleToken { .. })));
    assert_eq!(log.table, before);
    assert!(matches!(log.release("a", token), Ok(Outcome::Released { .. })));
    assert!(log.table.is_empty());
    assert_eq!(log.release("a", token), Err(LockError::NotHeld { name: "a".into() }));
}

// Ensures nothing expires without Ticks, however many other entries are applied.
#[test]
fn nothing_expires_without_ticks() {
    let mut log = Log::new();
    log.token("a", "alice", 3000);
    for i in 0..1000 {
        let _ = log.acquire(&format!("other{i}"), "bob", 3000);
    }
    assert_eq!(log.table.get("a").unwrap().owner, "alice");
}

// Ensures a Tick visits only the leases it expires (the deadline index stays in step).
#[test]
fn tick_expires_only_due_leases_in_deadline_order() {
    let mut log = Log::new();
    let t3 = log.token("c", "x", 4000);
    let t2 = log.token("b", "x", 3000);
    let t2b = log.token("a", "x", 3000);
    let expired = log.ticks(31);
    assert_eq!(expired, vec![("a".to_string(), t2b), ("b".to_string(), t2)]);
    assert_eq!(log.table.len(), 1);
    assert_eq!(log.ticks(10), vec![("c".to_string(), t3)]);
    assert!(log.table.by_deadline.is_empty());
}

// Ensures a longer tick period only lengthens leases, and a shorter one is ignored.
#[test]
fn tick_period_only_grows() {
    let mut log = Log::new();
    log.apply(Command::Tick { period_ms: 50 }).unwrap();
    assert_eq!(log.table.tick_ms(), TICK);
    log.apply(Command::Tick { period_ms: 200 }).unwrap();
    assert_eq!(log.table.tick_ms(), 200);
    let token = log.token("a", "alice", 3000); // 15 ticks of 200 ms, + 1
    assert!(log.ticks(15).is_empty());
    assert_eq!(log.tick(), vec![("a".to_string(), token)]);
}

// Ensures a grant before the first Tick assumes the smallest period, so it can only run long.
#[test]
fn grant_before_first_tick_runs_long() {
    let mut table = LockTable::new();
    let c = Command::Acquire {
        name: "a".into(),
        owner: "o".into(),
        ttl_ms: Some(3000),
        session: None,
        wait_ms: None,
        request_id: None,
        lock_delay_ms: None,
        seq: None,
    };
    match table.apply(&c, 5).result.unwrap() {
        Outcome::Granted { grant, .. } => assert_eq!(grant.deadline_tick, 3000 / MIN_TICK_MS + 1),
        other => panic!("{other:?}"),
    }
}

// Ensures invalid commands that reach the log are refused deterministically.
#[test]
fn invalid_command_in_log_changes_nothing() {
    let mut log = Log::new();
    let before = log.table.clone();
    assert!(matches!(log.acquire("", "alice", 3000), Err(LockError::Invalid(_))));
    assert!(matches!(log.acquire("a", "alice", 1), Err(LockError::Invalid(_))));
    assert_eq!(log.table, before);
}

// Ensures list filters by prefix, keeps name order and honours the limit.
#[test]
fn list_by_prefix_and_limit() {
    let mut log = Log::new();
    for name in ["pay/2", "pay/1", "job/1", "pay/3", "pb"] {
        log.token(name, "o", 3000);
    }
    let names = |v: Vec<LeaseView>| v.into_iter().map(|l| l.name).collect::<Vec<_>>();
    assert_eq!(names(log.table.list("pay/", 10)), ["pay/1", "pay/2", "pay/3"]);
    assert_eq!(names(log.table.list("pay/", 2)), ["pay/1", "pay/2"]);
    assert_eq!(log.table.list("", 100).len(), 5);
    assert!(log.table.list("zzz", 10).is_empty());
}

// Ensures a snapshot image round-trips, deadline index included.
#[test]
fn image_round_trip_rebuilds_deadline_index() {
    let mut log = Log::new();
    log.token("a", "alice", 3000);
    log.token("b", "bob", 4000);
    let json = serde_json::to_vec(&TableImage::from(&log.table)).unwrap();
    let image: TableImage = serde_json::from_slice(&json).unwrap();
    assert_eq!(LockTable::from(image), log.table);
}

impl Log {
    fn wait(&mut self, name: &str, owner: &str, wait_ms: u64, request_id: Option<&str>) -> Applied {
        self.apply_with_events(Command::Acquire {
            name: name.into(),
            owner: owner.into(),
            ttl_ms: Some(3000),
            session: None,
            wait_ms: Some(wait_ms),
            request_id: request_id.map(Into::into),
            lock_delay_ms: None,
            seq: None,
        })
    }
    fn holder(&self, name: &str) -> Option<(String, FencingToken)> {
        self.table.get(name).map(|v| (v.owner, v.token))
    }
}

// Ensures an acquire is guessed to queue exactly when it waits for a lock
// another owner holds, and that such an acquire, applied, only queues: it
// hands nobody a lock, so the proposer may hold it for the next entry.
#[test]
fn an_acquire_would_queue_when_it_waits_for_a_lock_another_holds() {
    let mut log = Log::new();
    let acquire = |owner: &str, wait_ms: Option<u64>| acquire_command("a", owner, 3000, wait_ms);
    assert!(!log.table.would_queue(&acquire("bob", Some(1000))), "the lock is free");
    log.token("a", "alice", 3000);
    assert!(log.table.would_queue(&acquire("bob", Some(1000))));
    assert!(!log.table.would_queue(&acquire("bob", None)), "a try-acquire is answered at once");
    assert!(!log.table.would_queue(&acquire("bob", Some(0))), "so is one that waits 0 ms");
    assert!(!log.table.would_queue(&acquire("alice", Some(1000))), "the holder re-acquires at once");
    let applied = log.apply_with_events(acquire("bob", Some(1000)));
    assert!(matches!(applied.result, Ok(Outcome::Queued { .. })), "{:?}", applied.result);
    assert!(applied.events.iter().all(|e| matches!(e.kind, EventKind::Queued { .. })), "{:?}", applied.events);
}

// Ensures waiters are granted in arrival order, each in the entry that frees
// the lock, with that entry's index as token.
#[test]
fn waiters_are_granted_in_fifo_order_with_hand_over_index_as_token() {
    let mut log = Log::new();
    let mut token = log.token("a", "w0", 3000);
    for i in 1..=5 {
        let queued = log.wait("a", &format!("w{i}"), 60_000, None).result.unwrap();
        assert_eq!(queued, Outcome::Queued { name: "a".into(), owner: format!("w{i}"), position: i });
    }
    let view = log.table.get("a").unwrap();
    assert_eq!(view.waiters.iter().map(|w| w.position).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    for i in 1..=5 {
        let applied = log.apply_with_events(Command::Release {
            name: "a".into(),
            token,
            request_id: None,
            session: None,
            seq: None,
        });
        let handed = applied.events.last().unwrap().clone();
        assert_eq!(
            handed,
            LockEvent {
                index: log.index,
                name: "a".into(),
                kind: EventKind::HandedOver {
                    owner: format!("w{i}"),
                    token: t(log.index),
                    from_owner: format!("w{}", i - 1),
                    from_token: token
                },
                by: Actor::Unknown,
            }
        );
        assert_eq!(log.holder("a"), Some((format!("w{i}"), t(log.index))));
        assert!(t(log.index) > token);
        token = t(log.index);
    }
    log.release("a", token).unwrap();
    assert!(log.table.get("a").is_none() && log.table.queues.is_empty() && log.table.by_wait_deadline.is_empty());
}

// Ensures an expiry hands the lock over in the Tick entry that expires it.
#[test]
fn expiry_hands_over_in_the_tick_entry() {
    let mut log = Log::new();
    let first = log.token("a", "holder", 3000);
    log.wait("a", "next", 60_000, None);
    assert!(log.ticks(30).is_empty());
    assert_eq!(log.tick(), vec![("a".to_string(), first)]);
    assert_eq!(log.holder("a"), Some(("next".to_string(), t(log.index))));
}

// Ensures a wait that runs out is removed on a Tick, answered wait_timeout
// through its request id, and never becomes holder.
#[test]
fn wait_runs_out_on_a_tick() {
    let mut log = Log::new();
    let token = log.token("a", "holder", 60_000);
    log.wait("a", "late", 1000, Some("req-1"));
    let timed_out =
        (0..10).flat_map(|_| log.apply_with_events(Command::Tick { period_ms: TICK }).events).collect::<Vec<_>>();
    assert_eq!(timed_out.len(), 1);
    assert_eq!(timed_out[0].kind, EventKind::WaitTimeout { owner: "late".into() });
    assert!(!log.table.is_waiting("a", "late"));
    assert_eq!(log.wait("a", "late", 1000, Some("req-1")).result, Err(LockError::WaitTimeout { name: "a".into() }));
    log.release("a", token).unwrap();
    assert!(log.table.get("a").is_none(), "a timed-out waiter became holder");
}

// Ensures a cancelled waiter leaves the queue, never becomes holder, and its
// request id may be used again.
#[test]
fn cancelled_waiter_never_becomes_holder() {
    let mut log = Log::new();
    let token = log.token("a", "holder", 60_000);
    log.wait("a", "gone", 60_000, Some("req-gone"));
    log.wait("a", "stays", 60_000, None);
    let cancel = log.apply(Command::Cancel { name: "a".into(), owner: "gone".into() }).unwrap();
    assert_eq!(cancel, Outcome::Cancelled { name: "a".into(), owner: "gone".into(), removed: true });
    let again = log.apply(Command::Cancel { name: "a".into(), owner: "gone".into() }).unwrap();
    assert_eq!(again, Outcome::Cancelled { name: "a".into(), owner: "gone".into(), removed: false });
    log.release("a", token).unwrap();
    assert_eq!(log.holder("a").unwrap().0, "stays");
    assert!(matches!(log.wait("b", "gone", 60_000, Some("req-gone")).result, Ok(Outcome::Granted { .. })));
}

// Ensures a queued owner that asks again keeps its place.
#[test]
fn queued_owner_keeps_its_place() {
    let mut log = Log::new();
    log.token("a", "holder", 60_000);
    log.wait("a", "w1", 60_000, None);
    log.wait("a", "w2", 60_000, None);
    let again = log.wait("a", "w1", 60_000, None);
    assert_eq!(again.result, Ok(Outcome::Queued { name: "a".into(), owner: "w1".into(), position: 1 }));
    assert!(again.events.is_empty());
}

// Ensures an owner handed the lock no longer counts as waiting, and that when
// it queues again (a worker of a herd coming back) it joins at the back.
#[test]
fn owner_handed_the_lock_queues_again_at_the_back() {
    let mut log = Log::new();
    let first = log.token("a", "holder", 60_000);
    log.wait("a", "w1", 60_000, None);
    log.wait("a", "w2", 60_000, None);
    log.release("a", first).unwrap();
    assert!(!log.table.is_waiting("a", "w1"));
    assert!(log.table.is_waiting("a", "w2"));
    log.wait("a", "holder", 60_000, None);
    let back = log.wait("a", "w2", 60_000, None);
    assert_eq!(back.result, Ok(Outcome::Queued { name: "a".into(), owner: "w2".into(), position: 1 }));
    let w1 = log.holder("a").unwrap().1;
    log.release("a", w1).unwrap();
    assert!(!log.table.is_waiting("a", "w2"));
    let again = log.wait("a", "w1", 60_000, None);
    assert_eq!(again.result, Ok(Outcome::Queued { name: "a".into(), owner: "w1".into(), position: 2 }));
}

// Ensures a retried request id returns the original result without applying
// again, including a queued acquire later granted.
#[test]
fn request_id_replays_the_original_result() {
    let mut log = Log::new();
    let acquire = |id: &str| Command::Acquire {
        name: "a".into(),
        owner: "alice".into(),
        ttl_ms: Some(3000),
        session: None,
        wait_ms: None,
        request_id: Some(id.into()),
        lock_delay_ms: None,
        seq: None,
    };
    let first = log.apply(acquire("r1")).unwrap();
    log.ticks(5);
    let before = log.table.clone();
    assert_eq!(log.apply(acquire("r1")).unwrap(), first);
    assert_eq!(log.table, before, "a replay changed the table");
    let token = log.holder("a").unwrap().1;
    let release = Command::Release { name: "a".into(), token, request_id: Some("r2".into()), session: None, seq: None };
    log.apply(release.clone()).unwrap();
    assert_eq!(log.apply(release).unwrap(), Outcome::Released { name: "a".into(), token });
    assert!(matches!(log.apply(acquire("r2")), Err(LockError::RequestIdReused { .. })));

    let holder = log.token("b", "holder", 3000);
    log.wait("b", "bob", 60_000, Some("r3"));
    log.release("b", holder).unwrap();
    let handed = t(log.index);
    match log.wait("b", "bob", 60_000, Some("r3")).result.unwrap() {
        Outcome::Granted { grant, .. } => assert_eq!(grant.token, handed),
        other => panic!("{other:?}"),
    }
}

// Ensures the de-duplication table forgets requests older than its age bound.
#[test]
fn request_records_age_out() {
    let mut log = Log::new();
    log.apply(Command::Acquire {
        name: "a".into(),
        owner: "o".into(),
        ttl_ms: Some(3000),
        session: None,
        wait_ms: None,
        request_id: Some("old".into()),
        lock_delay_ms: None,
        seq: None,
    })
    .unwrap();
    assert_eq!(log.table.remembered_requests(), 1);
    log.ticks(MAX_REQUEST_AGE_MS / TICK);
    assert_eq!(log.table.remembered_requests(), 0);
}

// Ensures a lease's end reports the ticks since its grant, renewals and
// same-owner re-acquires included: the hold time is the lease's, not the
// last renewal's.
#[test]
fn an_end_reports_the_ticks_since_the_grant() {
    let mut log = Log::new();
    let token = log.token("a", "alice", 3000);
    log.ticks(5);
    log.renew("a", token, None).unwrap();
    log.ticks(4);
    assert_eq!(log.token("a", "alice", 3000), token, "a re-acquire keeps the lease");
    log.ticks(3);
    let released =
        log.apply_with_events(Command::Release { name: "a".into(), token, request_id: None, session: None, seq: None });
    let ends: Vec<_> = released.events.into_iter().map(|e| e.kind).collect();
    assert_eq!(ends, [EventKind::Released { owner: "alice".into(), token, held_ticks: 12 }]);
}

// Ensures every change emits its event with the entry index, in order.
#[test]
fn events_tell_the_story_in_log_order() {
    let mut log = Log::new();
    let kinds = |a: Applied| a.events.into_iter().map(|e| (e.index, e.kind)).collect::<Vec<_>>();
    let acquired = kinds(log.apply_with_events(Command::Acquire {
        name: "a".into(),
        owner: "x".into(),
        ttl_ms: Some(3000),
        session: None,
        wait_ms: None,
        request_id: None,
        lock_delay_ms: None,
        seq: None,
    }));
    let token = t(log.index);
    assert_eq!(acquired, [(log.index, EventKind::Acquired { owner: "x".into(), token })]);
    let renewed =
        kinds(log.apply_with_events(Command::Renew { name: "a".into(), token, ttl_ms: None, request_id: None }));
    assert_eq!(renewed, [(log.index, EventKind::Renewed { owner: "x".into(), token })]);
    let released = kinds(log.apply_with_events(Command::Release {
        name: "a".into(),
        token,
        request_id: None,
        session: None,
        seq: None,
    }));
    assert_eq!(released, [(log.index, EventKind::Released { owner: "x".into(), token, held_ticks: 0 })]);
    log.token("a", "y", 3000);
    let expired: Vec<_> =
        (0..31).flat_map(|_| kinds(log.apply_with_events(Command::Tick { period_ms: TICK }))).collect();
    assert_eq!(
        expired,
        [(
            log.index,
            EventKind::Expired {
                owner: "y".into(),
                token: t(log.index - 31),
                delayed_until_tick: None,
                held_ticks: 31
            }
        )]
    );
}

// Ensures queues and request records survive a snapshot image round trip.
#[test]
fn image_round_trip_keeps_queues_and_requests() {
    let mut log = Log::new();
    log.token("a", "holder", 3000);
    log.wait("a", "w1", 60_000, Some("q1"));
    log.wait("a", "w2", 5_000, None);
    let json = serde_json::to_vec(&TableImage::from(&log.table)).unwrap();
    let restored = LockTable::from(serde_json::from_slice::<TableImage>(&json).unwrap());
    assert_eq!(restored, log.table);
}

impl Log {
    fn put(&mut self, key: &str, lock: &str, token: FencingToken, value: &str) -> Result<Outcome, LockError> {
        let value = value.to_owned();
        self.apply(Command::PutRecord { key: key.into(), lock: lock.into(), token, value, request_id: None })
    }
    fn gate(&mut self, resource: &str, lock: &str, token: FencingToken) -> Result<Outcome, LockError> {
        self.apply(Command::Gate { resource: resource.into(), lock: lock.into(), token, request_id: None })
    }
}

// Ensures a fenced record is written only under the current token of its
// lock: after release, after expiry and with another lock's token it is refused.
#[test]
fn fenced_record_needs_the_current_token_of_its_lock() {
    let mut log = Log::new();
    let a = log.token("acct-1", "w1", 3000);
    let b = log.token("acct-2", "w2", 3000);
    assert!(matches!(log.put("balance-1", "acct-1", a, "100"), Ok(Outcome::RecordWritten { .. })));
    let written = log.index;
    let record = log.table.record("balance-1").unwrap().clone();
    assert_eq!((record.token, record.index, record.value), (a, written, "100".to_string()));
    // Another lock's (higher) token does not count for acct-1.
    assert_eq!(
        log.put("balance-1", "acct-1", b, "0"),
        Err(LockError::NotCurrent { lock: "acct-1".into(), given: b, current: Some(a) })
    );
    log.release("acct-1", a).unwrap();
    assert_eq!(
        log.put("balance-1", "acct-1", a, "1"),
        Err(LockError::NotCurrent { lock: "acct-1".into(), given: a, current: None })
    );
    log.ticks(31);
    assert!(matches!(log.put("balance-2", "acct-2", b, "1"), Err(LockError::NotCurrent { .. })));
    assert_eq!(log.table.record("balance-1").unwrap().value, "100", "refused writes changed nothing");
    assert!(log.table.record("balance-2").is_none());
}

// Ensures a gate admits the current holder's token, again and again, and
// then only tokens that never go down: after a hand-over the new holder's
// higher token passes, and the old holder's is refused (with the gate's
// mark once the new one passed, as not current before); it serves one lock.
#[test]
fn gate_admits_the_holders_token_and_never_goes_down() {
    let mut log = Log::new();
    let first = log.token("job", "a", 3000);
    assert!(log.gate("printer", "job", first).is_ok());
    assert!(log.gate("printer", "job", first).is_ok(), "the same holder passes twice");
    log.wait("job", "b", 60_000, None);
    log.release("job", first).unwrap();
    let second = t(log.index);
    assert_eq!(log.holder("job"), Some(("b".into(), second)), "handed over by the release");
    assert_eq!(
        log.gate("printer", "job", first),
        Err(LockError::NotCurrent { lock: "job".into(), given: first, current: Some(second) })
    );
    assert!(log.gate("printer", "job", second).is_ok());
    assert_eq!(
        log.gate("printer", "job", first),
        Err(LockError::GateRejected { resource: "printer".into(), given: first, highest: second })
    );
    let other = log.token("other-lock", "c", 3000);
    assert!(matches!(log.gate("printer", "other-lock", other), Err(LockError::GateLockMismatch { .. })));
    let json = serde_json::to_vec(&TableImage::from(&log.table)).unwrap();
    assert_eq!(LockTable::from(serde_json::from_slice::<TableImage>(&json).unwrap()), log.table);
}

// Ensures no token the lock's holder was not granted passes a fence: a gate
// and a fenced record refuse another lock's (higher) grant index, an index
// no entry granted, and a token above the log, and change nothing (a new
// gate is not even created); the holder's own token then passes both.
#[test]
fn fences_refuse_tokens_not_granted_to_the_holder() {
    let mut log = Log::new();
    let holder = log.token("printer", "alice", 60_000);
    log.tick();
    let never_granted = t(log.index);
    let other = log.token("scanner", "mallory", 60_000);
    for forged in [other, never_granted, t(1_000_000)] {
        let before = log.table.clone();
        let refused = LockError::NotCurrent { lock: "printer".into(), given: forged, current: Some(holder) };
        assert_eq!(log.gate("printer-gate", "printer", forged), Err(refused.clone()), "gate, token {forged}");
        assert_eq!(log.put("printer-job", "printer", forged, "1"), Err(refused), "record, token {forged}");
        assert_eq!(log.table, before, "token {forged} changed nothing");
    }
    assert!(log.gate("printer-gate", "printer", holder).is_ok());
    assert!(log.put("printer-job", "printer", holder, "1").is_ok());
}

// Ensures `holder` tells the same grant the hand-over answered, whatever
// the queue behind it, and nothing for a free lock.
#[test]
fn holder_is_the_handed_over_grant_without_the_queue() {
    let mut log = Log::new();
    let first = log.token("a", "w0", 5000);
    for i in 1..=3 {
        let wait = Command::Acquire {
            name: "a".into(),
            owner: format!("w{i}"),
            ttl_ms: Some(5000),
            session: None,
            wait_ms: Some(60_000),
            request_id: None,
            lock_delay_ms: None,
            seq: None,
        };
        assert!(matches!(log.apply(wait), Ok(Outcome::Queued { .. })));
    }
    log.release("a", first).unwrap();
    let holder = log.table.holder("a").expect("handed over");
    let view = log.table.get("a").unwrap();
    assert_eq!((holder.owner.as_str(), holder.token), ("w1", t(log.index)));
    assert_eq!(
        (holder.ttl_ms, holder.deadline_tick, holder.expires_in_ms),
        (view.ttl_ms, view.deadline_tick, view.expires_in_ms)
    );
    assert_eq!(view.waiters.len(), 2);
    assert_eq!(log.table.holder("b"), None);
}

impl Log {
    /// An acquire of `name` with a lock delay of `delay_ms`, waiting `wait_ms` if given.
    fn acquire_delayed(&mut self, name: &str, owner: &str, delay_ms: u64, wait_ms: Option<u64>) -> Applied {
        self.apply_with_events(Command::Acquire {
            name: name.into(),
            owner: owner.into(),
            ttl_ms: Some(3000),
            session: None,
            wait_ms,
            request_id: None,
            lock_delay_ms: Some(delay_ms),
            seq: None,
        })
    }
    fn delayed_token(&mut self, name: &str, owner: &str, delay_ms: u64) -> FencingToken {
        match self.acquire_delayed(name, owner, delay_ms, None).result {
            Ok(Outcome::Granted { grant, .. }) => grant.token,
            other => panic!("expected a grant, got {other:?}"),
        }
    }
}

// Ensures an expired lease with a lock delay leaves the lock free but
// refused to everyone, the expired holder included, for ceil(delay / tick)
// ticks after the expiring Tick, and grantable again on the Tick that ends it.
#[test]
fn lock_delay_follows_expiry() {
    let mut log = Log::new();
    let token = log.delayed_token("a", "alice", 1050); // ceil(1050 / 100) = 11 ticks
    assert!(log.ticks(30).is_empty());
    let expiry = log.apply_with_events(Command::Tick { period_ms: TICK });
    let until = log.table.now_tick() + 11;
    assert_eq!(
        expiry.events,
        [LockEvent {
            index: log.index,
            name: "a".into(),
            kind: EventKind::Expired { owner: "alice".into(), token, delayed_until_tick: Some(until), held_ticks: 31 },
            by: Actor::Cluster,
        }]
    );
    assert_eq!(log.table.delayed_until("a"), Some(until));
    assert!(log.table.get("a").is_none(), "a delayed lock is free");
    for owner in ["bob", "alice"] {
        let refused = log.acquire(owner, owner, 3000).map(|_| ());
        assert_eq!(refused, Ok(()), "other locks are not delayed");
        let refused = log.acquire("a", owner, 3000);
        assert_eq!(refused, Err(LockError::LockDelayed { name: "a".into(), delayed_until_tick: until }));
    }
    assert!(matches!(log.release("a", token), Err(LockError::NotHeld { .. })));
    assert!(log.ticks(10).is_empty());
    assert!(log.acquire("a", "bob", 3000).is_err(), "still delayed one tick before its end");
    let end = log.apply_with_events(Command::Tick { period_ms: TICK });
    assert_eq!(
        end.events,
        [LockEvent {
            index: log.index,
            name: "a".into(),
            kind: EventKind::DelayEnded { owner: "alice".into(), token },
            by: Actor::Cluster,
        }]
    );
    assert_eq!(log.table.delayed_until("a"), None);
    let next = log.token("a", "bob", 3000);
    assert!(next > token);
}

// Ensures a released lease leaves no delay, whatever delay it carried, and
// a lease without one expires into a free lock at once.
#[test]
fn no_lock_delay_after_release_or_without_one() {
    let mut log = Log::new();
    let token = log.delayed_token("a", "alice", 60_000);
    log.release("a", token).unwrap();
    assert_eq!(log.table.delayed_until("a"), None);
    log.token("a", "bob", 3000);
    assert_eq!(log.ticks(32).len(), 1);
    assert_eq!(log.table.delayed_until("a"), None);
    log.token("a", "carol", 3000);
    // A zero delay is no delay.
    let mut log = Log::new();
    log.delayed_token("z", "alice", 0);
    assert_eq!(log.ticks(32).len(), 1);
    assert!(log.acquire("z", "bob", 3000).is_ok());
}

// Ensures waiters, those queued before the expiry and those that join during
// the delay, are not handed the lock while it is delayed; the first is granted
// by the Tick that ends the delay (token = that entry's index), in FIFO order,
// and a waiter whose own lease has a delay passes it on.
#[test]
fn waiters_are_granted_when_the_lock_delay_ends() {
    let mut log = Log::new();
    let first = log.delayed_token("a", "alice", 500); // 5 ticks
    assert!(matches!(log.acquire_delayed("a", "early", 500, Some(60_000)).result, Ok(Outcome::Queued { .. })));
    assert_eq!(log.ticks(32).len(), 1);
    let until = log.table.delayed_until("a").unwrap();
    assert!(log.table.get("a").is_none(), "handed over during the delay");
    let late = log.wait("a", "late", 60_000, None).result;
    assert_eq!(late, Ok(Outcome::Queued { name: "a".into(), owner: "late".into(), position: 2 }));
    assert!(log.ticks(until - log.table.now_tick() - 1).is_empty());
    assert!(log.table.get("a").is_none());
    let end = log.apply_with_events(Command::Tick { period_ms: TICK });
    assert_eq!(log.table.now_tick(), until);
    let kinds: Vec<_> = end.events.into_iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EventKind::DelayEnded { owner: "alice".into(), token: first },
            EventKind::Acquired { owner: "early".into(), token: t(log.index) }
        ]
    );
    let second = t(log.index);
    assert_eq!(log.holder("a"), Some(("early".into(), second)));
    assert!(second > first);
    // "early" asked for a delay too: its expiry delays "late" in turn.
    assert_eq!(log.ticks(32), [("a".to_string(), second)]);
    assert!(log.table.get("a").is_none() && log.table.is_waiting("a", "late"));
    log.ticks(5);
    let third = log.holder("a").expect("late granted when the second delay ended");
    assert_eq!(third.0, "late");
    assert!(third.1 > second);
}

// Ensures a waiter whose wait runs out during the delay leaves the queue and
// a request id answers its wait_timeout, and nobody is granted at the delay's end.
#[test]
fn wait_running_out_during_a_lock_delay() {
    let mut log = Log::new();
    log.delayed_token("a", "alice", 5_000); // 50 ticks
    log.ticks(32);
    log.wait("a", "brief", 1_000, Some("req-brief"));
    log.ticks(10);
    assert!(!log.table.is_waiting("a", "brief"));
    assert_eq!(
        log.wait("a", "brief", 1_000, Some("req-brief")).result,
        Err(LockError::WaitTimeout { name: "a".into() })
    );
    log.ticks(40);
    assert_eq!(log.table.delayed_until("a"), None);
    assert!(log.table.get("a").is_none() && log.table.queues.is_empty());
}

// Ensures a lock delay, and the delay a waiter asked for, survive a snapshot
// image round trip, and an image written before delays existed still loads.
#[test]
fn lock_delay_survives_image_round_trip() {
    let mut log = Log::new();
    log.delayed_token("a", "alice", 2_000);
    log.acquire_delayed("a", "bob", 1_000, Some(60_000));
    log.ticks(32);
    assert!(log.table.delayed_until("a").is_some());
    let json = serde_json::to_vec(&TableImage::from(&log.table)).unwrap();
    let mut restored = LockTable::from(serde_json::from_slice::<TableImage>(&json).unwrap());
    assert_eq!(restored, log.table);
    // The restored table ends the delay on the same Tick as the original.
    let mut index = log.index;
    for _ in 0..20 {
        index += 1;
        let (a, b) = (
            log.table.apply(&Command::Tick { period_ms: TICK }, index),
            restored.apply(&Command::Tick { period_ms: TICK }, index),
        );
        assert_eq!(a, b);
    }
    assert_eq!(restored.get("a").map(|v| v.owner), Some("bob".into()));

    let mut old = serde_json::to_value(TableImage::from(&LockTable::new())).unwrap();
    old.as_object_mut().unwrap().remove("delays");
    assert!(serde_json::from_value::<TableImage>(old).is_ok());
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|n| n.to_string()).collect()
}

impl Log {
    fn acquire_many(&mut self, list: &[&str], owner: &str, wait_ms: Option<u64>, request_id: Option<&str>) -> Applied {
        self.apply_with_events(Command::AcquireMany {
            names: names(list),
            owner: owner.into(),
            ttl_ms: Some(3000),
            session: None,
            wait_ms,
            request_id: request_id.map(Into::into),
            lock_delay_ms: None,
            seq: None,
        })
    }
    fn many_token(&mut self, list: &[&str], owner: &str) -> FencingToken {
        match self.acquire_many(list, owner, None, None).result {
            Ok(Outcome::GrantedMany { grants, .. }) => grants[0].token,
            other => panic!("expected grants, got {other:?}"),
        }
    }
    fn release_many(&mut self, list: &[&str], token: FencingToken) -> Applied {
        self.apply_with_events(Command::ReleaseMany {
            names: names(list),
            token,
            request_id: None,
            session: None,
            seq: None,
        })
    }
    fn cancel(&mut self, name: &str, owner: &str) -> Applied {
        self.apply_with_events(Command::Cancel { name: name.into(), owner: owner.into() })
    }
    fn owners(&self, list: &[&str]) -> Vec<Option<(String, FencingToken)>> {
        list.iter().map(|n| self.holder(n)).collect()
    }
}

/// (name, event kind) of each event.
fn story(applied: &Applied) -> Vec<(String, EventKind)> {
    applied.events.iter().map(|e| (e.name.clone(), e.kind.clone())).collect()
}

// Ensures a multi-acquire of free locks grants all of them in its entry,
// under that entry's index, in the order asked, with one event per lock.
#[test]
fn multi_acquire_grants_every_lock_under_one_token() {
    let mut log = Log::new();
    let applied = log.acquire_many(&["c", "a", "b"], "x", None, None);
    let index = t(log.index);
    match &applied.result {
        Ok(Outcome::GrantedMany { grants, reacquired: false }) => {
            let got: Vec<_> = grants.iter().map(|g| (g.name.as_str(), g.token)).collect();
            assert_eq!(got, [("c", index), ("a", index), ("b", index)]);
        }
        other => panic!("{other:?}"),
    }
    let acquired = |n: &str| (n.to_string(), EventKind::Acquired { owner: "x".into(), token: index });
    assert_eq!(story(&applied), [acquired("c"), acquired("a"), acquired("b")]);
    assert_eq!(log.owners(&["a", "b", "c"]), vec![Some(("x".to_string(), index)); 3]);
}

// Ensures a multi-acquire that cannot have every lock gets none, and is told
// every lock in the way and why: held (by anyone, itself under another grant
// included), delayed, or reserved for a waiter.
#[test]
fn multi_acquire_gets_all_or_none_and_names_every_conflict() {
    let mut log = Log::new();
    log.delayed_token("delayed", "z", 60_000);
    log.ticks(32);
    log.token("held", "y", 60_000);
    log.token("own", "x", 60_000);
    log.many_token(&["gate"], "w");
    log.acquire_many(&["gate", "reserved"], "v", Some(60_000), None);
    let before = log.table.clone();
    let refused = log.acquire_many(&["free", "held", "own", "delayed", "reserved"], "x", None, None);
    let until = log.table.delayed_until("delayed").unwrap();
    let reasons: Vec<_> = match refused.result {
        Err(LockError::Conflicts { conflicts }) => conflicts.into_iter().map(|c| (c.name, c.blocker)).collect(),
        other => panic!("{other:?}"),
    };
    assert!(matches!(&reasons[0], (n, Blocker::Held { holder, .. }) if n == "held" && holder == "y"), "{reasons:?}");
    assert!(matches!(&reasons[1], (n, Blocker::Held { holder, .. }) if n == "own" && holder == "x"), "{reasons:?}");
    assert_eq!(reasons[2], ("delayed".to_string(), Blocker::Delayed { delayed_until_tick: until }));
    assert_eq!(reasons[3], ("reserved".to_string(), Blocker::Reserved { first_waiter: "v".into() }));
    assert_eq!(reasons.len(), 4);
    assert!(refused.events.is_empty());
    assert_eq!(log.table, before, "a refused multi-acquire changed the table");
}

// Ensures the holder of a whole set under one token gets the same token back
// with every lease restarted, as a single re-acquire does.
#[test]
fn multi_reacquire_of_the_whole_set_keeps_its_token() {
    let mut log = Log::new();
    let token = log.many_token(&["a", "b"], "x");
    log.ticks(20);
    match log.acquire_many(&["b", "a"], "x", None, None).result {
        Ok(Outcome::GrantedMany { grants, reacquired: true }) => {
            assert!(grants.iter().all(|g| g.token == token && g.deadline_tick == log.table.now_tick() + 31));
        }
        other => panic!("{other:?}"),
    }
    assert!(log.ticks(30).is_empty(), "the old deadlines are gone");
    assert_eq!(log.tick().len(), 2);
}

// Ensures a list of locks is checked: 1 to 64 distinct valid names.
#[test]
fn multi_acquire_names_are_validated() {
    let mut log = Log::new();
    let field = |r: Result<Outcome, LockError>| match r {
        Err(LockError::Invalid(i)) => i.field,
        other => panic!("{other:?}"),
    };
    assert_eq!(field(log.acquire_many(&[], "x", None, None).result), "names");
    assert_eq!(field(log.acquire_many(&["a", "b", "a"], "x", None, None).result), "names");
    assert_eq!(field(log.acquire_many(&["a", ""], "x", None, None).result), "names");
    let many: Vec<String> = (0..=Limits::DEFAULT.max_names).map(|i| i.to_string()).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert_eq!(field(log.acquire_many(&many, "x", None, None).result), "names");
    assert!(matches!(log.acquire_many(&many[1..], "x", None, None).result, Ok(Outcome::GrantedMany { .. })));
}

// Ensures a waiting multi-acquire holds no lock before it holds all: a lock
// freed while it is first in line stays free, reserved (refused to a
// try-acquire, queued behind it for a waiting one), and the entry that frees
// its last lock grants it every lock under that entry's index.
#[test]
fn waiting_multi_acquire_reserves_and_is_granted_all_at_once() {
    let mut log = Log::new();
    let a = log.token("a", "x", 60_000);
    let b = log.token("b", "y", 60_000);
    let queued = log.acquire_many(&["a", "b"], "m", Some(60_000), None).result;
    let positions = vec![("a".to_string(), 1), ("b".to_string(), 1)];
    assert_eq!(queued, Ok(Outcome::QueuedMany { owner: "m".into(), positions: positions.clone() }));
    let retried = log.acquire_many(&["a", "b"], "m", Some(60_000), None);
    assert_eq!(retried.result, Ok(Outcome::QueuedMany { owner: "m".into(), positions }));
    assert!(retried.events.is_empty(), "a retry keeps its places");

    log.release("b", b).unwrap();
    assert_eq!(log.holder("b"), None, "m holds part of its set");
    assert_eq!(log.acquire("b", "s", 3000), Err(LockError::Reserved { name: "b".into(), first_waiter: "m".into() }));
    let behind = log.wait("b", "s", 60_000, None).result;
    assert_eq!(behind, Ok(Outcome::Queued { name: "b".into(), owner: "s".into(), position: 2 }));

    let released = log.release_many(&["a"], a);
    let index = t(log.index);
    assert_eq!(
        story(&released),
        [
            ("a".to_string(), EventKind::Released { owner: "x".into(), token: a, held_ticks: 0 }),
            (
                "a".to_string(),
                EventKind::HandedOver { owner: "m".into(), token: index, from_owner: "x".into(), from_token: a }
            ),
            ("b".to_string(), EventKind::Acquired { owner: "m".into(), token: index }),
        ]
    );
    assert_eq!(log.owners(&["a", "b"]), vec![Some(("m".to_string(), index)); 2]);
    assert!(index > a && index > b);
    // s waited behind m on b, and gets it as soon as m is done.
    log.release_many(&["a", "b"], index).result.unwrap();
    assert_eq!(log.holder("b"), Some(("s".to_string(), t(log.index))));
    assert_eq!(log.holder("a"), None);
}

// Ensures a multi-waiter is not starved by a stream of single acquires on one
// of its locks: those that arrive after it wait behind it, and the ones
// before it are served first, in FIFO order.
#[test]
fn multi_waiter_is_not_starved_by_single_acquires() {
    let mut log = Log::new();
    let mut b = log.token("b", "s0", 60_000);
    let a = log.token("a", "x", 60_000);
    log.wait("b", "s1", 60_000, None);
    log.acquire_many(&["a", "b"], "m", Some(60_000), None);
    for i in 2..=5 {
        log.wait("b", &format!("s{i}"), 60_000, None);
    }
    // s0 hands b to s1, who came before m; s1's release leaves b reserved.
    log.release("b", b).unwrap();
    b = t(log.index);
    assert_eq!(log.holder("b"), Some(("s1".to_string(), b)));
    log.release("b", b).unwrap();
    assert_eq!(log.holder("b"), None);
    for i in 6..=9 {
        assert!(matches!(log.acquire("b", &format!("late{i}"), 3000), Err(LockError::Reserved { .. })));
    }
    log.release("a", a).unwrap();
    let m = t(log.index);
    assert_eq!(log.owners(&["a", "b"]), vec![Some(("m".to_string(), m)); 2]);
    // Behind m the singles go in their order, each granted in the entry that frees b.
    log.release_many(&["a", "b"], m).result.unwrap();
    for i in 2..=5 {
        let (owner, token) = log.holder("b").unwrap();
        assert_eq!((owner, token), (format!("s{i}"), t(log.index)));
        log.release("b", token).unwrap();
    }
    assert!(log.table.queues.is_empty());
}

// Ensures waiting multi-acquires whose sets overlap in any order cannot wait
// for each other: the earlier one is first in every queue it shares.
#[test]
fn overlapping_multi_waiters_do_not_deadlock() {
    let mut log = Log::new();
    let a = log.token("a", "x", 60_000);
    let b = log.token("b", "y", 60_000);
    log.acquire_many(&["a", "b"], "m1", Some(60_000), None);
    log.acquire_many(&["b", "a"], "m2", Some(60_000), None);
    log.release("b", b).unwrap();
    assert_eq!(log.owners(&["a", "b"]), [Some(("x".to_string(), a)), None], "b is reserved for m1");
    log.release("a", a).unwrap();
    let first = t(log.index);
    assert_eq!(log.owners(&["a", "b"]), vec![Some(("m1".to_string(), first)); 2]);
    log.release_many(&["b", "a"], first).result.unwrap();
    let second = t(log.index);
    assert_eq!(log.owners(&["a", "b"]), vec![Some(("m2".to_string(), second)); 2]);
    assert!(second > first);
}

// Ensures a multi-waiter whose wait runs out leaves every queue in the Tick
// that ends it, its request id answers wait_timeout, and each lock it
// reserved passes on to the next waiter in that same entry.
#[test]
fn multi_wait_timeout_leaves_every_queue_and_passes_locks_on() {
    let mut log = Log::new();
    log.token("a", "x", 60_000);
    log.acquire_many(&["a", "b"], "m", Some(1_000), Some("req-m"));
    log.wait("b", "s", 60_000, None);
    assert_eq!(log.holder("b"), None, "b is reserved for m");
    let ended: Vec<Applied> = (0..10).map(|_| log.apply_with_events(Command::Tick { period_ms: TICK })).collect();
    let last = ended.last().unwrap();
    assert_eq!(
        story(last),
        [
            ("a".to_string(), EventKind::WaitTimeout { owner: "m".into() }),
            ("b".to_string(), EventKind::WaitTimeout { owner: "m".into() }),
            ("b".to_string(), EventKind::Acquired { owner: "s".into(), token: t(log.index) }),
        ]
    );
    assert!(!log.table.is_waiting("a", "m") && !log.table.is_waiting("b", "m"));
    let replay = log.acquire_many(&["a", "b"], "m", Some(1_000), Some("req-m")).result;
    assert_eq!(replay, Err(LockError::WaitTimeout { name: "a".into() }));
}

// Ensures a Cancel naming any one lock of a multi-waiter removes it from
// every queue and hands each lock on in the cancelling entry.
#[test]
fn cancel_removes_a_multi_waiter_everywhere() {
    let mut log = Log::new();
    log.token("a", "x", 60_000);
    log.acquire_many(&["a", "b", "c"], "m", Some(60_000), Some("req-m"));
    log.wait("c", "s", 60_000, None);
    let cancelled = log.cancel("a", "m");
    assert_eq!(cancelled.result, Ok(Outcome::Cancelled { name: "a".into(), owner: "m".into(), removed: true }));
    let kinds: Vec<_> = story(&cancelled);
    assert_eq!(kinds.len(), 4, "{kinds:?}");
    assert_eq!(kinds[3], ("c".to_string(), EventKind::Acquired { owner: "s".into(), token: t(log.index) }));
    assert!(["a", "b", "c"].iter().all(|n| !log.table.is_waiting(n, "m")));
    assert_eq!(log.holder("b"), None);
    // The id may be used again, as after a single cancelled wait.
    assert!(matches!(log.acquire_many(&["b"], "m", None, Some("req-m")).result, Ok(Outcome::GrantedMany { .. })));
}

// Ensures an owner waits for a lock in one request at a time: a single and
// a multi-acquire of the same lock by one waiting owner are refused.
#[test]
fn an_owner_waits_for_a_lock_in_one_request() {
    let mut log = Log::new();
    log.token("a", "x", 60_000);
    log.wait("a", "w", 60_000, None);
    let multi = log.acquire_many(&["a", "b"], "w", Some(60_000), None).result;
    assert!(matches!(multi, Err(LockError::Invalid(ref i)) if i.field == "owner"), "{multi:?}");
    log.acquire_many(&["a", "c"], "v", Some(60_000), None);
    let single = log.wait("c", "v", 60_000, None).result;
    assert!(matches!(single, Err(LockError::Invalid(ref i)) if i.field == "owner"), "{single:?}");
}

// Ensures a multi-release frees all locks or none, and hands each on.
#[test]
fn multi_release_is_all_or_none() {
    let mut log = Log::new();
    let token = log.many_token(&["a", "b"], "x");
    let other = log.token("c", "y", 3000);
    log.wait("b", "w", 60_000, None);
    let before = log.table.clone();
    let stale = log.release_many(&["a", "c"], token).result;
    assert_eq!(stale, Err(LockError::StaleToken { name: "c".into(), given: token, current: other }));
    assert!(matches!(log.release_many(&["a", "free"], token).result, Err(LockError::NotHeld { .. })));
    assert_eq!(log.table, before);
    let released = log.release_many(&["a", "b"], token).result;
    assert_eq!(released, Ok(Outcome::ReleasedMany { names: names(&["a", "b"]), token }));
    assert_eq!((log.holder("a"), log.holder("b")), (None, Some(("w".to_string(), t(log.index)))));
}

// Ensures a request id de-duplicates a multi-acquire: granted at once, or
// queued and granted later (the replay tells the later grant); an id used
// for another list is refused.
#[test]
fn multi_acquire_request_id_replays_its_grant() {
    let mut log = Log::new();
    let first = log.acquire_many(&["a", "b"], "x", None, Some("r1")).result;
    let before = log.table.clone();
    assert_eq!(log.acquire_many(&["a", "b"], "x", None, Some("r1")).result, first);
    assert_eq!(log.table, before);
    assert!(matches!(
        log.acquire_many(&["a", "c"], "x", None, Some("r1")).result,
        Err(LockError::RequestIdReused { .. })
    ));

    let held = log.token("c", "y", 60_000);
    log.acquire_many(&["c", "d"], "z", Some(60_000), Some("r2"));
    log.release("c", held).unwrap();
    let handed = t(log.index);
    match log.acquire_many(&["c", "d"], "z", Some(60_000), Some("r2")).result {
        Ok(Outcome::GrantedMany { grants, .. }) => assert!(grants.iter().all(|g| g.token == handed)),
        other => panic!("{other:?}"),
    }
}

// Ensures multi-waiters, their sets and reservations survive a snapshot
// image round trip, and the restored table grants them in the same entry.
#[test]
fn multi_waiters_survive_image_round_trip() {
    let mut log = Log::new();
    let a = log.token("a", "x", 60_000);
    log.acquire_many(&["a", "b"], "m", Some(60_000), Some("q"));
    log.wait("b", "s", 60_000, None);
    let json = serde_json::to_vec(&TableImage::from(&log.table)).unwrap();
    let mut restored = LockTable::from(serde_json::from_slice::<TableImage>(&json).unwrap());
    assert_eq!(restored, log.table);
    let release = Command::Release { name: "a".into(), token: a, request_id: None, session: None, seq: None };
    let index = log.index + 1;
    assert_eq!(restored.apply(&release, index), log.table.apply(&release, index));
    assert_eq!(restored.get("b").map(|v| (v.owner, v.token)), Some(("m".into(), t(index))));
}
