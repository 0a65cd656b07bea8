//! Elections and resuming watches on real 3-node clusters: a paused leader
//! is replaced by a candidate with a higher token and its late fenced write
//! is refused; a watch whose node is killed mid-stream resumes on another
//! with no gap and no duplicate; a resume older than a node's history is
//! refused with 410 and succeeds after a re-read; a node rebuilt from a
//! snapshot refuses resumes from before it; `leasehold watch` prints JSON lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_client::proto::EventKind;
use leasehold_client::{Client, ErrorCode, FencingToken};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use serde_json::json;

use crate::common::{bounded, start_cluster, start_cluster_with, step};

/// `leasehold elect` (by PID) and its command's process group (by its
/// group id), killed and reaped on every path.
struct Candidate {
    elect: Child,
    group: Option<Pid>,
}

impl Drop for Candidate {
    fn drop(&mut self) {
        if let Some(group) = self.group {
            let _ = killpg(group, Signal::SIGKILL);
        }
        let _ = self.elect.kill();
        let _ = self.elect.wait();
    }
}

/// Waits (bounded) until `path` exists, and reads it.
async fn read_when_there(path: &Path) -> String {
    let give_up = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(Instant::now() < give_up, "{} never appeared", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::read_to_string(path).unwrap()
}

// Ensures a leader paused (SIGSTOP, the `leasehold elect` process and its
// command) past its ttl is replaced by the waiting candidate with a higher
// token, that the old leader's fenced write is refused when it wakes, and
// that `elect` then reports the leadership lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_leader_is_replaced_and_its_late_write_refused() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let endpoints = cluster.endpoints().join(",");
        // The leader's work: announce its group and token, wait for "go",
        // write the ledger under its token, keep running until stopped.
        let work = r#"
            B="$1"; E="$2"; D="$3"
            echo $$ > "$D/a.pid.tmp" && mv "$D/a.pid.tmp" "$D/a.pid"
            echo "$LEASEHOLD_TOKEN" > "$D/a.token.tmp" && mv "$D/a.token.tmp" "$D/a.token"
            while [ ! -e "$D/go" ]; do sleep 0.02; done
            "$B" put-record ledger --lock primary --token "$LEASEHOLD_TOKEN" --value '"a"' --endpoints "$E" > "$D/a.out" 2>&1
            echo $? > "$D/a.rc.tmp" && mv "$D/a.rc.tmp" "$D/a.rc"
            exec sleep 60
        "#;
        let binary = env!("CARGO_BIN_EXE_leasehold");
        let elect = Command::new(binary)
            .args(["elect", "primary", "--value", r#""a""#, "--owner", "a", "--ttl", "3s", "--endpoints", &endpoints])
            .args(["--", "sh", "-c", work, "work", binary, &endpoints])
            .arg(d)
            .spawn()
            .unwrap();
        let mut a = Candidate { elect, group: None };
        let group = Pid::from_raw(read_when_there(&d.join("a.pid")).await.trim().parse().unwrap());
        a.group = Some(group);
        let token_a: FencingToken = read_when_there(&d.join("a.token")).await.trim().parse().unwrap();
        let client = Arc::new(cluster.client());
        let leader = client.leader("primary").await.unwrap().expect("a leads");
        assert_eq!((leader.candidate.as_str(), leader.token, &leader.value), ("a", token_a, &json!("a")));

        step("a (elect and its command) is paused past its ttl; b waits its turn");
        let elect_pid = Pid::from_raw(a.elect.id() as i32);
        kill(elect_pid, Signal::SIGSTOP).unwrap();
        killpg(group, Signal::SIGSTOP).unwrap();
        let (b, _) = client.campaign("primary", "b", &json!("b"), 3_000, Some(Duration::from_secs(60))).await.unwrap();
        assert!(b.token > token_a, "b's token {} is not above a's {token_a}", b.token);
        let leader = client.leader("primary").await.unwrap().expect("b leads");
        assert_eq!((leader.candidate.as_str(), leader.token, &leader.value), ("b", b.token, &json!("b")));
        client.put_record("ledger", "primary", b.token, &json!("b")).await.unwrap();

        step("a's command wakes first and writes under its old token: refused");
        std::fs::write(d.join("go"), b"").unwrap();
        killpg(group, Signal::SIGCONT).unwrap();
        let rc = read_when_there(&d.join("a.rc")).await;
        let out = std::fs::read_to_string(d.join("a.out")).unwrap();
        assert_ne!(rc.trim(), "0", "a's stale write was accepted: {out}");
        assert!(out.contains("stale_token"), "{out}");

        step("elect wakes, finds the leadership lost, stops its command");
        kill(elect_pid, Signal::SIGCONT).unwrap();
        let give_up = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = a.elect.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < give_up, "elect still runs");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(status.code(), Some(leasehold_client::run::EXIT_LOCK_LOST));
        let record = client.get_record("ledger").await.unwrap().expect("record");
        assert_eq!((record.value, record.token), (json!("b"), b.token));
    })
    .await;
}

// Ensures a watch served by a follower that is killed (kill -9) mid-stream
// resumes on another node after the last event it handed out: every
// acquire and release acknowledged to the writer is seen exactly once, in
// log order, and the held locks at the end are those the events say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_on_another_node_without_gap_or_duplicate() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(Duration::from_secs(20)).await.unwrap();
        let follower = cluster.follower_of(leader);
        // The follower first: the watch is served there until it dies.
        let watcher = Arc::new(Client::new(&[cluster.endpoint(follower), cluster.endpoint(leader)]).unwrap());
        let writer = Arc::new(cluster.client());
        // The watch starts after this entry, however late it connects.
        let start = writer.acquire("before", "writer", 10_000).await.unwrap().token();
        let mut watch = watcher.watch(Some("w/"), Some(start.get()));
        let writing = {
            let writer = Arc::clone(&writer);
            tokio::spawn(async move {
                // (name, token, released) of every acknowledged write.
                let mut acked = Vec::new();
                for i in 0..120u32 {
                    let name = format!("w/{}", i % 7);
                    let lease = writer.acquire(&name, "writer", 10_000).await.expect("acquire");
                    let released = i % 5 != 0 && writer.release(&name, lease.token()).await.is_ok();
                    acked.push((name, lease.token(), released));
                }
                acked
            })
        };

        step("read events through the follower, then kill -9 it mid-stream");
        let mut seen = Vec::new();
        while seen.len() < 40 {
            seen.push(watch.next().await.expect("event"));
        }
        cluster.kill(follower);
        let acked = writing.await.unwrap();
        // After every acknowledged write: the watch has them all once it has this.
        let end = writer.acquire("w/end", "writer", 10_000).await.unwrap().token();
        step("keep reading on the next node until the end marker");
        while seen.last().is_none_or(|e| e.event.index < end.get()) {
            seen.push(
                tokio::time::timeout(Duration::from_secs(30), watch.next()).await.expect("in time").expect("event"),
            );
        }

        let ids: Vec<(u64, u64)> = seen.iter().map(|e| parse_id(&e.id)).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids out of order or repeated: {ids:?}");
        let acquired: BTreeSet<(String, FencingToken)> = seen
            .iter()
            .filter_map(|e| match &e.event.kind {
                EventKind::Acquired { token, .. } => Some((e.event.name.clone(), *token)),
                _ => None,
            })
            .collect();
        let released: BTreeSet<(String, FencingToken)> = seen
            .iter()
            .filter_map(|e| match &e.event.kind {
                EventKind::Released { token, .. } => Some((e.event.name.clone(), *token)),
                _ => None,
            })
            .collect();
        for (name, token, was_released) in &acked {
            assert!(acquired.contains(&(name.clone(), *token)), "no acquired event for {name} {token}");
            if *was_released {
                assert!(released.contains(&(name.clone(), *token)), "no released event for {name} {token}");
            }
        }
        step("the locks held now are those whose last event is an acquire");
        let mut last: BTreeMap<String, Option<FencingToken>> = BTreeMap::new();
        for e in &seen {
            match &e.event.kind {
                EventKind::Acquired { token, .. } | EventKind::HandedOver { token, .. } => {
                    last.insert(e.event.name.clone(), Some(*token));
                }
                EventKind::Released { .. } | EventKind::Expired { .. } => {
                    last.insert(e.event.name.clone(), None);
                }
                _ => {}
            }
        }
        let held: BTreeMap<String, Option<FencingToken>> =
            writer.list("w/", 100).await.unwrap().into_iter().map(|l| (l.name, Some(l.token))).collect();
        let from_events: BTreeMap<String, Option<FencingToken>> =
            last.into_iter().filter(|(_, token)| token.is_some()).collect();
        assert_eq!(held, from_events);
    })
    .await;
}

/// An event id as `(index, ordinal)`, the last event of an entry after all
/// its others.
fn parse_id(id: &str) -> (u64, u64) {
    match id.split_once('.') {
        Some((index, ordinal)) => (index.parse().unwrap(), ordinal.parse().unwrap()),
        None => (id.parse().unwrap(), u64::MAX),
    }
}

// Ensures a resume from further back than the nodes keep (a history of 50
// events) is answered 410 with `compacted_before`, and that an observer
// that re-reads the leader resumes after the read's index and sees the
// next change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compacted_resume_is_refused_then_resumes_after_a_reread() {
    bounded(async {
        let cluster = start_cluster_with(3, &["--event-history", "50"]).await;
        let client = Arc::new(cluster.client());
        let (leader, _) = client.campaign("primary", "a", &json!(1), 60_000, None).await.unwrap();
        step("move the history on past the election's entry");
        for i in 0..60 {
            let lease = client.acquire(&format!("busy/{}", i % 3), "w", 10_000).await.unwrap();
            client.release(&format!("busy/{}", i % 3), lease.token()).await.unwrap();
        }
        let election = client.election("primary");
        let error = election.observe(Some(leader.token.get())).next().await.expect_err("compacted");
        assert_eq!(error.code(), Some(ErrorCode::Compacted), "{error}");
        let before = error.detail().and_then(|d| d.number("compacted_before")).expect("compacted_before");
        assert!(before > leader.token.get(), "{error}");

        step("re-read the leader, resume after its index, see the next proclaim");
        let read = election.leader().await.unwrap().expect("a leads");
        assert_eq!(read.value, json!(1));
        let mut observe = election.observe(read.index);
        client.proclaim("primary", "a", leader.token, &json!(2)).await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(30), observe.next()).await.expect("in time").unwrap();
        assert!(
            matches!(&next.event.kind, EventKind::Proclaimed { token, value, .. } if *token == leader.token && *value == json!(2)),
            "{next:?}"
        );
    })
    .await;
}

// Ensures `leasehold watch --prefix P --after I` prints the events after I
// under P as JSON lines, each with its id, and `--election` observes an
// election starting with its leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_watch_prints_json_lines_from_an_index() {
    use tokio::io::AsyncBufReadExt;
    bounded(async {
        let cluster = start_cluster(3).await;
        let client = cluster.client();
        let start = client.acquire("before", "w", 10_000).await.unwrap().token();
        let first = client.acquire("cli/a", "w", 10_000).await.unwrap().token();
        client.acquire("other", "w", 10_000).await.unwrap();
        let second = client.acquire("cli/b", "w", 10_000).await.unwrap().token();
        let endpoints = cluster.endpoints().join(",");
        let watch = |args: &[&str]| {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
                .args(["watch", "--endpoints", &endpoints])
                .args(args)
                .stdout(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .unwrap()
        };
        let lines = |child: &mut tokio::process::Child| tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut child = watch(&["--prefix", "cli/", "--after", &start.to_string()]);
        let mut out = lines(&mut child);
        for (name, token) in [("cli/a", first), ("cli/b", second)] {
            let line = tokio::time::timeout(Duration::from_secs(30), out.next_line()).await.unwrap().unwrap().unwrap();
            let event: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(
                (&event["id"], &event["name"], &event["type"], &event["token"]),
                (&json!(token.to_string()), &json!(name), &json!("acquired"), &json!(token.get())),
                "{line}"
            );
        }
        drop(child);

        let (leader, _) = client.campaign("cli-primary", "c", &json!({"addr": "c"}), 10_000, None).await.unwrap();
        let mut child = watch(&["--election", "cli-primary"]);
        let mut out = lines(&mut child);
        let line = tokio::time::timeout(Duration::from_secs(30), out.next_line()).await.unwrap().unwrap().unwrap();
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            (&event["type"], &event["owner"], &event["token"], &event["value"]),
            (&json!("proclaimed"), &json!("c"), &json!(leader.token.get()), &json!({"addr": "c"})),
            "{line}"
        );
    })
    .await;
}

// Ensures a node that caught up by installing a snapshot does not pretend
// to know the events it never applied: a resume from before the snapshot
// is 410 there, while a node that applied them serves it without a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_rebuilt_from_a_snapshot_refuses_older_resumes() {
    bounded(async {
        let mut cluster = start_cluster_with(3, &["--snapshot-every", "100"]).await;
        let leader = cluster.wait_for_leader(Duration::from_secs(20)).await.unwrap();
        let client = cluster.client();
        let start = client.acquire("before", "w", 10_000).await.unwrap().token();
        let (lagging, tokens) =
            crate::snapshots::lag_one_follower_past_a_snapshot(&mut cluster, leader, "snap/x").await;

        let rebuilt = Arc::new(Client::new(&[cluster.endpoint(lagging)]).unwrap().with_retry_budget(Duration::ZERO));
        let error = rebuilt.watch(Some("snap/"), Some(start.get())).next().await.expect_err("compacted");
        assert_eq!(error.code(), Some(ErrorCode::Compacted), "{error}");

        step("the leader, which applied every entry, serves the same resume");
        let whole = Arc::new(Client::new(&[cluster.endpoint(leader)]).unwrap());
        let mut watch = whole.watch(Some("snap/"), Some(start.get()));
        let mut acquired = Vec::new();
        while acquired.last() != tokens.last() {
            let event = tokio::time::timeout(Duration::from_secs(30), watch.next()).await.unwrap().unwrap();
            if let EventKind::Acquired { token, .. } = event.event.kind {
                acquired.push(token);
            }
        }
        assert_eq!(acquired, tokens);
    })
    .await;
}
