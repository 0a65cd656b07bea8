//! The ledger of `leasehold-lab demo payments`, in PostgreSQL: the tables, the
//! statements the workers run (quoted as they are in docs/fencing.md's "Fencing
//! with PostgreSQL"), and the coordinator's queries.
//!
//! Everything lives in a schema of the demo's own (`leasehold_demo_PID_N`),
//! created at the start and dropped at the end, so `--postgres URL` can point
//! at a database that holds other things. Every connection sets its
//! `search_path` to that schema, so the statements name bare tables.
//!
//! - `accounts (id, balance, fence)`: `fence` is the highest token of the
//!   account's lock that has touched the row.
//! - `transfers (id PRIMARY KEY, from_account, to_account, amount, worker,
//!   applied_at)`: one row per applied transfer; the primary key is the
//!   idempotency check (a retried transfer finds its id there and is rolled
//!   back), and the amounts are the journal that tells a lost update from
//!   luck: without lost updates every balance is its opening balance plus
//!   its incoming minus its outgoing amounts.
//! - `refusals (transfer_id, worker, kind, at)`: transactions rolled back
//!   (`stale-read`, `stale-write`, `retried`), noted after the rollback, for
//!   the progress lines and the timeline.

use serde::{Deserialize, Serialize};
use tokio_postgres::{Client, NoTls};

use super::DemoError;

/// Every account's opening balance.
pub const INITIAL_BALANCE: i64 = 1000;

/// The fenced read: raises the account's fence to the holder's token and
/// returns the balance, or touches no row when a newer token was there.
pub const READ_FENCED: &str = "UPDATE accounts SET fence = $2 WHERE id = $1 AND fence <= $2 RETURNING balance";
/// The fenced write, under the same predicate.
pub const WRITE_FENCED: &str = "UPDATE accounts SET balance = $3 WHERE id = $1 AND fence <= $2";
/// `--no-fencing`: the same without the predicate and the fence raise.
pub const READ_UNFENCED: &str = "SELECT balance FROM accounts WHERE id = $1";
pub const WRITE_UNFENCED: &str = "UPDATE accounts SET balance = $2 WHERE id = $1";
/// The idempotency record, in the write's transaction: 0 rows when the
/// transfer was applied before.
pub const RECORD: &str = "INSERT INTO transfers (id, from_account, to_account, amount, worker) \
                          VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING";
/// Noted after a rollback, outside any transaction.
pub const NOTE_REFUSAL: &str = "INSERT INTO refusals (transfer_id, worker, kind) VALUES ($1, $2, $3)";

const CREATE: &str = "
CREATE TABLE accounts (
    id      integer PRIMARY KEY,
    balance bigint  NOT NULL CHECK (balance >= 0),
    fence   bigint  NOT NULL DEFAULT 0
);
CREATE TABLE transfers (
    id           text        PRIMARY KEY,
    from_account integer     NOT NULL REFERENCES accounts,
    to_account   integer     NOT NULL REFERENCES accounts,
    amount       bigint      NOT NULL CHECK (amount > 0),
    worker       integer     NOT NULL,
    applied_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE refusals (
    transfer_id text        NOT NULL,
    worker      integer     NOT NULL,
    kind        text        NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);";

/// Connects (no TLS) and spawns the connection's task.
pub async fn connect(url: &str) -> Result<Client, DemoError> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("postgres connection ended: {e}");
        }
    });
    Ok(client)
}

/// Connects and sets the `search_path` to `schema`.
pub async fn connect_to(url: &str, schema: &str) -> Result<Client, DemoError> {
    let client = connect(url).await?;
    client.batch_execute(&format!("SET search_path TO {}", quote(schema))).await?;
    Ok(client)
}

/// `"name"`: the schema's names are the demo's own (letters, digits, `_`),
/// quoted all the same.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// One account at the end of the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AccountRow {
    pub id: i32,
    pub balance: i64,
    pub fence: i64,
    /// The opening balance plus the amounts of the applied transfers in,
    /// minus those out: the balance without lost updates.
    pub journal: i64,
}

impl AccountRow {
    pub fn lost_updates(&self) -> bool {
        self.balance != self.journal
    }
}

/// What the coordinator counts while the workers run.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Counts {
    pub applied: i64,
    pub refused_stale: i64,
    pub retried: i64,
}

/// A refusal as the timeline shows it: seconds since the start, and kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Refusal {
    pub at_s: f64,
    pub kind: String,
    pub transfer_id: String,
}

/// The coordinator's connection and the demo's schema.
pub struct Ledger {
    client: Client,
    pub schema: String,
}

impl Ledger {
    /// Creates the schema, its tables and `accounts` accounts.
    pub async fn create(url: &str, accounts: usize) -> Result<Ledger, DemoError> {
        let client = connect(url).await?;
        let schema = format!("leasehold_demo_{}_{}", std::process::id(), fastrand::u32(..));
        // No NOTICE of the final DROP SCHEMA ... CASCADE on stderr.
        client
            .batch_execute(&format!(
                "SET client_min_messages TO warning; CREATE SCHEMA {0}; SET search_path TO {0};",
                quote(&schema)
            ))
            .await?;
        let ledger = Ledger { client, schema };
        ledger.client.batch_execute(CREATE).await?;
        ledger
            .client
            .execute(
                "INSERT INTO accounts (id, balance) SELECT n, $1 FROM generate_series(0, $2 - 1) AS n",
                &[&INITIAL_BALANCE, &(accounts as i32)],
            )
            .await?;
        Ok(ledger)
    }

    /// Drops the schema and everything in it.
    pub async fn drop_schema(&self) -> Result<(), DemoError> {
        self.client.batch_execute(&format!("DROP SCHEMA {} CASCADE", quote(&self.schema))).await?;
        Ok(())
    }

    /// The database's clock, in seconds since the epoch: the timeline's zero.
    pub async fn now(&self) -> Result<f64, DemoError> {
        let row = self.client.query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[]).await?;
        Ok(row.get(0))
    }

    pub async fn counts(&self) -> Result<Counts, DemoError> {
        let row = self
            .client
            .query_one(
                "SELECT (SELECT count(*) FROM transfers), \
                        (SELECT count(*) FROM refusals WHERE kind LIKE 'stale-%'), \
                        (SELECT count(*) FROM refusals WHERE kind = 'retried')",
                &[],
            )
            .await?;
        Ok(Counts { applied: row.get(0), refused_stale: row.get(1), retried: row.get(2) })
    }

    /// Every account with its balance, fence and journal.
    pub async fn accounts(&self) -> Result<Vec<AccountRow>, DemoError> {
        let rows = self
            .client
            .query(
                "SELECT a.id, a.balance, a.fence, \
                        $1::bigint + COALESCE((SELECT sum(amount) FROM transfers WHERE to_account = a.id), 0)::bigint \
                                   - COALESCE((SELECT sum(amount) FROM transfers WHERE from_account = a.id), 0)::bigint \
                   FROM accounts a ORDER BY a.id",
                &[&INITIAL_BALANCE],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| AccountRow { id: r.get(0), balance: r.get(1), fence: r.get(2), journal: r.get(3) })
            .collect())
    }

    /// Seconds since `start` (the database's clock) of every applied transfer.
    pub async fn applied_times(&self, start: f64) -> Result<Vec<f64>, DemoError> {
        let rows = self
            .client
            .query("SELECT extract(epoch FROM applied_at)::float8 - $1 FROM transfers ORDER BY applied_at", &[&start])
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    pub async fn refusals(&self, start: f64) -> Result<Vec<Refusal>, DemoError> {
        let rows = self
            .client
            .query("SELECT extract(epoch FROM at)::float8 - $1, kind, transfer_id FROM refusals ORDER BY at", &[&start])
            .await?;
        Ok(rows.iter().map(|r| Refusal { at_s: r.get(0), kind: r.get(1), transfer_id: r.get(2) }).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures docs/fencing.md's "Fencing with PostgreSQL" quotes the statements
    // and tables exactly as the demo runs them.
    #[test]
    fn fencing_page_quotes_the_statements_as_run() {
        let readme = include_str!("../../../../docs/fencing.md");
        for statement in [READ_FENCED, WRITE_FENCED, READ_UNFENCED, WRITE_UNFENCED, RECORD] {
            assert!(readme.contains(statement), "docs/fencing.md lacks {statement:?}");
        }
        for table in CREATE.split(";\n").filter(|t| !t.contains("refusals")) {
            assert!(readme.contains(table.trim()), "docs/fencing.md lacks {table}");
        }
    }
}
