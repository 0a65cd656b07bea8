//! What the deadlock check costs an entry's apply when it must walk a herd:
//! N owners wait for lock `hot` (held by `h`); `h` holds `hot` and waits
//! for `m`, held by `w`; then `w`, which holds something, asks to wait for
//! `hot`, so the check walks every waiter of `hot` before it finds the
//! cycle `w → h → w` (refused) — and, for a wait that closes no cycle, the
//! same walk finds nothing (queued).
//!
//!     cargo run --release -p leasehold-core --example deadlock_search -- 10000
//!
//! Prints the time of each of those applies (a fresh herd waiter, which
//! holds nothing, costs no walk at all).

use std::time::Instant;

use leasehold_core::{Command, LockError, LockTable, Outcome};

fn acquire(name: &str, owner: &str, wait_ms: Option<u64>) -> Command {
    Command::Acquire {
        name: name.into(),
        owner: owner.into(),
        ttl_ms: Some(60_000),
        session: None,
        wait_ms,
        request_id: None,
        lock_delay_ms: None,
        seq: None,
    }
}

fn main() {
    let herd: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let mut table = LockTable::new();
    let mut index = 0;
    let mut apply = |table: &mut LockTable, command: Command| {
        index += 1;
        let started = Instant::now();
        let result = table.apply(&command, index).result;
        (result, started.elapsed())
    };
    apply(&mut table, Command::Tick { period_ms: 100 }).0.expect("a tick applies");
    apply(&mut table, acquire("hot", "h", None)).0.expect("h takes hot");
    apply(&mut table, acquire("m", "w", None)).0.expect("w takes m");
    apply(&mut table, acquire("other", "x", None)).0.expect("x takes other");
    let started = Instant::now();
    for i in 0..herd {
        apply(&mut table, acquire("hot", &format!("herd-{i}"), Some(3_600_000))).0.expect("a herd waiter queues");
    }
    let per_waiter = started.elapsed() / herd.max(1) as u32;
    apply(&mut table, acquire("m", "h", Some(3_600_000))).0.expect("h waits for m");
    let (refused, walked_to_cycle) = apply(&mut table, acquire("hot", "w", Some(3_600_000)));
    assert!(matches!(refused, Err(LockError::Deadlock { .. })), "{refused:?}");
    let (queued, walked_clean) = apply(&mut table, acquire("hot", "x", Some(3_600_000)));
    assert!(matches!(queued, Ok(Outcome::Queued { .. })), "{queued:?}");
    println!("herd of {herd} waiters on one lock:");
    println!("  a herd waiter's wait (no walk): {per_waiter:?} per apply");
    println!("  a wait refused as a deadlock after walking the herd: {walked_to_cycle:?}");
    println!("  a wait that walks the herd and finds no cycle: {walked_clean:?}");
}
