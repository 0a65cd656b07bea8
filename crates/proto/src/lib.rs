//! The wire contract of leasehold's HTTP API, defined once for the server
//! (which parses requests and writes answers with these types) and for every
//! client (which writes requests and parses answers with the same types).
//!
//! # Layout
//!
//! - [`locks`] — acquire, renew, release, get and list bodies.
//! - [`sessions`] — create, keep alive, delete, get and list sessions.
//! - [`semaphores`] — acquire, renew and release permits, read semaphores, set a limit.
//! - [`fence`] — fence check, fenced records and gates.
//! - [`elections`] — campaign, proclaim, resign and the leader of an election.
//! - [`auth`] — users, their tokens, roles and the permissions they grant on name prefixes.
//! - [`cluster`] — status, membership, snapshots, health.
//! - [`error`] — the error body and [`ErrorCode`], with the HTTP status of each code.
//! - [`events`] — the lock events of the Server-Sent Event streams.
//! - [`secret`] — [`Secret`], the bearer secret both sides handle, compared in constant time.
//! - this file — header names, [`FencingToken`] and the core's [`Limits`].
//!
//! The lock-core values that go on the wire ([`Grant`], [`LeaseView`],
//! [`WaiterView`], [`LockEvent`]) have twins here, with the same fields and
//! the same JSON and a `From` of the core's value: the core may depend on
//! serde and thiserror only, so only a twin can carry the OpenAPI schema the
//! server publishes (feature `openapi`), and the server answers with the
//! very types its document is derived from.
//!
//! Request bodies refuse unknown fields: a misspelt field is a 400, never silently ignored.

pub mod auth;
pub mod cluster;
pub mod elections;
pub mod error;
pub mod events;
pub mod fence;
mod int;
pub mod locks;
#[cfg(feature = "openapi")]
pub mod schema;
pub mod secret;
pub mod semaphores;
pub mod sessions;

pub use error::{ErrorBody, ErrorCode, ErrorDetail};
pub use events::{EventKind, LockEvent};
pub use leasehold_core::{FencingToken, Limits};
pub use locks::{Grant, LeaseView, WaiterView};
pub use secret::{Secret, SecretError};

/// The largest fencing token a request may name: 2^53 - 1, the largest
/// integer every JSON parser reads exactly (JavaScript's and others read
/// numbers as doubles). A token is a log index: a log that commits a
/// million entries a second reaches it in 285 years.
pub const MAX_TOKEN: u64 = (1 << 53) - 1;

/// Default and largest page of `GET /v1/locks` (its `limit`).
pub const DEFAULT_LIST_LIMIT: usize = 100;
pub const MAX_LIST_LIMIT: usize = 1000;

/// A member's id in the Raft cluster.
pub type NodeId = u64;

/// Set on every answer: the id of the leader the answering node knows.
pub const LEADER_HEADER: &str = "x-leasehold-leader";
/// Set on every answer: the `host:port` of that leader, so a client can go there directly.
pub const LEADER_ADDR_HEADER: &str = "x-leasehold-leader-addr";
