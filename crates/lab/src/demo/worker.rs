//! One worker process of `leasehold demo payments`.
//!
//! It loops until its time is up: pick two distinct accounts, acquire their
//! locks in account order (so two workers never wait on each other in a
//! cycle), read both balances from the bank, move a small amount, do some
//! "work", write both balances with both tokens, release both locks.
//!
//! It uses plain leases ([`Client::acquire_with`]), not the renewing `Lock`
//! guard, and does not check `Lease::valid_until` before writing. A check
//! would catch the pause the coordinator injects here, but no check can
//! catch a pause that falls between the check and the write (a GC, a page
//! fault, a VM migration); the SIGSTOP stands for that pause, so only the
//! bank's token check is left to catch it, which is the point of the demo.
//!
//! stdin carries the coordinator's commands (`pause`, `stopped`); stdout
//! carries `holding ...` and `after-pause ...` lines and, at the end, the
//! [`WorkerReport`] as one JSON line. Errors and diagnostics go to stderr.

use leasehold_client::ErrorCode;
use std::io::BufRead;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::bank::{BankClient, ReadItem, ReadRequest, TransferRequest, Write};
use super::{account_lock, say, DemoError, WorkerOptions, WorkerReport};
use leasehold_client::{default_owner, AcquireOptions, Client, Lease};

/// Longest wait in a lock's queue. Longer than a ttl, so a worker queued
/// behind the paused one gets the lock once that lease expires.
const ACQUIRE_WAIT: Duration = Duration::from_secs(10);
/// Simulated work between reading and writing, in milliseconds.
const WORK_MS: (u64, u64) = (20, 50);
/// Largest amount moved by one transfer.
const MAX_AMOUNT: u64 = 50;
/// How long a worker asked to pause waits for the coordinator's `stopped`.
const HANDSHAKE_BOUND: Duration = Duration::from_secs(10);

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

struct Worker {
    id: u32,
    fencing: bool,
    ttl_ms: u64,
    owner: String,
    client: Client,
    bank: BankClient,
    accounts: usize,
    rng: fastrand::Rng,
    control: mpsc::UnboundedReceiver<Control>,
    pause_requested: bool,
    coordinator_gone: bool,
    transfers_started: u64,
    report: WorkerReport,
}

async fn work(args: &WorkerOptions) -> Result<WorkerReport, DemoError> {
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let bank = BankClient::new(&args.bank)?;
    let accounts = bank.snapshot().await?.accounts.len();
    if accounts < 2 {
        return Err(DemoError::InvalidArgument(format!("the bank has {accounts} accounts; a transfer needs 2")));
    }
    let mut worker = Worker {
        id: args.worker_id,
        fencing: !args.no_fencing,
        ttl_ms: args.ttl.as_millis() as u64,
        // Unique per process: two workers sharing an owner would share locks.
        owner: format!("payments-{}-{}", args.worker_id, default_owner()),
        client: Client::new(&args.endpoints)?,
        bank,
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
        let Some(lease_a) = self.acquire(a, wait).await else { return };
        let Some(lease_b) = self.acquire(b, wait).await else {
            self.release(a, &lease_a).await;
            return;
        };
        self.move_money([(a, &lease_a), (b, &lease_b)]).await;
        self.release(b, &lease_b).await;
        self.release(a, &lease_a).await;
    }

    async fn acquire(&mut self, account: usize, wait: Duration) -> Option<Lease> {
        // The client generates a request id per call and reuses it on its
        // own retries, so a retried acquire cannot be granted twice.
        let options = AcquireOptions { wait: Some(wait), request_id: None };
        match self.client.acquire_with(&account_lock(account), &self.owner, self.ttl_ms, &options).await {
            Ok(lease) => Some(lease),
            Err(e) => {
                let timed_out = e.code() == Some(ErrorCode::WaitTimeout);
                // A wait cut short by the end of the run is no failure.
                if !(timed_out && wait < ACQUIRE_WAIT) {
                    self.report.acquire_failures += 1;
                }
                if !timed_out {
                    eprintln!("worker {}: acquire {}: {e}", self.id, account_lock(account));
                }
                None
            }
        }
    }

    async fn release(&mut self, account: usize, lease: &Lease) {
        // After a pause the lease is gone (stale_token, not_held); that is
        // expected and harmless: a token-checked release cannot free a lock
        // someone else holds now.
        if self.client.release(&account_lock(account), lease.token()).await.is_err() {
            self.report.releases_refused += 1;
        }
    }

    fn token(&self, lease: &Lease) -> Option<u64> {
        self.fencing.then(|| lease.token())
    }

    async fn move_money(&mut self, held: [(usize, &Lease); 2]) {
        let reads = held.iter().map(|(account, lease)| ReadItem {
            account: *account,
            lock: account_lock(*account),
            token: self.token(lease),
        });
        let balances = match self.bank.read(&ReadRequest { reads: reads.collect() }).await {
            Ok(answer) => answer.balances,
            Err(e) => {
                if e.is_stale() {
                    self.report.stale_reads_rejected += 1;
                } else {
                    self.report.errors += 1;
                    eprintln!("worker {}: read: {e}", self.id);
                }
                return;
            }
        };
        // The bank client checked the count; this only keeps a surprise from
        // becoming a panic.
        let [first, second] = balances[..] else {
            self.report.errors += 1;
            return;
        };
        let mut new = [first, second];
        let (mut from, mut to) = if self.rng.u64(0..2) == 0 { (0, 1) } else { (1, 0) };
        if new[from] == 0 {
            // Pay from the account that has money, so every transfer moves
            // some (a balance never goes below 0).
            (from, to) = (to, from);
        }
        let amount = self.rng.u64(1..=MAX_AMOUNT).min(new[from]);
        new[from] -= amount;
        new[to] += amount;
        let deltas = [new[0] as i64 - first as i64, new[1] as i64 - second as i64];

        let paused = self.pause_requested && self.pause_here(&held, &balances).await;
        tokio::time::sleep(Duration::from_millis(self.rng.u64(WORK_MS.0..=WORK_MS.1))).await;

        self.transfers_started += 1;
        let writes = held
            .iter()
            .zip(new.into_iter().zip(deltas))
            .map(|((account, lease), (balance, delta))| Write {
                account: *account,
                balance,
                delta,
                lock: account_lock(*account),
                token: self.token(lease),
            })
            .collect();
        let transfer =
            TransferRequest { id: format!("w{}-{}-{}", self.id, std::process::id(), self.transfers_started), writes };
        let outcome = match self.bank.transfer(&transfer).await {
            Ok(()) => {
                self.report.transfers_applied += 1;
                if self.fencing {
                    "applied: no newer token had reached these accounts".to_string()
                } else {
                    "applied: the balances it read before the pause replaced the newer ones".to_string()
                }
            }
            Err(e) if e.is_stale() => {
                self.report.stale_writes_rejected += 1;
                format!("rejected by the bank: {e}")
            }
            Err(e) => {
                self.report.errors += 1;
                eprintln!("worker {}: transfer: {e}", self.id);
                format!("failed: {e}")
            }
        };
        if paused {
            say(&format!("after-pause write of {} {}", transfer.id, outcome));
        }
    }

    /// Tells the coordinator which locks this worker holds and which balances
    /// it read, then waits until the coordinator says it has stopped (and,
    /// by the time this returns, continued) this process. Returns whether
    /// the handshake completed.
    async fn pause_here(&mut self, held: &[(usize, &Lease); 2], balances: &[u64]) -> bool {
        self.pause_requested = false;
        let what: Vec<String> = held
            .iter()
            .zip(balances)
            .map(|((account, lease), balance)| {
                format!("{} (token {}, balance read {balance})", account_lock(*account), lease.token())
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
