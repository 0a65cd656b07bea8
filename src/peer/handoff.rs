//! Hand-offs: a follower hands the leader decoded commands, not HTTP
//! requests ([`Channel::Propose`]).
//!
//! Relaying a client request cost the follower an HTTP/2 client and the
//! leader a second pass through its whole HTTP stack (admission, auth,
//! routing, JSON), about 60 µs of CPU per request on top of the command's
//! own work. Instead a follower runs the handler itself, and only the
//! proposal crosses: the command in the log's own compact binary form
//! ([`Batch::encoded`]), answered with its result and the index of the
//! entry that applied it. The leader joins handed commands to its usual
//! batching, so they share entries with its own clients'.
//!
//! One connection per leader carries every hand-off of this follower, many
//! at once: each [`Ask`] is tagged with an id, and the [`Answer`]s come
//! back in any order (a writer task, a reader task, and the map of ids
//! waiting for theirs). A linearizable read asks the same way for a read
//! index ([`Asked::ReadIndex`]): the leader confirms its leadership with a
//! quorum and answers its applied index, which the follower then waits to
//! have applied itself.
//!
//! A waiting acquire is handed whole ([`Asked::Acquire`]): the leader
//! waits its turn in its own registry of waiters and answers once the wait
//! ended, with the grant of the entry that handed it the lock (applied on
//! the leader, so committed). The follower answers its client at once,
//! without its own append, fsync and apply of that entry on the way.
//!
//! The leader answers the hello with a [`Welcome`] frame before anything
//! else: a leader of an earlier version, which does not know the channel,
//! closes the connection unanswered instead, and the follower then relays
//! whole requests to it as before ([`HandOff::ready`] says so). The welcome
//! names the channel's [`VERSION`]: a follower asks only what the leader's
//! version takes (a leader of version 1 gets no [`Asked::Acquire`], which
//! it could not decode: it would close the channel).
//!
//! Frames are the peer transport's (a length, then MessagePack), with
//! structs as maps of named fields: a command's result carries the core's
//! internally tagged enums, which need the names.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::{read_frame, Channel, Dialer, FrameError, MAX_FRAME};
use crate::raft::LockResult;
use leasehold_core::{Batch, Command, Principal};
use leasehold_proto::NodeId;

/// The version of the channel this node speaks, named in its [`Welcome`]:
/// 1 (a welcome naming none) proposals and read indexes; 2 every handed
/// command with the principal that asked for it (batch version 3), and
/// waiting acquires handed whole ([`Asked::Acquire`]). A follower hands
/// nothing to a leader below 2, which could read neither: it relays whole
/// requests to it, which that leader authorizes itself.
pub const VERSION: u32 = 2;

/// How long a leader may take to welcome a new hand-off channel.
const WELCOME_WITHIN: Duration = Duration::from_secs(1);
/// How long a leader that closed the channel unanswered (an earlier
/// version) is relayed to before the channel is tried again.
const RELAY_TO_OLD_LEADER_FOR: Duration = Duration::from_secs(30);

/// What a follower asks the leader: one frame, tagged with the `id` its
/// answer carries back.
#[derive(Debug, Serialize, Deserialize)]
pub struct Ask {
    pub id: u64,
    pub asked: Asked,
    /// Requests on the follower wait for its own apply of entries (waiting
    /// acquires): the leader then sends it the commit index at once
    /// ([`HandingFollowers`]).
    #[serde(default)]
    pub waiting: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Asked {
    /// Propose this command: a batch of exactly one client command with
    /// the principal that asked for it ([`Batch::handed`]), without quotas
    /// (the leader stamps its own on the entry).
    Propose(Batch),
    /// Confirm leadership and answer a read index.
    ReadIndex,
    /// Acquire, waiting in the queue: a batch of exactly one acquire with
    /// a `wait_ms` (not a campaign), answered [`Answered::Acquired`] only
    /// once its wait ended. Since version 2.
    Acquire(Batch),
}

/// The leader's answer to the ask of the same `id`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Answer {
    pub id: u64,
    pub answered: Answered,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Answered {
    /// The command was committed and applied in entry `index`.
    Applied { index: u64, result: LockResult },
    /// Every write committed before the ask is applied up to `index`.
    ReadIndex { index: u64 },
    /// How the wait of an [`Asked::Acquire`] ended: granted (by an entry
    /// the leader applied, so committed), or refused.
    Acquired(LockResult),
    /// The answering node does not lead (the command was not proposed).
    NotLeader,
    /// Proposed or asked, but not confirmed in time: it may still take effect.
    Unavailable(String),
    /// Not a command a client may send (a Tick, an admin command), or not
    /// one command.
    Refused(String),
}

/// The leader's first frame on a hand-off channel.
#[derive(Debug, Serialize, Deserialize)]
pub struct Welcome {
    pub from: NodeId,
    /// The leader's [`VERSION`] of the channel; 1 when absent (the first).
    #[serde(default = "first_version")]
    pub version: u32,
}

impl From<NodeId> for Welcome {
    /// This version's welcome, from the leader `from`.
    fn from(from: NodeId) -> Welcome {
        Welcome { from, version: VERSION }
    }
}

fn first_version() -> u32 {
    1
}

/// `value` as one frame whose structs are maps of named fields.
pub fn encode_named_frame<T: Serialize>(value: &T) -> Result<Vec<u8>, FrameError> {
    let mut frame = Vec::with_capacity(128);
    frame.extend_from_slice(&[0; 4]);
    value.serialize(&mut rmp_serde::Serializer::new(&mut frame).with_struct_map())?;
    let len = frame.len() - 4;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    frame[..4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(frame)
}

/// Whether a client may hand `command` over: what its API proposes. Ticks
/// are the leader's own, and a semaphore's limit, users and roles are set
/// on the admin API (which is relayed whole, with its admin token, for the
/// leader to check again).
pub fn handed_by_clients(command: &Command) -> bool {
    use Command::*;
    match command {
        Acquire { .. }
        | Renew { .. }
        | Release { .. }
        | AcquireMany { .. }
        | ReleaseMany { .. }
        | Cancel { .. }
        | PutRecord { .. }
        | Gate { .. }
        | CreateSession { .. }
        | KeepAlive { .. }
        | DeleteSession { .. }
        | AcquireShared { .. }
        | RenewShared { .. }
        | ReleaseShared { .. }
        | AcquirePermits { .. }
        | RenewPermits { .. }
        | ReleasePermits { .. }
        | CancelPermits { .. }
        | Campaign { .. }
        | Proclaim { .. }
        | Resign { .. } => true,
        SetSemaphoreLimit { .. }
        | Tick { .. }
        | AddUser { .. }
        | RemoveUser { .. }
        | AddToken { .. }
        | RevokeToken { .. }
        | AddRole { .. }
        | RemoveRole { .. }
        | GrantPermission { .. }
        | RevokePermission { .. }
        | AssignRole { .. }
        | UnassignRole { .. } => false,
    }
}

/// The one command a proposal carries, if it is one a client may hand over,
/// with the principal that asked for it.
pub fn handed_command(batch: &Batch) -> Result<(&Command, &Principal), String> {
    let mut proposed = batch.proposed();
    match (proposed.next(), proposed.next()) {
        (Some((command, _)), None) if !handed_by_clients(command) => {
            Err(format!("{command} is not a client's command"))
        }
        (Some(_), None) if batch.quotas() != leasehold_core::Quotas::UNLIMITED => {
            Err("a handed command carries no quotas".into())
        }
        (Some((command, Some(by))), None) => Ok((command, by)),
        (Some(_), None) => Err("a handed command carries the principal that asked for it; \
                                this follower runs an earlier version: upgrade it"
            .into()),
        _ => Err("a hand-off carries exactly one command".into()),
    }
}

/// Why a hand-off did not bring an answer.
#[derive(Debug, thiserror::Error)]
pub enum HandOffError {
    /// It never reached the leader (no channel, or the node asked does not
    /// lead): it may be sent again, to the next leader.
    #[error("leader unreachable: {0}")]
    NotSent(String),
    /// The channel broke with it on its way: the leader may have taken it.
    #[error("leader reply lost: {0}")]
    Lost(String),
    /// The leader took it, and could not confirm it in time.
    #[error("{0}")]
    Unavailable(String),
    /// The leader is of a version without hand-offs: relay instead.
    #[error("the leader takes no hand-offs (an earlier version)")]
    Unsupported,
    /// The leader refused the command.
    #[error("the leader refused the hand-off: {0}")]
    Refused(String),
}

/// Whether requests for the leader at an address run here with their
/// commands handed over, or are relayed whole.
#[derive(Debug)]
pub enum Ready {
    HandOff,
    Relay,
}

/// This follower's hand-off channels, one per leader address.
pub struct HandOff {
    dialer: Dialer,
    lines: Mutex<HashMap<String, Route>>,
    /// One dial at a time: a burst of requests after a leader change opens
    /// one channel, not one each.
    dialing: tokio::sync::Mutex<()>,
}

#[derive(Clone)]
enum Route {
    Open(Arc<Line>),
    /// An earlier version leads there: relay until then.
    Relay(Instant),
}

/// One open channel: frames to write, and the asks waiting for answers
/// (`None` once the channel ended).
struct Line {
    out: mpsc::UnboundedSender<(u64, Vec<u8>)>,
    waiting: Mutex<Option<HashMap<u64, Waiting>>>,
    next_id: AtomicU64,
    /// Its reader and writer, stopped when the line is ended here.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

/// An ask waiting for its answer, and whether it may have left: it is
/// marked before its frame is written, so an ask of a channel that ended
/// while it was unmarked never reached the leader.
struct Waiting {
    reply: oneshot::Sender<Result<Answered, HandOffError>>,
    sent: bool,
}

type Waitings = HashMap<u64, Waiting>;

impl Line {
    fn is_open(&self) -> bool {
        !self.out.is_closed() && self.lock().is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Waitings>> {
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Marks the asks `ids` as on their way; false once the channel ended
    /// (they are answered `NotSent` then, and must not be written).
    fn sending(&self, ids: &[u64]) -> bool {
        let mut waiting = self.lock();
        let Some(waiting) = waiting.as_mut() else { return false };
        for id in ids {
            if let Some(w) = waiting.get_mut(id) {
                w.sent = true;
            }
        }
        true
    }

    /// Ends the line from this side: closes it and stops its reader and
    /// writer (the connection with them).
    fn end(&self) {
        self.close();
        for task in self.tasks.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).drain(..) {
            task.abort();
        }
    }

    /// Closes the line: an ask that may have left learns its answer is
    /// lost, one that never did that it was not sent.
    fn close(&self) {
        let Some(waiting) = self.lock().take() else { return };
        for (_, w) in waiting {
            if !w.sent {
                let _ = w.reply.send(Err(HandOffError::NotSent("hand-off channel closed before it was sent".into())));
            }
        }
    }
}

impl HandOff {
    pub fn new(dialer: Dialer) -> HandOff {
        HandOff { dialer, lines: Mutex::default(), dialing: tokio::sync::Mutex::new(()) }
    }

    /// Whether requests for the leader at `addr` (its peer address) hand
    /// their commands over (a channel is open, opened now if need be) or
    /// are relayed (it is of an earlier version); `NotSent` when it cannot
    /// be reached at all.
    pub async fn ready(&self, addr: &str) -> Result<Ready, HandOffError> {
        match self.line(addr).await {
            Ok(_) => Ok(Ready::HandOff),
            Err(HandOffError::Unsupported) => Ok(Ready::Relay),
            Err(e) => Err(e),
        }
    }

    /// Proposes the command of `batch` (made by [`Batch::single`]) through
    /// the leader at `addr`: its result and the index of the entry that
    /// applied it.
    /// `waiting`: requests on this node wait for its own apply of entries
    /// (see [`Ask::waiting`]).
    pub async fn propose(&self, addr: &str, batch: &Batch, waiting: bool) -> Result<(LockResult, u64), HandOffError> {
        match self.ask(addr, Asked::Propose(batch.clone()), waiting).await? {
            Answered::Applied { index, result } => Ok((result, index)),
            other => Err(unexpected(other)),
        }
    }

    /// Acquires through the leader at `addr` with the waiting acquire of
    /// `batch`: the leader waits its turn, and answers how it ended. Only
    /// when [`HandOff::ready`] said the leader's requests are handed over.
    pub async fn acquire(&self, addr: &str, batch: &Batch, waiting: bool) -> Result<LockResult, HandOffError> {
        match self.ask(addr, Asked::Acquire(batch.clone()), waiting).await? {
            Answered::Acquired(result) => Ok(result),
            other => Err(unexpected(other)),
        }
    }

    /// Ends every channel but the one to `kept` (the leader's peer
    /// address, if another node leads): each ask waiting on them learns
    /// its answer is lost (or, if it never left, that it was not sent).
    pub fn end_all_but(&self, kept: Option<&str>) {
        let mut ended = Vec::new();
        self.lines.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).retain(|addr, route| {
            let keep = Some(addr.as_str()) == kept;
            if !keep {
                ended.push(route.clone());
            }
            keep
        });
        for route in ended {
            if let Route::Open(line) = route {
                line.end();
            }
        }
    }

    /// Whether a channel to the leader at `addr` is open now, so that its
    /// requests are handed over (without dialing: false before the first
    /// request opens it, and for a leader requests are relayed to).
    pub fn hands_off_to(&self, addr: &str) -> bool {
        matches!(self.route(addr), Some(Ok(_)))
    }

    /// A read index from the leader at `addr` (the read then waits for this
    /// node's apply of it).
    pub async fn read_index(&self, addr: &str) -> Result<u64, HandOffError> {
        match self.ask(addr, Asked::ReadIndex, true).await? {
            Answered::ReadIndex { index } => Ok(index),
            other => Err(unexpected(other)),
        }
    }

    async fn ask(&self, addr: &str, asked: Asked, waiting: bool) -> Result<Answered, HandOffError> {
        let line = self.line(addr).await?;
        let id = line.next_id.fetch_add(1, Ordering::Relaxed);
        let frame =
            encode_named_frame(&Ask { id, asked, waiting }).map_err(|e| HandOffError::Refused(e.to_string()))?;
        let (reply, answer) = oneshot::channel();
        match line.lock().as_mut() {
            Some(asks) => asks.insert(id, Waiting { reply, sent: false }),
            None => return Err(HandOffError::NotSent("hand-off channel closed".into())),
        };
        // Given back when the writer is gone: it never left.
        if line.out.send((id, frame)).is_err() {
            if let Some(asks) = line.lock().as_mut() {
                asks.remove(&id);
            }
            return Err(HandOffError::NotSent("hand-off channel closed".into()));
        }
        // A caller that stops waiting leaves its entry until the answer
        // comes (and finds no one): the leader answers every ask.
        match answer.await {
            Ok(Ok(Answered::NotLeader)) => Err(HandOffError::NotSent("the node asked no longer leads".into())),
            Ok(Ok(Answered::Unavailable(why))) => Err(HandOffError::Unavailable(why)),
            Ok(Ok(Answered::Refused(why))) => Err(HandOffError::Refused(why)),
            Ok(Ok(answered)) => Ok(answered),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(HandOffError::Lost("hand-off channel closed".into())),
        }
    }

    /// The open channel to `addr`, dialed if there is none.
    async fn line(&self, addr: &str) -> Result<Arc<Line>, HandOffError> {
        if let Some(route) = self.route(addr) {
            return route;
        }
        let _dialing = self.dialing.lock().await;
        if let Some(route) = self.route(addr) {
            return route;
        }
        let route = match self.dial(addr).await {
            Ok(line) => Route::Open(line),
            Err(HandOffError::Unsupported) => {
                tracing::info!(leader = addr, "the leader takes no hand-offs from this version; relaying to it");
                Route::Relay(Instant::now() + RELAY_TO_OLD_LEADER_FOR)
            }
            Err(e) => return Err(e),
        };
        self.lines.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(addr.to_owned(), route.clone());
        match route {
            Route::Open(line) => Ok(line),
            Route::Relay(_) => Err(HandOffError::Unsupported),
        }
    }

    fn route(&self, addr: &str) -> Option<Result<Arc<Line>, HandOffError>> {
        let lines = self.lines.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match lines.get(addr)? {
            Route::Open(line) if line.is_open() => Some(Ok(line.clone())),
            Route::Relay(until) if Instant::now() < *until => Some(Err(HandOffError::Unsupported)),
            _ => None,
        }
    }

    async fn dial(&self, addr: &str) -> Result<Arc<Line>, HandOffError> {
        let not_sent = |e: &dyn std::fmt::Display| HandOffError::NotSent(e.to_string());
        let mut stream = tokio::time::timeout(WELCOME_WITHIN, self.dialer.dial(addr, Channel::Propose))
            .await
            .map_err(|_| not_sent(&"no connection within a second"))?
            .map_err(|e| not_sent(&e))?;
        match tokio::time::timeout(WELCOME_WITHIN, read_frame::<_, Welcome>(&mut stream)).await {
            Ok(Ok(Some(Welcome { version, .. }))) if version >= VERSION => {}
            // An earlier version, which cannot read handed commands with
            // their principal: relayed to instead.
            Ok(Ok(Some(_))) => return Err(HandOffError::Unsupported),
            // Closed unanswered: the hello was refused (an earlier version
            // does not know the channel).
            Ok(Ok(None)) => return Err(HandOffError::Unsupported),
            Ok(Err(FrameError::Io(e))) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Err(HandOffError::Unsupported)
            }
            Ok(Err(e)) => return Err(not_sent(&e)),
            Err(_) => return Err(not_sent(&"no welcome within a second")),
        };
        let (reader, writer) = tokio::io::split(stream);
        let (out, frames) = mpsc::unbounded_channel();
        let line = Arc::new(Line {
            out,
            waiting: Mutex::new(Some(HashMap::new())),
            next_id: AtomicU64::new(0),
            tasks: Mutex::default(),
        });
        let read = tokio::spawn(read_answers(reader, line.clone()));
        let write = tokio::spawn(write_frames(writer, frames, line.clone(), read.abort_handle()));
        *line.tasks.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) =
            vec![read.abort_handle(), write.abort_handle()];
        Ok(line)
    }
}

fn unexpected(answered: Answered) -> HandOffError {
    HandOffError::Lost(format!("answer of another kind: {answered:?}"))
}

/// Hands each answer to its ask, until the channel ends; then every ask
/// still waiting learns its answer is lost.
async fn read_answers<R: AsyncRead + Unpin>(reader: R, line: Arc<Line>) {
    let mut reader = tokio::io::BufReader::new(reader);
    loop {
        match read_frame::<_, Answer>(&mut reader).await {
            Ok(Some(Answer { id, answered })) => {
                let waiting = line.lock().as_mut().and_then(|waiting| waiting.remove(&id));
                if let Some(waiting) = waiting {
                    let _ = waiting.reply.send(Ok(answered));
                }
            }
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(error = %e, "hand-off channel ended");
                break;
            }
        }
    }
    line.close();
}

/// Writes the asks as they come, those that come together in one write,
/// each marked as sent first; until the channel ends.
async fn write_frames<W: AsyncWrite + Unpin>(
    writer: W,
    mut frames: mpsc::UnboundedReceiver<(u64, Vec<u8>)>,
    line: Arc<Line>,
    reader: tokio::task::AbortHandle,
) {
    let mut out = tokio::io::BufWriter::new(writer);
    let mut batch = Vec::new();
    let mut ids = Vec::new();
    while let Some(first) = frames.recv().await {
        batch.push(first);
        while let Ok(next) = frames.try_recv() {
            batch.push(next);
        }
        ids.clear();
        ids.extend(batch.iter().map(|(id, _)| *id));
        if !line.sending(&ids) {
            break;
        }
        let mut written = Ok(());
        for (_, frame) in batch.drain(..) {
            written = out.write_all(&frame).await;
            if written.is_err() {
                break;
            }
        }
        if let Err(e) = written.and(out.flush().await) {
            tracing::debug!(error = %e, "hand-off channel write failed");
            break;
        }
    }
    frames.close();
    reader.abort();
    line.close();
}

/// Writes every frame from `frames`, flushing when none is ready, until
/// `frames` ends or a write fails.
pub(crate) async fn write_all_frames<W: AsyncWrite + Unpin>(
    writer: W,
    frames: &mut mpsc::UnboundedReceiver<Vec<u8>>,
) -> std::io::Result<()> {
    let mut out = tokio::io::BufWriter::new(writer);
    while let Some(frame) = frames.recv().await {
        out.write_all(&frame).await?;
        while let Ok(frame) = frames.try_recv() {
            out.write_all(&frame).await?;
        }
        out.flush().await?;
    }
    Ok(())
}

/// The followers with a hand-off channel open to this node, and whether
/// their last ask said requests there wait for the follower's own apply of
/// entries (waiting acquires, woken by the entry that hands them the lock):
/// to those the commit index is sent at once, not held back for the next
/// entry as for the others ([`super::COMMIT_ONLY_LINGER`]). The others
/// answer with the leader's result and need it no sooner.
#[derive(Default)]
pub struct HandingFollowers {
    open: Mutex<HashMap<NodeId, Handing>>,
}

#[derive(Default)]
struct Handing {
    channels: usize,
    waiting: bool,
}

impl HandingFollowers {
    /// Counts a channel of `follower` until the guard is dropped.
    pub fn hold(self: &Arc<Self>, follower: NodeId) -> HandingGuard {
        self.lock().entry(follower).or_default().channels += 1;
        HandingGuard { followers: self.clone(), follower }
    }

    /// What `follower`'s last ask said: requests there wait for its apply.
    pub fn set_waiting(&self, follower: NodeId, waiting: bool) {
        if let Some(handing) = self.lock().get_mut(&follower) {
            handing.waiting = waiting;
        }
    }

    /// Whether `follower` has a hand-off channel open to this node and
    /// requests there wait for its apply of entries.
    pub fn waiting(&self, follower: NodeId) -> bool {
        self.lock().get(&follower).is_some_and(|h| h.waiting)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Handing>> {
        self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One hand-off channel counted in [`HandingFollowers`].
pub struct HandingGuard {
    followers: Arc<HandingFollowers>,
    follower: NodeId,
}

impl Drop for HandingGuard {
    fn drop(&mut self) {
        let mut open = self.followers.lock();
        if let Some(h) = open.get_mut(&self.follower) {
            h.channels -= 1;
            if h.channels == 0 {
                open.remove(&self.follower);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::{FencingToken, Grant, LockError, Outcome, Quotas};

    fn acquire() -> Command {
        Command::Acquire {
            name: "a".into(),
            owner: "o".into(),
            ttl_ms: Some(5000),
            session: None,
            wait_ms: Some(100),
            request_id: Some("r".into()),
            lock_delay_ms: None,
            seq: None,
        }
    }

    async fn round_trip<T: Serialize + serde::de::DeserializeOwned>(value: &T) -> T {
        let frame = encode_named_frame(value).unwrap();
        read_frame::<_, T>(&mut frame.as_slice()).await.unwrap().unwrap()
    }

    // Ensures asks and answers survive their frames: the command in its
    // binary form, a result of each kind (the core's tagged enums), ids.
    #[tokio::test]
    async fn asks_and_answers_round_trip() {
        let handed = Batch::handed(acquire(), Principal::User("alice".into()));
        let ask = round_trip(&Ask { id: 7, asked: Asked::Propose(handed.clone()), waiting: true }).await;
        assert!(ask.waiting);
        assert_eq!(ask.id, 7);
        let Asked::Propose(batch) = ask.asked else { panic!("{ask:?}") };
        assert_eq!(batch, handed, "the command comes with its principal");

        let grant = Grant {
            name: "a".into(),
            owner: "o".into(),
            token: FencingToken::granted_at(9),
            ttl_ms: 5000,
            expires_in_ms: 5000,
            deadline_tick: 52,
        };
        let results: Vec<LockResult> = vec![
            Ok(Outcome::Granted { grant, reacquired: false }),
            Err(LockError::HeldByOther {
                name: "a".into(),
                holder: "p".into(),
                token: FencingToken::granted_at(3),
                expires_in_ms: 10,
            }),
            Err(LockError::WaitTimeout { name: "a".into() }),
        ];
        for result in results {
            let answer =
                round_trip(&Answer { id: 3, answered: Answered::Applied { index: 9, result: result.clone() } }).await;
            match answer.answered {
                Answered::Applied { index: 9, result: got } => assert_eq!(got, result),
                other => panic!("{other:?}"),
            }
        }
        let answer = round_trip(&Answer { id: 4, answered: Answered::Unavailable("x".into()) }).await;
        assert!(matches!(answer.answered, Answered::Unavailable(why) if why == "x"));
    }

    // Ensures the leader takes exactly one client command per hand-off,
    // with the principal that asked for it: never a Tick, an admin command,
    // a batch of several, quotas, or a command without its principal (from
    // a follower of an earlier version), which is refused saying so.
    #[test]
    fn only_a_clients_single_command_is_taken() {
        let client = || Some(Principal::Client);
        let handed = Batch::handed(acquire(), Principal::Client);
        assert_eq!(handed_command(&handed), Ok((&acquire(), &Principal::Client)));
        let unsigned = handed_command(&Batch::single(acquire())).unwrap_err();
        assert!(unsigned.contains("earlier version"), "{unsigned}");
        assert!(handed_command(&Batch::handed(Command::Tick { period_ms: 100 }, Principal::Admin)).is_err());
        let limit = Command::SetSemaphoreLimit { name: "s".into(), limit: 3 };
        assert!(handed_command(&Batch::handed(limit, Principal::Admin)).is_err());
        let mut two = Batch::handed(acquire(), Principal::Client);
        two.try_push(Command::Cancel { name: "b".into(), owner: "o".into() }, client()).unwrap();
        assert!(handed_command(&two).is_err());
        let quotas = Quotas { max_leases: 1, max_waiters: 1 };
        assert!(handed_command(&Batch::within(quotas, acquire(), client())).is_err());
    }

    // Ensures a leader whose welcome names no version (version 1, which
    // could read neither principals nor waiting acquires) is relayed to.
    #[tokio::test]
    async fn a_leader_that_takes_no_principals_is_relayed_to() {
        let (addr, leader) = fake_leader(|mut conn| async move {
            // The welcome of version 1: no `version` field.
            #[derive(Serialize)]
            struct EarlierWelcome {
                from: NodeId,
            }
            conn.write_all(&encode_named_frame(&EarlierWelcome { from: 1 }).unwrap()).await.unwrap();
        })
        .await;
        assert!(matches!(hand_off().ready(&addr).await, Ok(Ready::Relay)));
        leader.await.unwrap();
    }

    /// A fake leader on loopback: takes one connection, reads its preface
    /// and hello, then runs `then` on it.
    async fn fake_leader<F, Fut>(then: F) -> (String, tokio::task::JoinHandle<()>)
    where
        F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut preface = [0u8; 8];
            tokio::io::AsyncReadExt::read_exact(&mut conn, &mut preface).await.unwrap();
            let hello: Option<super::super::Hello> = read_frame(&mut conn).await.unwrap();
            assert_eq!(hello.map(|h| h.channel), Some(Channel::Propose));
            then(conn).await;
        });
        (addr, task)
    }

    fn hand_off() -> HandOff {
        HandOff::new(Dialer { from: 2, tls: None, cluster_secret: None })
    }

    // Ensures a leader that closes the channel after the hello, unanswered
    // (a node of an earlier version), is relayed to instead.
    #[tokio::test]
    async fn a_leader_that_closes_the_channel_unanswered_is_relayed_to() {
        let (addr, leader) = fake_leader(|conn| async move { drop(conn) }).await;
        let handoff = hand_off();
        assert!(matches!(handoff.ready(&addr).await, Ok(Ready::Relay)));
        leader.await.unwrap();
        // Remembered: no second dial (the fake leader takes only one).
        assert!(matches!(handoff.ready(&addr).await, Ok(Ready::Relay)));
    }

    // Ensures many asks share one channel and each gets its own answer,
    // whatever order the leader answers in.
    #[tokio::test]
    async fn answers_find_their_asks_in_any_order() {
        let (addr, leader) = fake_leader(|mut conn| async move {
            let welcome = encode_named_frame(&Welcome::from(1)).unwrap();
            conn.write_all(&welcome).await.unwrap();
            let first: Ask = read_frame(&mut conn).await.unwrap().unwrap();
            let second: Ask = read_frame(&mut conn).await.unwrap().unwrap();
            for (ask, index) in [(second, 20), (first, 10)] {
                let answered = match ask.asked {
                    Asked::ReadIndex => Answered::ReadIndex { index },
                    Asked::Propose(_) | Asked::Acquire(_) => Answered::Refused("not here".into()),
                };
                conn.write_all(&encode_named_frame(&Answer { id: ask.id, answered }).unwrap()).await.unwrap();
            }
            // Then the leader goes away: nothing is waiting any more.
        })
        .await;
        let handoff = hand_off();
        assert!(matches!(handoff.ready(&addr).await, Ok(Ready::HandOff)));
        assert!(handoff.hands_off_to(&addr), "welcomed at this version");
        let (a, b) = tokio::join!(handoff.read_index(&addr), async {
            tokio::task::yield_now().await;
            handoff.read_index(&addr).await
        });
        let mut indexes = [a.unwrap(), b.unwrap()];
        indexes.sort();
        assert_eq!(indexes, [10, 20]);
        leader.await.unwrap();
    }

    // Ensures ending the channels to a former leader that keeps its
    // connection open but never answers (paused, or cut off without RST)
    // tells the ask waiting there that its answer is lost, at once, and
    // that the channel to the leader named is kept.
    #[tokio::test]
    async fn ending_a_former_leaders_channel_loses_its_asks_at_once() {
        let (read, asked) = tokio::sync::oneshot::channel();
        let (addr, leader) = fake_leader(|mut conn| async move {
            let welcome = encode_named_frame(&Welcome::from(1)).unwrap();
            conn.write_all(&welcome).await.unwrap();
            let ask: Ask = read_frame(&mut conn).await.unwrap().unwrap();
            let _ = read.send(ask.id);
            // Never answers; holds the connection open until the other end goes.
            let _ = read_frame::<_, Ask>(&mut conn).await;
        })
        .await;
        let handoff = hand_off();
        let batch = Batch::handed(acquire(), Principal::Client);
        let waiting = handoff.propose(&addr, &batch, false);
        tokio::pin!(waiting);
        tokio::select! {
            answered = &mut waiting => panic!("answered by a leader that never answers: {answered:?}"),
            id = asked => { id.unwrap(); }
        }
        handoff.end_all_but(Some("127.0.0.1:1"));
        assert!(!handoff.hands_off_to(&addr), "ended");
        let answered = waiting.await;
        assert!(matches!(answered, Err(HandOffError::Lost(_))), "{answered:?}");
        leader.await.unwrap();

        let (kept, leader) = fake_leader(|mut conn| async move {
            let welcome = encode_named_frame(&Welcome::from(1)).unwrap();
            conn.write_all(&welcome).await.unwrap();
            let _ = read_frame::<_, Ask>(&mut conn).await;
        })
        .await;
        assert!(matches!(handoff.ready(&kept).await, Ok(Ready::HandOff)));
        handoff.end_all_but(Some(&kept));
        assert!(handoff.hands_off_to(&kept), "the leader's channel is kept");
        handoff.end_all_but(None);
        leader.await.unwrap();
    }

    // Ensures an ask on a channel the leader closed before it was written
    // is reported as never sent (it may go to the next leader), not lost.
    #[tokio::test]
    async fn an_ask_after_the_leader_closed_the_channel_was_not_sent() {
        let (addr, leader) = fake_leader(|mut conn| async move {
            let welcome = encode_named_frame(&Welcome::from(1)).unwrap();
            conn.write_all(&welcome).await.unwrap();
        })
        .await;
        let handoff = hand_off();
        assert!(matches!(handoff.ready(&addr).await, Ok(Ready::HandOff)));
        leader.await.unwrap();
        // The reader sees the close; then the channel is dialed again and
        // nobody listens: never sent either way.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let asked = handoff.propose(&addr, &Batch::handed(acquire(), Principal::Client), false).await;
        assert!(matches!(asked, Err(HandOffError::NotSent(_))), "{asked:?}");
    }

    // Ensures a follower counts as waiting while one of its channels is
    // open and its last ask said so.
    #[test]
    fn handing_followers_are_counted_per_channel() {
        let followers = Arc::new(HandingFollowers::default());
        let first = followers.hold(2);
        let second = followers.hold(2);
        assert!(!followers.waiting(2), "nothing waits there yet");
        followers.set_waiting(2, true);
        followers.set_waiting(3, true);
        assert!(followers.waiting(2) && !followers.waiting(3), "3 has no channel");
        drop(first);
        assert!(followers.waiting(2));
        drop(second);
        assert!(!followers.waiting(2));
    }
}
