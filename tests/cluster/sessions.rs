//! Sessions on a real 3-node cluster: a client `Session` keeps any number of
//! locks with one keepalive and loses them all at once; a `leasehold run`
//! holding two locks under one session, killed -9, has both handed to their
//! waiters once the session expires, with higher tokens.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{bounded, leasehold_run, start_cluster, step, wait_until_free, wait_until_queued, ELECTION_BOUND};
use leasehold_client::{AcquireOptions, Client, ErrorCode, Lifetime, LostReason};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const TTL: Duration = Duration::from_secs(3);
const TTL_MS: u64 = 3_000;

/// PIDs a test started, SIGKILLed when the guard drops, on every path.
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

// Ensures a session keeps its locks (one taken alone, two together) for
// several of its ttls, refusing other owners, that close releases them all,
// and that `lost` fires (Revoked) when the session is deleted under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_keeps_its_locks_and_loses_them_together() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let client = Arc::new(cluster.client());
        let other = cluster.client();

        step("open a 3 s session and take three locks under it");
        let session = client.session("alice", TTL).await.unwrap();
        let single = session.lock("s-one", None).await.unwrap();
        let pair = session.lock_many(&["s-two", "s-three"], None).await.unwrap();
        assert_eq!(pair[0].token, pair[1].token);
        assert!(single.token.get() > session.id() && pair[0].token > single.token);

        step("hold them for 3 ttls: the keepalive keeps every one");
        let hold_until = Instant::now() + 3 * TTL;
        while Instant::now() < hold_until {
            let refused = other.acquire("s-two", "bob", TTL_MS).await.unwrap_err();
            assert_eq!(refused.code(), Some(ErrorCode::Held), "{refused:?}");
            assert!(!session.is_lost(), "lost while the cluster is healthy: {session:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let view = client.get_session(session.id()).await.unwrap().expect("alive");
        assert_eq!(view.lock_count, 3);

        step("close releases all of them");
        assert_eq!(session.close().await.unwrap(), ["s-one", "s-three", "s-two"]);
        for name in ["s-one", "s-two", "s-three"] {
            assert!(client.get(name).await.unwrap().is_none(), "{name} still held");
        }

        step("a session deleted under its holder fires lost at once");
        let session = client.session("carol", TTL).await.unwrap();
        session.lock("s-one", None).await.unwrap();
        let lost = tokio::spawn(session.lost());
        client.delete_session(session.id()).await.unwrap();
        let reason = tokio::time::timeout(TTL + Duration::from_secs(5), lost).await.expect("lost fired").unwrap();
        assert!(matches!(reason, LostReason::Revoked { code: ErrorCode::SessionNotFound, .. }), "{reason:?}");
        assert!(client.get("s-one").await.unwrap().is_none());
    })
    .await;
}

// Ensures the point of sessions: `leasehold run --lock A --lock B` takes both
// under one session and one token; killed -9, it sends no keepalive, and
// the Tick that expires its session hands both locks to their waiters, in
// one entry, under a token above the crashed holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_session_holder_hands_both_locks_to_waiters() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let client = Arc::new(cluster.client());
        let pid_file = cluster.dir.path().join("command.pid");
        let script = format!("echo $$ > {}; exec sleep 600", pid_file.display());

        step("leasehold run --lock sa --lock sb -- sleep 600");
        let mut run = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
        run.arg("run")
            .args(["--endpoints", &cluster.endpoints().join(",")])
            .args(["--lock", "sa", "--lock", "sb", "--ttl", "3s", "--owner", "crashed"])
            .args(["--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let run = run.spawn().expect("leasehold run starts");
        let run_pid = run.id().expect("a pid") as i32;
        let mut pids = Pids(vec![run_pid]);
        // The command runs in its own process group: it outlives a killed `run`.
        let command_pid: i32 = line_of(&pid_file, Duration::from_secs(20)).await.parse().expect("a pid");
        pids.0.push(command_pid);

        let held = client.get("sa").await.unwrap().expect("sa held once the command runs");
        let other = client.get("sb").await.unwrap().expect("sb held once the command runs");
        assert_eq!((held.owner.as_str(), other.owner.as_str()), ("crashed", "crashed"));
        assert_eq!(held.token, other.token, "one multi-acquire, one token");
        let session = held.session.expect("held under a session");
        assert_eq!(other.session, Some(session));

        step("a waiter queues for each lock");
        let wait = AcquireOptions { wait: Some(Duration::from_secs(30)), ..AcquireOptions::default() };
        let waiters: Vec<_> = [("sa", "wa"), ("sb", "wb")]
            .into_iter()
            .map(|(name, owner)| {
                let (client, wait) = (client.clone(), wait.clone());
                tokio::spawn(async move { client.acquire_with(name, owner, TTL_MS, &wait).await })
            })
            .collect();
        for name in ["sa", "sb"] {
            while client.get(name).await.unwrap().is_some_and(|v| v.waiters.is_empty()) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }

        step("kill -9 the holder: its session expires and both locks pass on");
        kill(Pid::from_raw(run_pid), Signal::SIGKILL).expect("kill -9");
        let mut grants = Vec::new();
        for waiter in waiters {
            let lease = tokio::time::timeout(Duration::from_secs(30), waiter).await.expect("handed over").unwrap();
            grants.push(lease.expect("granted").grant);
        }
        assert_eq!((grants[0].owner.as_str(), grants[1].owner.as_str()), ("wa", "wb"));
        assert!(grants[0].token > held.token, "tokens grow: {grants:?} after {}", held.token);
        assert_eq!(grants[0].token, grants[1].token, "both handed over by the Tick that expired the session");
        assert!(client.get_session(session).await.unwrap().is_none(), "the session expired");
        drop(pids);
    })
    .await;
}

// Ensures `leasehold run` with several locks gives its command the names, the
// one token and the session, and deletes the session when the command exits,
// releasing every lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_several_locks_shares_one_token_and_releases_them() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let client = cluster.client();
        let endpoints = cluster.endpoints().join(",");
        let script = r#"echo "$LEASEHOLD_LOCK $LEASEHOLD_TOKEN $LEASEHOLD_SESSION $LEASEHOLD_OWNER""#;
        let args = ["run", "--endpoints", &endpoints, "--lock", "ra", "--lock", "rb", "--owner", "runner"];
        let out = leasehold_run(&[&args[..], &["--", "sh", "-c", script]].concat()).await;
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let fields: Vec<&str> = line.split(' ').collect();
        let [locks, token, session, owner] = fields[..] else { panic!("the command printed {line:?}") };
        assert_eq!((locks, owner), ("ra,rb", "runner"));
        let (token, session): (u64, u64) = (token.parse().unwrap(), session.parse().unwrap());
        assert!(token > session, "granted under the session after it was created: {line}");
        assert!(client.get("ra").await.unwrap().is_none() && client.get("rb").await.unwrap().is_none());
        assert!(client.get_session(session).await.unwrap().is_none(), "the session was deleted");
    })
    .await;
}

// Ensures a session's waiter granted while nobody listened (the node it
// asked through was killed -9 mid-wait), whose session then expired, is
// answered its grant by a retry with the same request id and seq, not
// `session_not_found`, which would say it never took effect: the history
// the fault suite's linearizability check found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_waiter_granted_before_its_session_expired_is_told_its_grant_on_retry() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let via_leader = Client::new(&[cluster.endpoint(leader)]).unwrap();
        let holder = via_leader.acquire("granted-late", "holder", 120_000).await.unwrap();
        let (session, _) = via_leader.create_session("s", TTL_MS).await.unwrap();
        let names = ["granted-late", "granted-late-2"];
        let lifetime = Lifetime::Session { id: session.session, seq: 1 };
        let options = AcquireOptions {
            wait: Some(Duration::from_secs(60)),
            request_id: Some("granted-late-1".into()),
            ..AcquireOptions::default()
        };

        step(&format!("a session waiter queues through follower {follower}"));
        let via_follower = Arc::new(Client::new(&[cluster.endpoint(follower)]).unwrap());
        let waiter = {
            let (client, options) = (via_follower.clone(), options.clone());
            tokio::spawn(async move { client.acquire_many_for(&names, "s", lifetime, &options).await })
        };
        wait_until_queued(&via_leader, names[0], "s", true).await;

        step(&format!("kill -9 follower {follower}: nobody hears the grant, nobody cancels the wait"));
        cluster.kill(follower);
        waiter.abort();
        via_leader.release(names[0], holder.token()).await.unwrap();
        let granted = via_leader.get(names[1]).await.unwrap().expect("granted to the waiter");
        assert_eq!(granted.owner, "s");
        assert!(granted.token > holder.token());

        step("the session expires without a keepalive; a retry is answered the grant");
        wait_until_free(&via_leader, names[1], Duration::from_secs(20)).await;
        let retried = via_leader.acquire_many_for(&names, "s", lifetime, &options).await;
        let retried = retried.unwrap_or_else(|e| panic!("the retry was refused: {e:?}\n{}", cluster.logs()));
        assert_eq!(retried.token, granted.token, "the grant it got, not a new one");
        assert!(via_leader.get(names[1]).await.unwrap().is_none(), "not applied again");
    })
    .await;
}
