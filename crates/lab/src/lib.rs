//! leasehold-lab: everything that drives `leasehold serve` processes from the
//! outside — through the client library and the wire types only, never
//! server internals — to measure, break and demonstrate them.
//!
//! # Layout
//!
//! - [`compare`] — `leasehold bench`: leasehold vs Redis, Redlock and etcd
//!   on real servers it starts by PID; one adapter per system behind the
//!   `LockSystem`/`LockSession` traits, workloads, report and its plots;
//!   `bench --safety` runs every system under faults with holder processes
//!   and judges them with the [`history`] checker.
//! - [`bench`] — measured rows, histogram bounds, medians, the rows table.
//! - [`scale`] — `leasehold bench --bulk N`: a cluster holding N live leases.
//! - [`soak`] — `leasehold bench --soak ENTRIES`: disk use over a long churn.
//! - [`chaos`] — `leasehold chaos`, the fault suite: nodes in network
//!   namespaces (loopback fallback), a recorded workload, the nemesis, the
//!   table per fault and the timeline.
//! - [`history`] — the harness clock, the history recorder, the fenced
//!   resource (HTTP) and the pure checker.
//! - [`plot`] — the one SVG chart the bench and chaos plots are drawn with.
//! - [`demo`] — `leasehold demo payments`: fencing tokens vs. a paused worker.
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
