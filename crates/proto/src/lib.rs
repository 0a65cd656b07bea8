//! The wire contract of leasehold's HTTP API, defined once for the server
//! (which parses requests and writes answers with these types) and for every
//! client (which writes requests and parses answers with the same types).
//!
//! # Layout
//!
//! - [`locks`] — acquire, renew, release, get and list bodies.
//! - [`fence`] — fence check, fenced records and gates.
//! - [`cluster`] — status, membership, snapshots, health.
//! - [`error`] — the error body and [`ErrorCode`], with the HTTP status of each code.
//! - this file — header names and the lock-core values that go on the wire as they are
//!   ([`Grant`], [`LeaseView`], [`LockEvent`], [`FencingToken`]).
//!
//! Request bodies refuse unknown fields: a misspelt field is a 400, never silently ignored.

pub mod cluster;
pub mod error;
pub mod fence;
pub mod locks;

pub use error::{ErrorBody, ErrorCode, ErrorDetail};
pub use leasehold_core::{EventKind, FencingToken, Grant, LeaseView, Limits, LockEvent, WaiterView};

/// A member's id in the Raft cluster.
pub type NodeId = u64;

/// Set on every answer: the id of the leader the answering node knows.
pub const LEADER_HEADER: &str = "x-leasehold-leader";
/// Set on every answer: the `host:port` of that leader, so a client can go there directly.
pub const LEADER_ADDR_HEADER: &str = "x-leasehold-leader-addr";
