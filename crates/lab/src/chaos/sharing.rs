//! The sharing side of the fault suite: semaphore and read/write clients,
//! while the nemesis injects faults.
//!
//! - **Semaphore clients** take 1–2 permits of one semaphore of limit
//!   [`LIMIT`] (ttl 3 s, waiting up to 1 s), work for 0.3–2.5 s renewing
//!   every second, then release (three in four) or abandon the permits to
//!   expire (one in four).
//! - **Readers** take a shared lock and **writers** an exclusive one, on one
//!   of two names, the same way.
//!
//! Every acquire, renew and release is recorded in the [`SharingRecord`],
//! apart from the lock history: the linearizability model knows neither
//! semaphores nor shared holders. Each hold is under an owner of its own,
//! so no acquire restarts an earlier lease (a same-owner acquire keeps its
//! token) and every grant is a new holder.
//!
//! [`check`] then asks, on the intervals each grant is surely held — from
//! its answer to the earlier of its release's send and its lease's end
//! (the send of its acquire, or of its last granted renew, plus the ttl) —
//! whether permits in use ever exceed the limit, whether an exclusive
//! holder ever overlaps another holder of its lock, and whether the tokens
//! of one name's grants increase wherever their order is certain (one
//! answered before the other was sent).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use super::workload::outcome;
use crate::history::{HarnessClock, OpResult, Violation, ViolationKind};
use leasehold_client::{AcquireOptions, Client, ClientError, FencingToken, Lease, PermitRequest, Permits};

/// The semaphore the semaphore clients share, and its limit.
pub const SEMAPHORE: &str = "chaos-semaphore";
pub const LIMIT: u32 = 2;
/// The locks readers and writers share.
pub const RW_LOCKS: [&str; 2] = ["chaos-rw-0", "chaos-rw-1"];
/// The cluster's shortest ttl: the renewals and abandons come around soonest.
const TTL_MS: u64 = 3_000;
const WAIT: Duration = Duration::from_secs(1);
const RENEW_EVERY: Duration = Duration::from_secs(1);

/// What a hold is: permits of a semaphore, or a shared or exclusive lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hold {
    Permits { permits: u32, limit: u32 },
    Shared,
    Exclusive,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Acquire,
    Renew,
    Release,
}

/// One request of a sharing client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedOp {
    pub step: Step,
    pub name: String,
    pub client: String,
    pub hold: Hold,
    /// The token a renew or release names (an acquire's is in its result).
    pub token: Option<u64>,
    /// µs on the harness clock, taken before the first attempt was sent.
    pub sent_us: u64,
    pub received_us: u64,
    pub result: OpResult,
}

/// The sharing side's record.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SharingRecord {
    pub operations: Vec<SharedOp>,
}

impl SharingRecord {
    /// Acknowledged grants, of permits and of locks.
    pub fn grants(&self) -> usize {
        self.operations.iter().filter(|op| granted(op).is_some() && op.step == Step::Acquire).count()
    }
}

/// What a sharing client does.
#[derive(Debug, Clone, Copy)]
pub enum Role {
    Semaphore,
    Reader,
    Writer,
}

impl Role {
    fn label(self) -> &'static str {
        match self {
            Role::Semaphore => "sema",
            Role::Reader => "reader",
            Role::Writer => "writer",
        }
    }

    /// The next hold to take.
    fn pick(self) -> (&'static str, Hold) {
        let lock = || RW_LOCKS[fastrand::usize(..RW_LOCKS.len())];
        match self {
            Role::Semaphore => (SEMAPHORE, Hold::Permits { permits: fastrand::u32(1..=2), limit: LIMIT }),
            Role::Reader => (lock(), Hold::Shared),
            Role::Writer => (lock(), Hold::Exclusive),
        }
    }
}

/// The running sharing clients.
pub struct Sharing {
    stop: Arc<AtomicBool>,
    clients: Vec<JoinHandle<Vec<SharedOp>>>,
}

impl Sharing {
    /// Starts a client per role in `roles`.
    pub fn start(client: &Arc<Client>, clock: HarnessClock, roles: &[Role]) -> Sharing {
        let stop = Arc::new(AtomicBool::new(false));
        let clients = roles
            .iter()
            .enumerate()
            .map(|(i, role)| {
                let log =
                    Log { client: Arc::clone(client), clock, owner: format!("{}-{i}", role.label()), ops: vec![] };
                tokio::spawn(holder(log, *role, Arc::clone(&stop)))
            })
            .collect();
        Sharing { stop, clients }
    }

    /// Stops them and returns what they recorded.
    pub async fn stop(self) -> SharingRecord {
        self.stop.store(true, Ordering::SeqCst);
        let mut record = SharingRecord::default();
        for task in self.clients {
            record.operations.extend(task.await.unwrap_or_default());
        }
        record
    }
}

/// A request to send: the acquire, or a renew or release of `token`.
#[derive(Clone, Copy)]
enum Call {
    Acquire,
    Renew(FencingToken),
    Release(FencingToken),
}

/// One client's connection and record.
struct Log {
    client: Arc<Client>,
    clock: HarnessClock,
    owner: String,
    ops: Vec<SharedOp>,
}

impl Log {
    /// Sends `call` for `owner` and records it; the token and ttl of a grant.
    async fn send(&mut self, owner: &str, name: &str, hold: Hold, call: Call) -> Option<(FencingToken, u64)> {
        let sent_us = self.clock.now_us();
        let result = request(&self.client, owner, name, hold, call).await;
        let (step, token) = match call {
            Call::Acquire => (Step::Acquire, None),
            Call::Renew(t) => (Step::Renew, Some(t.get())),
            Call::Release(t) => (Step::Release, Some(t.get())),
        };
        let result_of = |grant: &Option<(FencingToken, u64)>| match grant {
            Some((token, ttl_ms)) => OpResult::Granted { token: token.get(), ttl_ms: *ttl_ms },
            None => OpResult::Released,
        };
        self.ops.push(SharedOp {
            step,
            name: name.to_owned(),
            client: owner.to_owned(),
            hold,
            token,
            sent_us,
            received_us: self.clock.now_us(),
            result: outcome(&result, result_of),
        });
        result.ok().flatten()
    }
}

/// The endpoint of `call` for `hold`: a grant's token and ttl, nothing for a release.
async fn request(
    client: &Client,
    owner: &str,
    name: &str,
    hold: Hold,
    call: Call,
) -> Result<Option<(FencingToken, u64)>, ClientError> {
    let lease = |l: Lease| Some((l.token(), l.grant.ttl_ms));
    let permits = |p: Permits| Some((p.grant.token, p.grant.ttl_ms));
    let released = |()| None;
    let options = AcquireOptions { wait: Some(WAIT), ..AcquireOptions::default() };
    match (call, hold) {
        (Call::Acquire, Hold::Permits { permits: n, limit }) => {
            let asked = PermitRequest { limit, permits: n, ttl_ms: TTL_MS, wait: Some(WAIT) };
            client.acquire_permits(name, owner, &asked).await.map(permits)
        }
        (Call::Acquire, Hold::Shared) => client.acquire_shared(name, owner, TTL_MS, &options).await.map(lease),
        (Call::Acquire, Hold::Exclusive) => client.acquire_with(name, owner, TTL_MS, &options).await.map(lease),
        (Call::Renew(t), Hold::Permits { .. }) => client.renew_permits(name, owner, t, None).await.map(permits),
        (Call::Renew(t), Hold::Shared) => client.renew_shared(name, owner, t, None).await.map(lease),
        (Call::Renew(t), Hold::Exclusive) => client.renew(name, t, None).await.map(lease),
        (Call::Release(t), Hold::Permits { .. }) => client.release_permits(name, owner, t).await.map(released),
        (Call::Release(t), Hold::Shared) => client.release_shared(name, owner, t).await.map(released),
        (Call::Release(t), Hold::Exclusive) => client.release(name, t).await.map(released),
    }
}

/// Cycles of acquire, work with renewals, release or abandon.
async fn holder(mut log: Log, role: Role, stop: Arc<AtomicBool>) -> Vec<SharedOp> {
    let mut cycle = 0u64;
    while !stop.load(Ordering::SeqCst) {
        cycle += 1;
        let owner = format!("{}.{cycle}", log.owner);
        let (name, hold) = role.pick();
        let Some((token, _)) = log.send(&owner, name, hold, Call::Acquire).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        // The work, as long as renewals say the hold lasts.
        let until = tokio::time::Instant::now() + Duration::from_millis(fastrand::u64(300..2500));
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(RENEW_EVERY.min(until - tokio::time::Instant::now())).await;
            let renewed = log.send(&owner, name, hold, Call::Renew(token)).await;
            let refused = log.ops.last().is_some_and(|op| matches!(op.result, OpResult::Refused { .. }));
            if renewed.is_none() && refused {
                break;
            }
        }
        if fastrand::u8(..4) == 0 {
            // Abandoned: the hold comes back when its lease ends.
            tokio::time::sleep(Duration::from_millis(TTL_MS + 500)).await;
        } else {
            log.send(&owner, name, hold, Call::Release(token)).await;
        }
    }
    log.ops
}

/// The token and ttl an operation was granted.
fn granted(op: &SharedOp) -> Option<(u64, u64)> {
    match op.result {
        OpResult::Granted { token, ttl_ms } => Some((token, ttl_ms)),
        _ => None,
    }
}

/// A grant with the interval it was surely held.
#[derive(Debug)]
struct Held<'a> {
    acquire: &'a SharedOp,
    token: u64,
    from_us: u64,
    until_us: u64,
}

impl Held<'_> {
    fn overlaps(&self, other: &Held) -> bool {
        self.from_us.max(other.from_us) < self.until_us.min(other.until_us)
    }
}

/// Every acknowledged grant, with its surely-held interval (see the module
/// documentation), per name.
fn holds(record: &SharingRecord) -> BTreeMap<&str, Vec<Held<'_>>> {
    // A hold's renews and release, by (client, name, token).
    let mut later: HashMap<(&str, &str, u64), Vec<&SharedOp>> = HashMap::new();
    for op in &record.operations {
        if let Some(token) = op.token {
            later.entry((op.client.as_str(), op.name.as_str(), token)).or_default().push(op);
        }
    }
    let mut holds: BTreeMap<&str, Vec<Held>> = BTreeMap::new();
    for acquire in record.operations.iter().filter(|op| op.step == Step::Acquire) {
        let Some((token, ttl_ms)) = granted(acquire) else { continue };
        let after = later.get(&(acquire.client.as_str(), acquire.name.as_str(), token)).map_or(&[][..], Vec::as_slice);
        let lease_end = after
            .iter()
            .filter(|op| op.step == Step::Renew)
            .filter_map(|op| granted(op).map(|(_, ttl)| op.sent_us + ttl * 1000))
            .fold(acquire.sent_us + ttl_ms * 1000, u64::max);
        let released = after.iter().filter(|op| op.step == Step::Release).map(|op| op.sent_us).min();
        let until_us = released.map_or(lease_end, |r| r.min(lease_end));
        holds.entry(acquire.name.as_str()).or_default().push(Held {
            acquire,
            token,
            from_us: acquire.received_us,
            until_us,
        });
    }
    holds
}

/// Checks the record (see the module documentation).
pub fn check(record: &SharingRecord) -> Vec<Violation> {
    let mut violations = Vec::new();
    for (name, held) in holds(record) {
        let mut report =
            |kind, at_us, detail| violations.push(Violation { kind, lock: name.to_owned(), at_us, detail });
        check_limit(&held, &mut report);
        check_exclusion(&held, &mut report);
        check_token_order(&held, &mut report);
    }
    violations
}

/// Permits surely in use never exceed the limit; one violation per excursion above it.
fn check_limit(held: &[Held], report: &mut impl FnMut(ViolationKind, u64, String)) {
    let mut limit = None;
    let mut events = Vec::new();
    for h in held.iter().filter(|h| h.from_us < h.until_us) {
        if let Hold::Permits { permits, limit: l } = h.acquire.hold {
            limit = limit.or(Some(l));
            events.push((h.from_us, permits as i64));
            events.push((h.until_us, -(permits as i64)));
        }
    }
    let Some(limit) = limit else { return };
    // Ends before starts at one instant: the intervals are half-open.
    events.sort();
    let (mut in_use, mut over) = (0i64, false);
    for (at_us, delta) in events {
        in_use += delta;
        if in_use > limit as i64 && !over {
            report(ViolationKind::PermitsOverLimit, at_us, format!("{in_use} permits in use, limit {limit}"));
        }
        over = in_use > limit as i64;
    }
}

/// No exclusive holder overlaps another holder of its lock.
fn check_exclusion(held: &[Held], report: &mut impl FnMut(ViolationKind, u64, String)) {
    for (i, a) in held.iter().enumerate().filter(|(_, h)| h.acquire.hold == Hold::Exclusive) {
        // A pair of exclusive holders once, from its first.
        let others = held.iter().enumerate().filter(|(j, b)| b.acquire.hold != Hold::Exclusive || *j > i);
        for (_, b) in others.filter(|(_, b)| b.token != a.token && a.overlaps(b)) {
            let detail = format!(
                "exclusive {} (token {}) overlaps {:?} {} (token {})",
                a.acquire.client, a.token, b.acquire.hold, b.acquire.client, b.token
            );
            report(ViolationKind::SharedExclusion, a.from_us.max(b.from_us), detail);
        }
    }
}

/// A grant answered before another was sent has the lower token.
fn check_token_order(held: &[Held], report: &mut impl FnMut(ViolationKind, u64, String)) {
    let mut by_answer: Vec<&Held> = held.iter().collect();
    by_answer.sort_by_key(|h| h.acquire.received_us);
    let mut by_send: Vec<&Held> = held.iter().collect();
    by_send.sort_by_key(|h| h.acquire.sent_us);
    let mut answered = by_answer.iter().peekable();
    let mut highest: Option<&Held> = None;
    for b in by_send {
        while let Some(a) = answered.next_if(|a| a.acquire.received_us < b.acquire.sent_us) {
            highest = highest.filter(|h| h.token >= a.token).or(Some(*a));
        }
        if let Some(a) = highest.filter(|a| a.token >= b.token) {
            let detail = format!(
                "{} got token {} after {} was answered with {}",
                b.acquire.client, b.token, a.acquire.client, a.token
            );
            report(ViolationKind::GrantTokenOrder, b.acquire.received_us, detail);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERMITS_1: Hold = Hold::Permits { permits: 1, limit: 1 };

    /// An acquire of `name` sent at `sent` ms, answered at `answered` ms,
    /// granted `token` for 10 s.
    fn grant(name: &str, client: &str, hold: Hold, token: u64, sent: u64, answered: u64) -> SharedOp {
        SharedOp {
            step: Step::Acquire,
            name: name.into(),
            client: client.into(),
            hold,
            token: None,
            sent_us: sent * 1000,
            received_us: answered * 1000,
            result: OpResult::Granted { token, ttl_ms: 10_000 },
        }
    }

    /// The release of `grant`, sent at `sent` ms.
    fn release(grant: &SharedOp, sent: u64) -> SharedOp {
        let token = granted(grant).map(|(t, _)| t);
        SharedOp { step: Step::Release, token, sent_us: sent * 1000, result: OpResult::Released, ..grant.clone() }
    }

    fn kinds(operations: Vec<SharedOp>) -> Vec<ViolationKind> {
        check(&SharingRecord { operations }).into_iter().map(|v| v.kind).collect()
    }

    // Ensures two holders of a one-permit semaphore are a violation only
    // while both are surely held: not once the first's release was sent,
    // nor once its lease has surely ended, but again once it renewed.
    #[test]
    fn permits_over_the_limit_are_found() {
        let a = grant("s", "a", PERMITS_1, 5, 0, 10);
        let b = grant("s", "b", PERMITS_1, 9, 20, 30);
        assert_eq!(kinds(vec![a.clone(), b.clone()]), [ViolationKind::PermitsOverLimit]);
        assert!(kinds(vec![a.clone(), release(&a, 25), b.clone()]).is_empty());
        let late = grant("s", "b", PERMITS_1, 9, 9_000, 10_001);
        assert!(kinds(vec![a.clone(), late.clone()]).is_empty());
        let renew = SharedOp { step: Step::Renew, token: Some(5), sent_us: 5_000_000, ..a.clone() };
        assert_eq!(kinds(vec![a, renew, late]), [ViolationKind::PermitsOverLimit]);
        let two = Hold::Permits { permits: 1, limit: 2 };
        assert!(kinds(vec![grant("s", "a", two, 5, 0, 10), grant("s", "b", two, 9, 20, 30)]).is_empty());
    }

    // Ensures shared holders coexist, and an exclusive holder overlapping a
    // shared or an exclusive one is found, but not one released before.
    #[test]
    fn exclusion_breaches_are_found() {
        let r1 = grant("l", "r1", Hold::Shared, 5, 0, 10);
        let r2 = grant("l", "r2", Hold::Shared, 6, 0, 20);
        assert!(kinds(vec![r1.clone(), r2.clone()]).is_empty());
        let w = grant("l", "w", Hold::Exclusive, 9, 30, 40);
        assert_eq!(kinds(vec![r1.clone(), w.clone()]), [ViolationKind::SharedExclusion]);
        assert!(kinds(vec![r1.clone(), release(&r1, 35), w.clone()]).is_empty());
        let w0 = grant("l", "w0", Hold::Exclusive, 4, 0, 5);
        assert_eq!(kinds(vec![w0, w.clone()]), [ViolationKind::SharedExclusion]);
        let elsewhere = grant("m", "r1", Hold::Shared, 5, 0, 10);
        assert!(kinds(vec![elsewhere, w]).is_empty());
    }

    // Ensures a token no higher than one answered before the request was
    // sent is found, but not when the two requests overlapped.
    #[test]
    fn token_order_breaches_are_found() {
        let a = grant("l", "a", Hold::Shared, 9, 0, 10);
        let lower = grant("l", "b", Hold::Shared, 7, 20, 30);
        assert_eq!(kinds(vec![a.clone(), lower]), [ViolationKind::GrantTokenOrder]);
        let equal = grant("l", "b", Hold::Shared, 9, 20, 30);
        assert_eq!(kinds(vec![a.clone(), equal]), [ViolationKind::GrantTokenOrder]);
        let overlapping = grant("l", "b", Hold::Shared, 7, 5, 30);
        assert!(kinds(vec![a.clone(), overlapping]).is_empty());
        let higher = grant("l", "b", Hold::Shared, 12, 20, 30);
        assert!(kinds(vec![a, higher]).is_empty());
    }
}
