//! Elections: a lock whose holder carries a value.
//!
//! The leader of election `name` is the holder of lock `name`, so every rule
//! of locks holds for it unchanged and is not written twice: candidates wait
//! in the lock's FIFO queue, a leadership lives by a ttl or a session, ends
//! by release (resign), expiry or the session's end, passes to the next
//! candidate in the entry that ends it, and honours the lock delay. Its
//! token is the index of the entry that elected it, so every leader's token
//! is higher than every earlier leader's (and than every earlier holder's of
//! the lock of that name: elections and locks share their names and tokens).
//!
//! What an election adds is the value each candidate announces. The table
//! keeps it beside the lock, per election: the leader's (with the token it
//! was announced under) and each waiting candidate's. Those values follow
//! the lock's own events ([`LockTable::follow_elections`]): a grant or
//! hand-over to a candidate makes its value the leader's (event
//! `proclaimed`), an end of the lease drops it, a wait that ends drops the
//! waiter's. So the lock's machinery needs no hook of its own, and the value
//! can never outlive or precede the lease it belongs to.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::super::event::{EventKind, LockEvent};
use super::{event, FencingToken, InvalidCommand, Lease, LockError, LockTable, Outcome, Quotas, SessionId};

/// Values kept at once over all elections: leaders' and waiting
/// candidates'. A value is up to 4 KiB where a waiter costs about a hundred
/// bytes, so the waiter and lease quotas alone would let campaigns hold
/// gigabytes; this bounds them to 40 MiB. A campaign that would keep one
/// more is refused `Full` (`campaigns`); one by a candidate already
/// standing or leading is not.
pub const MAX_CAMPAIGNS: usize = 10_000;

/// The values of one election: its leader's, and each waiting candidate's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Election {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) leader: Option<Proclamation>,
    /// By candidate: the value it announces once elected.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) candidates: BTreeMap<String, String>,
}

impl Election {
    fn is_empty(&self) -> bool {
        self.leader.is_none() && self.candidates.is_empty()
    }
}

/// The value the leader under `token` announced last (JSON text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Proclamation {
    pub(super) token: FencingToken,
    pub(super) value: String,
}

/// The leader of an election, as a reader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leader {
    pub name: String,
    pub candidate: String,
    /// The index of the entry that elected it.
    pub token: FencingToken,
    /// JSON text.
    pub value: String,
    /// The tick it was elected at.
    pub since_tick: u64,
    pub ttl_ms: u64,
    /// Lower bound on the real time its leadership has left.
    pub expires_in_ms: u64,
    pub deadline_tick: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
}

impl LockTable {
    /// The leader of election `name`: the holder of lock `name`, if it was
    /// elected by a campaign (a plain acquire of the lock announces nothing).
    pub fn leader(&self, name: &str) -> Option<Leader> {
        let lease = self.leases.get(name)?;
        let announced = self.elections.get(name)?.leader.as_ref().filter(|p| p.token == lease.token)?;
        let (ttl_ms, deadline) = self.lifetime(lease.session(), lease.ttl_ms, lease.deadline);
        Some(Leader {
            name: name.to_owned(),
            candidate: lease.owner.to_string(),
            token: lease.token,
            value: announced.value.clone(),
            since_tick: lease.granted_tick,
            ttl_ms,
            expires_in_ms: self.expires_in_ms(deadline),
            deadline_tick: deadline,
            session: lease.session(),
        })
    }

    /// Elections with a leader whose names start with `prefix`, in name
    /// order, at most `limit`.
    pub fn leaders(&self, prefix: &str, limit: usize) -> Vec<Leader> {
        self.elections
            .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .take_while(|(n, _)| n.starts_with(prefix))
            .filter_map(|(n, _)| self.leader(n))
            .take(limit)
            .collect()
    }

    /// Number of elections with a leader or a waiting candidate.
    pub fn elections(&self) -> usize {
        self.elections.len()
    }

    /// The Campaign command: the acquire of lock `name` that `wanted` (the
    /// candidate's lease) asks for, then `value` kept for the candidate. A
    /// new grant's `acquired` event makes it the leader's
    /// ([`follow_elections`](Self::follow_elections)); a leader that
    /// campaigns again announces it at once.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn campaign(
        &mut self,
        name: &str,
        value: &str,
        wanted: Lease,
        wait_ms: Option<u64>,
        quotas: &Quotas,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        let candidate = wanted.owner.to_string();
        self.room_for_campaign(name, &candidate, MAX_CAMPAIGNS)?;
        let outcome = self.acquire(name, wanted, wait_ms, quotas, index, events)?;
        match &outcome {
            Outcome::Granted { grant, reacquired: true } => {
                self.announce(name, &candidate, grant.token, value, index, events);
            }
            _ => {
                let election = self.elections.get_or_insert_with(name.to_owned(), Election::default);
                election.candidates.insert(candidate, value.to_owned());
            }
        }
        Ok(outcome)
    }

    /// `Full` when `candidate` would be one value more than `limit`
    /// ([`MAX_CAMPAIGNS`]). Counted when asked (campaigns are rare, and at
    /// most that many values are ever kept), so no count has to be kept in step.
    pub(super) fn room_for_campaign(&self, name: &str, candidate: &str, limit: usize) -> Result<(), LockError> {
        let standing = self.elections.get(name).is_some_and(|e| {
            e.candidates.contains_key(candidate)
                || (e.leader.is_some() && self.leases.get(name).is_some_and(|l| *l.owner == *candidate))
        });
        let kept: usize = self.elections.values().map(|e| e.candidates.len() + usize::from(e.leader.is_some())).sum();
        if !standing && kept >= limit {
            return Err(LockError::Full { what: "campaigns".into(), limit });
        }
        Ok(())
    }

    /// The Proclaim command.
    pub(super) fn proclaim(
        &mut self,
        name: &str,
        candidate: &str,
        token: FencingToken,
        value: &str,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        self.check_leader(name, candidate, token, index)?;
        self.announce(name, candidate, token, value, index, events);
        let leader = self.leader(name).expect("announced just now");
        Ok(Outcome::Proclaimed { leader })
    }

    /// The Resign command: a release of the leadership's lease.
    pub(super) fn resign(
        &mut self,
        name: &str,
        candidate: &str,
        token: FencingToken,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) -> Result<Outcome, LockError> {
        self.check_leader(name, candidate, token, index)?;
        self.release(name, token, index, events)
    }

    /// That `candidate` leads `name` under `token`, granted before this
    /// entry (see `check_granted_before`).
    fn check_leader(&self, name: &str, candidate: &str, token: FencingToken, index: u64) -> Result<(), LockError> {
        self.check_granted_before(name, token, index)?;
        let holder = self.leases.get(name).map(|l| &*l.owner);
        if holder != Some(candidate) {
            return Err(LockError::Invalid(InvalidCommand {
                field: "candidate".into(),
                reason: format!("{candidate:?} is not the leader of {name:?} under token {token}"),
            }));
        }
        Ok(())
    }

    /// Makes `value` the announced value of the leader under `token`.
    fn announce(
        &mut self,
        name: &str,
        candidate: &str,
        token: FencingToken,
        value: &str,
        index: u64,
        events: &mut Vec<LockEvent>,
    ) {
        let election = self.elections.get_or_insert_with(name.to_owned(), Election::default);
        election.leader = Some(Proclamation { token, value: value.to_owned() });
        let kind = EventKind::Proclaimed { owner: candidate.to_owned(), token, value: value.to_owned() };
        events.push(event(index, name, kind));
    }

    /// Brings the elections' values in line with the lock `events` of one
    /// command, in their order, adding a `proclaimed` event after each grant
    /// to a candidate: its value is now the leader's.
    pub(super) fn follow_elections(&mut self, events: &mut Vec<LockEvent>) {
        if self.elections.is_empty() {
            return;
        }
        let mut i = 0;
        while i < events.len() {
            if let Some(proclaimed) = self.follow(&events[i]) {
                i += 1;
                events.insert(i, proclaimed);
            }
            i += 1;
        }
    }

    /// What lock event `e` does to its election, if the lock is one; the
    /// `proclaimed` event of a candidate it elected.
    fn follow(&mut self, e: &LockEvent) -> Option<LockEvent> {
        let election = self.elections.get(&e.name)?;
        let (candidate, gone) = match &e.kind {
            EventKind::Acquired { owner, token } | EventKind::HandedOver { owner, token, .. } => {
                (Some((owner, *token)), election.leader.is_some())
            }
            EventKind::Released { token, .. } | EventKind::Expired { token, .. } => {
                (None, election.leader.as_ref().is_some_and(|p| p.token == *token))
            }
            EventKind::WaitTimeout { owner } | EventKind::Cancelled { owner } => {
                if !election.candidates.contains_key(owner) {
                    return None;
                }
                let mut election = self.elections.remove(&e.name).expect("found above");
                election.candidates.remove(owner);
                self.keep_election(&e.name, election);
                return None;
            }
            _ => return None,
        };
        if candidate.is_none() && !gone {
            return None;
        }
        let mut election = self.elections.remove(&e.name).expect("found above");
        election.leader = None;
        // A grant to an owner that did not campaign (a plain acquire of the
        // lock) elects nobody: the election has no leader while it holds.
        let elected = candidate.and_then(|(owner, token)| {
            let value = election.candidates.remove(owner)?;
            election.leader = Some(Proclamation { token, value: value.clone() });
            Some(event(e.index, &e.name, EventKind::Proclaimed { owner: owner.clone(), token, value }))
        });
        self.keep_election(&e.name, election);
        elected
    }

    /// Stores `election` under `name` unless nothing is left in it.
    fn keep_election(&mut self, name: &str, election: Election) {
        if !election.is_empty() {
            self.elections.insert(name.to_owned(), election);
        }
    }
}
