//! The pure lock core: commands, leases, the lock table and fencing tokens.
//!
//! Nothing in here knows about Raft, sled, tokio or HTTP, and nothing reads a
//! clock. [`LockTable::apply`] is a deterministic function of the committed log:
//! every replica that applies the same entries in the same order ends in the same
//! state and returns the same answers. Time enters only as [`Command::Tick`]
//! entries proposed by the Raft leader, so lease expiry is testable without
//! sleeping.

mod command;
mod table;

pub use command::{Command, InvalidCommand, Limits};
pub use table::{FencingToken, Grant, LeaseView, LockError, LockTable, Outcome, TableImage};
