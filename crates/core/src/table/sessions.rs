//! Sessions: one deadline, kept by keepalives, for every lock held under
//! it. A session ends on the Tick that reaches its deadline (its locks then
//! expire, lock delays included) or on delete (its locks are released); in
//! that entry every lock it held passes to its first waiter, and its own
//! waiters leave their queues.

use std::collections::{BTreeMap, BTreeSet};

use super::super::event::{EventKind, LockEvent};
use super::super::requests::RequestKind;
use super::super::InvalidCommand;
use super::types::{Answer, Asked};
use super::{event, FencingToken, Lease, LockError, LockTable, Outcome, Session, SessionId, SessionLock, SessionView};

/// Answers a session remembers for retries by sequence number, at most.
pub const MAX_SESSION_ANSWERS: usize = 64;

/// Lock names carried by the answers all sessions remember together (an
/// answer about one lock counts one, a multi-acquire's its names): beyond
/// it the oldest answers in the table are forgotten first. A name-carrying
/// answer takes at most about 900 bytes (a 256-byte name, a 128-byte owner
/// and the grant around them, and the name again in what it answered), so
/// this bounds sessions' answers to about 900 MB at worst and to about
/// 200 MB with names and owners of a few dozen bytes, whatever the number
/// of sessions — the bound a per-session count
/// alone could not give (64 multi-acquires of 64 locks in each of
/// [`MAX_SESSIONS`] sessions).
pub const MAX_REMEMBERED_NAMES: usize = 1_000_000;

/// Live sessions at most: a session without locks or answers takes a few
/// hundred bytes (its owner, deadline and index entries), so this bounds
/// sessions themselves to a few tens of MB of the replicated state.
pub const MAX_SESSIONS: usize = 100_000;

/// Why a session ended: it decides what its leases' ends count as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SessionEnd {
    /// Its deadline passed: each lease expires (a lock delay starts).
    Expired,
    /// Deleted by its owner: each lease is released.
    Deleted,
}

impl LockTable {
    /// Number of live sessions.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Session `id` with the locks it holds, if alive.
    pub fn session(&self, id: SessionId) -> Option<SessionView> {
        let session = self.sessions.get(&id)?;
        let locks = session
            .locks
            .iter()
            .map(|name| SessionLock { name: name.clone(), token: self.leases[name.as_str()].token })
            .collect();
        Some(SessionView { locks: Some(locks), ..self.session_view(id, session) })
    }

    /// The user that opened live session `id` (`Some(None)`: a built-in
    /// principal, or a session from before sessions kept it); `None` when
    /// there is no such session.
    pub fn session_opened_by(&self, id: SessionId) -> Option<Option<&str>> {
        self.sessions.get(&id).map(|s| s.by.as_deref())
    }

    /// Live sessions with ids above `after`, in id order, at most `limit`,
    /// without their lock lists.
    pub fn list_sessions(&self, after: SessionId, limit: usize) -> Vec<SessionView> {
        self.sessions.range(after.saturating_add(1)..).take(limit).map(|(id, s)| self.session_view(*id, s)).collect()
    }

    /// With `session`, that it is alive and `owner` owns it: what an
    /// acquire under a session asks (`None`: a ttl lease, no condition).
    pub(super) fn check_session(&self, session: Option<SessionId>, owner: &str) -> Result<(), LockError> {
        let Some(id) = session else { return Ok(()) };
        let session = self.sessions.get(&id).ok_or(LockError::SessionNotFound { session: id })?;
        if session.owner != owner {
            return Err(LockError::Invalid(InvalidCommand {
                field: "owner".into(),
                reason: format!("session {id} belongs to {:?}; acquire under it as that owner", session.owner),
            }));
        }
        Ok(())
    }

    /// The answer to replay for `seq` of `session`, asked for a request of
    /// `kind` about `key`, if it has one: the remembered answer,
    /// `SeqReused` if that answered another request, `SeqTooOld` for a
    /// forgotten one, `SessionNotFound`.
    pub(super) fn replay_seq(
        &self,
        id: SessionId,
        seq: u64,
        kind: RequestKind,
        key: &str,
    ) -> Option<Result<Outcome, LockError>> {
        let Some(session) = self.sessions.get(&id) else {
            return Some(Err(LockError::SessionNotFound { session: id }));
        };
        if let Some(answer) = session.answers.get(&seq) {
            if answer.asked.as_ref().is_some_and(|asked| asked.kind != kind || asked.key != key) {
                return Some(Err(LockError::SeqReused { session: id, seq }));
            }
            return Some(answer.result.clone());
        }
        (seq < session.forgotten_below).then(|| {
            let oldest = session.answers.keys().next().copied().unwrap_or(session.forgotten_below);
            Err(LockError::SeqTooOld { session: id, seq, oldest })
        })
    }

    /// Remembers `result` as the answer to `seq` of `session` (gone already
    /// if this deleted it) for the request `asked`, given in the entry at
    /// `index`; forgets the session's oldest answer beyond
    /// [`MAX_SESSION_ANSWERS`] and the table's oldest beyond
    /// [`MAX_REMEMBERED_NAMES`].
    pub(super) fn remember_seq(
        &mut self,
        id: SessionId,
        seq: u64,
        asked: Asked,
        result: &Result<Outcome, LockError>,
        index: u64,
    ) {
        let Some(session) = self.sessions.get_mut(&id) else { return };
        let answer = Answer { index, asked: Some(asked), result: result.clone() };
        self.answer_weight += answer.weight();
        self.answer_order.insert((index, id, seq));
        if let Some(replaced) = session.answers.insert(seq, answer) {
            // Not reached (a remembered seq is replayed, not applied); kept
            // exact so the weight always matches what is remembered.
            self.answer_weight -= replaced.weight();
            self.answer_order.remove(&(replaced.index, id, seq));
        }
        if session.answers.len() > MAX_SESSION_ANSWERS {
            self.forget_oldest_answer(id);
        }
        while self.answer_weight > MAX_REMEMBERED_NAMES {
            let &(_, oldest_session, _) = self.answer_order.first().expect("weight comes from remembered answers");
            self.forget_oldest_answer(oldest_session);
        }
    }

    /// Forgets the answer to the lowest seq `id` remembers: every seq below
    /// the forgotten one then counts as forgotten too (`SeqTooOld`).
    fn forget_oldest_answer(&mut self, id: SessionId) {
        let session = self.sessions.get_mut(&id).expect("answers of live sessions");
        let (seq, answer) = session.answers.pop_first().expect("a session with answers");
        session.forgotten_below = session.forgotten_below.max(seq + 1);
        self.answer_weight -= answer.weight();
        self.answer_order.remove(&(answer.index, id, seq));
    }

    /// With `session`, that lock `name` is held under it: what a release
    /// within a session asks (`None`: no such condition).
    pub(super) fn held_under(&self, name: &str, session: Option<SessionId>) -> Result<(), LockError> {
        let Some(id) = session else { return Ok(()) };
        if !self.sessions.contains_key(&id) {
            return Err(LockError::SessionNotFound { session: id });
        }
        match self.leases.get(name) {
            Some(lease) if lease.session() != Some(id) => Err(LockError::Invalid(InvalidCommand {
                field: "session".into(),
                reason: format!("lock {name:?} is not held under session {id}"),
            })),
            // Free: the release's own check says `not_held`.
            _ => Ok(()),
        }
    }

    /// The CreateSession command, in the entry at `index` (the new id);
    /// `Full` at [`MAX_SESSIONS`].
    pub(super) fn create_session(
        &mut self,
        owner: &str,
        ttl_ms: u64,
        by: Option<&str>,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        if self.sessions.len() >= MAX_SESSIONS {
            return Err(LockError::Full { what: "sessions".into(), limit: MAX_SESSIONS });
        }
        let deadline = self.deadline_for(ttl_ms);
        let session = Session {
            owner: owner.to_owned(),
            ttl_ms,
            deadline,
            locks: BTreeSet::new(),
            waits: BTreeSet::new(),
            shared: BTreeSet::new(),
            permits: BTreeSet::new(),
            permit_waits: BTreeSet::new(),
            answers: BTreeMap::new(),
            forgotten_below: 0,
            by: by.map(str::to_owned),
        };
        self.by_session_deadline.insert((deadline, index));
        let view = self.session_view(index, &session);
        self.sessions.insert(index, session);
        events
            .push(session_event(index, EventKind::SessionCreated { owner: owner.to_owned(), session: index, ttl_ms }));
        Ok(Outcome::SessionCreated { session: view })
    }

    /// The KeepAlive command: one deadline moves, whatever the session holds.
    pub(super) fn keep_alive(&mut self, id: SessionId, ttl_ms: Option<u64>) -> Result<Outcome, LockError> {
        let current = self.sessions.get(&id).ok_or(LockError::SessionNotFound { session: id })?;
        let ttl_ms = ttl_ms.unwrap_or(current.ttl_ms);
        let new = self.deadline_for(ttl_ms);
        let session = self.sessions.get_mut(&id).expect("looked up above");
        session.ttl_ms = ttl_ms;
        let old = std::mem::replace(&mut session.deadline, new);
        self.by_session_deadline.remove(&(old, id));
        self.by_session_deadline.insert((new, id));
        Ok(Outcome::KeptAlive { session: self.session_view(id, &self.sessions[&id]) })
    }

    /// The DeleteSession command (alone in its entry, see
    /// [`Batch`](super::super::Batch)).
    pub(super) fn delete_session(
        &mut self,
        id: SessionId,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        if !self.sessions.contains_key(&id) {
            return Err(LockError::SessionNotFound { session: id });
        }
        let released = self.end_sessions(&[id], SessionEnd::Deleted, index, events);
        Ok(Outcome::SessionDeleted { session: id, released: released.into_iter().map(|(name, _)| name).collect() })
    }

    /// Ends the sessions this Tick reaches; adds the leases that expired
    /// with them to `expired` and returns their ids. The Tick does this
    /// before anything else, so that nothing it frees is handed to a waiter
    /// of a session it ends (which would grant that lock twice in one entry).
    pub(super) fn expire_sessions(
        &mut self,
        expired: &mut Vec<(String, FencingToken)>,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Vec<SessionId> {
        let due: Vec<SessionId> = self
            .by_session_deadline
            .iter()
            .take_while(|(deadline, _)| *deadline <= self.now_tick)
            .map(|(_, id)| *id)
            .collect();
        expired.extend(self.end_sessions(&due, SessionEnd::Expired, index, events));
        due
    }

    /// Ends the live sessions `ids` at once: first their waiters leave their
    /// queues (of locks and of semaphores), then every lease they hold ends
    /// (`why` says how): exclusive and shared holds of locks, permits; and
    /// only then is each lock passed to its first waiter(s) and each
    /// semaphore's freed permits granted to the waiters that fit. Handing
    /// nothing over before all of them are done is what keeps a lock or a
    /// permit from being granted to one of them and freed again in the same
    /// entry (or granted under a session already gone), and lets a
    /// multi-acquire waiting for several of their locks be granted them
    /// together. Returns the leases they held.
    fn end_sessions(
        &mut self,
        ids: &[SessionId],
        why: SessionEnd,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Vec<(String, FencingToken)> {
        let mut ended = Vec::with_capacity(ids.len());
        for id in ids {
            let session = self.sessions.remove(id).expect("ids of live sessions");
            self.by_session_deadline.remove(&(session.deadline, *id));
            for (seq, answer) in &session.answers {
                self.answer_weight -= answer.weight();
                self.answer_order.remove(&(answer.index, *id, *seq));
            }
            ended.push((*id, session));
        }
        let mut left = Vec::new();
        let mut semaphores = Vec::new();
        for (id, session) in &ended {
            let ended_wait = Err(LockError::SessionNotFound { session: *id });
            for name in &session.waits {
                let cancelled = |owner: String| EventKind::Cancelled { owner };
                // None: it left with an earlier lock of its multi-acquire.
                if let Some((waiter, names)) = self.leave_queues(name, &session.owner, cancelled, index, events) {
                    if let Some(request_id) = &waiter.request_id {
                        self.requests.resolve(request_id, ended_wait.clone());
                    }
                    left.extend(names);
                }
            }
            for name in &session.permit_waits {
                let waiter = self.leave_permit_queue(name, &session.owner, false, index, events);
                if let Some(request_id) = waiter.and_then(|w| w.request_id) {
                    self.requests.resolve(&request_id, ended_wait.clone());
                }
                semaphores.push(name.clone());
            }
        }
        let (mut freed, mut returned) = (Vec::new(), Vec::new());
        for (id, session) in ended {
            let owner = session.owner;
            for name in session.locks {
                let lease = self.leases.remove(name.as_str()).expect("session locks match leases");
                self.wait_for.unhold(&lease.owner);
                let kind = self.lease_end(why, &name, &lease);
                events.push(event(index, &name, kind));
                freed.push((name, owner.clone(), lease.token));
            }
            for name in session.shared {
                let lease = self.take_shared(&name, &owner).expect("session shared locks match holders");
                // Shared leases take no lock delay.
                let kind = self.lease_end(why, &name, &lease);
                events.push(event(index, &name, kind));
                freed.push((name, owner.clone(), lease.token));
            }
            for name in session.permits {
                let held = self.take_permits(&name, &owner).expect("session permits match holders");
                let (owner, token, permits) = (owner.clone(), held.token, held.permits);
                let kind = match why {
                    SessionEnd::Expired => EventKind::PermitsExpired { owner, token, permits },
                    SessionEnd::Deleted => EventKind::PermitsReleased { owner, token, permits },
                };
                events.push(event(index, &name, kind));
                returned.push((name, token));
            }
            let kind = match why {
                SessionEnd::Expired => EventKind::SessionExpired { owner, session: id },
                SessionEnd::Deleted => EventKind::SessionDeleted { owner, session: id },
            };
            events.push(session_event(index, kind));
        }
        // A lock under a lock delay stays free until the delay ends.
        for (name, owner, token) in &freed {
            self.hand_over(name, Some((owner.clone(), *token)), index, events);
        }
        for name in &left {
            self.hand_over(name, None, index, events);
        }
        for name in semaphores.iter().chain(returned.iter().map(|(name, _)| name)) {
            self.grant_waiting_permits(name, index, events);
        }
        freed.into_iter().map(|(name, _, token)| (name, token)).chain(returned).collect()
    }

    /// The event of the end of `lease` on lock `name` with its session
    /// (`why`): an expiry (its lock delay starts) or a release.
    fn lease_end(&mut self, why: SessionEnd, name: &str, lease: &Lease) -> EventKind {
        match why {
            SessionEnd::Expired => EventKind::Expired {
                owner: lease.owner.to_string(),
                token: lease.token,
                delayed_until_tick: self.delay_after_expiry(name, lease),
                held_ticks: self.held_ticks(lease),
            },
            SessionEnd::Deleted => self.released(lease),
        }
    }

    fn session_view(&self, id: SessionId, s: &Session) -> SessionView {
        SessionView {
            session: id,
            owner: s.owner.clone(),
            ttl_ms: s.ttl_ms,
            expires_in_ms: self.expires_in_ms(s.deadline),
            deadline_tick: s.deadline,
            lock_count: s.locks.len(),
            waiting_count: s.waits.len(),
            locks: None,
        }
    }
}

/// A session's own event: it is about no one lock, so its `name` is empty
/// (no lock can have that name) and only the all-locks stream shows it.
fn session_event(index: u64, kind: EventKind) -> LockEvent {
    event(index, "", kind)
}
