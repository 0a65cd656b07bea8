//! The table as rows: how its durable copy is laid out, written and read back.
//!
//! A row is `(tree, key) -> value`: one lease, one lock's queue, one delay,
//! one session, one request record, one fenced record, one gate, and the
//! clock. The in-memory indexes (deadlines, who waits where, answer order)
//! are not rows: they are rebuilt from the rows on load.
//! [`LockTable::take_changes`] and [`LockTable::changed_rows`] give what a
//! checkpoint writes; [`LockTable::rows`] everything (a full snapshot); a
//! [`TableLoader`] builds the table back from rows in any order. The byte
//! encoding of values is the caller's: rows serialize with serde.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::election::Election;
use super::semaphore::Semaphore;
use super::types::{Delay, Lease, Session, Waiter};
use super::{LockTable, SessionId, TableImage};
use crate::access::{Role, User};
use crate::fence::{Fences, GateState, Record};
use crate::requests::{self, Requests};
use crate::tracked::Changed;

/// What a row holds. The number is its id in stored keys: never reuse one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tree {
    /// The one row with the cluster's clock, under the empty key.
    Clock = 1,
    Leases = 2,
    Queues = 3,
    Delays = 4,
    Sessions = 5,
    Requests = 6,
    Records = 7,
    Gates = 8,
    // 12 on, clear of the ids other new rows take from 9.
    /// The shared holders of one lock.
    SharedHolders = 12,
    Semaphores = 13,
    /// Elections' values.
    Elections = 14,
    /// Users (their tokens' hashes and their roles), by name.
    Users = 15,
    /// Roles (their grants), by name.
    Roles = 16,
}

impl Tree {
    pub const ALL: [Tree; 13] = [
        Tree::Clock,
        Tree::Leases,
        Tree::Queues,
        Tree::Delays,
        Tree::Sessions,
        Tree::Requests,
        Tree::Records,
        Tree::Gates,
        Tree::SharedHolders,
        Tree::Semaphores,
        Tree::Elections,
        Tree::Users,
        Tree::Roles,
    ];

    pub fn id(self) -> u8 {
        self as u8
    }

    pub fn from_id(id: u8) -> Option<Tree> {
        Tree::ALL.into_iter().find(|t| t.id() == id)
    }
}

/// The clock row: committed ticks and the tick period ttls convert with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Clock {
    now_tick: u64,
    tick_ms: Option<u64>,
}

/// A row's value, borrowed from the table; serializes as the value itself.
#[derive(Debug)]
pub struct RowValue<'a>(Value<'a>);

#[derive(Debug)]
enum Value<'a> {
    Clock(Clock),
    Lease(&'a Lease),
    Queue(&'a VecDeque<Waiter>),
    Delay(&'a Delay),
    Session(&'a Session),
    Request(&'a requests::Record),
    Record(&'a Record),
    Gate(&'a GateState),
    SharedHolders(&'a BTreeMap<String, Lease>),
    Semaphore(&'a Semaphore),
    Election(&'a Election),
    User(&'a User),
    Role(&'a Role),
}

impl Serialize for RowValue<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Value::Clock(v) => v.serialize(s),
            Value::Lease(v) => v.serialize(s),
            Value::Queue(v) => v.serialize(s),
            Value::Delay(v) => v.serialize(s),
            Value::Session(v) => v.serialize(s),
            Value::Request(v) => v.serialize(s),
            Value::Record(v) => v.serialize(s),
            Value::Gate(v) => v.serialize(s),
            Value::SharedHolders(v) => v.serialize(s),
            Value::Semaphore(v) => v.serialize(s),
            Value::Election(v) => v.serialize(s),
            Value::User(v) => v.serialize(s),
            Value::Role(v) => v.serialize(s),
        }
    }
}

impl RowValue<'_> {
    /// A copy that borrows nothing: taking it under the apply lock is much
    /// cheaper than encoding it there, and it encodes the same later.
    pub fn to_owned(&self) -> OwnedRowValue {
        OwnedRowValue(match &self.0 {
            Value::Clock(v) => Owned::Clock(*v),
            Value::Lease(v) => Owned::Lease((*v).clone()),
            Value::Queue(v) => Owned::Queue((*v).clone()),
            Value::Delay(v) => Owned::Delay((*v).clone()),
            Value::Session(v) => Owned::Session((*v).clone()),
            Value::Request(v) => Owned::Request((*v).clone()),
            Value::Record(v) => Owned::Record((*v).clone()),
            Value::Gate(v) => Owned::Gate((*v).clone()),
            Value::SharedHolders(v) => Owned::SharedHolders((*v).clone()),
            Value::Semaphore(v) => Owned::Semaphore((*v).clone()),
            Value::Election(v) => Owned::Election((*v).clone()),
            Value::User(v) => Owned::User((*v).clone()),
            Value::Role(v) => Owned::Role((*v).clone()),
        })
    }
}

/// A row's value, copied out of the table; serializes as [`RowValue`] does.
#[derive(Debug)]
pub struct OwnedRowValue(Owned);

#[derive(Debug)]
enum Owned {
    Clock(Clock),
    Lease(Lease),
    Queue(VecDeque<Waiter>),
    Delay(Delay),
    Session(Session),
    Request(requests::Record),
    Record(Record),
    Gate(GateState),
    SharedHolders(BTreeMap<String, Lease>),
    Semaphore(Semaphore),
    Election(Election),
    User(User),
    Role(Role),
}

impl Serialize for OwnedRowValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Owned::Clock(v) => v.serialize(s),
            Owned::Lease(v) => v.serialize(s),
            Owned::Queue(v) => v.serialize(s),
            Owned::Delay(v) => v.serialize(s),
            Owned::Session(v) => v.serialize(s),
            Owned::Request(v) => v.serialize(s),
            Owned::Record(v) => v.serialize(s),
            Owned::Gate(v) => v.serialize(s),
            Owned::SharedHolders(v) => v.serialize(s),
            Owned::Semaphore(v) => v.serialize(s),
            Owned::Election(v) => v.serialize(s),
            Owned::User(v) => v.serialize(s),
            Owned::Role(v) => v.serialize(s),
        }
    }
}

/// One row; `value` is `None` for a row that no longer exists.
#[derive(Debug)]
pub struct Row<'a> {
    pub tree: Tree,
    pub key: Vec<u8>,
    pub value: Option<RowValue<'a>>,
}

/// Which keys changed since the previous [`LockTable::take_changes`].
#[derive(Debug, Default)]
pub struct Changes {
    leases: Changed<Arc<str>>,
    queues: Changed<String>,
    delays: Changed<String>,
    sessions: Changed<SessionId>,
    requests: Changed<String>,
    records: Changed<String>,
    gates: Changed<String>,
    shared: Changed<String>,
    semaphores: Changed<String>,
    elections: Changed<String>,
    users: Changed<String>,
    roles: Changed<String>,
}

impl Changes {
    /// Keys changed, the clock not counted (some need no write: see
    /// [`LockTable::changed_rows`]).
    pub fn len(&self) -> usize {
        self.leases.len()
            + self.queues.len()
            + self.delays.len()
            + self.sessions.len()
            + self.requests.len()
            + self.records.len()
            + self.gates.len()
            + self.shared.len()
            + self.semaphores.len()
            + self.elections.len()
            + self.users.len()
            + self.roles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn text_key(key: &str) -> Vec<u8> {
    key.as_bytes().to_vec()
}

/// Session ids as big-endian bytes, so stored rows sort by id.
fn session_key(id: SessionId) -> Vec<u8> {
    id.to_be_bytes().to_vec()
}

/// The rows of `keys` in `map`: the current value, or `None` where gone,
/// and nothing for a key that was neither there at the last checkpoint nor
/// is now.
fn rows_of<'a, K, V: 'a>(
    tree: Tree,
    keys: &'a Changed<K>,
    get: impl Fn(&K) -> Option<&'a V> + 'a,
    key: impl Fn(&K) -> Vec<u8> + 'a,
    value: impl Fn(&'a V) -> RowValue<'a> + 'a,
) -> impl Iterator<Item = Row<'a>> + 'a {
    keys.iter().filter_map(move |(k, stored)| match get(k) {
        None if !stored => None,
        found => Some(Row { tree, key: key(k), value: found.map(&value) }),
    })
}

/// Every row of `map`.
fn all_rows<'a, K: 'a, V: 'a>(
    tree: Tree,
    map: impl IntoIterator<Item = (&'a K, &'a V)> + 'a,
    key: impl Fn(&K) -> Vec<u8> + 'a,
    value: impl Fn(&'a V) -> RowValue<'a> + 'a,
) -> impl Iterator<Item = Row<'a>> + 'a {
    map.into_iter().map(move |(k, v)| Row { tree, key: key(k), value: Some(value(v)) })
}

impl LockTable {
    /// Which rows changed since the last call, forgetting them: the caller
    /// takes over writing them (with [`changed_rows`](Self::changed_rows)).
    pub fn take_changes(&mut self) -> Changes {
        let (records, gates) = self.fences.take_changed();
        Changes {
            leases: self.leases.take_changed(),
            queues: self.queues.take_changed(),
            delays: self.delays.take_changed(),
            sessions: self.sessions.take_changed(),
            requests: self.requests.take_changed(),
            records,
            gates,
            shared: self.shared.take_changed(),
            semaphores: self.semaphores.take_changed(),
            elections: self.elections.take_changed(),
            users: self.access.users.take_changed(),
            roles: self.access.roles.take_changed(),
        }
    }

    /// How many rows the table has (the clock not counted): what loading
    /// it at a restart costs grows with this.
    pub fn row_count(&self) -> usize {
        let (records, gates) = self.fences.maps();
        self.leases.len()
            + self.queues.len()
            + self.delays.len()
            + self.sessions.len()
            + self.requests.len()
            + records.len()
            + gates.len()
            + self.shared.len()
            + self.semaphores.len()
            + self.elections.len()
            + self.access.users.len()
            + self.access.roles.len()
    }

    fn clock_row(&self) -> Row<'_> {
        let clock = Clock { now_tick: self.now_tick, tick_ms: self.tick_ms };
        Row { tree: Tree::Clock, key: Vec::new(), value: Some(RowValue(Value::Clock(clock))) }
    }

    /// The current rows for `changes` (taken from this table), the clock
    /// first; a row that no longer exists comes with no value, and one that
    /// came and went since the last checkpoint does not come at all.
    pub fn changed_rows<'a>(&'a self, changes: &'a Changes) -> impl Iterator<Item = Row<'a>> + 'a {
        let (records, gates) = self.fences.maps();
        std::iter::once(self.clock_row())
            .chain(rows_of(
                Tree::Leases,
                &changes.leases,
                |k| self.leases.get(&**k),
                |k| text_key(k),
                |v| RowValue(Value::Lease(v)),
            ))
            .chain(rows_of(
                Tree::Queues,
                &changes.queues,
                |k| self.queues.get(k),
                |k| text_key(k),
                |v| RowValue(Value::Queue(v)),
            ))
            .chain(rows_of(
                Tree::Delays,
                &changes.delays,
                |k| self.delays.get(k),
                |k| text_key(k),
                |v| RowValue(Value::Delay(v)),
            ))
            .chain(rows_of(
                Tree::Sessions,
                &changes.sessions,
                |k| self.sessions.get(k),
                |k| session_key(*k),
                |v| RowValue(Value::Session(v)),
            ))
            .chain(rows_of(
                Tree::Requests,
                &changes.requests,
                |k| self.requests.get(k),
                |k| text_key(k),
                |v| RowValue(Value::Request(v)),
            ))
            .chain(rows_of(
                Tree::Records,
                &changes.records,
                |k| records.get(k),
                |k| text_key(k),
                |v| RowValue(Value::Record(v)),
            ))
            .chain(rows_of(
                Tree::Gates,
                &changes.gates,
                |k| gates.get(k),
                |k| text_key(k),
                |v| RowValue(Value::Gate(v)),
            ))
            .chain(rows_of(
                Tree::SharedHolders,
                &changes.shared,
                |k| self.shared.get(k),
                |k| text_key(k),
                |v| RowValue(Value::SharedHolders(v)),
            ))
            .chain(rows_of(
                Tree::Semaphores,
                &changes.semaphores,
                |k| self.semaphores.get(k),
                |k| text_key(k),
                |v| RowValue(Value::Semaphore(v)),
            ))
            .chain(rows_of(
                Tree::Elections,
                &changes.elections,
                |k| self.elections.get(k),
                |k| text_key(k),
                |v| RowValue(Value::Election(v)),
            ))
            .chain(rows_of(
                Tree::Users,
                &changes.users,
                |k| self.access.users.get(k),
                |k| text_key(k),
                |v| RowValue(Value::User(v)),
            ))
            .chain(rows_of(
                Tree::Roles,
                &changes.roles,
                |k| self.access.roles.get(k),
                |k| text_key(k),
                |v| RowValue(Value::Role(v)),
            ))
    }

    /// Every row of the table, the clock first.
    pub fn rows(&self) -> impl Iterator<Item = Row<'_>> + '_ {
        let (records, gates) = self.fences.maps();
        std::iter::once(self.clock_row())
            .chain(all_rows(Tree::Leases, self.leases.iter(), |k| text_key(k), |v| RowValue(Value::Lease(v))))
            .chain(all_rows(Tree::Queues, self.queues.iter(), |k| text_key(k), |v| RowValue(Value::Queue(v))))
            .chain(all_rows(Tree::Delays, self.delays.iter(), |k| text_key(k), |v| RowValue(Value::Delay(v))))
            .chain(all_rows(Tree::Sessions, self.sessions.iter(), |k| session_key(*k), |v| RowValue(Value::Session(v))))
            .chain(all_rows(Tree::Requests, self.requests.sorted(), |k| text_key(k), |v| RowValue(Value::Request(v))))
            .chain(all_rows(Tree::Records, records, |k| text_key(k), |v| RowValue(Value::Record(v))))
            .chain(all_rows(Tree::Gates, gates, |k| text_key(k), |v| RowValue(Value::Gate(v))))
            .chain(all_rows(
                Tree::SharedHolders,
                self.shared.iter(),
                |k| text_key(k),
                |v| RowValue(Value::SharedHolders(v)),
            ))
            .chain(all_rows(
                Tree::Semaphores,
                self.semaphores.iter(),
                |k| text_key(k),
                |v| RowValue(Value::Semaphore(v)),
            ))
            .chain(all_rows(Tree::Elections, self.elections.iter(), |k| text_key(k), |v| RowValue(Value::Election(v))))
            .chain(all_rows(Tree::Users, self.access.users.iter(), |k| text_key(k), |v| RowValue(Value::User(v))))
            .chain(all_rows(Tree::Roles, self.access.roles.iter(), |k| text_key(k), |v| RowValue(Value::Role(v))))
    }
}

/// Builds a [`LockTable`] from rows, in any order.
#[derive(Debug, Default)]
pub struct TableLoader {
    clock: Option<Clock>,
    // Collected, and made maps at the end: rows come in page order, which
    // is hash order, and a B-tree built from sorted rows costs a sort
    // instead of a search per row and comes out with full nodes. (Inserted
    // one by one, loading a million leases spent a quarter of its time in
    // B-tree searches.) A key given twice keeps its last row, as an
    // insert would.
    leases: Vec<(Arc<str>, Lease)>,
    queues: Vec<(String, VecDeque<Waiter>)>,
    delays: Vec<(String, Delay)>,
    sessions: Vec<(SessionId, Session)>,
    requests: Vec<(String, requests::Record)>,
    records: Vec<(String, Record)>,
    gates: Vec<(String, GateState)>,
    shared: Vec<(String, BTreeMap<String, Lease>)>,
    semaphores: Vec<(String, Semaphore)>,
    elections: Vec<(String, Election)>,
    users: Vec<(String, User)>,
    roles: Vec<(String, Role)>,
}

impl TableLoader {
    /// Adds the row `(tree, key)` whose value `value` deserializes. A key
    /// that is not one of `tree`'s is an error of the deserializer's kind.
    pub fn load<'de, D: Deserializer<'de>>(&mut self, tree: Tree, key: &[u8], value: D) -> Result<(), D::Error> {
        let text = || String::from_utf8(key.to_vec()).map_err(|_| D::Error::custom("a row key is not UTF-8"));
        match tree {
            Tree::Clock => self.clock = Some(Clock::deserialize(value)?),
            Tree::Leases => self.leases.push((text()?.into(), Lease::deserialize(value)?)),
            Tree::Queues => self.queues.push((text()?, VecDeque::deserialize(value)?)),
            Tree::Delays => self.delays.push((text()?, Delay::deserialize(value)?)),
            Tree::Sessions => {
                let id = key.try_into().map_err(|_| D::Error::custom("a session key is not 8 bytes"))?;
                self.sessions.push((SessionId::from_be_bytes(id), Session::deserialize(value)?));
            }
            Tree::Requests => self.requests.push((text()?, requests::Record::deserialize(value)?)),
            Tree::Records => self.records.push((text()?, Record::deserialize(value)?)),
            Tree::Gates => self.gates.push((text()?, GateState::deserialize(value)?)),
            Tree::SharedHolders => self.shared.push((text()?, BTreeMap::deserialize(value)?)),
            Tree::Semaphores => self.semaphores.push((text()?, Semaphore::deserialize(value)?)),
            Tree::Elections => self.elections.push((text()?, Election::deserialize(value)?)),
            Tree::Users => self.users.push((text()?, User::deserialize(value)?)),
            Tree::Roles => self.roles.push((text()?, Role::deserialize(value)?)),
        }
        Ok(())
    }

    /// Sorts the rows taken so far by key, keeping the order of a key
    /// given twice: loaders filled from parts of the rows on several
    /// threads sort there, and [`join`](Self::join) merges them in one pass.
    pub fn sort(&mut self) {
        by_key(&mut self.leases);
        by_key(&mut self.queues);
        by_key(&mut self.delays);
        by_key(&mut self.sessions);
        by_key(&mut self.requests);
        by_key(&mut self.records);
        by_key(&mut self.gates);
        by_key(&mut self.shared);
        by_key(&mut self.semaphores);
        by_key(&mut self.elections);
        by_key(&mut self.users);
        by_key(&mut self.roles);
    }

    /// The rows of both loaders, `later`'s after `self`'s where a key is in
    /// both; each [`sort`](Self::sort)ed, so the result is too (and
    /// [`finish`](Self::finish) then sorts it in one pass). Merged here,
    /// not appended for `finish`'s stable sort to merge: that measured about
    /// a fifth slower for a million leases' two halves.
    pub fn join(self, later: TableLoader) -> TableLoader {
        TableLoader {
            clock: later.clock.or(self.clock),
            leases: merge(self.leases, later.leases),
            queues: merge(self.queues, later.queues),
            delays: merge(self.delays, later.delays),
            sessions: merge(self.sessions, later.sessions),
            requests: merge(self.requests, later.requests),
            records: merge(self.records, later.records),
            gates: merge(self.gates, later.gates),
            shared: merge(self.shared, later.shared),
            semaphores: merge(self.semaphores, later.semaphores),
            elections: merge(self.elections, later.elections),
            users: merge(self.users, later.users),
            roles: merge(self.roles, later.roles),
        }
    }

    /// The table the rows describe, with its indexes rebuilt.
    pub fn finish(self) -> LockTable {
        let clock = self.clock.unwrap_or(Clock { now_tick: 0, tick_ms: None });
        LockTable::from(TableImage {
            now_tick: clock.now_tick,
            tick_ms: clock.tick_ms,
            leases: BTreeMap::from_iter(self.leases),
            queues: BTreeMap::from_iter(self.queues),
            requests: Requests::from(BTreeMap::from_iter(self.requests)),
            fences: Fences::from_maps(BTreeMap::from_iter(self.records), BTreeMap::from_iter(self.gates)),
            delays: BTreeMap::from_iter(self.delays),
            sessions: BTreeMap::from_iter(self.sessions),
            shared: BTreeMap::from_iter(self.shared),
            semaphores: BTreeMap::from_iter(self.semaphores),
            elections: BTreeMap::from_iter(self.elections),
            users: BTreeMap::from_iter(self.users),
            roles: BTreeMap::from_iter(self.roles),
        })
    }
}

/// Sorts rows by key, stably.
fn by_key<K: Ord, V>(rows: &mut [(K, V)]) {
    rows.sort_by(|a, b| a.0.cmp(&b.0));
}

/// Merges two runs sorted by key into one, `a`'s row first where both
/// have a key.
fn merge<K: Ord, V>(a: Vec<(K, V)>, b: Vec<(K, V)>) -> Vec<(K, V)> {
    if a.is_empty() {
        return b;
    }
    let mut merged = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if y.0 < x.0 => b.next(),
            (Some(_), _) => a.next(),
            (None, _) => b.next(),
        };
        match next {
            Some(row) => merged.push(row),
            None => return merged,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    use crate::{Command, FencingToken, Limits};

    type Store = BTreeMap<(Tree, Vec<u8>), String>;

    /// What a checkpoint does with the changed rows, JSON standing in for
    /// the node's encoding.
    fn write_changes(table: &mut LockTable, store: &mut Store, seen: &mut BTreeSet<Tree>) -> usize {
        let changes = table.take_changes();
        for row in table.changed_rows(&changes) {
            match row.value {
                Some(value) => {
                    seen.insert(row.tree);
                    store.insert((row.tree, row.key), serde_json::to_string(&value).unwrap());
                }
                None => _ = store.remove(&(row.tree, row.key)),
            }
        }
        changes.len()
    }

    fn load(rows: impl Iterator<Item = (Tree, Vec<u8>, String)>) -> LockTable {
        let mut loader = TableLoader::default();
        for (tree, key, value) in rows {
            loader.load(tree, &key, &mut serde_json::Deserializer::from_str(&value)).expect("a row loads");
        }
        loader.finish()
    }

    /// A small deterministic generator (xorshift), so a failure repeats.
    struct Dice(u64);

    impl Dice {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
        fn some<T>(&mut self, value: T) -> Option<T> {
            (self.below(3) == 0).then_some(value)
        }
    }

    /// A random command against the table's current state: every kind of
    /// command, valid or not, so every kind of row is written and removed.
    fn command(dice: &mut Dice, table: &LockTable, step: u64) -> Command {
        let name = format!("lock-{}", dice.below(12));
        let owner = format!("owner-{}", dice.below(4));
        let token = table.current_token(&name).unwrap_or(FencingToken::granted_at(dice.below(50)));
        let session = table.sessions.keys().nth(dice.below(3) as usize).copied();
        let request = format!("req-{}", dice.below(400));
        let request_id = dice.some(request);
        // A shared lease's or permits' lifetime: a ttl, or a live session
        // taken as its owner (so that its rows are written too).
        let lifetime = |dice: &mut Dice, owner: String| match (dice.below(2), session) {
            (0, _) | (_, None) => (Some(3000 + dice.below(4000)), None, owner),
            (_, Some(id)) => (None, Some(id), table.sessions[&id].owner.clone()),
        };
        match dice.below(21) {
            0..=2 => Command::Acquire {
                name,
                owner,
                ttl_ms: Some(3000 + dice.below(4000)),
                session: None,
                wait_ms: {
                    let wait = dice.below(3000);
                    dice.some(wait)
                },
                request_id,
                lock_delay_ms: {
                    let delay = dice.below(500);
                    dice.some(delay)
                },
                seq: None,
            },
            3 => Command::Acquire {
                name,
                owner,
                ttl_ms: None,
                session: session.or(Some(1)),
                wait_ms: dice.some(1000),
                request_id,
                lock_delay_ms: None,
                seq: Some(step),
            },
            4 => Command::Release { name, token, request_id, session: None, seq: None },
            5 => Command::Renew { name, token, ttl_ms: Some(4000), request_id },
            6 => Command::AcquireMany {
                names: vec![name, format!("lock-{}", dice.below(12))],
                owner,
                ttl_ms: Some(3000),
                session: None,
                wait_ms: dice.some(800),
                request_id,
                lock_delay_ms: None,
                seq: None,
            },
            7 => Command::PutRecord {
                key: format!("rec-{}", dice.below(6)),
                lock: name,
                token,
                value: "1".into(),
                request_id,
            },
            8 => Command::Gate { resource: format!("gate-{}", dice.below(4)), lock: name, token, request_id },
            9 => match (dice.below(3), session) {
                (0, Some(session)) => Command::DeleteSession { session, request_id },
                (1, Some(session)) => Command::KeepAlive { session, ttl_ms: None, request_id, seq: Some(step) },
                _ => {
                    let by = format!("user-{}", dice.below(2));
                    Command::CreateSession { owner, ttl_ms: 3000 + dice.below(4000), request_id, by: dice.some(by) }
                }
            },
            10 => Command::Cancel { name, owner },
            11 => {
                let (ttl_ms, session, owner) = lifetime(dice, owner);
                Command::AcquireShared { name, owner, ttl_ms, session, wait_ms: dice.some(1000), request_id, seq: None }
            }
            12 => {
                let token = table.shared_holder(&name, &owner).map_or(token, |g| g.token);
                Command::ReleaseShared { name, owner, token, request_id }
            }
            13 => {
                let (ttl_ms, session, owner) = lifetime(dice, owner);
                Command::AcquirePermits {
                    name: format!("sem-{}", dice.below(3)),
                    owner,
                    limit: 2,
                    permits: Some(1 + dice.below(2) as u32),
                    ttl_ms,
                    session,
                    wait_ms: dice.some(1000),
                    request_id,
                    seq: None,
                }
            }
            14 => {
                let name = format!("sem-{}", dice.below(3));
                let token = table.permits_of(&name, &owner).map_or(token, |g| g.token);
                Command::ReleasePermits { name, owner, token, request_id }
            }
            15 => Command::Campaign {
                name,
                candidate: owner,
                value: format!("{step}"),
                ttl_ms: Some(3000),
                session: None,
                wait_ms: dice.some(2000),
                request_id,
                lock_delay_ms: None,
                seq: None,
            },
            16 => {
                let candidate = table.holder(&name).map_or(owner, |g| g.owner);
                match dice.below(2) {
                    0 => Command::Proclaim { name, candidate, token, value: format!("{step}"), request_id },
                    _ => Command::Resign { name, candidate, token, request_id },
                }
            }
            17 | 18 => {
                let user = format!("user-{}", dice.below(4));
                let role = format!("role-{}", dice.below(3));
                let hash = crate::TokenHash(format!("{:064x}", dice.below(1 << 40)));
                match dice.below(9) {
                    0 => Command::AddUser { user, token: dice.some(hash) },
                    1 => Command::RemoveUser { user },
                    2 => Command::AddToken { user, token: hash },
                    3 => {
                        let token_id = table.access.users.get(&user).and_then(|u| u.tokens.keys().next().copied());
                        Command::RevokeToken { user, token_id: token_id.unwrap_or(step) }
                    }
                    4 => Command::AddRole { role },
                    5 => Command::RemoveRole { role },
                    6 => Command::GrantPermission { role, permission: crate::Permission::Lock, prefix: name },
                    7 => Command::AssignRole { user, role },
                    _ => Command::UnassignRole { user, role },
                }
            }
            _ => Command::Tick { period_ms: 500 },
        }
    }

    // Ensures the rows a checkpoint writes, applied to a store after every
    // batch of commands, always load back into the very table (indexes
    // included), and that a full dump loads back the same.
    #[test]
    fn changed_rows_keep_a_store_equal_to_the_table() {
        let (mut table, mut store, mut dice) = (LockTable::new(), Store::new(), Dice(0x9e37_79b9_7f4a_7c15));
        let (mut written, mut seen) = (0, BTreeSet::new());
        for step in 1..=6000 {
            let command = command(&mut dice, &table, step);
            if command.validate(&Limits::DEFAULT).is_ok() {
                table.apply(&command, step);
            }
            if step % 97 == 0 {
                written += write_changes(&mut table, &mut store, &mut seen);
                let loaded = load(store.iter().map(|((t, k), v)| (*t, k.clone(), v.clone())));
                assert_eq!(loaded, table, "after step {step}");
            }
        }
        assert!(written > 300, "the commands changed rows ({written})");
        assert_eq!(table.row_count() + 1, table.rows().count(), "every row but the clock");
        let dump = table.rows().map(|r| (r.tree, r.key, serde_json::to_string(&r.value.expect("a value")).unwrap()));
        assert_eq!(load(dump), table);
        for tree in Tree::ALL {
            assert!(seen.contains(&tree), "the run wrote {tree:?} rows");
            assert_eq!(Tree::from_id(tree.id()), Some(tree));
        }
    }

    // Ensures rows loaded by two loaders, each sorted, then joined, make
    // the table one loader makes of all of them, whichever part a row is in.
    #[test]
    fn loaders_of_parts_join_into_the_whole() {
        let (mut table, mut dice) = (LockTable::new(), Dice(0x2545_f491_4f6c_dd1d));
        for step in 1..=3000 {
            let command = command(&mut dice, &table, step);
            if command.validate(&Limits::DEFAULT).is_ok() {
                table.apply(&command, step);
            }
        }
        let rows: Vec<_> =
            table.rows().map(|r| (r.tree, r.key, serde_json::to_string(&r.value.expect("a value")).unwrap())).collect();
        let (mut first, mut second) = (TableLoader::default(), TableLoader::default());
        for (tree, key, value) in &rows {
            let part = if dice.below(3) == 0 { &mut first } else { &mut second };
            part.load(*tree, key, &mut serde_json::Deserializer::from_str(value)).expect("a row loads");
        }
        first.sort();
        second.sort();
        assert_eq!(first.join(second).finish(), table);
    }

    // Ensures a lease row stored with a lock delay of 0 (as leases were
    // written before they kept non-zero numbers) loads as no delay, writes
    // back without it, and that a session id of 0 is refused.
    #[test]
    fn zero_lock_delay_rows_load_as_none() {
        let row = r#"{"owner":"w","token":7,"ttl_ms":1000,"deadline":12,"lock_delay_ms":0}"#;
        let table = load([(Tree::Leases, b"a".to_vec(), row.to_owned())].into_iter());
        let lease = &table.leases["a"];
        assert_eq!((lease.token, lease.lock_delay_ms()), (FencingToken::granted_at(7), None));
        let dump: Vec<_> = table.rows().filter_map(|r| r.value).map(|v| serde_json::to_string(&v).unwrap()).collect();
        assert!(dump.iter().all(|v| !v.contains("lock_delay_ms")), "{dump:?}");
        let mut loader = TableLoader::default();
        let row = r#"{"owner":"w","token":7,"ttl_ms":1000,"deadline":12,"session":0}"#;
        assert!(loader.load(Tree::Leases, b"a", &mut serde_json::Deserializer::from_str(row)).is_err());
    }

    // Ensures a checkpoint right after another writes only the clock.
    #[test]
    fn nothing_changed_writes_only_the_clock() {
        let mut table = LockTable::new();
        table.apply(&Command::Tick { period_ms: 100 }, 1);
        let changes = table.take_changes();
        assert!(changes.is_empty());
        let rows: Vec<_> = table.changed_rows(&changes).map(|r| r.tree).collect();
        assert_eq!(rows, vec![Tree::Clock]);
    }
}
