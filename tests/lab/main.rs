//! The long tests, as one test binary: the fault suite, the comparison and
//! safety benchmarks' smoke runs, the storage bound, and docs/operations.md
//! on three network-namespace hosts. Each loads the machine (or makes
//! namespaces named after this process) on its own, so they run one at a
//! time ([`exclusive`]).

#[path = "../common/mod.rs"]
mod common;

mod chaos;
mod compare;
mod hosts;
mod safety;
mod storage_bound;

use tokio::sync::{Mutex, MutexGuard};

/// Held for the whole of a long test: two of them at once on a 2-core
/// machine would each see the other's load as faults. (A tokio mutex: each
/// test has its own runtime, and the guard is held across awaits.)
pub async fn exclusive() -> MutexGuard<'static, ()> {
    static LONG_TESTS: Mutex<()> = Mutex::const_new(());
    LONG_TESTS.lock().await
}
