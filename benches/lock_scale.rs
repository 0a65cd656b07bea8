//! `cargo bench --bench lock_scale`: how the pure lock table scales with live
//! leases. For 1 000, 100 000 and 1 000 000 live leases it measures the apply
//! time of a Tick that expires nothing and of one that expires 100 leases,
//! memory per lease (process RSS growth), and the size and encode/decode
//! time of the table's rows as checkpoints and snapshot files hold them
//! before grouping them into pages (tree id and key, MessagePack value,
//! length frames; data format 2). Set LEASEHOLD_SCALE_SIZES (e.g. "1000,100000") to
//! choose the sizes.
//!
//! Then, for 100, 1 000, 10 000 and 100 000 live sessions (the last is the
//! most the table allows, `MAX_SESSIONS`) holding 10 locks each, taken in one multi-acquire
//! per session, it measures a Tick that expires nothing, a Tick that expires
//! one session (releasing its 10 locks), and a keepalive: none of them may
//! grow with the number of sessions or locks. Set LEASEHOLD_SCALE_SESSIONS
//! to choose those sizes.

use std::time::{Duration, Instant};

use leasehold_core::{Applied, Command, LockTable, Outcome, TableLoader, Tree};

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

    // What a page holds per row: a length-framed key (tree id, then the
    // row's key) and a length-framed MessagePack value.
    let started = Instant::now();
    let rows: Vec<(Vec<u8>, Vec<u8>)> = table
        .rows()
        .map(|row| {
            let value = row.value.expect("a full table's rows all have values");
            let key = [&[row.tree.id()][..], &row.key].concat();
            (key, rmp_serde::to_vec_named(&value).expect("a row encodes"))
        })
        .collect();
    let encode = started.elapsed();
    let snapshot_bytes = rows.iter().map(|(k, v)| 8 + k.len() + v.len()).sum();
    let started = Instant::now();
    let mut loader = TableLoader::default();
    for (key, value) in &rows {
        let tree = Tree::from_id(key[0]).expect("a row's tree id");
        loader.load(tree, &key[1..], &mut rmp_serde::Deserializer::new(&value[..])).expect("a row decodes");
    }
    let restored = loader.finish();
    let decode = started.elapsed();
    assert_eq!(restored.len(), table.len());
    Row { leases, tick_idle, tick_expiring_100, bytes_per_lease, snapshot_bytes, encode, decode }
}

/// Locks each measured session holds.
const LOCKS_PER_SESSION: usize = 10;

struct SessionRow {
    sessions: usize,
    tick_idle: Duration,
    tick_expiring_one: Duration,
    keepalive: Duration,
}

/// A lock table and the index of the next entry it applies.
struct Log {
    table: LockTable,
    index: u64,
}

impl Log {
    fn apply(&mut self, command: Command) -> Applied {
        self.index += 1;
        self.table.apply(&command, self.index)
    }

    /// Applies a Tick; returns how long it took and what it did.
    fn tick(&mut self) -> (Duration, Applied) {
        let started = Instant::now();
        let applied = self.apply(Command::Tick { period_ms: TICK_MS });
        (started.elapsed(), applied)
    }

    /// Opens a session of `owner` holding [`LOCKS_PER_SESSION`] locks
    /// named under `prefix`, taken in one multi-acquire; returns its id.
    fn open(&mut self, owner: &str, ttl_ms: u64, prefix: &str) -> u64 {
        let created = self.apply(Command::CreateSession { owner: owner.into(), ttl_ms, request_id: None, by: None });
        assert!(created.result.is_ok(), "{:?}", created.result);
        let id = self.index;
        let taken = self.apply(Command::AcquireMany {
            names: (0..LOCKS_PER_SESSION).map(|l| format!("{prefix}/{l}")).collect(),
            owner: owner.into(),
            ttl_ms: None,
            session: Some(id),
            wait_ms: None,
            request_id: None,
            lock_delay_ms: None,
            seq: None,
        });
        assert!(matches!(taken.result, Ok(Outcome::GrantedMany { .. })), "{:?}", taken.result);
        id
    }
}

/// A table with `sessions` live sessions of [`LOCKS_PER_SESSION`] locks
/// each: `sessions − 1` that live through the run, and the one a Tick expires.
fn measure_sessions(sessions: usize) -> SessionRow {
    let mut log = Log { table: LockTable::new(), index: 0 };
    log.tick();
    for s in 0..sessions.saturating_sub(2) {
        log.open(&format!("worker-{s}"), LONG_TTL_MS, &format!("account/{s:06}"));
    }
    let kept = log.open("kept", LONG_TTL_MS, "kept");
    assert_eq!(log.table.sessions(), sessions - 1);
    let tick_idle = median((0..1000).map(|_| log.tick().0).collect());
    let tick_expiring_one = median(
        (0..20)
            .map(|round| {
                // The `sessions`th session, until the Tick that expires it.
                log.open(&format!("short-{round}"), 3_000, &format!("short/{round}"));
                loop {
                    let (elapsed, applied) = log.tick();
                    if !applied.events.is_empty() {
                        // The session's end, then one event per lock.
                        assert!(applied.events.len() > LOCKS_PER_SESSION, "{:?}", applied.events);
                        break elapsed;
                    }
                }
            })
            .collect(),
    );
    let keepalive = median(
        (0..1000)
            .map(|_| {
                let started = Instant::now();
                let applied =
                    log.apply(Command::KeepAlive { session: kept, ttl_ms: None, request_id: None, seq: None });
                let elapsed = started.elapsed();
                assert!(applied.result.is_ok(), "{:?}", applied.result);
                elapsed
            })
            .collect(),
    );
    SessionRow { sessions, tick_idle, tick_expiring_one, keepalive }
}

/// Comma-separated sizes from `var`, else `default`.
fn sizes(var: &str, default: &str) -> Vec<usize> {
    std::env::var(var)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| s.trim().parse().unwrap_or_else(|_| panic!("{var}: numbers")))
        .collect()
}

fn main() {
    let sizes_of_leases = sizes("LEASEHOLD_SCALE_SIZES", "1000,100000,1000000");
    let mut table = String::from(
        "| live leases | Tick apply, none expiring | Tick apply, 100 expiring | memory per lease | snapshot rows | encode | decode |\n\
         |---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for leases in sizes_of_leases {
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
    table.push_str(&format!(
        "\n| live sessions (× {LOCKS_PER_SESSION} locks) | Tick apply, none expiring | Tick apply, one session expiring | keepalive apply |\n\
         |---:|---:|---:|---:|\n"
    ));
    for sessions in sizes("LEASEHOLD_SCALE_SESSIONS", "100,1000,10000,100000") {
        eprintln!("lock_scale: {sessions} live sessions of {LOCKS_PER_SESSION} locks ...");
        let r = measure_sessions(sessions);
        table.push_str(&format!(
            "| {} | {:.2} µs | {:.1} µs | {:.2} µs |\n",
            r.sessions,
            r.tick_idle.as_secs_f64() * 1e6,
            r.tick_expiring_one.as_secs_f64() * 1e6,
            r.keepalive.as_secs_f64() * 1e6,
        ));
    }
    println!("{table}");
}
