//! The Rust client library: talks HTTP/JSON to any node of a cluster.
//!
//! A [`Client`] holds a list of endpoints. It sends each request to the node
//! it believes leads (learned from the `x-leasehold-leader-addr` header), moves
//! to the next endpoint when a node is unreachable, and retries 503 answers
//! with back-off until its retry budget is spent: a node that says it is
//! `overloaded` is left alone for its `Retry-After` (with jitter, so a herd
//! of clients does not come back at once); while there is no leader it
//! backs off from 25 ms to 500 ms, jittered, since an election usually ends
//! sooner than `Retry-After`'s whole second. It never reconnects in a loop.
//! Other answers (409, 404, 400, ...) are returned at once as
//! [`ClientError::Api`].
//!
//! A request that waits in a lock's queue while another wait of the same
//! client is in flight goes over HTTP/2 (h2c with prior knowledge, or `h2`
//! under TLS), so a herd of waiting acquires in one process shares one
//! connection instead of holding one each; everything else, a lone wait
//! included, stays on HTTP/1.1, which costs both sides less per request
//! (a hot lock's hand-over is a wait and a release), except right after a
//! wait that outlasted the HTTP/1.1 connections ([`http`]). Against a node
//! that does not speak HTTP/2 the client falls back to HTTP/1.1 for good.
//!
//! An answer is read only up to a bound ([`http::MAX_ANSWER_BYTES`], 64 MiB;
//! a backup up to 16 GiB, the largest snapshot a follower accepts): one
//! that is longer, or whose `content-length` or chunk sizes say it is, is
//! refused with [`ClientError::Decode`] before it is read, and not retried.
//! A node's numbers are checked, never trusted: no answer makes the client
//! panic or allocate without end.
//!
//! Every mutation carries a request id, the same on every retry of one call,
//! so a retry the cluster already applied returns the original result (the
//! same token), also when it reaches a new leader.
//!
//! [`Lock`] (`guard.rs`) holds a lock for as long as it lives: a watchdog
//! task renews it and fires [`Lock::lost`] by the client's safe deadline.
//! [`Session`] (`session.rs`) does the same for any number of locks at
//! once: one keepalive, one `lost` for all of them.
//!
//! For a cluster with auth or TLS on, [`Client::with_credentials`] sends a
//! bearer token on every request and trusts a custom CA; endpoints without a
//! scheme are then `https`.
//!
//! Request and answer bodies are the wire types of [`leasehold_proto`], the
//! same the server parses and writes; error codes are its [`ErrorCode`].
//!
//! # Layout
//!
//! - `client.rs` — [`Client`]: endpoints, leader following, retries, request ids.
//! - `backoff.rs` — the pauses between a call's tries, jittered.
//! - `error.rs` — [`ClientError`]: what a call can fail with.
//! - `credentials.rs` — [`Credentials`]: a bearer [`Secret`] and a [`Ca`] to trust.
//! - `lease.rs` — [`Lease`], [`Lifetime`], [`AcquireOptions`]: what an acquire asks for and gives.
//! - `locks.rs` — the lock endpoints: [`Client::acquire`], renew, release, get, list.
//! - `multi.rs` — [`Client::acquire_many`]: several locks under one token, and [`LockSet`].
//! - `sessions.rs` — the session endpoints: [`Client::create_session`], keepalive, delete, get, list.
//! - `fence.rs` — the fence endpoints: [`Client::check`], records, gates.
//! - `admin.rs` — the admin endpoints: [`Client::status`], membership, snapshots, backups.
//! - `election.rs` — [`Election`], [`Leadership`]: campaign, proclaim, resign, observe.
//! - `guard.rs` — [`Lock`]: a lock kept by its own lease.
//! - `rw.rs` — [`ReadLock`] and [`WriteLock`]: a [`Lock`] held in shared or exclusive mode.
//! - `semaphores.rs` — the semaphore endpoints: [`Client::acquire_permits`], renew, release, read.
//! - `semaphore.rs` — [`Semaphore`]: permits kept by their own lease, on the same watchdog.
//! - `session.rs` — [`Session`]: locks kept by one session, and its keepalive.
//! - `watch.rs` — [`Watch`]: event streams that resume after the last event on any node.
//! - `watchdog.rs` — the watchdog that renews a lease or keeps a session alive, and the `lost` signal.
//! - [`run`] — `leasehold run`: a command under a lock, stopped before the lock can pass on.
//! - [`signals`] — SIGTERM, SIGINT and SIGHUP as one stream, for `run` and the binaries.
//! - [`http`] — the connections: HTTP/1.1 spoken directly for quick
//!   requests, HTTP/2 (hyper) for waits; endpoints and request targets.
//!
//! ```no_run
#![doc = include_str!("../examples/lock.rs")]
//! ```

mod admin;
mod backoff;
mod client;
mod credentials;
mod election;
mod error;
mod fence;
mod guard;
pub mod http;
mod lease;
mod locks;
mod multi;
pub mod run;
mod rw;
mod semaphore;
mod semaphores;
mod session;
mod sessions;
pub mod signals;
mod users;
mod watch;
mod watchdog;

pub use client::{new_request_id, Client};
pub use credentials::{load_ca, load_identity, Ca, Credentials, Identity};
pub use election::{Election, Leadership};
pub use error::{ClientError, Denial};
pub use guard::{default_owner, Lock, LockOptions};
pub use lease::{AcquireOptions, Lease, Lifetime};
pub use leasehold_proto as proto;
pub use leasehold_proto::{ErrorCode, ErrorDetail, FencingToken, Grant, LeaseView, Secret, SecretError};
pub use multi::{Leases, LockSet};
pub use rw::{ReadLock, WriteLock};
pub use semaphore::{Semaphore, SemaphoreOptions};
pub use semaphores::{PermitRequest, Permits};
pub use session::{Session, SessionOptions};
pub use sessions::SessionId;
pub use watch::{Watch, WatchEvent};
pub use watchdog::LostReason;
