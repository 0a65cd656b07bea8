//! The `Lock` guard and `leasehold run` against real 3-node clusters: the
//! watchdog keeps a lock, `lost` fires by the safe deadline when the cluster
//! stops answering, and `leasehold run` passes the token to its command,
//! releases after it, and kills it when the lock is lost, before the
//! cluster can grant the lock to anyone else.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{bounded, start_cluster, step, TestCluster, ELECTION_BOUND};
use leasehold_client::{AcquireOptions, Client, ClientError, ErrorCode, FencingToken, LockOptions, LostReason};
use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const TTL: Duration = Duration::from_secs(3);
const TTL_MS: u64 = 3_000;

/// A process started by a test, with more PIDs it is known to have started;
/// all are killed (SIGKILL, by PID) when the guard drops, on every path.
struct Procs {
    child: Child,
    others: Vec<i32>,
}

impl Procs {
    fn spawn(command: &mut Command) -> Procs {
        Procs { child: command.spawn().expect("spawn"), others: Vec::new() }
    }

    /// Waits (polling) up to `bound` for the process to exit.
    async fn wait_exit(&mut self, bound: Duration) -> Option<ExitStatus> {
        let give_up = Instant::now() + bound;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() >= give_up {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for pid in &self.others {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// SIGSTOPs every node: the cluster hangs (connections open, no answers).
fn stop_every_node(cluster: &TestCluster) {
    for id in cluster.ids() {
        cluster.signal(id, Signal::SIGSTOP);
    }
}

/// `leasehold run` against the nodes at `endpoints`, stderr into `stderr`.
fn leasehold_run(endpoints: &[String], stderr: &Path, flags: &[&str], command: &[&str]) -> Command {
    let mut run = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    run.arg("run")
        .args(["--endpoints", &endpoints.join(",")])
        .args(flags)
        .arg("--")
        .args(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr).expect("stderr file"));
    run
}

/// Waits (bounded) until `path` holds a full line, and returns it.
async fn read_line_when_written(path: &Path, bound: Duration) -> String {
    let give_up = Instant::now() + bound;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Some(line) = text.strip_suffix('\n') {
                return line.to_string();
            }
        }
        assert!(Instant::now() < give_up, "{} not written within {bound:?}", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn file_in(cluster: &TestCluster, name: &str) -> PathBuf {
    cluster.dir.path().join(name)
}

/// Whether process `pid` has ended: it is gone, or a zombie its parent has
/// not reaped yet (which runs no more code).
fn has_ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()) == Some("Z"),
        Err(_) => true,
    }
}

// Ensures the watchdog keeps a lock for 5× its ttl: another owner is refused
// with 409 held throughout, the token never changes, `lost` never fires, and
// release then frees the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_the_lock_for_five_ttls() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let client = Arc::new(cluster.client());
        let other = cluster.client();

        step("lock with a 3 s ttl");
        let acquired_at = Instant::now();
        let lock = client.lock("guarded", LockOptions::new(TTL).with_owner("alice")).await.unwrap();
        let token = lock.token();
        assert!(token.get() > 0);
        assert!(lock.valid_until() <= acquired_at + TTL, "the deadline is anchored at the send time");

        step("hold it for 5 ttls while another owner keeps trying");
        let hold_until = acquired_at + 5 * TTL;
        while Instant::now() < hold_until {
            let err = other.acquire("guarded", "bob", TTL_MS).await.unwrap_err();
            match &err {
                ClientError::Api { status: 409, error } if error.code == ErrorCode::Held => {
                    assert_eq!(error.holder(), Some("alice"));
                    assert_eq!(error.number("token"), Some(token.get()));
                }
                other => panic!("expected 409 held, got {other:?}"),
            }
            assert!(!lock.is_lost(), "lost while the cluster is healthy: {lock:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }

        step("same token, renewed, never lost");
        let view = client.get("guarded").await.unwrap().expect("still held");
        assert_eq!((view.owner.as_str(), view.token), ("alice", token));
        assert_eq!(lock.token(), token);
        assert!(lock.valid_until() > acquired_at + TTL, "the watchdog re-anchored the lease");
        assert!(!lock.is_lost());
        assert!(lock.lost_reason().is_none());
        assert!(tokio::time::timeout(Duration::ZERO, lock.lost()).await.is_err(), "lost fired");

        step("release frees it");
        lock.release().await.unwrap();
        assert!(client.get("guarded").await.unwrap().is_none());
        other.acquire("guarded", "bob", TTL_MS).await.unwrap();
    })
    .await;
}

// Ensures `lost` fires when every node hangs (SIGSTOP), no later than the last
// successful renewal's send time + ttl (the earliest the cluster could expire
// the lease), with reason Expired, and stays fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_by_the_safe_deadline_when_the_cluster_hangs() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let client = Arc::new(cluster.client());
        let lock = client.lock("fragile", LockOptions::new(TTL).with_owner("alice")).await.unwrap();
        let first_deadline = lock.valid_until();
        let margin = lock.drift_margin();

        step("let the watchdog renew");
        while lock.valid_until() == first_deadline {
            assert!(!lock.is_lost());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        step("SIGSTOP every node");
        let lost = tokio::spawn(lock.lost());
        stop_every_node(&cluster);
        // No renewal can be sent after this instant and still succeed.
        let stopped_at = Instant::now();

        step("wait for lost");
        let reason = tokio::time::timeout(TTL + Duration::from_secs(10), lost)
            .await
            .expect("lost did not fire")
            .expect("lost task");
        let lost_at = Instant::now();
        let deadline = lock.valid_until();
        eprintln!("lost {:?} after the stop, reason {reason}", lost_at - stopped_at);
        assert!(matches!(reason, LostReason::Expired { .. }), "{reason:?}");
        // Safety: the guard's last anchor is deadline + margin - ttl; lost must
        // fire by anchor + ttl. The anchor precedes the stop, which gives a
        // bound measured by the test alone.
        assert!(lost_at <= deadline + margin, "lost fired {:?} after anchor + ttl", lost_at - (deadline + margin));
        assert!(lost_at <= stopped_at + TTL, "lost fired {:?} after stop + ttl", lost_at - (stopped_at + TTL));
        // Ordering: not before the guard's own deadline.
        assert!(deadline <= lost_at);
        assert!(lock.is_lost());
        assert_eq!(lock.lost().await, reason, "lost resolves again with the same reason");
        assert_eq!(lock.lost_reason(), Some(reason));
        drop(lock);
    })
    .await;
}

// Ensures `leasehold run` gives its command the lock name and the current
// token, holds the lock while it runs, releases it afterwards and exits with
// the command's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_passes_the_token_and_the_exit_status() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let client = cluster.client();
        let env_file = file_in(&cluster, "env.txt");
        let go_file = file_in(&cluster, "go");
        let stderr = file_in(&cluster, "run.stderr");

        step("leasehold run a script that records its environment, then waits for a go");
        // The script ends on its own within 60 s even if the test dies.
        let script = r#"echo "$$ $LEASEHOLD_LOCK $LEASEHOLD_TOKEN $LEASEHOLD_OWNER" > "$1.tmp" && mv "$1.tmp" "$1"
            i=0; while [ ! -e "$2" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; exit 7"#;
        let mut run = Procs::spawn(&mut leasehold_run(
            &cluster.endpoints(),
            &stderr,
            &["--lock", "jobs/nightly", "--ttl", "3s", "--owner", "runner-1"],
            &["sh", "-c", script, "sh", env_file.to_str().unwrap(), go_file.to_str().unwrap()],
        ));
        let line = read_line_when_written(&env_file, Duration::from_secs(30)).await;
        let fields: Vec<&str> = line.split(' ').collect();
        let [pid, lock, token, owner] = fields[..] else { panic!("unexpected environment line {line:?}") };
        run.others.push(pid.parse().unwrap());
        let token: FencingToken = token.parse().unwrap();
        assert_eq!((lock, owner), ("jobs/nightly", "runner-1"));
        assert!(token.get() > 0);

        step("the cluster shows the same holder and token while the command runs");
        let view = client.get("jobs/nightly").await.unwrap().expect("held while the command runs");
        assert_eq!((view.owner.as_str(), view.token), ("runner-1", token));

        step("the command exits 7; so does leasehold run, after releasing");
        std::fs::write(&go_file, "").unwrap();
        let status = run.wait_exit(Duration::from_secs(30)).await.expect("leasehold run exits");
        let log = std::fs::read_to_string(&stderr).unwrap_or_default();
        assert_eq!(status.code(), Some(7), "stderr:\n{log}");
        assert!(client.get("jobs/nightly").await.unwrap().is_none(), "released after the command");

        step("a command killed by a signal: 128 + signal");
        let mut run = Procs::spawn(&mut leasehold_run(
            &cluster.endpoints(),
            &stderr,
            &["--lock", "jobs/nightly", "--ttl", "3s"],
            &["sh", "-c", "kill -KILL $$"],
        ));
        let status = run.wait_exit(Duration::from_secs(30)).await.expect("leasehold run exits");
        assert_eq!(status.code(), Some(128 + 9));

        step("a held lock: leasehold run fails without running the command");
        let holder = client.acquire("jobs/nightly", "someone-else", TTL_MS).await.unwrap();
        let marker = file_in(&cluster, "ran");
        let mut run = Procs::spawn(&mut leasehold_run(
            &cluster.endpoints(),
            &stderr,
            &["--lock", "jobs/nightly", "--ttl", "3s"],
            &["touch", marker.to_str().unwrap()],
        ));
        let status = run.wait_exit(Duration::from_secs(30)).await.expect("leasehold run exits");
        let log = std::fs::read_to_string(&stderr).unwrap_or_default();
        assert_eq!(status.code(), Some(leasehold_client::run::EXIT_ACQUIRE_FAILED), "stderr:\n{log}");
        assert!(log.contains("is held by \"someone-else\""), "stderr:\n{log}");
        assert!(!marker.exists());
        client.release("jobs/nightly", holder.token()).await.unwrap();
    })
    .await;
}

// Ensures `leasehold run` stops its command when the lock is lost (every node
// SIGSTOPped): a command that ignores SIGTERM is SIGKILLed after the grace
// period, and `leasehold run` exits with the lock-lost status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_kills_the_command_when_the_lock_is_lost() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let client = cluster.client();
        let pid_file = file_in(&cluster, "pid");
        let stderr = file_in(&cluster, "run.stderr");

        step("leasehold run a command that ignores SIGTERM");
        // `exec` keeps the PID; the ignored SIGTERM survives the exec.
        let script = r#"trap '' TERM; echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 600"#;
        let mut run = Procs::spawn(&mut leasehold_run(
            &cluster.endpoints(),
            &stderr,
            &["--lock", "jobs/fragile", "--ttl", "3s", "--grace", "1s", "--owner", "runner-2"],
            &["sh", "-c", script, "sh", pid_file.to_str().unwrap()],
        ));
        let pid: i32 = read_line_when_written(&pid_file, Duration::from_secs(30)).await.parse().unwrap();
        run.others.push(pid);
        assert_eq!(kill(Pid::from_raw(pid), None), Ok(()), "the command runs");
        let view = client.get("jobs/fragile").await.unwrap().expect("held while the command runs");
        assert_eq!(view.owner, "runner-2");

        step("SIGSTOP every node");
        stop_every_node(&cluster);

        step("leasehold run exits with the lock-lost status, its command gone");
        // Safety bound, not speed: lost by ttl, SIGKILL after 1 s of grace,
        // at most 2 s of release attempt, and plenty of slack.
        let status = run.wait_exit(Duration::from_secs(30)).await;
        let log = std::fs::read_to_string(&stderr).unwrap_or_default();
        let status = status.unwrap_or_else(|| panic!("leasehold run still running; stderr:\n{log}"));
        assert_eq!(status.code(), Some(leasehold_client::run::EXIT_LOCK_LOST), "stderr:\n{log}");
        assert_eq!(kill(Pid::from_raw(pid), None), Err(Errno::ESRCH), "the command still exists");
        assert!(log.contains("lost lock \"jobs/fragile\""), "stderr:\n{log}");
        assert!(log.contains("SIGKILL"), "stderr:\n{log}");
    })
    .await;
}

// Ensures `leasehold run` never overlaps the next holder: its renewals cut
// off (its only node SIGSTOPped, while the other two keep the cluster's
// time) and its command ignoring SIGTERM, the command has ended by the time
// the cluster grants the lock to a waiting owner, although the default
// grace (5 s) is longer than the whole ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_stops_the_command_before_the_lock_can_pass_on() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        let cut_off = cluster.follower_of(leader);
        let others: Vec<String> =
            cluster.ids().into_iter().filter(|id| *id != cut_off).map(|id| cluster.endpoint(id)).collect();
        let next_holder = Client::new(&others).unwrap();
        let pid_file = file_in(&cluster, "pid");
        let stderr = file_in(&cluster, "run.stderr");

        step(&format!("leasehold run, through node {cut_off} alone, a command that ignores SIGTERM"));
        let script = r#"trap '' TERM; echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 600"#;
        // A drift margin of a third of the ttl: the kill is due that long
        // before the cluster can expire the lease, room enough for this
        // shared machine's scheduling delays.
        let mut run = Procs::spawn(&mut leasehold_run(
            &[cluster.endpoint(cut_off)],
            &stderr,
            &["--lock", "jobs/overlap", "--ttl", "3s", "--drift-margin", "1s", "--owner", "runner-3"],
            &["sh", "-c", script, "sh", pid_file.to_str().unwrap()],
        ));
        let pid: i32 = read_line_when_written(&pid_file, Duration::from_secs(30)).await.parse().unwrap();
        run.others.push(pid);
        let view = next_holder.get("jobs/overlap").await.unwrap().expect("held while the command runs");
        assert_eq!(view.owner, "runner-3");
        assert!(!has_ended(pid), "the command runs");

        step(&format!("SIGSTOP node {cut_off}; another owner waits for the lock on the others"));
        cluster.signal(cut_off, Signal::SIGSTOP);
        let wait = AcquireOptions { wait: Some(Duration::from_secs(60)), ..AcquireOptions::default() };
        let granted = next_holder.acquire_with("jobs/overlap", "next", TTL_MS, &wait).await.unwrap();
        let command_ended = has_ended(pid);
        let log = std::fs::read_to_string(&stderr).unwrap_or_default();
        assert!(
            command_ended,
            "the lock passed on (token {}) while the command still ran; stderr:\n{log}",
            granted.token()
        );
        assert!(granted.token() > view.token);

        step("leasehold run exits with the lock-lost status");
        let status = run.wait_exit(Duration::from_secs(30)).await;
        let log = std::fs::read_to_string(&stderr).unwrap_or_default();
        let status = status.unwrap_or_else(|| panic!("leasehold run still running; stderr:\n{log}"));
        assert_eq!(status.code(), Some(leasehold_client::run::EXIT_LOCK_LOST), "stderr:\n{log}");
        assert!(log.contains("SIGKILL"), "stderr:\n{log}");
    })
    .await;
}
