//! The status page in headless Chromium (Debian's `chromium` package), driven
//! through its DevTools protocol: on a real 3-node cluster, the page served
//! by a follower shows the leader, every member, a lock the test acquired,
//! and the acquire of a second lock in its live event feed.
//!
//! `--dump-dom` cannot be used: the page keeps its event stream open, and
//! `--virtual-time-budget` waits for open requests to finish, so the dump
//! would never come. The DevTools protocol runs over two pipes (Chromium
//! reads fd 3, writes fd 4: `--remote-debugging-pipe`), so no port is opened.

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{bounded, start_cluster, step};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const CHROMIUM: &str = "/usr/bin/chromium";
/// Real time one DevTools answer may take (Chromium starts slowly on a
/// loaded machine).
const ANSWER_BOUND: Duration = Duration::from_secs(60);
/// Real time the page may take to show what a test waits for.
const PAGE_BOUND: Duration = Duration::from_secs(30);

/// Chromium's process group (its own, made at spawn): every process in it
/// (renderers, zygote) is killed when the test is done with it.
struct ChromiumGroup(i32);

impl Drop for ChromiumGroup {
    fn drop(&mut self) {
        // ESRCH: the whole group has exited already.
        let _ = killpg(Pid::from_raw(self.0), Signal::SIGKILL);
    }
}

/// One headless Chromium with one page, spoken to over its DevTools pipes.
struct Browser {
    to_chromium: tokio::fs::File,
    from_chromium: BufReader<tokio::fs::File>,
    next_id: u64,
    session: String,
    // Fields drop in order: Chromium is killed before its profile is removed.
    _group: ChromiumGroup,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium and opens `url` in a new page.
    async fn open(url: &str) -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        // Close-on-exec, so Chromium's children inherit none of them; dup2
        // clears the flag on the two copies Chromium is meant to have.
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let ((chromium_reads, we_write), (we_read, chromium_writes)) = (pipe(), pipe());
        let (child_in, child_out) = (chromium_reads.as_raw_fd(), chromium_writes.as_raw_fd());
        assert!(child_in > 4 && child_out > 4, "a pipe end is already at fd 3 or 4");
        let mut command = tokio::process::Command::new(CHROMIUM);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        // SAFETY: between fork and exec only dup2 runs, which is
        // async-signal-safe; it puts the pipe ends where Chromium expects them.
        unsafe {
            command.pre_exec(move || {
                nix::unistd::dup2(child_in, 3)?;
                nix::unistd::dup2(child_out, 4)?;
                Ok(())
            });
        }
        let child = command.spawn().expect("chromium starts (apt-get install chromium)");
        let group = ChromiumGroup(child.id().expect("chromium pid") as i32);
        // The child has its copies; ours must close so a dead Chromium reads as EOF.
        drop((chromium_reads, chromium_writes));
        let mut browser = Browser {
            to_chromium: file(we_write),
            from_chromium: BufReader::new(file(we_read)),
            next_id: 0,
            session: String::new(),
            _group: group,
            _profile: profile,
        };
        let target = browser.call(None, "Target.createTarget", json!({ "url": url })).await;
        let target_id = target["targetId"].as_str().expect("targetId").to_owned();
        let attached =
            browser.call(None, "Target.attachToTarget", json!({ "targetId": target_id, "flatten": true })).await;
        browser.session = attached["sessionId"].as_str().expect("sessionId").to_owned();
        browser
    }

    /// Sends one command and returns its result (events in between are skipped).
    async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            message["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.to_chromium.write_all(&bytes).await.expect("write to chromium");
        self.to_chromium.flush().await.expect("flush to chromium");
        tokio::time::timeout(ANSWER_BOUND, async {
            loop {
                let mut frame = Vec::new();
                let n = self.from_chromium.read_until(0, &mut frame).await.expect("read from chromium");
                assert!(n > 0, "chromium closed its DevTools pipe");
                frame.pop();
                let reply: Value = serde_json::from_slice(&frame).expect("DevTools JSON");
                if reply["id"] == id {
                    assert!(reply.get("error").is_none(), "{method}: {reply}");
                    return reply["result"].clone();
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("chromium did not answer {method} in time"))
    }

    /// The page's DOM as HTML now.
    async fn html(&mut self) -> String {
        let session = self.session.clone();
        let params = json!({ "expression": "document.documentElement.outerHTML", "returnByValue": true });
        let result = self.call(Some(&session), "Runtime.evaluate", params).await;
        result["result"]["value"].as_str().unwrap_or_default().to_owned()
    }

    /// Waits (bounded) until the page's HTML contains every one of `wanted`.
    async fn wait_for(&mut self, wanted: &[String]) -> String {
        let give_up = Instant::now() + PAGE_BOUND;
        loop {
            let html = self.html().await;
            let missing: Vec<&String> = wanted.iter().filter(|w| !html.contains(w.as_str())).collect();
            if missing.is_empty() {
                return html;
            }
            assert!(Instant::now() < give_up, "the page never showed {missing:?}:\n{html}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn file(fd: OwnedFd) -> tokio::fs::File {
    tokio::fs::File::from_std(std::fs::File::from(fd))
}

// Ensures the status page, loaded from a follower in headless Chromium, shows
// the cluster's leader, every member and the lock the test acquired with its
// holder and token, and that a later acquire appears in its event feed; then
// a session's multi-lock: the session, its locks, the counts and its events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_shows_leader_and_lock() {
    bounded(async {
        let cluster = start_cluster(3).await;
        let leader = cluster.wait_for_leader(crate::common::ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let client = cluster.client();
        let lease = client.acquire("ui/payments", "ui-worker-1", 60_000).await.unwrap();

        step("load the page from a follower in headless chromium");
        let mut page = Browser::open(&format!("http://{}/ui", cluster.endpoint(follower))).await;

        step("the page shows the leader, every member and the lock");
        let mut wanted = vec![
            format!("data-role=\"leader\" data-id=\"{leader}\""),
            format!("leader: node {leader} ({})", cluster.endpoint(leader)),
            "data-lock=\"ui/payments\"".to_owned(),
            "<td>ui-worker-1</td>".to_owned(),
            format!("<td class=\"num\">{}</td>", lease.token()),
        ];
        wanted.extend(cluster.ids().iter().map(|id| format!("data-id=\"{id}\"")));
        page.wait_for(&wanted).await;

        step("an acquire shows in the live event feed");
        let second = client.acquire("ui/ledger", "ui-worker-2", 60_000).await.unwrap();
        page.wait_for(&[format!("#{t} acquired ui/ledger ui-worker-2 token {t}", t = second.token())]).await;

        step("a session holding a multi-lock shows with its locks, in the counts and in the feed");
        let session = std::sync::Arc::new(cluster.client())
            .session("ui-batch", std::time::Duration::from_secs(60))
            .await
            .unwrap();
        let grants = session.lock_many(&["ui/a", "ui/b"], None).await.unwrap();
        let id = session.id();
        page.wait_for(&[
            format!("data-session=\"{id}\""),
            "<td>ui-batch</td>".to_owned(),
            format!("<td class=\"num\">{id}</td>"),
            "4 locks held · 1 live sessions".to_owned(),
            format!("#{id} session_created session {id} ui-batch"),
            format!("#{t} acquired ui/b ui-batch token {t}", t = grants[1].token),
        ])
        .await;
        session.close().await.unwrap();

        step("the root path serves the same page");
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let root = http.get(format!("http://{}/", cluster.endpoint(leader))).send().await.unwrap();
        assert!(root.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
        assert!(root.text().await.unwrap().contains("<title>leasehold</title>"));
    })
    .await;
}
