//! [`Watch`]: an event stream (`/v1/events`, a lock's, an election's
//! `observe`) that survives the node serving it.
//!
//! Every node tells the same events under the same ids (the entry index, or
//! `INDEX.ORDINAL` for all but an entry's last event), so when the stream
//! breaks (the node died, restarted, or a proxy cut it), the watch reconnects
//! to the leader it knows, or the next node, and asks to resume right after
//! the last id it handed out: no event is missed and none comes twice. A
//! node that no longer keeps events that old answers `410 compacted`; the
//! watch then fails with that error (its `compacted_before` detail), and the
//! caller re-reads the state it follows and watches again after the index
//! of that read, as etcd clients do after `ErrCompacted`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use leasehold_proto::events::CompactedFrame;
use leasehold_proto::{ErrorCode, ErrorDetail, LockEvent};

use crate::backoff::Backoff;
use crate::client::body;
use crate::http::{target, StreamedBody};
use crate::{Client, ClientError};

/// One event of a [`Watch`], with its id: resume after it with
/// [`Watch::after`] (or `?after=` on any node).
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    pub id: String,
    pub event: LockEvent,
}

/// A resuming event stream; [`next`](Self::next) gives its events in log order.
pub struct Watch {
    client: Arc<Client>,
    path: Vec<String>,
    prefix: Option<String>,
    /// The id of the last event handed out (where a reconnection resumes),
    /// or where the watch was asked to start.
    after: Option<String>,
    body: Option<StreamedBody>,
    /// Bytes of the stream not yet parsed into whole frames.
    text: Vec<u8>,
    pending: VecDeque<WatchEvent>,
}

impl Client {
    /// Every lock's events (those whose names start with `prefix`, when
    /// given), after log index `after` (from now on when `None`).
    pub fn watch(self: &Arc<Self>, prefix: Option<&str>, after: Option<u64>) -> Watch {
        Watch::new(self, &["v1", "events"], prefix, after.map(|a| a.to_string()))
    }

    /// The events of lock `name`, after log index `after`.
    pub fn watch_lock(self: &Arc<Self>, name: &str, after: Option<u64>) -> Watch {
        Watch::new(self, &["v1", "locks", name, "events"], None, after.map(|a| a.to_string()))
    }

    /// The leadership changes of election `name` (`proclaimed`, `released`,
    /// `expired`); without `after`, starting with the current leader.
    pub fn observe(self: &Arc<Self>, name: &str, after: Option<u64>) -> Watch {
        Watch::new(self, &["v1", "elections", name, "observe"], None, after.map(|a| a.to_string()))
    }
}

impl Watch {
    fn new(client: &Arc<Client>, path: &[&str], prefix: Option<&str>, after: Option<String>) -> Watch {
        Watch {
            client: Arc::clone(client),
            path: path.iter().map(|s| s.to_string()).collect(),
            prefix: prefix.map(str::to_owned),
            after,
            body: None,
            text: Vec::new(),
            pending: VecDeque::new(),
        }
    }

    /// The id of the last event handed out (or where the watch started).
    pub fn after(&self) -> Option<&str> {
        self.after.as_deref()
    }

    /// The next event. Reconnects (to the leader the client knows, else the
    /// next node) whenever the stream breaks, resuming after the last event
    /// handed out, for up to the client's retry budget per reconnection.
    /// Errors: `410 compacted` (re-read, then watch again after the read's
    /// index), a 4xx the stream was refused with, or unavailability.
    pub async fn next(&mut self) -> Result<WatchEvent, ClientError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                self.after = Some(event.id.clone());
                return Ok(event);
            }
            let Some(body) = self.body.as_mut() else {
                self.body = Some(self.connect().await?);
                continue;
            };
            match body.next().await {
                Ok(Some(piece)) => {
                    self.text.extend_from_slice(&piece);
                    self.parse()?;
                }
                Ok(None) | Err(_) => {
                    // Whatever was cut off mid-frame comes again after the last whole one.
                    tracing::debug!(after = ?self.after, "event stream broke; resuming");
                    self.body = None;
                    self.text.clear();
                }
            }
        }
    }

    /// Opens the stream after `self.after`, trying the leader the client
    /// knows first, then the others, until the retry budget is spent.
    async fn connect(&self) -> Result<StreamedBody, ClientError> {
        let give_up = Instant::now() + self.client.retry_budget();
        let mut backoff = Backoff::default();
        let segments: Vec<&str> = self.path.iter().map(String::as_str).collect();
        let mut query = Vec::new();
        if let Some(prefix) = &self.prefix {
            query.push(("prefix", prefix.as_str()));
        }
        if let Some(after) = &self.after {
            query.push(("after", after.as_str()));
        }
        let target = target(&segments, &query);
        loop {
            let endpoint = self.client.preferred_endpoint();
            let failure = match self.client.http().open_stream(endpoint, &target).await {
                Ok((_, Some(body))) => return Ok(body),
                Ok((reply, None)) if reply.status == 503 => format!("{} answered 503", self.client.endpoint(endpoint)),
                Ok((reply, None)) => return Err(body(reply).err().unwrap_or(ClientError::Decode("no stream".into()))),
                Err(e) if e.is_untrusted() => return Err(ClientError::Unavailable(e.to_string())),
                Err(e) => e.to_string(),
            };
            self.client.move_on_from(endpoint);
            let pause = backoff.unavailable();
            if Instant::now() + pause > give_up {
                return Err(ClientError::Unavailable(failure));
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// Moves every whole frame of `text` into `pending`.
    fn parse(&mut self) -> Result<(), ClientError> {
        while let Some(end) = self.text.windows(2).position(|w| w == b"\n\n") {
            let frame: Vec<u8> = self.text.drain(..end + 2).collect();
            let frame = String::from_utf8_lossy(&frame);
            let (mut kind, mut id, mut data) = ("message", None, String::new());
            for line in frame.lines() {
                match line.split_once(':') {
                    Some(("event", v)) => kind = v.trim_start(),
                    Some(("id", v)) => id = Some(v.trim_start().to_owned()),
                    Some(("data", v)) => data.push_str(v.trim_start()),
                    // Comments (keep-alives) and unknown fields.
                    _ => {}
                }
            }
            match (kind, id) {
                ("compacted", _) => return Err(compacted(&data)),
                (_, Some(id)) if !data.is_empty() => {
                    let event = serde_json::from_str(&data).map_err(|e| ClientError::Decode(e.to_string()))?;
                    self.pending.push_back(WatchEvent { id, event });
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The stream's last frame when it fell behind the node's history, as the
/// `410 compacted` error a resume from there gets.
fn compacted(data: &str) -> ClientError {
    let before = serde_json::from_str::<CompactedFrame>(data).map(|f| f.compacted_before).unwrap_or_default();
    let mut error = ErrorDetail::new(ErrorCode::Compacted, "the stream fell behind the node's event history");
    error.details.insert("compacted_before".into(), before.into());
    ClientError::Api { status: 410, error }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> Watch {
        Arc::new(Client::new(&["127.0.0.1:9"]).unwrap()).watch(None, None)
    }

    // Ensures frames split anywhere are parsed whole, keep-alives and
    // frames without an id are skipped, and ids are kept as sent.
    #[test]
    fn frames_split_anywhere_are_parsed_whole() {
        let mut w = watch();
        let stream = "event: acquired\nid: 7.0\ndata: {\"index\":7,\"name\":\"a\",\"type\":\"acquired\",\"owner\":\"o\",\"token\":7}\n\n:\n\nevent: released\nid: 7\ndata: {\"index\":7,\"name\":\"b\",\"type\":\"released\",\"owner\":\"o\",\"token\":3}\n\n";
        for piece in stream.as_bytes().chunks(5) {
            w.text.extend_from_slice(piece);
            w.parse().unwrap();
        }
        let ids: Vec<(String, String)> = w.pending.iter().map(|e| (e.id.clone(), e.event.name.clone())).collect();
        assert_eq!(ids, [("7.0".to_owned(), "a".to_owned()), ("7".to_owned(), "b".to_owned())]);
        assert!(w.text.is_empty());
    }

    // Ensures the `compacted` frame that ends a stream that fell behind is
    // the 410 error a resume from there gets, with `compacted_before`.
    #[test]
    fn a_compacted_frame_is_the_410_error() {
        let mut w = watch();
        w.text.extend_from_slice(b"event: compacted\ndata: {\"compacted_before\":42}\n\n");
        let e = w.parse().unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::Compacted));
        assert_eq!(e.detail().and_then(|d| d.number("compacted_before")), Some(42));
    }
}
