//! The payload of one Raft log entry: the commands the leader proposes
//! together.
//!
//! Concurrent requests share an entry so that they share its Raft write, its
//! fsync and its replication round, instead of paying for one each. A grant's
//! fencing token is the index of the entry that grants it, so an entry must
//! never grant one lock twice, or two holders would get the same token:
//! - a Tick, which can expire and hand over any number of locks, always
//!   travels alone;
//! - a lock granted in an entry can only be freed again by a later one: a
//!   renew or release naming a token granted in the entry being applied is
//!   refused ([`LockTable::apply`](super::LockTable::apply)), so a lock
//!   changes hands at most once per entry, whatever else the entry holds;
//! - a session's delete travels alone too: it frees every lock of the
//!   session, and must not free one granted in its own entry (to a waiter
//!   of the session, by a release before it);
//! - an entry creates at most one session, since a session's id is the
//!   index of the entry that created it.
//!
//! An entry of client commands also carries the limits they are applied
//! under ([`Quotas`]), stamped by the leader that proposed it, so that every
//! replica applies them against the same numbers.
//!
//! Each client command also carries the principal whose request proposed it
//! (its actor), so that every replica stamps the events it causes with the
//! same `by` ([`LockTable::apply_by`](super::LockTable::apply_by)). A Tick
//! carries none: what it does, the cluster does.

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::encoding::{self, DecodeError};
use super::{Command, Principal, Quotas};

/// Commands applied in order under one log index. Built only through
/// [`Batch::single`] and [`Batch::try_push`], which keep the rules above.
///
/// Shared once built: the log, its cache, replication to each follower and
/// the state machine all hold the same commands, and the same encoded form,
/// made once ([`encoding`](super::encoding)) — on a follower, the bytes it
/// received.
#[derive(Clone)]
pub struct Batch {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    commands: Vec<Command>,
    /// Who proposed each command, one per command: `None` for a Tick, and
    /// for commands of entries from before entries carried it.
    actors: Vec<Option<Principal>>,
    /// `None`: applied without limits (Ticks, entries written before
    /// entries carried limits).
    quotas: Option<Quotas>,
    encoded: OnceLock<Vec<u8>>,
}

impl PartialEq for Batch {
    fn eq(&self, other: &Self) -> bool {
        self.inner.commands == other.inner.commands
            && self.inner.actors == other.inner.actors
            && self.inner.quotas == other.inner.quotas
    }
}

impl Eq for Batch {}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("commands", &self.inner.commands)
            .field("actors", &self.inner.actors)
            .field("quotas", &self.inner.quotas)
            .finish()
    }
}

impl Batch {
    /// Most commands in one entry: bounds the entry's size (every command is
    /// itself bounded by [`Limits`](super::Limits)) and the wait of its last
    /// command behind the others when it is applied.
    pub const MAX_COMMANDS: usize = 256;

    /// An entry of `command` applied without limits, proposed by nobody:
    /// what a Tick travels in.
    pub fn single(command: Command) -> Batch {
        Batch::from_commands(vec![command], vec![None], None, OnceLock::new())
    }

    /// An entry of `command` proposed by `by`, without limits: what a
    /// follower hands the leader a client's command in.
    pub fn handed(command: Command, by: Principal) -> Batch {
        Batch::from_commands(vec![command], vec![Some(by)], None, OnceLock::new())
    }

    /// An entry of `command` proposed by `by` (more may join it) whose
    /// commands are applied under `quotas`: what the leader proposes client
    /// commands in.
    pub fn within(quotas: Quotas, command: Command, by: Option<Principal>) -> Batch {
        Batch::from_commands(vec![command], vec![by], Some(quotas), OnceLock::new())
    }

    fn from_commands(
        commands: Vec<Command>,
        actors: Vec<Option<Principal>>,
        quotas: Option<Quotas>,
        encoded: OnceLock<Vec<u8>>,
    ) -> Batch {
        debug_assert_eq!(commands.len(), actors.len());
        Batch { inner: Arc::new(Inner { commands, actors, quotas, encoded }) }
    }

    /// Adds `command`, proposed by `by`, to this entry, or hands both back
    /// when it may not share it: the entry is full, either side is a Tick
    /// or a session delete, or both create a session.
    // The command comes back by value, as it went in: the caller proposes it
    // in the next entry without a copy, so its size is no cost here.
    #[allow(clippy::result_large_err)]
    pub fn try_push(&mut self, command: Command, by: Option<Principal>) -> Result<(), (Command, Option<Principal>)> {
        let alone = |c: &Command| matches!(c, Command::Tick { .. } | Command::DeleteSession { .. });
        let creates = |c: &Command| matches!(c, Command::CreateSession { .. });
        let commands = &self.inner.commands;
        let second_session = creates(&command) && commands.iter().any(creates);
        if alone(&command) || commands.iter().any(alone) || second_session || commands.len() >= Self::MAX_COMMANDS {
            return Err((command, by));
        }
        let inner = Arc::make_mut(&mut self.inner);
        inner.commands.push(command);
        inner.actors.push(by);
        inner.encoded = OnceLock::new();
        Ok(())
    }

    pub fn commands(&self) -> &[Command] {
        &self.inner.commands
    }

    /// Each command with the principal that proposed it, if recorded.
    pub fn proposed(&self) -> impl Iterator<Item = (&Command, Option<&Principal>)> {
        self.inner.commands.iter().zip(self.inner.actors.iter().map(Option::as_ref))
    }

    /// The limits this entry's commands are applied under.
    pub fn quotas(&self) -> Quotas {
        self.inner.quotas.unwrap_or(Quotas::UNLIMITED)
    }

    pub fn len(&self) -> usize {
        self.inner.commands.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.commands.is_empty()
    }

    /// True for the entry of one Tick (the only place a Tick can be).
    pub fn is_tick(&self) -> bool {
        matches!(self.commands(), [Command::Tick { .. }])
    }

    /// The compact binary form, made at the first call.
    pub fn encoded(&self) -> &[u8] {
        self.inner.encoded.get_or_init(|| {
            let mut bytes = Vec::with_capacity(64 * self.len());
            encoding::encode(&self.inner.commands, &self.inner.actors, self.inner.quotas, &mut bytes);
            bytes
        })
    }

    /// The batch `bytes` encode ([`Batch::encoded`]), keeping them as its
    /// encoded form.
    pub fn decode(bytes: Vec<u8>) -> Result<Batch, DecodeError> {
        let decoded = encoding::decode(&bytes)?;
        Ok(Batch::from_commands(decoded.commands, decoded.actors, decoded.quotas, OnceLock::from(bytes)))
    }
}

/// JSON (and any human-readable format) gets the list of commands; binary
/// formats get the compact form, as bytes. JSON is only read, from the log
/// frames of data format 2, written before entries carried limits and
/// actors: it has no place for them (a batch read from it is applied
/// without limits, its commands by [`Actor::Unknown`](super::Actor::Unknown)).
impl Serialize for Batch {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            self.inner.commands.serialize(serializer)
        } else {
            serializer.serialize_bytes(self.encoded())
        }
    }
}

impl<'de> Deserialize<'de> for Batch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let commands = Vec::<Command>::deserialize(deserializer)?;
            let actors = vec![None; commands.len()];
            return Ok(Batch::from_commands(commands, actors, None, OnceLock::new()));
        }
        deserializer.deserialize_byte_buf(EncodedBatch)
    }
}

/// Takes the compact form from a binary format.
struct EncodedBatch;

impl serde::de::Visitor<'_> for EncodedBatch {
    type Value = Batch;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an encoded batch of commands")
    }

    fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Batch, E> {
        self.visit_byte_buf(bytes.to_vec())
    }

    fn visit_byte_buf<E: serde::de::Error>(self, bytes: Vec<u8>) -> Result<Batch, E> {
        Batch::decode(bytes).map_err(E::custom)
    }
}

impl std::fmt::Display for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, command) in self.commands().iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{command}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventKind, FencingToken, LockError, LockTable, Outcome};

    fn acquire(name: &str, owner: &str, wait: bool) -> Command {
        let wait_ms = wait.then_some(60_000);
        Command::Acquire {
            name: name.into(),
            owner: owner.into(),
            ttl_ms: Some(10_000),
            session: None,
            wait_ms,
            request_id: None,
            lock_delay_ms: None,
            seq: None,
        }
    }

    fn release(name: &str, token: u64) -> Command {
        let token = FencingToken::granted_at(token);
        Command::Release { name: name.into(), token, request_id: None, session: None, seq: None }
    }

    // Ensures a Tick never shares an entry, in either direction, and a batch
    // stops at its size bound.
    #[test]
    fn ticks_travel_alone_and_batches_are_bounded() {
        let mut batch = Batch::single(acquire("a", "x", false));
        assert!(batch.try_push(release("a", 1), None).is_ok(), "commands on one lock may share an entry");
        let tick = Command::Tick { period_ms: 100 };
        assert_eq!(batch.try_push(tick.clone(), None), Err((tick.clone(), None)));
        let mut alone = Batch::single(tick);
        assert!(alone.is_tick());
        assert!(alone.try_push(acquire("c", "x", false), None).is_err());

        let mut full = Batch::single(acquire("0", "x", false));
        for i in 1..Batch::MAX_COMMANDS {
            assert!(full.try_push(acquire(&i.to_string(), "x", false), None).is_ok());
        }
        assert!(full.try_push(acquire("last", "x", false), None).is_err());
        assert_eq!(full.len(), Batch::MAX_COMMANDS);
    }

    // Ensures an entry creates at most one session, so session ids (entry
    // indexes) are unique, while other commands still join it.
    #[test]
    fn an_entry_creates_one_session_at_most() {
        let create =
            |owner: &str| Command::CreateSession { owner: owner.into(), ttl_ms: 10_000, request_id: None, by: None };
        let mut batch = Batch::single(create("a"));
        assert_eq!(batch.try_push(create("b"), None), Err((create("b"), None)));
        assert!(batch.try_push(acquire("n", "x", false), None).is_ok());
        assert!(batch
            .try_push(Command::KeepAlive { session: 1, ttl_ms: None, request_id: None, seq: None }, None)
            .is_ok());
        let delete = Command::DeleteSession { session: 1, request_id: None };
        assert!(batch.try_push(delete.clone(), None).is_err(), "a delete travels alone");
        assert!(Batch::single(delete).try_push(acquire("n", "y", false), None).is_err());
    }

    // Ensures an entry keeps its quotas as commands join it and through its
    // encoded form, and its commands are applied under them; an entry made
    // without any is applied without limits.
    #[test]
    fn an_entry_carries_its_quotas() {
        let quotas = Quotas { max_leases: 1, max_waiters: 0 };
        let mut batch = Batch::within(quotas, acquire("a", "x", false), None);
        batch.try_push(acquire("b", "x", false), None).unwrap();
        let decoded = Batch::decode(batch.encoded().to_vec()).unwrap();
        assert_eq!((decoded.quotas(), &decoded), (quotas, &batch));
        assert_ne!(Batch::single(acquire("a", "x", false)), Batch::within(quotas, acquire("a", "x", false), None));
        assert_eq!(Batch::single(Command::Tick { period_ms: 100 }).quotas(), Quotas::UNLIMITED);
        let mut table = LockTable::new();
        let results: Vec<_> =
            decoded.commands().iter().map(|c| table.apply_within(c, 1, &decoded.quotas()).result).collect();
        assert!(matches!(results[..], [Ok(_), Err(LockError::Full { .. })]), "{results:?}");
    }

    fn grants(events: Vec<crate::LockEvent>) -> Vec<(String, u64)> {
        events
            .into_iter()
            .filter_map(|e| match e.kind {
                EventKind::Acquired { token, .. } | EventKind::HandedOver { token, .. } => Some((e.name, token.get())),
                _ => None,
            })
            .collect()
    }

    // Ensures the reason for the rules holds: whatever commands share an
    // entry, it grants each lock at most once, so each lock's tokens still
    // strictly increase from entry to entry.
    #[test]
    fn an_entry_grants_each_lock_at_most_once() {
        let mut table = LockTable::new();
        assert!(matches!(table.apply(&acquire("a", "x", false), 1).result, Ok(Outcome::Granted { .. })));
        for waiter in ["y", "z"] {
            assert!(matches!(table.apply(&acquire("a", waiter, true), 2).result, Ok(Outcome::Queued { .. })));
        }

        // Entry 3: x's release hands "a" to y; y's release of that grant (a
        // guessed token: y has not been told yet) must not hand it on to z.
        let batch = [release("a", 1), release("a", 3), acquire("b", "w", false)];
        let mut events = Vec::new();
        let mut results = Vec::new();
        for command in &batch {
            let applied = table.apply(command, 3);
            events.extend(applied.events);
            results.push(applied.result);
        }
        assert!(matches!(results[1], Err(LockError::Invalid(_))), "{:?}", results[1]);
        // w's retried acquire in the same entry gets its grant back, not a new one.
        let retried = table.apply(&acquire("b", "w", false), 3);
        assert!(matches!(retried.result, Ok(Outcome::Granted { reacquired: true, .. })), "{:?}", retried.result);
        assert_eq!(grants(events), vec![("a".to_string(), 3), ("b".to_string(), 3)]);
        assert_eq!(table.get("a").map(|l| l.owner), Some("y".to_string()));
        // In the next entry the same release is y's to make, and z gets "a".
        let next = table.apply(&release("a", 3), 4);
        assert!(next.result.is_ok());
        assert_eq!(grants(next.events), vec![("a".to_string(), 4)]);
    }
}
