//! The commands that go through the Raft log, and the limits every command
//! must respect before it is proposed (and, defensively, when it is applied).

use serde::{Deserialize, Serialize};
use std::fmt;

use super::{FencingToken, Permission, SessionId, TokenHash};

/// One state-machine command, the payload of a Raft log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    /// Take lock `name` for `owner` for `ttl_ms`.
    ///
    /// - Free lock: granted; the token is the index of this log entry.
    /// - Held by the same `owner`: the existing grant is returned with the same
    ///   token and its lease restarts with `ttl_ms`, as a renew would. A retried
    ///   acquire therefore never fails and never mints a second token, and the
    ///   caller may anchor its lease at the send time of this request.
    /// - Held by another owner, no `wait_ms`: [`LockError::HeldByOther`]
    ///   naming the holder.
    /// - Held by another owner, with `wait_ms`: the owner joins the lock's
    ///   FIFO queue ([`Outcome::Queued`]); an owner already queued keeps its
    ///   place. The lock passes to the first waiter in the entry that frees
    ///   it (release or expiry), whose index is the new token. A wait that
    ///   runs out is removed by a Tick (event `wait_timeout`).
    ///
    /// - Free but delayed (an earlier lease with a lock delay expired, see
    ///   `lock_delay_ms`): [`LockError::LockDelayed`] without `wait_ms`; with
    ///   it, the owner queues and the first waiter is granted by the Tick
    ///   that ends the delay.
    ///
    /// `request_id` de-duplicates retries (see [`Requests`]) and is recorded
    /// on the lease. `lock_delay_ms` (opt-in, Consul's lock-delay) is kept
    /// with the lease: should the lease *expire*, nobody is granted the lock
    /// for that long after the expiring Tick, so a holder that was merely
    /// paused has time to notice before anyone else acts under the lock. A
    /// release ends the lease without a delay.
    ///
    /// Exactly one of `ttl_ms` and `session`: with `session`, the lease has
    /// no ttl of its own and lives as long as that session (its keepalives
    /// keep it; renew refuses it, `HeldUnderSession`), ending with it: on
    /// expiry (as an expiry, lock delay included) or delete (as a release).
    /// The session must be alive (`SessionNotFound`) and `owner` must be
    /// its owner (`Invalid`); a queued waiter of a session leaves the queue
    /// when the session ends. An owner re-acquiring a lock it holds must
    /// name the same session (or none, for a ttl lease) as its grant
    /// (`Invalid`): one lease never changes what it lives by.
    ///
    /// A new grant past the `max_leases` of the entry's [`Quotas`], or a new
    /// place in the queue past its `max_waiters`, is [`LockError::Full`]
    /// naming the quota; a re-acquire by the holder and a waiter that keeps
    /// its place are not refused.
    ///
    /// [`Quotas`]: super::Quotas
    /// [`LockError::Full`]: super::LockError::Full
    /// [`LockError::HeldByOther`]: super::LockError::HeldByOther
    /// [`LockError::LockDelayed`]: super::LockError::LockDelayed
    /// [`Outcome::Queued`]: super::Outcome::Queued
    /// [`Requests`]: super::Requests
    Acquire {
        name: String,
        owner: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ttl_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<SessionId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lock_delay_ms: Option<u64>,
        /// With `session`: this request's sequence number in the session
        /// (see [`Command::session_seq`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
    },
    /// Restart the lease of `name` held under `token`, with `ttl_ms` or, when
    /// absent, the ttl of the grant. The token does not change.
    ///
    /// Errors: [`LockError::NotHeld`] when the lock is free,
    /// [`LockError::StaleToken`] when `token` is not the current holder's,
    /// `HeldUnderSession` when the lease lives by a session.
    ///
    /// [`LockError::NotHeld`]: super::LockError::NotHeld
    /// [`LockError::StaleToken`]: super::LockError::StaleToken
    Renew {
        name: String,
        token: FencingToken,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ttl_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// Free lock `name` held under `token`, handing it to the first waiter if
    /// any. Same errors as `Renew`. With `session` (needed for `seq`), the
    /// lock must be held under that live session (`SessionNotFound`,
    /// `Invalid`).
    Release {
        name: String,
        token: FencingToken,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<SessionId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
    },
    /// Take every lock in `names` for `owner` in this one entry, or none:
    /// all are granted under one token, the index of the entry that grants
    /// them, so a resource fenced by any of them sees the same token.
    ///
    /// - All free (not delayed, nobody queued): granted.
    /// - All held by `owner` under one token (a retried multi-acquire): the
    ///   grants are returned again with that token and their leases restart.
    ///   A lock `owner` holds under another grant is a conflict like any
    ///   other: one set never mixes tokens.
    /// - Otherwise, no `wait_ms`: [`LockError::Conflicts`], one entry per
    ///   lock that cannot be granted now (held, delayed, or reserved for the
    ///   waiter first in its queue).
    /// - Otherwise, with `wait_ms`: the owner joins the queue of every lock
    ///   at once, in arrival order with single acquires, and holds none
    ///   until all can be granted together. A lock freed while this waiter
    ///   is first in its queue stays free, reserved for it (refused to later
    ///   acquires, `Reserved`), until it is first in every queue and every
    ///   lock is free; then the entry that makes it so grants them all. The
    ///   earliest waiter is first in every queue it is in, so no set of
    ///   waiters can wait for each other. A wait that runs out, or a `Cancel`
    ///   naming any of the locks, leaves every queue and passes each lock on.
    ///
    /// An owner may wait in one request per lock: `Invalid` when it already
    /// waits for one of these locks in another.
    ///
    /// Grants of every lock, or places in every queue, past the entry's
    /// quotas: `Full`, as for `Acquire` (all of them are counted).
    ///
    /// [`LockError::Conflicts`]: super::LockError::Conflicts
    ///
    /// `ttl_ms` or `session` as for `Acquire`.
    AcquireMany {
        names: Vec<String>,
        owner: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ttl_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<SessionId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lock_delay_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
    },
    /// Free every lock in `names`, all held under `token`, handing each to
    /// its first waiter; nothing changes unless all are (errors as `Release`,
    /// for the first lock that is not); `session` and `seq` as for `Release`.
    ReleaseMany {
        names: Vec<String>,
        token: FencingToken,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<SessionId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
    },
    /// Remove `owner` from the queue of `name` (its waiting client went
    /// away), and from the queues of the other locks of its multi-acquire.
    /// A no-op when `owner` is not waiting; never releases a lock.
    Cancel { name: String, owner: String },
    /// Write `value` under record `key` if `token` is the current token of
    /// lock `lock` when this entry applies. Errors: `NotCurrent` (with the
    /// current token), `Full`.
    PutRecord {
        key: String,
        lock: String,
        token: FencingToken,
        /// The value as JSON text: opaque to the core, which only bounds
        /// its size (the API parses and re-encodes it canonically).
        value: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// Admit `token` of `lock` at gate `resource` if it is the current token
    /// of lock `lock` when this entry applies and at least the highest token
    /// admitted there. Errors: `GateLockMismatch`, `GateRejected` (with the
    /// highest), `NotCurrent` (with the current token), `Full`.
    Gate {
        resource: String,
        lock: String,
        token: FencingToken,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// Open a session for `owner` with `ttl_ms`; its id is the index of this
    /// entry (an entry creates at most one session, see
    /// [`Batch`](super::Batch)). Its deadline follows the rule of lease
    /// deadlines, so it never expires before `ttl_ms` of real time after the
    /// request was sent. Errors: `Full` at [`MAX_SESSIONS`](super::MAX_SESSIONS) live sessions.
    CreateSession {
        owner: String,
        ttl_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
        /// The user that opens it, kept with the session: only that user
        /// (or a principal that may lock every name) may keep it alive,
        /// delete or read it. `None`: a built-in principal.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// Restart the deadline of `session`, with `ttl_ms` or, when absent, the
    /// session's ttl: one deadline for all the locks it holds. Errors:
    /// `SessionNotFound`.
    KeepAlive {
        session: SessionId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ttl_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
    },
    /// End `session` now: release every lock it holds (as a release: no lock
    /// delay), each handed to its first waiter in this entry, and take its
    /// waiters out of their queues. Errors: `SessionNotFound`.
    DeleteSession {
        session: SessionId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// Take lock `name` in shared mode (a read lock) for `owner` for
    /// `ttl_ms`, or under `session`.
    ///
    /// Shared holders coexist; an exclusive holder (an `Acquire`) excludes
    /// them all, and they exclude it. The lock's one FIFO queue holds both
    /// kinds: a shared acquire is granted at once only when no exclusive
    /// lease is held and nobody waits (so a waiting exclusive acquire blocks
    /// every later shared one: no writer starves); when an exclusive holder
    /// leaves, every shared waiter at the front of the queue is granted in
    /// that entry, up to the first exclusive waiter. Every grant's token is
    /// the index of the entry that made it, so it is greater than that of
    /// every earlier grant of the lock, shared or exclusive.
    ///
    /// - Held shared by `owner`: its grant is returned again (same token)
    ///   and its lease restarts.
    /// - Held exclusively by `owner`, or asked while `owner` waits for the
    ///   lock in another request: `Invalid` (no upgrade or downgrade in place).
    /// - Blocked, no `wait_ms`: `HeldByOther` (an exclusive holder),
    ///   `LockDelayed`, or `Reserved` (someone waits first).
    /// - Blocked, with `wait_ms`: queued, unless waiting would close a cycle
    ///   of owners waiting for each other: `Deadlock`.
    ///
    /// Fenced records and gates admit the exclusive holder's token only.
    ///
    /// `ttl_ms` or `session` (and `seq`) as for `Acquire`: a shared lease
    /// under a session lives as long as the session and ends with it (on
    /// its expiry as an expiry, on its delete as a release), handing the
    /// lock on in that entry; `RenewShared` refuses it (`HeldUnderSession`).
    /// A re-acquire by a shared holder must name what its grant lives by.
    AcquireShared {
        name: String,
        owner: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ttl_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<SessionId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
    },
    /// Restart the shared lease of `owner` on lock `name` held under
    /// `token` (several shared holders granted in one entry share a token,
    /// so the owner names the lease). Errors: `NotHeld`, `StaleToken`,
    /// `HeldUnderSession`.
    RenewShared {
        name: String,
        owner: String,
        token: FencingToken,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ttl_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// End the shared lease of `owner` on lock `name` held under `token`;
    /// the last shared holder to leave hands the lock to the first waiter.
    /// Errors as `RenewShared`.
    ReleaseShared {
        name: String,
        owner: String,
        token: FencingToken,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// Take `permits` (default 1) permits of counting semaphore `name` for
    /// `owner` for `ttl_ms` (or under `session`), all at once or none.
    ///
    /// A semaphore exists while anyone holds or waits for a permit; the
    /// acquire that creates it sets its `limit`, and a later acquire that
    /// names another limit is `LimitMismatch` (`SetSemaphoreLimit` changes
    /// it). Each holder's permits are one lease with one token, the index
    /// of the entry that granted them; they return when it is released or
    /// expires, never earlier.
    ///
    /// - Held by `owner`: its grant is returned again and its lease
    ///   restarts (`Invalid` if it asks for another number of permits).
    /// - Enough permits free and nobody waiting: granted.
    /// - Otherwise, no `wait_ms`: `SemaphoreFull`, with the holders.
    /// - Otherwise, with `wait_ms`: queued FIFO (no later acquire overtakes
    ///   a waiter, even one that would fit); a waiter is granted in the
    ///   entry that frees enough permits while it is first. Waiting that
    ///   would close a cycle of owners waiting for each other: `Deadlock`.
    ///
    /// `ttl_ms` or `session` (and `seq`) as for `Acquire`: permits under a
    /// session return when the session ends (expiry or delete), granted on
    /// to the waiters that then fit in that entry; `RenewPermits` refuses
    /// them (`HeldUnderSession`).
    AcquirePermits {
        name: String,
        owner: String,
        limit: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        permits: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ttl_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<SessionId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
    },
    /// Restart the permits lease of `owner` on semaphore `name` held under
    /// `token`. Errors: `SemaphoreNotFound`, `NotHeld`, `StaleToken`,
    /// `HeldUnderSession`.
    RenewPermits {
        name: String,
        owner: String,
        token: FencingToken,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ttl_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// Return the permits `owner` holds on semaphore `name` under `token`,
    /// granting waiters that now fit, first first. Errors as `RenewPermits`.
    ReleasePermits {
        name: String,
        owner: String,
        token: FencingToken,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// Take `owner` out of the queue of semaphore `name` (its waiting client
    /// went away). A no-op when it is not waiting.
    CancelPermits { name: String, owner: String },
    /// Set the limit of live semaphore `name` (an operator's call). A lower
    /// limit revokes no permit: new grants wait until fewer are in use; a
    /// higher one grants the waiters that now fit, in this entry. Errors:
    /// `SemaphoreNotFound`.
    SetSemaphoreLimit { name: String, limit: u32 },
    /// One period of the leader's monotonic clock has passed. `period_ms` is the
    /// real time the leader waited since its previous Tick completed; every
    /// lease whose deadline this Tick reaches expires in this entry, and
    /// every lock delay this Tick reaches ends in it, and every session
    /// whose deadline it reaches expires in it, with its locks.
    Tick { period_ms: u64 },
    /// Stand as `candidate` in election `name`, announcing `value`: an
    /// `Acquire` of lock `name` (same fields, same rules, same answers:
    /// FIFO wait, ttl or session, lock delay, request id) whose holder
    /// carries `value` (JSON text, at most `max_value_bytes`). The leader's
    /// token is the index of the entry that elected it. A leader that
    /// campaigns again keeps its token and announces the new value.
    /// See [`LockTable::leader`](super::LockTable::leader).
    Campaign {
        name: String,
        candidate: String,
        value: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ttl_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<SessionId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lock_delay_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
    },
    /// The leader of election `name`, elected under `token`, announces
    /// `value`. Errors: `NotHeld` (no leader), `StaleToken` (another
    /// leadership's token, or `candidate` is not the leader's).
    Proclaim {
        name: String,
        candidate: String,
        token: FencingToken,
        value: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// The leader of election `name`, elected under `token`, steps down: a
    /// release of the lock, handed to the next candidate in this entry.
    /// Errors as `Proclaim`.
    Resign {
        name: String,
        candidate: String,
        token: FencingToken,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// Add user `user`, with a first token when `token` (its hash) is
    /// given, whose id is the index of this entry. Errors: `Exists` (the
    /// user, or a token already in use), `Full` at
    /// [`MAX_USERS`](super::MAX_USERS).
    AddUser {
        user: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<TokenHash>,
    },
    /// Remove user `user` and every token of it: from this entry on, its
    /// tokens open nothing. Errors: `NoUser`.
    RemoveUser { user: String },
    /// Add a token (its hash) to `user`; its id is the index of this entry.
    /// Errors: `NoUser`, `Exists` (the token is in use), `Full`.
    AddToken { user: String, token: TokenHash },
    /// Revoke token `token_id` of `user`: from this entry on it opens
    /// nothing. Errors: `NoUser`, `NoToken`.
    RevokeToken { user: String, token_id: u64 },
    /// Add role `role`, granting nothing yet. Errors: `Exists`, `Full`.
    AddRole { role: String },
    /// Remove role `role` and take it from every user. Errors: `NoRole`.
    RemoveRole { role: String },
    /// Grant `permission` on the names that start with `prefix` (`""`:
    /// every name) to `role`; `admin` counts on `""` only. Errors: `NoRole`,
    /// `Full`; granting what it has is a no-op.
    GrantPermission { role: String, permission: Permission, prefix: String },
    /// Take `permission` on exactly `prefix` from `role` (a no-op if it
    /// lacks it). Errors: `NoRole`.
    RevokePermission { role: String, permission: Permission, prefix: String },
    /// Give `role` to `user`. Errors: `NoUser`, `NoRole`, `Full`.
    AssignRole { user: String, role: String },
    /// Take `role` from `user` (a no-op if it lacks it). Errors: `NoUser`.
    UnassignRole { user: String, role: String },
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Acquire { name, owner, ttl_ms, session, .. } => {
                write!(f, "acquire({name}, owner={owner}, {})", Lifetime(*ttl_ms, *session))
            }
            Command::Renew { name, token, .. } => write!(f, "renew({name}, token={token})"),
            Command::Release { name, token, .. } => write!(f, "release({name}, token={token})"),
            Command::AcquireMany { names, owner, ttl_ms, session, .. } => {
                write!(f, "acquire_many({}, owner={owner}, {})", names.join(", "), Lifetime(*ttl_ms, *session))
            }
            Command::ReleaseMany { names, token, .. } => {
                write!(f, "release_many({}, token={token})", names.join(", "))
            }
            Command::Cancel { name, owner } => write!(f, "cancel({name}, owner={owner})"),
            Command::PutRecord { key, lock, token, .. } => write!(f, "put_record({key}, lock={lock}, token={token})"),
            Command::Gate { resource, lock, token, .. } => write!(f, "gate({resource}, lock={lock}, token={token})"),
            Command::CreateSession { owner, ttl_ms, .. } => write!(f, "create_session(owner={owner}, ttl={ttl_ms}ms)"),
            Command::KeepAlive { session, .. } => write!(f, "keepalive(session={session})"),
            Command::DeleteSession { session, .. } => write!(f, "delete_session(session={session})"),
            Command::AcquireShared { name, owner, ttl_ms, session, .. } => {
                write!(f, "acquire_shared({name}, owner={owner}, {})", Lifetime(*ttl_ms, *session))
            }
            Command::RenewShared { name, owner, token, .. } => {
                write!(f, "renew_shared({name}, owner={owner}, token={token})")
            }
            Command::ReleaseShared { name, owner, token, .. } => {
                write!(f, "release_shared({name}, owner={owner}, token={token})")
            }
            Command::AcquirePermits { name, owner, limit, permits, ttl_ms, session, .. } => write!(
                f,
                "acquire_permits({name}, owner={owner}, permits={}, limit={limit}, {})",
                permits.unwrap_or(1),
                Lifetime(*ttl_ms, *session)
            ),
            Command::RenewPermits { name, owner, token, .. } => {
                write!(f, "renew_permits({name}, owner={owner}, token={token})")
            }
            Command::ReleasePermits { name, owner, token, .. } => {
                write!(f, "release_permits({name}, owner={owner}, token={token})")
            }
            Command::CancelPermits { name, owner } => write!(f, "cancel_permits({name}, owner={owner})"),
            Command::SetSemaphoreLimit { name, limit } => write!(f, "set_semaphore_limit({name}, limit={limit})"),
            Command::Tick { period_ms } => write!(f, "tick({period_ms}ms)"),
            Command::Campaign { name, candidate, ttl_ms, session, .. } => {
                write!(f, "campaign({name}, candidate={candidate}, {})", Lifetime(*ttl_ms, *session))
            }
            Command::Proclaim { name, token, .. } => write!(f, "proclaim({name}, token={token})"),
            Command::Resign { name, token, .. } => write!(f, "resign({name}, token={token})"),
            Command::AddUser { user, .. } => write!(f, "add_user({user})"),
            Command::RemoveUser { user } => write!(f, "remove_user({user})"),
            Command::AddToken { user, .. } => write!(f, "add_token({user})"),
            Command::RevokeToken { user, token_id } => write!(f, "revoke_token({user}, {token_id})"),
            Command::AddRole { role } => write!(f, "add_role({role})"),
            Command::RemoveRole { role } => write!(f, "remove_role({role})"),
            Command::GrantPermission { role, permission, prefix } => {
                write!(f, "grant({role}, {permission} on {prefix:?})")
            }
            Command::RevokePermission { role, permission, prefix } => {
                write!(f, "revoke({role}, {permission} on {prefix:?})")
            }
            Command::AssignRole { user, role } => write!(f, "assign_role({user}, {role})"),
            Command::UnassignRole { user, role } => write!(f, "unassign_role({user}, {role})"),
        }
    }
}

/// What an acquire's lease lives by, for display.
struct Lifetime(Option<u64>, Option<SessionId>);

impl fmt::Display for Lifetime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lifetime(_, Some(session)) => write!(f, "session={session}"),
            Lifetime(ttl_ms, None) => write!(f, "ttl={}ms", ttl_ms.unwrap_or_default()),
        }
    }
}

/// The bounds a command must respect. One value is shared by the API (which
/// rejects bad input before proposing it) and the state machine (which rejects
/// it again, deterministically, should it ever reach the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_name_bytes: usize,
    pub max_owner_bytes: usize,
    pub max_request_id_bytes: usize,
    /// Several election timeouts: a shorter lease could expire during one
    /// leader election, before its holder had any chance to renew it.
    pub min_ttl_ms: u64,
    pub max_ttl_ms: u64,
    pub max_wait_ms: u64,
    /// Five minutes: a delay is meant to outlast a paused holder's pause,
    /// not to take a lock out of service.
    pub max_lock_delay_ms: u64,
    /// Locks in one multi-acquire or multi-release: bounds the entry and the
    /// copies of the set kept in each of its queues.
    pub max_names: usize,
    /// A record's value, as JSON text.
    pub max_value_bytes: usize,
    /// A semaphore's limit: bounds its holders, all kept in one row.
    pub max_semaphore_limit: u32,
}

impl Limits {
    pub const DEFAULT: Limits = Limits {
        max_name_bytes: 256,
        max_owner_bytes: 128,
        max_request_id_bytes: 128,
        min_ttl_ms: 3_000,
        max_ttl_ms: 3_600_000,
        max_wait_ms: 3_600_000,
        max_lock_delay_ms: 300_000,
        max_names: 64,
        max_value_bytes: 4096,
        max_semaphore_limit: 10_000,
    };
}

impl Limits {
    /// Checks a lock name, record key or gate resource given outside a
    /// command (reads, event streams), with the rules of lock names.
    pub fn check_name(&self, field: &'static str, value: &str) -> Result<(), InvalidCommand> {
        check_text(field, value, self.max_name_bytes)
    }
}

/// Why a command was refused before it changed anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidCommand {
    pub field: String,
    pub reason: String,
}

impl InvalidCommand {
    fn new(field: &'static str, reason: impl Into<String>) -> Self {
        InvalidCommand { field: field.to_owned(), reason: reason.into() }
    }
}

impl Command {
    /// The session and sequence number of a session-bound request that
    /// carries one: the session remembers the answers to its last
    /// [`MAX_SESSION_ANSWERS`](super::MAX_SESSION_ANSWERS) sequence numbers
    /// for its whole life, so a retry with one of them gets its first answer
    /// without being applied again, and one older than those is refused
    /// (`SeqTooOld`) rather than applied twice (Raft dissertation §6.3).
    pub fn session_seq(&self) -> Option<(SessionId, u64)> {
        match self {
            Command::Acquire { session, seq, .. }
            | Command::AcquireMany { session, seq, .. }
            | Command::Release { session, seq, .. }
            | Command::ReleaseMany { session, seq, .. }
            | Command::AcquireShared { session, seq, .. }
            | Command::AcquirePermits { session, seq, .. }
            | Command::Campaign { session, seq, .. } => Some(((*session)?, (*seq)?)),
            Command::KeepAlive { session, seq, .. } => Some((*session, (*seq)?)),
            _ => None,
        }
    }

    /// For an `Acquire`, `AcquireMany`, `AcquireShared`, `AcquirePermits`
    /// or `Campaign`: the locks (or the semaphore) it asks for, in order,
    /// its owner, session and `wait_ms`; `None` for any other command.
    pub fn acquire_parts(&self) -> Option<AcquireParts<'_>> {
        match self {
            Command::Acquire { name, owner, session, wait_ms, .. }
            | Command::AcquireShared { name, owner, session, wait_ms, .. }
            | Command::AcquirePermits { name, owner, session, wait_ms, .. } => {
                Some(AcquireParts { names: std::slice::from_ref(name), owner, session: *session, wait_ms: *wait_ms })
            }
            Command::AcquireMany { names, owner, session, wait_ms, .. } => {
                Some(AcquireParts { names, owner, session: *session, wait_ms: *wait_ms })
            }
            Command::Campaign { name, candidate, session, wait_ms, .. } => Some(AcquireParts {
                names: std::slice::from_ref(name),
                owner: candidate,
                session: *session,
                wait_ms: *wait_ms,
            }),
            _ => None,
        }
    }

    /// Checks the command against `limits`. Ticks are always valid.
    pub fn validate(&self, limits: &Limits) -> Result<(), InvalidCommand> {
        match self {
            Command::Acquire { name, owner, ttl_ms, session, wait_ms, request_id, lock_delay_ms, seq } => {
                check_seq(*session, *seq)?;
                check_name(name, limits)?;
                check_text("owner", owner, limits.max_owner_bytes)?;
                check_request_id(request_id, limits)?;
                check_at_most("wait_ms", *wait_ms, limits.max_wait_ms)?;
                check_at_most("lock_delay_ms", *lock_delay_ms, limits.max_lock_delay_ms)?;
                check_lifetime(*ttl_ms, *session, limits)
            }
            Command::Renew { name, ttl_ms, request_id, .. } => {
                check_name(name, limits)?;
                check_request_id(request_id, limits)?;
                ttl_ms.map_or(Ok(()), |ttl| check_ttl(ttl, limits))
            }
            Command::Release { name, request_id, session, seq, .. } => {
                check_seq(*session, *seq)?;
                check_name(name, limits)?;
                check_request_id(request_id, limits)
            }
            Command::AcquireMany { names, owner, ttl_ms, session, wait_ms, request_id, lock_delay_ms, seq } => {
                check_seq(*session, *seq)?;
                check_names(names, limits)?;
                check_text("owner", owner, limits.max_owner_bytes)?;
                check_request_id(request_id, limits)?;
                check_at_most("wait_ms", *wait_ms, limits.max_wait_ms)?;
                check_at_most("lock_delay_ms", *lock_delay_ms, limits.max_lock_delay_ms)?;
                check_lifetime(*ttl_ms, *session, limits)
            }
            Command::ReleaseMany { names, request_id, session, seq, .. } => {
                check_seq(*session, *seq)?;
                check_names(names, limits)?;
                check_request_id(request_id, limits)
            }
            Command::Cancel { name, owner } => {
                check_name(name, limits)?;
                check_text("owner", owner, limits.max_owner_bytes)
            }
            Command::PutRecord { key, lock, value, request_id, .. } => {
                check_text("key", key, limits.max_name_bytes)?;
                check_text("lock", lock, limits.max_name_bytes)?;
                check_request_id(request_id, limits)?;
                check_value(value, limits)
            }
            Command::Gate { resource, lock, request_id, .. } => {
                check_text("resource", resource, limits.max_name_bytes)?;
                check_text("lock", lock, limits.max_name_bytes)?;
                check_request_id(request_id, limits)
            }
            Command::CreateSession { owner, ttl_ms, request_id, by } => {
                by.as_deref().map_or(Ok(()), |by| check_principal_name("by", by, limits))?;
                check_text("owner", owner, limits.max_owner_bytes)?;
                check_request_id(request_id, limits)?;
                check_ttl(*ttl_ms, limits)
            }
            Command::KeepAlive { ttl_ms, request_id, .. } => {
                check_request_id(request_id, limits)?;
                ttl_ms.map_or(Ok(()), |ttl| check_ttl(ttl, limits))
            }
            Command::DeleteSession { request_id, .. } => check_request_id(request_id, limits),
            Command::AcquireShared { name, owner, ttl_ms, session, wait_ms, request_id, seq } => {
                check_seq(*session, *seq)?;
                check_name(name, limits)?;
                check_text("owner", owner, limits.max_owner_bytes)?;
                check_request_id(request_id, limits)?;
                check_at_most("wait_ms", *wait_ms, limits.max_wait_ms)?;
                check_lifetime(*ttl_ms, *session, limits)
            }
            Command::RenewShared { name, owner, ttl_ms, request_id, .. }
            | Command::RenewPermits { name, owner, ttl_ms, request_id, .. } => {
                check_name(name, limits)?;
                check_text("owner", owner, limits.max_owner_bytes)?;
                check_request_id(request_id, limits)?;
                ttl_ms.map_or(Ok(()), |ttl| check_ttl(ttl, limits))
            }
            Command::ReleaseShared { name, owner, request_id, .. }
            | Command::ReleasePermits { name, owner, request_id, .. } => {
                check_name(name, limits)?;
                check_text("owner", owner, limits.max_owner_bytes)?;
                check_request_id(request_id, limits)
            }
            Command::AcquirePermits { name, owner, limit, permits, ttl_ms, session, wait_ms, request_id, seq } => {
                check_seq(*session, *seq)?;
                check_name(name, limits)?;
                check_text("owner", owner, limits.max_owner_bytes)?;
                check_request_id(request_id, limits)?;
                check_at_most("wait_ms", *wait_ms, limits.max_wait_ms)?;
                check_limit(*limit, limits)?;
                if let Some(permits) = permits {
                    if !(1..=*limit).contains(permits) {
                        return Err(InvalidCommand::new(
                            "permits",
                            format!("is {permits}, must be between 1 and the limit ({limit})"),
                        ));
                    }
                }
                check_lifetime(*ttl_ms, *session, limits)
            }
            Command::CancelPermits { name, owner } => {
                check_name(name, limits)?;
                check_text("owner", owner, limits.max_owner_bytes)
            }
            Command::SetSemaphoreLimit { name, limit } => {
                check_name(name, limits)?;
                check_limit(*limit, limits)
            }
            Command::Tick { .. } => Ok(()),
            Command::Campaign { name, candidate, value, ttl_ms, session, wait_ms, request_id, lock_delay_ms, seq } => {
                check_seq(*session, *seq)?;
                check_name(name, limits)?;
                check_text("candidate", candidate, limits.max_owner_bytes)?;
                check_value(value, limits)?;
                check_request_id(request_id, limits)?;
                check_at_most("wait_ms", *wait_ms, limits.max_wait_ms)?;
                check_at_most("lock_delay_ms", *lock_delay_ms, limits.max_lock_delay_ms)?;
                check_lifetime(*ttl_ms, *session, limits)
            }
            Command::Proclaim { name, candidate, value, request_id, .. } => {
                check_name(name, limits)?;
                check_text("candidate", candidate, limits.max_owner_bytes)?;
                check_value(value, limits)?;
                check_request_id(request_id, limits)
            }
            Command::Resign { name, candidate, request_id, .. } => {
                check_name(name, limits)?;
                check_text("candidate", candidate, limits.max_owner_bytes)?;
                check_request_id(request_id, limits)
            }
            Command::AddUser { user, token } => {
                check_principal_name("user", user, limits)?;
                token.as_ref().map_or(Ok(()), check_token_hash)
            }
            Command::AddToken { user, token } => {
                check_principal_name("user", user, limits)?;
                check_token_hash(token)
            }
            Command::RemoveUser { user } | Command::RevokeToken { user, .. } => {
                check_principal_name("user", user, limits)
            }
            Command::AddRole { role } | Command::RemoveRole { role } => check_principal_name("role", role, limits),
            Command::GrantPermission { role, prefix, .. } | Command::RevokePermission { role, prefix, .. } => {
                check_principal_name("role", role, limits)?;
                check_prefix(prefix, limits)
            }
            Command::AssignRole { user, role } | Command::UnassignRole { user, role } => {
                check_principal_name("user", user, limits)?;
                check_principal_name("role", role, limits)
            }
        }
    }
}

/// A user's or role's name: an owner's rules (printable, at most
/// `max_owner_bytes`), and none of the characters that would need quoting
/// in a URL path or a shell.
fn check_principal_name(field: &'static str, value: &str, limits: &Limits) -> Result<(), InvalidCommand> {
    check_text(field, value, limits.max_owner_bytes)?;
    if !value.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b)) {
        return Err(InvalidCommand::new(field, "may hold only ASCII letters, digits, '-', '_', '.' and '@'"));
    }
    Ok(())
}

/// A grant's prefix: empty (every name) or what a name may start with.
fn check_prefix(prefix: &str, limits: &Limits) -> Result<(), InvalidCommand> {
    if prefix.is_empty() {
        return Ok(());
    }
    check_text("prefix", prefix, limits.max_name_bytes)
}

fn check_token_hash(token: &TokenHash) -> Result<(), InvalidCommand> {
    match token.is_well_formed() {
        true => Ok(()),
        false => Err(InvalidCommand::new("token", "must be a SHA-256 as 64 lowercase hex digits")),
    }
}

/// A value (a record's, a leader's) as JSON text, at most `max_value_bytes`.
fn check_value(value: &str, limits: &Limits) -> Result<(), InvalidCommand> {
    let size = value.len();
    if size > limits.max_value_bytes {
        return Err(InvalidCommand::new(
            "value",
            format!("is {size} bytes of JSON, at most {} allowed", limits.max_value_bytes),
        ));
    }
    Ok(())
}

/// What a waiting acquire is about: see [`Command::acquire_parts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireParts<'c> {
    pub names: &'c [String],
    pub owner: &'c str,
    pub session: Option<SessionId>,
    pub wait_ms: Option<u64>,
}

/// A sequence number is counted within a session: none without one.
fn check_seq(session: Option<SessionId>, seq: Option<u64>) -> Result<(), InvalidCommand> {
    if seq.is_some() && session.is_none() {
        return Err(InvalidCommand::new("seq", "is counted within a session: give session too"));
    }
    Ok(())
}

/// Exactly one of a ttl (checked) and a session.
fn check_lifetime(ttl_ms: Option<u64>, session: Option<SessionId>, limits: &Limits) -> Result<(), InvalidCommand> {
    match (ttl_ms, session) {
        (Some(ttl_ms), None) => check_ttl(ttl_ms, limits),
        (None, Some(_)) => Ok(()),
        (Some(_), Some(_)) => Err(InvalidCommand::new("session", "give either ttl_ms or session, not both")),
        (None, None) => Err(InvalidCommand::new("ttl_ms", "give either ttl_ms or session")),
    }
}

/// A semaphore's limit: 1 to `max_semaphore_limit`.
fn check_limit(limit: u32, limits: &Limits) -> Result<(), InvalidCommand> {
    if !(1..=limits.max_semaphore_limit).contains(&limit) {
        return Err(InvalidCommand::new(
            "limit",
            format!("is {limit}, must be between 1 and {}", limits.max_semaphore_limit),
        ));
    }
    Ok(())
}

fn check_request_id(id: &Option<String>, limits: &Limits) -> Result<(), InvalidCommand> {
    id.as_deref().map_or(Ok(()), |id| check_text("request_id", id, limits.max_request_id_bytes))
}

fn check_name(name: &str, limits: &Limits) -> Result<(), InvalidCommand> {
    check_text("name", name, limits.max_name_bytes)
}

/// 1 to `max_names` distinct lock names.
fn check_names(names: &[String], limits: &Limits) -> Result<(), InvalidCommand> {
    if names.is_empty() || names.len() > limits.max_names {
        return Err(InvalidCommand::new(
            "names",
            format!("lists {} locks, must list 1 to {}", names.len(), limits.max_names),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for name in names {
        check_text("names", name, limits.max_name_bytes)?;
        if !seen.insert(name) {
            return Err(InvalidCommand::new("names", format!("lists {name:?} twice")));
        }
    }
    Ok(())
}

/// Non-empty, at most `max` bytes, printable: no control characters, so names
/// and owners can be logged, listed and put in URLs and headers safely.
fn check_text(field: &'static str, value: &str, max: usize) -> Result<(), InvalidCommand> {
    if value.is_empty() {
        return Err(InvalidCommand::new(field, "must not be empty"));
    }
    if value.len() > max {
        return Err(InvalidCommand::new(field, format!("is {} bytes, at most {max} allowed", value.len())));
    }
    if value.chars().any(char::is_control) {
        return Err(InvalidCommand::new(field, "must be printable (no control characters)"));
    }
    Ok(())
}

fn check_at_most(field: &'static str, value: Option<u64>, max: u64) -> Result<(), InvalidCommand> {
    if value.is_some_and(|v| v > max) {
        return Err(InvalidCommand::new(field, format!("must be at most {max}")));
    }
    Ok(())
}

fn check_ttl(ttl_ms: u64, limits: &Limits) -> Result<(), InvalidCommand> {
    if !(limits.min_ttl_ms..=limits.max_ttl_ms).contains(&ttl_ms) {
        return Err(InvalidCommand::new(
            "ttl_ms",
            format!("is {ttl_ms}, must be between {} and {}", limits.min_ttl_ms, limits.max_ttl_ms),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire(name: &str, owner: &str, ttl_ms: u64) -> Command {
        Command::Acquire {
            name: name.into(),
            owner: owner.into(),
            ttl_ms: Some(ttl_ms),
            session: None,
            wait_ms: None,
            request_id: None,
            lock_delay_ms: None,
            seq: None,
        }
    }

    // Ensures every limit is enforced at its boundary and names the field.
    #[test]
    fn limits_are_enforced_at_their_boundaries() {
        let l = Limits::DEFAULT;
        assert!(acquire(&"n".repeat(256), &"o".repeat(128), l.min_ttl_ms).validate(&l).is_ok());
        assert!(acquire("n", "o", l.max_ttl_ms).validate(&l).is_ok());
        let field = |c: Command| c.validate(&l).unwrap_err().field;
        assert_eq!(field(acquire(&"n".repeat(257), "o", 5000)), "name");
        assert_eq!(field(acquire("", "o", 5000)), "name");
        assert_eq!(field(acquire("a\nb", "o", 5000)), "name");
        assert_eq!(field(acquire("n", &"o".repeat(129), 5000)), "owner");
        assert_eq!(field(acquire("n", "", 5000)), "owner");
        assert_eq!(field(acquire("n", "o", l.min_ttl_ms - 1)), "ttl_ms");
        assert_eq!(field(acquire("n", "o", l.max_ttl_ms + 1)), "ttl_ms");
        let renew =
            Command::Renew { name: "n".into(), token: FencingToken::granted_at(1), ttl_ms: Some(1), request_id: None };
        assert_eq!(field(renew), "ttl_ms");
        let release = Command::Release {
            name: "\u{7f}".into(),
            token: FencingToken::granted_at(1),
            request_id: Some(String::new()),
            session: None,
            seq: None,
        };
        assert_eq!(field(release), "name");
        let release = Command::Release {
            name: "n".into(),
            token: FencingToken::granted_at(1),
            request_id: Some("r".repeat(129)),
            session: None,
            seq: None,
        };
        assert_eq!(field(release), "request_id");
        let waiting = Command::Acquire {
            name: "n".into(),
            owner: "o".into(),
            ttl_ms: Some(5000),
            session: None,
            wait_ms: Some(l.max_wait_ms + 1),
            request_id: None,
            lock_delay_ms: None,
            seq: None,
        };
        assert_eq!(field(waiting), "wait_ms");
        let delayed = Command::Acquire {
            name: "n".into(),
            owner: "o".into(),
            ttl_ms: Some(5000),
            session: None,
            wait_ms: None,
            request_id: None,
            lock_delay_ms: Some(l.max_lock_delay_ms + 1),
            seq: None,
        };
        assert_eq!(field(delayed), "lock_delay_ms");
    }

    // Ensures multi-byte names are measured in bytes, as documented.
    #[test]
    fn name_limit_counts_bytes_not_chars() {
        let l = Limits::DEFAULT;
        let name = "é".repeat(129); // 258 bytes, 129 chars
        assert_eq!(acquire(&name, "o", 5000).validate(&l).unwrap_err().field, "name");
    }
}
