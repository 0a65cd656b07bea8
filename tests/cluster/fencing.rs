//! Fencing end to end on real 3-node clusters: the cluster checks tokens for
//! resources that cannot (fence check, fenced records, gates).

use leasehold_client::{ErrorCode, FencingToken};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::common::{bounded, start_cluster, step, wait_until_free, ELECTION_BOUND};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;

const TTL_MS: u64 = 3_000;

/// Kills (by PID) and reaps a child process on every path.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (bounded) until `path` exists.
async fn wait_for_file(path: &Path) {
    let give_up = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(Instant::now() < give_up, "{} never appeared", path.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// Ensures the Kleppmann scenario with real processes: client A acquires, A's
// process is stopped (SIGSTOP) past its ttl, B acquires and writes, A resumes
// and writes with its old token: A's write is rejected, B's stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_client_write_is_rejected_after_its_lease_passed_on() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let dir = tempfile::tempdir().unwrap();
        let endpoints = cluster.endpoints().join(",");
        // Client A: acquire, announce the token, wait for "go", write with it.
        let script = r#"
            set -e
            B="$1"; E="$2"; D="$3"
            "$B" acquire kleppmann --owner client-a --ttl-ms 3000 --endpoints "$E" > "$D/a.grant"
            T=$(sed -n 's/.*"token": *\([0-9]*\).*/\1/p' "$D/a.grant")
            echo "$T" > "$D/a.token.tmp" && mv "$D/a.token.tmp" "$D/a.token"
            while [ ! -e "$D/go" ]; do sleep 0.02; done
            set +e
            "$B" put-record storage --lock kleppmann --token "$T" --value '"written by A"' --endpoints "$E" > "$D/a.out" 2>&1
            echo $? > "$D/a.rc.tmp" && mv "$D/a.rc.tmp" "$D/a.rc"
        "#;
        let a = Reaped(
            Command::new("sh")
                .args(["-c", script, "client-a", env!("CARGO_BIN_EXE_leasehold"), &endpoints])
                .arg(dir.path())
                .spawn()
                .unwrap(),
        );
        let pid = Pid::from_raw(a.0.id() as i32);
        wait_for_file(&dir.path().join("a.token")).await;
        let token_a: FencingToken = std::fs::read_to_string(dir.path().join("a.token")).unwrap().trim().parse().unwrap();

        step("A is paused (SIGSTOP) past its ttl");
        kill(pid, Signal::SIGSTOP).unwrap();
        let client = cluster.client();
        let give_up = Instant::now() + Duration::from_secs(30);
        let lease_b = loop {
            match client.acquire("kleppmann", "client-b", TTL_MS).await {
                Ok(lease) => break lease,
                Err(e) if e.code() == Some(ErrorCode::Held) => {
                    assert!(Instant::now() < give_up, "A's lease never expired");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert!(lease_b.token() > token_a);
        step("B writes under its token");
        client.put_record("storage", "kleppmann", lease_b.token(), &json!("written by B")).await.unwrap();

        step("A resumes and writes with its stale token");
        std::fs::write(dir.path().join("go"), b"").unwrap();
        kill(pid, Signal::SIGCONT).unwrap();
        wait_for_file(&dir.path().join("a.rc")).await;
        let rc = std::fs::read_to_string(dir.path().join("a.rc")).unwrap();
        let out = std::fs::read_to_string(dir.path().join("a.out")).unwrap();
        assert_ne!(rc.trim(), "0", "A's stale write was accepted: {out}");
        assert!(out.contains("stale_token"), "{out}");

        step("the record is B's, and A's token is not current");
        let record = client.get_record("storage").await.unwrap().expect("record");
        assert_eq!((record.value, record.token), (json!("written by B"), lease_b.token()));
        assert_eq!(client.check("kleppmann", token_a).await.unwrap(), (false, Some(lease_b.token())));
        assert_eq!(client.check("kleppmann", lease_b.token()).await.unwrap(), (true, Some(lease_b.token())));
    })
    .await;
}

// Ensures a fenced write after release and after expiry is rejected, and that
// tokens are compared per lock name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_after_release_or_expiry_are_rejected() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let client = cluster.client();
        let lease = client.acquire("acct-1", "w1", TTL_MS).await.unwrap();
        client.put_record("balance-1", "acct-1", lease.token(), &json!({"balance": 100})).await.unwrap();

        step("another lock's token does not count, even a higher one");
        let other = client.acquire("acct-2", "w2", 60_000).await.unwrap();
        assert!(other.token() > lease.token());
        let err = client.put_record("balance-1", "acct-1", other.token(), &json!({"balance": 0})).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::StaleToken));

        step("after release");
        client.release("acct-1", lease.token()).await.unwrap();
        let err = client.put_record("balance-1", "acct-1", lease.token(), &json!({"balance": 1})).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::StaleToken));
        assert!(
            matches!(&err, leasehold_client::ClientError::Api { error, .. } if error.details["current_token"].is_null())
        );

        step("after expiry");
        let expiring = client.acquire("acct-1", "w3", TTL_MS).await.unwrap();
        wait_until_free(&client, "acct-1", Duration::from_secs(30)).await;
        let err = client.put_record("balance-1", "acct-1", expiring.token(), &json!({"balance": 2})).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::StaleToken));

        let record = client.get_record("balance-1").await.unwrap().expect("record");
        assert_eq!(
            (record.value, record.token),
            (json!({"balance": 100}), lease.token()),
            "refused writes changed nothing"
        );
    })
    .await;
}

// Ensures the gate admits increasing tokens and rejects a lower one, across a
// kill -9 of the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_keeps_its_high_water_mark_across_leader_kill() {
    bounded(async {
        let mut cluster = start_cluster(3).await;
        let client = cluster.client();
        let first = client.acquire("printer-lock", "a", 60_000).await.unwrap();
        client.gate("printer", "printer-lock", first.token()).await.unwrap();
        client.release("printer-lock", first.token()).await.unwrap();
        let second = client.acquire("printer-lock", "b", 60_000).await.unwrap();
        client.gate("printer", "printer-lock", second.token()).await.unwrap();

        let leader = cluster.wait_for_leader(ELECTION_BOUND).await.unwrap();
        step(&format!("kill -9 the leader (node {leader})"));
        cluster.kill(leader);
        cluster.wait_for_leader(ELECTION_BOUND).await.unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));

        step("the lower token is refused, the current one still admitted");
        let err = client.gate("printer", "printer-lock", first.token()).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::StaleToken));
        client.gate("printer", "printer-lock", second.token()).await.unwrap();
        client.release("printer-lock", second.token()).await.unwrap();
        let third = client.acquire("printer-lock", "c", 60_000).await.unwrap();
        client.gate("printer", "printer-lock", third.token()).await.unwrap();
        let err = client.gate("printer", "printer-lock", second.token()).await.unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::StaleToken));
    })
    .await;
}
