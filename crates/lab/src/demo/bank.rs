//! The bank: the resource the account locks protect, standing in for a SQL
//! database. It keeps, per account, a balance, a `fence` (the highest token
//! it has accepted for the account's lock) and a journal (the sum of the
//! amounts of the transfers applied to the account), and applies every
//! request under one mutex, as a database applies a transaction.
//!
//! - `POST /read {"reads":[{"account","lock","token"}]}` → `{"balances":[..]}`
//! - `POST /transfer {"id","writes":[{"account","balance","delta","lock","token"}]}`
//!   → `{"applied":true}`, all writes or none; `delta` is the amount the
//!   worker moves (new balance − balance read), and a transfer's deltas sum
//!   to 0
//! - `GET /accounts` → balances, fences, journals, total and counters
//!
//! The journal is how the end of the run tells a lost update from luck: with
//! every update applied on top of the previous one, each balance equals its
//! opening balance plus its journal. A write computed from a balance read
//! before someone else's applied write breaks that equality, even when the
//! total happens to come out right (two lost updates that cancel, or a late
//! write that is itself overwritten by another).
//!
//! With fencing on, a request whose token for some account is below that
//! account's fence is refused whole (409 `stale_token`) and nothing changes;
//! otherwise every account's fence is raised to the request's token. Tokens
//! equal to the fence pass, because one holder reads and then writes under
//! the same token. With fencing off everything is applied.
//!
//! Reads are fenced too, and that is not decoration: a worker reads, computes
//! and writes. Had only writes been fenced, a paused holder resuming between
//! the new holder's read and write would pass the check (nobody has written
//! with a higher token yet), and the new holder's write, computed from the
//! balance before that, would then silently undo it. Fencing the read (in
//! SQL: `UPDATE accounts SET fence = :token WHERE id = :id AND fence <=
//! :token RETURNING balance`) raises the fence before the new holder looks,
//! so the paused holder's late write is refused whenever it comes.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::account_lock;
use leasehold_proto::FencingToken;

/// Every account's opening balance.
pub const INITIAL_BALANCE: u64 = 1000;

/// How long a worker waits for one answer of the bank (it is on loopback;
/// this only bounds a hang).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum BankError {
    #[error("cannot listen: {0}")]
    Bind(std::io::Error),
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The bank refused the request (`stale_token` when a token was below a
    /// fence).
    #[error("{status} {code}: {message}")]
    Refused { status: u16, code: String, message: String },
    #[error("unexpected answer: {0}")]
    Decode(String),
}

impl BankError {
    pub fn is_stale(&self) -> bool {
        matches!(self, BankError::Refused { code, .. } if code == "stale_token")
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadItem {
    pub account: usize,
    pub lock: String,
    /// `None` from a worker that ignores fencing.
    #[serde(default)]
    pub token: Option<FencingToken>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadRequest {
    pub reads: Vec<ReadItem>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadResponse {
    /// In the order of the request's `reads`.
    pub balances: Vec<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Write {
    pub account: usize,
    /// Unsigned: a balance never goes below 0.
    pub balance: u64,
    /// The change this write means to make: the new balance minus the
    /// balance the worker read.
    pub delta: i64,
    pub lock: String,
    #[serde(default)]
    pub token: Option<FencingToken>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferRequest {
    /// Unique per transfer, to detect one applied twice.
    pub id: String,
    pub writes: Vec<Write>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AccountView {
    pub account: usize,
    pub balance: u64,
    /// Highest token accepted for the account's lock; 0 before any.
    pub fence: FencingToken,
    /// The opening balance plus the deltas of every transfer applied to
    /// this account: what the balance is without lost updates.
    pub journal: i64,
}

impl AccountView {
    pub fn matches_journal(&self) -> bool {
        i64::try_from(self.balance) == Ok(self.journal)
    }
}

/// What the bank has counted.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BankCounters {
    pub transfers_applied: u64,
    pub stale_writes_rejected: u64,
    pub stale_reads_rejected: u64,
    /// Applications of a transfer id that had been applied before.
    pub transfers_applied_twice: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    pub fencing: bool,
    pub accounts: Vec<AccountView>,
    pub total: u64,
    /// Accounts whose balance differs from their journal (lost updates).
    pub accounts_off_journal: usize,
    pub counters: BankCounters,
}

/// Why the bank refuses a request.
#[derive(Debug)]
enum Refusal {
    Invalid(String),
    Stale { account: usize, token: FencingToken, fence: FencingToken },
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            Refusal::Invalid(message) => {
                (StatusCode::BAD_REQUEST, json!({"error": {"code": "invalid_argument", "message": message}}))
            }
            Refusal::Stale { account, token, fence } => (
                StatusCode::CONFLICT,
                json!({"error": {
                    "code": "stale_token",
                    "message": format!("token {token} is below the fence {fence} of account {account}"),
                    "account": account, "token": token, "fence": fence,
                }}),
            ),
        };
        (status, Json(body)).into_response()
    }
}

struct Account {
    balance: u64,
    fence: FencingToken,
    journal: i64,
}

struct Ledger {
    accounts: Vec<Account>,
    applied_ids: HashSet<String>,
    counters: BankCounters,
}

/// The bank's state; all requests go through one mutex, so each is atomic.
pub struct Bank {
    fencing: bool,
    ledger: Mutex<Ledger>,
}

impl Bank {
    pub fn new(accounts: usize, fencing: bool) -> Bank {
        let opening = INITIAL_BALANCE as i64;
        let accounts =
            (0..accounts).map(|_| Account { balance: INITIAL_BALANCE, fence: 0, journal: opening }).collect();
        Bank {
            fencing,
            ledger: Mutex::new(Ledger { accounts, applied_ids: HashSet::new(), counters: BankCounters::default() }),
        }
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        // No code path panics while holding the lock with the ledger half
        // updated (checks come before changes), so a poisoned lock still
        // guards consistent data.
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn snapshot(&self) -> Snapshot {
        let ledger = self.ledger();
        let accounts: Vec<AccountView> = ledger
            .accounts
            .iter()
            .enumerate()
            .map(|(account, a)| AccountView { account, balance: a.balance, fence: a.fence, journal: a.journal })
            .collect();
        Snapshot {
            fencing: self.fencing,
            total: accounts.iter().map(|a| a.balance).sum(),
            accounts_off_journal: accounts.iter().filter(|a| !a.matches_journal()).count(),
            accounts,
            counters: ledger.counters.clone(),
        }
    }

    /// Checks one `(account, lock, token)` against the ledger without
    /// changing it.
    fn check(&self, ledger: &Ledger, account: usize, lock: &str, token: Option<FencingToken>) -> Result<(), Refusal> {
        let Some(state) = ledger.accounts.get(account) else {
            return Err(Refusal::Invalid(format!("no account {account}")));
        };
        if !self.fencing {
            return Ok(());
        }
        // Tokens of different locks are unrelated: only the account's own
        // lock's token says anything about this account.
        if lock != account_lock(account) {
            return Err(Refusal::Invalid(format!(
                "account {account} is guarded by {}, not {lock}",
                account_lock(account)
            )));
        }
        match token {
            None => Err(Refusal::Invalid(format!("fencing is on: a token is required for account {account}"))),
            Some(token) if token < state.fence => Err(Refusal::Stale { account, token, fence: state.fence }),
            Some(_) => Ok(()),
        }
    }

    fn read(&self, request: &ReadRequest) -> Result<ReadResponse, Refusal> {
        let mut ledger = self.ledger();
        let checked = request.reads.iter().try_for_each(|r| self.check(&ledger, r.account, &r.lock, r.token));
        if let Err(refusal) = checked {
            if matches!(refusal, Refusal::Stale { .. }) {
                ledger.counters.stale_reads_rejected += 1;
            }
            return Err(refusal);
        }
        for r in &request.reads {
            raise_fence(&mut ledger, self.fencing, r.account, r.token);
        }
        Ok(ReadResponse { balances: request.reads.iter().map(|r| ledger.accounts[r.account].balance).collect() })
    }

    fn transfer(&self, request: &TransferRequest) -> Result<(), Refusal> {
        // Checked in both modes: an unbalanced transfer is a bug of the
        // worker, not a fencing matter, and would spoil the journal check.
        let moved = request.writes.iter().try_fold(0i64, |sum, w| sum.checked_add(w.delta));
        if moved != Some(0) {
            return Err(Refusal::Invalid(format!("transfer {:?}: the deltas do not sum to 0", request.id)));
        }
        let mut ledger = self.ledger();
        let checked = request.writes.iter().try_for_each(|w| self.check(&ledger, w.account, &w.lock, w.token));
        if let Err(refusal) = checked {
            if matches!(refusal, Refusal::Stale { .. }) {
                ledger.counters.stale_writes_rejected += 1;
            }
            return Err(refusal);
        }
        for w in &request.writes {
            raise_fence(&mut ledger, self.fencing, w.account, w.token);
            let account = &mut ledger.accounts[w.account];
            account.balance = w.balance;
            account.journal = account.journal.saturating_add(w.delta);
        }
        ledger.counters.transfers_applied += 1;
        if !ledger.applied_ids.insert(request.id.clone()) {
            ledger.counters.transfers_applied_twice += 1;
        }
        Ok(())
    }
}

/// Raises `account`'s fence to `token` (with fencing on; `account` was checked).
fn raise_fence(ledger: &mut Ledger, fencing: bool, account: usize, token: Option<FencingToken>) {
    if let (true, Some(token)) = (fencing, token) {
        let fence = &mut ledger.accounts[account].fence;
        *fence = (*fence).max(token);
    }
}

async fn serve_read(
    State(bank): State<Arc<Bank>>,
    Json(request): Json<ReadRequest>,
) -> Result<Json<ReadResponse>, Refusal> {
    bank.read(&request).map(Json)
}

async fn serve_transfer(
    State(bank): State<Arc<Bank>>,
    Json(request): Json<TransferRequest>,
) -> Result<Json<Value>, Refusal> {
    bank.transfer(&request).map(|()| Json(json!({"applied": true})))
}

async fn serve_accounts(State(bank): State<Arc<Bank>>) -> Json<Snapshot> {
    Json(bank.snapshot())
}

/// The bank's HTTP service, running on a task of this process; it stops
/// when dropped.
pub struct BankServer {
    pub bank: Arc<Bank>,
    url: String,
    task: JoinHandle<()>,
}

impl BankServer {
    /// Serves a new bank on 127.0.0.1 at a free port.
    pub async fn start(accounts: usize, fencing: bool) -> Result<BankServer, BankError> {
        let bank = Arc::new(Bank::new(accounts, fencing));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(BankError::Bind)?;
        let url = format!("http://{}", listener.local_addr().map_err(BankError::Bind)?);
        let app = Router::new()
            .route("/read", post(serve_read))
            .route("/transfer", post(serve_transfer))
            .route("/accounts", get(serve_accounts))
            .with_state(bank.clone());
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!("bank stopped serving: {e}");
            }
        });
        Ok(BankServer { bank, url, task })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for BankServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A worker's connection to the bank.
pub struct BankClient {
    http: reqwest::Client,
    base: String,
}

impl BankClient {
    pub fn new(base: &str) -> Result<BankClient, BankError> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| BankError::Unreachable(e.to_string()))?;
        Ok(BankClient { http, base: base.trim_end_matches('/').to_string() })
    }

    pub async fn snapshot(&self) -> Result<Snapshot, BankError> {
        let reply = self.http.get(format!("{}/accounts", self.base)).send().await;
        decode(reply).await
    }

    pub async fn read(&self, request: &ReadRequest) -> Result<ReadResponse, BankError> {
        let reply = self.http.post(format!("{}/read", self.base)).json(request).send().await;
        let answer: ReadResponse = decode(reply).await?;
        if answer.balances.len() != request.reads.len() {
            return Err(BankError::Decode(format!(
                "{} balances for {} reads",
                answer.balances.len(),
                request.reads.len()
            )));
        }
        Ok(answer)
    }

    pub async fn transfer(&self, request: &TransferRequest) -> Result<(), BankError> {
        let reply = self.http.post(format!("{}/transfer", self.base)).json(request).send().await;
        let _: Value = decode(reply).await?;
        Ok(())
    }
}

/// A 2xx JSON body, or the bank's refusal as [`BankError::Refused`].
async fn decode<T: DeserializeOwned>(reply: reqwest::Result<reqwest::Response>) -> Result<T, BankError> {
    let reply = reply.map_err(|e| BankError::Unreachable(e.to_string()))?;
    let status = reply.status();
    let bytes = reply.bytes().await.map_err(|e| BankError::Unreachable(e.to_string()))?;
    if status.is_success() {
        return serde_json::from_slice(&bytes).map_err(|e| BankError::Decode(e.to_string()));
    }
    // Axum's own rejections (bad JSON) are plain text, not our error shape.
    let body: Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({}));
    let field = |k: &str| body["error"][k].as_str().map(str::to_string);
    Err(BankError::Refused {
        status: status.as_u16(),
        code: field("code").unwrap_or_else(|| "unknown".to_string()),
        message: field("message").unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(account: usize, balance: u64, delta: i64, token: FencingToken) -> Write {
        Write { account, balance, delta, lock: account_lock(account), token: Some(token) }
    }

    fn transfer(id: &str, writes: Vec<Write>) -> TransferRequest {
        TransferRequest { id: id.to_string(), writes }
    }

    fn read_of(account: usize, token: FencingToken) -> ReadItem {
        ReadItem { account, lock: account_lock(account), token: Some(token) }
    }

    #[test]
    fn fenced_bank_refuses_a_stale_transfer_whole() {
        let bank = Bank::new(3, true);
        bank.transfer(&transfer("t1", vec![write(0, 900, -100, 10), write(1, 1100, 100, 11)])).unwrap();
        // Account 0 is fine (12 > 10) but account 1's fence is 11 > 5.
        let stale = transfer("t2", vec![write(0, 800, -100, 12), write(1, 1200, 100, 5)]);
        assert!(matches!(bank.transfer(&stale), Err(Refusal::Stale { account: 1, token: 5, fence: 11 })));
        let s = bank.snapshot();
        assert_eq!((s.accounts[0].balance, s.accounts[0].fence), (900, 10), "nothing of the refused transfer applied");
        assert_eq!(s.total, 3000);
        assert_eq!(s.accounts_off_journal, 0);
        assert_eq!(s.counters.stale_writes_rejected, 1);
    }

    #[test]
    fn a_fenced_read_makes_an_older_holders_later_write_stale() {
        let bank = Bank::new(2, true);
        // The old holder (tokens 5, 6) read; the new holder of account 0 (token 9) reads too.
        bank.read(&ReadRequest { reads: vec![read_of(0, 5), read_of(1, 6)] }).unwrap();
        bank.read(&ReadRequest { reads: vec![read_of(0, 9)] }).unwrap();
        // The old holder's write now comes too late, though nobody wrote yet.
        let late = transfer("old", vec![write(0, 990, -10, 5), write(1, 1010, 10, 6)]);
        assert!(matches!(bank.transfer(&late), Err(Refusal::Stale { account: 0, .. })));
        // The same holder may read and then write under one token.
        bank.transfer(&transfer("new", vec![write(0, 980, -20, 9), write(1, 1020, 20, 7)])).unwrap();
        assert!(matches!(bank.read(&ReadRequest { reads: vec![read_of(0, 5)] }), Err(Refusal::Stale { .. })));
        assert_eq!(bank.snapshot().accounts_off_journal, 0);
    }

    #[test]
    fn bank_refuses_malformed_transfers() {
        let bank = Bank::new(2, true);
        let wrong_lock = Write { account: 0, balance: 1, delta: 0, lock: account_lock(1), token: Some(99) };
        assert!(matches!(bank.transfer(&transfer("a", vec![wrong_lock])), Err(Refusal::Invalid(_))));
        let no_token = Write { account: 0, balance: 1, delta: 0, lock: account_lock(0), token: None };
        assert!(matches!(bank.transfer(&transfer("b", vec![no_token])), Err(Refusal::Invalid(_))));
        assert!(matches!(bank.transfer(&transfer("c", vec![write(7, 1, 0, 1)])), Err(Refusal::Invalid(_))));
        let unbalanced = transfer("d", vec![write(0, 1010, 10, 1), write(1, 1000, 0, 1)]);
        assert!(matches!(bank.transfer(&unbalanced), Err(Refusal::Invalid(_))));
        assert!(matches!(Bank::new(2, false).transfer(&unbalanced), Err(Refusal::Invalid(_))));
        assert_eq!(bank.snapshot().total, 2000);
    }

    #[test]
    fn unfenced_bank_applies_everything_and_the_journal_shows_lost_updates() {
        let bank = Bank::new(2, false);
        // Two workers read 1000 and 1000 at once; both write.
        bank.transfer(&transfer("a", vec![write(0, 990, -10, 10), write(1, 1010, 10, 10)])).unwrap();
        bank.transfer(&transfer("b", vec![write(0, 1005, 5, 1), write(1, 995, -5, 1)])).unwrap();
        let s = bank.snapshot();
        assert_eq!(s.total, 2000, "the total came out right...");
        assert_eq!(s.accounts_off_journal, 2, "...but transfer a was lost, and the journal shows it");
        bank.transfer(&transfer("b", vec![write(0, 1000, 0, 1), write(1, 1000, 0, 1)])).unwrap();
        let s = bank.snapshot();
        assert_eq!(s.counters.transfers_applied, 3);
        assert_eq!(s.counters.transfers_applied_twice, 1);
    }
}
