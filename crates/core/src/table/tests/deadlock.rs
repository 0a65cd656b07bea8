//! Unit tests of deadlock refusal: every shape of cycle (two owners, a ring
//! of three, a multi-acquire in the ring, a semaphore, a reservation) is
//! refused at once and changes nothing, and a random test checks against a
//! brute-force cycle finder that no refusal is false and no cycle is missed.

use std::collections::BTreeSet;

use super::*;

fn wait_for(name: &str, owner: &str) -> Command {
    Command::Acquire {
        name: name.into(),
        owner: owner.into(),
        ttl_ms: Some(3000),
        session: None,
        wait_ms: Some(60_000),
        request_id: None,
        lock_delay_ms: None,
        seq: None,
    }
}

fn wait_for_all(names: &[&str], owner: &str) -> Command {
    Command::AcquireMany {
        names: names.iter().map(|n| n.to_string()).collect(),
        owner: owner.into(),
        ttl_ms: Some(3000),
        session: None,
        wait_ms: Some(60_000),
        request_id: None,
        lock_delay_ms: None,
        seq: None,
    }
}

fn deadlock(cycle: &[&str]) -> Result<Outcome, LockError> {
    Err(LockError::Deadlock { cycle: cycle.iter().map(|o| o.to_string()).collect() })
}

// Ensures two owners crossing on two locks: the second to wait is refused
// at once with the cycle, and nothing changes.
#[test]
fn two_owners_crossing_are_refused() {
    let mut log = Log::new();
    log.token("x", "a", 3000);
    log.token("y", "b", 3000);
    assert!(matches!(log.apply(wait_for("y", "a")), Ok(Outcome::Queued { .. })));
    let before = log.table.clone();
    assert_eq!(log.apply(wait_for("x", "b")), deadlock(&["b", "a"]));
    assert_eq!(log.table, before, "a refusal changes nothing");
}

// Ensures a ring of three is refused when its last wait would close it.
#[test]
fn a_ring_of_three_is_refused() {
    let mut log = Log::new();
    for (name, owner) in [("x", "a"), ("y", "b"), ("z", "c")] {
        log.token(name, owner, 3000);
    }
    log.apply(wait_for("y", "a")).unwrap();
    log.apply(wait_for("z", "b")).unwrap();
    assert_eq!(log.apply(wait_for("x", "c")), deadlock(&["c", "a", "b"]));
}

// Ensures a multi-acquire closing a ring is refused, and so is a wait that
// closes a ring through a waiting multi-acquire.
#[test]
fn a_multi_acquire_in_the_ring_is_refused() {
    let mut log = Log::new();
    log.token("x", "a", 3000);
    log.token("y", "b", 3000);
    log.apply(wait_for("y", "a")).unwrap();
    assert_eq!(log.apply(wait_for_all(&["q", "x"], "b")), deadlock(&["b", "a"]));
    let mut log = Log::new();
    log.token("x", "a", 3000);
    log.token("y", "b", 3000);
    log.apply(wait_for_all(&["q", "y"], "a")).unwrap();
    assert_eq!(log.apply(wait_for("x", "b")), deadlock(&["b", "a"]));
}

// Ensures a lock kept free for a multi-acquire first in its queue counts:
// an owner queued behind it waits for it, though it holds nothing yet.
#[test]
fn a_reservation_is_part_of_the_graph() {
    let mut log = Log::new();
    let x = log.token("x", "c", 3000);
    log.token("y", "b", 3000);
    log.apply(wait_for_all(&["x", "y"], "a")).unwrap();
    log.release("x", x).unwrap();
    assert!(log.table.holder("x").is_none(), "x is kept free for a");
    assert_eq!(log.apply(wait_for("x", "b")), deadlock(&["b", "a"]));
}

// Ensures a cycle through a semaphore and through shared holders is refused.
#[test]
fn semaphores_and_shared_holders_are_part_of_the_graph() {
    let mut log = Log::new();
    log.token("x", "a", 3000);
    log.apply(Command::AcquirePermits {
        name: "s".into(),
        owner: "b".into(),
        limit: 1,
        permits: None,
        ttl_ms: Some(3000),
        session: None,
        wait_ms: None,
        request_id: None,
        seq: None,
    })
    .unwrap();
    let wait_permit = Command::AcquirePermits {
        name: "s".into(),
        owner: "a".into(),
        limit: 1,
        permits: None,
        ttl_ms: Some(3000),
        session: None,
        wait_ms: Some(60_000),
        request_id: None,
        seq: None,
    };
    assert!(matches!(log.apply(wait_permit), Ok(Outcome::PermitsQueued { .. })));
    let read = Command::AcquireShared {
        name: "r".into(),
        owner: "b".into(),
        ttl_ms: Some(3000),
        session: None,
        wait_ms: None,
        request_id: None,
        seq: None,
    };
    log.apply(read).unwrap();
    assert_eq!(log.apply(wait_for("x", "b")), deadlock(&["b", "a"]));
    // c waits (exclusive) behind reader b; b cannot wait for c's lock.
    log.token("z", "c", 3000);
    log.apply(wait_for("r", "c")).unwrap();
    assert_eq!(log.apply(wait_for("z", "b")), deadlock(&["b", "c"]));
}

// Ensures waits that close no cycle are never refused: a chain, a herd.
#[test]
fn no_cycle_no_refusal() {
    let mut log = Log::new();
    log.token("x", "a", 3000);
    log.token("y", "b", 3000);
    log.apply(wait_for("y", "a")).unwrap();
    assert!(matches!(log.apply(wait_for("x", "c")), Ok(Outcome::Queued { .. })));
    for i in 0..50 {
        assert!(matches!(log.apply(wait_for("y", &format!("h{i}"))), Ok(Outcome::Queued { .. })));
    }
}

/// The wait-for graph, found by brute force from the table's queues and
/// holders (not from its index): owner → the owners it waits for.
fn brute_graph(table: &LockTable) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, queue) in table.queues.iter() {
        for (i, waiter) in queue.iter().enumerate() {
            let edges = graph.entry(waiter.owner.clone()).or_default();
            edges.extend(table.leases.get(name.as_str()).map(|l| l.owner.to_string()));
            if !waiter.shared {
                edges.extend(table.shared.get(name).into_iter().flat_map(|h| h.keys().cloned()));
            }
            for ahead in queue.iter().take(i) {
                if !(waiter.shared && ahead.shared) {
                    edges.insert(ahead.owner.clone());
                }
            }
        }
    }
    for semaphore in table.semaphores.values() {
        for (i, waiter) in semaphore.queue.iter().enumerate() {
            let edges = graph.entry(waiter.owner.clone()).or_default();
            edges.extend(semaphore.holders.keys().cloned());
            edges.extend(semaphore.queue.iter().take(i).map(|w| w.owner.clone()));
        }
    }
    graph
}

/// Whether `graph` has a cycle: some owner reaches itself.
fn has_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> bool {
    graph.keys().any(|start| {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&String> = graph[start].iter().collect();
        while let Some(next) = stack.pop() {
            if next == start {
                return true;
            }
            if seen.insert(next) {
                stack.extend(graph.get(next).into_iter().flatten());
            }
        }
        false
    })
}

// Ensures, over random waits of every kind (single, multi, shared,
// semaphore) by 5 owners on 4 locks and 2 semaphores, with grants,
// releases, cancels and ticks between them: the graph a brute-force search
// builds never has a cycle, every refusal is a wait that would have made
// one (the wait applied to a copy of the table without the check shows the
// cycle), and each refusal names a real cycle.
#[test]
fn random_waits_agree_with_a_brute_force_cycle_finder() {
    let mut log = Log::new();
    let mut seed = 0xdead_beef_u64;
    let mut below = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut refused, mut queued) = (0, 0);
    for _ in 0..8000 {
        let owner = format!("o{}", below(5));
        let lock = format!("l{}", below(4));
        let wait_ms = Some(below(3) * 20_000);
        let command = match below(9) {
            0 | 1 => Command::Acquire {
                name: lock,
                owner,
                ttl_ms: Some(3000 + 1000 * below(10)),
                session: None,
                wait_ms,
                request_id: None,
                lock_delay_ms: None,
                seq: None,
            },
            2 => {
                let other = format!("l{}", below(4));
                let names = if other == lock { vec![lock] } else { vec![lock, other] };
                Command::AcquireMany {
                    names,
                    owner,
                    ttl_ms: Some(3000),
                    session: None,
                    wait_ms,
                    request_id: None,
                    lock_delay_ms: None,
                    seq: None,
                }
            }
            3 => Command::AcquireShared {
                name: lock,
                owner,
                ttl_ms: Some(3000 + 1000 * below(10)),
                session: None,
                wait_ms,
                request_id: None,
                seq: None,
            },
            4 => Command::AcquirePermits {
                name: format!("s{}", below(2)),
                owner,
                limit: 2,
                permits: Some(1 + below(2) as u32),
                ttl_ms: Some(3000 + 1000 * below(10)),
                session: None,
                wait_ms,
                request_id: None,
                seq: None,
            },
            5 => match log.table.holder(&lock).filter(|g| g.owner == owner) {
                Some(g) => Command::Release { name: lock, token: g.token, request_id: None, session: None, seq: None },
                None => Command::Cancel { name: lock, owner },
            },
            _ => Command::Tick { period_ms: TICK },
        };
        let before = log.table.clone();
        let result = log.apply(command.clone());
        if let Err(LockError::Deadlock { cycle }) = &result {
            refused += 1;
            assert_eq!(log.table, before, "a refusal changes nothing");
            // The same wait, let through, makes a cycle the brute force sees.
            let mut unchecked = before.clone();
            let (shared, resources) = wait_of(&command);
            let owner = cycle[0].clone();
            assert!(graph_with_wait(&unchecked, &owner, &resources, shared), "false refusal: {command} {cycle:?}");
            // Each owner in the cycle waits for the next.
            unchecked = before;
            let graph = with_edges(brute_graph(&unchecked), &owner, &resources, shared, &unchecked);
            for (i, from) in cycle.iter().enumerate() {
                let to = &cycle[(i + 1) % cycle.len()];
                assert!(graph.get(from).is_some_and(|e| e.contains(to)), "{from} does not wait for {to}: {cycle:?}");
            }
        } else if matches!(
            result,
            Ok(Outcome::Queued { .. } | Outcome::QueuedMany { .. } | Outcome::PermitsQueued { .. })
        ) {
            queued += 1;
        }
        assert!(!has_cycle(&brute_graph(&log.table)), "a cycle after {command}");
    }
    assert!(refused > 20 && queued > 200, "the run tried both ({refused} refused, {queued} queued)");
}

/// What a waiting acquire waits for: (shared mode, resources).
fn wait_of(command: &Command) -> (bool, Vec<deadlock_graph::Resource>) {
    use deadlock_graph::Resource;
    match command {
        Command::Acquire { name, .. } => (false, vec![Resource::Lock(name.clone())]),
        Command::AcquireMany { names, .. } => (false, names.iter().cloned().map(Resource::Lock).collect()),
        Command::AcquireShared { name, .. } => (true, vec![Resource::Lock(name.clone())]),
        Command::AcquirePermits { name, .. } => (false, vec![Resource::Semaphore(name.clone())]),
        other => panic!("not a waiting acquire: {other}"),
    }
}

/// Whether `owner` joining the back of the queues of `resources` would
/// put it on a cycle of the brute-force graph.
fn graph_with_wait(table: &LockTable, owner: &str, resources: &[deadlock_graph::Resource], shared: bool) -> bool {
    has_cycle(&with_edges(brute_graph(table), owner, resources, shared, table))
}

/// `graph` with the edges of `owner` joining the back of `resources`' queues.
fn with_edges(
    mut graph: BTreeMap<String, BTreeSet<String>>,
    owner: &str,
    resources: &[deadlock_graph::Resource],
    shared: bool,
    table: &LockTable,
) -> BTreeMap<String, BTreeSet<String>> {
    use deadlock_graph::Resource;
    let edges = graph.entry(owner.to_owned()).or_default();
    for resource in resources {
        match resource {
            Resource::Lock(name) => {
                edges.extend(table.leases.get(name.as_str()).map(|l| l.owner.to_string()));
                if !shared {
                    edges.extend(table.shared.get(name).into_iter().flat_map(|h| h.keys().cloned()));
                }
                for ahead in table.queues.get(name).into_iter().flatten() {
                    if !(shared && ahead.shared) {
                        edges.insert(ahead.owner.clone());
                    }
                }
            }
            Resource::Semaphore(name) => {
                if let Some(s) = table.semaphores.get(name) {
                    edges.extend(s.holders.keys().cloned());
                    edges.extend(s.queue.iter().map(|w| w.owner.clone()));
                }
            }
        }
    }
    graph
}

/// The resources an owner waits for, as the test names them.
mod deadlock_graph {
    pub(super) use super::super::deadlock::Resource;
}
