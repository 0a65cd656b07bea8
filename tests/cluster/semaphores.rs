//! Semaphores, read/write locks and deadlock refusal on a real 3-node
//! cluster: a semaphore of 3 shared by 10 `leasehold run` processes, one
//! of them killed -9; readers and a writer through different nodes; two
//! owners crossing on two locks; a permit and a read lock held under a
//! session, handed to waiters when it ends.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::common::{bounded, start_cluster, step, EventStream};
use leasehold_client::{AcquireOptions, Client, ErrorCode, LockOptions, PermitRequest};
use leasehold_proto::events::EventKind;

const TTL: Duration = Duration::from_secs(3);

/// Processes a test started, killed (SIGKILL, by PID) when it ends.
struct Pids(Vec<i32>);

impl Drop for Pids {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
    }
}

/// Waits (bounded) until `path` holds a full line, and returns it.
async fn line_of(path: &Path, bound: Duration) -> String {
    let give_up = Instant::now() + bound;
    loop {
        if let Some(line) = std::fs::read_to_string(path).ok().and_then(|t| t.strip_suffix('\n').map(str::to_owned)) {
            return line;
        }
        assert!(Instant::now() < give_up, "{} not written within {bound:?}", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `leasehold run --semaphore pool:3` as `owner`, running `script` (which
/// writes its own PID first).
/// Its standard error goes to `<dir>/<owner>.stderr` (see [`said`]).
fn run_with_permit(endpoints: &[String], dir: &Path, owner: &str, script: &str) -> tokio::process::Child {
    let stderr = std::fs::File::create(dir.join(format!("{owner}.stderr"))).expect("a stderr file");
    let mut run = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
    run.arg("run")
        .args(["--endpoints", &endpoints.join(",")])
        .args(["--semaphore", "pool:3", "--ttl", "3s", "--wait", "60s", "--owner", owner])
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true);
    run.spawn().expect("leasehold run starts")
}

/// What the `leasehold run` of `owner` wrote to its standard error.
fn said(dir: &Path, owner: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{owner}.stderr"))).unwrap_or_default()
}

// Ensures a semaphore of 3 shared by 10 processes never has more than 3
// permits in use, every grant's token is its entry's index and above every
// earlier grant's, and a holder killed -9 keeps its permit until its lease
// runs out: the permit returns (to a waiter) no sooner than two thirds of
// its ttl after the kill (its last renewal was at most a third before it),
// and all the other processes run their command once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_keeps_its_permit_until_its_lease_ends() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let endpoints = cluster.endpoints();
        let dir = cluster.dir.path().to_owned();
        let mut events = EventStream::open(&cluster.endpoint(2), "pool").await;

        step("the victim takes a permit and runs a long command");
        let victim_pid_file = dir.join("victim.pid");
        let script = format!("echo $$ > {}; exec sleep 600", victim_pid_file.display());
        let victim = run_with_permit(&endpoints, &dir, "victim", &script);
        let mut pids = Pids(vec![victim.id().expect("a pid") as i32]);
        pids.0.push(line_of(&victim_pid_file, Duration::from_secs(20)).await.parse().expect("a pid"));

        step("9 more processes share the other 2 permits and wait for them");
        let mut others = Vec::new();
        for i in 0..9 {
            let pid_file = dir.join(format!("c{i}.pid"));
            let script = format!("echo $$ > {}; exec sleep 1", pid_file.display());
            let owner = format!("c{i}");
            let child = run_with_permit(&endpoints, &dir, &owner, &script);
            pids.0.push(child.id().expect("a pid") as i32);
            others.push((owner, child));
        }
        // Let two of them hold and the rest queue before the victim dies.
        let client = cluster.client();
        let give_up = Instant::now() + Duration::from_secs(30);
        while client.semaphore_view("pool").await.unwrap().is_none_or(|s| s.waiters.is_empty()) {
            assert!(Instant::now() < give_up, "nobody queued for a permit");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        step("kill -9 the victim and its command");
        let killed_at = Instant::now();
        for pid in &pids.0[..2] {
            kill(Pid::from_raw(*pid), Signal::SIGKILL).expect("kill -9");
        }

        step("follow the permits until every process has had one");
        let (mut in_use, mut highest, mut granted, mut ended) = (0u64, 0u64, 0, 0);
        let mut victim_expired_at = None;
        while granted < 10 || ended < 10 {
            let e = events.next().await;
            let owner = e["owner"].as_str().unwrap_or_default().to_owned();
            match e["type"].as_str().unwrap_or_default() {
                "permits_granted" => {
                    let token = e["token"].as_u64().expect("a token");
                    assert_eq!(Some(token), e["index"].as_u64(), "the token is the granting entry's index");
                    assert!(token >= highest, "token order: {e}");
                    highest = token;
                    in_use += e["permits"].as_u64().expect("permits");
                    granted += 1;
                    assert!(in_use <= 3, "{in_use} permits in use at {e}");
                }
                "permits_released" | "permits_expired" => {
                    in_use -= e["permits"].as_u64().expect("permits");
                    ended += 1;
                    if owner == "victim" {
                        assert_eq!(e["type"], "permits_expired", "the victim released nothing: {e}");
                        victim_expired_at = Some(killed_at.elapsed());
                    } else {
                        assert_eq!(e["type"], "permits_released", "{e}");
                    }
                }
                _ => {}
            }
        }
        let expired_after = victim_expired_at.expect("the victim's permit expired");
        eprintln!("the victim's permit returned {expired_after:?} after the kill (ttl {TTL:?})");
        assert!(expired_after >= TTL * 2 / 3 - Duration::from_millis(500), "returned {expired_after:?} after the kill");

        step("every other process ran its command under a permit and exited 0");
        for (owner, mut child) in others {
            let status = tokio::time::timeout(Duration::from_secs(60), child.wait()).await.expect("exits").unwrap();
            assert!(status.success(), "{owner}: {status}: {}\n{}", said(&dir, &owner), cluster.logs());
        }
        assert!(client.semaphore_view("pool").await.unwrap().is_none(), "nobody holds or waits any more");
    })
    .await;
}

/// A client of node `id` only.
/// The kind of the next event of `events`, within 20 s.
async fn next_event(events: &mut leasehold_client::Watch) -> EventKind {
    let next = tokio::time::timeout(Duration::from_secs(20), events.next()).await;
    next.expect("an event in time").expect("the stream goes on").event.kind
}

fn client_of(cluster: &crate::common::TestCluster, id: u64) -> Arc<Client> {
    Arc::new(Client::new(&[cluster.endpoint(id)]).expect("a client"))
}

// Ensures readers through two nodes hold a lock together, a writer through
// a third waits for both and blocks a later reader (no writer starvation),
// and each grant's token is above the one before it, across the modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_a_writer_through_different_nodes() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let (one, two, three) = (client_of(&cluster, 1), client_of(&cluster, 2), client_of(&cluster, 3));
        let options = |owner: &str| LockOptions::new(TTL).with_owner(owner);

        step("two readers, through nodes 1 and 2, hold the lock together");
        let r1 = one.read_lock("doc", options("r1")).await.unwrap();
        let r2 = two.read_lock("doc", options("r2")).await.unwrap();
        assert!(r2.token() > r1.token());

        step("a writer through node 3 is refused, then waits");
        let refused = three.write_lock("doc", options("w")).await.unwrap_err();
        assert_eq!(refused.code(), Some(ErrorCode::Held), "{refused:?}");
        let writer = {
            let three = three.clone();
            tokio::spawn(async move { three.write_lock("doc", options("w").with_wait(Duration::from_secs(30))).await })
        };
        let give_up = Instant::now() + Duration::from_secs(20);
        loop {
            match one.read_lock("doc", options("late")).await {
                Err(e) if e.code() == Some(ErrorCode::Reserved) => break,
                Ok(late) => late.release().await.unwrap(),
                Err(e) => panic!("{e:?}"),
            }
            assert!(Instant::now() < give_up, "the writer never queued");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        step("a later reader waits behind the writer");
        // The lock's own events say who was queued and who was granted, in
        // log order: no pause has to stand in for "still waiting".
        let mut events = one.watch_lock("doc", None);
        let late = {
            let two = two.clone();
            tokio::spawn(async move { two.read_lock("doc", options("late").with_wait(Duration::from_secs(30))).await })
        };
        assert!(
            matches!(next_event(&mut events).await, EventKind::Queued { owner, .. } if owner == "late"),
            "the late reader is queued, not granted, while the readers hold"
        );
        assert!(!writer.is_finished(), "the writer waits while the readers hold");

        step("the readers leave: the writer is handed the lock, then the late reader");
        let r2_token = r2.token();
        r1.release().await.unwrap();
        r2.release().await.unwrap();
        let w = tokio::time::timeout(Duration::from_secs(20), writer).await.expect("answered").unwrap().unwrap();
        assert!(w.token() > r2_token);
        assert!(!w.is_lost());
        let w_token = w.token();
        w.release().await.unwrap();
        let late = tokio::time::timeout(Duration::from_secs(20), late).await.expect("answered").unwrap().unwrap();
        assert!(late.token() > w_token);
        // In log order: the writer's grant and release both come before the
        // late reader's grant.
        let mut order = Vec::new();
        while !matches!(order.last(), Some(EventKind::HandedOver { owner, .. } | EventKind::Acquired { owner, .. }) if owner == "late") {
            order.push(next_event(&mut events).await);
        }
        let at = |wanted: &dyn Fn(&EventKind) -> bool| order.iter().position(wanted);
        let w_granted = at(&|k| matches!(k, EventKind::HandedOver { owner, .. } | EventKind::Acquired { owner, .. } if owner == "w"));
        let w_released = at(&|k| matches!(k, EventKind::Released { owner, .. } if owner == "w"));
        assert!(
            w_granted.is_some() && w_granted < w_released && w_released < Some(order.len() - 1),
            "the late reader was granted only after the writer released: {order:?}"
        );
        late.release().await.unwrap();
    })
    .await;
}

// Ensures two owners crossing on two locks, through different nodes: the
// second to wait is refused at once with 409 deadlock naming the cycle,
// while the first keeps waiting and is granted once the other releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossing_owners_get_a_deadlock_at_once() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let (one, two) = (client_of(&cluster, 1), client_of(&cluster, 2));
        let x = one.acquire("x", "a", 30_000).await.unwrap();
        let y = two.acquire("y", "b", 30_000).await.unwrap();

        step("a waits for y through node 1");
        let wait = AcquireOptions { wait: Some(Duration::from_secs(60)), ..AcquireOptions::default() };
        let a_waits = {
            let (one, wait) = (one.clone(), wait.clone());
            tokio::spawn(async move { one.acquire_with("y", "a", 30_000, &wait).await })
        };
        let give_up = Instant::now() + Duration::from_secs(20);
        while two.get("y").await.unwrap().is_some_and(|v| v.waiters.is_empty()) {
            assert!(Instant::now() < give_up, "a never queued");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        step("b waits for x through node 3: refused at once");
        let refused = client_of(&cluster, 3).acquire_with("x", "b", 30_000, &wait).await.unwrap_err();
        assert_eq!(refused.code(), Some(ErrorCode::Deadlock), "{refused:?}");
        let cycle = refused.detail().and_then(|d| d.details.get("cycle").cloned());
        assert_eq!(cycle, Some(serde_json::json!(["b", "a"])));
        assert!(!a_waits.is_finished(), "a still waits");

        step("b gives y up: a is granted it");
        two.release("y", y.token()).await.unwrap();
        let granted = tokio::time::timeout(Duration::from_secs(20), a_waits).await.expect("answered").unwrap().unwrap();
        assert!(granted.token() > y.token());
        one.release("y", granted.token()).await.unwrap();
        one.release("x", x.token()).await.unwrap();
    })
    .await;
}

/// `leasehold run` on lock `doc` with `flags`, running `script`.
fn run_on_doc(endpoints: &[String], flags: &[&str], script: &str) -> tokio::process::Child {
    let mut run = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
    run.arg("run")
        .args(["--endpoints", &endpoints.join(",")])
        .args(["--lock", "doc", "--ttl", "3s"])
        .args(flags)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    run.spawn().expect("leasehold run starts")
}

// Ensures `leasehold run --shared` lets two commands run under one lock at
// once while an exclusive `run` without a wait is refused (exit 2), and
// that one with a wait runs once both are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_shared_commands_together_and_exclusive_after() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let endpoints = cluster.endpoints();
        let dir = cluster.dir.path().to_owned();
        let (first, second, done) = (dir.join("first"), dir.join("second"), dir.join("done"));

        step("two shared runs: each waits until the other's command has started");
        let both = |me: &Path, other: &Path| {
            format!("echo $$ > {}; while [ ! -s {} ]; do sleep 0.05; done; sleep 1", me.display(), other.display())
        };
        let mut readers = vec![
            run_on_doc(&endpoints, &["--shared"], &both(&first, &second)),
            run_on_doc(&endpoints, &["--shared"], &both(&second, &first)),
        ];
        let mut pids = Pids(readers.iter().map(|c| c.id().expect("a pid") as i32).collect());
        for file in [&first, &second] {
            pids.0.push(line_of(file, Duration::from_secs(20)).await.parse().expect("a pid"));
        }

        step("an exclusive run without a wait is refused while they hold");
        let mut refused = run_on_doc(&endpoints, &[], "true");
        let status = tokio::time::timeout(Duration::from_secs(30), refused.wait()).await.expect("exits").unwrap();
        assert_eq!(status.code(), Some(2), "{status}");

        step("one with a wait runs once both are done");
        let mut writer = run_on_doc(&endpoints, &["--wait", "30s"], &format!("echo $$ > {}", done.display()));
        pids.0.push(writer.id().expect("a pid") as i32);
        for reader in &mut readers {
            let status = tokio::time::timeout(Duration::from_secs(30), reader.wait()).await.expect("exits").unwrap();
            assert!(status.success(), "{status}");
        }
        let status = tokio::time::timeout(Duration::from_secs(30), writer.wait()).await.expect("exits").unwrap();
        assert!(status.success() && done.exists(), "{status}");
    })
    .await;
}

// Ensures a permit and a read lock taken under a session, through one
// node, are held until the session ends and no longer: its delete, sent
// while a permit waiter and a writer wait through another node, returns
// both in one entry, and each waiter is granted under a token above the
// session's grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_end_hands_its_permit_and_read_lock_to_waiters() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let (one, two) = (client_of(&cluster, 1), client_of(&cluster, 2));

        step("a session takes the only permit of pool and a read lock on doc");
        let session = one.session("s", Duration::from_secs(10)).await.unwrap();
        let permit = session.acquire_permits("pool", 1, 1, None).await.unwrap();
        let read = session.read_lock("doc", None).await.unwrap();
        assert_eq!((permit.ttl_ms, read.ttl_ms), (10_000, 10_000), "they live by the session's ttl");

        step("a permit waiter and a writer queue through another node");
        // From the read lock's grant on: events the streams would miss
        // while connecting are replayed, so no pause stands in for them.
        let after = Some(read.token.get());
        let (mut pool_events, mut doc_events) = (one.watch_lock("pool", after), one.watch_lock("doc", after));
        let wait = Some(Duration::from_secs(30));
        let permit_waiter = {
            let two = two.clone();
            let asked = PermitRequest { limit: 1, permits: 1, ttl_ms: 30_000, wait };
            tokio::spawn(async move { two.acquire_permits("pool", "w", &asked).await })
        };
        let writer = {
            let two = two.clone();
            let options = AcquireOptions { wait, ..AcquireOptions::default() };
            tokio::spawn(async move { two.acquire_with("doc", "x", 30_000, &options).await })
        };
        assert!(
            matches!(next_event(&mut pool_events).await, EventKind::PermitsQueued { owner, .. } if owner == "w"),
            "the permit waiter is queued while the session holds the permit"
        );
        assert!(
            matches!(next_event(&mut doc_events).await, EventKind::Queued { owner, .. } if owner == "x"),
            "the writer is queued while the session reads"
        );

        step("the session ends: both waiters are granted");
        let released = session.close().await.unwrap();
        assert_eq!(released, ["doc", "pool"]);
        let answered = Duration::from_secs(20);
        let w = tokio::time::timeout(answered, permit_waiter).await.expect("answered").unwrap().unwrap();
        assert!(w.grant.token > permit.token, "{w:?}");
        let x = tokio::time::timeout(answered, writer).await.expect("answered").unwrap().unwrap();
        assert!(x.grant.token > read.token, "{x:?}");
        assert_eq!(w.grant.token, x.grant.token, "both granted in the delete's entry");
    })
    .await;
}
