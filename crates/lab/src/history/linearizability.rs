//! The linearizability checker: is there one order of the history's
//! operations, each placed at a point between its send and its answer,
//! in which the sequential [`model`](super::model) of the lock table gives
//! every answer the clients saw? Pure: no clock, no I/O.
//!
//! The search is Wing & Gong's with Lowe's memo, as Porcupine does it:
//! depth first over "linearize one more operation", where only an operation
//! that was sent before every not-yet-linearized one was answered may go
//! next, and a (set of linearized operations, model state, time) already
//! explored is never explored again. Three additions of leasehold's own:
//!
//! - **Real time in the search.** The model's expiry may only happen once a
//!   lease's ttl has passed, so each search node carries the earliest real
//!   time its last point can be at (points are placed greedily, as early as
//!   their send and the expiries before them allow); an operation answered
//!   before that time can no longer go next, which prunes the node.
//! - **P-compositionality over connected components.** Operations touch
//!   keys: lock names, sessions, records, gates. A multi-lock acquire joins
//!   its names, a lock held under a session joins the session (its expiry
//!   or delete frees all its locks at once), a record write or gate pass
//!   joins its lock. Operations of different components touch disjoint
//!   state, so the history is linearizable exactly when each component is,
//!   and each is searched on its own.
//! - **Lost answers.** An operation whose answer never came may take effect
//!   at any point after its send, or never: it is a candidate for every
//!   node from its send on, and the search succeeds once every *answered*
//!   operation is linearized. Lost reads, renewals, keepalives and session
//!   creates are left out up front (taking effect would only make expiry
//!   later, or change nothing a later answer can show), and so is a lost
//!   acquire whose owner no operation ever shows holding the lock (had it
//!   been granted, only its expiry could follow: a `held` refusal names the
//!   holder it saw).
//!
//! Each component's search has a budget of nodes: past it the component's
//! verdict is "unknown", never a guess. A component that is not
//! linearizable is reported by its deepest dead end: the model's state of
//! the keys involved, the last operations linearized on them, and every
//! operation that could have gone next with why it could not — the
//! shortest window that shows the violation.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde::Serialize;

use super::model::{
    step, Answer, Call, Contradiction, Holder, Life, Lock, OwnerId, Refusal, Session, Slot, SlotId, State, Transition,
};
use super::{OpKind, OpResult, Operation};

/// Nodes one component's search may explore before it gives up.
pub const DEFAULT_BUDGET: u64 = 5_000_000;

/// How many operations before the dead end a violation report shows.
const CONTEXT: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Linearizable,
    NotLinearizable,
    /// Some component ran out of budget (and none was found not linearizable).
    Unknown,
}

/// A component that is not linearizable, told by its deepest dead end.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    /// The keys (lock names, sessions, records, gates) of the operations shown.
    pub keys: Vec<String>,
    /// From the earliest send to the latest answer of the operations shown, µs.
    pub from_us: u64,
    pub to_us: u64,
    /// The model's state of those keys at the dead end, one line each.
    pub state: Vec<String>,
    /// The last operations linearized on those keys before it, oldest first.
    pub linearized: Vec<String>,
    /// Every operation that could have gone next, and why it could not.
    pub stuck: Vec<String>,
}

/// What [`check_linearizable`] found.
#[derive(Debug, Clone, Serialize)]
pub struct LinearizabilityReport {
    pub verdict: Verdict,
    /// Operations judged, after lost ones that could show nothing were left out.
    pub operations: usize,
    pub components: usize,
    pub largest_component: usize,
    /// Search nodes explored over all components.
    pub explored: u64,
    pub budget: u64,
    /// Components whose search ran out of budget: their keys, a few each.
    pub out_of_budget: Vec<String>,
    pub violations: Vec<Window>,
}

impl LinearizabilityReport {
    /// One line for the console and the report.
    pub fn summary(&self) -> String {
        let verdict = match self.verdict {
            Verdict::Linearizable => "linearizable".to_string(),
            Verdict::NotLinearizable => format!("NOT linearizable ({} components)", self.violations.len()),
            Verdict::Unknown => format!("unknown ({} components out of budget)", self.out_of_budget.len()),
        };
        format!(
            "{verdict}: {} operations in {} components (largest {}), {} search nodes",
            self.operations, self.components, self.largest_component, self.explored
        )
    }
}

/// Checks `operations` against the model, exploring at most `budget` nodes
/// per component.
pub fn check_linearizable(operations: &[Operation], budget: u64) -> LinearizabilityReport {
    let components = components(operations);
    let mut report = LinearizabilityReport {
        verdict: Verdict::Linearizable,
        operations: components.iter().map(Vec::len).sum(),
        components: components.len(),
        largest_component: components.iter().map(Vec::len).max().unwrap_or(0),
        explored: 0,
        budget,
        out_of_budget: Vec::new(),
        violations: Vec::new(),
    };
    for ops in &components {
        let compiled = Component::compile(operations, ops);
        let mut search = Search::new(&compiled);
        let outcome = search.run(budget);
        report.explored += search.explored;
        match outcome {
            Outcome::Linearizable => {}
            Outcome::OutOfBudget => report.out_of_budget.push(compiled.describe_keys(5)),
            Outcome::Dead => {
                let deepest = search.deepest.as_ref().expect("a dead search expanded its root");
                let path = search.path(deepest.tip);
                report.violations.push(compiled.window(operations, deepest, &path))
            }
        }
    }
    report.verdict = if !report.violations.is_empty() {
        Verdict::NotLinearizable
    } else if !report.out_of_budget.is_empty() {
        Verdict::Unknown
    } else {
        Verdict::Linearizable
    };
    report
}

/// What an operation touches, as keys of the union-find.
fn keys(op: &Operation) -> Vec<String> {
    let mut keys: Vec<String> = op.locks().map(|l| format!("lock {l}")).collect();
    if let Some(s) = op.session {
        keys.push(format!("session {s}"));
    }
    match (op.kind, &op.key) {
        (OpKind::Gate, Some(k)) => keys.push(format!("gate {k}")),
        (_, Some(k)) => keys.push(format!("record {k}")),
        _ => {}
    }
    keys
}

/// A lost answer, or one as good as lost: a node's request timeout (408)
/// does not say the request was not applied.
fn is_lost(op: &Operation) -> bool {
    match &op.result {
        OpResult::Unknown { .. } => true,
        OpResult::Refused { code } => code == "request_timeout",
        _ => false,
    }
}

/// Whether any operation shows `owner` holding `lock`: reads of it as
/// holder, refusals naming it, its own answered acquires and its renewals,
/// releases, record writes and gate passes.
fn shown_holding(operations: &[Operation]) -> HashSet<(&str, &str)> {
    let mut shown = HashSet::new();
    for op in operations {
        for lock in op.locks() {
            if let OpResult::Held { owner, .. } = &op.result {
                shown.insert((owner.as_str(), lock));
            }
            if let Some(holder) = &op.holder {
                shown.insert((holder.as_str(), lock));
            }
            let acts_as_holder = !op.kind.is_acquire() && op.token.is_some();
            if acts_as_holder || op.is_grant() {
                shown.insert((op.client.as_str(), lock));
            }
        }
    }
    shown
}

/// The operations worth searching, grouped by connected component of the
/// keys they touch (indices into `operations`).
fn components(operations: &[Operation]) -> Vec<Vec<usize>> {
    let shown = shown_holding(operations);
    let relevant = |op: &Operation| {
        if !is_lost(op) {
            return true;
        }
        match op.kind {
            OpKind::Read | OpKind::GetRecord | OpKind::Renew | OpKind::KeepAlive | OpKind::SessionCreate => false,
            kind if kind.is_acquire() => op.locks().any(|l| shown.contains(&(op.client.as_str(), l))),
            _ => true,
        }
    };
    let mut parent: Vec<usize> = Vec::new();
    let mut key_ids: HashMap<String, usize> = HashMap::new();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut op_keys = Vec::with_capacity(operations.len());
    for op in operations {
        let ids: Vec<usize> = if relevant(op) {
            keys(op)
                .into_iter()
                .map(|k| {
                    *key_ids.entry(k).or_insert_with(|| {
                        parent.push(parent.len());
                        parent.len() - 1
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        for pair in ids.windows(2) {
            let (a, b) = (root(&mut parent, pair[0]), root(&mut parent, pair[1]));
            parent[a] = b;
        }
        op_keys.push(ids);
    }
    let mut by_root: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, ids) in op_keys.iter().enumerate() {
        if let Some(first) = ids.first() {
            by_root.entry(root(&mut parent, *first)).or_default().push(i);
        }
    }
    let mut components: Vec<Vec<usize>> = by_root.into_values().collect();
    components.sort_by_key(|ops| ops[0]);
    components
}

/// One component, its operations compiled to [`Call`]s over slots, sorted
/// by send time.
struct Component {
    calls: Vec<Call>,
    /// The operation each call came from (index into the history).
    origin: Vec<usize>,
    /// The key of each slot, and its initial value.
    slot_keys: Vec<String>,
    initial: Vec<Slot>,
    owners: Vec<String>,
}

impl Component {
    fn compile(operations: &[Operation], ops: &[usize]) -> Component {
        let mut c = Component {
            calls: Vec::new(),
            origin: Vec::new(),
            slot_keys: Vec::new(),
            initial: Vec::new(),
            owners: Vec::new(),
        };
        let mut slots: HashMap<String, SlotId> = HashMap::new();
        let mut owners: HashMap<String, OwnerId> = HashMap::new();
        let mut slot = |c: &mut Component, key: String, initial: Slot| {
            *slots.entry(key.clone()).or_insert_with(|| {
                c.slot_keys.push(key);
                c.initial.push(initial);
                (c.initial.len() - 1) as SlotId
            })
        };
        let mut owner = |c: &mut Component, name: &str| {
            *owners.entry(name.to_owned()).or_insert_with(|| {
                c.owners.push(name.to_owned());
                (c.owners.len() - 1) as OwnerId
            })
        };
        let mut sorted = ops.to_vec();
        sorted.sort_by_key(|i| operations[*i].sent_us);
        for i in sorted {
            let op = &operations[i];
            let lost = is_lost(op);
            let answer = match &op.result {
                _ if lost => Answer::Unknown,
                OpResult::Granted { token, ttl_ms } => Answer::Granted { token: *token, ttl_us: ttl_ms * 1000 },
                OpResult::Released => Answer::Released,
                OpResult::Held { owner: o, token } => Answer::Held { owner: owner(&mut c, o), token: *token },
                OpResult::Free => Answer::Free,
                OpResult::SessionAlive { ttl_ms } => Answer::Alive { ttl_us: ttl_ms * 1000 },
                OpResult::Written { index } => Answer::Written { index: *index },
                OpResult::Record { token, index } => Answer::Record { token: *token, index: *index },
                OpResult::Admitted => Answer::Admitted,
                OpResult::Refused { code } => Answer::Refused {
                    refusal: Refusal::from_code(code),
                    holder: op.holder.as_deref().map(|h| owner(&mut c, h)),
                },
                OpResult::Unknown { .. } => Answer::Unknown,
            };
            let locks = op.locks().map(|l| slot(&mut c, format!("lock {l}"), Slot::Lock(Lock::default()))).collect();
            let session = op.session.map(|s| slot(&mut c, format!("session {s}"), Slot::Session(Session::Unborn)));
            let key = op.key.as_ref().map(|k| match op.kind {
                OpKind::Gate => slot(&mut c, format!("gate {k}"), Slot::Gate(None)),
                _ => slot(&mut c, format!("record {k}"), Slot::Record(None)),
            });
            let call = Call {
                kind: op.kind,
                owner: owner(&mut c, &op.client),
                locks,
                session,
                key,
                token: op.token,
                sent_us: op.sent_us,
                received_us: if lost { u64::MAX } else { op.received_us.max(op.sent_us) },
                answer,
            };
            c.calls.push(call);
            c.origin.push(i);
        }
        c
    }

    /// Per slot, the locks acquired under it when it is a session.
    fn session_locks(&self) -> Vec<Vec<SlotId>> {
        let mut locks: Vec<Vec<SlotId>> = vec![Vec::new(); self.initial.len()];
        for call in self.calls.iter().filter(|c| c.kind.is_acquire()) {
            if let Some(s) = call.session {
                locks[s as usize].extend(&call.locks);
            }
        }
        for l in &mut locks {
            l.sort_unstable();
            l.dedup();
        }
        locks
    }

    fn describe_keys(&self, n: usize) -> String {
        let shown: Vec<&str> = self.slot_keys.iter().take(n).map(String::as_str).collect();
        let more = self.slot_keys.len().saturating_sub(n);
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        format!("{} operations on {}{more}", self.calls.len(), shown.join(", "))
    }

    fn describe_slot(&self, id: SlotId, slot: &Slot) -> String {
        let key = &self.slot_keys[id as usize];
        let us = |t: u64| format!("{:.3}s", t as f64 / 1e6);
        match slot {
            Slot::Lock(Lock { holder: None, last_token }) => format!("{key}: free, last token {last_token}"),
            Slot::Lock(Lock { holder: Some(Holder { owner, token, life }), last_token }) => {
                let token = token.map_or("unknown (answer lost)".to_string(), |t| t.to_string());
                let life = match life {
                    Life::Ttl { deadline_us } => format!("may expire from {}", us(*deadline_us)),
                    Life::Session(s) => format!("lives by {}", self.slot_keys[*s as usize]),
                };
                format!(
                    "{key}: held by {} under token {token}, {life}; last token {last_token}",
                    self.owners[*owner as usize]
                )
            }
            Slot::Session(Session::Unborn) => format!("{key}: not created yet"),
            Slot::Session(Session::Alive { deadline_us }) => {
                format!("{key}: alive, may expire from {}", us(*deadline_us))
            }
            Slot::Session(Session::Ended) => format!("{key}: ended"),
            Slot::Record(None) => format!("{key}: never written"),
            Slot::Record(Some(w)) => format!("{key}: written under token {} at index {:?}", w.token, w.index),
            Slot::Gate(None) => format!("{key}: admitted nothing yet"),
            Slot::Gate(Some(a)) => {
                format!("{key}: serves {}, highest admitted {}", self.slot_keys[a.lock as usize], a.highest)
            }
        }
    }

    fn slots_of(call: &Call) -> impl Iterator<Item = SlotId> + '_ {
        call.locks.iter().copied().chain(call.session).chain(call.key)
    }

    /// The report of a dead end.
    fn window(&self, operations: &[Operation], deepest: &DeadEnd, path: &[usize]) -> Window {
        let mut keys: BTreeSet<SlotId> =
            deepest.stuck.iter().flat_map(|(c, _)| Self::slots_of(&self.calls[*c])).collect();
        // Sessions holding the stuck locks, and the locks of stuck sessions, belong to the story.
        for (id, slot) in &deepest.state {
            if let Slot::Lock(Lock { holder: Some(Holder { life: Life::Session(s), .. }), .. }) = slot {
                if keys.contains(id) {
                    keys.insert(*s);
                }
            }
        }
        let linearized: Vec<usize> =
            path.iter().copied().filter(|c| Self::slots_of(&self.calls[*c]).any(|s| keys.contains(&s))).collect();
        let linearized = &linearized[linearized.len().saturating_sub(CONTEXT)..];
        let shown: Vec<&Operation> = linearized
            .iter()
            .chain(deepest.stuck.iter().map(|(c, _)| c))
            .map(|c| &operations[self.origin[*c]])
            .collect();
        let from_us = shown.iter().map(|op| op.sent_us).min().unwrap_or(0);
        let to_us = shown.iter().filter(|op| !is_lost(op)).map(|op| op.received_us).max().unwrap_or(from_us);
        Window {
            keys: keys.iter().map(|k| self.slot_keys[*k as usize].clone()).collect(),
            from_us,
            to_us,
            state: deepest
                .state
                .iter()
                .filter(|(id, _)| keys.contains(id))
                .map(|(id, slot)| self.describe_slot(*id, slot))
                .collect(),
            linearized: linearized.iter().map(|c| describe(&operations[self.origin[*c]])).collect(),
            stuck: deepest
                .stuck
                .iter()
                .map(|(c, why)| {
                    let op = describe(&operations[self.origin[*c]]);
                    match why {
                        Some(e) => format!("{op}: {} ({})", e.why, self.slot_keys[e.slot as usize]),
                        None => format!("{op}: fits here, but no order of what follows does"),
                    }
                })
                .collect(),
        }
    }
}

/// One operation in one line: what, who, on what, when, and the answer.
pub fn describe(op: &Operation) -> String {
    let on: Vec<String> = keys(op);
    let token = op.token.map_or(String::new(), |t| format!(" token {t}"));
    let answer = match &op.result {
        OpResult::Granted { token, ttl_ms } => format!("granted token {token} for {ttl_ms} ms"),
        OpResult::Released => "released".into(),
        OpResult::Held { owner, token } => format!("held by {owner} under {token}"),
        OpResult::Free => "free".into(),
        OpResult::SessionAlive { ttl_ms } => format!("alive for {ttl_ms} ms"),
        OpResult::Written { index } => format!("written at {index}"),
        OpResult::Record { token, index } => format!("record under {token} at {index}"),
        OpResult::Admitted => "admitted".into(),
        OpResult::Refused { code } => match &op.holder {
            Some(h) => format!("refused {code} (holder {h})"),
            None => format!("refused {code}"),
        },
        OpResult::Unknown { reason } => format!("unknown ({reason})"),
    };
    format!(
        "{:?} by {} on {}{token}, sent {:.6}s, answered {:.6}s: {answer}",
        op.kind,
        op.client,
        on.join(" + "),
        op.sent_us as f64 / 1e6,
        op.received_us as f64 / 1e6
    )
}

enum Outcome {
    Linearizable,
    Dead,
    OutOfBudget,
}

/// The deepest node the search reached, for the report.
struct DeadEnd {
    depth: usize,
    /// The last call linearized on the way there, in the search's trail.
    tip: Option<usize>,
    /// Every candidate there, with the model's objection (`None`: it fitted,
    /// but led nowhere).
    stuck: Vec<(usize, Option<Contradiction>)>,
    /// The slots the candidates touch, as they stood.
    state: Vec<(SlotId, Slot)>,
}

/// One step taken, with what undoes it.
struct Applied {
    call: usize,
    undo: Vec<(SlotId, Slot)>,
    previous_at_us: u64,
    previous_tip: Option<usize>,
}

/// A search node: the moves out of it, the next to try, and the one in effect.
struct Frame {
    moves: Vec<(usize, Transition)>,
    next: usize,
    applied: Option<Applied>,
}

/// Wing & Gong's search over one component, with Lowe's memo.
struct Search<'a> {
    calls: &'a [Call],
    /// Not yet linearized calls as a doubly linked list in send order
    /// (index `calls.len()` is the head), so a step unlinks one and its undo
    /// puts it back in O(1).
    next: Vec<usize>,
    prev: Vec<usize>,
    /// Not yet linearized answered calls by answer time: the first one
    /// bounds which calls may go next.
    by_answer: BTreeSet<(u64, usize)>,
    /// Random bits per call; the XOR over the linearized set is its fingerprint.
    zobrist: Vec<u128>,
    linearized_set: u128,
    depth: usize,
    state: State,
    /// The earliest real time the last point placed can be at.
    at_us: u64,
    seen: HashSet<(u128, u64, u64)>,
    /// The calls linearized, each with the one before it: a path is read
    /// back from its tip, so the deepest node keeps its path without a copy.
    trail: Vec<(usize, Option<usize>)>,
    tip: Option<usize>,
    explored: u64,
    deepest: Option<DeadEnd>,
}

impl<'a> Search<'a> {
    fn new(component: &'a Component) -> Search<'a> {
        let n = component.calls.len();
        let head = n;
        let mut rng = fastrand::Rng::with_seed(0x6c65_6173_6568_6f6c);
        Search {
            calls: &component.calls,
            next: (0..=n).map(|i| if i == head { 0 } else { i + 1 }).collect(),
            prev: (0..=n)
                .map(|i| {
                    if i == 0 {
                        head
                    } else if i == head {
                        n.saturating_sub(1)
                    } else {
                        i - 1
                    }
                })
                .collect(),
            by_answer: component
                .calls
                .iter()
                .enumerate()
                .filter(|(_, c)| c.answer != Answer::Unknown)
                .map(|(i, c)| (c.received_us, i))
                .collect(),
            zobrist: (0..n).map(|_| rng.u128(..)).collect(),
            linearized_set: 0,
            depth: 0,
            state: State::new(component.initial.clone(), component.session_locks()),
            at_us: 0,
            seen: HashSet::new(),
            trail: Vec::new(),
            tip: None,
            explored: 0,
            deepest: None,
        }
    }

    fn head(&self) -> usize {
        self.calls.len()
    }

    /// The calls that may go next: sent before the earliest answer of any
    /// answered call not linearized yet.
    fn candidates(&self) -> Vec<usize> {
        let bound = self.by_answer.first().map_or(u64::MAX, |(at, _)| *at);
        let mut out = Vec::new();
        let mut i = self.next[self.head()];
        while i != self.head() && self.calls[i].sent_us <= bound {
            out.push(i);
            i = self.next[i];
        }
        out
    }

    /// The calls linearized up to `tip`, in order.
    fn path(&self, mut tip: Option<usize>) -> Vec<usize> {
        let mut path = Vec::new();
        while let Some(at) = tip {
            path.push(self.trail[at].0);
            tip = self.trail[at].1;
        }
        path.reverse();
        path
    }

    fn expand(&mut self) -> Frame {
        let mut moves = Vec::new();
        let mut objections = Vec::new();
        for c in self.candidates() {
            match step(&self.state, &self.calls[c], self.at_us) {
                Ok(transitions) => {
                    if transitions.is_empty() {
                        continue;
                    }
                    moves.extend(transitions.into_iter().map(|t| (c, t)));
                    objections.push((c, None));
                }
                Err(e) => objections.push((c, Some(e))),
            }
        }
        if self.deepest.as_ref().is_none_or(|d| self.depth > d.depth) {
            let slots: BTreeSet<SlotId> =
                objections.iter().flat_map(|(c, _)| Component::slots_of(&self.calls[*c])).collect();
            self.deepest = Some(DeadEnd {
                depth: self.depth,
                tip: self.tip,
                state: slots.into_iter().map(|s| (s, self.state.get(s))).collect(),
                stuck: objections,
            });
        }
        Frame { moves, next: 0, applied: None }
    }

    fn answered_left(&self) -> bool {
        !self.by_answer.is_empty()
    }

    fn apply(&mut self, call: usize, transition: &Transition) -> Applied {
        let (p, n) = (self.prev[call], self.next[call]);
        self.next[p] = n;
        self.prev[n] = p;
        let c = &self.calls[call];
        if c.answer != Answer::Unknown {
            self.by_answer.remove(&(c.received_us, call));
        }
        self.linearized_set ^= self.zobrist[call];
        self.depth += 1;
        let undo = transition.writes.iter().map(|(id, slot)| (*id, self.state.set(*id, *slot))).collect();
        let previous_at_us = std::mem::replace(&mut self.at_us, transition.at_us);
        self.trail.push((call, self.tip));
        let previous_tip = self.tip.replace(self.trail.len() - 1);
        Applied { call, undo, previous_at_us, previous_tip }
    }

    fn undo(&mut self, applied: Applied) {
        let call = applied.call;
        for (id, slot) in applied.undo.into_iter().rev() {
            self.state.set(id, slot);
        }
        self.at_us = applied.previous_at_us;
        // The trail keeps the entry only while the deepest node's path needs it.
        let kept = self.deepest.as_ref().and_then(|d| d.tip);
        if self.tip == Some(self.trail.len() - 1) && self.tip != kept {
            self.trail.pop();
        }
        self.tip = applied.previous_tip;
        self.depth -= 1;
        self.linearized_set ^= self.zobrist[call];
        let c = &self.calls[call];
        if c.answer != Answer::Unknown {
            self.by_answer.insert((c.received_us, call));
        }
        let (p, n) = (self.prev[call], self.next[call]);
        self.next[p] = call;
        self.prev[n] = call;
    }

    fn run(&mut self, budget: u64) -> Outcome {
        if !self.answered_left() {
            return Outcome::Linearizable;
        }
        let root = self.expand();
        let mut stack = vec![root];
        while let Some(top) = stack.len().checked_sub(1) {
            if let Some(applied) = stack[top].applied.take() {
                self.undo(applied);
            }
            let frame = &mut stack[top];
            let Some((call, transition)) = frame.moves.get(frame.next).cloned() else {
                stack.pop();
                continue;
            };
            frame.next += 1;
            let applied = self.apply(call, &transition);
            // A call answered before this point can no longer be placed.
            let bound = self.by_answer.first().map_or(u64::MAX, |(at, _)| *at);
            let key = (self.linearized_set, self.state.fingerprint(), self.at_us);
            if self.at_us > bound || !self.seen.insert(key) {
                self.undo(applied);
                continue;
            }
            stack[top].applied = Some(applied);
            if !self.answered_left() {
                return Outcome::Linearizable;
            }
            self.explored += 1;
            if self.explored > budget {
                return Outcome::OutOfBudget;
            }
            let child = self.expand();
            stack.push(child);
        }
        Outcome::Dead
    }
}

#[cfg(test)]
mod tests;
