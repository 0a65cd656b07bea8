//! What a request to a node comes back with: its [`Reply`], or the
//! [`SendError`] that says why there is none. Both protocols answer with
//! these, so the caller need not know which one carried the request.

use std::io;
use std::time::Duration;

use bytes::Bytes;

/// A node's answer: its status, the headers the client acts on, and the
/// whole body.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    /// `x-leasehold-leader-addr`: where the node says the leader is.
    pub leader_addr: Option<String>,
    /// `Retry-After`, in whole seconds (the form nodes send).
    pub retry_after: Option<Duration>,
    pub body: Bytes,
}

impl Reply {
    /// Takes the headers the client acts on from a parsed head.
    pub(super) fn with_headers<'h>(status: u16, headers: impl Iterator<Item = (&'h str, &'h [u8])>) -> Reply {
        let mut reply = Reply { status, leader_addr: None, retry_after: None, body: Bytes::new() };
        for (name, value) in headers {
            if name.eq_ignore_ascii_case(leasehold_proto::LEADER_ADDR_HEADER) {
                reply.leader_addr = std::str::from_utf8(value).ok().map(str::to_owned);
            } else if name.eq_ignore_ascii_case("retry-after") {
                reply.retry_after =
                    std::str::from_utf8(value).ok().and_then(|v| v.trim().parse().ok()).map(Duration::from_secs);
            }
        }
        reply
    }
}

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The node could not be reached (refused, unreachable, TLS handshake).
    #[error("connect to {endpoint}: {message}")]
    Connect { endpoint: String, message: String },
    /// The TLS handshake refused the node's certificate (it does not chain
    /// to the trusted CA, or names another host). Not worth a retry: the
    /// nodes share one CA, so every node would be refused alike, and an
    /// untrusted certificate may be an impostor's.
    #[error("connect to {endpoint}: {message}")]
    Untrusted { endpoint: String, message: String },
    /// The connection broke, or the answer was not HTTP the client reads.
    #[error("{0}")]
    Broken(String),
    /// The answer's body is, or says it is, longer than the `limit` the
    /// request allowed: a node that sends it would have the client allocate
    /// without end (the body was not read past the limit).
    #[error("the answer is longer than {limit} bytes")]
    TooLarge { limit: u64 },
}

impl SendError {
    /// The request never reached the node (an untrusted certificate too).
    pub fn is_connect(&self) -> bool {
        matches!(self, SendError::Connect { .. } | SendError::Untrusted { .. })
    }

    pub fn is_untrusted(&self) -> bool {
        matches!(self, SendError::Untrusted { .. })
    }

    pub fn is_too_large(&self) -> bool {
        matches!(self, SendError::TooLarge { .. })
    }
}

impl From<io::Error> for SendError {
    fn from(e: io::Error) -> Self {
        SendError::Broken(e.to_string())
    }
}
