//! The scenarios every client must pass, each driven through one driver.
//! Lock names start with the language and the scenario, so no run sees
//! another's locks. The harness's own client (straight to the nodes) sets
//! the stage and checks what the cluster holds; the proxies' log says what
//! the client sent.

use std::time::{Duration, Instant};

use leasehold_client::AcquireOptions;
use serde_json::{json, Value};

use crate::driver::{Answer, Driver};
use crate::proxy::{Fault, Seen};
use crate::Harness;

/// Every lease of the suite: the shortest ttl the cluster accepts, so the
/// scenarios that wait for a lease to run out stay short.
const TTL_MS: u64 = 3000;
/// The drift margin the lock guards are asked for.
const MARGIN_MS: u64 = 300;
/// How late, after the safe deadline, the harness may read a `lost` answer:
/// the pipe and the scheduling of two processes on a busy machine.
const LATE_ALLOWANCE: Duration = Duration::from_millis(300);

macro_rules! ensure {
    ($condition:expr, $($message:tt)+) => {
        if !$condition {
            return Err(format!($($message)+));
        }
    };
}

#[derive(Debug, Clone, Copy)]
pub enum Scenario {
    AcquireRelease,
    FifoWaiting,
    RequestIdReusedOnRetry,
    RetryAfterHonoured,
    LeaderFollowing,
    LeaderKilledMidLease,
    PausedPastTtl,
    AtRiskThenLost,
    Session,
    MultiLock,
    RecordsAndGates,
}

impl Scenario {
    pub const ALL: [Scenario; 11] = [
        Scenario::AcquireRelease,
        Scenario::FifoWaiting,
        Scenario::RequestIdReusedOnRetry,
        Scenario::RetryAfterHonoured,
        Scenario::LeaderFollowing,
        Scenario::LeaderKilledMidLease,
        Scenario::PausedPastTtl,
        Scenario::AtRiskThenLost,
        Scenario::Session,
        Scenario::MultiLock,
        Scenario::RecordsAndGates,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::AcquireRelease => "acquire_release",
            Scenario::FifoWaiting => "fifo_waiting",
            Scenario::RequestIdReusedOnRetry => "request_id_reused_on_retry",
            Scenario::RetryAfterHonoured => "retry_after_honoured",
            Scenario::LeaderFollowing => "leader_following",
            Scenario::LeaderKilledMidLease => "leader_killed_mid_lease",
            Scenario::PausedPastTtl => "paused_past_ttl",
            Scenario::AtRiskThenLost => "at_risk_then_lost",
            Scenario::Session => "session",
            Scenario::MultiLock => "multi_lock",
            Scenario::RecordsAndGates => "records_and_gates",
        }
    }

    /// Whether it acts on the whole cluster (kills the leader, hangs every
    /// node), so no other language's scenario may run beside it.
    pub fn alone(self) -> bool {
        matches!(self, Scenario::LeaderKilledMidLease | Scenario::AtRiskThenLost)
    }

    pub async fn run(self, h: &Harness, d: &mut Driver, prefix: &str) -> Result<(), String> {
        match self {
            Scenario::AcquireRelease => acquire_release(h, d, prefix).await,
            Scenario::FifoWaiting => fifo_waiting(h, d, prefix).await,
            Scenario::RequestIdReusedOnRetry => request_id_reused_on_retry(h, d, prefix).await,
            Scenario::RetryAfterHonoured => retry_after_honoured(h, d, prefix).await,
            Scenario::LeaderFollowing => leader_following(h, d, prefix).await,
            Scenario::LeaderKilledMidLease => leader_killed_mid_lease(h, d, prefix).await,
            Scenario::PausedPastTtl => paused_past_ttl(h, d, prefix).await,
            Scenario::AtRiskThenLost => at_risk_then_lost(h, d, prefix).await,
            Scenario::Session => session(h, d, prefix).await,
            Scenario::MultiLock => multi_lock(h, d, prefix).await,
            Scenario::RecordsAndGates => records_and_gates(h, d, prefix).await,
        }
    }
}

fn token(answer: &Answer, field: &str) -> Result<u64, String> {
    answer.token(field).ok_or_else(|| format!("no integer {field:?} in {}", answer.body))
}

fn handle(answer: &Answer) -> Result<Value, String> {
    let handle = answer.field("handle");
    ensure!(handle.is_string(), "no handle in {}", answer.body);
    Ok(handle.clone())
}

/// A guard through the driver: `lock` with the suite's ttl and margin.
async fn lock(d: &mut Driver, name: &str) -> Result<(Value, u64), String> {
    lock_for(d, name, TTL_MS).await
}

async fn lock_for(d: &mut Driver, name: &str, ttl_ms: u64) -> Result<(Value, u64), String> {
    let answer = d.ok("lock", json!({"name": name, "ttl_ms": ttl_ms, "drift_margin_ms": MARGIN_MS})).await?;
    Ok((handle(&answer)?, token(&answer, "token")?))
}

fn expect_api_error(answer: &Answer, code: &str) -> Result<(), String> {
    match answer.error() {
        Some(("api", Some(c))) if c == code => Ok(()),
        _ => Err(format!("expected the api error {code}, got {}", answer.body)),
    }
}

/// Owner and token of `name` on the cluster.
async fn held(h: &Harness, name: &str) -> Result<Option<(String, u64)>, String> {
    let view = h.client.get(name).await.map_err(|e| format!("get {name}: {e}"))?;
    Ok(view.map(|v| (v.owner, v.token.get())))
}

/// The requests whose path is `path`, in order of arrival.
fn requests_to(h: &Harness, path: &str) -> Vec<Seen> {
    h.proxies.seen().into_iter().filter(|s| s.path == path).collect()
}

// A guard's grant carries a token; another owner gets `held` at once
// without a wait; release frees the lock; the next grant's token is higher;
// raw acquire, renew and release keep one token.
async fn acquire_release(h: &Harness, d: &mut Driver, prefix: &str) -> Result<(), String> {
    let name = format!("{prefix}-a");
    let (guard, first) = lock(d, &name).await?;
    let on_cluster = held(h, &name).await?;
    ensure!(on_cluster.as_ref().map(|(_, t)| *t) == Some(first), "the cluster holds {on_cluster:?}, not token {first}");
    let refused = d.call("acquire", json!({"name": name, "owner": "other", "ttl_ms": TTL_MS})).await?;
    expect_api_error(&refused, "held")?;
    ensure!(refused.body["error"]["status"] == json!(409), "held is not a 409: {}", refused.body);
    d.ok("unlock", json!({"handle": guard})).await?;
    ensure!(held(h, &name).await?.is_none(), "unlock left the lock held");
    let acquired = d.ok("acquire", json!({"name": name, "owner": "raw", "ttl_ms": TTL_MS})).await?;
    let second = token(&acquired, "token")?;
    ensure!(second > first, "token {second} after {first}");
    let renewed = d.ok("renew", json!({"name": name, "token": second})).await?;
    ensure!(token(&renewed, "token")? == second, "renew changed the token: {}", renewed.body);
    d.ok("release", json!({"name": name, "token": second})).await?;
    let stale = d.call("release", json!({"name": name, "token": second})).await?;
    ensure!(
        matches!(stale.error(), Some(("api", Some("not_held" | "stale_token")))),
        "a second release: {}",
        stale.body
    );
    Ok(())
}

// Waiters get the lock in the order they asked, each under a higher token.
async fn fifo_waiting(h: &Harness, d: &mut Driver, prefix: &str) -> Result<(), String> {
    let name = format!("{prefix}-q");
    let holder = h.client.acquire(&name, "holder", TTL_MS).await.map_err(|e| e.to_string())?;
    let wait = |owner: &str| json!({"name": name, "owner": owner, "ttl_ms": TTL_MS, "wait_ms": 20_000});
    let first = d.send("acquire", wait("first")).await?;
    wait_until_queued(h, &name, 1).await?;
    let second = d.send("acquire", wait("second")).await?;
    wait_until_queued(h, &name, 2).await?;
    h.client.release(&name, holder.token()).await.map_err(|e| e.to_string())?;
    let first = first.answer(Duration::from_secs(20)).await?.success()?;
    let first_token = token(&first, "token")?;
    ensure!(first_token > holder.token().get(), "first waiter's token {first_token} not above {}", holder.token());
    let owner = held(h, &name).await?;
    ensure!(matches!(&owner, Some((o, _)) if o == "first"), "after the holder the lock went to {owner:?}");
    d.ok("release", json!({"name": name, "token": first_token})).await?;
    let second = second.answer(Duration::from_secs(20)).await?.success()?;
    let second_token = token(&second, "token")?;
    ensure!(second_token > first_token, "second waiter's token {second_token} not above {first_token}");
    d.ok("release", json!({"name": name, "token": second_token})).await.map(|_| ())
}

/// Waits (bounded) until `count` waiters stand in the queue of `name` on
/// the cluster, so the next one sent is behind them.
async fn wait_until_queued(h: &Harness, name: &str, count: usize) -> Result<(), String> {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let view = h.client.get(name).await.map_err(|e| format!("get {name}: {e}"))?;
        if view.is_some_and(|v| v.waiters.len() >= count) {
            return Ok(());
        }
        ensure!(Instant::now() < give_up, "{count} waiters of {name} never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// An acquire whose answer is lost is retried with the same request id, and
// the cluster grants once: the token answered is the one it holds.
async fn request_id_reused_on_retry(h: &Harness, d: &mut Driver, prefix: &str) -> Result<(), String> {
    let name = format!("{prefix}-r");
    let path = format!("/v1/locks/{name}/acquire");
    h.proxies.add_fault(Fault::DropAnswer { suffix: path.clone(), remaining: 1 });
    let acquired = d.ok("acquire", json!({"name": name, "owner": "retrier", "ttl_ms": TTL_MS})).await?;
    let granted = token(&acquired, "token")?;
    let attempts = requests_to(h, &path);
    ensure!(attempts.len() >= 2, "the dropped answer was not retried: {attempts:?}");
    let first_id = attempts[0].request_id.clone();
    ensure!(first_id.is_some(), "the acquire carried no request id");
    ensure!(attempts.iter().all(|a| a.request_id == first_id), "the retry changed the request id: {attempts:?}");
    let on_cluster = held(h, &name).await?;
    ensure!(
        on_cluster == Some(("retrier".to_string(), granted)),
        "answered token {granted}, the cluster holds {on_cluster:?}"
    );
    d.ok("release", json!({"name": name, "token": granted})).await.map(|_| ())
}

// `503 overloaded` with `Retry-After: 1`: no node that said so is asked
// again before the second is over, the request id stays, and the acquire
// succeeds once the nodes take requests again.
async fn retry_after_honoured(h: &Harness, d: &mut Driver, prefix: &str) -> Result<(), String> {
    let name = format!("{prefix}-o");
    let path = format!("/v1/locks/{name}/acquire");
    let until = Instant::now() + Duration::from_millis(1500);
    h.proxies.add_fault(Fault::Overloaded { suffix: path.clone(), until, retry_after_s: 1 });
    let acquired = d.ok("acquire", json!({"name": name, "owner": "patient", "ttl_ms": TTL_MS})).await?;
    let attempts = requests_to(h, &path);
    ensure!(attempts.iter().any(|a| a.status == Some(503)), "no attempt was refused: {attempts:?}");
    ensure!(attempts.last().map(|a| a.at >= until) == Some(true), "succeeded before the nodes took requests");
    ensure!(attempts.iter().all(|a| a.request_id == attempts[0].request_id), "the request id changed: {attempts:?}");
    for (i, refused) in attempts.iter().enumerate().filter(|(_, a)| a.status == Some(503)) {
        if let Some(next) = attempts[i + 1..].iter().find(|a| a.node == refused.node) {
            let gap = next.at - refused.at;
            ensure!(
                gap >= Duration::from_millis(950),
                "node {} asked again {gap:?} after its Retry-After: 1",
                refused.node
            );
        }
    }
    let granted = token(&acquired, "token")?;
    d.ok("release", json!({"name": name, "token": granted})).await.map(|_| ())
}

// The driver's first endpoint is a follower; once the client has an
// answer naming the leader, its requests go to the leader.
async fn leader_following(h: &Harness, d: &mut Driver, prefix: &str) -> Result<(), String> {
    let name = format!("{prefix}-l");
    let leader = h.leader().await;
    let acquired = d.ok("acquire", json!({"name": name, "owner": "follower", "ttl_ms": TTL_MS})).await?;
    let granted = token(&acquired, "token")?;
    d.ok("renew", json!({"name": name, "token": granted})).await?;
    d.ok("release", json!({"name": name, "token": granted})).await?;
    let later: Vec<Seen> = h.proxies.seen().into_iter().filter(|s| s.path.contains(&name)).skip(1).collect();
    ensure!(later.len() >= 2, "expected renew and release, saw {later:?}");
    ensure!(
        later.iter().all(|s| s.node == leader),
        "requests after the first went to {:?}, leader is {leader}",
        later.iter().map(|s| s.node).collect::<Vec<_>>()
    );
    Ok(())
}

// The leader is killed -9 while a guard holds a lock: the guard renews
// through the new leader past its ttl, never reports lost, and the lock's
// next grant has a higher token. The ttl is twice the suite's: the
// election (0.6 to 1.2 s of silence, then a vote, on a busy machine
// sometimes over 2 s) must fit in what is left of a lease after a renewal.
async fn leader_killed_mid_lease(h: &Harness, d: &mut Driver, prefix: &str) -> Result<(), String> {
    let name = format!("{prefix}-k");
    let ttl_ms = 2 * TTL_MS;
    let (guard, first) = lock_for(d, &name, ttl_ms).await?;
    let leader = h.leader().await;
    // kill -9 by PID; the harness reaps and restarts it after the scenario.
    h.cluster.signal(leader, nix::sys::signal::Signal::SIGKILL);
    tokio::time::sleep(Duration::from_millis(ttl_ms + 1000)).await;
    let state = d.ok("guard", json!({"handle": guard})).await?;
    ensure!(state.field("lost") == &json!(false), "lost after the leader was killed: {}", state.body);
    let on_cluster = held(h, &name).await?;
    ensure!(on_cluster.as_ref().map(|(_, t)| *t) == Some(first), "the cluster holds {on_cluster:?}, not token {first}");
    d.ok("unlock", json!({"handle": guard})).await?;
    let (again, second) = lock(d, &name).await?;
    ensure!(second > first, "token {second} after {first} across the leader kill");
    d.ok("unlock", json!({"handle": again})).await.map(|_| ())
}

// The driver is paused (SIGSTOP) past its ttl: another owner gets the lock
// under a higher token, and once resumed the guard says lost.
async fn paused_past_ttl(h: &Harness, d: &mut Driver, prefix: &str) -> Result<(), String> {
    use nix::sys::signal::{kill, Signal};
    let name = format!("{prefix}-p");
    let (guard, first) = lock(d, &name).await?;
    kill(d.pid(), Signal::SIGSTOP).map_err(|e| e.to_string())?;
    let wait = AcquireOptions { wait: Some(Duration::from_secs(15)), request_id: None, lock_delay: None };
    let next = h.client.acquire_with(&name, "next", TTL_MS, &wait).await;
    kill(d.pid(), Signal::SIGCONT).map_err(|e| e.to_string())?;
    let next = next.map_err(|e| format!("the next holder: {e}"))?;
    ensure!(next.token().get() > first, "next holder's token {} not above {first}", next.token());
    let state = d.ok("guard", json!({"handle": guard})).await?;
    ensure!(state.field("lost") == &json!(true), "resumed past its ttl, the guard is not lost: {}", state.body);
    ensure!(state.field("at_risk") == &json!(false), "lost and at risk at once: {}", state.body);
    let lost = d.ok("wait_lost", json!({"handle": guard, "timeout_ms": 2000})).await?;
    ensure!(lost.field("lost") == &json!(true), "wait_lost: {}", lost.body);
    h.client.release(&name, next.token()).await.map_err(|e| e.to_string())
}

// Every node hangs: the guard is at risk while its renewals go unanswered,
// then lost (expired) no later than its safe deadline, counted from the
// arrival at a proxy of the last renewal that succeeded.
async fn at_risk_then_lost(h: &Harness, d: &mut Driver, prefix: &str) -> Result<(), String> {
    let name = format!("{prefix}-x");
    let renew_path = format!("/v1/locks/{name}/renew");
    let (guard, _) = lock(d, &name).await?;
    let give_up = Instant::now() + Duration::from_millis(TTL_MS);
    while !requests_to(h, &renew_path).iter().any(|s| s.status == Some(200)) {
        ensure!(Instant::now() < give_up, "no renewal within a ttl");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.proxies.add_fault(Fault::Blackhole);
    let lost = d.send("wait_lost", json!({"handle": guard, "timeout_ms": TTL_MS + 3000})).await?;
    let mut at_risk_seen = false;
    loop {
        let state = d.ok("guard", json!({"handle": guard})).await?;
        if state.field("lost") == &json!(true) {
            break;
        }
        at_risk_seen |= state.field("at_risk") == &json!(true);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lost = lost.answer(Duration::from_millis(TTL_MS + 5000)).await?.success()?;
    ensure!(at_risk_seen, "never at risk before lost");
    ensure!(
        lost.field("lost") == &json!(true) && lost.field("reason") == &json!("expired"),
        "wait_lost: {}",
        lost.body
    );
    let deadline = safe_deadline(&requests_to(h, &renew_path)).ok_or("no successful renewal seen")?;
    ensure!(lost.at <= deadline + LATE_ALLOWANCE, "lost {:?} after the safe deadline", lost.at - deadline);
    h.proxies.clear_faults(prefix);
    // The lease may have run out on the cluster meanwhile: either answer is right.
    let _ = d.call("unlock", json!({"handle": guard})).await?;
    Ok(())
}

/// The safe deadline of the last successful renewal among `renewals`: the
/// arrival of its first attempt (the first request with its request id) +
/// ttl − margin.
fn safe_deadline(renewals: &[Seen]) -> Option<Instant> {
    let last = renewals.iter().rev().find(|s| s.status == Some(200))?;
    let first_attempt =
        renewals.iter().find(|s| s.request_id.is_some() && s.request_id == last.request_id).unwrap_or(last);
    Some(first_attempt.at + Duration::from_millis(TTL_MS - MARGIN_MS))
}

// A session keeps its locks past the ttl; when the cluster ends it, one
// lost (revoked) covers it, and all its locks are free.
async fn session(h: &Harness, d: &mut Driver, prefix: &str) -> Result<(), String> {
    let names = [format!("{prefix}-s1"), format!("{prefix}-s2")];
    let opened = d.ok("session_open", json!({"ttl_ms": TTL_MS})).await?;
    let session = handle(&opened)?;
    let id = opened.field("session").as_u64().ok_or_else(|| format!("no session id in {}", opened.body))?;
    for name in &names {
        d.ok("session_lock", json!({"session": session, "name": name})).await?;
    }
    tokio::time::sleep(Duration::from_millis(TTL_MS + 500)).await;
    let state = d.ok("guard", json!({"handle": session})).await?;
    ensure!(state.field("lost") == &json!(false), "session lost past its ttl: {}", state.body);
    for name in &names {
        ensure!(held(h, name).await?.is_some(), "{name} not held under the session past its ttl");
    }
    h.client.delete_session(id).await.map_err(|e| format!("delete the session: {e}"))?;
    let lost = d.ok("wait_lost", json!({"handle": session, "timeout_ms": TTL_MS + 2000})).await?;
    ensure!(lost.field("lost") == &json!(true), "the session's end was not reported: {}", lost.body);
    ensure!(
        lost.field("reason") == &json!("revoked") && lost.field("code") == &json!("session_not_found"),
        "wait_lost: {}",
        lost.body
    );
    for name in &names {
        ensure!(held(h, name).await?.is_none(), "{name} still held after its session ended");
    }
    // Already gone on the cluster: the close may say so.
    let _ = d.call("session_close", json!({"handle": session})).await?;
    Ok(())
}

// Several locks in one grant under one token, or none of them.
async fn multi_lock(h: &Harness, d: &mut Driver, prefix: &str) -> Result<(), String> {
    let names: Vec<String> = (1..=3).map(|i| format!("{prefix}-m{i}")).collect();
    let blocker = h.client.acquire(&names[1], "blocker", TTL_MS).await.map_err(|e| e.to_string())?;
    let refused = d.call("multi_lock", json!({"names": names, "ttl_ms": TTL_MS})).await?;
    expect_api_error(&refused, "held")?;
    for name in [&names[0], &names[2]] {
        ensure!(held(h, name).await?.is_none(), "a refused multi-lock left {name} held");
    }
    h.client.release(&names[1], blocker.token()).await.map_err(|e| e.to_string())?;
    let granted = d.ok("multi_lock", json!({"names": names, "ttl_ms": TTL_MS})).await?;
    let tokens = granted.field("tokens").as_object().ok_or_else(|| format!("no tokens in {}", granted.body))?.clone();
    let token = tokens.get(&names[0]).and_then(Value::as_u64).ok_or("no token of the first lock")?;
    for name in &names {
        ensure!(tokens.get(name).and_then(Value::as_u64) == Some(token), "tokens differ: {tokens:?}");
        ensure!(held(h, name).await?.map(|(_, t)| t) == Some(token), "{name} not held under {token}");
    }
    d.ok("unlock", json!({"handle": handle(&granted)?})).await?;
    for name in &names {
        ensure!(held(h, name).await?.is_none(), "{name} still held after the set's unlock");
    }
    Ok(())
}

// A record and a gate take the current token and refuse an older one.
async fn records_and_gates(_h: &Harness, d: &mut Driver, prefix: &str) -> Result<(), String> {
    let name = format!("{prefix}-f");
    let (key, gate) = (format!("{prefix}-record"), format!("{prefix}-gate"));
    let (guard, old) = lock(d, &name).await?;
    let value = json!({"amount": 7, "currency": "EUR"});
    d.ok("record_write", json!({"key": key, "lock": name, "token": old, "value": value})).await?;
    let read = d.ok("record_read", json!({"key": key})).await?;
    ensure!(read.field("value") == &value && token(&read, "token")? == old, "read back {}", read.body);
    d.ok("gate_pass", json!({"gate": gate, "lock": name, "token": old})).await?;
    d.ok("unlock", json!({"handle": guard})).await?;
    let (guard, new) = lock(d, &name).await?;
    ensure!(new > old, "token {new} after {old}");
    let stale = d.call("record_write", json!({"key": key, "lock": name, "token": old, "value": 0})).await?;
    expect_api_error(&stale, "stale_token")?;
    d.ok("gate_pass", json!({"gate": gate, "lock": name, "token": new})).await?;
    let stale = d.call("gate_pass", json!({"gate": gate, "lock": name, "token": old})).await?;
    expect_api_error(&stale, "stale_token")?;
    d.ok("unlock", json!({"handle": guard})).await.map(|_| ())
}
