//! The checker: a pure function from (client operations, resource writes) to
//! the violations it finds. No clock, no I/O; every time is µs on the
//! harness's monotonic clock.
//!
//! What it checks, per lock name. A multi-lock acquire that was granted
//! counts as a grant of each of its names under its one token (and a
//! multi-release as a release of each); a lock acquired under a session
//! lives as long as the session, not by a ttl of its own (see
//! [`SessionLife`]):
//!
//! - **Tokens increase** ([`ViolationKind::TokenNotIncreasing`]): a grant
//!   sent after another grant was acknowledged carries a greater token, and
//!   no token is granted to two clients.
//! - **No regression** ([`ViolationKind::TokenRegression`]): a read or renew
//!   never sees a token below one acknowledged before it was sent.
//! - **No stale write** ([`ViolationKind::StaleWriteAccepted`]): the resource
//!   never accepted a token below one it had accepted earlier for that lock.
//! - **No double grant** ([`ViolationKind::OverlappingGrants`]): the windows
//!   in which two clients believed they held the lock do not overlap. A
//!   window opens when the client receives the grant (a queued acquire was
//!   sent long before it was granted: counting from its send time would make
//!   every waiter overlap the holder it waited for) and closes at the latest
//!   send time + ttl of the grant and its acknowledged renewals — for a lock
//!   under a session, of the session's acknowledged create and keepalives —
//!   or earlier at the send time of the client's release or of its session's
//!   delete (acknowledged or not: a holder stops acting on a lease when it
//!   sends its release).
//! - **Acknowledged means durable** ([`ViolationKind::LostGrant`],
//!   [`LostRenew`](ViolationKind::LostRenew), [`LostRelease`](ViolationKind::LostRelease)):
//!   a read sent after a grant was acknowledged, answered before that lease
//!   could have expired (send time + ttl of the grant or of a renewal —
//!   for a session's lock, of a create or keepalive of the session —
//!   acknowledged before the read), with no release of it (nor delete of its
//!   session) sent, sees that lease; a read sent after a release, or the
//!   delete of the session the lock was held under, was acknowledged does
//!   not see the released token.
//! - **No overlapping critical sections** ([`ViolationKind::OverlappingSections`]):
//!   at the resource, the spans between the first and last accepted write of
//!   two (client, token) sections do not overlap. This is what an unfenced
//!   resource suffers when a lock service grants twice.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::{OpKind, OpResult, Operation, ResourceWrite};

/// The kinds of violation, one per property above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    TokenNotIncreasing,
    TokenRegression,
    StaleWriteAccepted,
    OverlappingGrants,
    LostGrant,
    LostRenew,
    LostRelease,
    OverlappingSections,
    /// Two candidates were leaders under one token (`chaos::election`).
    TwoLeaders,
    /// An observer saw a leader's token go down.
    LeaderTokenOrder,
    /// An observer saw an event twice, or out of log order.
    ObserverOrder,
    /// An observer missed a leader elected between two it saw.
    ObserverGap,
    /// More semaphore permits surely held at once than its limit (`chaos::sharing`).
    PermitsOverLimit,
    /// An exclusive holder of a lock overlapped another holder, shared or exclusive.
    SharedExclusion,
    /// A grant's token was not above that of a grant of its name answered before it was asked.
    GrantTokenOrder,
}

impl ViolationKind {
    pub const ALL: [ViolationKind; 15] = [
        ViolationKind::TokenNotIncreasing,
        ViolationKind::TokenRegression,
        ViolationKind::StaleWriteAccepted,
        ViolationKind::OverlappingGrants,
        ViolationKind::LostGrant,
        ViolationKind::LostRenew,
        ViolationKind::LostRelease,
        ViolationKind::OverlappingSections,
        ViolationKind::TwoLeaders,
        ViolationKind::LeaderTokenOrder,
        ViolationKind::ObserverOrder,
        ViolationKind::ObserverGap,
        ViolationKind::PermitsOverLimit,
        ViolationKind::SharedExclusion,
        ViolationKind::GrantTokenOrder,
    ];
}

/// One violation: where, when (µs on the harness clock) and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub kind: ViolationKind,
    pub lock: String,
    pub at_us: u64,
    pub detail: String,
}

/// What [`check`] found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckReport {
    pub operations: usize,
    pub writes: usize,
    pub violations: Vec<Violation>,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// Violations per kind (kinds with none left out).
    pub fn counts(&self) -> BTreeMap<ViolationKind, usize> {
        let mut counts = BTreeMap::new();
        for v in &self.violations {
            *counts.entry(v.kind).or_default() += 1;
        }
        counts
    }

    /// Up to `n` examples of each kind, one line each.
    pub fn examples(&self, n: usize) -> Vec<String> {
        ViolationKind::ALL
            .iter()
            .flat_map(|kind| {
                self.violations
                    .iter()
                    .filter(move |v| v.kind == *kind)
                    .take(n)
                    .map(|v| format!("{:?} on {} at {:.3}s: {}", v.kind, v.lock, v.at_us as f64 / 1e6, v.detail))
            })
            .collect()
    }
}

/// Checks `operations` and `writes` (see the module documentation).
pub fn check(operations: &[Operation], writes: &[ResourceWrite]) -> CheckReport {
    let mut violations = Vec::new();
    let mut by_lock: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
    let mut sessions: HashMap<u64, SessionLife> = HashMap::new();
    for op in operations {
        for lock in op.locks() {
            by_lock.entry(lock).or_default().push(op);
        }
        if let (true, Some(id)) = (op.kind.is_session(), op.session) {
            sessions.entry(id).or_default().add(op);
        }
    }
    for (lock, ops) in &by_lock {
        let leases = leases(ops, &sessions);
        check_tokens(lock, ops, &mut violations);
        check_windows(lock, &leases, &mut violations);
        check_reads(lock, ops, &leases, &mut violations);
    }
    check_writes(writes, &mut violations);
    violations.sort_by_key(|v| v.at_us);
    CheckReport { operations: operations.len(), writes: writes.len(), violations }
}

fn is_grant(op: &Operation) -> bool {
    op.is_grant()
}

/// What the history shows of one session. A lock held under it ends with
/// it: when its holder deletes it, or when its deadline passes without a
/// keepalive. The cluster never ends a session before ttl of real time after
/// the send of its create or of an acknowledged keepalive (no early expiry;
/// a keepalive only succeeds on a live session, and sessions never come
/// back), so the latest such send + ttl is a time until which the session,
/// and every lock granted under it and not released, is surely held. A
/// keepalive or create whose answer never came may have pushed the deadline
/// further; counting only acknowledged ones keeps the bound safe, at the
/// price of missing a double grant inside that unknown extension.
#[derive(Debug, Default)]
struct SessionLife<'a> {
    /// Acknowledged creates and keepalives.
    alive: Vec<&'a Operation>,
    /// Send time of the first delete of the session, acknowledged or not:
    /// its holder stopped counting on it then.
    delete_sent_us: Option<u64>,
    /// Acknowledged deletes.
    deleted: Vec<&'a Operation>,
}

impl<'a> SessionLife<'a> {
    fn add(&mut self, op: &'a Operation) {
        match (op.kind, &op.result) {
            (OpKind::SessionCreate | OpKind::KeepAlive, OpResult::SessionAlive { .. }) => self.alive.push(op),
            (OpKind::SessionDelete, result) => {
                self.delete_sent_us = Some(self.delete_sent_us.map_or(op.sent_us, |s| s.min(op.sent_us)));
                if *result == OpResult::Released {
                    self.deleted.push(op);
                }
            }
            _ => {}
        }
    }

    /// Until when the session surely lives, by the creates and keepalives
    /// acknowledged before `known_before_us`, and whether a keepalive (not
    /// the create) set it; `None` when none was.
    fn alive_until(&self, known_before_us: u64) -> Option<(u64, bool)> {
        self.alive
            .iter()
            .filter(|op| op.received_us < known_before_us)
            .map(|op| (op.sent_us + ttl_us(op), op.kind == OpKind::KeepAlive))
            .max_by_key(|(until, _)| *until)
    }
}

/// One acknowledged grant with what the client later did under it.
struct Lease<'a> {
    grant: &'a Operation,
    token: u64,
    ttl_us: u64,
    /// Acknowledged renewals of this lease by its client.
    renewals: Vec<&'a Operation>,
    /// Send time of the client's first release of this lease, if any.
    release_sent_us: Option<u64>,
    /// The session the lock was granted under: it then has no ttl of its
    /// own and lives as long as the session (an empty life when the history
    /// has nothing of the session).
    session: Option<&'a SessionLife<'a>>,
}

/// The life of a session of which the history shows nothing.
static UNKNOWN_SESSION: SessionLife<'static> =
    SessionLife { alive: Vec::new(), delete_sent_us: None, deleted: Vec::new() };

impl Lease<'_> {
    /// When the client stops believing it holds the lock.
    fn window_end(&self) -> u64 {
        let end = match self.session {
            Some(session) => session.alive_until(u64::MAX).map_or(0, |(until, _)| until),
            None => {
                let renewed = self.renewals.iter().map(|r| r.sent_us + ttl_us(r)).max().unwrap_or(0);
                (self.grant.sent_us + self.ttl_us).max(renewed)
            }
        };
        self.stopped_us().map_or(end, |r| end.min(r))
    }

    /// When the client stopped counting on the lease: the send of its first
    /// release, or of its session's first delete.
    fn stopped_us(&self) -> Option<u64> {
        let deleted = self.session.and_then(|s| s.delete_sent_us);
        [self.release_sent_us, deleted].into_iter().flatten().min()
    }

    /// The earliest the cluster may end the lease, as a read sent at
    /// `read_sent_us` knows it: send time + ttl of the grant or of a renewal
    /// acknowledged before the read (for a lock under a session: of the
    /// session's create or keepalive acknowledged before the read). Returns
    /// the bound and whether a renewal (keepalive) set it.
    fn held_until(&self, read_sent_us: u64) -> (u64, bool) {
        if let Some(session) = self.session {
            return session.alive_until(read_sent_us).unwrap_or((0, false));
        }
        let granted = self.grant.sent_us + self.ttl_us;
        let renewed =
            self.renewals.iter().filter(|r| r.received_us < read_sent_us).map(|r| r.sent_us + ttl_us(r)).max();
        match renewed {
            Some(r) if r > granted => (r, true),
            _ => (granted, false),
        }
    }
}

fn ttl_us(op: &Operation) -> u64 {
    match op.result {
        OpResult::Granted { ttl_ms, .. } | OpResult::SessionAlive { ttl_ms } => ttl_ms * 1000,
        _ => 0,
    }
}

fn leases<'a>(ops: &[&'a Operation], sessions: &'a HashMap<u64, SessionLife<'a>>) -> Vec<Lease<'a>> {
    let mut leases: Vec<Lease<'a>> = ops
        .iter()
        .filter(|op| is_grant(op))
        .map(|op| Lease {
            grant: op,
            token: op.observed_token().unwrap_or_default(),
            ttl_us: ttl_us(op),
            renewals: Vec::new(),
            release_sent_us: None,
            session: op.session.map(|id| sessions.get(&id).unwrap_or(&UNKNOWN_SESSION)),
        })
        .collect();
    for op in ops {
        let Some(lease) = leases.iter_mut().find(|l| Some(l.token) == op.token && l.grant.client == op.client) else {
            continue;
        };
        match (op.kind, &op.result) {
            (OpKind::Renew, OpResult::Granted { .. }) => lease.renewals.push(op),
            (OpKind::Release | OpKind::MultiRelease, _) => {
                lease.release_sent_us = Some(lease.release_sent_us.map_or(op.sent_us, |s| s.min(op.sent_us)))
            }
            _ => {}
        }
    }
    leases
}

/// Tokens increase across grants, and no read or renew goes backwards.
fn check_tokens(lock: &str, ops: &[&Operation], violations: &mut Vec<Violation>) {
    let mut clients_of_token: HashMap<u64, HashSet<&str>> = HashMap::new();
    for op in ops.iter().filter(|op| is_grant(op)) {
        let token = op.observed_token().unwrap_or_default();
        let clients = clients_of_token.entry(token).or_default();
        clients.insert(op.client.as_str());
        if clients.len() == 2 {
            violations.push(Violation {
                kind: ViolationKind::TokenNotIncreasing,
                lock: lock.to_owned(),
                at_us: op.received_us,
                detail: format!("token {token} granted to several clients: {clients:?}"),
            });
        }
    }
    // Observations ordered by acknowledgement, with the running maximum, so
    // "the highest token acknowledged before t" is one binary search.
    let mut acknowledged: Vec<&Operation> = ops.iter().copied().filter(|op| op.observed_token().is_some()).collect();
    acknowledged.sort_by_key(|op| op.received_us);
    let mut running_max: Vec<&Operation> = Vec::with_capacity(acknowledged.len());
    for op in &acknowledged {
        let keep = running_max.last().filter(|m| m.observed_token() >= op.observed_token()).copied();
        running_max.push(keep.unwrap_or(op));
    }
    for op in &acknowledged {
        let before = acknowledged.partition_point(|a| a.received_us < op.sent_us);
        let Some(highest) = before.checked_sub(1).map(|i| running_max[i]) else {
            continue;
        };
        let (seen, high) = (op.observed_token().unwrap_or_default(), highest.observed_token().unwrap_or_default());
        let kind = if is_grant(op) {
            // A new grant after an acknowledged one must be above it; the same
            // client may see its own token again (a retried request).
            if seen > high || (seen == high && highest.client == op.client) {
                continue;
            }
            ViolationKind::TokenNotIncreasing
        } else if seen < high {
            ViolationKind::TokenRegression
        } else {
            continue;
        };
        violations.push(Violation {
            kind,
            lock: lock.to_owned(),
            at_us: op.received_us,
            detail: format!(
                "{:?} by {} saw token {seen} after token {high} was acknowledged to {}",
                op.kind, op.client, highest.client
            ),
        });
    }
}

/// No two clients believed they held the lock at once.
fn check_windows(lock: &str, leases: &[Lease], violations: &mut Vec<Violation>) {
    let mut windows: Vec<(u64, u64, &Lease)> =
        leases.iter().map(|l| (l.grant.received_us, l.window_end(), l)).filter(|(s, e, _)| s < e).collect();
    windows.sort_by_key(|w| w.0);
    let mut latest: Option<(u64, &Lease)> = None;
    for (start, end, lease) in windows {
        if let Some((other_end, other)) = latest {
            if start < other_end && other.grant.client != lease.grant.client {
                violations.push(Violation {
                    kind: ViolationKind::OverlappingGrants,
                    lock: lock.to_owned(),
                    at_us: start,
                    detail: format!(
                        "{} (token {}) held it until {:.3}s when {} (token {}) was granted",
                        other.grant.client,
                        other.token,
                        other_end as f64 / 1e6,
                        lease.grant.client,
                        lease.token
                    ),
                });
            }
        }
        if latest.is_none_or(|(e, _)| end > e) {
            latest = Some((end, lease));
        }
    }
}

/// Linearizable reads reflect every acknowledged grant, renewal and release.
fn check_reads(lock: &str, ops: &[&Operation], leases: &[Lease], violations: &mut Vec<Violation>) {
    let released: Vec<&Operation> = ops
        .iter()
        .copied()
        .filter(|op| matches!(op.kind, OpKind::Release | OpKind::MultiRelease) && op.result == OpResult::Released)
        .collect();
    for read in ops.iter().filter(|op| op.kind == OpKind::Read) {
        let seen = read.observed_token();
        if !matches!(read.result, OpResult::Held { .. } | OpResult::Free) {
            continue;
        }
        for lease in leases.iter().filter(|l| l.grant.received_us < read.sent_us) {
            let (until, by_renewal) = lease.held_until(read.sent_us);
            let release_may_have_applied = lease.stopped_us().is_some_and(|s| s < read.received_us);
            if read.received_us <= until && !release_may_have_applied && seen != Some(lease.token) {
                violations.push(Violation {
                    kind: if by_renewal { ViolationKind::LostRenew } else { ViolationKind::LostGrant },
                    lock: lock.to_owned(),
                    at_us: read.received_us,
                    detail: format!(
                        "read by {} saw {:?}, but {} held token {} until at least {:.3}s",
                        read.client,
                        read.result,
                        lease.grant.client,
                        lease.token,
                        until as f64 / 1e6
                    ),
                });
            }
        }
        for release in released.iter().filter(|r| r.received_us < read.sent_us && r.token == seen) {
            violations.push(Violation {
                kind: ViolationKind::LostRelease,
                lock: lock.to_owned(),
                at_us: read.received_us,
                detail: format!(
                    "read by {} saw token {} after {} released it",
                    read.client,
                    seen.unwrap_or_default(),
                    release.client
                ),
            });
        }
        // A delete releases every lock of its session in one entry.
        for lease in leases.iter().filter(|l| seen == Some(l.token)) {
            let deletes = lease.session.map_or(&[][..], |s| &s.deleted[..]);
            if let Some(delete) = deletes.iter().find(|d| d.received_us < read.sent_us) {
                violations.push(Violation {
                    kind: ViolationKind::LostRelease,
                    lock: lock.to_owned(),
                    at_us: read.received_us,
                    detail: format!(
                        "read by {} saw token {} after {} deleted session {}, which held it",
                        read.client,
                        lease.token,
                        delete.client,
                        delete.session.unwrap_or_default()
                    ),
                });
            }
        }
    }
}

/// The resource's log: no stale token accepted, no overlapping sections.
fn check_writes(writes: &[ResourceWrite], violations: &mut Vec<Violation>) {
    let mut by_resource: BTreeMap<(&str, &str), Vec<&ResourceWrite>> = BTreeMap::new();
    for w in writes.iter().filter(|w| w.accepted) {
        by_resource.entry((w.request.resource.as_str(), w.request.lock.as_str())).or_default().push(w);
    }
    for ((resource, lock), mut accepted) in by_resource {
        accepted.sort_by_key(|w| w.received_us);
        let mut highest = 0;
        let mut sections: BTreeMap<(&str, u64), (u64, u64)> = BTreeMap::new();
        for w in &accepted {
            let token = w.request.token;
            if token < highest {
                violations.push(Violation {
                    kind: ViolationKind::StaleWriteAccepted,
                    lock: lock.to_owned(),
                    at_us: w.received_us,
                    detail: format!(
                        "{resource} accepted token {token} from {} after token {highest}",
                        w.request.client
                    ),
                });
            }
            highest = highest.max(token);
            let span = sections.entry((w.request.client.as_str(), token)).or_insert((w.received_us, w.received_us));
            span.1 = w.received_us;
        }
        let mut spans: Vec<_> = sections.into_iter().collect();
        spans.sort_by_key(|(_, (start, _))| *start);
        let mut latest: Option<(u64, (&str, u64))> = None;
        for (section, (start, end)) in spans {
            if let Some((other_end, other)) = latest {
                if start < other_end {
                    violations.push(Violation {
                        kind: ViolationKind::OverlappingSections,
                        lock: lock.to_owned(),
                        at_us: start,
                        detail: format!(
                            "{resource}: {} (token {}) began while {} (token {}) was still writing",
                            section.0, section.1, other.0, other.1
                        ),
                    });
                }
            }
            if latest.is_none_or(|(e, _)| end > e) {
                latest = Some((end, section));
            }
        }
    }
}

/// What a two-holder hand-over (`bench --safety`: holder A, a fault, then
/// holder B on the same lock) shows besides [`check`]'s violations. Both are
/// judged on acknowledged grants of waiting acquires, on the harness clock,
/// and hold only where the scenario makes B write before A writes again —
/// so they are counts for that scenario, not properties of every history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HandOver {
    /// Acknowledged grants.
    pub grants: usize,
    /// **Superseded write accepted**: the fenced resource accepted a write
    /// from a client after another client's later grant was acknowledged
    /// (and before the writer was granted again). Unlike
    /// [`ViolationKind::StaleWriteAccepted`] this does not need tokens: it
    /// is what fencing must prevent, stated in time.
    pub superseded_writes_accepted: usize,
    /// **Grant taken while valid**: another client was granted the lock, by
    /// an acquire sent after the grant was acknowledged, before the grant
    /// ran out (send time + ttl) or was released: the system forgot an
    /// acknowledged grant.
    pub grants_taken_while_valid: usize,
}

/// One acknowledged grant of a waiting acquire.
struct GrantSpan<'a> {
    client: &'a str,
    /// Send time of the acquire that won it.
    sent_us: u64,
    received_us: u64,
    /// When its client stopped counting on it: the end of its validity, or
    /// the send of its release if earlier.
    end_us: u64,
}

/// Counts [`HandOver`] for `operations` and the fenced resource's `writes`.
pub fn check_hand_over(operations: &[Operation], fenced: &[ResourceWrite]) -> HandOver {
    let grants = grant_spans(operations);
    HandOver {
        grants: grants.len(),
        superseded_writes_accepted: superseded_writes_accepted(&grants, fenced),
        grants_taken_while_valid: grants_taken_while_valid(&grants),
    }
}

fn grant_spans(operations: &[Operation]) -> Vec<GrantSpan<'_>> {
    operations
        .iter()
        .filter_map(|op| match op.result {
            OpResult::Granted { token, ttl_ms } if op.kind == OpKind::AcquireWait => {
                let released = operations
                    .iter()
                    .filter(|r| r.kind == OpKind::Release && r.client == op.client && r.token == Some(token))
                    .map(|r| r.sent_us)
                    .min();
                let valid = op.sent_us + ttl_ms * 1000;
                Some(GrantSpan {
                    client: &op.client,
                    sent_us: op.sent_us,
                    received_us: op.received_us,
                    end_us: released.map_or(valid, |r| r.min(valid)),
                })
            }
            _ => None,
        })
        .collect()
}

fn superseded_writes_accepted(grants: &[GrantSpan], fenced: &[ResourceWrite]) -> usize {
    fenced
        .iter()
        .filter(|w| w.accepted)
        .filter(|w| {
            // The writer's grant: its latest acknowledged before the write.
            let own = grants
                .iter()
                .filter(|g| g.client == w.request.client && g.received_us <= w.received_us)
                .map(|g| g.received_us)
                .max();
            own.is_some_and(|own| {
                grants
                    .iter()
                    .any(|g| g.client != w.request.client && g.received_us > own && g.received_us < w.received_us)
            })
        })
        .count()
}

fn grants_taken_while_valid(grants: &[GrantSpan]) -> usize {
    grants
        .iter()
        .filter(|g| {
            grants.iter().any(|h| h.client != g.client && h.sent_us > g.received_us && h.received_us < g.end_us)
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Phase, WriteRequest};

    const TTL_MS: u64 = 3_000;
    const S: u64 = 1_000_000;

    fn op(kind: OpKind, client: &str, token: Option<u64>, sent: u64, received: u64, result: OpResult) -> Operation {
        Operation {
            kind,
            lock: "hot".into(),
            names: Vec::new(),
            session: None,
            client: client.into(),
            request_id: None,
            token,
            key: None,
            holder: None,
            sent_us: sent,
            received_us: received,
            result,
        }
    }

    fn grant(client: &str, token: u64, sent: u64, received: u64) -> Operation {
        op(OpKind::AcquireTry, client, None, sent, received, OpResult::Granted { token, ttl_ms: TTL_MS })
    }

    fn release(client: &str, token: u64, sent: u64, received: u64) -> Operation {
        op(OpKind::Release, client, Some(token), sent, received, OpResult::Released)
    }

    fn read(sent: u64, received: u64, seen: Option<(&str, u64)>) -> Operation {
        let result = match seen {
            Some((owner, token)) => OpResult::Held { owner: owner.into(), token },
            None => OpResult::Free,
        };
        op(OpKind::Read, "reader", None, sent, received, result)
    }

    fn write(client: &str, token: u64, phase: Phase, at: u64, accepted: bool) -> ResourceWrite {
        let request = WriteRequest { resource: "hot".into(), client: client.into(), lock: "hot".into(), token, phase };
        ResourceWrite { request, accepted, received_us: at }
    }

    /// Two clients taking turns, each reading its own lease, writing under
    /// it and releasing; one refused stale write.
    fn clean() -> (Vec<Operation>, Vec<ResourceWrite>) {
        let ops = vec![
            grant("a", 5, 0, 10),
            read(20, 30, Some(("a", 5))),
            release("a", 5, 100, 110),
            read(120, 130, None),
            op(OpKind::AcquireTry, "b", None, 50, 60, OpResult::Refused { code: "held".into() }),
            grant("b", 9, 200, 210),
            op(OpKind::Renew, "b", Some(9), 300, 310, OpResult::Granted { token: 9, ttl_ms: TTL_MS }),
            read(400, 410, Some(("b", 9))),
            release("b", 9, 500, 510),
            // An answer that never came: no claim either way.
            op(OpKind::AcquireTry, "c", None, 600, 20 * S, OpResult::Unknown { reason: "timeout".into() }),
        ];
        let writes = vec![
            write("a", 5, Phase::Begin, 40, true),
            write("a", 5, Phase::End, 90, true),
            write("b", 9, Phase::Begin, 220, true),
            write("a", 5, Phase::End, 230, false),
            write("b", 9, Phase::End, 490, true),
        ];
        (ops, writes)
    }

    fn kinds(report: &CheckReport) -> Vec<ViolationKind> {
        report.counts().into_keys().collect()
    }

    // A clean history reports nothing.
    #[test]
    fn clean_history_reports_nothing() {
        let (ops, writes) = clean();
        let report = check(&ops, &writes);
        assert!(report.is_clean(), "{:?}", report.examples(3));
        assert_eq!((report.operations, report.writes), (10, 5));
    }

    // A stale token accepted by the resource is reported.
    #[test]
    fn stale_write_accepted_is_reported() {
        let (ops, mut writes) = clean();
        writes[3].accepted = true;
        let report = check(&ops, &writes);
        assert!(kinds(&report).contains(&ViolationKind::StaleWriteAccepted), "{:?}", report.examples(3));
    }

    // Two clients holding one lock at once is reported.
    #[test]
    fn double_grant_is_reported() {
        let (mut ops, writes) = clean();
        // b is granted while a's lease (granted at 0, released at 100) runs.
        ops[5] = grant("b", 9, 40, 50);
        let report = check(&ops, &writes);
        assert!(kinds(&report).contains(&ViolationKind::OverlappingGrants), "{:?}", report.examples(3));
    }

    // A release that was acknowledged and then undone is reported.
    #[test]
    fn lost_acknowledged_release_is_reported() {
        let (mut ops, writes) = clean();
        ops[3] = read(120, 130, Some(("a", 5)));
        let report = check(&ops, &writes);
        assert_eq!(kinds(&report), vec![ViolationKind::LostRelease], "{:?}", report.examples(3));
    }

    // A grant that was acknowledged and then forgotten is reported.
    #[test]
    fn lost_acknowledged_grant_is_reported() {
        let (mut ops, writes) = clean();
        ops[1] = read(20, 30, None);
        let report = check(&ops, &writes);
        assert_eq!(kinds(&report), vec![ViolationKind::LostGrant], "{:?}", report.examples(3));
    }

    // Tokens going backwards, in a read or in a grant, are reported.
    #[test]
    fn token_regression_is_reported() {
        let (mut ops, writes) = clean();
        ops[7] = read(400, 410, Some(("a", 5)));
        let report = check(&ops, &writes);
        assert!(kinds(&report).contains(&ViolationKind::TokenRegression), "{:?}", report.examples(3));

        let (mut ops, writes) = clean();
        ops.push(grant("d", 7, 600, 610));
        let report = check(&ops, &writes);
        assert_eq!(kinds(&report), vec![ViolationKind::TokenNotIncreasing], "{:?}", report.examples(3));
    }

    // Overlapping critical sections at an unfenced resource are reported.
    #[test]
    fn overlapping_sections_are_reported() {
        let (ops, mut writes) = clean();
        writes.push(write("c", 7, Phase::Begin, 80, true));
        writes.push(write("c", 7, Phase::End, 95, true));
        let report = check(&ops, &writes);
        assert!(kinds(&report).contains(&ViolationKind::OverlappingSections), "{:?}", report.examples(3));
    }

    fn multi(kind: OpKind, client: &str, names: &[&str], token: Option<u64>, sent: u64, received: u64) -> Operation {
        let result = match kind {
            OpKind::MultiRelease => OpResult::Released,
            _ => OpResult::Granted { token: token.unwrap_or_default(), ttl_ms: TTL_MS },
        };
        let token = (kind == OpKind::MultiRelease).then_some(token).flatten();
        let mut o = op(kind, client, token, sent, received, result);
        o.lock = String::new();
        o.names = names.iter().map(|n| n.to_string()).collect();
        o
    }

    fn multi_grant(client: &str, names: &[&str], token: u64, sent: u64, received: u64) -> Operation {
        multi(OpKind::MultiAcquireTry, client, names, Some(token), sent, received)
    }

    fn multi_release(client: &str, names: &[&str], token: u64, sent: u64, received: u64) -> Operation {
        multi(OpKind::MultiRelease, client, names, Some(token), sent, received)
    }

    fn violations_on(report: &CheckReport, kind: ViolationKind) -> Vec<&str> {
        report.violations.iter().filter(|v| v.kind == kind).map(|v| v.lock.as_str()).collect()
    }

    // A multi-lock grant is a grant of each of its names: one that takes a
    // name another client holds is a double grant of that name.
    #[test]
    fn double_grant_through_a_multi_acquire_is_reported() {
        // Between a's release (sent at 100) and b's grant (sent at 200): clean.
        let (mut ops, writes) = clean();
        ops.push(multi_grant("m", &["cold", "hot"], 7, 120, 140));
        ops.push(multi_release("m", &["cold", "hot"], 7, 150, 160));
        let report = check(&ops, &writes);
        assert!(report.is_clean(), "{:?}", report.examples(3));

        // While a holds hot (granted at 10, release sent at 100).
        let (mut ops, writes) = clean();
        ops.push(multi_grant("m", &["cold", "hot"], 7, 40, 50));
        ops.push(multi_release("m", &["cold", "hot"], 7, 150, 160));
        let report = check(&ops, &writes);
        assert_eq!(violations_on(&report, ViolationKind::OverlappingGrants), vec!["hot"], "{:?}", report.examples(3));
    }

    // Tokens strictly increase per name whether a name is granted alone or
    // in a multi-lock grant: a lower or a reused token on one of its names
    // is reported on that name only.
    #[test]
    fn non_increasing_token_per_name_is_reported() {
        // b's grant of hot under 9 was acknowledged at 210 and released at 500.
        for token in [8, 9] {
            let (mut ops, writes) = clean();
            ops.push(multi_grant("m", &["cold", "hot"], token, 700, 710));
            let report = check(&ops, &writes);
            assert_eq!(kinds(&report), vec![ViolationKind::TokenNotIncreasing], "{:?}", report.examples(3));
            assert!(violations_on(&report, ViolationKind::TokenNotIncreasing).iter().all(|l| *l == "hot"));
        }
        // A greater token is fine, and the same token on several names of one grant is too.
        let (mut ops, writes) = clean();
        ops.push(multi_grant("m", &["cold", "hot"], 10, 700, 710));
        assert!(check(&ops, &writes).is_clean());
        // Through a session: a later grant under it with a lower token.
        let (mut ops, writes) = clean();
        ops.push(session_op(OpKind::SessionCreate, "s", 30, 600, 610, alive()));
        ops.push(session_grant("s", 30, 8, 700, 710));
        let report = check(&ops, &writes);
        assert_eq!(kinds(&report), vec![ViolationKind::TokenNotIncreasing], "{:?}", report.examples(3));
    }

    fn alive() -> OpResult {
        OpResult::SessionAlive { ttl_ms: TTL_MS }
    }

    fn session_op(kind: OpKind, client: &str, session: u64, sent: u64, received: u64, result: OpResult) -> Operation {
        let mut o = op(kind, client, None, sent, received, result);
        o.lock = String::new();
        o.session = Some(session);
        o
    }

    fn session_grant(client: &str, session: u64, token: u64, sent: u64, received: u64) -> Operation {
        let mut o = grant(client, token, sent, received);
        o.session = Some(session);
        o
    }

    /// Session 100 of "s", created at 0 (ttl 3 s), holds hot under token
    /// 101 (acquired at `acquired`), with keepalives sent at `keepalives`
    /// (each answered 10 µs later); then b is granted hot under 150,
    /// answered at `b_granted`.
    fn session_history(acquired: u64, keepalives: &[u64], b_granted: u64) -> Vec<Operation> {
        let mut ops = vec![
            session_op(OpKind::SessionCreate, "s", 100, 0, 10, alive()),
            session_grant("s", 100, 101, acquired, acquired + 10),
        ];
        ops.extend(keepalives.iter().map(|t| session_op(OpKind::KeepAlive, "s", 100, *t, t + 10, alive())));
        ops.push(grant("b", 150, b_granted - 10, b_granted));
        ops
    }

    // A lock under a session is held until the session ends: its
    // keepalives carry the lock past the create's ttl, and a grant of it to
    // another client before the last acknowledged keepalive's send + ttl is
    // a double grant. Once that deadline has passed (the session abandoned),
    // or once the session's delete or the lock's release was sent, it is not.
    #[test]
    fn double_grant_through_a_session_is_reported() {
        let overlapping = |ops: &[Operation]| violations_on(&check(ops, &[]), ViolationKind::OverlappingGrants).len();
        // Kept alive at 1 s and 2 s: held until 5 s at least.
        assert_eq!(overlapping(&session_history(20, &[S, 2 * S], 4 * S)), 1);
        assert_eq!(overlapping(&session_history(20, &[S, 2 * S], 5 * S + 20)), 0);
        // Abandoned after the keepalive at 1 s: expired from 4 s on.
        assert_eq!(overlapping(&session_history(20, &[S], 4 * S + S / 2)), 0);
        // The session's deadline, not the acquire's send + ttl: acquired at
        // 2.5 s under a session created at 0 and never kept alive, the lock
        // may go at 3 s.
        assert_eq!(overlapping(&session_history(5 * S / 2, &[], 7 * S / 2)), 0);
        assert_eq!(overlapping(&session_history(5 * S / 2, &[], 29 * S / 10)), 1);
        // Deleted (sent at 2.5 s): another grant after that send is fine, before it is not.
        let with_delete = |b_granted| {
            let mut ops = session_history(20, &[S, 2 * S], b_granted);
            ops.push(session_op(OpKind::SessionDelete, "s", 100, 5 * S / 2, 5 * S / 2 + 10, OpResult::Released));
            overlapping(&ops)
        };
        assert_eq!(with_delete(26 * S / 10), 0);
        assert_eq!(with_delete(24 * S / 10), 1);
        // Released by token (sent at 1.5 s), the session still alive.
        let mut ops = session_history(20, &[S, 2 * S], 16 * S / 10);
        ops.push(release("s", 101, 3 * S / 2, 3 * S / 2 + 10));
        assert_eq!(overlapping(&ops), 0);
    }

    // Reads of a lock under a session: one answered before the session's
    // acknowledged deadline must see it, and one sent after the session's
    // delete was acknowledged must not see its token.
    #[test]
    fn session_reads_reflect_keepalives_and_deletes() {
        let mut ops = session_history(20, &[S, 2 * S], 6 * S);
        let mut r = read(7 * S / 2, 7 * S / 2 + 10, None);
        r.client = "r".into();
        ops.push(r);
        let report = check(&ops, &[]);
        assert_eq!(kinds(&report), vec![ViolationKind::LostRenew], "{:?}", report.examples(3));
        // The same read, had the session been abandoned after its create: no claim.
        let mut ops = session_history(20, &[], 6 * S);
        ops.push(read(7 * S / 2, 7 * S / 2 + 10, None));
        assert!(check(&ops, &[]).is_clean());

        let mut ops = session_history(20, &[S, 2 * S], 6 * S);
        ops.push(session_op(OpKind::SessionDelete, "s", 100, 5 * S / 2, 5 * S / 2 + 10, OpResult::Released));
        ops.push(read(27 * S / 10, 27 * S / 10 + 10, Some(("s", 101))));
        let report = check(&ops, &[]);
        assert_eq!(kinds(&report), vec![ViolationKind::LostRelease], "{:?}", report.examples(3));
    }

    fn waited_grant(client: &str, sent: u64, received: u64, ttl_ms: u64) -> Operation {
        Operation {
            kind: OpKind::AcquireWait,
            lock: "l".into(),
            names: Vec::new(),
            session: None,
            client: client.into(),
            request_id: None,
            token: None,
            key: None,
            holder: None,
            sent_us: sent,
            received_us: received,
            result: OpResult::Granted { token: 1, ttl_ms },
        }
    }

    fn end_write(client: &str, at: u64, accepted: bool) -> ResourceWrite {
        let request =
            WriteRequest { resource: "l".into(), client: client.into(), lock: "l".into(), token: 0, phase: Phase::End };
        ResourceWrite { request, accepted, received_us: at }
    }

    // Ensures A's write after B's later grant counts as a superseded write
    // when accepted, not when refused, and B's own writes do not.
    #[test]
    fn writes_under_a_superseded_grant_are_counted() {
        let ops = [waited_grant("A", 0, 10, 1_000), waited_grant("B", 20, 1_500_000, 1_000)];
        let count = |writes: &[ResourceWrite]| check_hand_over(&ops, writes).superseded_writes_accepted;
        assert_eq!(count(&[end_write("A", 100, true), end_write("B", 1_600_000, true)]), 0);
        assert_eq!(count(&[end_write("A", 1_700_000, true)]), 1);
        assert_eq!(count(&[end_write("A", 1_700_000, false)]), 0);
    }

    // Ensures a grant counts as taken while valid when another client,
    // asking after it was acknowledged, gets the lock before it ran out; not after.
    #[test]
    fn a_grant_taken_while_valid_is_counted() {
        let taken = [waited_grant("A", 0, 10, 1_000), waited_grant("B", 20, 500_000, 1_000)];
        assert_eq!(check_hand_over(&taken, &[]).grants_taken_while_valid, 1);
        let expired = [waited_grant("A", 0, 10, 1_000), waited_grant("B", 20, 1_000_100, 1_000)];
        assert_eq!(check_hand_over(&expired, &[]), HandOver { grants: 2, ..HandOver::default() });
    }
}
