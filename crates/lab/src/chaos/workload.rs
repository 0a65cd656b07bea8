//! The workload: concurrent clients on a few hot lock names and many cold
//! ones, each running one kind of cycle (a third each, by client number;
//! see [`CycleKind`]):
//!
//! - **single**: acquire (try or wait) → write the section's begin to the
//!   fenced resource → (one cycle in four) write the cluster's fenced record
//!   of the lock → read the lock → sometimes renew → write the section's
//!   end → release → sometimes read again → (with the record) read the record;
//! - **multi**: one atomic acquire of 2–3 names (hot and cold mixed, so they
//!   contend with the single acquires) under one token → begin per name →
//!   read one → end per name → one multi-release (or, one cycle in four, a
//!   release per name) → sometimes read again;
//! - **session**: create a session (ttl 3 s) that the client keeps alive
//!   itself, one keepalive a second → acquire 1–3 names under it (one by
//!   one, or as one multi-acquire) → begin per lock → read one → sometimes
//!   (one cycle in eight) hold past the session's ttl → end per lock → then
//!   release the locks and delete the session (one in two), or delete it at
//!   once (three in eight), or abandon it (one in eight): stop its keepalives, wait past its ttl for it to expire and its
//!   locks to be handed on, and write once more under the old tokens, which
//!   the resource must refuse once a later holder wrote, and to the
//!   cluster's fenced record of each lock, which must refuse it once the
//!   session has ended.
//!
//! Every request goes into the [`History`], acquires with their request id.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::history::{FencedResource, History, OpKind, OpResult, Operation, Phase, WriteRequest};
use leasehold_client::{new_request_id, AcquireOptions, Client, ClientError, FencingToken, Lease, Leases, Lifetime};

/// Lease ttl of every workload grant: the shortest the cluster accepts, so
/// leases of clients that vanish expire soon.
pub const TTL_MS: u64 = 3_000;
/// Ttl of every workload session: the shortest the cluster accepts.
pub const SESSION_TTL_MS: u64 = 3_000;
/// How often a session's keeper sends a keepalive (ttl / 3, as the Rust
/// client's `Session` does).
const KEEPALIVE_EVERY: Duration = Duration::from_millis(SESSION_TTL_MS / 3);
/// How long a waiting acquire may queue.
const WAIT: Duration = Duration::from_secs(2);
pub const HOT_LOCKS: usize = 3;
const COLD_LOCKS: usize = 500;

/// Lock name `i` of the hot set.
pub fn hot_lock(i: usize) -> String {
    format!("chaos-hot-{i}")
}

fn cold_lock(i: usize) -> String {
    format!("chaos-cold-{i}")
}

fn is_hot(name: &str) -> bool {
    name.starts_with("chaos-hot-")
}

/// A hot lock or a cold one, one in two each.
fn any_lock() -> String {
    if fastrand::bool() {
        hot_lock(fastrand::usize(..HOT_LOCKS))
    } else {
        cold_lock(fastrand::usize(..COLD_LOCKS))
    }
}

/// `n` distinct names, each hot or cold one in two.
fn distinct_locks(n: usize) -> Vec<String> {
    let mut names = BTreeSet::new();
    while names.len() < n {
        names.insert(any_lock());
    }
    let mut names: Vec<String> = names.into_iter().collect();
    fastrand::shuffle(&mut names);
    names
}

/// The kind of cycle a workload client runs, for all of its cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CycleKind {
    Single,
    Multi,
    Session,
}

impl CycleKind {
    /// Client `i` runs `[Single, Multi, Session][i % 3]`: a third each.
    pub fn of_client(i: usize) -> CycleKind {
        [CycleKind::Single, CycleKind::Multi, CycleKind::Session][i % 3]
    }

    pub fn label(self) -> &'static str {
        match self {
            CycleKind::Single => "single-lock",
            CycleKind::Multi => "multi-lock",
            CycleKind::Session => "session",
        }
    }

    /// How many of `clients` clients run each kind, in one line.
    pub fn describe(clients: usize) -> String {
        let kinds = [CycleKind::Single, CycleKind::Multi, CycleKind::Session]
            .iter()
            .map(|kind| {
                format!("{} {}", (0..clients).filter(|i| CycleKind::of_client(*i) == *kind).count(), kind.label())
            })
            .collect::<Vec<_>>()
            .join(", ");
        format!("{kinds}; {} of them pinned to one node each (the rest follow the leader)", clients / 2)
    }
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
    OpResult::Granted { token: lease.token().get(), ttl_ms: lease.grant.ttl_ms }
}

fn leases_result(leases: &Leases) -> OpResult {
    let ttl_ms = leases.grants.iter().map(|g| g.ttl_ms).min().unwrap_or(0);
    OpResult::Granted { token: leases.token.get(), ttl_ms }
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
    /// Acquires `lock` for `owner` with the workload's ttl, recording the request.
    pub async fn acquire(&self, lock: &str, owner: &str, wait: Option<Duration>) -> Option<Lease> {
        self.acquire_for(lock, owner, wait, Lifetime::Ttl(TTL_MS)).await
    }

    /// Acquires `lock` for `owner`, its lease living by `lifetime`,
    /// recording the request.
    pub async fn acquire_for(
        &self,
        lock: &str,
        owner: &str,
        wait: Option<Duration>,
        lifetime: Lifetime,
    ) -> Option<Lease> {
        let request_id = new_request_id();
        let options = AcquireOptions { wait, request_id: Some(request_id.clone()), lock_delay: None };
        let kind = if wait.is_some() { OpKind::AcquireWait } else { OpKind::AcquireTry };
        let mut op = self.begin(kind, lock, owner, None);
        op.request_id = Some(request_id);
        op.session = session_of(lifetime);
        let result = self.client.acquire_for(lock, owner, lifetime, &options).await;
        // The holder a `held` refusal names: what the linearizability check holds it to.
        op.holder = result.as_ref().err().and_then(|e| e.detail()?.holder()).map(str::to_owned);
        self.finish(op, outcome(&result, lease_result));
        result.ok()
    }

    /// Acquires every lock of `names` at once, under one token, recording
    /// the request.
    pub async fn acquire_many(
        &self,
        names: &[String],
        owner: &str,
        wait: Option<Duration>,
        lifetime: Lifetime,
    ) -> Option<Leases> {
        let request_id = new_request_id();
        let options = AcquireOptions { wait, request_id: Some(request_id.clone()), lock_delay: None };
        let kind = if wait.is_some() { OpKind::MultiAcquireWait } else { OpKind::MultiAcquireTry };
        let mut op = self.begin_multi(kind, names, owner, None);
        op.request_id = Some(request_id);
        op.session = session_of(lifetime);
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let result = self.client.acquire_many_for(&refs, owner, lifetime, &options).await;
        self.finish(op, outcome(&result, leases_result));
        result.ok()
    }

    /// Renews the lease held under `token`, recording the request.
    pub async fn renew(&self, lock: &str, owner: &str, token: FencingToken) {
        let op = self.begin(OpKind::Renew, lock, owner, Some(token.get()));
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
                Some(v) => OpResult::Held { owner: v.owner.clone(), token: v.token.get() },
                None => OpResult::Free,
            }),
        );
    }

    /// Releases `token`, recording the request.
    pub async fn release(&self, lock: &str, owner: &str, token: FencingToken) -> OpResult {
        let op = self.begin(OpKind::Release, lock, owner, Some(token.get()));
        let result = self.client.release(lock, token).await;
        let released = outcome(&result, |_| OpResult::Released);
        self.finish(op, released.clone());
        released
    }

    /// Releases every lock of `names`, all held under `token`, recording the request.
    pub async fn release_many(&self, names: &[String], owner: &str, token: FencingToken) -> OpResult {
        let op = self.begin_multi(OpKind::MultiRelease, names, owner, Some(token.get()));
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let result = self.client.release_many(&refs, token).await;
        let released = outcome(&result, |_| OpResult::Released);
        self.finish(op, released.clone());
        released
    }

    /// Opens a session of `owner` with [`SESSION_TTL_MS`], recording the
    /// request; its id.
    pub async fn create_session(&self, owner: &str) -> Option<u64> {
        let op = self.begin(OpKind::SessionCreate, "", owner, None);
        let result = self.client.create_session(owner, SESSION_TTL_MS).await;
        let mut op = op;
        op.session = result.as_ref().ok().map(|(view, _)| view.session);
        self.finish(op, outcome(&result, |(view, _)| OpResult::SessionAlive { ttl_ms: view.ttl_ms }));
        result.ok().map(|(view, _)| view.session)
    }

    /// Sends one keepalive of `session` (number `seq` in its sequence),
    /// recording the request.
    pub async fn keep_alive(&self, session: u64, owner: &str, seq: u64) -> OpResult {
        let mut op = self.begin(OpKind::KeepAlive, "", owner, None);
        op.session = Some(session);
        let result = self.client.keep_alive(session, Some(seq)).await;
        let alive = outcome(&result, |(view, _)| OpResult::SessionAlive { ttl_ms: view.ttl_ms });
        self.finish(op, alive.clone());
        alive
    }

    /// Deletes `session`, releasing its locks, recording the request.
    pub async fn delete_session(&self, session: u64, owner: &str) -> OpResult {
        let mut op = self.begin(OpKind::SessionDelete, "", owner, None);
        op.session = Some(session);
        let result = self.client.delete_session(session).await;
        let deleted = outcome(&result, |_| OpResult::Released);
        self.finish(op, deleted.clone());
        deleted
    }

    /// Writes the cluster's fenced record of `lock` (keyed by the lock's
    /// name) under `token`, recording the request.
    pub async fn put_record(&self, lock: &str, owner: &str, token: FencingToken) {
        let mut op = self.begin(OpKind::PutRecord, lock, owner, Some(token.get()));
        op.key = Some(lock.to_owned());
        let result = self.client.put_record(lock, lock, token, &serde_json::json!({ "owner": owner })).await;
        self.finish(op, outcome(&result, |index| OpResult::Written { index: *index }));
    }

    /// Reads the cluster's fenced record of `lock`, recording the request.
    pub async fn get_record(&self, lock: &str, owner: &str) {
        let mut op = self.begin(OpKind::GetRecord, "", owner, None);
        op.key = Some(lock.to_owned());
        let result = self.client.get_record(lock).await;
        let record = |r: &Option<leasehold_proto::fence::Record>| match r {
            Some(r) => OpResult::Record { token: r.token.get(), index: r.index },
            None => OpResult::Free,
        };
        self.finish(op, outcome(&result, record));
    }

    /// Writes one end of a critical section to the resource; whether it
    /// was accepted (`None` when the resource did not answer).
    pub async fn write(&self, lock: &str, owner: &str, token: FencingToken, phase: Phase) -> Option<bool> {
        let request = WriteRequest {
            resource: lock.to_owned(),
            client: owner.to_owned(),
            lock: lock.to_owned(),
            token: token.get(),
            phase,
        };
        FencedResource::submit(&self.http, &self.resource_url, &request).await.ok()
    }

    /// An operation on one lock (or, with `lock` empty, on a session) sent
    /// now, its result not known yet.
    fn begin(&self, kind: OpKind, lock: &str, client: &str, token: Option<u64>) -> Operation {
        Operation::single(kind, lock, client, token, self.history.clock().now_us())
    }

    /// An operation on every lock of `names` sent now.
    fn begin_multi(&self, kind: OpKind, names: &[String], client: &str, token: Option<u64>) -> Operation {
        let mut op = self.begin(kind, "", client, token);
        op.names = names.to_vec();
        op
    }

    /// Records `op` as answered now with `result`.
    fn finish(&self, mut op: Operation, result: OpResult) {
        op.received_us = self.history.clock().now_us();
        op.result = result;
        self.history.record(op);
    }
}

fn session_of(lifetime: Lifetime) -> Option<u64> {
    match lifetime {
        Lifetime::Ttl(_) => None,
        Lifetime::Session { id, .. } => Some(id),
    }
}

/// Running workload clients; [`stop`](Workload::stop) ends them.
pub struct Workload {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Workload {
    /// Starts `clients` clients against `target`, client `i` running
    /// [`CycleKind::of_client`]`(i)` cycles.
    /// Starts `clients` clients. The even ones share `target`'s client,
    /// which follows the leader; the odd ones each talk to one node of
    /// `pinned` in turn and never leave it, as clients behind a load
    /// balancer do, so two in three of their requests are served by a
    /// follower that hands the leader their commands.
    pub fn start(target: &Target, clients: usize, pinned: &[Arc<Client>]) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..clients)
            .map(|i| {
                let mut target = target.clone();
                if i % 2 == 1 && !pinned.is_empty() {
                    target.client = pinned[(i / 2) % pinned.len()].clone();
                }
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut cycle = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        cycle += 1;
                        let owner = format!("c{i}-{cycle}");
                        match CycleKind::of_client(i) {
                            CycleKind::Single => single_cycle(&target, &owner).await,
                            CycleKind::Multi => multi_cycle(&target, &owner).await,
                            CycleKind::Session => session_cycle(&target, &owner).await,
                        }
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

/// Held, refused or unavailable: back off a little before the next try.
async fn back_off() {
    tokio::time::sleep(Duration::from_millis(20 + fastrand::u64(..80))).await;
}

/// One acquire → write → read → (renew) → write → release cycle. `owner` is
/// unique per cycle: an acquire by the owner that already holds the lock is
/// a renewal, which would blur one cycle into the next.
async fn single_cycle(target: &Target, owner: &str) {
    let lock = any_lock();
    let wait = (is_hot(&lock) && fastrand::bool()).then_some(WAIT);
    let Some(lease) = target.acquire(&lock, owner, wait).await else {
        back_off().await;
        return;
    };
    let token = lease.token();
    target.write(&lock, owner, token, Phase::Begin).await;
    let record = fastrand::u8(..4) == 0;
    if record {
        target.put_record(&lock, owner, token).await;
    }
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
    if record {
        // The record keeps the last write a current token made.
        target.get_record(&lock, owner).await;
    }
}

/// One atomic acquire of 2–3 names → begin on each → read one → end on each
/// → release them together (or one by one) cycle.
async fn multi_cycle(target: &Target, owner: &str) {
    let names = distinct_locks(2 + fastrand::usize(..2));
    let wait = (names.iter().any(|n| is_hot(n)) && fastrand::bool()).then_some(WAIT);
    let Some(leases) = target.acquire_many(&names, owner, wait, Lifetime::Ttl(TTL_MS)).await else {
        back_off().await;
        return;
    };
    let token = leases.token;
    for name in &names {
        target.write(name, owner, token, Phase::Begin).await;
    }
    let read = &names[fastrand::usize(..names.len())];
    target.read(read, owner).await;
    for name in &names {
        target.write(name, owner, token, Phase::End).await;
    }
    if fastrand::u8(..4) == 0 {
        for name in &names {
            target.release(name, owner, token).await;
        }
    } else {
        target.release_many(&names, owner, token).await;
    }
    if fastrand::u8(..4) == 0 {
        target.read(read, owner).await;
    }
}

/// A session the workload keeps alive itself (not with the client's
/// `Session`, whose keepalives the history would not see), recording each
/// keepalive.
struct KeptSession {
    id: u64,
    /// The session's sequence, shared by its acquires and keepalives.
    seq: Arc<AtomicU64>,
    stop: Arc<Notify>,
    keeper: JoinHandle<()>,
}

impl KeptSession {
    async fn open(target: &Target, owner: &str) -> Option<KeptSession> {
        let id = target.create_session(owner).await?;
        let seq = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(Notify::new());
        let keeper = {
            let (target, owner, seq, stop) = (target.clone(), owner.to_owned(), seq.clone(), stop.clone());
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stop.notified() => return,
                        _ = tokio::time::sleep(KEEPALIVE_EVERY) => {}
                    }
                    let seq = seq.fetch_add(1, Ordering::Relaxed) + 1;
                    if let OpResult::Refused { .. } = target.keep_alive(id, &owner, seq).await {
                        // session_not_found: it has ended, and its locks with it.
                        return;
                    }
                }
            })
        };
        Some(KeptSession { id, seq, stop, keeper })
    }

    /// The lifetime of the next acquire under the session.
    fn lifetime(&self) -> Lifetime {
        Lifetime::Session { id: self.id, seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1 }
    }

    /// Stops the keepalives, after the one in flight (if any) is answered
    /// and recorded.
    async fn stop_keeping(self) -> u64 {
        self.stop.notify_one();
        let _ = self.keeper.await;
        self.id
    }
}

/// One session cycle: create → acquire 1–3 locks under it → begin on each →
/// read one → (hold past the ttl) → end on each → release and delete, delete,
/// or abandon.
async fn session_cycle(target: &Target, owner: &str) {
    let Some(session) = KeptSession::open(target, owner).await else {
        back_off().await;
        return;
    };
    let names = distinct_locks(1 + fastrand::usize(..3));
    let wait = (names.iter().any(|n| is_hot(n)) && fastrand::bool()).then_some(WAIT);
    // Each grant: its names and their token.
    let mut held: Vec<(Vec<String>, FencingToken)> = Vec::new();
    if names.len() > 1 && fastrand::bool() {
        if let Some(leases) = target.acquire_many(&names, owner, wait, session.lifetime()).await {
            held.push((names.clone(), leases.token));
        }
    } else {
        for name in &names {
            if let Some(lease) = target.acquire_for(name, owner, wait, session.lifetime()).await {
                held.push((vec![name.clone()], lease.token()));
            }
        }
    }
    let locks: Vec<(&str, FencingToken)> =
        held.iter().flat_map(|(names, token)| names.iter().map(move |n| (n.as_str(), *token))).collect();
    for (name, token) in &locks {
        target.write(name, owner, *token, Phase::Begin).await;
    }
    if let Some((name, _)) = locks.get(fastrand::usize(..locks.len().max(1))) {
        target.read(name, owner).await;
    }
    if !locks.is_empty() && fastrand::u8(..8) == 0 {
        // Longer than the session's ttl: only its keepalives keep the locks.
        tokio::time::sleep(Duration::from_millis(SESSION_TTL_MS + 500 + fastrand::u64(..1500))).await;
    }
    for (name, token) in &locks {
        target.write(name, owner, *token, Phase::End).await;
    }
    match fastrand::u8(..8) {
        0 if !locks.is_empty() => {
            // Abandoned: no more keepalives, no delete. Once the ttl has
            // passed the session expires and its locks go to their waiters;
            // a late write under an old token must then be refused by the
            // resource if a later holder wrote.
            session.stop_keeping().await;
            tokio::time::sleep(Duration::from_millis(SESSION_TTL_MS + 500)).await;
            for (name, token) in &locks {
                target.write(name, owner, *token, Phase::End).await;
                // The cluster's own fence must refuse it once the lock moved on.
                target.put_record(name, owner, *token).await;
            }
        }
        0..=3 => {
            let id = session.stop_keeping().await;
            target.delete_session(id, owner).await;
        }
        _ => {
            for (names, token) in &held {
                match &names[..] {
                    [name] => target.release(name, owner, *token).await,
                    _ => target.release_many(names, owner, *token).await,
                };
            }
            let id = session.stop_keeping().await;
            target.delete_session(id, owner).await;
        }
    }
    if let Some((name, _)) = locks.first() {
        if fastrand::u8(..4) == 0 {
            // After an acknowledged delete or release, no read may show the token again.
            target.read(name, owner).await;
        }
    }
}
