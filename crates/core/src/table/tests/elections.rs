//! Unit tests of elections: campaigns wait in FIFO order, leadership passes
//! on in the entry that ends it, values follow the leader, proclaim and
//! resign need the leader's token, and sessions and lock delays apply.

use super::*;

/// A campaign of `candidate` for `name` announcing `value`, ttl 3 s.
fn campaign(name: &str, candidate: &str, value: &str, wait_ms: Option<u64>) -> Command {
    Command::Campaign {
        name: name.into(),
        candidate: candidate.into(),
        value: value.into(),
        ttl_ms: Some(3000),
        session: None,
        wait_ms,
        request_id: None,
        lock_delay_ms: None,
        seq: None,
    }
}

impl Log {
    fn campaign(&mut self, name: &str, candidate: &str, value: &str, wait_ms: Option<u64>) -> Applied {
        self.apply_with_events(campaign(name, candidate, value, wait_ms))
    }
    fn elected(&mut self, name: &str, candidate: &str, value: &str) -> FencingToken {
        match self.campaign(name, candidate, value, None).result {
            Ok(Outcome::Granted { grant, .. }) => grant.token,
            other => panic!("expected to be elected, got {other:?}"),
        }
    }
    fn proclaim(&mut self, name: &str, candidate: &str, token: FencingToken, value: &str) -> Applied {
        self.apply_with_events(Command::Proclaim {
            name: name.into(),
            candidate: candidate.into(),
            token,
            value: value.into(),
            request_id: None,
        })
    }
    fn resign(&mut self, name: &str, candidate: &str, token: FencingToken) -> Applied {
        self.apply_with_events(Command::Resign {
            name: name.into(),
            candidate: candidate.into(),
            token,
            request_id: None,
        })
    }
    /// `(candidate, token, value)` of the leader of `name`.
    fn leader_of(&self, name: &str) -> Option<(String, FencingToken, String)> {
        self.table.leader(name).map(|l| (l.candidate, l.token, l.value))
    }
}

fn proclaimed(owner: &str, token: FencingToken, value: &str) -> EventKind {
    EventKind::Proclaimed { owner: owner.into(), token, value: value.into() }
}

// Ensures a campaign on a free election elects the candidate with the
// entry's index as token, announces its value, and a second candidate
// that does not wait is refused naming the leader.
#[test]
fn campaign_elects_with_entry_index_and_refuses_a_second_candidate() {
    let mut log = Log::new();
    let applied = log.campaign("e", "a", "\"one\"", None);
    let token = t(log.index);
    assert_eq!(
        story(&applied),
        vec![
            ("e".into(), EventKind::Acquired { owner: "a".into(), token }),
            ("e".into(), proclaimed("a", token, "\"one\""))
        ]
    );
    assert_eq!(log.leader_of("e"), Some(("a".into(), token, "\"one\"".into())));
    let leader = log.table.leader("e").unwrap();
    assert_eq!((leader.since_tick, leader.ttl_ms), (log.table.now_tick(), 3000));
    assert!(matches!(
        log.campaign("e", "b", "2", None).result,
        Err(LockError::HeldByOther { holder, token: held, .. }) if holder == "a" && held == token
    ));
    assert_eq!(log.leader_of("e").unwrap().0, "a");
}

// Ensures waiting candidates are elected in FIFO order, each with the
// index of the entry that ended the previous leadership, and with their
// own values.
#[test]
fn waiting_candidates_are_elected_in_fifo_order() {
    let mut log = Log::new();
    let first = log.elected("e", "a", "1");
    assert!(matches!(log.campaign("e", "b", "2", Some(60_000)).result, Ok(Outcome::Queued { position: 1, .. })));
    assert!(matches!(log.campaign("e", "c", "3", Some(60_000)).result, Ok(Outcome::Queued { position: 2, .. })));
    assert_eq!(log.leader_of("e").unwrap().2, "1", "a waiting value is not the leader's");
    let resigned = log.resign("e", "a", first);
    let second = t(log.index);
    assert!(matches!(resigned.result, Ok(Outcome::Released { .. })));
    assert_eq!(resigned.events.last().unwrap().kind, proclaimed("b", second, "2"));
    assert_eq!(log.leader_of("e"), Some(("b".into(), second, "2".into())));
    log.resign("e", "b", second).result.unwrap();
    let third = t(log.index);
    assert_eq!(log.leader_of("e"), Some(("c".into(), third, "3".into())));
    assert!(first < second && second < third);
}

// Ensures a leadership that expires passes to the next candidate in the
// Tick entry that expires it, with that entry's index as token.
#[test]
fn expiry_hands_leadership_over_in_one_entry() {
    let mut log = Log::new();
    let old = log.elected("e", "a", "1");
    log.campaign("e", "b", "2", Some(60_000)).result.unwrap();
    assert!(log.ticks(30).is_empty());
    let tick = log.apply_with_events(Command::Tick { period_ms: TICK });
    let new = t(log.index);
    let kinds: Vec<_> = story(&tick).into_iter().map(|(_, k)| k).collect();
    assert!(matches!(&kinds[0], EventKind::Expired { owner, token, .. } if owner == "a" && *token == old));
    assert!(matches!(&kinds[1], EventKind::HandedOver { owner, token, .. } if owner == "b" && *token == new));
    assert_eq!(kinds[2], proclaimed("b", new, "2"));
    assert_eq!(log.leader_of("e"), Some(("b".into(), new, "2".into())));
}

// Ensures proclaim changes the value under the leader's token only: any
// other token is stale, another candidate is refused, and neither changes
// anything.
#[test]
fn proclaim_needs_the_current_leaders_token() {
    let mut log = Log::new();
    assert!(matches!(log.proclaim("e", "a", t(1), "0").result, Err(LockError::NotHeld { .. })));
    let old = log.elected("e", "a", "1");
    log.campaign("e", "b", "2", Some(60_000)).result.unwrap();
    log.resign("e", "a", old).result.unwrap();
    let token = t(log.index);
    let before = log.table.clone();
    assert!(matches!(
        log.proclaim("e", "a", old, "stale").result,
        Err(LockError::StaleToken { given, current, .. }) if given == old && current == token
    ));
    assert!(matches!(log.proclaim("e", "a", token, "x").result, Err(LockError::Invalid(i)) if i.field == "candidate"));
    assert_eq!(log.table, before);
    let applied = log.proclaim("e", "b", token, "{\"addr\":\"b:1\"}");
    assert!(matches!(&applied.result, Ok(Outcome::Proclaimed { leader }) if leader.token == token));
    assert_eq!(applied.events, vec![unrecorded(log.index, "e", proclaimed("b", token, "{\"addr\":\"b:1\"}"))]);
    assert_eq!(log.leader_of("e"), Some(("b".into(), token, "{\"addr\":\"b:1\"}".into())));
}

// Ensures resign needs the leader's token, and leaves the election without
// a leader when nobody waits.
#[test]
fn resign_needs_the_token_and_ends_the_leadership() {
    let mut log = Log::new();
    let token = log.elected("e", "a", "1");
    assert!(matches!(log.resign("e", "a", t(token.get() + 1)).result, Err(LockError::StaleToken { .. })));
    assert!(matches!(log.resign("e", "b", token).result, Err(LockError::Invalid(_))));
    log.resign("e", "a", token).result.unwrap();
    assert_eq!(log.leader_of("e"), None);
    assert_eq!(log.table.elections(), 0, "nothing is kept for an election nobody stands in");
    assert!(matches!(log.resign("e", "a", token).result, Err(LockError::NotHeld { .. })));
}

// Ensures a leader that campaigns again keeps its token and announces the
// new value; a queued candidate that campaigns again keeps its place and
// its new value.
#[test]
fn campaigning_again_keeps_token_and_place() {
    let mut log = Log::new();
    let token = log.elected("e", "a", "1");
    let again = log.campaign("e", "a", "1b", None);
    assert!(matches!(again.result, Ok(Outcome::Granted { reacquired: true, grant }) if grant.token == token));
    assert_eq!(log.leader_of("e"), Some(("a".into(), token, "1b".into())));
    log.campaign("e", "b", "2", Some(60_000)).result.unwrap();
    log.campaign("e", "c", "3", Some(60_000)).result.unwrap();
    assert!(matches!(log.campaign("e", "b", "2b", Some(60_000)).result, Ok(Outcome::Queued { position: 1, .. })));
    log.resign("e", "a", token).result.unwrap();
    assert_eq!(log.leader_of("e").map(|l| l.2), Some("2b".into()));
}

// Ensures a candidate whose wait runs out, or is cancelled, is forgotten:
// it is never elected and its value goes.
#[test]
fn candidates_that_stop_waiting_are_forgotten() {
    let mut log = Log::new();
    let token = log.elected("e", "a", "1");
    log.campaign("e", "b", "2", Some(500)).result.unwrap();
    log.campaign("e", "c", "3", Some(60_000)).result.unwrap();
    log.campaign("e", "d", "4", Some(60_000)).result.unwrap();
    log.ticks(5);
    log.apply(Command::Cancel { name: "e".into(), owner: "c".into() }).unwrap();
    assert_eq!(log.table.elections.get("e").unwrap().candidates.keys().collect::<Vec<_>>(), vec!["d"]);
    log.resign("e", "a", token).result.unwrap();
    assert_eq!(log.leader_of("e").unwrap().0, "d");
}

// Ensures a leadership under a session ends with the session (expiry or
// delete) and passes to the next candidate in that entry; a candidate
// waiting under a session that ends is dropped.
#[test]
fn session_end_ends_the_leadership() {
    let mut log = Log::new();
    let session =
        match log.apply(Command::CreateSession { owner: "a".into(), ttl_ms: 3000, request_id: None, by: None }) {
            Ok(Outcome::SessionCreated { session }) => session.session,
            other => panic!("{other:?}"),
        };
    let under = |candidate: &str, wait_ms| Command::Campaign {
        name: "e".into(),
        candidate: candidate.into(),
        value: format!("\"{candidate}\""),
        ttl_ms: None,
        session: Some(session),
        wait_ms,
        request_id: None,
        lock_delay_ms: None,
        seq: None,
    };
    let token = match log.apply(under("a", None)) {
        Ok(Outcome::Granted { grant, .. }) => grant.token,
        other => panic!("{other:?}"),
    };
    assert_eq!(log.table.leader("e").unwrap().session, Some(session));
    log.campaign("e", "b", "\"b\"", Some(60_000)).result.unwrap();
    let deleted = log.apply_with_events(Command::DeleteSession { session, request_id: None });
    let handed = t(log.index);
    assert!(deleted.events.contains(&unrecorded(log.index, "e", proclaimed("b", handed, "\"b\""))));
    assert!(handed > token);
    assert_eq!(log.leader_of("e").unwrap().0, "b");
}

// Ensures a leadership that expires with a lock delay leaves the election
// without a leader until the delay ends; then the next candidate is elected.
#[test]
fn lock_delay_holds_the_next_election_back() {
    let mut log = Log::new();
    let mut delayed = campaign("e", "a", "1", None);
    if let Command::Campaign { lock_delay_ms, .. } = &mut delayed {
        *lock_delay_ms = Some(1000);
    }
    let old = match log.apply(delayed) {
        Ok(Outcome::Granted { grant, .. }) => grant.token,
        other => panic!("{other:?}"),
    };
    log.campaign("e", "b", "2", Some(60_000)).result.unwrap();
    log.ticks(31);
    assert_eq!(log.leader_of("e"), None, "expired, delayed");
    assert!(log.table.delayed_until("e").is_some());
    log.ticks(9);
    assert_eq!(log.leader_of("e"), None);
    log.tick();
    let (candidate, token, value) = log.leader_of("e").unwrap();
    assert_eq!((candidate.as_str(), value.as_str()), ("b", "2"));
    assert!(token > old);
}

// Ensures a plain acquire of an election's lock elects nobody: the
// election has no leader while it holds, and its waiting candidates keep
// their values for when it ends.
#[test]
fn a_plain_acquire_elects_nobody() {
    let mut log = Log::new();
    let held = log.token("e", "plain", 3000);
    log.campaign("e", "b", "2", Some(60_000)).result.unwrap();
    assert_eq!(log.leader_of("e"), None);
    log.release("e", held).unwrap();
    assert_eq!(log.leader_of("e").unwrap().0, "b");
}

// Ensures a retried campaign with its request id gets its first answer
// and is not applied again, also when it was elected from the queue.
#[test]
fn request_id_replays_a_campaign() {
    let mut log = Log::new();
    let first = log.elected("e", "a", "1");
    let mut waiting = campaign("e", "b", "2", Some(60_000));
    if let Command::Campaign { request_id, .. } = &mut waiting {
        *request_id = Some("r".into());
    }
    assert!(matches!(log.apply(waiting.clone()), Ok(Outcome::Queued { .. })));
    log.resign("e", "a", first).result.unwrap();
    let token = t(log.index);
    let replay = log.apply_with_events(waiting);
    assert!(matches!(replay.result, Ok(Outcome::Granted { grant, .. }) if grant.token == token));
    assert!(replay.events.is_empty(), "a replay changes nothing");
}

// Ensures elections survive a snapshot image and the stored rows.
#[test]
fn elections_survive_image_and_rows() {
    let mut log = Log::new();
    log.elected("e", "a", "1");
    log.campaign("e", "b", "2", Some(60_000)).result.unwrap();
    log.elected("f", "c", "[3]");
    let json = serde_json::to_vec(&TableImage::from(&log.table)).unwrap();
    assert_eq!(LockTable::from(serde_json::from_slice::<TableImage>(&json).unwrap()), log.table);
    let mut loader = TableLoader::default();
    for row in log.table.rows() {
        let bytes = rmp_serde::to_vec_named(&row.value.unwrap()).unwrap();
        loader.load(row.tree, &row.key, &mut rmp_serde::Deserializer::new(&bytes[..])).unwrap();
    }
    let loaded = loader.finish();
    assert_eq!(loaded, log.table);
    assert_eq!(loaded.leaders("", 10).len(), 2);
}

// Ensures the values campaigns keep are bounded: past the limit a new
// candidate is refused `Full` (`campaigns`), while one already standing or
// leading is not; a waiting candidate counts as a leader does.
#[test]
fn campaigns_are_bounded() {
    let mut log = Log::new();
    log.elected("e", "a", "1");
    log.campaign("e", "b", "2", Some(60_000)).result.unwrap();
    log.elected("f", "c", "3");
    let full = Err(LockError::Full { what: "campaigns".into(), limit: 3 });
    assert_eq!(log.table.room_for_campaign("g", "d", 3), full);
    assert_eq!(log.table.room_for_campaign("e", "d", 3), full);
    assert_eq!(log.table.room_for_campaign("e", "a", 3), Ok(()), "the leader campaigns again");
    assert_eq!(log.table.room_for_campaign("e", "b", 3), Ok(()), "a waiting candidate campaigns again");
    assert_eq!(log.table.room_for_campaign("g", "d", 4), Ok(()));
    assert_eq!(log.table.room_for_campaign("g", "d", MAX_CAMPAIGNS), Ok(()));
}

/// An event of a command applied without an actor, as the fake log applies them.
fn unrecorded(index: u64, name: &str, kind: EventKind) -> LockEvent {
    LockEvent { by: Actor::Unknown, ..event(index, name, kind) }
}
