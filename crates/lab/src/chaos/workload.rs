//! The workload: concurrent clients doing acquire (try or wait) → write the
//! section's begin to the fenced resource → read the lock → sometimes renew
//! → write the section's end → release → sometimes read again, on a few hot
//! lock names and many cold ones. Every request goes into the [`History`] with its request id.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::history::{FencedResource, History, OpKind, OpResult, Operation, Phase, WriteRequest};
use leasehold_client::{new_request_id, AcquireOptions, Client, ClientError, Lease};

/// Lease ttl of every workload grant: the shortest the cluster accepts, so
/// leases of clients that vanish expire soon.
pub const TTL_MS: u64 = 3_000;
/// How long a waiting acquire may queue.
const WAIT: Duration = Duration::from_secs(2);
pub const HOT_LOCKS: usize = 3;
const COLD_LOCKS: usize = 500;

/// Lock name `i` of the hot set.
pub fn hot_lock(i: usize) -> String {
    format!("chaos-hot-{i}")
}

/// What one request's outcome means for the history.
pub fn outcome<T>(result: &Result<T, ClientError>, granted: impl FnOnce(&T) -> OpResult) -> OpResult {
    match result {
        Ok(value) => granted(value),
        // A 5xx other than unavailability may still have been applied.
        Err(ClientError::Api { status, error }) if *status < 500 => OpResult::Refused { code: error.code.to_string() },
        Err(e) => OpResult::Unknown { reason: e.to_string() },
    }
}

fn lease_result(lease: &Lease) -> OpResult {
    OpResult::Granted { token: lease.token(), ttl_ms: lease.grant.ttl_ms }
}

/// One client's view of where it talks: the cluster, the resource, the history.
#[derive(Clone)]
pub struct Target {
    pub client: Arc<Client>,
    pub resource_url: String,
    pub http: reqwest::Client,
    pub history: History,
}

impl Target {
    /// Acquires `lock` for `owner`, recording the request.
    pub async fn acquire(&self, lock: &str, owner: &str, wait: Option<Duration>) -> Option<Lease> {
        let request_id = new_request_id();
        let options = AcquireOptions { wait, request_id: Some(request_id.clone()), lock_delay: None };
        let kind = if wait.is_some() { OpKind::AcquireWait } else { OpKind::AcquireTry };
        let mut op = self.begin(kind, lock, owner, None);
        op.request_id = Some(request_id);
        let result = self.client.acquire_with(lock, owner, TTL_MS, &options).await;
        self.finish(op, outcome(&result, lease_result));
        result.ok()
    }

    /// Renews the lease held under `token`, recording the request.
    pub async fn renew(&self, lock: &str, owner: &str, token: u64) {
        let op = self.begin(OpKind::Renew, lock, owner, Some(token));
        let result = self.client.renew(lock, token, None).await;
        self.finish(op, outcome(&result, lease_result));
    }

    /// Reads `lock`, recording the request.
    pub async fn read(&self, lock: &str, owner: &str) {
        let op = self.begin(OpKind::Read, lock, owner, None);
        let result = self.client.get(lock).await;
        self.finish(
            op,
            outcome(&result, |view| match view {
                Some(v) => OpResult::Held { owner: v.owner.clone(), token: v.token },
                None => OpResult::Free,
            }),
        );
    }

    /// Releases `token`, recording the request.
    pub async fn release(&self, lock: &str, owner: &str, token: u64) -> OpResult {
        let op = self.begin(OpKind::Release, lock, owner, Some(token));
        let result = self.client.release(lock, token).await;
        let released = outcome(&result, |_| OpResult::Released);
        self.finish(op, released.clone());
        released
    }

    /// Writes one end of a critical section to the resource; whether it
    /// was accepted (`None` when the resource did not answer).
    pub async fn write(&self, lock: &str, owner: &str, token: u64, phase: Phase) -> Option<bool> {
        let request =
            WriteRequest { resource: lock.to_owned(), client: owner.to_owned(), lock: lock.to_owned(), token, phase };
        FencedResource::submit(&self.http, &self.resource_url, &request).await.ok()
    }

    /// An operation sent now, its result not known yet.
    fn begin(&self, kind: OpKind, lock: &str, client: &str, token: Option<u64>) -> Operation {
        Operation::single(kind, lock, client, token, self.history.clock().now_us())
    }

    /// Records `op` as answered now with `result`.
    fn finish(&self, mut op: Operation, result: OpResult) {
        op.received_us = self.history.clock().now_us();
        op.result = result;
        self.history.record(op);
    }
}

/// Running workload clients; [`stop`](Workload::stop) ends them.
pub struct Workload {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Workload {
    /// Starts `clients` clients against `target`.
    pub fn start(target: &Target, clients: usize) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..clients)
            .map(|i| {
                let (target, stop) = (target.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut cycle = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        cycle += 1;
                        one_cycle(&target, &format!("c{i}-{cycle}")).await;
                    }
                })
            })
            .collect();
        Workload { stop, tasks }
    }

    /// Stops the clients after their current cycle.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// One acquire → write → read → (renew) → write → release cycle. `owner` is
/// unique per cycle: an acquire by the owner that already holds the lock is
/// a renewal, which would blur one cycle into the next.
async fn one_cycle(target: &Target, owner: &str) {
    let hot = fastrand::bool();
    let lock = if hot {
        hot_lock(fastrand::usize(..HOT_LOCKS))
    } else {
        format!("chaos-cold-{}", fastrand::usize(..COLD_LOCKS))
    };
    let wait = (hot && fastrand::bool()).then_some(WAIT);
    let Some(lease) = target.acquire(&lock, owner, wait).await else {
        // Held, refused or unavailable: back off a little before the next try.
        tokio::time::sleep(Duration::from_millis(20 + fastrand::u64(..80))).await;
        return;
    };
    let token = lease.token();
    target.write(&lock, owner, token, Phase::Begin).await;
    target.read(&lock, owner).await;
    if fastrand::u8(..4) == 0 {
        target.renew(&lock, owner, token).await;
    }
    target.write(&lock, owner, token, Phase::End).await;
    target.release(&lock, owner, token).await;
    if fastrand::u8(..4) == 0 {
        // After an acknowledged release, no read may show its token again.
        target.read(&lock, owner).await;
    }
}
