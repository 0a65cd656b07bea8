//! Heap bytes the lock table holds per live lease: the floor under a
//! node's RSS per lease (issue #15's target is ≤ 500 bytes of RSS).
//!
//!     cargo run --release -p leasehold-core --example table_bytes -- 1000000
//!
//! Applies N acquires of `bulk/{i:08}` (each with a request id, as the Rust
//! client sends, and a Tick every 1 000 so request records are evicted as
//! on a cluster), counting the bytes the global allocator hands out, then
//! once more after the changes a checkpoint would take, and for the table
//! as a restart rebuilds it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use leasehold_core::{Command, LockTable, TableImage};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn main() {
    let leases: usize = match std::env::args().nth(1).map(|n| n.parse()) {
        None => 1_000_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: table_bytes [LEASES > 0]");
            std::process::exit(2);
        }
    };
    let mut table = LockTable::new();
    let mut index = 1;
    table.apply(&Command::Tick { period_ms: 100 }, index);
    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..leases {
        index += 1;
        let acquire = Command::Acquire {
            name: format!("bulk/{i:08}"),
            owner: "bulk".into(),
            ttl_ms: Some(3_600_000),
            session: None,
            wait_ms: None,
            request_id: Some(format!("{:x}-{:x}-{i:x}", 4242, 1_796_400_000_000_000_000u128)),
            lock_delay_ms: None,
            seq: None,
        };
        table.apply(&acquire, index);
        if i % 1000 == 999 {
            index += 1;
            table.apply(&Command::Tick { period_ms: 100 }, index);
        }
    }
    let per_lease = |bytes: usize| bytes.saturating_sub(before) as f64 / leases as f64;
    println!("{leases} live leases: {:.0} heap bytes per lease", per_lease(LIVE.load(Ordering::Relaxed)));
    drop(table.take_changes());
    println!(
        "after a checkpoint takes the changes: {:.0} heap bytes per lease",
        per_lease(LIVE.load(Ordering::Relaxed))
    );
    // As a restart loads it: each B-tree built once, from sorted rows.
    let rebuilt = LockTable::from(TableImage::from(&table));
    drop(table);
    println!("rebuilt as at a restart: {:.0} heap bytes per lease", per_lease(LIVE.load(Ordering::Relaxed)));
    drop(rebuilt);
}
