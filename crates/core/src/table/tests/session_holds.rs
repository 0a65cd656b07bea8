//! Unit tests of semaphore permits and shared (read) locks held under a
//! session instead of a ttl: granted and kept by the session, returned and
//! handed on in the entry that ends it, and refused when asked badly.

use super::*;

/// What an acquire's lease lives by, as its fields: `(ttl_ms, session)`.
type By = (Option<u64>, Option<SessionId>);

fn ttl(ms: u64) -> By {
    (Some(ms), None)
}

fn by_session(id: SessionId) -> By {
    (None, Some(id))
}

/// An acquire of one permit of semaphore `name` (limit `limit`) for `owner`.
fn permit(name: &str, owner: &str, limit: u32, (ttl_ms, session): By, wait_ms: Option<u64>) -> Command {
    Command::AcquirePermits {
        name: name.into(),
        owner: owner.into(),
        limit,
        permits: None,
        ttl_ms,
        session,
        wait_ms,
        request_id: None,
        seq: None,
    }
}

/// A shared acquire of lock `name` for `owner`.
fn read(name: &str, owner: &str, (ttl_ms, session): By, wait_ms: Option<u64>) -> Command {
    Command::AcquireShared {
        name: name.into(),
        owner: owner.into(),
        ttl_ms,
        session,
        wait_ms,
        request_id: None,
        seq: None,
    }
}

impl Log {
    fn open_session(&mut self, owner: &str, ttl_ms: u64) -> SessionId {
        match self.apply(Command::CreateSession { owner: owner.into(), ttl_ms, request_id: None, by: None }) {
            Ok(Outcome::SessionCreated { session }) => session.session,
            other => panic!("expected a session, got {other:?}"),
        }
    }
    fn permit_grant(&mut self, command: Command) -> PermitGrant {
        match self.apply(command) {
            Ok(Outcome::PermitsGranted { grant, .. }) => grant,
            other => panic!("expected permits, got {other:?}"),
        }
    }
    fn read_grant(&mut self, command: Command) -> Grant {
        match self.apply(command) {
            Ok(Outcome::Granted { grant, .. }) => grant,
            other => panic!("expected a shared grant, got {other:?}"),
        }
    }
    fn permit_owners(&self, name: &str) -> Vec<(String, FencingToken)> {
        let holders = self.table.semaphore(name).map_or_else(Vec::new, |s| s.holders);
        holders.into_iter().map(|h| (h.owner, h.token)).collect()
    }
    fn readers(&self, name: &str) -> Vec<(String, FencingToken)> {
        self.table.shared_holders(name).into_iter().map(|g| (g.owner, g.token)).collect()
    }
}

// Ensures a permit and a shared lock taken under a session are granted with
// the index of their entry as token, live by the session's ttl and deadline
// (no deadline of their own), and are kept past their first deadline by the
// session's keepalive alone.
#[test]
fn permits_and_shared_locks_live_by_their_session() {
    let mut log = Log::new();
    let session = log.open_session("s", 3000); // 30 + 1 ticks
    let permits = log.permit_grant(permit("sem", "s", 2, by_session(session), None));
    assert_eq!(permits.token, t(log.index));
    let shared = log.read_grant(read("r", "s", by_session(session), None));
    assert_eq!(shared.token, t(log.index));
    let deadline = log.table.session(session).unwrap().deadline_tick;
    assert_eq!((permits.ttl_ms, permits.deadline_tick), (3000, deadline));
    assert_eq!((shared.ttl_ms, shared.deadline_tick), (3000, deadline));
    assert!(log.table.by_permit_deadline.is_empty() && log.table.by_shared_deadline.is_empty());

    log.ticks(20);
    log.apply(Command::KeepAlive { session, ttl_ms: None, request_id: None, seq: None }).unwrap();
    assert!(log.ticks(20).is_empty(), "ended before the kept-alive deadline");
    assert_eq!(log.permit_owners("sem"), [("s".to_string(), permits.token)]);
    assert_eq!(log.readers("r"), [("s".to_string(), shared.token)]);
    let kept = log.table.semaphore("sem").unwrap().holders[0].expires_in_ms;
    assert_eq!(kept, log.table.shared_holder("r", "s").unwrap().expires_in_ms);
    assert!(kept > 0);
}

// Ensures the Tick that expires a session returns its permits and ends its
// shared hold in that entry (as expiries), and grants the waiters then
// first — a permit waiter and an exclusive waiter — under that entry's index.
#[test]
fn session_expiry_hands_permits_and_shared_locks_to_waiters() {
    let mut log = Log::new();
    let session = log.open_session("s", 3000);
    let permits = log.permit_grant(permit("sem", "s", 1, by_session(session), None)).token;
    let shared = log.read_grant(read("r", "s", by_session(session), None)).token;
    log.apply(permit("sem", "w", 1, ttl(3000), Some(60_000))).unwrap();
    log.wait("r", "x", 60_000, None).result.unwrap();
    assert!(log.ticks(30).is_empty(), "expired before the session's deadline");

    let applied = log.apply_with_events(Command::Tick { period_ms: TICK });
    let index = t(log.index);
    match &applied.result {
        Ok(Outcome::Ticked { expired, expired_sessions, .. }) => {
            assert_eq!(expired, &[("r".to_string(), shared), ("sem".to_string(), permits)]);
            assert_eq!(expired_sessions, &[session]);
        }
        other => panic!("{other:?}"),
    }
    let story = story(&applied);
    let expired = EventKind::Expired { owner: "s".into(), token: shared, delayed_until_tick: None, held_ticks: 31 };
    assert!(story.contains(&("r".into(), expired)));
    assert!(
        story.contains(&("sem".into(), EventKind::PermitsExpired { owner: "s".into(), token: permits, permits: 1 }))
    );
    assert_eq!(log.permit_owners("sem"), [("w".to_string(), index)]);
    assert_eq!(log.holder("r"), Some(("x".into(), index)));
    assert!(log.readers("r").is_empty());
}

// Ensures deleting a session releases its permits and shared holds in the
// delete's entry (as releases), and hands them on in it: the waiting
// readers behind the shared hold's exclusive waiter stay queued behind it,
// and the permit waiter is granted with the delete's index as token.
#[test]
fn session_delete_releases_permits_and_shared_locks() {
    let mut log = Log::new();
    let session = log.open_session("s", 10_000);
    let permits = log.permit_grant(permit("sem", "s", 1, by_session(session), None)).token;
    let shared = log.read_grant(read("r", "s", by_session(session), None)).token;
    log.apply(permit("sem", "w", 1, ttl(3000), Some(60_000))).unwrap();
    log.wait("r", "x", 60_000, None).result.unwrap();
    log.apply(read("r", "y", ttl(3000), Some(60_000))).unwrap();

    let applied = log.apply_with_events(Command::DeleteSession { session, request_id: None });
    let index = t(log.index);
    match &applied.result {
        Ok(Outcome::SessionDeleted { released, .. }) => assert_eq!(released, &["r", "sem"]),
        other => panic!("{other:?}"),
    }
    let story = story(&applied);
    assert!(story.contains(&("r".into(), EventKind::Released { owner: "s".into(), token: shared, held_ticks: 0 })));
    let returned = EventKind::PermitsReleased { owner: "s".into(), token: permits, permits: 1 };
    assert!(story.contains(&("sem".into(), returned)));
    assert_eq!(log.permit_owners("sem"), [("w".to_string(), index)]);
    assert_eq!(log.holder("r"), Some(("x".into(), index)));
    assert!(log.table.is_waiting("r", "y"), "a later reader does not overtake the writer");
}

// Ensures ttl holders and session holders of one semaphore and one lock
// mix: the session's end takes only its own holds, the ttl ones run on to
// their own deadline, and the limit counts both kinds.
#[test]
fn ttl_and_session_holders_mix() {
    let mut log = Log::new();
    let session = log.open_session("s", 10_000);
    let a = log.permit_grant(permit("sem", "a", 2, ttl(3000), None)).token;
    log.permit_grant(permit("sem", "s", 2, by_session(session), None));
    assert!(matches!(
        log.apply(permit("sem", "c", 2, ttl(3000), None)),
        Err(LockError::SemaphoreFull { in_use: 2, .. })
    ));
    let reader = log.read_grant(read("r", "a", ttl(3000), None)).token;
    log.read_grant(read("r", "s", by_session(session), None));

    log.apply(Command::DeleteSession { session, request_id: None }).unwrap();
    assert_eq!(log.permit_owners("sem"), [("a".to_string(), a)]);
    assert_eq!(log.readers("r"), [("a".to_string(), reader)]);
    let expired = log.ticks(32);
    assert_eq!(expired, [("r".to_string(), reader), ("sem".to_string(), a)]);
    assert_eq!(log.table.semaphore("sem"), None);
}

// Ensures a permit waiter and a shared waiter of a session leave their
// queues when the session ends (a retry with their request id is told
// `session_not_found`), and whoever waited behind them is served.
#[test]
fn waiters_of_a_session_leave_with_it() {
    let mut log = Log::new();
    let session = log.open_session("s", 10_000);
    let holder = log.permit_grant(permit("sem", "h", 1, ttl(3000), None)).token;
    let mut wait_permit = permit("sem", "s", 1, by_session(session), Some(60_000));
    if let Command::AcquirePermits { request_id, .. } = &mut wait_permit {
        *request_id = Some("p".into());
    }
    assert!(matches!(log.apply(wait_permit.clone()), Ok(Outcome::PermitsQueued { position: 1, .. })));
    log.apply(permit("sem", "w", 1, ttl(3000), Some(60_000))).unwrap();
    log.token("r", "h", 3000);
    log.apply(read("r", "s", by_session(session), Some(60_000))).unwrap();
    assert_eq!(log.table.session(session).unwrap().waiting_count, 1, "shared waits are lock waits");

    log.apply(Command::DeleteSession { session, request_id: None }).unwrap();
    assert!(!log.table.is_waiting_for_permits("sem", "s"));
    assert!(!log.table.is_waiting("r", "s"));
    assert_eq!(log.apply(wait_permit), Err(LockError::SessionNotFound { session }));
    log.apply(Command::ReleasePermits { name: "sem".into(), owner: "h".into(), token: holder, request_id: None })
        .unwrap();
    assert_eq!(log.permit_owners("sem"), [("w".to_string(), t(log.index))]);
}

// Ensures a permit waiter under a session is granted by a release with the
// release's index, its permits then living by the session.
#[test]
fn a_waiter_under_a_session_is_granted_under_it() {
    let mut log = Log::new();
    let session = log.open_session("s", 10_000);
    let holder = log.permit_grant(permit("sem", "h", 1, ttl(3000), None)).token;
    log.apply(permit("sem", "s", 1, by_session(session), Some(60_000))).unwrap();
    let shared_blocker = log.token("r", "h", 3000);
    log.apply(read("r", "s", by_session(session), Some(60_000))).unwrap();
    log.apply(Command::ReleasePermits { name: "sem".into(), owner: "h".into(), token: holder, request_id: None })
        .unwrap();
    assert_eq!(log.permit_owners("sem"), [("s".to_string(), t(log.index))]);
    log.release("r", shared_blocker).unwrap();
    assert_eq!(log.readers("r"), [("s".to_string(), t(log.index))]);
    assert!(log.table.by_permit_deadline.is_empty() && log.table.by_shared_deadline.is_empty());

    log.apply(Command::DeleteSession { session, request_id: None }).unwrap();
    assert_eq!(log.table.semaphore("sem"), None);
    assert!(log.readers("r").is_empty());
}

// Ensures a renew of a permit or shared lease held under a session is
// refused as for a plain lock (`HeldUnderSession`): the session's keepalive
// is what keeps it.
#[test]
fn session_leases_are_not_renewed() {
    let mut log = Log::new();
    let session = log.open_session("s", 10_000);
    let permits = log.permit_grant(permit("sem", "s", 1, by_session(session), None)).token;
    let shared = log.read_grant(read("r", "s", by_session(session), None)).token;
    let renew =
        Command::RenewPermits { name: "sem".into(), owner: "s".into(), token: permits, ttl_ms: None, request_id: None };
    assert_eq!(log.apply(renew), Err(LockError::HeldUnderSession { name: "sem".into(), session }));
    let renew =
        Command::RenewShared { name: "r".into(), owner: "s".into(), token: shared, ttl_ms: None, request_id: None };
    assert_eq!(log.apply(renew), Err(LockError::HeldUnderSession { name: "r".into(), session }));
}

// Ensures bad lifetimes are refused with a typed error and change nothing:
// both a ttl and a session, neither, a seq without a session, an unknown
// session, another owner's session, and a re-acquire (or a waiter's retry)
// that names another lifetime than its grant (or wait) lives by.
#[test]
fn bad_lifetimes_are_refused() {
    let mut log = Log::new();
    let session = log.open_session("s", 10_000);
    log.permit_grant(permit("sem", "s", 2, by_session(session), None));
    log.read_grant(read("r", "s", by_session(session), None));
    let before = log.table.clone();
    let field = |result: Result<Outcome, LockError>| match result {
        Err(LockError::Invalid(invalid)) => invalid.field,
        other => panic!("expected invalid, got {other:?}"),
    };
    let both = (Some(3000), Some(session));
    assert_eq!(field(log.apply(permit("sem", "s", 2, both, None))), "session");
    assert_eq!(field(log.apply(read("r", "s", both, None))), "session");
    assert_eq!(field(log.apply(permit("sem", "s", 2, (None, None), None))), "ttl_ms");
    assert_eq!(field(log.apply(read("r", "s", (None, None), None))), "ttl_ms");
    let mut seq_without_session = read("r", "a", ttl(3000), None);
    if let Command::AcquireShared { seq, .. } = &mut seq_without_session {
        *seq = Some(1);
    }
    assert_eq!(field(log.apply(seq_without_session)), "seq");

    let unknown = session + 1000;
    assert_eq!(
        log.apply(permit("sem", "s", 2, by_session(unknown), None)),
        Err(LockError::SessionNotFound { session: unknown })
    );
    assert_eq!(
        log.apply(read("r", "s", by_session(unknown), None)),
        Err(LockError::SessionNotFound { session: unknown })
    );
    assert_eq!(field(log.apply(permit("sem", "a", 2, by_session(session), None))), "owner");
    assert_eq!(field(log.apply(read("r", "a", by_session(session), None))), "owner");
    assert_eq!(field(log.apply(permit("sem", "s", 2, ttl(3000), None))), "session");
    assert_eq!(field(log.apply(read("r", "s", ttl(3000), None))), "session");
    assert_eq!(log.table, before, "refusals change nothing");

    // A waiter's retry must name the lifetime it waits under.
    log.permit_grant(permit("sem", "a", 2, ttl(3000), None));
    let other = log.open_session("o", 10_000);
    log.apply(permit("sem", "o", 2, ttl(3000), Some(60_000))).unwrap();
    assert_eq!(field(log.apply(permit("sem", "o", 2, by_session(other), Some(60_000)))), "session");
}

// Ensures permits and shared holds under a session count against the
// leases quota as any lease does, and that the session's end makes room.
#[test]
fn session_holds_count_against_the_quota() {
    let mut log = Log::new();
    log.quotas = Quotas { max_leases: 2, max_waiters: 10 };
    let session = log.open_session("s", 10_000);
    log.permit_grant(permit("sem", "s", 3, by_session(session), None));
    log.read_grant(read("r", "s", by_session(session), None));
    assert_eq!(log.table.holdings(), 2);
    let full = Err(LockError::Full { what: "leases".into(), limit: 2 });
    assert_eq!(log.apply(permit("sem", "a", 3, ttl(3000), None)), full);
    log.apply(Command::DeleteSession { session, request_id: None }).unwrap();
    assert_eq!(log.table.holdings(), 0);
    log.permit_grant(permit("sem", "a", 3, ttl(3000), None));
}

// Ensures session-bound permits and shared holds survive an image round
// trip (a snapshot) still bound to the session: out of the deadline
// indexes, and ended by the session's expiry.
#[test]
fn session_holds_survive_an_image_round_trip() {
    let mut log = Log::new();
    let session = log.open_session("s", 3000);
    log.permit_grant(permit("sem", "s", 1, by_session(session), None));
    log.read_grant(read("r", "s", by_session(session), None));
    let waiter = log.open_session("w", 60_000);
    log.apply(permit("sem", "w", 1, by_session(waiter), Some(60_000))).unwrap();
    log.table = LockTable::from(TableImage::from(&log.table));
    assert!(log.table.by_permit_deadline.is_empty() && log.table.by_shared_deadline.is_empty());
    assert!(log.ticks(30).is_empty());
    assert_eq!(log.tick().len(), 2);
    assert_eq!(log.permit_owners("sem"), [("w".to_string(), t(log.index))]);
}
