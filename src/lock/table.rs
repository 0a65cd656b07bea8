//! The lock table: who holds which lock, under which fencing token, until which
//! tick.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

use super::{Command, InvalidCommand, Limits};

/// The Raft log index of the entry that granted a lock. Strictly increasing per
/// lock name (log indexes only grow), not dense, and not unique across names.
pub type FencingToken = u64;

/// Tick period assumed for grants made before the first Tick was applied. It is
/// the smallest period a leader may use, so such a deadline is at least as many
/// ticks away as with any real period: the lease can only run long.
const MIN_TICK_MS: u64 = 10;

/// One held lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Lease {
    owner: String,
    token: FencingToken,
    ttl_ms: u64,
    /// The lease expires when a Tick makes `now_tick >= deadline`.
    deadline: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request_id: Option<String>,
}

/// A successful acquire or renew, as the holder sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub name: String,
    pub owner: String,
    pub token: FencingToken,
    pub ttl_ms: u64,
    /// Real time the lease is guaranteed to last from the commit of the entry
    /// that produced this answer (longer if an election stalls the ticks).
    pub expires_in_ms: u64,
    /// The tick at which the lease expires.
    pub deadline_tick: u64,
}

/// A held lock as a reader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseView {
    pub name: String,
    pub owner: String,
    pub token: FencingToken,
    pub ttl_ms: u64,
    /// Lower bound on the real time left, counted in whole tick periods.
    pub expires_in_ms: u64,
    pub deadline_tick: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// What an applied command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// A new grant, or the holder's own grant returned again (`reacquired`).
    Granted {
        grant: Grant,
        reacquired: bool,
    },
    Renewed {
        grant: Grant,
    },
    Released {
        name: String,
        token: FencingToken,
    },
    /// The clock advanced to `now_tick`; these leases expired in this entry.
    Ticked {
        now_tick: u64,
        expired: Vec<(String, FencingToken)>,
    },
    /// A Raft entry with no command (leader blank entry, membership change).
    Noop,
}

/// Why a command changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "error", rename_all = "snake_case")]
pub enum LockError {
    #[error("lock {name:?} is held by {holder:?} under token {token}")]
    HeldByOther { name: String, holder: String, token: FencingToken, expires_in_ms: u64 },
    #[error("lock {name:?} is not held")]
    NotHeld { name: String },
    #[error("token {given} is not the current token of lock {name:?} (current: {current})")]
    StaleToken { name: String, given: FencingToken, current: FencingToken },
    #[error("invalid command: {0}")]
    Invalid(InvalidCommand),
}

/// The replicated lock table. See [`LockTable::apply`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockTable {
    /// Committed ticks so far: the cluster's clock.
    now_tick: u64,
    /// Largest tick period seen in the log, used to turn ttls into ticks. It
    /// only grows, so a lease's deadline in ticks never means less real time
    /// than when it was set.
    tick_ms: Option<u64>,
    leases: BTreeMap<String, Lease>,
    /// `(deadline, name)` of every lease, so a Tick visits only what expires.
    by_deadline: BTreeSet<(u64, String)>,
}

/// The serialized form of a [`LockTable`] (snapshots). The deadline index is
/// derived, so it is rebuilt on load instead of being stored twice.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableImage {
    now_tick: u64,
    tick_ms: Option<u64>,
    leases: BTreeMap<String, Lease>,
}

impl From<&LockTable> for TableImage {
    fn from(t: &LockTable) -> Self {
        TableImage { now_tick: t.now_tick, tick_ms: t.tick_ms, leases: t.leases.clone() }
    }
}

impl From<TableImage> for LockTable {
    fn from(image: TableImage) -> Self {
        let by_deadline = image.leases.iter().map(|(n, l)| (l.deadline, n.clone())).collect();
        LockTable { now_tick: image.now_tick, tick_ms: image.tick_ms, leases: image.leases, by_deadline }
    }
}

impl LockTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Committed ticks so far.
    pub fn now_tick(&self) -> u64 {
        self.now_tick
    }

    /// The tick period the table converts ttls with: the largest seen in the
    /// log, or the minimum period before the first Tick.
    pub fn tick_ms(&self) -> u64 {
        self.tick_ms.unwrap_or(MIN_TICK_MS)
    }

    /// Number of held locks.
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Applies `command`, carried by the log entry at `index`. Deterministic:
    /// reads no clock, and every error leaves the table unchanged.
    pub fn apply(&mut self, command: &Command, index: u64) -> Result<Outcome, LockError> {
        command.validate(&Limits::DEFAULT).map_err(LockError::Invalid)?;
        match command {
            Command::Acquire { name, owner, ttl_ms, request_id } => {
                self.acquire(name, owner, *ttl_ms, request_id, index)
            }
            Command::Renew { name, token, ttl_ms } => self.renew(name, *token, *ttl_ms),
            Command::Release { name, token } => self.release(name, *token),
            Command::Tick { period_ms } => Ok(self.tick(*period_ms)),
        }
    }

    /// The lease of `name`, if held.
    pub fn get(&self, name: &str) -> Option<LeaseView> {
        self.leases.get(name).map(|l| self.view(name, l))
    }

    /// Held locks whose names start with `prefix`, in name order, at most `limit`.
    pub fn list(&self, prefix: &str, limit: usize) -> Vec<LeaseView> {
        self.leases
            .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .take_while(|(n, _)| n.starts_with(prefix))
            .take(limit)
            .map(|(n, l)| self.view(n, l))
            .collect()
    }

    fn acquire(
        &mut self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        request_id: &Option<String>,
        index: u64,
    ) -> Result<Outcome, LockError> {
        let reacquired = match self.leases.get(name) {
            Some(l) if l.owner != owner => {
                return Err(LockError::HeldByOther {
                    name: name.to_owned(),
                    holder: l.owner.clone(),
                    token: l.token,
                    expires_in_ms: self.expires_in_ms(l.deadline),
                })
            }
            Some(_) => true,
            None => false,
        };
        let deadline = self.deadline_for(ttl_ms);
        let lease = match self.leases.remove(name) {
            // Same owner: keep the token, restart the lease.
            Some(mut l) => {
                self.by_deadline.remove(&(l.deadline, name.to_owned()));
                l.ttl_ms = ttl_ms;
                l.deadline = deadline;
                l
            }
            None => Lease { owner: owner.to_owned(), token: index, ttl_ms, deadline, request_id: request_id.clone() },
        };
        let grant = self.insert(name, lease);
        Ok(Outcome::Granted { grant, reacquired })
    }

    fn renew(&mut self, name: &str, token: FencingToken, ttl_ms: Option<u64>) -> Result<Outcome, LockError> {
        let mut lease = self.take_current(name, token)?;
        lease.ttl_ms = ttl_ms.unwrap_or(lease.ttl_ms);
        lease.deadline = self.deadline_for(lease.ttl_ms);
        let grant = self.insert(name, lease);
        Ok(Outcome::Renewed { grant })
    }

    fn release(&mut self, name: &str, token: FencingToken) -> Result<Outcome, LockError> {
        self.take_current(name, token)?;
        Ok(Outcome::Released { name: name.to_owned(), token })
    }

    fn tick(&mut self, period_ms: u64) -> Outcome {
        self.now_tick += 1;
        self.tick_ms = Some(self.tick_ms.unwrap_or(0).max(period_ms.max(MIN_TICK_MS)));
        let mut expired = Vec::new();
        while let Some((deadline, _)) = self.by_deadline.first() {
            if *deadline > self.now_tick {
                break;
            }
            let (_, name) = self.by_deadline.pop_first().expect("first() was Some");
            let lease = self.leases.remove(&name).expect("deadline index matches leases");
            expired.push((name, lease.token));
        }
        Outcome::Ticked { now_tick: self.now_tick, expired }
    }

    /// Removes and returns the lease of `name` if `token` is its current token.
    fn take_current(&mut self, name: &str, token: FencingToken) -> Result<Lease, LockError> {
        let current = match self.leases.get(name) {
            None => return Err(LockError::NotHeld { name: name.to_owned() }),
            Some(l) => l.token,
        };
        if current != token {
            return Err(LockError::StaleToken { name: name.to_owned(), given: token, current });
        }
        let lease = self.leases.remove(name).expect("checked above");
        self.by_deadline.remove(&(lease.deadline, name.to_owned()));
        Ok(lease)
    }

    fn insert(&mut self, name: &str, lease: Lease) -> Grant {
        let grant = Grant {
            name: name.to_owned(),
            owner: lease.owner.clone(),
            token: lease.token,
            ttl_ms: lease.ttl_ms,
            expires_in_ms: self.expires_in_ms(lease.deadline),
            deadline_tick: lease.deadline,
        };
        self.by_deadline.insert((lease.deadline, name.to_owned()));
        self.leases.insert(name.to_owned(), lease);
        grant
    }

    /// `now_tick + ceil(ttl / tick) + 1`. The Tick that completes the period in
    /// progress may already have been proposed when this entry was, so it does
    /// not count: the (N+1)-th Tick after this entry is proposed at least N tick
    /// periods after it, hence at least `ttl_ms` later.
    fn deadline_for(&self, ttl_ms: u64) -> u64 {
        self.now_tick + ttl_ms.div_ceil(self.tick_ms()) + 1
    }

    /// Whole tick periods left before the deadline, not counting the one in
    /// progress: a lower bound on the real time the lease still has.
    fn expires_in_ms(&self, deadline: u64) -> u64 {
        deadline.saturating_sub(self.now_tick + 1) * self.tick_ms()
    }

    fn view(&self, name: &str, l: &Lease) -> LeaseView {
        LeaseView {
            name: name.to_owned(),
            owner: l.owner.clone(),
            token: l.token,
            ttl_ms: l.ttl_ms,
            expires_in_ms: self.expires_in_ms(l.deadline),
            deadline_tick: l.deadline,
            request_id: l.request_id.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: u64 = 100;

    /// A table fed by a fake log: every command gets the next index.
    struct Log {
        table: LockTable,
        index: u64,
    }

    impl Log {
        /// A table that has applied one Tick of `TICK` ms, as a running cluster has.
        fn new() -> Self {
            let mut log = Log { table: LockTable::new(), index: 0 };
            log.tick();
            log
        }
        fn apply(&mut self, c: Command) -> Result<Outcome, LockError> {
            self.index += 1;
            self.table.apply(&c, self.index)
        }
        fn acquire(&mut self, name: &str, owner: &str, ttl_ms: u64) -> Result<Outcome, LockError> {
            self.apply(Command::Acquire { name: name.into(), owner: owner.into(), ttl_ms, request_id: None })
        }
        fn token(&mut self, name: &str, owner: &str, ttl_ms: u64) -> FencingToken {
            match self.acquire(name, owner, ttl_ms) {
                Ok(Outcome::Granted { grant, .. }) => grant.token,
                other => panic!("expected a grant, got {other:?}"),
            }
        }
        fn renew(&mut self, name: &str, token: u64, ttl_ms: Option<u64>) -> Result<Outcome, LockError> {
            self.apply(Command::Renew { name: name.into(), token, ttl_ms })
        }
        fn release(&mut self, name: &str, token: u64) -> Result<Outcome, LockError> {
            self.apply(Command::Release { name: name.into(), token })
        }
        fn tick(&mut self) -> Vec<(String, FencingToken)> {
            match self.apply(Command::Tick { period_ms: TICK }) {
                Ok(Outcome::Ticked { expired, .. }) => expired,
                other => panic!("tick failed: {other:?}"),
            }
        }
        fn ticks(&mut self, n: u64) -> Vec<(String, FencingToken)> {
            (0..n).flat_map(|_| self.tick()).collect()
        }
    }

    // Ensures a free lock is granted with the index of the granting entry as token.
    #[test]
    fn free_lock_is_granted_with_entry_index_as_token() {
        let mut log = Log::new();
        let token = log.token("a", "alice", 3000);
        assert_eq!(token, log.index);
        let view = log.table.get("a").unwrap();
        assert_eq!((view.owner.as_str(), view.token), ("alice", token));
    }

    // Ensures a same-owner acquire returns the same token and restarts the lease.
    #[test]
    fn same_owner_reacquire_keeps_token_and_restarts_lease() {
        let mut log = Log::new();
        let token = log.token("a", "alice", 3000);
        log.ticks(10);
        match log.acquire("a", "alice", 3000).unwrap() {
            Outcome::Granted { grant, reacquired } => {
                assert!(reacquired);
                assert_eq!(grant.token, token);
                assert_eq!(grant.ttl_ms, 3000);
                assert_eq!(grant.deadline_tick, log.table.now_tick() + 30 + 1);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(log.table.len(), 1);
        // The old deadline is gone from the index: nothing expires at it.
        assert!(log.ticks(30).is_empty());
        assert_eq!(log.tick(), vec![("a".to_string(), token)]);
    }

    // Ensures another owner is refused and told who holds the lock.
    #[test]
    fn other_owner_is_refused_with_the_holder() {
        let mut log = Log::new();
        let token = log.token("a", "alice", 3000);
        let err = log.acquire("a", "bob", 3000).unwrap_err();
        assert_eq!(
            err,
            LockError::HeldByOther { name: "a".into(), holder: "alice".into(), token, expires_in_ms: 3000 }
        );
        assert_eq!(log.table.get("a").unwrap().owner, "alice");
    }

    // Ensures expiry happens exactly at the deadline tick: ceil(ttl/tick) + 1 ticks later.
    #[test]
    fn lease_expires_exactly_at_deadline_tick() {
        let mut log = Log::new();
        let token = log.token("a", "alice", 3050); // ceil(3050/100) = 31 ticks, + 1
        assert!(log.ticks(31).is_empty(), "expired before the deadline");
        assert!(log.table.get("a").is_some());
        assert_eq!(log.tick(), vec![("a".to_string(), token)]);
        assert!(log.table.get("a").is_none());
    }

    // Ensures tokens grow over grant -> expire -> grant, and the old token is stale.
    #[test]
    fn tokens_increase_over_grant_expire_grant() {
        let mut log = Log::new();
        let first = log.token("a", "alice", 3000);
        assert_eq!(log.ticks(31).len(), 1);
        let second = log.token("a", "bob", 3000);
        assert!(second > first);
        assert!(matches!(
            log.renew("a", first, None),
            Err(LockError::StaleToken { given, current, .. }) if given == first && current == second
        ));
        log.release("a", second).unwrap();
        let third = log.token("a", "alice", 3000);
        assert!(third > second);
    }

    // Ensures renew keeps the token, moves the deadline, and may change the ttl.
    #[test]
    fn renew_keeps_token_and_moves_deadline() {
        let mut log = Log::new();
        let token = log.token("a", "alice", 3000);
        log.ticks(15);
        match log.renew("a", token, None).unwrap() {
            Outcome::Renewed { grant } => {
                assert_eq!(grant.token, token);
                assert_eq!(grant.deadline_tick, log.table.now_tick() + 31);
            }
            other => panic!("{other:?}"),
        }
        assert!(log.ticks(30).is_empty());
        log.renew("a", token, Some(5000)).unwrap();
        assert!(log.ticks(50).is_empty());
        assert_eq!(log.tick().len(), 1);
    }

    // Ensures renew and release of a free lock say NotHeld, with a wrong token StaleToken,
    // and change nothing.
    #[test]
    fn renew_and_release_with_unknown_or_stale_token_fail_clearly() {
        let mut log = Log::new();
        assert_eq!(log.renew("a", 1, None), Err(LockError::NotHeld { name: "a".into() }));
        assert_eq!(log.release("a", 1), Err(LockError::NotHeld { name: "a".into() }));
        let token = log.token("a", "alice", 3000);
        let before = log.table.clone();
        assert!(matches!(log.renew("a", token + 1, None), Err(LockError::StaleToken { .. })));
        assert!(matches!(log.release("a", token - 1), Err(LockError::StaleToken { .. })));
        assert_eq!(log.table, before);
        assert!(matches!(log.release("a", token), Ok(Outcome::Released { .. })));
        assert!(log.table.is_empty());
        assert_eq!(log.release("a", token), Err(LockError::NotHeld { name: "a".into() }));
    }

    // Ensures nothing expires without Ticks, however many other entries are applied.
    #[test]
    fn nothing_expires_without_ticks() {
        let mut log = Log::new();
        log.token("a", "alice", 3000);
        for i in 0..1000 {
            let _ = log.acquire(&format!("other{i}"), "bob", 3000);
        }
        assert_eq!(log.table.get("a").unwrap().owner, "alice");
    }

    // Ensures a Tick visits only the leases it expires (the deadline index stays in step).
    #[test]
    fn tick_expires_only_due_leases_in_deadline_order() {
        let mut log = Log::new();
        let t3 = log.token("c", "x", 4000);
        let t2 = log.token("b", "x", 3000);
        let t2b = log.token("a", "x", 3000);
        let expired = log.ticks(31);
        assert_eq!(expired, vec![("a".to_string(), t2b), ("b".to_string(), t2)]);
        assert_eq!(log.table.len(), 1);
        assert_eq!(log.ticks(10), vec![("c".to_string(), t3)]);
        assert!(log.table.by_deadline.is_empty());
    }

    // Ensures a longer tick period only lengthens leases, and a shorter one is ignored.
    #[test]
    fn tick_period_only_grows() {
        let mut log = Log::new();
        log.apply(Command::Tick { period_ms: 50 }).unwrap();
        assert_eq!(log.table.tick_ms(), TICK);
        log.apply(Command::Tick { period_ms: 200 }).unwrap();
        assert_eq!(log.table.tick_ms(), 200);
        let token = log.token("a", "alice", 3000); // 15 ticks of 200 ms, + 1
        assert!(log.ticks(15).is_empty());
        assert_eq!(log.tick(), vec![("a".to_string(), token)]);
    }

    // Ensures a grant before the first Tick assumes the smallest period, so it can only run long.
    #[test]
    fn grant_before_first_tick_runs_long() {
        let mut table = LockTable::new();
        let c = Command::Acquire { name: "a".into(), owner: "o".into(), ttl_ms: 3000, request_id: None };
        match table.apply(&c, 5).unwrap() {
            Outcome::Granted { grant, .. } => assert_eq!(grant.deadline_tick, 3000 / MIN_TICK_MS + 1),
            other => panic!("{other:?}"),
        }
    }

    // Ensures invalid commands that reach the log are refused deterministically.
    #[test]
    fn invalid_command_in_log_changes_nothing() {
        let mut log = Log::new();
        let before = log.table.clone();
        assert!(matches!(log.acquire("", "alice", 3000), Err(LockError::Invalid(_))));
        assert!(matches!(log.acquire("a", "alice", 1), Err(LockError::Invalid(_))));
        assert_eq!(log.table, before);
    }

    // Ensures list filters by prefix, keeps name order and honours the limit.
    #[test]
    fn list_by_prefix_and_limit() {
        let mut log = Log::new();
        for name in ["pay/2", "pay/1", "job/1", "pay/3", "pb"] {
            log.token(name, "o", 3000);
        }
        let names = |v: Vec<LeaseView>| v.into_iter().map(|l| l.name).collect::<Vec<_>>();
        assert_eq!(names(log.table.list("pay/", 10)), ["pay/1", "pay/2", "pay/3"]);
        assert_eq!(names(log.table.list("pay/", 2)), ["pay/1", "pay/2"]);
        assert_eq!(log.table.list("", 100).len(), 5);
        assert!(log.table.list("zzz", 10).is_empty());
    }

    // Ensures a snapshot image round-trips, deadline index included.
    #[test]
    fn image_round_trip_rebuilds_deadline_index() {
        let mut log = Log::new();
        log.token("a", "alice", 3000);
        log.token("b", "bob", 4000);
        let json = serde_json::to_vec(&TableImage::from(&log.table)).unwrap();
        let image: TableImage = serde_json::from_slice(&json).unwrap();
        assert_eq!(LockTable::from(image), log.table);
    }
}
