//! leasehold: a Raft-replicated lease lock service with fencing tokens.
//!
//! # Layout
//!
//! Dependencies point down only.
//!
//! - `main.rs` — the `leasehold` binary: clap subcommands (`serve`, `up`,
//!   `acquire`/`renew`/`release`/`get`/`list`/`status`, `check`/`put-record`/
//!   `get-record`/`gate`, `run`, `demo`, `bench`).
//! - [`compare`] — `leasehold bench`: leasehold vs Redis, Redlock and etcd
//!   on real servers it starts by PID; one adapter per system behind the
//!   `LockSystem`/`LockSession` traits, workloads, report and SVG plots.
//! - [`bench`] — measured rows, histogram bounds, medians, the rows table.
//! - [`demo`] — `leasehold demo payments`: fencing tokens vs. a paused worker.
//! - [`run`] — `leasehold run`: a command under a lock, stopped if it is lost.
//! - [`local`] — starts and stops a local cluster of `leasehold serve`
//!   processes by PID (used by `up`, the tests and the benchmark).
//! - [`client`] — the Rust client library (reqwest): endpoints, leader
//!   discovery, retries with request ids, and the `Lock` guard (watchdog
//!   renewal, `lost` signal).
//! - [`node`] — one node: wires config, the sled Db, openraft, the ticker and
//!   the HTTP listener; offers propose / linearizable read / membership.
//!   - [`api`] — axum routes: client API (`/v1/locks`, waiting, SSE
//!     events), fence API (`/v1/fence`, `/v1/records`), admin API
//!     (`/v1/cluster`, `/healthz`), inbound Raft RPC (`/raft`), leader
//!     forwarding, and the one `ApiError` that decides every status code.
//!   - [`raft`] — openraft type config, sled log store (group commit), sled
//!     state-machine store (snapshots, event broadcast), reqwest network, the
//!     leader's ticker.
//!   - [`lock`] — PURE: commands, leases, waiting queues, the lock table,
//!     fencing tokens, fenced records and gates, request de-duplication,
//!     events, limits. No tokio, sled, openraft or axum; time enters as Tick
//!     commands.

pub mod api;
pub mod bench;
pub mod client;
pub mod compare;
pub mod demo;
pub mod local;
pub mod lock;
pub mod node;
pub mod raft;
pub mod run;
