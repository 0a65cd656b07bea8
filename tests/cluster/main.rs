//! The multi-process tests of one cluster's behaviour, as one test binary
//! (linked once): real `leasehold serve` processes on loopback, started and
//! killed by PID, every test bounded in time.
//!
//! - `cluster` — the lock API end to end, leader failure, full restart, quorum loss.
//! - `bootstrap` — only `--initial-cluster-state new` initializes, and only once.
//! - `config` — `serve --config FILE` and its precedence under variables and flags.
//! - `waiting` — FIFO queues, hand-over tokens, wait timeouts, request ids, events.
//! - `lock_delay` — an expired lease's lock delay, refused and then handed over.
//! - `multi_lock` — several locks in one entry under one token: via a follower, retried, waited for.
//! - `sessions` — locks kept by one session; a killed session holder's locks handed over.
//! - `elections` — a paused leader replaced and fenced; watches resumed across a killed node and after 410.
//! - `fencing` — the Kleppmann scenario, fenced records and gates.
//! - `snapshots` — install by snapshot, restart from snapshot + log, backup and restore.
//! - `membership` — 3 → 5 → 3 voters under load; refused quorum-losing removals.
//! - `api_errors` — every input limit answered with its 4xx, changing nothing.
//! - `handoff` — a follower's requests run there, their commands handed to the leader; a waiter through a follower.
//! - `peer_port` — members on peer ports of their own: elections, forwarding, joins; floods on the client ports.
//! - `security` — tokens, the cluster secret, TLS, slow clients.
//! - `client_certificates` — users named by client certificates (`--client-trusted-ca`) on every node.
//! - `tenants` — users and roles: teams kept to their prefixes over TLS, revokes on every node, kept by a backup.
//! - `secure_defaults` — a client token never opens the admin API; the bootstrap guard with secrets;
//!   a digest flood; `serve --insecure`.
//! - `herd` — hundreds of waiters over HTTP/1.1 and HTTP/2; a connection flood.
//! - `quotas` — a multi-acquire flood past `--max-leases`; event streams past their per-client bound.
//! - `metrics`, `openapi`, `ui`, `readiness` — what operators see.
//! - `cli` — the command line: quiet logs, credentials, exit codes, output, completions.
//! - `client_guard` — the Lock watchdog, `lost`, and `leasehold run`.
//! - `semaphores` — a semaphore of 3 shared by 10 processes, one killed -9; `run --shared`; readers and a writer
//!   through different nodes; crossing owners refused a deadlock; a session's permit and read lock handed on at its end.

#[path = "../common/mod.rs"]
mod common;

mod api_errors;
mod bootstrap;
mod cli;
mod client_certificates;
mod client_guard;
mod cluster;
mod config;
mod elections;
mod fencing;
mod handoff;
mod herd;
mod hostile;
mod lock_delay;
mod membership;
mod metrics;
mod multi_lock;
mod openapi;
mod peer_port;
mod quotas;
mod readiness;
mod secure_defaults;
mod security;
mod semaphores;
mod sessions;
pub mod snapshots;
mod tenants;
mod ui;
mod waiting;
