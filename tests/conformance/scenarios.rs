//! The interpreter of `clients/conformance/scenarios.json`: the scenarios
//! are data, so every language is held to the same list, order, arguments
//! and expected answers, and a new scenario needs no Rust. What only the
//! harness can see (the proxies' log of what a client sent, and when) is
//! checked by the named checks here, written once. The format is in
//! `clients/conformance/PROTOCOL.md`, section Scenarios.
//!
//! Lock names start with the language and the scenario (`${prefix}`), so no
//! run sees another's locks. The harness's own client (straight to the
//! nodes) sets the stage and says what the cluster holds.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use leasehold_client::{AcquireOptions, FencingToken};
use nix::sys::signal::{kill, Signal};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::driver::{Answer, Driver, Pending, CALL_BOUND};
use crate::proxy::{Fault, Seen};
use crate::Harness;

macro_rules! ensure {
    ($condition:expr, $($message:tt)+) => {
        if !$condition {
            return Err(format!($($message)+));
        }
    };
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    /// Whether it acts on the whole cluster (kills the leader, hangs every
    /// node), so no other language's scenario may run beside it.
    #[serde(default)]
    pub alone: bool,
    #[serde(default, rename = "about")]
    _about: String,
    steps: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    #[serde(default, rename = "about")]
    _about: String,
    scenarios: Vec<Scenario>,
}

/// The kinds of step, each with the keys it may have besides its own and
/// `about`: a misspelt key (`expct`) would otherwise be ignored and weaken
/// the scenario without anyone noticing.
const STEP_KINDS: [(&str, &[&str]); 11] = [
    ("send", &["as", "expect", "background", "timeout_ms"]),
    ("await", &["expect", "timeout_ms"]),
    ("cluster", &["as", "expect"]),
    ("fault", &[]),
    ("kill", &[]),
    ("signal_driver", &[]),
    ("sleep_ms", &[]),
    ("wait_queued", &[]),
    ("wait_request", &[]),
    ("poll", &["every_ms", "within_ms", "until", "seen_before"]),
    ("leader", &["as"]),
];

/// The named checks, with their arguments: the ones that need the proxies'
/// records.
const CHECKS: [(&str, &[&str]); 4] = [
    ("request_id_reused", &["path", "at_least"]),
    ("retry_after_spacing", &["path", "min_gap_ms"]),
    ("requests_went_to_leader", &["lock", "after_first", "at_least", "leader"]),
    ("lost_by_safe_deadline", &["answer", "renew_path", "ttl_ms", "drift_margin_ms", "allowance_ms"]),
];

/// The scenarios of `path`, in order. Panics on a malformed file or step,
/// so a typo fails the whole suite instead of one language's cell.
pub fn load(path: &Path) -> Vec<Scenario> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file: ScenarioFile = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for scenario in &file.scenarios {
        for (i, step) in scenario.steps.iter().enumerate() {
            if let Err(e) = validate(step) {
                panic!("{}: scenario {}, step {}: {e}: {step}", path.display(), scenario.name, i + 1);
            }
        }
    }
    file.scenarios
}

fn validate(step: &Value) -> Result<(), String> {
    let object = step.as_object().ok_or("not an object")?;
    if let Some(name) = object.get("check") {
        let (_, arguments) =
            CHECKS.iter().find(|(check, _)| name == check).ok_or_else(|| format!("no check {name}"))?;
        let unknown: Vec<&String> =
            object.keys().filter(|k| *k != "check" && *k != "about" && !arguments.contains(&k.as_str())).collect();
        ensure!(unknown.is_empty(), "unknown keys {unknown:?}");
        return Ok(());
    }
    let kinds: Vec<&(&str, &[&str])> = STEP_KINDS.iter().filter(|(kind, _)| object.contains_key(*kind)).collect();
    let [(kind, others)] = kinds[..] else { return Err(format!("{} kinds of step", kinds.len())) };
    let unknown: Vec<&String> =
        object.keys().filter(|k| *k != kind && *k != "about" && !others.contains(&k.as_str())).collect();
    ensure!(unknown.is_empty(), "unknown keys {unknown:?}");
    ensure!(
        !(object.contains_key("background") && object.contains_key("expect")),
        "a background send is checked by its await"
    );
    Ok(())
}

/// What one run of a scenario has seen so far.
struct Run<'a> {
    h: &'a Harness,
    d: &'a mut Driver,
    prefix: &'a str,
    /// Answers by their `as` name.
    answers: HashMap<String, Answer>,
    /// Requests sent in the background, by their `as` name.
    pending: HashMap<String, Pending>,
    /// When each overload fault (by path) ends.
    overloads: HashMap<String, Instant>,
}

impl Scenario {
    pub async fn run(&self, h: &Harness, d: &mut Driver, prefix: &str) -> Result<(), String> {
        let mut run = Run { h, d, prefix, answers: HashMap::new(), pending: HashMap::new(), overloads: HashMap::new() };
        for (i, step) in self.steps.iter().enumerate() {
            let step = with_prefix(step, prefix);
            run.step(&step).await.map_err(|e| format!("step {} {step}: {e}", i + 1))?;
        }
        Ok(())
    }
}

/// `${prefix}` replaced in every string and key: done first, so a
/// reference may name a lock (`${set.tokens.${prefix}-m1}`).
fn with_prefix(value: &Value, prefix: &str) -> Value {
    match value {
        Value::String(s) => Value::String(s.replace("${prefix}", prefix)),
        Value::Array(items) => Value::Array(items.iter().map(|v| with_prefix(v, prefix)).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.replace("${prefix}", prefix), with_prefix(v, prefix))).collect())
        }
        other => other.clone(),
    }
}

fn ms(step: &Value, key: &str) -> Result<Duration, String> {
    step[key].as_u64().map(Duration::from_millis).ok_or_else(|| format!("no integer {key}"))
}

fn text<'v>(step: &'v Value, key: &str) -> Result<&'v str, String> {
    step[key].as_str().ok_or_else(|| format!("no string {key}"))
}

fn number(step: &Value, key: &str) -> Result<u64, String> {
    step[key].as_u64().ok_or_else(|| format!("no integer {key}"))
}

/// A request's op and the rest of it, the driver's arguments.
fn split_op(request: Value) -> Result<(String, Value), String> {
    let Value::Object(mut map) = request else { return Err("the request is not an object".into()) };
    let op = map.remove("op").and_then(|op| op.as_str().map(str::to_string)).ok_or("the request has no op")?;
    Ok((op, Value::Object(map)))
}

impl Run<'_> {
    async fn step(&mut self, step: &Value) -> Result<(), String> {
        if step.get("check").is_some() {
            let check = self.resolve(step)?;
            return self.check(&check);
        }
        if let Some(request) = step.get("send") {
            let (op, arguments) = split_op(self.resolve(request)?)?;
            let pending = self.d.send(&op, arguments).await?;
            if step["background"] == json!(true) {
                self.pending.insert(text(step, "as")?.to_string(), pending);
                return Ok(());
            }
            let bound = ms(step, "timeout_ms").unwrap_or(CALL_BOUND);
            let answer = pending.answer(bound).await?;
            return self.expect(step, answer);
        }
        if let Some(name) = step["await"].as_str() {
            let pending = self.pending.remove(name).ok_or_else(|| format!("nothing sent as {name}"))?;
            let answer = pending.answer(ms(step, "timeout_ms").unwrap_or(CALL_BOUND)).await?;
            return self.expect(&json!({"as": name, "expect": step.get("expect")}), answer);
        }
        if let Some(request) = step.get("cluster") {
            let request = self.resolve(request)?;
            let body = self.cluster(&request).await?;
            return self.expect(step, Answer { at: Instant::now(), body });
        }
        if let Some(fault) = step.get("fault") {
            let fault = self.resolve(fault)?;
            return self.fault(&fault);
        }
        if step.get("kill").is_some() {
            ensure!(step["kill"] == json!("leader"), "only the leader can be killed");
            let leader = self.h.leader().await;
            // kill -9 by PID; the harness reaps and restarts it after the scenario.
            self.h.cluster.signal(leader, Signal::SIGKILL);
            return Ok(());
        }
        if let Some(signal) = step.get("signal_driver") {
            let signal = match signal.as_str() {
                Some("stop") => Signal::SIGSTOP,
                Some("continue") => Signal::SIGCONT,
                _ => return Err("signal_driver is stop or continue".into()),
            };
            return kill(self.d.pid(), signal).map_err(|e| e.to_string());
        }
        if step.get("sleep_ms").is_some() {
            tokio::time::sleep(ms(step, "sleep_ms")?).await;
            return Ok(());
        }
        if let Some(wait) = step.get("wait_queued") {
            let wait = self.resolve(wait)?;
            return self.wait_queued(text(&wait, "name")?, number(&wait, "count")?, ms(&wait, "within_ms")?).await;
        }
        if let Some(wait) = step.get("wait_request") {
            let wait = self.resolve(wait)?;
            let status = number(&wait, "status")?;
            let give_up = Instant::now() + ms(&wait, "within_ms")?;
            let path = text(&wait, "path")?;
            while !self.requests_to(path).iter().any(|s| s.status.map(u64::from) == Some(status)) {
                ensure!(Instant::now() < give_up, "no request to {path} answered {status}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            return Ok(());
        }
        if let Some(request) = step.get("poll") {
            let request = self.resolve(request)?;
            return self.poll(step, request).await;
        }
        if step.get("leader").is_some() {
            let node = self.h.leader().await;
            return self.expect(step, Answer { at: Instant::now(), body: json!({"ok": true, "node": node}) });
        }
        Err("no such step".into())
    }

    /// Keeps `answer` under the step's `as` name, then matches it against
    /// the step's `expect` (a success when there is none), which may refer
    /// to the answer itself.
    fn expect(&mut self, step: &Value, answer: Answer) -> Result<(), String> {
        let body = answer.body.clone();
        if let Some(name) = step["as"].as_str() {
            self.answers.insert(name.to_string(), answer);
        }
        let expected = match step.get("expect") {
            Some(expected) if !expected.is_null() => self.resolve(expected)?,
            _ => json!({"ok": true}),
        };
        matches(&expected, &body, "").map_err(|e| format!("{e}; the answer: {body}"))
    }

    /// Repeats `request` until an answer matches `until`; with
    /// `seen_before`, one of the answers before it must match that.
    async fn poll(&mut self, step: &Value, request: Value) -> Result<(), String> {
        let (op, arguments) = split_op(request)?;
        let until = self.resolve(&step["until"])?;
        let seen_before = step.get("seen_before").map(|v| self.resolve(v)).transpose()?;
        let give_up = Instant::now() + ms(step, "within_ms")?;
        let mut seen = false;
        loop {
            let answer = self.d.call(&op, arguments.clone()).await?.success()?;
            if matches(&until, &answer.body, "").is_ok() {
                break;
            }
            seen |= seen_before.as_ref().is_some_and(|expected| matches(expected, &answer.body, "").is_ok());
            ensure!(Instant::now() < give_up, "no answer matched {until}; the last: {}", answer.body);
            tokio::time::sleep(ms(step, "every_ms")?).await;
        }
        ensure!(seen || seen_before.is_none(), "no answer before the last matched {}", step["seen_before"]);
        Ok(())
    }

    /// References `${name.field.field}` to earlier answers replaced: a string
    /// that is one reference becomes the value referred to, a reference
    /// inside a longer string its text.
    fn resolve(&self, value: &Value) -> Result<Value, String> {
        Ok(match value {
            Value::String(s) => match s.strip_prefix("${").and_then(|r| r.strip_suffix('}')) {
                Some(reference) if !reference.contains("${") => self.lookup(reference)?,
                _ => Value::String(self.interpolate(s)?),
            },
            Value::Array(items) => Value::Array(items.iter().map(|v| self.resolve(v)).collect::<Result<_, _>>()?),
            Value::Object(map) => {
                let mut resolved = Map::new();
                for (key, value) in map {
                    resolved.insert(self.interpolate(key)?, self.resolve(value)?);
                }
                Value::Object(resolved)
            }
            other => other.clone(),
        })
    }

    fn interpolate(&self, s: &str) -> Result<String, String> {
        let mut out = String::new();
        let mut rest = s;
        while let Some(start) = rest.find("${") {
            let end = rest[start..].find('}').ok_or_else(|| format!("unclosed reference in {s:?}"))? + start;
            out.push_str(&rest[..start]);
            match self.lookup(&rest[start + 2..end])? {
                Value::String(text) => out.push_str(&text),
                other => out.push_str(&other.to_string()),
            }
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn lookup(&self, reference: &str) -> Result<Value, String> {
        let mut parts = reference.split('.');
        let name = parts.next().unwrap_or_default();
        let answer = self.answers.get(name).ok_or_else(|| format!("no answer named {name} for ${{{reference}}}"))?;
        let value = parts.try_fold(&answer.body, |value, field| value.get(field));
        match value {
            Some(value) if !value.is_null() => Ok(value.clone()),
            _ => Err(format!("${{{reference}}} is not in {}", answer.body)),
        }
    }

    /// One request of the harness's own client, answered like a driver's.
    async fn cluster(&self, request: &Value) -> Result<Value, String> {
        let client = &self.h.client;
        let name = text(request, "name");
        let failed = |e: leasehold_client::ClientError| json!({"ok": false, "error": {"message": e.to_string()}});
        Ok(match text(request, "op")? {
            "acquire" => {
                let wait = ms(request, "wait_ms").ok();
                let options = AcquireOptions { wait, request_id: None, lock_delay: None };
                match client.acquire_with(name?, text(request, "owner")?, number(request, "ttl_ms")?, &options).await {
                    Ok(lease) => json!({"ok": true, "token": lease.token().get()}),
                    Err(e) => failed(e),
                }
            }
            "release" => {
                let token = FencingToken::granted_at(number(request, "token")?);
                match client.release(name?, token).await {
                    Ok(()) => json!({"ok": true}),
                    Err(e) => failed(e),
                }
            }
            "get" => match client.get(name?).await {
                Ok(None) => json!({"ok": true, "lease": null}),
                Ok(Some(view)) => json!({"ok": true, "lease": {
                    "owner": view.owner, "token": view.token.get(), "waiters": view.waiters.len()
                }}),
                Err(e) => failed(e),
            },
            "delete_session" => match client.delete_session(number(request, "session")?).await {
                Ok(_) => json!({"ok": true}),
                Err(e) => failed(e),
            },
            op => return Err(format!("no cluster op {op}")),
        })
    }

    fn fault(&mut self, fault: &Value) -> Result<(), String> {
        let proxies = &self.h.proxies;
        match text(fault, "kind")? {
            "drop_answer" => proxies.add_fault(Fault::DropAnswer {
                suffix: text(fault, "path")?.to_string(),
                remaining: number(fault, "count")? as usize,
            }),
            "overloaded" => {
                let path = text(fault, "path")?.to_string();
                let until = Instant::now() + ms(fault, "for_ms")?;
                let retry_after_s = number(fault, "retry_after_s")?;
                self.overloads.insert(path.clone(), until);
                proxies.add_fault(Fault::Overloaded { suffix: path, until, retry_after_s });
            }
            "hold_all" => proxies.add_fault(Fault::Blackhole),
            // Only this run's faults: the other languages' go on.
            "clear" => proxies.clear_faults(self.prefix),
            kind => return Err(format!("no fault {kind}")),
        }
        Ok(())
    }

    /// Waits (bounded) until `count` waiters stand in the queue of `name` on
    /// the cluster, so the next one sent is behind them.
    async fn wait_queued(&self, name: &str, count: u64, within: Duration) -> Result<(), String> {
        let give_up = Instant::now() + within;
        loop {
            let view = self.h.client.get(name).await.map_err(|e| format!("get {name}: {e}"))?;
            if view.is_some_and(|v| v.waiters.len() as u64 >= count) {
                return Ok(());
            }
            ensure!(Instant::now() < give_up, "{count} waiters of {name} never queued");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The requests whose path is `path`, in order of arrival.
    fn requests_to(&self, path: &str) -> Vec<Seen> {
        self.h.proxies.seen().into_iter().filter(|s| s.path == path).collect()
    }

    fn check(&self, check: &Value) -> Result<(), String> {
        match text(check, "check")? {
            "request_id_reused" => self.request_id_reused(text(check, "path")?, number(check, "at_least")?),
            "retry_after_spacing" => self.retry_after_spacing(text(check, "path")?, ms(check, "min_gap_ms")?),
            "requests_went_to_leader" => self.requests_went_to_leader(check),
            "lost_by_safe_deadline" => self.lost_by_safe_deadline(check),
            name => Err(format!("no check {name}")),
        }
    }

    // An acquire whose answer was lost was sent again (at least `at_least`
    // attempts), every attempt with the request id of the first.
    fn request_id_reused(&self, path: &str, at_least: u64) -> Result<(), String> {
        let attempts = self.requests_to(path);
        ensure!(attempts.len() as u64 >= at_least, "the dropped answer was not retried: {attempts:?}");
        let first_id = attempts[0].request_id.clone();
        ensure!(first_id.is_some(), "the request carried no request id");
        ensure!(attempts.iter().all(|a| a.request_id == first_id), "the retry changed the request id: {attempts:?}");
        Ok(())
    }

    // Under the overload fault on `path`: some attempt was refused, the
    // last came after the fault ended, the request id stayed, and no node
    // that answered 503 was asked again within `min_gap` (its Retry-After
    // less a scheduling allowance).
    fn retry_after_spacing(&self, path: &str, min_gap: Duration) -> Result<(), String> {
        let until = *self.overloads.get(path).ok_or_else(|| format!("no overload fault on {path}"))?;
        let attempts = self.requests_to(path);
        ensure!(attempts.iter().any(|a| a.status == Some(503)), "no attempt was refused: {attempts:?}");
        ensure!(attempts.last().map(|a| a.at >= until) == Some(true), "succeeded before the nodes took requests");
        ensure!(
            attempts.iter().all(|a| a.request_id == attempts[0].request_id),
            "the request id changed: {attempts:?}"
        );
        for (i, refused) in attempts.iter().enumerate().filter(|(_, a)| a.status == Some(503)) {
            if let Some(next) = attempts[i + 1..].iter().find(|a| a.node == refused.node) {
                let gap = next.at - refused.at;
                ensure!(gap >= min_gap, "node {} asked again {gap:?} after its 503 with Retry-After", refused.node);
            }
        }
        Ok(())
    }

    // The requests on `lock` after the first `after_first` (at least
    // `at_least` of them) all went to the node `leader`.
    fn requests_went_to_leader(&self, check: &Value) -> Result<(), String> {
        let lock = text(check, "lock")?;
        let leader = number(check, "leader")?;
        let later: Vec<Seen> = self
            .h
            .proxies
            .seen()
            .into_iter()
            .filter(|s| s.path.contains(lock))
            .skip(number(check, "after_first")? as usize)
            .collect();
        ensure!(later.len() as u64 >= number(check, "at_least")?, "too few requests after the first: {later:?}");
        ensure!(
            later.iter().all(|s| s.node == leader),
            "requests after the first went to {:?}, leader is {leader}",
            later.iter().map(|s| s.node).collect::<Vec<_>>()
        );
        Ok(())
    }

    // The answer named `answer` (a `wait_lost`) came no later than the safe
    // deadline of the last successful renewal on `renew_path`: the arrival
    // at a proxy of its first attempt (the first request with its request
    // id) + ttl − margin, plus an allowance for the pipe and the scheduling
    // of two processes on a busy machine.
    fn lost_by_safe_deadline(&self, check: &Value) -> Result<(), String> {
        let name = text(check, "answer")?;
        let lost = self.answers.get(name).ok_or_else(|| format!("no answer named {name}"))?;
        let renewals = self.requests_to(text(check, "renew_path")?);
        let last = renewals.iter().rev().find(|s| s.status == Some(200)).ok_or("no successful renewal seen")?;
        let first_attempt =
            renewals.iter().find(|s| s.request_id.is_some() && s.request_id == last.request_id).unwrap_or(last);
        let safe = ms(check, "ttl_ms")?.checked_sub(ms(check, "drift_margin_ms")?).ok_or("margin above ttl")?;
        let deadline = first_attempt.at + safe;
        ensure!(
            lost.at <= deadline + ms(check, "allowance_ms")?,
            "lost {:?} after the safe deadline",
            lost.at - deadline
        );
        Ok(())
    }
}

/// Whether `actual` is what `expected` describes (at `at`, for the message):
/// an object names some fields of an object, each matched in turn; an
/// object of `$` operators is a test (`$eq` equal as a whole, `$gt`, `$lt`,
/// `$in` one of a list, `$type`); anything else must be equal.
fn matches(expected: &Value, actual: &Value, at: &str) -> Result<(), String> {
    let Value::Object(map) = expected else {
        ensure!(expected == actual, "at {at:?}: expected {expected}, got {actual}");
        return Ok(());
    };
    if map.keys().any(|k| k.starts_with('$')) {
        for (operator, operand) in map {
            let holds = match operator.as_str() {
                "$eq" => operand == actual,
                "$gt" => compare(actual, operand) == Some(std::cmp::Ordering::Greater),
                "$lt" => compare(actual, operand) == Some(std::cmp::Ordering::Less),
                "$in" => operand.as_array().ok_or("$in takes a list")?.contains(actual),
                "$type" => operand.as_str() == Some(type_name(actual)),
                other => return Err(format!("no operator {other}")),
            };
            ensure!(holds, "at {at:?}: expected {operator} {operand}, got {actual}");
        }
        return Ok(());
    }
    ensure!(actual.is_object(), "at {at:?}: expected an object, got {actual}");
    for (key, expected) in map {
        matches(expected, actual.get(key).unwrap_or(&Value::Null), &format!("{at}.{key}"))?;
    }
    Ok(())
}

fn compare(actual: &Value, operand: &Value) -> Option<std::cmp::Ordering> {
    match (actual.as_u64(), operand.as_u64()) {
        (Some(a), Some(b)) => Some(a.cmp(&b)),
        _ => actual.as_f64()?.partial_cmp(&operand.as_f64()?),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
