//! `leasehold run`: runs a command while holding a lock, or several;
//! `leasehold elect`: while leading an election (a lock whose holder
//! carries a value: everything below holds for it, and the leadership is
//! resigned, handing over at once, where a lock would be released).
//!
//! One lock is acquired (waiting in its queue when asked to) through a
//! [`Lock`] guard, whose watchdog renews the lease while the command runs.
//! Several are taken through one [`Session`]: a single multi-acquire under
//! it grants them all in one log entry under one token (or none), and the
//! session's one keepalive keeps them all; the session's end (expiry after
//! this process died, or delete when it is done) frees them all in one
//! entry. The command gets `LEASEHOLD_LOCK` (the names, comma-separated, for
//! several), `LEASEHOLD_TOKEN` (the one token) and `LEASEHOLD_OWNER` in its
//! environment, and `LEASEHOLD_SESSION` (its id) for several.
//!
//! - The command exits: the lock is released and `leasehold run` exits with
//!   the command's status (128 + signal number when a signal ended it).
//! - The renewals fail. The cluster cannot give the lock to anyone else
//!   before the client's *safe deadline* (the send time of the last
//!   successful grant or renewal + ttl − drift margin, see [`Lock::lost`]),
//!   and nothing is known after it, so the command must be gone by then, and
//!   must hear so `grace` earlier to have its grace. Once a renewal is due
//!   and has not succeeded `grace` before the safe deadline (or
//!   [`RENEWAL_PATIENCE`] after it was due, when `grace` leaves it less), the
//!   command gets SIGTERM; at the safe deadline, SIGKILL. When the cluster
//!   says the lease has ended ([`LostReason::Revoked`]), SIGTERM goes at once
//!   and SIGKILL after the grace, or at the safe deadline if that comes
//!   first. Either way `leasehold run` exits with [`EXIT_LOCK_LOST`]. The
//!   command should still pass `LEASEHOLD_TOKEN` with its writes: a paused
//!   or slow process can outlive any lease, and only the fencing token stops
//!   its late writes.
//! - `leasehold run` gets SIGTERM, SIGINT or SIGHUP: the signal is forwarded
//!   to the command, which decides when to exit (then as above).
//!
//! The command runs in a process group of its own (like `timeout(1)`), and
//! signals go to that whole group, so helpers the command started (`sh -c
//! 'a | b'`) are stopped too, and SIGKILL by the safe deadline reaches
//! those that outlive the command. A consequence: the command is not the
//! terminal's foreground job, so it cannot read from the terminal; Ctrl-C
//! reaches it once, through `leasehold run`.

use std::ffi::OsString;
use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use crate::signals::Signals;
use crate::{
    Client, ClientError, Credentials, ErrorCode, FencingToken, Leadership, Lock, LockOptions, LostReason, Semaphore,
    SemaphoreOptions, Session, SessionOptions,
};

/// Exit status when the lock could not be acquired (held, wait timeout,
/// cluster unavailable, bad arguments).
pub const EXIT_ACQUIRE_FAILED: i32 = 2;
/// Exit status when the lock was lost while the command ran.
pub const EXIT_LOCK_LOST: i32 = 3;
/// Exit status when the command could not be started (as in shells).
pub const EXIT_CANNOT_RUN: i32 = 126;
/// Exit status when the command was not found (as in shells).
pub const EXIT_NOT_FOUND: i32 = 127;

/// How often `stop` looks whether helpers of the command are still running.
const GROUP_POLL: Duration = Duration::from_millis(50);
/// How long a best-effort release may take after the lock was lost.
const RELEASE_AFTER_LOSS_BOUND: Duration = Duration::from_secs(2);
/// How long a due renewal may take before `run` counts the renewals as
/// failing, when `grace` would have the command stopped sooner (a grace
/// close to, or over, two thirds of the ttl): a renewal is one commit, a
/// few milliseconds; one that takes longer waits out an election, a node
/// that does not answer, or this process starved of CPU.
pub const RENEWAL_PATIENCE: Duration = Duration::from_millis(500);

/// What `leasehold run` does.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub endpoints: Vec<String>,
    /// Token and CA for a cluster with auth or TLS on.
    pub credentials: Credentials,
    /// One lock (held by its own lease), or several (held under one session).
    pub locks: Vec<String>,
    /// Hold the one lock in shared mode (a read lock).
    pub shared: bool,
    /// Instead of locks, one permit of this semaphore (name, limit).
    pub semaphore: Option<(String, u32)>,
    /// The lease's ttl, or the session's.
    pub ttl: Duration,
    /// Wait up to this long for the lock; `None` fails at once when held.
    pub wait: Option<Duration>,
    /// Holder identity; a fresh `hostname-pid-random` when absent.
    pub owner: Option<String>,
    /// `None`: the guard's default (ttl / 10).
    pub drift_margin: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when the lock is lost: SIGTERM goes
    /// this long before the safe deadline when renewals fail, SIGKILL never
    /// later than the safe deadline (see the module docs).
    pub grace: Duration,
    /// The program and its arguments.
    pub command: Vec<OsString>,
    /// `leasehold elect`: campaign in the election `locks` names (one)
    /// announcing this value, and run the command while this process leads
    /// it, exactly as it would run under that lock.
    pub campaign: Option<serde_json::Value>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Client(#[from] ClientError),
    #[error("{message}")]
    Acquire { message: String, source: ClientError },
    #[error("no command given")]
    NoCommand,
    #[error("no lock given")]
    NoLock,
    /// A combination of options `run` cannot hold: `--shared` with several
    /// locks, or a semaphore with locks.
    #[error("{0}")]
    Conflicting(&'static str),
    #[error("cannot run {program:?}: {source}")]
    Spawn { program: OsString, source: std::io::Error },
    #[error("signal handling: {0}")]
    Signals(std::io::Error),
    #[error("waiting for the command: {0}")]
    Wait(std::io::Error),
    #[error("{signal} received while acquiring lock {lock:?}; the command was not started")]
    Interrupted { lock: String, signal: Signal },
    #[error("lost lock {lock:?} (token {token}): {reason}; the command was stopped ({status})")]
    Lost { lock: String, token: FencingToken, reason: LostReason, status: String },
    /// The renewals failed until the command had to be stopped to be gone,
    /// after its grace, by the safe deadline; the lock was given up then
    /// (the watchdog had not fired `lost` yet).
    #[error(
        "lost lock {lock:?} (token {token}): no renewal succeeded in time to leave the command its {grace:?} \
         of grace before the safe deadline; the command was stopped ({status})"
    )]
    Unrenewed { lock: String, token: FencingToken, grace: Duration, status: String },
}

impl RunError {
    /// The exit status `leasehold run` ends with.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Client(_)
            | RunError::Acquire { .. }
            | RunError::NoCommand
            | RunError::NoLock
            | RunError::Conflicting(_) => EXIT_ACQUIRE_FAILED,
            RunError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
            RunError::Spawn { .. } | RunError::Signals(_) | RunError::Wait(_) => EXIT_CANNOT_RUN,
            RunError::Interrupted { signal, .. } => 128 + *signal as i32,
            RunError::Lost { .. } | RunError::Unrenewed { .. } => EXIT_LOCK_LOST,
        }
    }
}

/// Runs `leasehold run` and returns its exit status, after printing any
/// error to stderr.
pub async fn run(options: &RunOptions) -> i32 {
    match execute(options).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leasehold run: {e}");
            e.exit_code()
        }
    }
}

/// What `run` holds while its command runs: one lock by its own lease
/// (exclusive or shared), several under one session, or a semaphore permit.
enum Held {
    Lock(Lock),
    Session {
        session: Session,
        token: FencingToken,
    },
    Semaphore(Semaphore),
    /// A leadership is a lock whose holder carries a value: it is kept,
    /// lost and stopped for as a lock is, and resigned instead of released.
    Leader(Leadership),
}

impl Held {
    /// Takes `options.locks` for `options.owner` (or a fresh owner).
    async fn acquire(client: &Arc<Client>, options: &RunOptions) -> Result<Held, RunError> {
        let names: Vec<&str> = options.locks.iter().map(String::as_str).collect();
        let failed = |source| acquire_error(&options.locks.join(","), options.wait, source);
        let owner = options.owner.clone().unwrap_or_else(crate::default_owner);
        let mut lock_options = LockOptions::new(options.ttl).with_owner(owner.clone());
        lock_options.wait = options.wait;
        lock_options.drift_margin = options.drift_margin;
        if let Some((name, limit)) = &options.semaphore {
            if !names.is_empty() || options.shared {
                return Err(RunError::Conflicting("a semaphore is held alone: no --lock or --shared with it"));
            }
            let semaphore_options = SemaphoreOptions { lock: lock_options, limit: *limit, permits: 1 };
            let failed = |source| acquire_error(name, options.wait, source);
            return Ok(Held::Semaphore(client.semaphore(name, semaphore_options).await.map_err(failed)?));
        }
        match names.as_slice() {
            [] => Err(RunError::NoLock),
            [name] if options.campaign.is_some() => {
                let value = options.campaign.clone().unwrap_or_default();
                Ok(Held::Leader(client.election(name).campaign(value, lock_options).await.map_err(failed)?))
            }
            _ if options.campaign.is_some() => Err(RunError::Acquire {
                message: "an election is one name".into(),
                source: ClientError::InvalidArgument("give one election".into()),
            }),
            [name] if options.shared => {
                Ok(Held::Lock(client.read_lock(name, lock_options).await.map_err(failed)?.into()))
            }
            [name] => Ok(Held::Lock(client.lock(name, lock_options).await.map_err(failed)?)),
            _ if options.shared => {
                Err(RunError::Conflicting("--shared holds one lock (sessions hold exclusive locks)"))
            }
            names => {
                let mut session_options = SessionOptions::new(owner, options.ttl);
                session_options.drift_margin = options.drift_margin;
                let session = Session::open(Arc::clone(client), session_options).await.map_err(failed)?;
                // On failure the session is dropped, which deletes it.
                let grants = session.lock_many(names, options.wait).await.map_err(failed)?;
                let token = grants.first().map_or(FencingToken::default(), |g| g.token);
                Ok(Held::Session { session, token })
            }
        }
    }

    fn token(&self) -> FencingToken {
        match self {
            Held::Lock(lock) => lock.token(),
            Held::Leader(leader) => leader.token(),
            Held::Session { token, .. } => *token,
            Held::Semaphore(semaphore) => semaphore.token(),
        }
    }

    fn owner(&self) -> &str {
        match self {
            Held::Lock(lock) => lock.owner(),
            Held::Leader(leader) => leader.owner(),
            Held::Session { session, .. } => session.owner(),
            Held::Semaphore(semaphore) => semaphore.owner(),
        }
    }

    fn valid_until(&self) -> Instant {
        match self {
            Held::Lock(lock) => lock.valid_until(),
            Held::Leader(leader) => leader.valid_until(),
            Held::Session { session, .. } => session.valid_until(),
            Held::Semaphore(semaphore) => semaphore.valid_until(),
        }
    }

    fn renewal_due(&self) -> Instant {
        match self {
            Held::Lock(lock) => lock.renewal_due(),
            Held::Leader(leader) => leader.renewal_due(),
            Held::Session { session, .. } => session.renewal_due(),
            Held::Semaphore(semaphore) => semaphore.renewal_due(),
        }
    }

    fn lost_reason(&self) -> Option<LostReason> {
        match self {
            Held::Lock(lock) => lock.lost_reason(),
            Held::Leader(leader) => leader.lost_reason(),
            Held::Session { session, .. } => session.lost_reason(),
            Held::Semaphore(semaphore) => semaphore.lost_reason(),
        }
    }

    /// Resolves when the lock, or the session with all its locks, is lost.
    fn lost(&self) -> Pin<Box<dyn Future<Output = LostReason> + Send>> {
        match self {
            Held::Lock(lock) => Box::pin(lock.lost()),
            Held::Leader(leader) => Box::pin(leader.lost()),
            Held::Session { session, .. } => Box::pin(session.lost()),
            Held::Semaphore(semaphore) => Box::pin(semaphore.lost()),
        }
    }

    /// Releases the lock, or deletes the session (releasing all its locks).
    async fn release(self) -> Result<(), ClientError> {
        match self {
            Held::Lock(lock) => lock.release().await,
            Held::Leader(leader) => leader.resign().await,
            Held::Session { session, .. } => session.close().await.map(drop),
            Held::Semaphore(semaphore) => semaphore.release().await,
        }
    }
}

/// Runs `leasehold run`: `Ok` with the command's exit status when it ended
/// on its own while the lock was held.
pub async fn execute(options: &RunOptions) -> Result<i32, RunError> {
    let (program, args) = options.command.split_first().ok_or(RunError::NoCommand)?;
    let client = Arc::new(Client::with_credentials(&options.endpoints, &options.credentials)?);
    let locks = match &options.semaphore {
        Some((name, _)) => name.clone(),
        None => options.locks.join(","),
    };
    // Handlers first: from here on these signals no longer end this process.
    let mut signals = Signals::new().map_err(RunError::Signals)?;
    let held = tokio::select! {
        acquired = Held::acquire(&client, options) => acquired?,
        signal = signals.recv() => {
            return Err(RunError::Interrupted { lock: locks, signal });
        }
    };
    let token = held.token();
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env("LEASEHOLD_LOCK", &locks)
        .env("LEASEHOLD_TOKEN", token.to_string())
        .env("LEASEHOLD_OWNER", held.owner())
        .process_group(0)
        .kill_on_drop(true);
    match &held {
        Held::Session { session, .. } => _ = command.env("LEASEHOLD_SESSION", session.id().to_string()),
        Held::Semaphore(semaphore) => _ = command.env("LEASEHOLD_SEMAPHORE", semaphore.name()),
        Held::Lock(_) | Held::Leader(_) => {}
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(source) => {
            release(held, &locks).await;
            return Err(RunError::Spawn { program: program.clone(), source });
        }
    };
    // Its own process group, led by the command itself.
    let group = child.id().and_then(|pid| i32::try_from(pid).ok()).map(Pid::from_raw);
    let ended = {
        let mut lost = held.lost();
        let unrenewed = unrenewed(&held, options.grace);
        tokio::pin!(unrenewed);
        loop {
            tokio::select! {
                biased;
                reason = &mut lost => {
                    // Revoked: the cluster may have given the lock away
                    // already, yet SIGKILL at once would leave the command
                    // no grace; never past the safe deadline, though.
                    // Expired: that deadline is now.
                    let kill_at = (Instant::now() + options.grace).min(held.valid_until());
                    eprintln!(
                        "leasehold run: lost lock {locks:?} (token {token}): {reason}; sending SIGTERM to the command (SIGKILL {})",
                        from_now(kill_at)
                    );
                    break Ended::Lost { reason: Some(reason), kill_at };
                }
                deadline = &mut unrenewed => {
                    eprintln!(
                        "leasehold run: lost lock {locks:?} (token {token}): no renewal succeeded in time to leave the command its {:?} of grace; sending SIGTERM to the command (SIGKILL at the safe deadline, {})",
                        options.grace,
                        from_now(deadline)
                    );
                    break Ended::Lost { reason: None, kill_at: deadline };
                }
                status = child.wait() => break Ended::Exited(status.map_err(RunError::Wait)?),
                signal = signals.recv() => {
                    if let Some(group) = group {
                        send(group, signal);
                    }
                }
            }
        }
    };
    let (reason, kill_at) = match ended {
        Ended::Exited(status) => {
            release(held, &locks).await;
            return Ok(exit_code(status));
        }
        Ended::Lost { reason, kill_at } => (reason, kill_at),
    };
    let status = stop(&mut child, group, kill_at).await;
    let reason = reason.or_else(|| held.lost_reason());
    if !matches!(reason, Some(LostReason::Revoked { .. })) {
        // The lease may still be held: free it early if the cluster answers.
        let _ = tokio::time::timeout(RELEASE_AFTER_LOSS_BOUND, held.release()).await;
    }
    let status = status.map_or_else(|e| format!("wait failed: {e}"), describe);
    Err(match reason {
        Some(reason) => RunError::Lost { lock: locks, token, reason, status },
        None => RunError::Unrenewed { lock: locks, token, grace: options.grace, status },
    })
}

/// How the command's run under the lock ended.
enum Ended {
    /// The command exited on its own while the lock was held.
    Exited(ExitStatus),
    /// The lock was lost (`reason`), or given up because its renewals
    /// failed (`None`): the command is to be gone by `kill_at`.
    Lost { reason: Option<LostReason>, kill_at: Instant },
}

/// Resolves, with the safe deadline, once the renewals have failed until
/// [`sigterm_at`]. Pends while renewals succeed: each moves the safe
/// deadline, and with it the instant to look again.
async fn unrenewed(held: &Held, grace: Duration) -> Instant {
    loop {
        let deadline = held.valid_until();
        tokio::time::sleep_until(sigterm_at(deadline, held.renewal_due(), grace).into()).await;
        if held.valid_until() == deadline {
            return deadline;
        }
    }
}

/// When the command must get SIGTERM, unless a renewal succeeds first, to
/// be gone after `grace` by the safe `deadline`: `grace` before it, but not
/// before the renewal due at `renewal_due` has had [`RENEWAL_PATIENCE`] (a
/// SIGTERM while it is merely in flight would stop commands whose lock is
/// fine), and never after the deadline.
fn sigterm_at(deadline: Instant, renewal_due: Instant, grace: Duration) -> Instant {
    let patience_ends = renewal_due + RENEWAL_PATIENCE;
    deadline.checked_sub(grace).map_or(patience_ends, |t| t.max(patience_ends)).min(deadline)
}

/// `in 1.2s` (or `now`), for the messages.
fn from_now(at: Instant) -> String {
    match at.checked_duration_since(Instant::now()) {
        Some(left) if !left.is_zero() => format!("in {left:.1?}"),
        _ => "now".to_string(),
    }
}

/// The message for a failed acquire.
fn acquire_error(lock: &str, wait: Option<Duration>, source: ClientError) -> RunError {
    let message = match source.detail() {
        Some(e) if e.code == ErrorCode::Held && !e.conflicts().is_empty() => {
            let names: Vec<String> = e.conflicts().into_iter().map(|c| c.name).collect();
            format!("locks {names:?} of {lock:?} cannot be taken now; add --wait to queue for them")
        }
        Some(e) if e.code == ErrorCode::Held => {
            let number = |key| e.number(key).map_or_else(|| "?".to_string(), |n| n.to_string());
            let holder = e.holder().unwrap_or("?");
            let (token, expires) = (number("token"), number("expires_in_ms"));
            format!("lock {lock:?} is held by {holder:?} (token {token}, expires in {expires} ms); add --wait to queue for it")
        }
        Some(e) if e.code == ErrorCode::WaitTimeout => {
            format!("lock {lock:?} was still held after waiting {:?}", wait.unwrap_or_default())
        }
        _ => format!("could not acquire lock {lock:?}: {source}"),
    };
    RunError::Acquire { message, source }
}

/// Releases, reporting a failure on stderr (the lease or session then runs out).
async fn release(held: Held, locks: &str) {
    if let Err(e) = held.release().await {
        eprintln!("leasehold run: could not release lock {locks:?} (it runs out after its ttl): {e}");
    }
}

/// SIGTERM (and SIGCONT, so a stopped command can act on it) to the
/// command's group; SIGKILL to the group at `kill_at`, unless the command
/// and every helper left in its group have exited by then. Returns the
/// command's status.
async fn stop(child: &mut tokio::process::Child, group: Option<Pid>, kill_at: Instant) -> std::io::Result<ExitStatus> {
    let Some(group) = group else {
        // Already reaped.
        return child.wait().await;
    };
    send(group, Signal::SIGTERM);
    send(group, Signal::SIGCONT);
    let status = match tokio::time::timeout_at(kill_at.into(), child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            eprintln!("leasehold run: the command is still running at the safe deadline; sending SIGKILL");
            send(group, Signal::SIGKILL);
            child.wait().await
        }
    };
    // Helpers the command started may outlive it (they heard the SIGTERM
    // too): they are not this process's children, so look for the group
    // until it is empty or `kill_at` has come. Only `killpg` from here: the
    // command's own PID may already belong to another process. Once the
    // group is empty its id may be reused, so SIGKILL only a group still
    // populated at `kill_at`.
    let emptied = loop {
        if killpg(group, None).is_err() {
            break true;
        }
        if Instant::now() >= kill_at {
            break false;
        }
        tokio::time::sleep(GROUP_POLL.min(kill_at.saturating_duration_since(Instant::now()))).await;
    };
    if !emptied {
        let _ = killpg(group, Signal::SIGKILL);
    }
    status
}

/// Sends `signal` to the command's process group, or to the command alone
/// when the group is gone (it moved to a group of its own).
fn send(group: Pid, signal: Signal) {
    if killpg(group, signal).is_err() {
        let _ = kill(group, signal);
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(s) => format!("killed by {s}"),
            Err(_) => format!("killed by signal {signal}"),
        },
        (None, None) => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_distinct() {
        let body = r#"{"error":{"code":"held","message":"","holder":"a","token":7,"expires_in_ms":900}}"#;
        let error = serde_json::from_str::<crate::proto::ErrorBody>(body).unwrap().error;
        let held = ClientError::Api { status: 409, error };
        let e = acquire_error("x", None, held);
        assert_eq!(e.exit_code(), EXIT_ACQUIRE_FAILED);
        assert!(e.to_string().contains("held by \"a\" (token 7"), "{e}");
        let lost = RunError::Lost {
            lock: "x".into(),
            token: FencingToken::granted_at(1),
            reason: LostReason::Ended,
            status: "exit status 0".into(),
        };
        assert_eq!(lost.exit_code(), EXIT_LOCK_LOST);
        let unrenewed = RunError::Unrenewed {
            lock: "x".into(),
            token: FencingToken::granted_at(1),
            grace: Duration::from_secs(5),
            status: "x".into(),
        };
        assert_eq!(unrenewed.exit_code(), EXIT_LOCK_LOST);
        assert!(unrenewed.to_string().starts_with("lost lock \"x\" (token 1)"), "{unrenewed}");
        let interrupted = RunError::Interrupted { lock: "x".into(), signal: Signal::SIGINT };
        assert_eq!(interrupted.exit_code(), 130);
    }

    // Ensures SIGTERM is due `grace` before the safe deadline (the defaults:
    // ttl 10 s, margin 1 s, grace 5 s), no sooner than RENEWAL_PATIENCE
    // after the renewal was due when the grace is longer than what is left
    // after it, and at the deadline with no grace.
    #[test]
    fn sigterm_leaves_the_grace_before_the_safe_deadline() {
        let anchor = Instant::now();
        let s = Duration::from_secs;
        let (deadline, due) = (anchor + s(9), anchor + Duration::from_millis(3333));
        assert_eq!(sigterm_at(deadline, due, s(5)), anchor + s(4));
        assert_eq!(sigterm_at(deadline, due, s(8)), due + RENEWAL_PATIENCE);
        assert_eq!(sigterm_at(deadline, due, Duration::MAX), due + RENEWAL_PATIENCE);
        assert_eq!(sigterm_at(deadline, due, Duration::ZERO), deadline);
        let (short_deadline, due) = (anchor + s(2), anchor + Duration::from_millis(1900));
        assert_eq!(sigterm_at(short_deadline, due, s(5)), short_deadline);
    }
}
