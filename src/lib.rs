//! leasehold: a Raft-replicated lease lock service with fencing tokens.
//!
//! # Layout
//!
//! The workspace's crates, each a `Cargo.toml` boundary; dependencies point
//! down only (`.ci/check-boundaries` checks the client's, the core's, and that
//! this crate does not link the lab):
//!
//! - `leasehold` (this crate, `src/`) — the server and the `leasehold`
//!   binary (`main.rs`, with its clap types by audience in `cli/`), the one
//!   the package ships.
//!   - `leasehold-lab` (`crates/lab`) — bench, chaos, history checker, demo,
//!     scale, plots, and their `leasehold-lab` binary; drives servers as
//!     processes through the client and the wire types only. Neither crate
//!     links the other (this one only in its tests and benches).
//!   - `leasehold-local` (`crates/local`) — a local cluster of node
//!     processes, started and stopped by PID (`up`, the tests, the lab).
//!   - `leasehold-cli` (`crates/cli`) — what the command line shares with the
//!     lab's: the duration syntax, credential flags, exit statuses, logging.
//!   - `leasehold-client` (`crates/client`) — the Rust client, the `Lock`
//!     guard (watchdog, `lost`), `run`, secrets, the stop-signal helper.
//!   - `leasehold-proto` (`crates/proto`) — the wire contract: request and
//!     response bodies, `ErrorCode` with each code's status, headers, `NodeId`.
//!   - `leasehold-core` (`crates/core`) — PURE: commands, batches (and the
//!     quotas on leases and waiters each carries, and who proposed each
//!     command), the lock table, leases,
//!     queues, tokens, records, gates, request de-duplication, elections, events,
//!     users and roles and the one authorization rule (`access.rs`); serde
//!     and thiserror only; time enters as Tick commands.
//!
//! This crate's modules:
//!
//! - [`server`] — wires a node and the listener (`server::run`): accept
//!   loop, TLS (rustls), HTTP/1.1 and HTTP/2 (hyper), connection budgets
//!   and 503 refusals, header-read timeout, and the hand-off of members'
//!   peer connections (or the members' own listener, with `--peer-addr`); [`ServeConfig`](server::ServeConfig) holds its settings.
//! - [`admission`] — how much one client may hold: connection, waiting and
//!   event-stream budgets, in total and per address, sized from the fd limit.
//! - [`api`] — axum routes: client API (`/v1/locks`, `/v1/multi`, `/v1/sessions`, `/v1/elections`,
//!   waiting, SSE events that resume after an id and say who caused them),
//!   users and roles (`/v1/auth`),
//!   fence API (`/v1/fence`, `/v1/records`), admin API (`/v1/cluster`,
//!   `/healthz`, `/readyz`), inbound Raft RPC (`/raft`), leader forwarding, bearer-token
//!   checks that resolve a caller to a principal and authorize it on the names
//!   each request touches (`api/auth.rs`), request deadlines and the in-flight bound, and the one
//!   `ApiError` that decides every status code; for operators `/metrics`,
//!   the status page, `/v1/cluster/nodes`, `/v1/events` and `/openapi.json`.
//! - [`node`] — one node: config (Raft, storage, peers), the stores and
//!   Raft wired together; offers propose, acquire (with waiting:
//!   `node/acquire.rs`, woken by the registry of waiters in
//!   `node/waiters.rs`), linearizable read, status and membership; on a
//!   follower, proposals and read indexes go to the leader, and the
//!   leader's side of that takes followers' commands (`node/handoff.rs`).
//!   Knows nothing of HTTP serving, nor of openraft.
//! - [`raft`] — the openraft glue, the only code above the stores that
//!   knows openraft: the type config (`raft/types.rs`), [`Consensus`](raft::Consensus)
//!   (the running Raft, the proposer that batches client commands into
//!   entries, the leader's ticker, the checkpoint policy), the network to
//!   the other nodes (the messages in `raft/messages.rs`, outbound and
//!   inbound RPC) and the observer of
//!   openraft's metrics.
//! - [`store`] — the storage engines, the only code that knows sled and
//!   files: the Raft log (segment files, group commit, direct writes and
//!   fdatasync), the
//!   state machine and its rows in sled (checkpoints, generations, snapshot
//!   install, backups), the history of recent events streams resume in, the
//!   snapshot file format, the data folder's format.
//! - [`peer`] — the peer transport between members: frames, the hello and
//!   its gate, dialing, the hand-off channels on which followers hand the
//!   leader commands (`peer/handoff.rs`), and the HTTP/2 forwarding
//!   channels that relay whole requests to it.
//! - [`metrics`] — the node's Prometheus series; the api, the stores and
//!   the ticker report to it, it reads nothing itself.
//! - [`security`] — a node's secrets and TLS files, its rustls config, the
//!   Common Name of a verified client certificate (the user it names), and
//!   what runs open or closed for want of a secret (warned at start).
//! - `crash_point!` — named crash points at the durability boundaries, live
//!   only with the `failpoints` feature (`tests/failpoints.rs`).

/// A named crash point. With the `failpoints` feature (never in the product
/// build) the process kills itself with SIGKILL here when `FAILPOINTS` sets
/// the point to `return` (`FAILPOINTS=log-after-fsync=return`, or
/// `20*off->return` to pass 20 times first): SIGKILL, not a panic or an
/// exit, because nothing may run after it — no unwinding, no destructor, no
/// buffered write, no other thread — exactly as under `kill -9` at this
/// line. Without the feature it expands to nothing.
macro_rules! crash_point {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        $crate::crash_if_set($name);
    };
}

/// [`crash_point!`]'s body.
#[cfg(feature = "failpoints")]
pub fn crash_if_set(name: &str) {
    if fail::eval(name, |_| ()).is_some() {
        eprintln!("leasehold: failpoint {name}: SIGKILL");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}

/// This build's version, from Cargo.toml.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit this build is from (`build.rs`; "unknown" when built
/// without git, e.g. from a tarball).
pub const COMMIT: &str = env!("LEASEHOLD_COMMIT");

pub mod admission;
pub mod api;
pub mod metrics;
pub mod node;
pub mod peer;
pub mod raft;
pub mod security;
pub mod server;
pub mod store;
