//! The tests that need the `leasehold-lab` binary itself, as one test
//! binary: cargo builds it for this package's tests only. Their nodes are
//! processes of the `leasehold` binary beside it, which `cargo test` in the
//! workspace root builds in the same run (see `common::leasehold_binary`).
//!
//! - `safety` — the smoke run of `bench --safety`, whose holders are
//!   `leasehold-lab safety-holder` processes.
//! - `payments` — `leasehold-lab demo payments` with and without fencing.
//! - `bench` — `leasehold-lab bench --endpoints` against a secured cluster,
//!   and a smoke run of the election workload (candidate processes).
//!
//! Each loads the machine on its own (the safety run would see another
//! test's load as faults), so they run one at a time ([`exclusive`]).

#[path = "../../../../tests/common/mod.rs"]
mod common;

mod bench;
mod payments;
mod safety;

use tokio::sync::{Mutex, MutexGuard};

/// Held for the whole of each test. A tokio mutex: the async tests hold it
/// across awaits, each on its own runtime.
static ALONE: Mutex<()> = Mutex::const_new(());

/// Waits until no other test of this binary runs.
pub async fn exclusive() -> MutexGuard<'static, ()> {
    ALONE.lock().await
}

/// [`exclusive`], for the tests that are not async (outside any runtime).
pub fn exclusive_blocking() -> MutexGuard<'static, ()> {
    ALONE.blocking_lock()
}
