//! A model of leasehold's lease protocol, checked with Stateright: the tick
//! rule of `DESIGN.md` ("Time: the tick clock") under elections, delayed and
//! reordered messages and clients that pause, for small bounds.
//!
//! It models the rule, not the implementation. Real time is explicit: a
//! global clock `now` in units that only moves forward ([`Action::Advance`]),
//! one tick period being [`LeaseProtocol::tick`] units. Every other action is
//! instantaneous, so any number of them can happen at one instant and any
//! amount of real time can pass between two of them: that is how messages
//! are delayed and reordered, how a leader stalls and how a client pauses.
//!
//! # What is modelled, and where it lives in the code
//! - **Only the leader ticks** ([`Action::Tick`]; `src/raft/ticker.rs`,
//!   `Ticker::run` waits for `ServerState::Leader`).
//! - **One Tick in flight**: a leader proposes no Tick while its previous one
//!   is uncommitted (`Ticker::lead` awaits `client_write`).
//! - **Ticks at least a period apart**: the next Tick is allowed a period
//!   after the previous one completed, i.e. was committed and applied on
//!   the leader (`Ticker::sleep_one_period` sleeps after each completed
//!   write: tokio's `Delay`, never `Burst`).
//! - **A new leader waits a period** before its first Tick (`Ticker::lead`
//!   sleeps before the first write).
//! - **No Tick without a quorum** (`Ticker::lead`, `millis_since_quorum_ack`)
//!   is left out: leaders here may tick whenever the other rules allow,
//!   which only adds behaviours. The code's window (`LEADER_SILENCE_MS`,
//!   seven periods) is longer than the horizon checked, and a Tick that no
//!   majority accepts never commits, so the always-properties do not rest on
//!   it.
//! - **Deadlines in ticks**: a grant or renewal committed when `now_tick` is
//!   `n` expires at the committed Tick that makes `now_tick >= n +
//!   ceil(ttl / tick) + 1` (`LockTable::deadline_for` and `LockTable::tick` in
//!   `crates/core/src/table.rs`); a queued waiter is granted by the Tick that
//!   expires the holder, with that Tick's index as its token.
//! - **Tokens are log indexes** of the granting entry (`DESIGN.md`,
//!   "Fencing tokens").
//! - **Raft**, abstracted: a node campaigns and wins with the votes of a
//!   majority whose terms are lower and whose logs are no more up to date
//!   than its own, and appends a blank entry (openraft's leader entry); a
//!   leader copies its log to a follower ([`Action::Replicate`]) and hears
//!   the answer later ([`Action::Ack`]), when it commits the longest prefix
//!   ending in an entry of its own term that a majority holds; a node that
//!   hears of a higher term steps down. Crashes are pauses here: what a
//!   node loses of an unflushed log is the storage's part, tested with
//!   failpoints (`tests/failpoints.rs`).
//!
//! # What is checked
//! Always, in every reachable state within the bounds:
//! - no lease expires (the committed Tick that ends it) before `ttl` of real
//!   time has passed since its holder sent the request that produced the
//!   grant or the renewal: the client contract, under which a client that
//!   anchors its lease at its send time never uses it after expiry;
//! - the tokens of the lock, in the order grants are committed, strictly
//!   increase;
//! - a committed entry is never replaced (the Raft abstraction is sound).
//!
//! Counted from the grant's *commit* instead, expiry can come early: a grant
//! appended by a leader that is then re-elected commits only with the new
//! term's entries, together with the Tick that ends it (the property
//! [`NO_EARLY_EXPIRY_AFTER_COMMIT`], which the tests show is broken).
//!
//! [`Mutation`]s break one rule each; the tests assert the checker finds a
//! counterexample for each.

use std::fmt;

use stateright::{Model, Property};

/// A point of real time, in model units.
pub type Time = u8;

/// Nodes in the cluster: a majority is two.
pub const NODES: usize = 3;
/// Clients competing for the one lock.
pub const CLIENTS: usize = 2;
const MAJORITY: usize = NODES / 2 + 1;

/// One rule of the protocol broken on purpose, to show the checker notices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// Ticks keep a fixed schedule and fire at once to catch up after a
    /// stall (tokio's default `MissedTickBehavior::Burst`).
    BurstCatchUpTicks,
    /// A new leader ticks at once instead of waiting a period.
    NewLeaderTicksAtOnce,
    /// Deadlines without the `+1` tick for the period in progress.
    DeadlineWithoutPartialTick,
    /// A vote is granted without Raft's up-to-date check on the logs.
    VoteIgnoresLog,
}

/// The protocol and its bounds.
#[derive(Clone, Debug)]
pub struct LeaseProtocol {
    /// Real time units in one tick period (`tick_ms`).
    pub tick: Time,
    /// A lease's ttl, in real time units.
    pub ttl: Time,
    /// The clock stops here.
    pub max_time: Time,
    /// No election beyond this term.
    pub max_term: u8,
    /// No node's log grows beyond this many entries.
    pub max_log: usize,
    /// Requests (acquire or renew) each client sends at most.
    pub requests: [u8; CLIENTS],
    pub mutation: Option<Mutation>,
}

/// What one log entry proposes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Proposal {
    /// The entry a new leader appends.
    Blank,
    Tick,
    /// A client's request, with the real time it was sent (ghost state: the
    /// anchor of the lease it produces).
    Acquire {
        client: u8,
        sent_at: Time,
    },
    Renew {
        client: u8,
        sent_at: Time,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Entry {
    pub term: u8,
    pub proposal: Proposal,
}

/// What a leader keeps for its clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Leadership {
    /// The earliest time of the next Tick.
    pub next_tick_at: Time,
    /// The log position of the Tick proposed and not yet committed.
    pub tick_in_flight: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Node {
    pub term: u8,
    pub log: Vec<Entry>,
    pub leading: Option<Leadership>,
}

/// The lease on the lock, as the committed log defines it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lease {
    pub holder: u8,
    pub token: usize,
    /// The `now_tick` at which it expires.
    pub deadline: u8,
    /// When the holder sent the request that produced the grant or renewal.
    pub anchor: Time,
    /// When that grant or renewal was committed.
    pub committed_at: Time,
}

/// The lock table of the committed log: one lock, one waiter at most.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Table {
    pub now_tick: u8,
    pub lease: Option<Lease>,
    /// A client queued behind the holder, with its request's send time.
    pub waiter: Option<(u8, Time)>,
    pub last_token: usize,
}

/// What the properties look at: facts about the history so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Observed {
    pub early_expiry: bool,
    pub early_after_commit: bool,
    pub token_not_increasing: bool,
    pub committed_entry_replaced: bool,
    pub expired: bool,
    pub handed_over: bool,
    pub renewed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cluster {
    pub now: Time,
    pub nodes: Vec<Node>,
    /// Requests each client may still send.
    pub requests_left: Vec<u8>,
    /// The entries committed so far, in log order.
    pub committed: Vec<Entry>,
    pub table: Table,
    pub observed: Observed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// One unit of real time passes.
    Advance,
    /// `candidate` wins an election with the votes of `voters` (a bit set
    /// that includes the candidate).
    Campaign {
        candidate: u8,
        voters: u8,
    },
    /// `leader`'s log reaches `follower`.
    Replicate {
        leader: u8,
        follower: u8,
    },
    /// `follower`'s answer reaches `leader`.
    Ack {
        leader: u8,
        follower: u8,
    },
    Tick {
        leader: u8,
    },
    /// `client` sends a request that reaches `leader` at once, which
    /// appends it: the latest send time for the entry, so the strictest
    /// anchor for its lease (a request delayed on its way anchors earlier).
    Request {
        leader: u8,
        client: u8,
        renew: bool,
    },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Advance => write!(f, "time passes"),
            Action::Campaign { candidate, voters } => {
                write!(f, "n{candidate} wins an election with votes {voters:03b}")
            }
            Action::Replicate { leader, follower } => write!(f, "n{leader}'s log reaches n{follower}"),
            Action::Ack { leader, follower } => write!(f, "n{follower}'s answer reaches n{leader}"),
            Action::Tick { leader } => write!(f, "n{leader} proposes a Tick"),
            Action::Request { leader, client, renew } => {
                write!(f, "c{client} sends {} to n{leader}", if *renew { "renew" } else { "acquire" })
            }
        }
    }
}

impl LeaseProtocol {
    /// The bounds the CI check runs with: a tick period of two units (so a
    /// request can come in the middle of a period), a ttl of one period,
    /// two periods of real time, two terms (one election after the first),
    /// logs of five entries, and one request from each client: enough for
    /// a grant, its expiry and a hand-over to the waiting client.
    pub fn small() -> Self {
        LeaseProtocol { tick: 2, ttl: 2, max_time: 4, max_term: 2, max_log: 5, requests: [1, 1], mutation: None }
    }

    pub fn with(self, mutation: Mutation) -> Self {
        LeaseProtocol { mutation: Some(mutation), ..self }
    }

    fn mutated(&self, mutation: Mutation) -> bool {
        self.mutation == Some(mutation)
    }

    /// `now_tick + ceil(ttl / tick) + 1`, as `LockTable::deadline_for`.
    fn deadline(&self, now_tick: u8) -> u8 {
        let partial = if self.mutated(Mutation::DeadlineWithoutPartialTick) { 0 } else { 1 };
        now_tick + self.ttl.div_ceil(self.tick) + partial
    }

    /// Raft's vote rule: `candidate`'s log is at least as up to date as `voter`'s.
    fn up_to_date(&self, candidate: &[Entry], voter: &[Entry]) -> bool {
        let last = |log: &[Entry]| (log.last().map_or(0, |e| e.term), log.len());
        self.mutated(Mutation::VoteIgnoresLog) || last(candidate) >= last(voter)
    }

    fn campaign(&self, s: &Cluster, candidate: usize, voters: u8) -> Option<Cluster> {
        let voter_ids: Vec<usize> = (0..NODES).filter(|n| voters & (1 << n) != 0).collect();
        let term = voter_ids.iter().map(|&v| s.nodes[v].term).max()? + 1;
        let log = &s.nodes[candidate].log;
        if term > self.max_term
            || log.len() >= self.max_log
            || !voter_ids.iter().all(|&v| self.up_to_date(log, &s.nodes[v].log))
        {
            return None;
        }
        let mut next = s.clone();
        for v in voter_ids {
            next.nodes[v].term = term;
            next.nodes[v].leading = None;
        }
        let wait = if self.mutated(Mutation::NewLeaderTicksAtOnce) { 0 } else { self.tick };
        let node = &mut next.nodes[candidate];
        node.log.push(Entry { term, proposal: Proposal::Blank });
        node.leading = Some(Leadership { next_tick_at: s.now + wait, tick_in_flight: None });
        Some(next)
    }

    fn replicate(&self, s: &Cluster, leader: usize, follower: usize) -> Option<Cluster> {
        let (l, f) = (&s.nodes[leader], &s.nodes[follower]);
        let mut next = s.clone();
        if f.term > l.term {
            step_down(&mut next.nodes[leader], f.term);
        } else if f.log == l.log && f.term == l.term {
            return None;
        } else {
            // The leader's log always ends in an entry of its own term (its
            // blank entry at least), so Raft's append leaves the follower
            // exactly the leader's log.
            let log = l.log.clone();
            let f = &mut next.nodes[follower];
            step_down(f, l.term);
            f.log = log;
        }
        Some(next)
    }

    fn ack(&self, s: &Cluster, leader: usize, follower: usize) -> Option<Cluster> {
        let (l, f) = (&s.nodes[leader], &s.nodes[follower]);
        let mut next = s.clone();
        if f.term > l.term {
            step_down(&mut next.nodes[leader], f.term);
            return Some(next);
        }
        if f.term < l.term {
            return None;
        }
        // The longest prefix a majority holds, committed if it ends in an
        // entry of the leader's term.
        let term = l.term;
        let held_by = |len: usize| {
            s.nodes.iter().filter(|n| n.term == term && n.log.len() >= len && n.log[..len] == l.log[..len]).count()
        };
        let commit = (1..=l.log.len()).rev().find(|&len| held_by(len) >= MAJORITY && l.log[len - 1].term == term);
        if let Some(len) = commit {
            self.commit(&mut next, leader, len);
        }
        (next != *s).then_some(next)
    }

    /// `leader` commits its log up to `len`: the lock table applies what is
    /// new at real time `now`, and a Tick of its own completes.
    fn commit(&self, s: &mut Cluster, leader: usize, len: usize) {
        let log = s.nodes[leader].log.clone();
        let known = s.committed.len();
        if len <= known {
            return;
        }
        // Entries committed before and now replaced would be a broken Raft:
        // noted, and the table becomes the new log's, whose new grants are
        // checked against every token clients were given before.
        let kept = log.iter().zip(&s.committed).take_while(|(a, b)| a == b).count();
        if kept < known {
            s.observed.committed_entry_replaced = true;
            let mut replayed = Table { last_token: s.table.last_token, ..Table::default() };
            let mut unchecked = Observed::default();
            for (index, entry) in log.iter().enumerate().take(kept) {
                self.apply(s.now, &mut replayed, &mut unchecked, entry.proposal, index + 1);
            }
            s.table = Table { last_token: s.table.last_token, ..replayed };
        }
        for (index, entry) in log.iter().enumerate().take(len).skip(kept) {
            self.apply(s.now, &mut s.table, &mut s.observed, entry.proposal, index + 1);
        }
        s.committed = log[..len].to_vec();
        let burst = self.mutated(Mutation::BurstCatchUpTicks);
        if let Some(l) = s.nodes[leader].leading.as_mut() {
            if l.tick_in_flight.is_some_and(|at| at < len) {
                l.tick_in_flight = None;
                // Delay: a full period after completion. Burst: the next
                // slot of a fixed schedule, however late this one completed.
                l.next_tick_at = if burst { l.next_tick_at + self.tick } else { s.now + self.tick };
            }
        }
    }

    /// Applies one committed entry at log index `index` (its token if it grants).
    fn apply(&self, now: Time, table: &mut Table, observed: &mut Observed, proposal: Proposal, index: usize) {
        match proposal {
            Proposal::Blank => {}
            Proposal::Acquire { client, sent_at } => match table.lease {
                None => grant(now, observed, table, client, index, self.deadline(table.now_tick), sent_at),
                Some(lease) if lease.holder != client && table.waiter.is_none() => {
                    table.waiter = Some((client, sent_at));
                }
                Some(_) => {}
            },
            Proposal::Renew { client, sent_at } => {
                if let Some(lease) = table.lease.as_mut().filter(|l| l.holder == client) {
                    lease.deadline = self.deadline(table.now_tick);
                    lease.anchor = sent_at;
                    lease.committed_at = now;
                    observed.renewed = true;
                }
            }
            Proposal::Tick => {
                table.now_tick += 1;
                let Some(lease) = table.lease.filter(|l| l.deadline <= table.now_tick) else { return };
                observed.expired = true;
                if now < lease.anchor + self.ttl {
                    observed.early_expiry = true;
                }
                if now < lease.committed_at + self.ttl {
                    observed.early_after_commit = true;
                }
                table.lease = None;
                if let Some((client, sent_at)) = table.waiter.take() {
                    observed.handed_over = true;
                    grant(now, observed, table, client, index, self.deadline(table.now_tick), sent_at);
                }
            }
        }
    }

    fn tick(&self, s: &Cluster, leader: usize) -> Option<Cluster> {
        let node = &s.nodes[leader];
        let l = node.leading?;
        if l.tick_in_flight.is_some() || s.now < l.next_tick_at || node.log.len() >= self.max_log {
            return None;
        }
        let mut next = s.clone();
        let node = &mut next.nodes[leader];
        node.log.push(Entry { term: node.term, proposal: Proposal::Tick });
        node.leading.as_mut()?.tick_in_flight = Some(node.log.len() - 1);
        Some(next)
    }

    fn request(&self, s: &Cluster, leader: usize, client: usize, renew: bool) -> Option<Cluster> {
        let holds = s.table.lease.is_some_and(|l| usize::from(l.holder) == client);
        let waits = s.table.waiter.is_some_and(|(w, _)| usize::from(w) == client);
        let node = &s.nodes[leader];
        if s.requests_left[client] == 0 || renew != holds || waits || node.log.len() >= self.max_log {
            return None;
        }
        let (client_id, sent_at) = (client as u8, s.now);
        let proposal = if renew {
            Proposal::Renew { client: client_id, sent_at }
        } else {
            Proposal::Acquire { client: client_id, sent_at }
        };
        let mut next = s.clone();
        next.requests_left[client] -= 1;
        let node = &mut next.nodes[leader];
        node.log.push(Entry { term: node.term, proposal });
        Some(next)
    }
}

/// The one state the checker keeps of those that differ only in which node
/// or client is which: nodes in order, clients named either way round.
pub fn representative(s: &Cluster) -> Cluster {
    let mut plain = s.clone();
    plain.nodes.sort();
    let mut swapped = plain.clone();
    let swap = |c: &mut u8| *c = (CLIENTS as u8 - 1) - *c;
    for node in &mut swapped.nodes {
        for entry in &mut node.log {
            rename_client(&mut entry.proposal, swap);
        }
    }
    for entry in &mut swapped.committed {
        rename_client(&mut entry.proposal, swap);
    }
    swapped.requests_left.reverse();
    if let Some(lease) = swapped.table.lease.as_mut() {
        swap(&mut lease.holder);
    }
    if let Some((waiter, _)) = swapped.table.waiter.as_mut() {
        swap(waiter);
    }
    swapped.nodes.sort();
    plain.min(swapped)
}

fn rename_client(proposal: &mut Proposal, rename: impl Fn(&mut u8)) {
    if let Proposal::Acquire { client, .. } | Proposal::Renew { client, .. } = proposal {
        rename(client);
    }
}

fn step_down(node: &mut Node, term: u8) {
    node.term = term;
    node.leading = None;
}

fn grant(now: Time, observed: &mut Observed, table: &mut Table, holder: u8, token: usize, deadline: u8, anchor: Time) {
    if token <= table.last_token {
        observed.token_not_increasing = true;
    }
    table.last_token = token;
    table.lease = Some(Lease { holder, token, deadline, anchor, committed_at: now });
}

impl Model for LeaseProtocol {
    type State = Cluster;
    type Action = Action;

    fn init_states(&self) -> Vec<Cluster> {
        vec![Cluster {
            now: 0,
            nodes: vec![Node { term: 0, log: Vec::new(), leading: None }; NODES],
            requests_left: self.requests.to_vec(),
            committed: Vec::new(),
            table: Table::default(),
            observed: Observed::default(),
        }]
    }

    fn actions(&self, _: &Cluster, actions: &mut Vec<Action>) {
        actions.push(Action::Advance);
        for n in 0..NODES as u8 {
            // Every majority that includes the candidate.
            for voters in 1..(1u8 << NODES) {
                if voters & (1 << n) != 0 && voters.count_ones() as usize >= MAJORITY {
                    actions.push(Action::Campaign { candidate: n, voters });
                }
            }
            for other in (0..NODES as u8).filter(|&o| o != n) {
                actions.push(Action::Replicate { leader: n, follower: other });
                actions.push(Action::Ack { leader: n, follower: other });
            }
            actions.push(Action::Tick { leader: n });
            for client in 0..CLIENTS as u8 {
                actions.push(Action::Request { leader: n, client, renew: false });
                actions.push(Action::Request { leader: n, client, renew: true });
            }
        }
    }

    fn next_state(&self, s: &Cluster, action: Action) -> Option<Cluster> {
        let leading = |n: u8| s.nodes[usize::from(n)].leading.is_some();
        match action {
            Action::Advance => (s.now < self.max_time).then(|| Cluster { now: s.now + 1, ..s.clone() }),
            Action::Campaign { candidate, voters } => self.campaign(s, candidate.into(), voters),
            Action::Replicate { leader, follower } if leading(leader) => {
                self.replicate(s, leader.into(), follower.into())
            }
            Action::Ack { leader, follower } if leading(leader) => self.ack(s, leader.into(), follower.into()),
            Action::Replicate { .. } | Action::Ack { .. } => None,
            Action::Tick { leader } => self.tick(s, leader.into()),
            Action::Request { leader, client, renew } if leading(leader) => {
                self.request(s, leader.into(), client.into(), renew)
            }
            Action::Request { .. } => None,
        }
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(NO_EARLY_EXPIRY, |_, s: &Cluster| !s.observed.early_expiry),
            Property::always(NO_EARLY_EXPIRY_AFTER_COMMIT, |_, s: &Cluster| !s.observed.early_after_commit),
            Property::always(TOKENS_INCREASE, |_, s: &Cluster| !s.observed.token_not_increasing),
            Property::always(COMMITTED_STAYS, |_, s: &Cluster| !s.observed.committed_entry_replaced),
            // Reachability, so that the always-properties are not vacuous.
            Property::sometimes(A_LEASE_EXPIRES, |_, s: &Cluster| s.observed.expired),
            Property::sometimes(A_TICK_HANDS_OVER, |_, s: &Cluster| s.observed.handed_over),
            Property::sometimes(A_LEASE_IS_RENEWED, |_, s: &Cluster| s.observed.renewed),
        ]
    }
}

/// No lease expires before `ttl` of real time after its request was sent.
pub const NO_EARLY_EXPIRY: &str = "no lease expires before ttl after its request was sent";
pub const NO_EARLY_EXPIRY_AFTER_COMMIT: &str = "no lease expires before ttl after its grant was committed";
pub const TOKENS_INCREASE: &str = "tokens of the lock strictly increase";
pub const COMMITTED_STAYS: &str = "a committed entry is never replaced";
pub const A_LEASE_EXPIRES: &str = "a lease expires";
pub const A_TICK_HANDS_OVER: &str = "a Tick hands the lock to a waiter";
pub const A_LEASE_IS_RENEWED: &str = "a lease is renewed";
