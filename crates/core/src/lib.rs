//! The pure lock core: commands and the batches a log entry carries, leases, waiting queues, the lock table,
//! sessions, fencing tokens and the fence checks served on them (records, gates),
//! request de-duplication, the quotas on leases and waiters, elections (a lock
//! whose holder carries a value), lock events; shared (read) locks, counting
//! semaphores, and the wait-for graph that refuses a wait which would
//! deadlock. Each command carries the principal that proposed it in its
//! entry, and every event says who caused it ([`Actor`]): that principal,
//! or the cluster for what a Tick does.
//!
//! Nothing in here knows about Raft, sled, tokio or HTTP, and nothing reads a
//! clock. [`LockTable::apply`] is a deterministic function of the committed log:
//! every replica that applies the same entries in the same order ends in the same
//! state and returns the same answers. Time enters only as [`Command::Tick`]
//! entries proposed by the Raft leader, so lease expiry is testable without
//! sleeping.

mod access;
mod batch;
mod command;
mod encoding;
mod event;
mod fence;
mod quotas;
mod requests;
mod table;
mod tracked;

pub use access::Access;
pub use access::{
    Denied, Permission, Principal, Role, RoleView, TokenHash, User, UserView, MAX_GRANTS_PER_ROLE, MAX_ROLES,
    MAX_ROLES_PER_USER, MAX_TOKENS_PER_USER, MAX_USERS,
};
pub use batch::Batch;
pub use command::{AcquireParts, Command, InvalidCommand, Limits};
pub use encoding::DecodeError;
pub use event::{Actor, EventKind, LockEvent};
pub use fence::{Record, MAX_GATES, MAX_RECORDS};
pub use quotas::Quotas;
pub use requests::{Requests, MAX_REQUESTS, MAX_REQUEST_AGE_MS};
pub use table::{
    Applied, Blocker, Changes, Conflict, FencingToken, Grant, Leader, LeaseView, LockError, LockTable, Outcome,
    OwnedRowValue, PermitGrant, PermitHolder, PermitWaiterView, Row, RowValue, SemaphoreView, SessionId, SessionLock,
    SessionView, TableImage, TableLoader, Tree, WaiterView, MAX_CAMPAIGNS, MAX_REMEMBERED_NAMES, MAX_SESSIONS,
    MAX_SESSION_ANSWERS,
};
