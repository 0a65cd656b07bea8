//! Unit tests of sessions: their deadline, keepalives, what their end does
//! to the locks they hold and to their waiters.

use super::*;

/// A session acquire of `name` for `owner` (try, or waiting `wait_ms`).
fn under(name: &str, owner: &str, session: SessionId, wait_ms: Option<u64>, lock_delay_ms: Option<u64>) -> Command {
    Command::Acquire {
        name: name.into(),
        owner: owner.into(),
        ttl_ms: None,
        session: Some(session),
        wait_ms,
        request_id: None,
        lock_delay_ms,
        seq: None,
    }
}

/// A session multi-acquire of `names` for `owner`, without waiting.
fn many_under(names: Vec<String>, owner: &str, session: SessionId) -> Command {
    Command::AcquireMany {
        names,
        owner: owner.into(),
        ttl_ms: None,
        session: Some(session),
        wait_ms: None,
        request_id: None,
        lock_delay_ms: None,
        seq: None,
    }
}

impl Log {
    fn create_session(&mut self, owner: &str, ttl_ms: u64) -> SessionId {
        match self.apply(Command::CreateSession { owner: owner.into(), ttl_ms, request_id: None, by: None }) {
            Ok(Outcome::SessionCreated { session }) => session.session,
            other => panic!("expected a session, got {other:?}"),
        }
    }
    fn keep_alive(&mut self, session: SessionId) -> Result<Outcome, LockError> {
        self.apply(Command::KeepAlive { session, ttl_ms: None, request_id: None, seq: None })
    }
    fn delete_session(&mut self, session: SessionId) -> Applied {
        self.apply_with_events(Command::DeleteSession { session, request_id: None })
    }
    fn session_token(&mut self, name: &str, owner: &str, session: SessionId) -> FencingToken {
        match self.apply(under(name, owner, session, None, None)) {
            Ok(Outcome::Granted { grant, .. }) => grant.token,
            other => panic!("expected a grant, got {other:?}"),
        }
    }
    fn tick_with_events(&mut self) -> Applied {
        self.apply_with_events(Command::Tick { period_ms: TICK })
    }
}

// Ensures a session's id is the index of the entry that created it, and
// that its deadline follows the lease rule: now + ceil(ttl / tick) + 1.
#[test]
fn session_id_is_its_entry_and_deadline_is_the_lease_rule() {
    let mut log = Log::new();
    let first = log.create_session("alice", 3050);
    assert_eq!(first, log.index);
    let second = log.create_session("alice", 3050);
    assert!(second > first);
    let view = log.table.session(first).unwrap();
    assert_eq!((view.owner.as_str(), view.ttl_ms), ("alice", 3050));
    assert_eq!(view.deadline_tick, log.table.now_tick() + 31 + 1);
    assert_eq!(view.locks, Some(Vec::new()));
    assert_eq!(log.table.sessions(), 2);
}

// Ensures the Tick that expires a session, not one earlier, expires every
// lock it holds and hands each to its first waiter in that same entry,
// under that entry's index, a token above the session's grants.
#[test]
fn session_expiry_hands_its_locks_to_their_waiters_in_the_tick_entry() {
    let mut log = Log::new();
    let session = log.create_session("s", 3050); // expires 31 + 1 ticks from now
    let a = log.session_token("a", "s", session);
    let b = log.session_token("b", "s", session);
    log.wait("a", "wa", 60_000, None).result.unwrap();
    log.wait("b", "wb", 60_000, None).result.unwrap();
    assert!(log.ticks(31).is_empty(), "expired before the deadline");
    assert_eq!(log.holder("a"), Some(("s".into(), a)));

    let applied = log.tick_with_events();
    let index = t(log.index);
    match &applied.result {
        Ok(Outcome::Ticked { expired, expired_sessions, .. }) => {
            assert_eq!(expired, &[("a".to_string(), a), ("b".to_string(), b)]);
            assert_eq!(expired_sessions, &[session]);
        }
        other => panic!("{other:?}"),
    }
    let expired = |n: &str, token| {
        (n.to_string(), EventKind::Expired { owner: "s".into(), token, delayed_until_tick: None, held_ticks: 32 })
    };
    let handed = |n: &str, owner: &str, from_token| {
        let kind = EventKind::HandedOver { owner: owner.into(), token: index, from_owner: "s".into(), from_token };
        (n.to_string(), kind)
    };
    assert_eq!(
        story(&applied),
        [
            expired("a", a),
            expired("b", b),
            (String::new(), EventKind::SessionExpired { owner: "s".into(), session }),
            handed("a", "wa", a),
            handed("b", "wb", b),
        ]
    );
    assert!(index > a && index > b);
    assert_eq!(log.owners(&["a", "b"]), [Some(("wa".into(), index)), Some(("wb".into(), index))]);
    assert_eq!(log.table.session(session), None);
    assert_eq!(log.keep_alive(session), Err(LockError::SessionNotFound { session }));
}

// Ensures a keepalive moves the session's one deadline (restarting it from
// now with the lease rule), so its locks outlive their first deadline, and
// that session leases are not in the per-lease deadline index at all.
#[test]
fn keepalive_pushes_the_one_deadline_of_all_its_locks() {
    let mut log = Log::new();
    let session = log.create_session("s", 3000); // 30 + 1 ticks
    for i in 0..1000 {
        log.session_token(&format!("lock-{i}"), "s", session);
    }
    assert!(log.table.by_deadline.is_empty(), "session leases have no deadline of their own");
    log.ticks(20);
    let kept = match log.keep_alive(session).unwrap() {
        Outcome::KeptAlive { session } => session,
        other => panic!("{other:?}"),
    };
    assert_eq!(kept.deadline_tick, log.table.now_tick() + 31);
    assert_eq!(kept.lock_count, 1000);
    let grant = log.table.holder("lock-7").unwrap();
    assert_eq!((grant.deadline_tick, grant.ttl_ms), (kept.deadline_tick, 3000));
    assert!(log.ticks(30).is_empty(), "expired before the kept-alive deadline");
    assert_eq!(log.tick().len(), 1000);
    assert!(log.table.is_empty());
}

// Ensures deleting a session releases its locks (events `released`, no lock
// delay even when the grants asked for one) and hands them on in its entry.
#[test]
fn delete_releases_every_lock_without_a_delay() {
    let mut log = Log::new();
    let session = log.create_session("s", 10_000);
    let a = match log.apply(under("a", "s", session, None, Some(5000))).unwrap() {
        Outcome::Granted { grant, .. } => grant.token,
        other => panic!("{other:?}"),
    };
    log.wait("a", "w", 60_000, None).result.unwrap();
    let applied = log.delete_session(session);
    let index = t(log.index);
    assert_eq!(applied.result, Ok(Outcome::SessionDeleted { session, released: vec!["a".into()] }));
    assert_eq!(
        story(&applied),
        [
            ("a".to_string(), EventKind::Released { owner: "s".into(), token: a, held_ticks: 0 }),
            (String::new(), EventKind::SessionDeleted { owner: "s".into(), session }),
            (
                "a".to_string(),
                EventKind::HandedOver { owner: "w".into(), token: index, from_owner: "s".into(), from_token: a }
            ),
        ]
    );
    assert_eq!(log.table.delayed_until("a"), None);
    assert_eq!(log.delete_session(session).result, Err(LockError::SessionNotFound { session }));
}

// Ensures a lock held under a session with a lock delay counts as expired
// when its session expires: the delay starts in the expiring Tick.
#[test]
fn session_expiry_starts_the_lock_delay() {
    let mut log = Log::new();
    let session = log.create_session("s", 3000);
    log.apply(under("a", "s", session, None, Some(1000))).unwrap();
    log.wait("a", "w", 60_000, None).result.unwrap();
    log.ticks(30);
    let applied = log.tick_with_events();
    let until = log.table.now_tick() + 10;
    assert!(story(&applied)
        .iter()
        .any(|(n, k)| n == "a" && matches!(k, EventKind::Expired { delayed_until_tick: Some(t), .. } if *t == until)));
    assert_eq!(log.holder("a"), None, "handed over during the delay");
    assert!(matches!(log.acquire("a", "x", 3000), Err(LockError::LockDelayed { .. })));
    log.ticks(9);
    assert_eq!(log.holder("a"), None);
    log.tick();
    assert_eq!(log.holder("a").map(|(o, _)| o), Some("w".into()));
}

// Ensures a multi-acquire under a session takes every lock under one token,
// all kept by the session, and that its expiry frees them together, so a
// multi-acquire waiting for several of them is granted in that entry.
#[test]
fn multi_acquire_under_a_session() {
    let mut log = Log::new();
    let session = log.create_session("s", 3000);
    let applied = log.apply_with_events(many_under(names(&["a", "b"]), "s", session));
    let token = t(log.index);
    assert!(matches!(applied.result, Ok(Outcome::GrantedMany { .. })), "{:?}", applied.result);
    let locks = log.table.session(session).unwrap().locks.unwrap();
    assert_eq!(locks, [SessionLock { name: "a".into(), token }, SessionLock { name: "b".into(), token }]);
    assert!(matches!(log.acquire_many(&["a", "b"], "w", Some(60_000), None).result, Ok(Outcome::QueuedMany { .. })));
    log.ticks(30);
    assert_eq!(log.owners(&["a", "b"]), vec![Some(("s".into(), token)); 2]);
    log.tick();
    let index = t(log.index);
    assert_eq!(log.owners(&["a", "b"]), vec![Some(("w".into(), index)); 2]);
}

// Ensures a session's queued waiters leave their queues when it ends, by
// delete or expiry (event `cancelled`), their request answered
// `session_not_found`, and the lock passes to whoever is next.
#[test]
fn waiters_of_an_ended_session_leave_their_queues() {
    let mut log = Log::new();
    let held = log.token("a", "h", 60_000);
    let deleted = log.create_session("s", 10_000);
    let mut wait = under("a", "s", deleted, Some(60_000), None);
    if let Command::Acquire { request_id, .. } = &mut wait {
        *request_id = Some("r1".into());
    }
    assert!(matches!(log.apply(wait.clone()), Ok(Outcome::Queued { .. })));
    assert_eq!(log.table.session(deleted).unwrap().waiting_count, 1);
    let expiring = log.create_session("e", 3000);
    let multi = Command::AcquireMany {
        names: names(&["a", "b"]),
        owner: "e".into(),
        ttl_ms: None,
        session: Some(expiring),
        wait_ms: Some(60_000),
        request_id: None,
        lock_delay_ms: None,
        seq: None,
    };
    assert!(matches!(log.apply(multi), Ok(Outcome::QueuedMany { .. })));
    log.wait("a", "next", 60_000, None).result.unwrap();

    let applied = log.delete_session(deleted);
    assert!(story(&applied).contains(&("a".into(), EventKind::Cancelled { owner: "s".into() })));
    assert!(!log.table.is_waiting("a", "s"));
    assert_eq!(log.table.granted_by_record(&wait), None, "its wait ended without a grant");
    assert_eq!(log.apply(wait), Err(LockError::SessionNotFound { session: deleted }), "the retry's answer");

    log.ticks(31);
    assert!(!log.table.is_waiting("a", "e") && !log.table.is_waiting("b", "e"));
    assert_eq!(log.table.holder("b"), None, "never granted to the ended session");
    log.release("a", held).unwrap();
    assert_eq!(log.holder("a").map(|(o, _)| o), Some("next".into()));
}

// Ensures a session waiter granted before its session ended is told its
// grant by a retry after the end (the request record outlives the session's
// answers), and that its record names the grant, not only its queuing: a
// retry answered `session_not_found` would say it never took effect. A
// retry with only its seq, whose answer the session took with it, is
// answered `session_not_found`.
#[test]
fn a_waiter_granted_before_its_session_ended_is_told_its_grant_on_retry() {
    let mut log = Log::new();
    let held = log.token("a", "h", 60_000);
    let session = log.create_session("s", 3000);
    let wait = Command::AcquireMany {
        names: names(&["a", "b"]),
        owner: "s".into(),
        ttl_ms: None,
        session: Some(session),
        wait_ms: Some(60_000),
        request_id: Some("r".into()),
        lock_delay_ms: None,
        seq: Some(1),
    };
    assert!(matches!(log.apply(wait.clone()), Ok(Outcome::QueuedMany { .. })));
    assert_eq!(log.table.granted_by_record(&wait), None, "queued, not granted yet");
    log.release("a", held).unwrap();
    let granted = t(log.index);
    assert_eq!(log.holder("b"), Some(("s".into(), granted)));
    assert_eq!(log.table.granted_by_record(&wait), Some(granted));

    log.ticks(40);
    assert!(log.table.session(session).is_none(), "expired");
    assert_eq!(log.holder("a"), None);
    match log.apply(wait.clone()) {
        Ok(Outcome::GrantedMany { grants, .. }) => assert!(grants.iter().all(|g| g.token == granted)),
        other => panic!("expected the first grant, got {other:?}"),
    }
    assert_eq!((log.holder("a"), log.holder("b")), (None, None), "not applied again");
    assert_eq!(log.table.granted_by_record(&wait), Some(granted));

    let seq_only = match wait {
        Command::AcquireMany { names, owner, ttl_ms, session, wait_ms, lock_delay_ms, seq, .. } => {
            Command::AcquireMany { names, owner, ttl_ms, session, wait_ms, request_id: None, lock_delay_ms, seq }
        }
        other => other,
    };
    assert_eq!(log.apply(seq_only), Err(LockError::SessionNotFound { session }));
}

// Ensures a lock taken under a session can be released by its token, after
// which the session no longer counts it and its end leaves the lock alone.
#[test]
fn release_of_a_session_lock_leaves_the_session() {
    let mut log = Log::new();
    let session = log.create_session("s", 3000);
    let token = log.session_token("a", "s", session);
    log.release("a", token).unwrap();
    assert_eq!(log.table.session(session).unwrap().lock_count, 0);
    let other = log.token("a", "x", 60_000);
    log.ticks(31);
    assert_eq!(log.table.session(session), None);
    assert_eq!(log.holder("a"), Some(("x".into(), other)));
}

// Ensures every misuse of a session is refused with a clear error and
// changes nothing.
#[test]
fn session_misuse_is_refused_and_changes_nothing() {
    let mut log = Log::new();
    let session = log.create_session("s", 10_000);
    let field = |r: Result<Outcome, LockError>| match r {
        Err(LockError::Invalid(invalid)) => invalid.field,
        other => panic!("expected invalid, got {other:?}"),
    };
    let mut both = under("a", "s", session, None, None);
    if let Command::Acquire { ttl_ms, .. } = &mut both {
        *ttl_ms = Some(5000);
    }
    assert_eq!(field(log.apply(both)), "session");
    let mut neither = under("a", "s", session, None, None);
    if let Command::Acquire { session, .. } = &mut neither {
        *session = None;
    }
    assert_eq!(field(log.apply(neither)), "ttl_ms");
    assert_eq!(field(log.apply(under("a", "mallory", session, None, None))), "owner");
    assert_eq!(log.apply(under("a", "s", 999, None, None)), Err(LockError::SessionNotFound { session: 999 }));
    let short = Command::CreateSession { owner: "s".into(), ttl_ms: 10, request_id: None, by: None };
    let full = log.table.sessions();
    assert_eq!(field(log.apply(short)), "ttl_ms");
    assert_eq!((log.table.len(), log.table.sessions()), (0, full));

    let token = log.session_token("a", "s", session);
    assert_eq!(log.renew("a", token, None), Err(LockError::HeldUnderSession { name: "a".into(), session }));
    assert_eq!(field(log.acquire("a", "s", 5000)), "session", "a re-acquire must name the same session");
    let reacquired = log.apply(under("a", "s", session, None, None));
    assert!(matches!(reacquired, Ok(Outcome::Granted { reacquired: true, ref grant }) if grant.token == token));
    assert_eq!(log.table.session(session).unwrap().lock_count, 1);
    assert_eq!(log.keep_alive(999), Err(LockError::SessionNotFound { session: 999 }));
}

// Ensures sessions survive an image round trip with their locks, waiters
// and deadline index, and that an image from before sessions still loads.
#[test]
fn sessions_survive_image_round_trip() {
    let mut log = Log::new();
    let session = log.create_session("s", 3000);
    log.session_token("a", "s", session);
    log.token("b", "x", 60_000);
    log.apply(under("b", "s", session, Some(60_000), None)).unwrap();
    let json = serde_json::to_vec(&TableImage::from(&log.table)).unwrap();
    let mut restored = LockTable::from(serde_json::from_slice::<TableImage>(&json).unwrap());
    assert_eq!(restored, log.table);
    let expired: Vec<SessionId> = (1..=40)
        .flat_map(|i| match restored.apply(&Command::Tick { period_ms: TICK }, log.index + i).result {
            Ok(Outcome::Ticked { expired_sessions, .. }) => expired_sessions,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(expired, [session], "the restored deadline index expires the session");
    assert!(!restored.is_waiting("b", "s"));

    let mut old = serde_json::to_value(TableImage::from(&LockTable::new())).unwrap();
    old.as_object_mut().unwrap().remove("sessions");
    assert!(serde_json::from_value::<TableImage>(old).is_ok());
}

/// `command` with sequence number `seq` (an acquire, release or keepalive).
fn with_seq(mut command: Command, number: u64) -> Command {
    match &mut command {
        Command::Acquire { seq, .. }
        | Command::AcquireMany { seq, .. }
        | Command::Release { seq, .. }
        | Command::ReleaseMany { seq, .. }
        | Command::KeepAlive { seq, .. } => *seq = Some(number),
        other => panic!("{other} has no seq"),
    }
    command
}

// Ensures a retried session request with a seq the session remembers gets
// its first answer without being applied again, long after request ids
// would have been forgotten, and survives an image round trip.
#[test]
fn a_remembered_seq_replays_its_first_answer() {
    let mut log = Log::new();
    let session = log.create_session("s", 3_600_000);
    let acquire = with_seq(under("a", "s", session, None, None), 1);
    let first = log.apply(acquire.clone());
    let token = t(log.index);
    let release = Command::Release { name: "a".into(), token, request_id: None, session: Some(session), seq: Some(2) };
    assert!(log.apply(release.clone()).is_ok());
    log.ticks(MAX_REQUEST_AGE_MS / TICK + 10);

    assert_eq!(log.apply(acquire.clone()), first, "the first grant, not a new one");
    assert_eq!(log.holder("a"), None, "not applied again");
    assert!(matches!(log.apply(release), Ok(Outcome::Released { .. })), "the first answer, not not_held");
    let keepalive = with_seq(Command::KeepAlive { session, ttl_ms: None, request_id: None, seq: None }, 3);
    let kept = log.apply(keepalive.clone());
    log.ticks(5);
    assert_eq!(log.apply(keepalive), kept, "the same deadline: not kept alive again");

    let json = serde_json::to_vec(&TableImage::from(&log.table)).unwrap();
    let mut restored = LockTable::from(serde_json::from_slice::<TableImage>(&json).unwrap());
    assert_eq!(restored.apply(&acquire, log.index + 1).result, first);
}

// Ensures a seq reused for another request (another lock, or another kind
// of request) is refused with seq_reused and changes nothing, while the
// request it answered still replays its answer.
#[test]
fn a_seq_reused_for_another_request_is_refused() {
    let mut log = Log::new();
    let session = log.create_session("s", 3_600_000);
    let acquire = with_seq(under("a", "s", session, None, None), 1);
    let first = log.apply(acquire.clone());
    let token = t(log.index);
    let before = log.table.clone();
    for other in [
        with_seq(under("b", "s", session, None, None), 1),
        with_seq(many_under(vec!["a".into()], "s", session), 1),
        Command::Release { name: "a".into(), token, request_id: None, session: Some(session), seq: Some(1) },
        with_seq(Command::KeepAlive { session, ttl_ms: None, request_id: None, seq: None }, 1),
    ] {
        assert_eq!(log.apply(other.clone()), Err(LockError::SeqReused { session, seq: 1 }), "{other}");
        assert_eq!(log.table, before, "{other} changed nothing");
    }
    assert_eq!(log.apply(acquire), first, "the first request still replays");
}

// Ensures an answer stored before answers recorded what they answered (a
// session row without `asked`) still loads and replays.
#[test]
fn answers_stored_without_what_they_answered_still_replay() {
    let mut log = Log::new();
    let session = log.create_session("s", 3_600_000);
    let keepalive = with_seq(Command::KeepAlive { session, ttl_ms: None, request_id: None, seq: None }, 1);
    let kept = log.apply(keepalive.clone());
    let mut image = serde_json::to_value(TableImage::from(&log.table)).unwrap();
    let answer = image["sessions"][session.to_string()]["answers"]["1"].as_object_mut().unwrap();
    assert!(answer.remove("asked").is_some(), "{answer:?}");
    let mut restored = LockTable::from(serde_json::from_value::<TableImage>(image).unwrap());
    assert_eq!(restored.apply(&keepalive, log.index + 1).result, kept);
}

// Ensures a session remembers its last MAX_SESSION_ANSWERS answers only: an
// older seq is refused with seq_too_old (never applied twice), a new seq
// below the highest (requests may arrive out of order) is applied, and seq
// needs a session.
#[test]
fn seq_memory_is_bounded_and_older_ones_are_refused() {
    let mut log = Log::new();
    let session = log.create_session("s", 3_600_000);
    let keepalive = |seq| with_seq(Command::KeepAlive { session, ttl_ms: None, request_id: None, seq: None }, seq);
    for seq in (3..=MAX_SESSION_ANSWERS as u64 + 3).rev() {
        assert!(log.apply(keepalive(seq)).is_ok());
    }
    assert_eq!(log.apply(keepalive(3)), Err(LockError::SeqTooOld { session, seq: 3, oldest: 4 }));
    assert_eq!(log.apply(keepalive(1)), Err(LockError::SeqTooOld { session, seq: 1, oldest: 4 }));
    assert!(matches!(log.apply(keepalive(4)), Ok(Outcome::KeptAlive { .. })));
    assert!(matches!(log.apply(keepalive(1000)), Ok(Outcome::KeptAlive { .. })));

    let unbound = with_seq(
        Command::Acquire {
            name: "a".into(),
            owner: "s".into(),
            ttl_ms: Some(5000),
            session: None,
            wait_ms: None,
            request_id: None,
            lock_delay_ms: None,
            seq: None,
        },
        1,
    );
    assert!(matches!(log.apply(unbound), Err(LockError::Invalid(i)) if i.field == "seq"));
    let other = log.create_session("s", 3_600_000);
    let token = log.session_token("a", "s", other);
    let wrong = Command::Release { name: "a".into(), token, request_id: None, session: Some(session), seq: None };
    assert!(matches!(log.apply(wrong), Err(LockError::Invalid(i)) if i.field == "session"));
    assert_eq!(log.holder("a"), Some(("s".into(), token)));
}

// Ensures one Tick grants each lock once, whatever ends in it together: a
// session waiting for the lock of another session that expires with it, and
// a session waiting for a ttl lease that expires with it, get nothing; the
// next waiter is granted, once, under that Tick's index.
#[test]
fn what_ends_in_one_tick_is_granted_once() {
    let mut log = Log::new();
    let first = log.create_session("s1", 3000);
    let second = log.create_session("s2", 3000);
    log.session_token("a", "s1", first);
    log.token("b", "x", 3000);
    log.apply(under("a", "s2", second, Some(60_000), None)).unwrap();
    log.apply(under("b", "s2", second, Some(60_000), None)).unwrap();
    log.wait("a", "wa", 60_000, None).result.unwrap();
    log.wait("b", "wb", 60_000, None).result.unwrap();
    log.ticks(30);
    let applied = log.tick_with_events();
    let index = t(log.index);
    let granted: Vec<(String, String)> = applied
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Acquired { owner, .. } | EventKind::HandedOver { owner, .. } => {
                Some((e.name.clone(), owner.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(granted, [("a".to_string(), "wa".to_string()), ("b".to_string(), "wb".to_string())]);
    assert_eq!(log.owners(&["a", "b"]), [Some(("wa".into(), index)), Some(("wb".into(), index))]);
    assert_eq!(log.table.sessions(), 0);
}

// Ensures the number of live sessions is bounded: one more is refused with
// Full, and a session that ends makes room again.
#[test]
fn live_sessions_are_bounded() {
    let mut log = Log::new();
    let first = log.create_session("s0", 3_600_000);
    for i in 1..MAX_SESSIONS {
        log.create_session(&format!("s{i}"), 3_600_000);
    }
    let one_more = Command::CreateSession { owner: "late".into(), ttl_ms: 3_600_000, request_id: None, by: None };
    assert_eq!(log.apply(one_more.clone()), Err(LockError::Full { what: "sessions".into(), limit: MAX_SESSIONS }));
    log.delete_session(first).result.unwrap();
    assert!(matches!(log.apply(one_more), Ok(Outcome::SessionCreated { .. })));
}

// Ensures what all sessions remember together is bounded by lock names
// (MAX_REMEMBERED_NAMES), oldest first across sessions: sessions whose
// answers are 64-name conflicts fill the budget; the first answer given is
// then forgotten (seq_too_old, not applied again) while the latest is still
// replayed; ending a session gives its share back.
#[test]
fn remembered_answers_are_bounded_across_sessions() {
    let mut log = Log::new();
    let held: Vec<String> = (0..64).map(|i| format!("held-{i}")).collect();
    let held_refs: Vec<&str> = held.iter().map(String::as_str).collect();
    log.many_token(&held_refs, "holder");
    let conflict = |session, seq| with_seq(many_under(held.clone(), "s", session), seq);
    let answers_to_fill = MAX_REMEMBERED_NAMES / 64;
    let sessions: Vec<SessionId> =
        (0..answers_to_fill.div_ceil(MAX_SESSION_ANSWERS)).map(|_| log.create_session("s", 3_600_000)).collect();
    let mut given = Vec::new();
    'fill: for &session in &sessions {
        for seq in 1..=MAX_SESSION_ANSWERS as u64 {
            if given.len() == answers_to_fill {
                break 'fill;
            }
            assert!(matches!(log.apply(conflict(session, seq)), Err(LockError::Conflicts { .. })));
            given.push((session, seq));
        }
    }
    let (first_session, _) = given[0];
    assert_eq!(log.table.answer_weight, MAX_REMEMBERED_NAMES, "exactly full: nothing forgotten yet");
    assert!(matches!(log.apply(conflict(first_session, 1)), Err(LockError::Conflicts { .. })), "replayed");

    let latest = log.create_session("s", 3_600_000);
    log.apply(conflict(latest, 1)).unwrap_err();
    assert_eq!(log.table.answer_weight, MAX_REMEMBERED_NAMES, "one forgotten for the new one");
    assert_eq!(
        log.apply(conflict(first_session, 1)),
        Err(LockError::SeqTooOld { session: first_session, seq: 1, oldest: 2 })
    );
    assert!(matches!(log.apply(conflict(first_session, 2)), Err(LockError::Conflicts { .. })), "still replayed");

    let (last_session, _) = *given.last().unwrap();
    let share = 64 * log.table.sessions[&last_session].answers.len();
    log.delete_session(last_session).result.unwrap();
    assert_eq!(log.table.answer_weight, MAX_REMEMBERED_NAMES - share);
}

// Ensures an image rebuilds the order in which answers are forgotten, and
// that one written before answers carried their entry's index is still
// read: such answers count as the oldest.
#[test]
fn images_keep_the_answer_order_and_read_bare_answers_as_oldest() {
    let mut log = Log::new();
    let session = log.create_session("s", 3_600_000);
    log.apply(with_seq(Command::KeepAlive { session, ttl_ms: None, request_id: None, seq: None }, 1)).unwrap();
    let mut image = serde_json::to_value(TableImage::from(&log.table)).unwrap();
    let answer = &mut image["sessions"][session.to_string()]["answers"]["1"];
    *answer = answer["result"].take();
    let restored = LockTable::from(serde_json::from_value::<TableImage>(image).unwrap());
    assert_eq!(restored.answer_order.first(), Some(&(0, session, 1)));
    assert_eq!(restored.answer_weight, 1);

    log.apply(with_seq(Command::KeepAlive { session, ttl_ms: None, request_id: None, seq: None }, 2)).unwrap();
    let json = serde_json::to_vec(&TableImage::from(&log.table)).unwrap();
    let restored = LockTable::from(serde_json::from_slice::<TableImage>(&json).unwrap());
    assert_eq!(restored, log.table, "the answer order and weight are rebuilt from the image");
}
