//! How many leases and queue places clients may make the table hold.
//!
//! Records, gates and sessions are capped by constants of this crate; leases
//! and waiters by a number the operator sizes to the machines' memory (a
//! live lease costs about 450 bytes of a node's RSS, and every replica holds
//! every lease). A limit read from each node's own settings while applying
//! would let two replicas with different settings answer one entry
//! differently and diverge, so the limits travel in the log instead: the
//! leader stamps its own on every entry of client commands it proposes
//! ([`Batch::within`](super::Batch::within)), and every replica applies the
//! entry against the limits it carries ([`LockTable::apply_within`]).
//! Exact and identical everywhere: the cap is never overshot by requests in
//! flight, and changing it takes a leader with other settings, nothing more.
//!
//! Only what makes the table larger is refused: a new grant or a new place
//! in a queue. Renewals, releases, re-acquires by the holder, replays of a
//! request id and expiry always apply, so a full cluster recovers by itself.
//! A waiter handed the lock it waited for is never refused either: it was
//! admitted when it joined the queue, under `max_waiters`, so leases can
//! exceed `max_leases` by at most the waiters admitted.
//!
//! [`LockTable::apply_within`]: super::LockTable::apply_within

use super::LockError;

/// The limits one log entry's commands are applied under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Held locks, over all names: a new grant that would pass it is `Full`.
    pub max_leases: u64,
    /// Places in lock queues, over all locks (a multi-acquire waiting for
    /// `n` locks takes `n`): a new wait that would pass it is `Full`.
    pub max_waiters: u64,
}

impl Quotas {
    /// No limit: entries written before entries carried limits, and those
    /// of no client command (Ticks).
    pub const UNLIMITED: Quotas = Quotas { max_leases: u64::MAX, max_waiters: u64::MAX };

    /// `Full` naming `leases` unless `held` leases leave room for `more`.
    pub(crate) fn room_for_leases(&self, held: usize, more: usize) -> Result<(), LockError> {
        room("leases", self.max_leases, held, more)
    }

    /// `Full` naming `waiters` unless `waiting` places leave room for `more`.
    pub(crate) fn room_for_waiters(&self, waiting: usize, more: usize) -> Result<(), LockError> {
        room("waiters", self.max_waiters, waiting, more)
    }
}

fn room(what: &str, limit: u64, used: usize, more: usize) -> Result<(), LockError> {
    let wanted = (used as u64).saturating_add(more as u64);
    if wanted > limit {
        return Err(LockError::Full { what: what.to_owned(), limit: usize::try_from(limit).unwrap_or(usize::MAX) });
    }
    Ok(())
}
