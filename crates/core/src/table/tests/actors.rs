//! Who caused each event: the principal its entry records for the command,
//! the cluster for a Tick, `unknown` for an entry without actors.

use super::*;
use crate::{Actor, Batch, Principal};

fn user(name: &str) -> Principal {
    Principal::User(name.into())
}

fn by(name: &str) -> Actor {
    Actor::Principal(user(name))
}

fn acquire(name: &str, owner: &str, ttl_ms: Option<u64>, wait_ms: Option<u64>, session: Option<u64>) -> Command {
    Command::Acquire {
        name: name.into(),
        owner: owner.into(),
        ttl_ms,
        session,
        wait_ms,
        request_id: None,
        lock_delay_ms: None,
        seq: None,
    }
}

impl Log {
    /// Applies `c` as proposed by `principal`: its events, by type and actor.
    fn apply_as(&mut self, c: Command, principal: Option<Principal>) -> (Result<Outcome, LockError>, Vec<LockEvent>) {
        self.index += 1;
        let applied = self.table.apply_by(&c, principal.as_ref(), self.index, &self.quotas);
        (applied.result, applied.events)
    }
}

/// Each event's `type` and `by`, in order.
fn story(events: &[LockEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            let json = serde_json::to_value(e).unwrap();
            (json["type"].as_str().unwrap().to_owned(), json["by"].as_str().unwrap().to_owned())
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

// Ensures an acquire, a queued wait, a release and the hand-over it makes
// are by the principals that asked (the hand-over by the releaser, its
// `owner` the waiter), and an expiry, and what it hands over, by the cluster.
#[test]
fn events_are_by_the_principal_that_caused_them() {
    let mut log = Log::new();
    let (granted, events) = log.apply_as(acquire("a", "o1", Some(3000), None, None), Some(user("alice")));
    let Ok(Outcome::Granted { grant, .. }) = granted else { panic!("{granted:?}") };
    assert_eq!(events.iter().map(|e| e.by.clone()).collect::<Vec<_>>(), [by("alice")]);
    let (_, events) = log.apply_as(acquire("a", "o2", Some(3000), Some(60_000), None), Some(Principal::Client));
    assert_eq!(story(&events), pairs(&[("queued", "client")]));
    let release = Command::Release { name: "a".into(), token: grant.token, request_id: None, session: None, seq: None };
    let (_, events) = log.apply_as(release, Some(user("bob")));
    assert_eq!(story(&events), pairs(&[("released", "user:bob"), ("handed_over", "user:bob")]));
    assert_eq!(events[1].kind.owner(), "o2", "the hand-over names who got the lock");

    let (_, events) = log.apply_as(acquire("a", "o3", Some(3000), Some(60_000), None), Some(Principal::Admin));
    assert_eq!(story(&events), pairs(&[("queued", "admin")]));
    let mut expiry = Vec::new();
    while expiry.is_empty() {
        expiry = log.apply_as(Command::Tick { period_ms: TICK }, None).1;
    }
    assert_eq!(story(&expiry), pairs(&[("expired", "cluster"), ("handed_over", "cluster")]));
}

// Ensures a session's start is by its opener, its expiry (and the expiry of
// its locks) by the cluster, and a delete by whoever deleted it.
#[test]
fn session_events_are_by_their_cause() {
    let mut log = Log::new();
    let create = |owner: &str| Command::CreateSession {
        owner: owner.into(),
        ttl_ms: 3000,
        request_id: None,
        by: Some("carol".into()),
    };
    let (created, events) = log.apply_as(create("s1"), Some(user("carol")));
    assert_eq!(story(&events), pairs(&[("session_created", "user:carol")]));
    let Ok(Outcome::SessionCreated { session }) = created else { panic!("{created:?}") };
    let (_, events) = log.apply_as(acquire("l", "s1", None, None, Some(session.session)), Some(user("carol")));
    assert_eq!(story(&events), pairs(&[("acquired", "user:carol")]));
    let mut expiry = Vec::new();
    while expiry.is_empty() {
        expiry = log.apply_as(Command::Tick { period_ms: TICK }, None).1;
    }
    assert_eq!(story(&expiry), pairs(&[("expired", "cluster"), ("session_expired", "cluster")]));

    let (created, _) = log.apply_as(create("s2"), Some(user("carol")));
    let Ok(Outcome::SessionCreated { session }) = created else { panic!("{created:?}") };
    let (_, events) =
        log.apply_as(Command::DeleteSession { session: session.session, request_id: None }, Some(Principal::Admin));
    assert_eq!(story(&events), pairs(&[("session_deleted", "admin")]));
}

// Ensures a Tick is the cluster's whatever its entry records, and a client
// command recorded without an actor (an entry of an earlier version) is by
// `unknown`.
#[test]
fn ticks_are_the_clusters_and_unrecorded_commands_unknown() {
    let mut log = Log::new();
    let (_, events) = log.apply_as(acquire("a", "o", Some(3000), None, None), None);
    assert_eq!(story(&events), pairs(&[("acquired", "unknown")]));
    let mut expiry = Vec::new();
    while expiry.is_empty() {
        expiry = log.apply_as(Command::Tick { period_ms: TICK }, Some(Principal::Admin)).1;
    }
    assert_eq!(story(&expiry), pairs(&[("expired", "cluster")]));
}

// Ensures the actors an entry records reach the events through its encoded
// form (what a follower applies), and an entry of the previous layout (no
// actors) applies with every command by `unknown`.
#[test]
fn actors_travel_in_the_entry() {
    let mut batch = Batch::within(Quotas::UNLIMITED, acquire("a", "o", Some(3000), None, None), Some(user("dave")));
    batch.try_push(acquire("b", "p", Some(3000), None, None), Some(Principal::Client)).unwrap();
    let decoded = Batch::decode(batch.encoded().to_vec()).unwrap();
    assert_eq!(decoded, batch);
    let mut table = LockTable::new();
    let actors: Vec<Actor> = decoded
        .proposed()
        .flat_map(|(c, principal)| table.apply_by(c, principal, 1, &decoded.quotas()).events)
        .map(|e| e.by)
        .collect();
    assert_eq!(actors, [by("dave"), Actor::Principal(Principal::Client)]);

    let old = Batch::within(Quotas::UNLIMITED, acquire("c", "o", Some(3000), None, None), None);
    assert_eq!(old.encoded()[0], 2, "written in the previous layout");
    let decoded = Batch::decode(old.encoded().to_vec()).unwrap();
    let mut table = LockTable::new();
    let (c, principal) = decoded.proposed().next().unwrap();
    assert_eq!(table.apply_by(c, principal, 1, &decoded.quotas()).events[0].by, Actor::Unknown);
}

// Ensures an actor's text reads back as the same actor, and text that
// names none is refused.
#[test]
fn actor_text_round_trips() {
    let actors = [
        Actor::Cluster,
        Actor::Unknown,
        Actor::Principal(Principal::Client),
        Actor::Principal(Principal::Admin),
        by("a:b"),
    ];
    for actor in actors {
        assert_eq!(actor.to_string().parse::<Actor>(), Ok(actor.clone()));
        let json = serde_json::to_string(&actor).unwrap();
        assert_eq!(serde_json::from_str::<Actor>(&json).unwrap(), actor);
    }
    assert_eq!(by("alice").to_string(), "user:alice");
    for bad in ["", "user:", "User:x", "bob", "cluster "] {
        assert!(bad.parse::<Actor>().is_err(), "{bad:?}");
    }
}

// Ensures a change of users and roles is an event of no lock, by whoever
// made it, saying what changed (a token by its id, never the token), and a
// refused change makes none.
#[test]
fn changes_of_users_and_roles_are_events_by_who_made_them() {
    let mut log = Log::new();
    let (added, events) = log.apply_as(Command::AddRole { role: "team-a".into() }, Some(Principal::Admin));
    assert!(added.is_ok(), "{added:?}");
    assert_eq!(story(&events), pairs(&[("access_changed", "admin")]));
    let json = serde_json::to_value(&events[0]).unwrap();
    assert_eq!((json["name"].as_str(), json["change"].as_str()), (Some(""), Some("role_added")), "{json}");
    assert_eq!(json["subject"], "team-a");

    let token = Some(crate::TokenHash("ab".repeat(32)));
    let (added, events) = log.apply_as(Command::AddUser { user: "bob".into(), token }, Some(Principal::Admin));
    assert!(added.is_ok(), "{added:?}");
    let json = serde_json::to_value(&events[0]).unwrap();
    assert_eq!(json["detail"], format!("token {}", log.index), "the token's id: {json}");

    let unknown = Command::AssignRole { user: "bob".into(), role: "nope".into() };
    let (refused, events) = log.apply_as(unknown, Some(Principal::Admin));
    assert!(refused.is_err() && events.is_empty(), "{refused:?} {events:?}");
}
