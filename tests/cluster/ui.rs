//! The status page in headless Chromium (Debian's `chromium` package), driven
//! through its DevTools protocol: on a real 3-node cluster, the page served
//! by a follower shows the leader, every member, a lock the test acquired,
//! and the acquire of a second lock in its live event feed; with tokens on,
//! it asks for the token and then does the same, sending the token on every
//! request to its own origin only.
//!
//! `--dump-dom` cannot be used: the page keeps its event stream open, and
//! `--virtual-time-budget` waits for open requests to finish, so the dump
//! would never come. The DevTools protocol runs over two pipes (Chromium
//! reads fd 3, writes fd 4: `--remote-debugging-pipe`), so no port is opened.

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{
    bounded, start_cluster, start_secured_cluster, step, Material, ADMIN_TOKEN, CLIENT_TOKEN, WRONG_TOKEN,
};
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
    /// The page's `Network.requestWillBeSent` and `Network.responseReceived`
    /// events, in the order Chromium sent them.
    network: Vec<Value>,
    // Fields drop in order: Chromium is killed before its profile is removed.
    _group: ChromiumGroup,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium and opens `url` in a new page, whose requests it
    /// watches from the first.
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
            network: Vec::new(),
            _group: group,
            _profile: profile,
        };
        let target = browser.call(None, "Target.createTarget", json!({ "url": "about:blank" })).await;
        let target_id = target["targetId"].as_str().expect("targetId").to_owned();
        let attached =
            browser.call(None, "Target.attachToTarget", json!({ "targetId": target_id, "flatten": true })).await;
        browser.session = attached["sessionId"].as_str().expect("sessionId").to_owned();
        let session = browser.session.clone();
        browser.call(Some(&session), "Network.enable", json!({})).await;
        browser.call(Some(&session), "Page.navigate", json!({ "url": url })).await;
        // Navigation has only begun: wait until the page and its script are loaded.
        browser.wait_until("location.href !== 'about:blank' && document.readyState === 'complete'").await;
        browser
    }

    /// Sends one command and returns its result.
    async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let reply = self.send(session, method, params).await;
        assert!(reply.get("error").is_none(), "{method}: {reply}");
        reply["result"].clone()
    }

    /// Sends one command and returns Chromium's whole answer, an error or a
    /// result (events in between are skipped, but for the page's requests
    /// and responses: kept in `network`).
    async fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
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
                    return reply;
                }
                if matches!(reply["method"].as_str(), Some("Network.requestWillBeSent" | "Network.responseReceived")) {
                    self.network.push(reply["params"].clone());
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("chromium did not answer {method} in time"))
    }

    /// The value of the JavaScript `expression`, evaluated in the page (a
    /// promise's once it settles).
    async fn eval(&mut self, expression: &str) -> Value {
        self.try_eval(expression).await.unwrap_or_else(|reply| panic!("{expression}: {reply}"))
    }

    /// Like [`Browser::eval`], but returns Chromium's answer as the error
    /// when the page has no document to evaluate in (between the two of a
    /// reload) or the expression threw.
    async fn try_eval(&mut self, expression: &str) -> Result<Value, Value> {
        let session = self.session.clone();
        let params = json!({ "expression": expression, "returnByValue": true, "awaitPromise": true });
        let reply = self.send(Some(&session), "Runtime.evaluate", params).await;
        if reply.get("error").is_some() || reply["result"].get("exceptionDetails").is_some() {
            return Err(reply);
        }
        Ok(reply["result"]["result"]["value"].clone())
    }

    /// The page's DOM as HTML now.
    async fn html(&mut self) -> String {
        self.eval("document.documentElement.outerHTML").await.as_str().unwrap_or_default().to_owned()
    }

    /// Waits (bounded) until the JavaScript `condition` is true in the page
    /// (also across a reload).
    async fn wait_until(&mut self, condition: &str) {
        let give_up = Instant::now() + PAGE_BOUND;
        while self.try_eval(condition).await != Ok(json!(true)) {
            assert!(Instant::now() < give_up, "never true in the page: {condition}\n{}", self.html().await);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Types `token` into the page's token form and submits it, as a person
    /// would (the form must be showing).
    async fn enter_token(&mut self, token: &str) {
        let fill = format!(
            "(() => {{ const form = document.getElementById('auth'); if (form.hidden) return false; \
             document.getElementById('auth-token').value = {}; form.requestSubmit(); return true; }})()",
            json!(token)
        );
        assert_eq!(self.eval(&fill).await, json!(true), "the token form is not showing");
    }

    /// Waits (bounded) until `done` holds of the network events from index
    /// `since` on, evaluating nothing but reading what Chromium reports.
    async fn wait_for_network(&mut self, since: usize, what: &str, done: impl Fn(&[Value]) -> bool) {
        let give_up = Instant::now() + PAGE_BOUND;
        while !done(&self.network[since..]) {
            assert!(
                Instant::now() < give_up,
                "the page never {what}; it sent: {:#?}",
                requests(&self.network[since..])
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            self.eval("0").await;
        }
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

/// The requests among `network` events (`Network.Request` objects, with
/// `requestId` and `type` added).
fn requests(network: &[Value]) -> Vec<Value> {
    network
        .iter()
        .filter(|e| e.get("request").is_some())
        .map(|e| {
            let mut request = e["request"].clone();
            request["requestId"] = e["requestId"].clone();
            request["type"] = e["type"].clone();
            request
        })
        .collect()
}

/// Header `name` of a `Network.Request` (names in any case).
fn header<'a>(request: &'a Value, name: &str) -> Option<&'a str> {
    let headers = request["headers"].as_object()?;
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).and_then(|(_, v)| v.as_str())
}

/// Whether `network` holds a 200 answer to the request `requestId`.
fn answered_ok(network: &[Value], request_id: &Value) -> bool {
    network.iter().any(|e| e["requestId"] == *request_id && e["response"]["status"] == 200)
}

/// Whether `network` has a 200 answer to a request of the event stream that
/// named `last_id` as its Last-Event-ID (`None`: named none).
fn events_opened(network: &[Value], last_id: Option<&str>) -> bool {
    requests(network).iter().any(|r| {
        r["url"].as_str().is_some_and(|u| u.ends_with("/v1/events"))
            && header(r, "last-event-id") == last_id
            && answered_ok(network, &r["requestId"])
    })
}

// Ensures the status page, loaded from a follower in headless Chromium, shows
// the cluster's leader, every member and the lock the test acquired with its
// holder and token, and that a later acquire appears in its event feed; then
// a session's multi-lock: the session, its locks, the counts and its events;
// then an election: its leader and value, and the proclaim in the feed.
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
        assert_eq!(page.eval("document.getElementById('auth').hidden").await, json!(true), "no token was asked for");

        step("an acquire shows in the live event feed");
        page.wait_for_network(0, "opened its event stream", |n| events_opened(n, None)).await;
        let second = client.acquire("ui/ledger", "ui-worker-2", 60_000).await.unwrap();
        page.wait_for(&[format!("#{t} acquired ui/ledger ui-worker-2 token {t} by admin", t = second.token())]).await;

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

        step("an election shows with its leader and value, and its proclaim in the feed");
        let value = json!({"addr": "10.0.0.5"});
        let (elected, _) = client.campaign("ui/primary", "ui-sched", &value, 60_000, None).await.unwrap();
        let t = elected.token;
        page.wait_for(&[
            "data-election=\"ui/primary\"".to_owned(),
            "<td>ui-sched</td>".to_owned(),
            format!("<td>{value}</td>"),
            format!("#{t} proclaimed ui/primary ui-sched token {t} value {value}"),
        ])
        .await;

        step("the feed filtered by principal: ?by=cluster shows an expiry, not the acquire before it");
        let since = page.network.len();
        // The submit reloads the page: its answer may be lost with the old document.
        let submit = "document.getElementById('by').value = 'cluster'; \
                      document.getElementById('by-filter').requestSubmit()";
        let _ = page.try_eval(submit).await;
        page.wait_until("location.search === '?by=cluster' && document.getElementById('by').value === 'cluster'").await;
        let filtered = |n: &[Value]| {
            requests(n).iter().any(|r| {
                r["url"].as_str().is_some_and(|u| u.ends_with("/v1/events?by=cluster"))
                    && answered_ok(n, &r["requestId"])
            })
        };
        page.wait_for_network(since, "opened its filtered event stream", filtered).await;
        let brief = client.acquire("ui/brief", "ui-worker-3", 3_000).await.unwrap();
        let t = brief.token();
        let html = page.wait_for(&[format!("expired ui/brief ui-worker-3 token {t} by cluster")]).await;
        assert!(!html.contains("acquired ui/brief"), "the acquire was the admin's, not the cluster's:\n{html}");
        assert!(html.contains("showing only events caused by cluster"), "{html}");

        step("the root path serves the same page");
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let root = http.get(format!("http://{}/", cluster.endpoint(leader))).send().await.unwrap();
        assert!(root.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
        assert!(root.text().await.unwrap().contains("<title>leasehold</title>"));
    })
    .await;
}

// Ensures the status page works with tokens on: loaded from a follower it
// asks for a token (on the 401), says so when one is refused (403), and with
// the client token shows the held lock and a later acquire in its feed; every
// request carries the token and goes to the page's own origin; the token is
// kept in sessionStorage only (not localStorage, not the URL, not the DOM),
// so a reload needs no new prompt; and when its node restarts the feed
// reconnects on its own, naming the last event it saw in Last-Event-ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_asks_for_the_token() {
    bounded(async {
        let material = Material::new();
        let mut cluster = start_secured_cluster(3, material.secrets(), &[]).await;
        let leader = cluster.wait_for_leader(crate::common::ELECTION_BOUND).await.unwrap();
        let follower = cluster.follower_of(leader);
        let client = cluster.client();
        let lease = client.acquire("ui/vault", "ui-keeper", 60_000).await.unwrap();
        let origin = format!("http://{}", cluster.endpoint(follower));

        step("the page's event-stream parser reads split lines, comments, types, ids and empty data");
        let mut page = Browser::open(&format!("{origin}/ui")).await;
        let parsed = page
            .eval(
                r#"(() => {
                    const got = [], ids = [];
                    const parse = eventStreamParser((type, data) => got.push([type, data]), id => ids.push(id));
                    for (const piece of ["data: a\r", "\ndata: b\r\n\r\n", ": keep-alive\n\n", "id: 7\nevent: acq",
                                         "uired\ndata:{\"x\":1}\n\n", "data\n\nid: 8\n\n", "data: unfinished\n"]) {
                      parse(piece);
                    }
                    return [got, ids];
                })()"#,
            )
            .await;
        assert_eq!(
            parsed,
            json!([[["message", "a\nb"], ["acquired", "{\"x\":1}"], ["message", ""]], ["7", "8"]]),
            "events as the HTML standard reads them"
        );

        step("without a token the page asks for one and shows no lock");
        page.wait_until("!document.getElementById('auth').hidden").await;
        page.wait_until("document.getElementById('auth-note').textContent.startsWith('unauthenticated')").await;
        assert!(!page.html().await.contains("data-lock"), "a lock shows without a token");

        step("a wrong token is refused: the form shows again and says so");
        page.enter_token(WRONG_TOKEN).await;
        page.wait_until(
            "!document.getElementById('auth').hidden && \
             document.getElementById('auth-note').textContent.startsWith('permission_denied')",
        )
        .await;
        assert!(!page.html().await.contains("data-lock"), "a lock shows with a wrong token");

        step("with the client token the page shows the held lock");
        let since_token = page.network.len();
        page.enter_token(CLIENT_TOKEN).await;
        page.wait_for(&[
            "data-lock=\"ui/vault\"".to_owned(),
            "<td>ui-keeper</td>".to_owned(),
            format!("<td class=\"num\">{}</td>", lease.token()),
        ])
        .await;
        assert_eq!(page.eval("document.getElementById('auth').hidden").await, json!(true), "the form stays up");

        step("an acquire made after the page loaded shows in its feed");
        page.wait_for_network(since_token, "opened its event stream with the token", |n| events_opened(n, None)).await;
        let second = client.acquire("ui/ledger", "ui-clerk", 60_000).await.unwrap();
        let t = second.token();
        page.wait_for(&[format!("#{t} acquired ui/ledger ui-clerk token {t}")]).await;

        step("every request since carries the token, to the page's own origin only");
        let since_shown = page.network.len();
        let polled = |n: &[Value]| {
            let urls: Vec<String> = requests(n).iter().filter_map(|r| r["url"].as_str().map(str::to_owned)).collect();
            ["/v1/cluster/nodes", "/v1/locks?", "/v1/sessions?"].iter().all(|p| urls.iter().any(|u| u.contains(p)))
        };
        page.wait_for_network(since_shown, "polled every endpoint", polled).await;
        for request in requests(&page.network[since_token..]) {
            let url = request["url"].as_str().unwrap_or_default();
            assert!(url.starts_with(&format!("{origin}/")), "a request left the page's origin: {request:#}");
            assert_eq!(request["type"], "Fetch", "{request:#}");
            let auth = header(&request, "authorization");
            // The wrong token's requests may still be under way when the right one is entered.
            let wrong = format!("Bearer {WRONG_TOKEN}");
            if auth != Some(wrong.as_str()) {
                assert_eq!(auth, Some(format!("Bearer {CLIENT_TOKEN}").as_str()), "{request:#}");
            }
        }
        for request in requests(&page.network[since_shown..]) {
            assert_eq!(header(&request, "authorization"), Some(format!("Bearer {CLIENT_TOKEN}").as_str()));
        }

        step("the token is in sessionStorage only: not in localStorage, the URL, the DOM or a cookie");
        assert_eq!(page.eval("location.href").await, json!(format!("{origin}/ui")));
        assert_eq!(page.eval("localStorage.length").await, json!(0), "localStorage holds something");
        let kept = format!("Object.values(sessionStorage).includes({})", json!(CLIENT_TOKEN));
        assert_eq!(page.eval(&kept).await, json!(true), "the token is not in sessionStorage");
        assert_eq!(page.eval("document.getElementById('auth-token').value").await, json!(""));
        assert!(!page.html().await.contains(CLIENT_TOKEN), "the token is in the DOM");
        assert!(!page.eval("document.cookie").await.as_str().unwrap_or_default().contains(CLIENT_TOKEN));

        step("the page's node restarts: the feed reconnects by itself, naming the last event seen");
        let since_restart = page.network.len();
        cluster.kill(follower);
        cluster.start(follower).unwrap();
        let last_id = t.to_string();
        page.wait_for_network(since_restart, "reopened its event stream with Last-Event-ID", |n| {
            events_opened(n, Some(&last_id))
        })
        .await;
        let third = client.acquire("ui/archive", "ui-clerk", 60_000).await.unwrap();
        page.wait_for(&[format!("#{t} acquired ui/archive ui-clerk token {t}", t = third.token())]).await;

        step("the page refuses to send the token to another origin, and its policy says so");
        let elsewhere = format!("http://{}/v1/locks", cluster.endpoint(leader));
        let since_elsewhere = page.network.len();
        let tried =
            page.eval(&format!("request({}).then(() => 'sent', e => 'refused: ' + e.message)", json!(elsewhere))).await;
        assert!(tried.as_str().is_some_and(|t| t.starts_with("refused")), "{tried}");
        page.eval("0").await;
        for request in requests(&page.network[since_elsewhere..]) {
            assert!(request["url"].as_str().unwrap_or_default().starts_with(&format!("{origin}/")), "{request:#}");
        }
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let reply = http.get(format!("{origin}/ui")).send().await.unwrap();
        assert!(reply.status().is_success(), "the page itself needs no token: {}", reply.status());
        let policy = reply.headers()["content-security-policy"].to_str().unwrap().to_owned();
        for directive in ["default-src 'none'", "connect-src 'self'", "form-action 'none'", "frame-ancestors 'none'"] {
            assert!(policy.contains(directive), "{directive} not in {policy}");
        }

        step("a reload keeps the token for the browser session: no new prompt");
        page.eval("window.beforeReload = true").await;
        page.eval("location.reload(), true").await;
        page.wait_until(
            "window.beforeReload === undefined && document.querySelector('[data-lock=\"ui/archive\"]') !== null",
        )
        .await;
        assert_eq!(
            page.eval("document.getElementById('auth').hidden").await,
            json!(true),
            "asked again after a reload"
        );

        step("the admin token opens the page too");
        page.eval("window.beforeReload = true, sessionStorage.clear(), location.reload(), true").await;
        page.wait_until("window.beforeReload === undefined && !document.getElementById('auth').hidden").await;
        page.enter_token(ADMIN_TOKEN).await;
        page.wait_for(&["data-lock=\"ui/ledger\"".to_owned()]).await;
    })
    .await;
}
