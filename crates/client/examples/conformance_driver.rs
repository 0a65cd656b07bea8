//! The Rust client's conformance driver (`clients/conformance/PROTOCOL.md`): JSON
//! lines on stdin, each run through the client's public API in a task of
//! its own, one answer line per request on stdout. It holds no lock logic:
//! guards, watchdogs, retries and deadlines are the client's.
//!
//! Built with `cargo build -p leasehold-client --example conformance_driver`
//! and started by `clients/conformance/drivers/rust`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_client::{
    AcquireOptions, Client, ClientError, Credentials, FencingToken, Lock, LockOptions, LockSet, LostReason, Secret,
    Session, SessionOptions,
};
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Mutex};

/// What a handle names.
enum Guard {
    Lock(Lock),
    /// Shared, so a waiting `session_lock` does not hold the table.
    Session(Arc<Session>),
    Set(LockSet),
}

struct Driver {
    client: Arc<Client>,
    guards: Mutex<HashMap<String, Guard>>,
    next_handle: std::sync::atomic::AtomicU64,
}

/// Why a request failed, as the protocol's `error` object.
struct Failure(Value);

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Failure {
        let (kind, code, status) = match &error {
            ClientError::Api { status, error } => ("api", json!(error.code), json!(status)),
            ClientError::Unavailable(_) | ClientError::Decode(_) => ("unavailable", Value::Null, Value::Null),
            ClientError::InvalidEndpoint(_) | ClientError::InvalidArgument(_) => ("invalid", Value::Null, Value::Null),
        };
        Failure(json!({"kind": kind, "code": code, "status": status, "message": error.to_string()}))
    }
}

fn invalid(message: impl Into<String>) -> Failure {
    Failure(json!({"kind": "invalid", "code": null, "status": null, "message": message.into()}))
}

type Answer = Result<Map<String, Value>, Failure>;

/// The request's argument `key`, as `T`.
fn arg<T: serde::de::DeserializeOwned>(request: &Value, key: &str) -> Result<T, Failure> {
    serde_json::from_value(request.get(key).cloned().unwrap_or(Value::Null))
        .map_err(|e| invalid(format!("argument {key}: {e}")))
}

fn optional_ms(request: &Value, key: &str) -> Result<Option<Duration>, Failure> {
    Ok(arg::<Option<u64>>(request, key)?.map(Duration::from_millis))
}

fn fields(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn lost_fields(reason: Option<LostReason>) -> Map<String, Value> {
    let (reason, code) = match reason {
        None => (Value::Null, Value::Null),
        Some(LostReason::Expired { .. }) => (json!("expired"), Value::Null),
        Some(LostReason::Revoked { code, .. }) => (json!("revoked"), json!(code)),
        Some(LostReason::Ended) => (json!("ended"), Value::Null),
    };
    fields(json!({"reason": reason, "code": code}))
}

/// Milliseconds from now to `deadline`, negative once passed.
fn remaining_ms(deadline: Instant) -> i64 {
    let now = Instant::now();
    if deadline >= now {
        (deadline - now).as_millis() as i64
    } else {
        -((now - deadline).as_millis() as i64)
    }
}

impl Driver {
    fn new_handle(&self, kind: &str) -> String {
        let n = self.next_handle.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{kind}-{n}")
    }

    async fn keep(&self, kind: &str, guard: Guard) -> String {
        let handle = self.new_handle(kind);
        self.guards.lock().await.insert(handle.clone(), guard);
        handle
    }

    async fn take(&self, request: &Value) -> Result<Guard, Failure> {
        let handle: String = arg(request, "handle")?;
        self.guards.lock().await.remove(&handle).ok_or_else(|| invalid(format!("no handle {handle}")))
    }

    async fn handle(&self, request: &Value) -> Answer {
        let op: String = arg(request, "op")?;
        let client = &self.client;
        match op.as_str() {
            "lock" => {
                let name: String = arg(request, "name")?;
                let mut options = LockOptions::new(Duration::from_millis(arg(request, "ttl_ms")?));
                if let Some(owner) = arg::<Option<String>>(request, "owner")? {
                    options = options.with_owner(owner);
                }
                options.wait = optional_ms(request, "wait_ms")?;
                options.drift_margin = optional_ms(request, "drift_margin_ms")?;
                let lock = client.lock(&name, options).await?;
                let (token, owner) = (lock.token(), lock.owner().to_string());
                let handle = self.keep("lock", Guard::Lock(lock)).await;
                Ok(fields(json!({"handle": handle, "token": token, "owner": owner})))
            }
            "guard" => {
                let handle: String = arg(request, "handle")?;
                let guards = self.guards.lock().await;
                let (token, lost, at_risk, valid_until) = match guards.get(&handle) {
                    Some(Guard::Lock(l)) => (json!(l.token()), l.is_lost(), l.is_at_risk(), l.valid_until()),
                    Some(Guard::Session(s)) => (Value::Null, s.is_lost(), s.is_at_risk(), s.valid_until()),
                    Some(Guard::Set(_)) => return Err(invalid("a lock set has no watchdog to ask")),
                    None => return Err(invalid(format!("no handle {handle}"))),
                };
                Ok(fields(json!({
                    "token": token, "lost": lost, "at_risk": at_risk,
                    "safe_remaining_ms": remaining_ms(valid_until),
                })))
            }
            "wait_lost" => {
                let handle: String = arg(request, "handle")?;
                let timeout = Duration::from_millis(arg(request, "timeout_ms")?);
                let lost = match self.guards.lock().await.get(&handle) {
                    Some(Guard::Lock(l)) => futures_boxed(l.lost()),
                    Some(Guard::Session(s)) => futures_boxed(s.lost()),
                    _ => return Err(invalid(format!("no lock or session {handle}"))),
                };
                let reason = tokio::time::timeout(timeout, lost).await.ok();
                let mut answer = lost_fields(reason.clone());
                answer.insert("lost".into(), json!(reason.is_some()));
                Ok(answer)
            }
            "unlock" => {
                match self.take(request).await? {
                    Guard::Lock(lock) => lock.release().await?,
                    Guard::Set(set) => set.release().await?,
                    Guard::Session(_) => return Err(invalid("unlock names a session: use session_close")),
                }
                Ok(Map::new())
            }
            "acquire" => {
                let options = AcquireOptions {
                    wait: optional_ms(request, "wait_ms")?,
                    request_id: arg(request, "request_id")?,
                    lock_delay: None,
                };
                let (name, owner): (String, String) = (arg(request, "name")?, arg(request, "owner")?);
                let lease = client.acquire_with(&name, &owner, arg(request, "ttl_ms")?, &options).await?;
                Ok(fields(json!({"token": lease.token(), "ttl_ms": lease.grant.ttl_ms})))
            }
            "renew" => {
                let name: String = arg(request, "name")?;
                let token: FencingToken = arg(request, "token")?;
                let lease = client.renew(&name, token, arg(request, "ttl_ms")?).await?;
                Ok(fields(json!({"token": lease.token(), "ttl_ms": lease.grant.ttl_ms})))
            }
            "release" => {
                client.release(&arg::<String>(request, "name")?, arg(request, "token")?).await?;
                Ok(Map::new())
            }
            "get" => {
                let view = client.get(&arg::<String>(request, "name")?).await?;
                let lease = view.map(|v| json!({"owner": v.owner, "token": v.token}));
                Ok(fields(json!({"lease": lease})))
            }
            "session_open" => {
                let ttl = Duration::from_millis(arg(request, "ttl_ms")?);
                let session =
                    Session::open(Arc::clone(client), SessionOptions::new(leasehold_client::default_owner(), ttl))
                        .await?;
                let id = session.id();
                let handle = self.keep("session", Guard::Session(Arc::new(session))).await;
                Ok(fields(json!({"handle": handle, "session": id})))
            }
            "session_lock" => {
                let session: String = arg(request, "session")?;
                let name: String = arg(request, "name")?;
                let wait = optional_ms(request, "wait_ms")?;
                let s = match self.guards.lock().await.get(&session) {
                    Some(Guard::Session(s)) => Arc::clone(s),
                    _ => return Err(invalid(format!("no session {session}"))),
                };
                // The lock lives as long as the session: its handle names both.
                let grant = s.lock(&name, wait).await?;
                Ok(fields(json!({"handle": format!("{session}/{name}"), "token": grant.token})))
            }
            "session_close" => match self.take(request).await? {
                Guard::Session(session) => {
                    let session = Arc::try_unwrap(session).map_err(|_| invalid("the session is in use"))?;
                    session.close().await?;
                    Ok(Map::new())
                }
                _ => Err(invalid("session_close names no session")),
            },
            "multi_lock" => {
                let names: Vec<String> = arg(request, "names")?;
                let owner = arg::<Option<String>>(request, "owner")?.unwrap_or_else(leasehold_client::default_owner);
                let options =
                    AcquireOptions { wait: optional_ms(request, "wait_ms")?, request_id: None, lock_delay: None };
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                let set = client.lock_many(&names, &owner, arg(request, "ttl_ms")?, &options).await?;
                let tokens: Map<String, Value> =
                    set.leases().grants.iter().map(|g| (g.name.clone(), json!(g.token))).collect();
                let handle = self.keep("set", Guard::Set(set)).await;
                Ok(fields(json!({"handle": handle, "tokens": tokens})))
            }
            "record_write" => {
                let (key, lock): (String, String) = (arg(request, "key")?, arg(request, "lock")?);
                let value: Value = arg(request, "value")?;
                client.put_record(&key, &lock, arg(request, "token")?, &value).await?;
                Ok(Map::new())
            }
            "record_read" => {
                let record = client.get_record(&arg::<String>(request, "key")?).await?;
                Ok(match record {
                    Some(r) => fields(json!({"value": r.value, "token": r.token})),
                    None => fields(json!({"value": null, "token": null})),
                })
            }
            "gate_pass" => {
                let (gate, lock): (String, String) = (arg(request, "gate")?, arg(request, "lock")?);
                client.gate(&gate, &lock, arg(request, "token")?).await?;
                Ok(Map::new())
            }
            other => Err(invalid(format!("unknown op {other:?}"))),
        }
    }
}

/// A `lost` future, boxed so both guards' fit one variable.
fn futures_boxed(
    lost: impl std::future::Future<Output = LostReason> + Send + 'static,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = LostReason> + Send>> {
    Box::pin(lost)
}

fn client_from_env() -> Result<Client, String> {
    let endpoints = std::env::var("LEASEHOLD_ENDPOINTS").map_err(|_| "LEASEHOLD_ENDPOINTS is not set")?;
    let endpoints: Vec<&str> = endpoints.split(',').collect();
    let token = match std::env::var("LEASEHOLD_TOKEN") {
        Ok(token) if !token.is_empty() => Some(Secret::new(&token, "LEASEHOLD_TOKEN").map_err(|e| e.to_string())?),
        _ => None,
    };
    let mut client = Client::with_credentials(&endpoints, &Credentials { token, ..Credentials::default() })
        .map_err(|e| e.to_string())?;
    if let Some(budget) = std::env::var("LEASEHOLD_RETRY_BUDGET_MS").ok().and_then(|ms| ms.parse().ok()) {
        client = client.with_retry_budget(Duration::from_millis(budget));
    }
    Ok(client)
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let driver = Arc::new(Driver {
        client: Arc::new(client_from_env()?),
        guards: Mutex::new(HashMap::new()),
        next_handle: 1.into(),
    });
    // One writer, so answers from concurrent requests never interleave.
    let (answers, mut to_write) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = to_write.recv().await {
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                return;
            }
        }
    });
    let ready = json!({"ready": true, "client": "rust", "version": env!("CARGO_PKG_VERSION")});
    let _ = answers.send(format!("{ready}\n"));
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let request: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        let id = request.get("id").cloned().unwrap_or(Value::Null);
        if request["op"] == json!("shutdown") {
            let _ = answers.send(format!("{}\n", json!({"id": id, "ok": true})));
            break;
        }
        let (driver, answers) = (Arc::clone(&driver), answers.clone());
        tokio::spawn(async move {
            let mut answer = match driver.handle(&request).await {
                Ok(fields) => fields,
                Err(Failure(error)) => fields(json!({"ok": false, "error": error})),
            };
            answer.entry("ok").or_insert(json!(true));
            answer.insert("id".into(), id);
            let _ = answers.send(format!("{}\n", Value::Object(answer)));
        });
    }
    drop(answers);
    let _ = writer.await;
    Ok(())
}
