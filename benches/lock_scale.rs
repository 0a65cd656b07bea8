//! `cargo bench --bench lock_scale`: how the pure lock table scales with live
//! leases. For 1 000, 100 000 and 1 000 000 live leases it measures the apply
//! time of a Tick that expires nothing and of one that expires 100 leases,
//! memory per lease (process RSS growth), and the snapshot image's size and
//! encode/decode time. Set LEASEHOLD_SCALE_SIZES (e.g. "1000,100000") to
//! choose the sizes.

use std::time::{Duration, Instant};

use leasehold_core::{Command, LockTable, TableImage};

const TICK_MS: u64 = 100;
const LONG_TTL_MS: u64 = 3_600_000;

/// Resident set size of this process, from /proc (Linux).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

struct Row {
    leases: usize,
    tick_idle: Duration,
    tick_expiring_100: Duration,
    bytes_per_lease: f64,
    snapshot_bytes: usize,
    encode: Duration,
    decode: Duration,
}

fn measure(leases: usize) -> Row {
    let mut table = LockTable::new();
    let mut index = 0;
    let mut apply = |table: &mut LockTable, command: Command| {
        index += 1;
        table.apply(&command, index)
    };
    apply(&mut table, Command::Tick { period_ms: TICK_MS });
    let before = rss_bytes();
    for i in 0..leases {
        let name = format!("order/{i:08}");
        let acquire = Command::Acquire {
            name,
            owner: format!("worker-{}", i % 64),
            ttl_ms: Some(LONG_TTL_MS),
            session: None,
            wait_ms: None,
            request_id: None,
            lock_delay_ms: None,
            seq: None,
        };
        apply(&mut table, acquire);
    }
    let bytes_per_lease = rss_bytes().saturating_sub(before) as f64 / leases as f64;

    let tick_idle = median(
        (0..1000)
            .map(|_| {
                let started = Instant::now();
                apply(&mut table, Command::Tick { period_ms: TICK_MS });
                started.elapsed()
            })
            .collect(),
    );
    let tick_expiring_100 = median(
        (0..20)
            .map(|round| {
                for j in 0..100 {
                    let name = format!("short/{round}/{j}");
                    apply(
                        &mut table,
                        Command::Acquire {
                            name,
                            owner: "s".into(),
                            ttl_ms: Some(3_000),
                            session: None,
                            wait_ms: None,
                            request_id: None,
                            lock_delay_ms: None,
                            seq: None,
                        },
                    );
                }
                for _ in 0..30 {
                    apply(&mut table, Command::Tick { period_ms: TICK_MS });
                }
                let started = Instant::now();
                let applied = apply(&mut table, Command::Tick { period_ms: TICK_MS });
                let elapsed = started.elapsed();
                assert_eq!(applied.events.len(), 100, "the 100 short leases expire on this tick");
                elapsed
            })
            .collect(),
    );

    let started = Instant::now();
    let image = serde_json::to_vec(&TableImage::from(&table)).expect("image serializes");
    let encode = started.elapsed();
    let started = Instant::now();
    let restored = LockTable::from(serde_json::from_slice::<TableImage>(&image).expect("image decodes"));
    let decode = started.elapsed();
    assert_eq!(restored.len(), table.len());
    Row { leases, tick_idle, tick_expiring_100, bytes_per_lease, snapshot_bytes: image.len(), encode, decode }
}

fn main() {
    let sizes: Vec<usize> = std::env::var("LEASEHOLD_SCALE_SIZES")
        .unwrap_or_else(|_| "1000,100000,1000000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("LEASEHOLD_SCALE_SIZES: numbers"))
        .collect();
    let mut table = String::from(
        "| live leases | Tick apply, none expiring | Tick apply, 100 expiring | memory per lease | snapshot image | encode | decode |\n\
         |---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for leases in sizes {
        eprintln!("lock_scale: {leases} live leases ...");
        let r = measure(leases);
        table.push_str(&format!(
            "| {} | {:.2} µs | {:.1} µs | {:.0} B | {:.1} MB | {:.0} ms | {:.0} ms |\n",
            r.leases,
            r.tick_idle.as_secs_f64() * 1e6,
            r.tick_expiring_100.as_secs_f64() * 1e6,
            r.bytes_per_lease,
            r.snapshot_bytes as f64 / 1e6,
            r.encode.as_secs_f64() * 1e3,
            r.decode.as_secs_f64() * 1e3,
        ));
    }
    println!("{table}");
}
