//! The node's history of recent events, which event streams read from and
//! resume in.
//!
//! Every node applies the same entries in the same order, and the lock table
//! is deterministic, so the events of one entry are the same list on every
//! node. An event's place in that list, `(entry index, ordinal)`, is
//! therefore the same everywhere: a stream that broke on one node resumes
//! on any other right after the last event it got, with no gap and no
//! duplicate (see [`Cursor`]).
//!
//! The history is bounded (`--event-history`, in events). It forgets whole
//! entries, oldest first, so it always holds every event of the entries
//! after its floor; a stream asked to resume at or before the floor is
//! refused ([`Compacted`]) rather than served with a gap. A stream that
//! falls that far behind while it runs ends the same way.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;
use tokio::sync::watch;
use tokio_stream::Stream;

use leasehold_core::LockEvent;

/// Events kept by default: at a few hundred bytes each (its frame
/// included, once a stream rendered it), a few megabytes.
pub const DEFAULT_EVENT_HISTORY: usize = 10_000;

/// An applied event as the node's event streams receive it: one copy,
/// shared by every stream, with its wire form made once, by the first
/// stream that sends it, for all of them. (Encoded per subscriber, each
/// applied event cost every stream a copy, a conversion and a JSON
/// encoding: the cost of an entry grew with the streams open.)
#[derive(Debug)]
pub struct PublishedEvent {
    pub event: LockEvent,
    /// Its place among the events of its entry (0 = first).
    pub ordinal: u32,
    /// Whether it is the last event of its entry.
    pub last_of_entry: bool,
    frame: OnceLock<Option<Bytes>>,
}

impl PublishedEvent {
    /// The event's wire form: what `render` makes of it at the first call,
    /// the same bytes at every later one.
    pub fn frame(&self, render: impl FnOnce(&PublishedEvent) -> Option<Bytes>) -> Option<Bytes> {
        self.frame.get_or_init(|| render(self)).clone()
    }

    /// The cursor just after this event: the entry's index alone for its
    /// last event (the whole entry was seen), `index.ordinal` otherwise.
    pub fn cursor(&self) -> Cursor {
        Cursor { index: self.event.index, ordinal: (!self.last_of_entry).then_some(self.ordinal) }
    }
}

/// Where a stream stands: every event of the entries up to `index` seen,
/// or, with `ordinal`, of entry `index` only those up to that ordinal. Its
/// text (an SSE event id, `Last-Event-ID`, `?after=`) is `index` or
/// `index.ordinal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub index: u64,
    pub ordinal: Option<u32>,
}

impl Cursor {
    /// Every event of the entries up to `index`.
    pub fn after_entry(index: u64) -> Cursor {
        Cursor { index, ordinal: None }
    }

    /// Whether `e` comes after this cursor.
    fn precedes(&self, e: &PublishedEvent) -> bool {
        e.event.index > self.index || (e.event.index == self.index && self.ordinal.is_some_and(|o| e.ordinal > o))
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ordinal {
            None => write!(f, "{}", self.index),
            Some(ordinal) => write!(f, "{}.{ordinal}", self.index),
        }
    }
}

impl FromStr for Cursor {
    type Err = String;

    fn from_str(s: &str) -> Result<Cursor, String> {
        let bad = || format!("{s:?} is not an event id (INDEX or INDEX.ORDINAL)");
        let (index, ordinal) = match s.split_once('.') {
            None => (s, None),
            Some((index, ordinal)) => (index, Some(ordinal.parse().map_err(|_| bad())?)),
        };
        Ok(Cursor { index: index.parse().map_err(|_| bad())?, ordinal })
    }
}

/// A stream asked to resume where the history no longer reaches: events of
/// the entries before `compacted_before` may be gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    pub compacted_before: u64,
}

/// The recent events of one node, and a signal for streams waiting for more.
pub struct EventHistory {
    kept: Mutex<Kept>,
    appended: watch::Sender<u64>,
}

struct Kept {
    events: VecDeque<Arc<PublishedEvent>>,
    capacity: usize,
    /// Events of entries up to this index may be gone; every event of the
    /// entries after it is kept (or still to come).
    floor: u64,
    /// The last entry whose events were appended (or the floor).
    last: u64,
}

impl EventHistory {
    /// A history of at most `capacity` events (at least one entry's are
    /// always kept, however many it has).
    pub fn new(capacity: usize) -> EventHistory {
        let kept = Kept { events: VecDeque::new(), capacity, floor: 0, last: 0 };
        EventHistory { kept: Mutex::new(kept), appended: watch::channel(0).0 }
    }

    fn lock(&self) -> MutexGuard<'_, Kept> {
        // Every update leaves the history whole between statements that
        // cannot panic, so a poisoned lock still holds a valid history.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets how many events are kept (the server's `--event-history`).
    pub fn set_capacity(&self, capacity: usize) {
        let mut kept = self.lock();
        kept.capacity = capacity;
        kept.trim();
    }

    /// Forgets everything: the state jumped to `index` (loaded, or a
    /// snapshot installed) without this node applying what came before.
    pub fn reset(&self, index: u64) {
        let mut kept = self.lock();
        kept.events.clear();
        kept.floor = index;
        kept.last = index;
    }

    /// Appends the events of the entry at `index`, in order.
    pub fn append(&self, index: u64, events: Vec<LockEvent>) {
        let count = events.len();
        {
            let mut kept = self.lock();
            kept.last = index;
            for (ordinal, event) in events.into_iter().enumerate() {
                let ordinal = u32::try_from(ordinal).unwrap_or(u32::MAX);
                let last_of_entry = ordinal as usize + 1 == count;
                kept.events.push_back(Arc::new(PublishedEvent {
                    event,
                    ordinal,
                    last_of_entry,
                    frame: OnceLock::new(),
                }));
            }
            kept.trim();
        }
        if count > 0 {
            self.appended.send_modify(|n| *n += 1);
        }
    }

    /// The cursor of "from now on": every entry appended so far seen.
    pub fn now(&self) -> Cursor {
        Cursor::after_entry(self.lock().last)
    }

    /// Whether a stream may resume after `cursor`.
    pub fn check(&self, cursor: Cursor) -> Result<(), Compacted> {
        self.lock().check(cursor)
    }

    /// At most `max` events after `cursor`, in order.
    fn after(&self, cursor: Cursor, max: usize) -> Result<Vec<Arc<PublishedEvent>>, Compacted> {
        let kept = self.lock();
        kept.check(cursor)?;
        let start = kept.events.partition_point(|e| !cursor.precedes(e));
        Ok(kept.events.range(start..).take(max).cloned().collect())
    }

    /// Every event after `cursor` as it is applied, without end; a
    /// [`Compacted`] (the last item) if the history moved past the
    /// stream's place before it was read.
    pub fn follow(self: Arc<Self>, cursor: Cursor) -> impl Stream<Item = Result<Arc<PublishedEvent>, Compacted>> {
        let appended = self.appended.subscribe();
        let state = Following { history: self, cursor, appended, pending: VecDeque::new(), ended: false };
        futures_util::stream::unfold(state, |mut s| async move {
            loop {
                if let Some(event) = s.pending.pop_front() {
                    s.cursor = event.cursor();
                    return Some((Ok(event), s));
                }
                if s.ended {
                    return None;
                }
                // Marked seen before reading: an append after the read
                // wakes the wait below.
                s.appended.borrow_and_update();
                match s.history.after(s.cursor, FOLLOW_BATCH) {
                    Err(compacted) => {
                        s.ended = true;
                        return Some((Err(compacted), s));
                    }
                    Ok(batch) if batch.is_empty() => s.appended.changed().await.ok()?,
                    Ok(batch) => s.pending.extend(batch),
                }
            }
        })
    }
}

/// Events a stream takes from the history at once.
const FOLLOW_BATCH: usize = 256;

struct Following {
    history: Arc<EventHistory>,
    cursor: Cursor,
    appended: watch::Receiver<u64>,
    pending: VecDeque<Arc<PublishedEvent>>,
    ended: bool,
}

impl Kept {
    /// Forgets the oldest entries, whole, until at most `capacity` events
    /// are kept or one entry is left.
    fn trim(&mut self) {
        while self.events.len() > self.capacity {
            let Some(oldest) = self.events.front().map(|e| e.event.index) else { break };
            if self.events.back().is_some_and(|e| e.event.index == oldest) {
                break;
            }
            while self.events.front().is_some_and(|e| e.event.index == oldest) {
                self.events.pop_front();
            }
            self.floor = oldest;
        }
    }

    fn check(&self, cursor: Cursor) -> Result<(), Compacted> {
        if cursor.index > self.floor || (cursor.index == self.floor && cursor.ordinal.is_none()) {
            Ok(())
        } else {
            Err(Compacted { compacted_before: self.floor + 1 })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::EventKind;
    use tokio_stream::StreamExt;

    fn events(index: u64, count: usize) -> Vec<LockEvent> {
        (0..count)
            .map(|i| LockEvent {
                index,
                name: format!("l{i}"),
                kind: EventKind::Cancelled { owner: "o".into() },
                by: leasehold_core::Actor::Unknown,
            })
            .collect()
    }

    fn places(batch: &[Arc<PublishedEvent>]) -> Vec<String> {
        batch.iter().map(|e| format!("{}:{}", e.event.index, e.ordinal)).collect()
    }

    // Ensures a cursor resumes right after its event, inside an entry or
    // after a whole one, and reads back from its text.
    #[test]
    fn cursors_resume_right_after_their_event() {
        let history = EventHistory::new(100);
        history.reset(4);
        history.append(5, events(5, 3));
        history.append(7, events(7, 1));
        let all = history.after(Cursor::after_entry(4), 100).unwrap();
        assert_eq!(places(&all), ["5:0", "5:1", "5:2", "7:0"]);
        assert_eq!(all.iter().map(|e| e.cursor().to_string()).collect::<Vec<_>>(), ["5.0", "5.1", "5", "7"]);
        for (i, e) in all.iter().enumerate() {
            let cursor: Cursor = e.cursor().to_string().parse().unwrap();
            assert_eq!(places(&history.after(cursor, 100).unwrap()), places(&all[i + 1..]));
        }
        assert!("5.x".parse::<Cursor>().is_err() && "".parse::<Cursor>().is_err());
    }

    // Ensures the history forgets whole entries, oldest first, and refuses
    // a cursor it no longer reaches, naming where it starts.
    #[test]
    fn compaction_forgets_whole_entries_and_refuses_older_cursors() {
        let history = EventHistory::new(4);
        history.reset(0);
        history.append(1, events(1, 2));
        history.append(2, events(2, 2));
        assert!(history.check(Cursor::after_entry(0)).is_ok());
        history.append(3, events(3, 1));
        assert_eq!(history.check(Cursor::after_entry(0)), Err(Compacted { compacted_before: 2 }));
        assert_eq!(history.check(Cursor { index: 1, ordinal: Some(0) }), Err(Compacted { compacted_before: 2 }));
        assert_eq!(places(&history.after(Cursor::after_entry(1), 10).unwrap()), ["2:0", "2:1", "3:0"]);
        history.append(4, events(4, 9));
        assert_eq!(places(&history.after(Cursor::after_entry(3), 10).unwrap()).len(), 9, "one entry is always kept");
        history.reset(20);
        assert_eq!(history.check(Cursor::after_entry(19)), Err(Compacted { compacted_before: 21 }));
        assert_eq!(history.now(), Cursor::after_entry(20));
    }

    // Ensures a follower gets what is appended after it started, in order,
    // and ends with `Compacted` when it falls behind the history.
    #[tokio::test]
    async fn following_streams_new_events_then_ends_when_compacted() {
        let history = Arc::new(EventHistory::new(3));
        history.reset(0);
        history.append(1, events(1, 1));
        let mut stream = Box::pin(history.clone().follow(Cursor::after_entry(0)));
        assert_eq!(stream.next().await.unwrap().unwrap().event.index, 1);
        history.append(2, events(2, 1));
        assert_eq!(stream.next().await.unwrap().unwrap().event.index, 2);
        let mut behind = Box::pin(history.clone().follow(Cursor::after_entry(2)));
        for index in 3..=6 {
            history.append(index, events(index, 1));
        }
        assert_eq!(behind.next().await.unwrap().err(), Some(Compacted { compacted_before: 4 }));
        assert!(behind.next().await.is_none());
    }
}
