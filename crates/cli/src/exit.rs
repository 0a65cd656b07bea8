//! Exit statuses: what a script can tell from `$?` alone. "The cluster
//! answered no" (free, held, stale) must not look like "the cluster could
//! not be asked" (down, no quorum), nor either like a typing mistake.
//!
//! `leasehold run` is the exception: it exits with its command's status,
//! and keeps the statuses it has always had for its own outcomes (see
//! [`leasehold_client::run`]); [`RUN_TABLE`] lists them. So are the servers,
//! `serve` and `up`: [`SERVER_FAILED`].

use leasehold_client::{ClientError, ErrorCode, SecretError};

/// Exit status of `serve` and `up` when they cannot start or fail, whatever
/// the cause: a service manager needs only "failed" (the package's unit
/// restarts on it), and the bootstrap and configuration checks promise 1.
pub const SERVER_FAILED: i32 = 1;

/// The exit status of every command but `serve`, `up` and `run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done; for a question, the answer is yes.
    Ok,
    /// The cluster answered, and the answer is no.
    No,
    /// The command line is wrong (clap's own status for usage errors).
    Usage,
    /// The cluster could not be asked or could not answer.
    Unavailable,
    /// The cluster refused the credentials (or they could not be read).
    Denied,
    /// Anything else: a node's internal error, an unexpected answer, local I/O.
    Failed,
}

impl Exit {
    pub fn code(self) -> i32 {
        match self {
            Exit::Ok => 0,
            Exit::No => 1,
            Exit::Usage => 2,
            Exit::Unavailable => 3,
            Exit::Denied => 4,
            Exit::Failed => 5,
        }
    }

    /// The status for a command that failed with `error`: the first cause in
    /// its chain that says more than "failed".
    pub fn of(error: &anyhow::Error) -> Exit {
        error
            .chain()
            .find_map(|cause| {
                if let Some(e) = cause.downcast_ref::<ClientError>() {
                    Some(of_client_error(e))
                } else if cause.is::<SecretError>() {
                    Some(Exit::Denied)
                } else if cause.is::<No>() {
                    Some(Exit::No)
                } else {
                    cause.is::<UsageError>().then_some(Exit::Usage)
                }
            })
            .unwrap_or(Exit::Failed)
    }
}

/// Says on stderr why a command of `program` failed (`program: what: why`),
/// with the hint of the bearer secret's old variable when credentials were
/// refused, and returns the command's status.
pub fn failed(program: &str, error: &anyhow::Error) -> Exit {
    eprintln!("{program}: {error:#}");
    let exit = Exit::of(error);
    if exit == Exit::Denied {
        crate::credentials::hint_old_token_variable();
    }
    exit
}

fn of_client_error(error: &ClientError) -> Exit {
    match error {
        ClientError::Api { error, .. } => of_code(error.code),
        ClientError::Unavailable(_) => Exit::Unavailable,
        ClientError::InvalidEndpoint(_) | ClientError::InvalidArgument(_) => Exit::Usage,
        ClientError::Decode(_) => Exit::Failed,
    }
}

fn of_code(code: ErrorCode) -> Exit {
    use ErrorCode::*;
    match code {
        Held | LockDelayed | Reserved | StaleToken | WaitTimeout | NotHeld | NoRecord | NoSnapshot | NoSemaphore
        | NotMember | LockMismatch | AlreadyInitialized | WouldLoseQuorum | SessionNotFound | HeldUnderSession
        | SeqTooOld | Deadlock | SemaphoreFull | LimitMismatch | NoLeader | Compacted | NoUser | NoRole | NoToken
        | AlreadyExists => Exit::No,
        InvalidArgument | RequestIdReused | SeqReused | BodyTooLarge => Exit::Usage,
        Unavailable | NotLeader | Overloaded | RequestTimeout => Exit::Unavailable,
        Unauthenticated | PermissionDenied | TlsRequired => Exit::Denied,
        Internal | Full | NotFound | MethodNotAllowed | UnsupportedMediaType | Unknown => Exit::Failed,
    }
}

/// "The answer is no" where the cluster answers with a success (a `get` of
/// a free lock, a `check` of a token that is not current).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct No(pub String);

/// A mistake in the command line that clap cannot see (e.g. a `--value`
/// that is not JSON).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The table of [`Exit`], as `--help` shows it (docs/cli.md has the same).
pub const TABLE: &str = "\
Exit status (every command but serve, up and run):
  0  ok; for a question, yes
  1  the answer is no: lock held by another owner, delayed or reserved, lock free (get), no record,
     wait timed out, stale token, token not current (check), refused change, no permit free,
     semaphore limit mismatch, wait refused as a deadlock
  2  usage: unknown flag, bad value, invalid argument
  3  could not ask: cluster unreachable, no leader or quorum, overloaded, timed out
  4  credentials: token missing, wrong or unreadable; plain http to an https node
  5  other failure: a node's internal error, an unexpected answer, local I/O";

/// `leasehold run`'s statuses (kept from before the table above existed:
/// scripts test for them).
pub const RUN_TABLE: &str = "\
Exit status: the command's own (128 + signal when a signal ended it), or
  2    the lock was not acquired (held, wait timed out, cluster unreachable,
       credentials refused) or the command line is wrong; the command did not run
  3    the lock was lost, or its renewals failed until the command had to be stopped;
       the command was stopped (SIGKILLed by the safe deadline at the latest)
  126  the command could not be started
  127  the command was not found";

#[cfg(test)]
mod tests {
    use super::*;

    // Ensures each answer lands in its row: no from the cluster is 1, a
    // cluster that cannot answer is 3, refused credentials are 4.
    #[test]
    fn errors_map_to_their_rows() {
        let api = |code: ErrorCode| {
            let body = format!(r#"{{"error":{{"code":"{}","message":""}}}}"#, code.as_str());
            let error = serde_json::from_str::<leasehold_proto::ErrorBody>(&body).unwrap().error;
            anyhow::Error::from(ClientError::Api { status: code.status(), error })
        };
        assert_eq!(Exit::of(&api(ErrorCode::Held)), Exit::No);
        assert_eq!(Exit::of(&api(ErrorCode::StaleToken)), Exit::No);
        assert_eq!(Exit::of(&api(ErrorCode::WaitTimeout)), Exit::No);
        assert_eq!(Exit::of(&api(ErrorCode::Unavailable)), Exit::Unavailable);
        assert_eq!(Exit::of(&api(ErrorCode::Unauthenticated)), Exit::Denied);
        assert_eq!(Exit::of(&api(ErrorCode::PermissionDenied)), Exit::Denied);
        assert_eq!(Exit::of(&api(ErrorCode::InvalidArgument)), Exit::Usage);
        assert_eq!(Exit::of(&api(ErrorCode::Internal)), Exit::Failed);
        let down = anyhow::Error::from(ClientError::Unavailable("connection refused".into()));
        assert_eq!(Exit::of(&down.context("acquiring")), Exit::Unavailable);
        assert_eq!(Exit::of(&anyhow::Error::from(No("free".into()))), Exit::No);
        assert_eq!(Exit::of(&anyhow::anyhow!("disk full")), Exit::Failed);
    }

    // Ensures the table in --help and docs/cli.md lists every status the
    // enum can produce, with the same words.
    #[test]
    fn the_table_is_complete_and_documented() {
        for exit in [Exit::Ok, Exit::No, Exit::Usage, Exit::Unavailable, Exit::Denied, Exit::Failed] {
            assert!(TABLE.contains(&format!("\n  {}  ", exit.code())), "{exit:?} missing from TABLE");
        }
        let docs = include_str!("../../../docs/cli.md");
        for line in TABLE.lines().skip(1).chain(RUN_TABLE.lines()) {
            // Without the status column: docs/cli.md has it in a table.
            let line = line.trim();
            let meaning = line.split_once("  ").map_or(line, |(_, meaning)| meaning.trim());
            assert!(docs.contains(meaning), "docs/cli.md lacks {meaning:?}");
        }
    }
}
