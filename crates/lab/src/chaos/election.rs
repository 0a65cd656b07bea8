//! The election side of the fault suite: candidates campaigning for one
//! election and observers following it, while the nemesis injects faults.
//!
//! - **Candidates** campaign (ttl 3 s, waiting up to 2 s, FIFO), and once
//!   elected hold the leadership for 0.5–2 s, renewing it every second,
//!   then resign (three in four) or abandon it to expire (one in four).
//!   Every acknowledged election is recorded with its token.
//! - **Observers** follow `observe` from the start, through every fault:
//!   their [`Watch`](leasehold_client::Watch) resumes on another node
//!   after the last event it got; only a `410 compacted` makes one start
//!   over from the current leader, which the record marks as a resync.
//!
//! [`check`] then asks: at most one leader per token; every observer saw
//! events in log order, leaders' tokens never going down; and between two
//! resyncs no observer missed a leader that anyone was told was elected or
//! that another observer saw.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::history::{HarnessClock, Violation, ViolationKind};
use leasehold_client::proto::EventKind;
use leasehold_client::{Client, ErrorCode, FencingToken};

/// The one election the candidates campaign in.
pub const ELECTION: &str = "chaos-election";
const TTL_MS: u64 = 3_000;
const WAIT: Duration = Duration::from_secs(2);
const RENEW_EVERY: Duration = Duration::from_secs(1);

/// A leadership a candidate was told it won.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Elected {
    pub candidate: String,
    pub token: u64,
    pub at_us: u64,
}

/// What an observer saw, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "seen", rename_all = "snake_case")]
pub enum Seen {
    /// A leader (elected, or announcing a value) under `token`, from the
    /// event with `id`.
    Leader { id: String, owner: String, token: u64, at_us: u64 },
    /// The leadership under `token` ended.
    Ended { id: String, token: u64, at_us: u64 },
    /// The stream was compacted past the observer: it started over from
    /// the current leader, so what came between is not its to have seen.
    Resync { at_us: u64 },
}

/// The election side's record.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ElectionRecord {
    pub elected: Vec<Elected>,
    pub observers: Vec<Vec<Seen>>,
}

/// The running candidates and observers.
pub struct Elections {
    stop: Arc<AtomicBool>,
    candidates: Vec<JoinHandle<Vec<Elected>>>,
    observers: Vec<JoinHandle<Vec<Seen>>>,
}

impl Elections {
    pub fn start(client: &Arc<Client>, clock: HarnessClock, candidates: usize, observers: usize) -> Elections {
        let stop = Arc::new(AtomicBool::new(false));
        let candidates = (0..candidates)
            .map(|i| tokio::spawn(candidate(Arc::clone(client), format!("candidate-{i}"), clock, Arc::clone(&stop))))
            .collect();
        let observers =
            (0..observers).map(|_| tokio::spawn(observer(Arc::clone(client), clock, Arc::clone(&stop)))).collect();
        Elections { stop, candidates, observers }
    }

    /// Stops them and returns what they recorded.
    pub async fn stop(self) -> ElectionRecord {
        self.stop.store(true, Ordering::SeqCst);
        let mut record = ElectionRecord::default();
        for task in self.candidates {
            record.elected.extend(task.await.unwrap_or_default());
        }
        for task in self.observers {
            record.observers.push(task.await.unwrap_or_default());
        }
        record
    }
}

async fn candidate(client: Arc<Client>, name: String, clock: HarnessClock, stop: Arc<AtomicBool>) -> Vec<Elected> {
    let mut elected = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let value = json!({ "candidate": name });
        let token = match client.campaign(ELECTION, &name, &value, TTL_MS, Some(WAIT)).await {
            Ok((leader, _)) => leader.token,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        elected.push(Elected { candidate: name.clone(), token: token.get(), at_us: clock.now_us() });
        hold(&client, token).await;
        if fastrand::u8(..4) == 0 {
            // Abandoned: it expires, and passes on in the Tick that expires it.
            tokio::time::sleep(Duration::from_millis(TTL_MS + 500)).await;
        } else {
            let _ = client.resign(ELECTION, &name, token).await;
        }
    }
    elected
}

/// Holds the leadership for 0.5–2 s, renewing it; stops early once a
/// renewal says it has ended.
async fn hold(client: &Client, token: FencingToken) {
    let until = tokio::time::Instant::now() + Duration::from_millis(fastrand::u64(500..2000));
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(RENEW_EVERY.min(until - tokio::time::Instant::now())).await;
        if let Err(e) = client.renew(ELECTION, token, None).await {
            if matches!(e.code(), Some(ErrorCode::StaleToken | ErrorCode::NotHeld)) {
                return;
            }
        }
    }
}

async fn observer(client: Arc<Client>, clock: HarnessClock, stop: Arc<AtomicBool>) -> Vec<Seen> {
    let mut seen = Vec::new();
    let mut watch = client.observe(ELECTION, None);
    while !stop.load(Ordering::SeqCst) {
        let next = match tokio::time::timeout(Duration::from_millis(500), watch.next()).await {
            Ok(next) => next,
            // Nothing for a while: look at the stop flag again.
            Err(_) => continue,
        };
        let at_us = clock.now_us();
        match next {
            Ok(event) => match event.event.kind {
                EventKind::Proclaimed { owner, token, .. } => {
                    seen.push(Seen::Leader { id: event.id, owner, token: token.get(), at_us })
                }
                EventKind::Released { token, .. } | EventKind::Expired { token, .. } => {
                    seen.push(Seen::Ended { id: event.id, token: token.get(), at_us })
                }
                _ => {}
            },
            Err(e) if e.code() == Some(ErrorCode::Compacted) => {
                seen.push(Seen::Resync { at_us });
                watch = client.observe(ELECTION, None);
            }
            // The cluster was unavailable for a whole retry budget: the
            // watch keeps its place and tries again.
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    seen
}

/// Checks the record (see the module documentation).
pub fn check(record: &ElectionRecord) -> Vec<Violation> {
    let mut violations = Vec::new();
    let violation = |kind, at_us, detail: String| Violation { kind, lock: ELECTION.to_owned(), at_us, detail };
    // Every leader anyone knows of: told so, or seen by an observer.
    let mut leaders: Vec<(u64, String, u64)> =
        record.elected.iter().map(|e| (e.token, e.candidate.clone(), e.at_us)).collect();
    for seen in record.observers.iter().flatten() {
        if let Seen::Leader { owner, token, at_us, .. } = seen {
            leaders.push((*token, owner.clone(), *at_us));
        }
    }
    leaders.sort();
    for pair in leaders.windows(2) {
        if pair[0].0 == pair[1].0 && pair[0].1 != pair[1].1 {
            let detail = format!("token {} held by both {} and {}", pair[0].0, pair[0].1, pair[1].1);
            violations.push(violation(ViolationKind::TwoLeaders, pair[1].2, detail));
        }
    }
    let tokens: BTreeSet<u64> = leaders.iter().map(|l| l.0).collect();
    for (n, observed) in record.observers.iter().enumerate() {
        for segment in observed.split(|s| matches!(s, Seen::Resync { .. })) {
            check_segment(n, segment, &tokens, &mut |kind, at, detail| violations.push(violation(kind, at, detail)));
        }
    }
    violations
}

/// One observer's events between two resyncs: ids in log order, leaders'
/// tokens never going down, and no leader in between missed.
fn check_segment(
    observer: usize,
    segment: &[Seen],
    tokens: &BTreeSet<u64>,
    report: &mut impl FnMut(ViolationKind, u64, String),
) {
    let mut last_id: Option<(u64, u64)> = None;
    let mut leaders = Vec::new();
    for seen in segment {
        let (id, at_us) = match seen {
            Seen::Leader { id, token, at_us, .. } => {
                if leaders.last().is_some_and(|last| last > token) {
                    report(
                        ViolationKind::LeaderTokenOrder,
                        *at_us,
                        format!("observer {observer} saw {token} after a higher token"),
                    );
                }
                leaders.push(*token);
                (id, *at_us)
            }
            Seen::Ended { id, at_us, .. } => (id, *at_us),
            Seen::Resync { .. } => continue,
        };
        let place = parse_id(id);
        if last_id.is_some_and(|last| last >= place) {
            report(
                ViolationKind::ObserverOrder,
                at_us,
                format!("observer {observer} saw event {id} again or out of order"),
            );
        }
        last_id = Some(place);
    }
    let saw: BTreeSet<u64> = leaders.iter().copied().collect();
    let (Some(first), Some(last)) = (saw.first(), saw.last()) else { return };
    for missed in tokens.range(first..=last).filter(|t| !saw.contains(t)) {
        report(ViolationKind::ObserverGap, 0, format!("observer {observer} never saw the leader under token {missed}"));
    }
}

/// An event id as `(index, ordinal)`, an entry's last event after its others.
fn parse_id(id: &str) -> (u64, u64) {
    match id.split_once('.') {
        Some((index, ordinal)) => (index.parse().unwrap_or(0), ordinal.parse().unwrap_or(0)),
        None => (id.parse().unwrap_or(0), u64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(id: &str, owner: &str, token: u64) -> Seen {
        Seen::Leader { id: id.into(), owner: owner.into(), token, at_us: 1 }
    }

    fn kinds(record: &ElectionRecord) -> Vec<ViolationKind> {
        check(record).into_iter().map(|v| v.kind).collect()
    }

    // Ensures a clean record passes, and each property's breach is found:
    // two leaders under one token, a token going down, an event seen
    // twice, a leader an observer missed (but not across a resync).
    #[test]
    fn each_breach_is_found() {
        let elected = |candidate: &str, token| Elected { candidate: candidate.into(), token, at_us: 1 };
        let clean = ElectionRecord {
            elected: vec![elected("a", 5), elected("b", 9)],
            observers: vec![vec![
                leader("5", "a", 5),
                Seen::Ended { id: "9.0".into(), token: 5, at_us: 1 },
                leader("9", "b", 9),
            ]],
        };
        assert!(kinds(&clean).is_empty(), "{:?}", check(&clean));
        let two = ElectionRecord { elected: vec![elected("a", 5), elected("b", 5)], observers: vec![] };
        assert_eq!(kinds(&two), [ViolationKind::TwoLeaders]);
        let down = ElectionRecord { elected: vec![], observers: vec![vec![leader("9", "b", 9), leader("10", "a", 5)]] };
        assert_eq!(kinds(&down), [ViolationKind::LeaderTokenOrder]);
        let again = ElectionRecord { elected: vec![], observers: vec![vec![leader("9", "b", 9), leader("9", "b", 9)]] };
        assert_eq!(kinds(&again), [ViolationKind::ObserverOrder]);
        let gap = ElectionRecord {
            elected: vec![elected("a", 5), elected("c", 7), elected("b", 9)],
            observers: vec![vec![leader("5", "a", 5), leader("9", "b", 9)]],
        };
        assert_eq!(kinds(&gap), [ViolationKind::ObserverGap]);
        let resynced = ElectionRecord {
            elected: gap.elected.clone(),
            observers: vec![vec![leader("5", "a", 5), Seen::Resync { at_us: 1 }, leader("9", "b", 9)]],
        };
        assert!(kinds(&resynced).is_empty());
    }
}
