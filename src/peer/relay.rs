//! Forwarding channels: a follower relays client requests to the leader on
//! one HTTP/2 connection per leader, opened as a peer connection
//! ([`Channel::Forward`]). The leader serves it outside its client
//! connection budget, and a herd of waiting acquires relayed through a
//! follower is a herd of streams on that one connection, not a connection
//! each. Which requests are relayed, and how, is the API's
//! (`crate::api::forward`).

use std::collections::HashMap;
use std::sync::Mutex;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::{Channel, Dialer};

/// HTTP/2 pings on a forwarding channel, so a leader that vanished is
/// noticed even while every relayed request is waiting.
const CHANNEL_KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(5);

/// A relayed answer: its status, headers and whole body.
pub type Relayed = (StatusCode, HeaderMap, axum::body::Bytes);

/// Why a request could not be relayed (the client is told to retry).
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// No channel to the leader could be opened: the request never left.
    #[error("leader unreachable: {0}")]
    NotSent(String),
    /// The channel broke with the request on it: the leader may have
    /// taken it.
    #[error("leader reply lost: {0}")]
    Lost(String),
}

impl RelayError {
    fn not_sent(e: impl std::fmt::Display) -> RelayError {
        RelayError::NotSent(e.to_string())
    }

    fn lost(e: impl std::fmt::Display) -> RelayError {
        RelayError::Lost(e.to_string())
    }
}

/// This node's HTTP/2 forwarding channels, one per leader address.
pub struct Relay {
    dialer: Dialer,
    channels: Mutex<HashMap<String, http2::SendRequest<Body>>>,
}

impl Relay {
    /// Sends `request` to the leader at `addr` on its channel, opening one
    /// if there is none or the last one closed. A request is never sent
    /// twice: only a channel that proved dead before taking it is replaced.
    pub async fn send(&self, addr: &str, request: hyper::Request<Body>) -> Result<Relayed, RelayError> {
        let mut sender = match self.open_channel(addr) {
            Some(sender) => sender,
            None => self.dial(addr).await?,
        };
        if sender.ready().await.is_err() {
            sender = self.dial(addr).await?;
            sender.ready().await.map_err(RelayError::not_sent)?;
        }
        // hyper hands an unsent request back when the connection closed
        // before any of it was written: then it never reached the leader.
        let reply = sender.try_send_request(request).await.map_err(|mut e| match e.take_message() {
            Some(_) => RelayError::not_sent(e.error()),
            None => RelayError::lost(e.error()),
        })?;
        let (parts, body) = reply.into_parts();
        let bytes = axum::body::to_bytes(Body::new(body), usize::MAX).await.map_err(RelayError::lost)?;
        Ok((parts.status, parts.headers, bytes))
    }

    fn open_channel(&self, addr: &str) -> Option<http2::SendRequest<Body>> {
        let channels = self.channels.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        channels.get(addr).filter(|sender| !sender.is_closed()).cloned()
    }

    async fn dial(&self, addr: &str) -> Result<http2::SendRequest<Body>, RelayError> {
        let stream = self.dialer.dial(addr, Channel::Forward).await.map_err(RelayError::not_sent)?;
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(CHANNEL_KEEPALIVE)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(RelayError::not_sent)?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "forwarding channel closed");
            }
        });
        let mut channels = self.channels.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        channels.insert(addr.to_owned(), sender.clone());
        Ok(sender)
    }
}

impl Relay {
    pub fn new(dialer: Dialer) -> Relay {
        Relay { dialer, channels: Mutex::default() }
    }
}
