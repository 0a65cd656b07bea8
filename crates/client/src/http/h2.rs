//! HTTP/2 through hyper (h2c with prior knowledge, or `h2` by ALPN): it
//! carries the waits, so a herd of waiters in one process costs the node
//! one connection, not one each.

use std::time::Duration;

use bytes::Bytes;
use http::Method;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio_rustls::TlsConnector;

use super::endpoint::Endpoint;
use super::reply::{Reply, SendError};
use super::tls::Stream;
use super::MAX_ANSWER_BYTES;

/// HTTP/2 pings (every 30 s, as a herd of thousands must not cost the node
/// thousands of pings a second) find a connection whose node vanished while
/// every request on it waits; a waiting request's own timeout bounds it anyway.
const HTTP2_KEEPALIVE: Duration = Duration::from_secs(30);

/// A node's HTTP/2 connection for waits, once opened.
#[derive(Default)]
pub(super) struct Multiplexed {
    sender: tokio::sync::Mutex<Option<http2::SendRequest<Full<Bytes>>>>,
}

impl Multiplexed {
    /// `method target` with `body` (JSON) to `endpoint` over the
    /// connection, opened if there is none; an answer body longer than
    /// [`MAX_ANSWER_BYTES`] is refused. `authorization` is the HTTP/1.1
    /// header line (`authorization: Bearer …\r\n`).
    pub(super) async fn send(
        &self,
        endpoint: &Endpoint,
        tls: Option<&TlsConnector>,
        authorization: Option<&str>,
        method: &Method,
        target: &str,
        body: Option<&[u8]>,
    ) -> Result<Reply, SendError> {
        let mut sender = self.sender(endpoint, tls).await?;
        let uri = format!("{endpoint}{target}");
        let mut request = http::Request::builder().method(method.clone()).uri(uri);
        if body.is_some() {
            request = request.header(http::header::CONTENT_TYPE, "application/json");
        }
        if let Some(line) = authorization {
            let value = line.trim_start_matches("authorization: ").trim_end();
            request = request.header(http::header::AUTHORIZATION, value);
        }
        let body = Full::new(body.map(Bytes::copy_from_slice).unwrap_or_default());
        let request = request.body(body).map_err(|e| SendError::Broken(e.to_string()))?;
        sender.ready().await.map_err(|e| SendError::Broken(e.to_string()))?;
        let answer = sender.send_request(request).await.map_err(|e| SendError::Broken(e.to_string()))?;
        let (parts, body) = answer.into_parts();
        let headers = parts.headers.iter().map(|(name, value)| (name.as_str(), value.as_bytes()));
        let mut reply = Reply::with_headers(parts.status.as_u16(), headers);
        // Waits and the quick requests after them: only API answers come
        // this way, whose bound fits any usize a client runs on.
        let limit = usize::try_from(MAX_ANSWER_BYTES).unwrap_or(usize::MAX);
        let collected = Limited::new(body, limit).collect().await.map_err(|e| {
            if e.is::<LengthLimitError>() {
                SendError::TooLarge { limit: MAX_ANSWER_BYTES }
            } else {
                SendError::Broken(e.to_string())
            }
        })?;
        reply.body = collected.to_bytes();
        Ok(reply)
    }

    /// Whether the connection is open (and not being opened just now).
    pub(super) fn is_open(&self) -> bool {
        self.sender.try_lock().is_ok_and(|s| s.as_ref().is_some_and(|s| !s.is_closed()))
    }

    /// The open connection's sender, or a new connection's.
    async fn sender(
        &self,
        endpoint: &Endpoint,
        tls: Option<&TlsConnector>,
    ) -> Result<http2::SendRequest<Full<Bytes>>, SendError> {
        let mut slot = self.sender.lock().await;
        if let Some(sender) = slot.as_ref().filter(|s| !s.is_closed()) {
            return Ok(sender.clone());
        }
        let stream = Stream::open(endpoint, tls).await?;
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(HTTP2_KEEPALIVE)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| SendError::Broken(e.to_string()))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "HTTP/2 connection ended");
            }
        });
        *slot = Some(sender.clone());
        Ok(sender)
    }
}
