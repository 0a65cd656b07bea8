//! leasehold-lab: everything that drives `leasehold serve` processes from the
//! outside — through the client library and the wire types only, never
//! server internals — to measure, break and demonstrate them. Its binary,
//! `leasehold-lab` (`main.rs`, clap types in `cli.rs`), carries the
//! commands; the product's `leasehold` binary does not link any of it. The
//! nodes it starts are processes of the `leasehold` binary
//! ([`leasehold_binary`]), started and stopped by `leasehold-local`.
//!
//! # Layout
//!
//! - [`compare`] — `leasehold-lab bench`: leasehold vs Redis, Redlock and etcd
//!   on real servers it starts by PID; one adapter per system behind the
//!   `LockSystem`/`LockSession` traits, workloads, report and its plots;
//!   `bench --safety` runs every system under faults with holder processes
//!   and judges them with the [`history`] checker.
//! - [`bench`] — measured rows, histogram bounds, medians, the rows table.
//! - [`scale`] — `leasehold-lab bench --bulk N`: a cluster holding N live leases.
//! - [`soak`] — `leasehold-lab bench --soak ENTRIES`: disk use over a long churn.
//! - [`chaos`] — `leasehold-lab chaos`, the fault suite: nodes in network
//!   namespaces (loopback fallback), a recorded workload, the nemesis, the
//!   table per fault and the timeline.
//! - [`history`] — the harness clock, the history recorder, the fenced
//!   resource (HTTP), the pure per-property checker and the linearizability
//!   checker with its model of the lock table.
//! - [`plot`] — the one SVG chart the bench and chaos plots are drawn with.
//! - [`demo`] — `leasehold-lab demo payments`: fencing tokens vs. a paused worker.
//! - [`fault`] — the one fault vocabulary of `chaos` and `bench --safety`.

pub mod bench;
pub mod chaos;
pub mod compare;
pub mod demo;
pub mod fault;
pub mod history;
pub mod plot;
pub mod scale;
pub mod soak;

use std::path::PathBuf;

/// The variable naming the `leasehold` binary whose processes the lab
/// starts as nodes (the scripts in `cluster/` read it too).
pub const LEASEHOLD_BIN_ENV: &str = "LEASEHOLD_BIN";

/// The `leasehold` binary the lab starts as nodes: the one
/// [`LEASEHOLD_BIN_ENV`] names, else the one beside this executable, where
/// `cargo build` puts both (the lab is not packaged: it runs from a build).
pub fn leasehold_binary() -> std::io::Result<PathBuf> {
    let (binary, found) = match std::env::var_os(LEASEHOLD_BIN_ENV).filter(|v| !v.is_empty()) {
        Some(named) => (PathBuf::from(named), "named by $LEASEHOLD_BIN"),
        None => (std::env::current_exe()?.with_file_name("leasehold"), "beside this binary"),
    };
    if binary.is_file() {
        return Ok(binary);
    }
    let why = format!(
        "the leasehold binary {} ({found}) does not exist: build it (`cargo build`) or set {LEASEHOLD_BIN_ENV}",
        binary.display()
    );
    Err(std::io::Error::new(std::io::ErrorKind::NotFound, why))
}

/// The lab's HTTP client for what it calls besides the systems under
/// measurement (the fenced resource, the holders, etcd's health): HTTP/1.1,
/// no system proxy (everything is on this machine), kept-alive connections.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .connect_timeout(std::time::Duration::from_secs(1))
        .tcp_nodelay(true)
        // Below the nodes' header-read timeout, which closes idle connections.
        .pool_idle_timeout(std::time::Duration::from_secs(5))
        .build()
        .expect("reqwest client builds with static settings")
}
