//! One worker process of `leasehold-lab demo payments`.
//!
//! It loops until its time is up: pick two distinct accounts, acquire both
//! locks in one atomic multi-acquire (one log entry, one fencing token for
//! both; a waiting one holds neither lock until both can be granted, so no
//! two workers can wait on each other and no order is needed), read both
//! balances from PostgreSQL, move a small amount, do some "work", write both
//! balances and record the transfer id in one transaction, release both
//! locks in one multi-release.
//!
//! The read is a transaction of its own (both fenced reads, committed): the
//! fence it raises must be visible to the next holder while this worker
//! computes, and a worker paused inside an open transaction would hold the
//! rows' locks, so PostgreSQL would make every other worker wait behind it
//! instead of letting them go on and refusing its late write. The write is
//! one transaction: both balances under the fence predicate and the
//! idempotency record, committed, or rolled back when any statement touched
//! no row.
//!
//! It uses plain leases ([`Client::acquire_many`]), not a renewing guard,
//! and does not check `Leases::valid_until` before writing. A check
//! would catch the pause the coordinator injects here, but no check can
//! catch a pause that falls between the check and the write (a GC, a page
//! fault, a VM migration); the SIGSTOP stands for that pause, so only the
//! database's fence predicate is left to catch it, which is the point of
//! the demo.
//!
//! Every [`REPLAY_EVERY`]th applied transfer is sent again, whole and with
//! the same id, as a client does that lost the reply to its `COMMIT`: the
//! idempotency record finds the id and the replay is rolled back.
//!
//! stdin carries the coordinator's commands (`pause`, `stopped`); stdout
//! carries `holding ...` and `after-pause ...` lines and, at the end, the
//! [`WorkerReport`] as one JSON line. Errors and diagnostics go to stderr.

use leasehold_client::ErrorCode;
use std::io::BufRead;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use tokio_postgres::Statement;

use super::ledger::{self, NOTE_REFUSAL, READ_FENCED, READ_UNFENCED, RECORD, WRITE_FENCED, WRITE_UNFENCED};
use super::{account_lock, say, DemoError, WorkerOptions, WorkerReport};
use leasehold_client::{default_owner, AcquireOptions, Client, FencingToken, Leases};

/// Longest wait in a lock's queue. Longer than a ttl, so a worker queued
/// behind the paused one gets the lock once that lease expires.
const ACQUIRE_WAIT: Duration = Duration::from_secs(10);
/// Simulated work between reading and writing, in milliseconds.
const WORK_MS: (u64, u64) = (20, 50);
/// Largest amount moved by one transfer.
const MAX_AMOUNT: u64 = 50;
/// How long a worker asked to pause waits for the coordinator's `stopped`.
const HANDSHAKE_BOUND: Duration = Duration::from_secs(10);
/// Every this many applied transfers, one is replayed as after a lost
/// commit reply.
pub const REPLAY_EVERY: u64 = 25;

/// A command from the coordinator, read from stdin.
#[derive(Debug, PartialEq, Eq)]
enum Control {
    /// Announce the next held pair of locks and wait for `Stopped`.
    Pause,
    /// The coordinator has stopped (and continued) this process.
    Stopped,
    /// stdin closed: the coordinator is gone, so stop early.
    Closed,
}

/// Runs a worker; prints its report and returns the exit status.
pub async fn run(args: &WorkerOptions) -> i32 {
    match work(args).await {
        Ok(report) => {
            match serde_json::to_string(&report) {
                Ok(line) => say(&line),
                Err(e) => eprintln!("worker {}: {e}", args.worker_id),
            }
            0
        }
        Err(e) => {
            eprintln!("worker {}: {e}", args.worker_id);
            2
        }
    }
}

/// Reads stdin on a plain thread: tokio's stdin cannot be cancelled and
/// would hold up the runtime's shutdown; this thread dies with the process.
fn control_channel() -> mpsc::UnboundedReceiver<Control> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            let command = match line.trim() {
                "pause" => Control::Pause,
                "stopped" => Control::Stopped,
                _ => continue,
            };
            if tx.send(command).is_err() {
                return;
            }
        }
        let _ = tx.send(Control::Closed);
    });
    rx
}

/// Two distinct accounts out of `accounts` (at least 2), in ascending order.
fn pick_pair(rng: &mut fastrand::Rng, accounts: usize) -> (usize, usize) {
    let n = accounts as u64;
    let a = rng.u64(0..n);
    let b = (a + 1 + rng.u64(0..n - 1)) % n;
    (a.min(b) as usize, a.max(b) as usize)
}

/// One transfer as recorded: its id and the amount moved.
struct Moved {
    id: String,
    from: i32,
    to: i32,
    amount: i64,
}

struct Worker {
    id: u32,
    fencing: bool,
    ttl_ms: u64,
    owner: String,
    client: Client,
    db: tokio_postgres::Client,
    statements: Statements,
    accounts: usize,
    rng: fastrand::Rng,
    control: mpsc::UnboundedReceiver<Control>,
    pause_requested: bool,
    coordinator_gone: bool,
    transfers_started: u64,
    report: WorkerReport,
}

/// The worker's statements, prepared once on its connection.
struct Statements {
    read: Statement,
    write: Statement,
    record: Statement,
    note: Statement,
}

/// How a transaction of a transfer ended, short of an error.
enum Refused {
    /// A fenced statement touched no row: a newer token had been there.
    Stale,
    /// The transfer id was recorded already.
    Recorded,
}

/// What became of one write transaction.
type Written = Result<Result<(), Refused>, tokio_postgres::Error>;

async fn work(args: &WorkerOptions) -> Result<WorkerReport, DemoError> {
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let db = ledger::connect_to(&args.postgres, &args.schema).await?;
    let fencing = !args.no_fencing;
    let statements = Statements {
        read: db.prepare(if fencing { READ_FENCED } else { READ_UNFENCED }).await?,
        write: db.prepare(if fencing { WRITE_FENCED } else { WRITE_UNFENCED }).await?,
        record: db.prepare(RECORD).await?,
        note: db.prepare(NOTE_REFUSAL).await?,
    };
    let count: i64 = db.query_one("SELECT count(*) FROM accounts", &[]).await?.get(0);
    let accounts = count as usize;
    if accounts < 2 {
        return Err(DemoError::InvalidArgument(format!("the ledger has {accounts} accounts; a transfer needs 2")));
    }
    let mut worker = Worker {
        id: args.worker_id,
        fencing,
        ttl_ms: args.ttl.as_millis() as u64,
        // Unique per process: two workers sharing an owner would share locks.
        owner: format!("payments-{}-{}", args.worker_id, default_owner()),
        client: Client::new(&args.endpoints)?,
        db,
        statements,
        accounts,
        rng: fastrand::Rng::new(),
        control: control_channel(),
        pause_requested: false,
        coordinator_gone: false,
        transfers_started: 0,
        report: WorkerReport { worker: args.worker_id, ..WorkerReport::default() },
    };
    loop {
        worker.drain_control();
        let now = Instant::now();
        if worker.coordinator_gone || now >= deadline {
            break;
        }
        // Never wait in a queue past the end of the run (but wait a little:
        // a zero wait would mean "fail at once when held").
        let wait = ACQUIRE_WAIT.min(deadline - now).max(Duration::from_millis(100));
        worker.one_transfer(wait).await;
    }
    Ok(worker.report)
}

impl Worker {
    fn drain_control(&mut self) {
        while let Ok(command) = self.control.try_recv() {
            self.note(command);
        }
    }

    fn note(&mut self, command: Control) {
        match command {
            Control::Pause => self.pause_requested = true,
            Control::Closed => self.coordinator_gone = true,
            Control::Stopped => {}
        }
    }

    async fn one_transfer(&mut self, wait: Duration) {
        let (a, b) = pick_pair(&mut self.rng, self.accounts);
        let started = Instant::now();
        let Some(leases) = self.acquire([a, b], wait).await else { return };
        let acquired = started.elapsed();
        let db_time = self.move_money([(a, leases.token), (b, leases.token)]).await;
        let releasing = Instant::now();
        self.release([a, b], leases.token).await;
        if let Some(db_time) = db_time {
            self.report.acquire_us.push(acquired.as_micros() as u64);
            self.report.db_us.push(db_time.as_micros() as u64);
            self.report.release_us.push(releasing.elapsed().as_micros() as u64);
        }
    }

    async fn acquire(&mut self, accounts: [usize; 2], wait: Duration) -> Option<Leases> {
        // The client generates a request id per call and reuses it on its
        // own retries, so a retried acquire cannot be granted twice.
        let options = AcquireOptions { wait: Some(wait), request_id: None, lock_delay: None };
        let names = accounts.map(account_lock);
        let names = names.each_ref().map(String::as_str);
        match self.client.acquire_many(&names, &self.owner, self.ttl_ms, &options).await {
            Ok(leases) => Some(leases),
            Err(e) => {
                let timed_out = e.code() == Some(ErrorCode::WaitTimeout);
                // A wait cut short by the end of the run is no failure.
                if !(timed_out && wait < ACQUIRE_WAIT) {
                    self.report.acquire_failures += 1;
                }
                if !timed_out {
                    eprintln!("worker {}: acquire {names:?}: {e}", self.id);
                }
                None
            }
        }
    }

    async fn release(&mut self, accounts: [usize; 2], token: FencingToken) {
        // After a pause the leases are gone (stale_token, not_held); that is
        // expected and harmless: a token-checked release cannot free a lock
        // someone else holds now, and a refused multi-release frees none.
        let names = accounts.map(account_lock);
        if self.client.release_many(&names.each_ref().map(String::as_str), token).await.is_err() {
            self.report.releases_refused += 1;
        }
    }

    /// Moves money between the two held accounts; returns the time spent
    /// in the database when the transfer was applied.
    async fn move_money(&mut self, held: [(usize, FencingToken); 2]) -> Option<Duration> {
        // A new id per attempt, refused or not; only a replay reuses one.
        self.transfers_started += 1;
        let transfer = format!("w{}-{}-{}", self.id, std::process::id(), self.transfers_started);
        let tokens = held.map(|(_, token)| token.get() as i64);
        let ids = held.map(|(account, _)| account as i32);
        let reading = Instant::now();
        let balances = match self.read(ids, tokens).await {
            Ok(Ok(balances)) => balances,
            Ok(Err(_)) => {
                self.report.stale_reads_refused += 1;
                self.note_refusal(&transfer, "stale-read").await;
                return None;
            }
            Err(e) => {
                self.report.errors += 1;
                eprintln!("worker {}: read: {e}", self.id);
                return None;
            }
        };
        let mut db_time = reading.elapsed();
        let mut new = balances;
        let (mut from, mut to) = if self.rng.u64(0..2) == 0 { (0, 1) } else { (1, 0) };
        if new[from] == 0 {
            // Pay from the account that has money, so every transfer moves
            // some (a balance never goes below 0).
            (from, to) = (to, from);
        }
        let amount = (self.rng.u64(1..=MAX_AMOUNT) as i64).min(new[from]);
        new[from] -= amount;
        new[to] += amount;
        let moved = Moved { id: transfer, from: ids[from], to: ids[to], amount };

        let paused = self.pause_requested && self.pause_here(&held, &balances).await;
        tokio::time::sleep(Duration::from_millis(self.rng.u64(WORK_MS.0..=WORK_MS.1))).await;

        let writing = Instant::now();
        let written = self.write(ids, tokens, new, &moved).await;
        let applied = matches!(written, Ok(Ok(())));
        let outcome = match written {
            Ok(Ok(())) => {
                self.report.transfers_applied += 1;
                if self.fencing {
                    "applied: no newer token had reached these accounts".to_string()
                } else {
                    "applied: the balances it read before the pause replaced the newer ones".to_string()
                }
            }
            Ok(Err(Refused::Stale)) => {
                self.report.stale_writes_refused += 1;
                self.note_refusal(&moved.id, "stale-write").await;
                "refused by PostgreSQL: a fenced UPDATE touched no row (a newer token had been there); rolled back"
                    .to_string()
            }
            Ok(Err(Refused::Recorded)) => {
                // A fresh id is never recorded; only a replay finds its own.
                self.report.errors += 1;
                format!("failed: transfer id {} was recorded already", moved.id)
            }
            Err(e) => {
                self.report.errors += 1;
                eprintln!("worker {}: transfer: {e}", self.id);
                format!("failed: {e}")
            }
        };
        db_time += writing.elapsed();
        if paused {
            say(&format!("after-pause write of {} {}", moved.id, outcome));
        }
        if applied && self.report.transfers_applied % REPLAY_EVERY == 0 {
            self.replay(ids, tokens, new, &moved).await;
        }
        applied.then_some(db_time)
    }

    /// The read transaction: both balances, each fenced read raising the
    /// account's fence to this holder's token; committed.
    async fn read(
        &mut self,
        ids: [i32; 2],
        tokens: [i64; 2],
    ) -> Result<Result<[i64; 2], Refused>, tokio_postgres::Error> {
        let tx = self.db.transaction().await?;
        let mut balances = [0i64; 2];
        for i in 0..2 {
            let rows = if self.fencing {
                tx.query(&self.statements.read, &[&ids[i], &tokens[i]]).await?
            } else {
                tx.query(&self.statements.read, &[&ids[i]]).await?
            };
            let Some(row) = rows.first() else {
                tx.rollback().await?;
                return Ok(Err(Refused::Stale));
            };
            balances[i] = row.get(0);
        }
        tx.commit().await?;
        Ok(Ok(balances))
    }

    /// The write transaction: both balances under the fence predicate and
    /// the transfer's record; rolled back when any statement touched no row.
    async fn write(&mut self, ids: [i32; 2], tokens: [i64; 2], balances: [i64; 2], moved: &Moved) -> Written {
        let tx = self.db.transaction().await?;
        for i in 0..2 {
            let touched = if self.fencing {
                tx.execute(&self.statements.write, &[&ids[i], &tokens[i], &balances[i]]).await?
            } else {
                tx.execute(&self.statements.write, &[&ids[i], &balances[i]]).await?
            };
            if touched == 0 {
                tx.rollback().await?;
                return Ok(Err(Refused::Stale));
            }
        }
        let worker = self.id as i32;
        let recorded =
            tx.execute(&self.statements.record, &[&moved.id, &moved.from, &moved.to, &moved.amount, &worker]).await?;
        if recorded == 0 {
            tx.rollback().await?;
            return Ok(Err(Refused::Recorded));
        }
        tx.commit().await?;
        Ok(Ok(()))
    }

    /// Sends an applied transfer's write again, as a client does that did
    /// not get the reply to its `COMMIT`: the record is there, so it is
    /// rolled back.
    async fn replay(&mut self, ids: [i32; 2], tokens: [i64; 2], balances: [i64; 2], moved: &Moved) {
        match self.write(ids, tokens, balances, moved).await {
            Ok(Err(Refused::Recorded)) => {
                self.report.retried_idempotently += 1;
                self.note_refusal(&moved.id, "retried").await;
            }
            Ok(Ok(())) => self.report.applied_twice += 1,
            Ok(Err(Refused::Stale)) => {
                self.report.errors += 1;
                eprintln!("worker {}: replay of {}: refused as stale under its own tokens", self.id, moved.id);
            }
            Err(e) => {
                self.report.errors += 1;
                eprintln!("worker {}: replay of {}: {e}", self.id, moved.id);
            }
        }
    }

    /// Notes a rolled-back transaction for the coordinator's counts.
    async fn note_refusal(&mut self, transfer: &str, kind: &str) {
        let worker = self.id as i32;
        if let Err(e) = self.db.execute(&self.statements.note, &[&transfer, &worker, &kind]).await {
            self.report.errors += 1;
            eprintln!("worker {}: noting a refusal: {e}", self.id);
        }
    }

    /// Tells the coordinator which locks this worker holds and which balances
    /// it read, then waits until the coordinator says it has stopped (and,
    /// by the time this returns, continued) this process. Returns whether
    /// the handshake completed.
    async fn pause_here(&mut self, held: &[(usize, FencingToken); 2], balances: &[i64; 2]) -> bool {
        self.pause_requested = false;
        let what: Vec<String> = held
            .iter()
            .zip(balances)
            .map(|((account, token), balance)| {
                format!("{} (token {token}, balance read {balance})", account_lock(*account))
            })
            .collect();
        say(&format!("holding {}", what.join(" and ")));
        let handshake = async {
            while let Some(command) = self.control.recv().await {
                if command == Control::Stopped {
                    return true;
                }
                self.note(command);
                if self.coordinator_gone {
                    return false;
                }
            }
            false
        };
        tokio::time::timeout(HANDSHAKE_BOUND, handshake).await.unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_distinct_and_sorted() {
        let mut rng = fastrand::Rng::new();
        for accounts in [2, 3, 8] {
            let mut seen = std::collections::HashSet::new();
            for _ in 0..2000 {
                let (a, b) = pick_pair(&mut rng, accounts);
                assert!(a < b && b < accounts);
                seen.insert((a, b));
            }
            assert_eq!(seen.len(), accounts * (accounts - 1) / 2, "every pair comes up");
        }
    }
}
