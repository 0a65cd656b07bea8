//! leasehold: a Raft-replicated lease lock service with fencing tokens.
//!
//! # Layout
//!
//! Dependencies point down only.
//!
//! - `main.rs` — the `leasehold` binary: clap subcommands (`serve`, `up`,
//!   `acquire`/`renew`/`release`/`get`/`list`/`status`, `check`/`put-record`/
//!   `get-record`/`gate`, `member`, `backup`/`restore`, `run`, `demo`, `bench`,
//!   `chaos`).
//! - [`compare`] — `leasehold bench`: leasehold vs Redis, Redlock and etcd
//!   on real servers it starts by PID; one adapter per system behind the
//!   `LockSystem`/`LockSession` traits, workloads, report and its plots
//!   (throughput, latency CDFs; drawn with [`plot`]);
//!   `bench --safety` runs every system under faults with holder processes
//!   (hidden `safety-holder` subcommand) and the history checker.
//! - [`bench`] — measured rows, histogram bounds, medians, the rows table.
//! - [`scale`] — `leasehold bench --bulk N`: a cluster holding N live leases
//!   (Tick apply time, memory per lease, disk, snapshot costs).
//! - [`chaos`] — `leasehold chaos`, the fault suite: nodes in network
//!   namespaces (loopback fallback), a recorded workload, the nemesis (kill,
//!   pause, partition, packet loss, paused client, clock jumps, membership),
//!   the table per fault and the timeline.
//! - [`history`] — independent of leasehold's client: the harness clock, the
//!   history recorder, the fenced resource (HTTP) and the pure checker.
//! - [`plot`] — the one SVG chart (title, axes, ticks, lines, shaded bands,
//!   legend; log axes) that the bench and chaos plots are drawn with.
//! - [`demo`] — `leasehold demo payments`: fencing tokens vs. a paused worker.
//! - [`run`] — `leasehold run`: a command under a lock, stopped if it is lost.
//! - [`local`] — starts and stops a local cluster of `leasehold serve`
//!   processes by PID (used by `up`, the tests and the benchmark).
//! - [`metrics`] — the node's Prometheus series (prometheus-client); the
//!   api, raft stores and ticker report to it, it reads nothing itself.
//! - [`client`] — the Rust client library (reqwest): endpoints, leader
//!   discovery, retries with request ids, and the `Lock` guard (watchdog
//!   renewal, `lost` signal).
//! - [`security`] — secrets (client and admin tokens, cluster secret) from
//!   files or the environment, constant-time comparison, TLS files.
//! - [`node`] — one node: wires config, the stores, openraft, the ticker and
//!   the HTTP listener; offers propose / linearizable read / membership.
//!   - [`server`] — the listener: accept loop, TLS (rustls), connection
//!     limit, header-read timeout (hyper).
//!   - [`api`] — axum routes: client API (`/v1/locks`, waiting, SSE
//!     events), fence API (`/v1/fence`, `/v1/records`), admin API
//!     (`/v1/cluster`, `/healthz`), inbound Raft RPC (`/raft`), leader
//!     forwarding, bearer-token checks, request deadlines and the in-flight
//!     bound, and the one `ApiError` that decides every status code; for
//!     operators `/metrics`, the status page (`/`, `/ui`, one static file),
//!     `/v1/cluster/nodes`, `/v1/events` and `/openapi.json`.
//!   - [`raft`] — openraft type config; the log store (segment files with
//!     fdatasync, group commit; vote in a meta file); the sled state-machine
//!     store (snapshots, event broadcast, backup/restore); the proposer that
//!     batches client commands into entries; the per-waiter wakeups
//!     (`turns`); reqwest network, the leader's ticker, and the observer of
//!     openraft's metrics.
//!   - [`lock`] — PURE: commands and the batches log entries carry, leases,
//!     waiting queues, the lock table, fencing tokens, fenced records and
//!     gates, request de-duplication, events, limits. No tokio, sled,
//!     openraft or axum; time enters as Tick commands.

pub mod api;
pub mod metrics;
pub mod node;
pub mod raft;
pub mod security;
pub mod server;
