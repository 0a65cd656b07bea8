//! Histories of lock clients and of the resource they protect, and the
//! checker that judges them. Independent of leasehold's client: any lock
//! service (leasehold, Redis, Redlock, etcd) can be driven through the same
//! [`FencedResource`] and [`History`], and judged by the same [`check`].
//!
//! - [`HarnessClock`] — the harness's monotonic clock; every time in a
//!   history is microseconds on it.
//! - [`History`] — the recorder of client operations (send and receive time,
//!   kind, lock, client, request id, result).
//! - [`FencedResource`] — a small HTTP service that records every write, in
//!   a fenced mode (stale tokens refused with 409) or an unfenced one.
//! - [`check_linearizable`] — the linearizability checker: the whole history
//!   against a sequential model of the lock table (Wing & Gong's search
//!   with Lowe's memo, per connected component of the keys touched).
//! - [`check`] — the per-property checker over (operations, resource writes), and
//!   [`check_hand_over`], the counts of a two-holder hand-over (`bench --safety`).

mod checker;
mod linearizability;
mod model;
mod recorder;
mod resource;

pub use checker::{check, check_hand_over, CheckReport, HandOver, Violation, ViolationKind};
pub use linearizability::{check_linearizable, describe, LinearizabilityReport, Verdict, Window, DEFAULT_BUDGET};
pub use recorder::{HarnessClock, History, OpKind, OpResult, Operation};
pub use resource::{FencedResource, Phase, ResourceError, ResourceMode, ResourceWrite, WriteRequest};
