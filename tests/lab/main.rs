//! The long tests, as one test binary: the fault suite, the comparison
//! benchmark's smoke run, the storage bound, and docs/operations.md on three
//! network-namespace hosts. Each loads the machine (or makes namespaces
//! named after this process) on its own, so they run one at a time
//! ([`exclusive`]). They drive `leasehold` nodes through the lab's library;
//! the tests that need the `leasehold-lab` binary itself (the safety smoke
//! run's holder processes, the demo, `bench --endpoints`) are the lab's own,
//! in `crates/lab/tests/commands`.

#[path = "../common/mod.rs"]
mod common;

mod chaos;
mod compare;
mod hosts;
mod storage_bound;

use tokio::sync::{Mutex, MutexGuard};

/// Held for the whole of a long test: two of them at once on a 2-core
/// machine would each see the other's load as faults. (A tokio mutex: each
/// test has its own runtime, and the guard is held across awaits.)
pub async fn exclusive() -> MutexGuard<'static, ()> {
    static LONG_TESTS: Mutex<()> = Mutex::const_new(());
    LONG_TESTS.lock().await
}
