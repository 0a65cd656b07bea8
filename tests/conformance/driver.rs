//! A driver process (`clients/conformance/drivers/<language>`) and the JSON-lines
//! protocol of `clients/conformance/PROTOCOL.md`: requests on its stdin, answers,
//! matched by `id`, from its stdout. The process is killed by its PID when
//! the [`Driver`] is dropped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long a driver may take to say it is ready (an interpreter starting
/// on a busy machine).
const READY_BOUND: Duration = Duration::from_secs(30);
/// How long one request may take unless the scenario says otherwise.
pub const CALL_BOUND: Duration = Duration::from_secs(30);

/// One answer line, with the instant it was read.
#[derive(Debug, Clone)]
pub struct Answer {
    pub at: Instant,
    pub body: Value,
}

impl Answer {
    pub fn ok(&self) -> bool {
        self.body["ok"] == json!(true)
    }

    /// This answer if it is a success, else the failure as a message.
    pub fn success(self) -> Result<Answer, String> {
        if self.ok() {
            Ok(self)
        } else {
            Err(format!("expected success, got {}", self.body))
        }
    }
}

type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Answer>>>>;

pub struct Driver {
    child: Child,
    stdin: ChildStdin,
    waiting: Waiting,
    next_id: u64,
    stderr: PathBuf,
    reader: JoinHandle<()>,
}

/// An answer still to come.
pub struct Pending {
    op: String,
    answer: oneshot::Receiver<Answer>,
}

impl Pending {
    /// The answer, or an error when it did not come within `bound`.
    pub async fn answer(self, bound: Duration) -> Result<Answer, String> {
        match tokio::time::timeout(bound, self.answer).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(format!("the driver exited before answering {}", self.op)),
            Err(_) => Err(format!("no answer to {} within {bound:?}", self.op)),
        }
    }
}

impl Driver {
    /// Starts `program` against `endpoints` and waits for its ready line.
    /// Its stderr goes to a file in `dir`, shown when a scenario fails.
    pub async fn start(program: &Path, endpoints: &[String], dir: &Path, run: usize) -> Result<Driver, String> {
        let stderr = dir.join(format!("driver-{run}.stderr"));
        let stderr_file = std::fs::File::create(&stderr).map_err(|e| e.to_string())?;
        let mut child = Command::new(program)
            .env("LEASEHOLD_ENDPOINTS", endpoints.join(","))
            .env("LEASEHOLD_RETRY_BUDGET_MS", "8000")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr_file))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let ready = tokio::time::timeout(READY_BOUND, lines.next_line()).await;
        match ready {
            Ok(Ok(Some(line))) if serde_json::from_str::<Value>(&line).is_ok_and(|v| v["ready"] == json!(true)) => {}
            other => {
                let log = std::fs::read_to_string(&stderr).unwrap_or_default();
                return Err(format!("{} did not say ready: {other:?}\n{log}", program.display()));
            }
        }
        let waiting: Waiting = Arc::default();
        let reader = tokio::spawn({
            let waiting = Arc::clone(&waiting);
            async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    let at = Instant::now();
                    let Ok(body) = serde_json::from_str::<Value>(&line) else { continue };
                    let Some(id) = body["id"].as_u64() else { continue };
                    if let Some(sender) = waiting.lock().unwrap().remove(&id) {
                        let _ = sender.send(Answer { at, body });
                    }
                }
            }
        });
        Ok(Driver { child, stdin, waiting, next_id: 1, stderr, reader })
    }

    /// Sends one request; its answer comes through the [`Pending`].
    pub async fn send(&mut self, op: &str, arguments: Value) -> Result<Pending, String> {
        let id = self.next_id;
        self.next_id += 1;
        let mut request = arguments;
        request["id"] = json!(id);
        request["op"] = json!(op);
        let (sender, answer) = oneshot::channel();
        self.waiting.lock().unwrap().insert(id, sender);
        let line = format!("{request}\n");
        self.stdin.write_all(line.as_bytes()).await.map_err(|e| format!("driver stdin: {e}"))?;
        self.stdin.flush().await.map_err(|e| format!("driver stdin: {e}"))?;
        Ok(Pending { op: op.to_string(), answer })
    }

    /// Sends one request and waits (bounded) for its answer.
    pub async fn call(&mut self, op: &str, arguments: Value) -> Result<Answer, String> {
        self.send(op, arguments).await?.answer(CALL_BOUND).await
    }

    pub fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.child.id().expect("the driver runs") as i32)
    }

    /// The driver's stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Asks the driver to exit, and kills it if it does not within a second.
    pub async fn shutdown(mut self) {
        if let Ok(pending) = self.send("shutdown", json!({})).await {
            let _ = pending.answer(Duration::from_secs(1)).await;
        }
        if tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await.is_err() {
            let _ = self.child.kill().await;
        }
        self.reader.abort();
    }
}
