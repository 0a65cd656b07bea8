//! HTTP/1.1, spoken directly: one write per request, one parse per answer,
//! on the caller's own task. A general-purpose client (reqwest over hyper)
//! spent two to three times as much CPU per request (URL parsing, header
//! maps, a pool behind a service stack, a connection task woken for every
//! request); a lock cycle is two requests, so that was most of the client's
//! share of a cycle (docs/performance.md). Answers are read by
//! `content-length` or `chunked` framing, or to the end of the connection,
//! never past the request's limit: the numbers in a head (a length, a chunk
//! size) are the node's word, which no allocation and no arithmetic may
//! take on trust. A connection is kept only when the answer says it may be.

use std::io;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;

use super::endpoint::Endpoint;
use super::reply::{Reply, SendError};
use super::tls::Stream;

/// How long a pooled connection may stay idle before it is dropped: below
/// the nodes' default header-read timeout, which also closes idle
/// connections, so the client drops one before the node does.
const POOL_IDLE: Duration = Duration::from_secs(5);
/// Idle HTTP/1.1 connections kept per node.
const MAX_IDLE_PER_NODE: usize = 64;
/// Largest answer head (status line and headers) accepted.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Headers parsed per answer.
const MAX_HEADERS: usize = 64;
/// Largest trailer section of a chunked answer accepted (it is read and dropped).
const MAX_TRAILER_BYTES: usize = MAX_HEAD_BYTES;

/// One request to a node, and how long an answer to it may be.
pub(super) struct Request<'a> {
    /// `authorization: Bearer …` line, with its line end, when a token is set.
    pub(super) authorization: Option<&'a str>,
    pub(super) method: &'a Method,
    pub(super) target: &'a str,
    /// JSON.
    pub(super) body: Option<&'a [u8]>,
    /// Longest answer body accepted, in bytes.
    pub(super) limit: u64,
}

/// Opens a connection of its own to `endpoint` for `request`, an event
/// stream: a 200 answer comes back with its body still to read, piece by
/// piece ([`StreamedBody`]); any other answer is read whole, as usual.
pub(super) async fn open_stream(
    endpoint: &Endpoint,
    tls: Option<&TlsConnector>,
    request: &Request<'_>,
) -> Result<(Reply, Option<StreamedBody>), SendError> {
    let Request { authorization, method, target, body, limit } = *request;
    let head = request_head(method, target, endpoint, authorization, body.map(<[u8]>::len));
    let mut connection = Connection::open(endpoint, tls).await?;
    connection.stream.write_all(&head).await?;
    let failed = |e: Read| match e {
        Read::Closed => SendError::Broken("connection closed mid-answer".into()),
        Read::Io(e) => e.into(),
        Read::Malformed(what) => SendError::Broken(what),
        Read::TooLarge => SendError::TooLarge { limit },
    };
    let (mut reply, framing, keep_alive) = connection.read_head().await.map_err(failed)?;
    let framing = framing.map_err(failed)?;
    if reply.status != 200 {
        reply.body = connection.read_body(framing, keep_alive, limit).await.map_err(failed)?.0;
        return Ok((reply, None));
    }
    Ok((reply, Some(StreamedBody { connection, chunked: matches!(framing, Framing::Chunked), ended: false })))
}

/// The body of an answer that goes on as long as the node sends it (an
/// event stream), read as it comes.
pub(crate) struct StreamedBody {
    connection: Connection,
    chunked: bool,
    ended: bool,
}

/// The largest piece of a streamed body accepted at once: an event is a
/// few hundred bytes, a value at most 4 KiB.
const MAX_STREAMED_PIECE: u64 = 1 << 20;

impl StreamedBody {
    /// The next piece of the body; `None` once it ended.
    pub(crate) async fn next(&mut self) -> Result<Option<Bytes>, SendError> {
        if self.ended {
            return Ok(None);
        }
        let piece = if self.chunked { self.next_chunk().await } else { self.next_bytes().await };
        piece.map_err(|e| match e {
            Read::Closed => SendError::Broken("the stream was cut off".into()),
            Read::Io(e) => e.into(),
            Read::Malformed(what) => SendError::Broken(what),
            Read::TooLarge => SendError::TooLarge { limit: MAX_STREAMED_PIECE },
        })
    }

    async fn next_chunk(&mut self) -> Result<Option<Bytes>, Read> {
        let c = &mut self.connection;
        let line = c.read_line().await?;
        let size = line.split(|&b| b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(size)
            .ok()
            .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
            .ok_or_else(|| Read::Malformed("bad chunk size".into()))?;
        if size == 0 {
            self.ended = true;
            return Ok(None);
        }
        if size > MAX_STREAMED_PIECE {
            return Err(Read::TooLarge);
        }
        let end = size as usize + 2;
        while c.buffer.len() < end {
            c.fill().await?;
        }
        let piece = c.buffer.split_to(end - 2).freeze();
        if &c.buffer[..2] != b"\r\n" {
            return Err(Read::Malformed("chunk not followed by CRLF".into()));
        }
        c.buffer.advance(2);
        Ok(Some(piece))
    }

    /// A body without chunks runs to the end of the connection.
    async fn next_bytes(&mut self) -> Result<Option<Bytes>, Read> {
        let c = &mut self.connection;
        if c.buffer.is_empty() {
            match c.fill().await {
                Err(Read::Closed) => {
                    self.ended = true;
                    return Ok(None);
                }
                other => other?,
            }
        }
        Ok(Some(c.buffer.split().freeze()))
    }
}

/// A node's idle HTTP/1.1 connections, the most recently used last.
#[derive(Default)]
pub(super) struct Pool {
    idle: Mutex<Vec<Connection>>,
}

impl Pool {
    /// `request` to `endpoint`, on an idle connection or a new one (kept
    /// afterwards if the answer allows it).
    pub(super) async fn send(
        &self,
        endpoint: &Endpoint,
        tls: Option<&TlsConnector>,
        request: &Request<'_>,
    ) -> Result<Reply, SendError> {
        let Request { authorization, method, target, body, limit } = *request;
        let head = request_head(method, target, endpoint, authorization, body.map(<[u8]>::len));
        // A pooled connection the node has closed meanwhile answers nothing:
        // the request goes again on a new one. (Every mutation carries a
        // request id, so a request the node did apply is answered from its
        // record, not applied twice.)
        while let Some(mut connection) = self.checkout() {
            match connection.exchange(&head, body, limit).await {
                Ok((reply, reusable)) => {
                    if reusable {
                        self.checkin(connection);
                    }
                    return Ok(reply);
                }
                Err(Exchange::NothingBack(_)) => continue,
                Err(Exchange::Failed(e)) => return Err(e),
            }
        }
        let mut connection = Connection::open(endpoint, tls).await?;
        match connection.exchange(&head, body, limit).await {
            Ok((reply, reusable)) => {
                if reusable {
                    self.checkin(connection);
                }
                Ok(reply)
            }
            Err(Exchange::NothingBack(e) | Exchange::Failed(e)) => Err(e),
        }
    }

    /// Whether an idle connection has not idled out yet.
    pub(super) fn has_fresh(&self) -> bool {
        self.lock_idle().iter().any(|c| c.idle_since.elapsed() < POOL_IDLE)
    }

    fn lock_idle(&self) -> MutexGuard<'_, Vec<Connection>> {
        // A plain list: a panic elsewhere cannot leave it torn.
        self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The most recently used idle connection that has not idled out.
    fn checkout(&self) -> Option<Connection> {
        let mut idle = self.lock_idle();
        idle.retain(|c| c.idle_since.elapsed() < POOL_IDLE);
        idle.pop()
    }

    fn checkin(&self, mut connection: Connection) {
        connection.idle_since = Instant::now();
        let mut idle = self.lock_idle();
        if idle.len() < MAX_IDLE_PER_NODE {
            idle.push(connection);
        }
    }
}

/// The head of a request: request line, `host`, the JSON body's headers,
/// and the token's, if any.
fn request_head(
    method: &Method,
    target: &str,
    endpoint: &Endpoint,
    authorization: Option<&str>,
    body_len: Option<usize>,
) -> Vec<u8> {
    use std::fmt::Write as _;
    let mut head = String::with_capacity(160 + target.len() + body_len.unwrap_or(0));
    let _ = write!(head, "{method} {target} HTTP/1.1\r\nhost: {}\r\n", endpoint.authority);
    match body_len {
        Some(len) => {
            let _ = write!(head, "content-type: application/json\r\ncontent-length: {len}\r\n");
        }
        None if *method != Method::GET => head.push_str("content-length: 0\r\n"),
        None => {}
    }
    if let Some(line) = authorization {
        head.push_str(line);
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// How an exchange on a connection failed.
enum Exchange {
    /// Not a byte of an answer came back (the node closed a pooled
    /// connection): the request may go again on another.
    NothingBack(SendError),
    Failed(SendError),
}

/// One HTTP/1.1 connection: requests go one at a time.
struct Connection {
    stream: Stream,
    /// What was read past the last answer (nothing, with a well-behaved node).
    buffer: BytesMut,
    idle_since: Instant,
}

impl Connection {
    async fn open(endpoint: &Endpoint, tls: Option<&TlsConnector>) -> Result<Connection, SendError> {
        let stream = Stream::open(endpoint, tls).await?;
        Ok(Connection { stream, buffer: BytesMut::with_capacity(4096), idle_since: Instant::now() })
    }

    /// Sends one request and reads its answer, of at most `limit` bytes of
    /// body; also says whether the connection may carry another.
    async fn exchange(&mut self, head: &[u8], body: Option<&[u8]>, limit: u64) -> Result<(Reply, bool), Exchange> {
        let sent = match body {
            // One write: head and body in one segment.
            Some(body) if self.buffer.is_empty() => {
                let mut request = Vec::with_capacity(head.len() + body.len());
                request.extend_from_slice(head);
                request.extend_from_slice(body);
                self.stream.write_all(&request).await
            }
            Some(body) => match self.stream.write_all(head).await {
                Ok(()) => self.stream.write_all(body).await,
                Err(e) => Err(e),
            },
            None => self.stream.write_all(head).await,
        };
        if let Err(e) = sent {
            return Err(Exchange::NothingBack(e.into()));
        }
        let got_none = self.buffer.is_empty();
        match self.read_reply(limit).await {
            Err(Read::Closed) if got_none => {
                Err(Exchange::NothingBack(SendError::Broken("connection closed before an answer".into())))
            }
            Err(Read::Closed) => Err(Exchange::Failed(SendError::Broken("connection closed mid-answer".into()))),
            Err(Read::Io(e)) if got_none && is_reset(&e) => Err(Exchange::NothingBack(e.into())),
            Err(Read::Io(e)) => Err(Exchange::Failed(e.into())),
            Err(Read::Malformed(what)) => Err(Exchange::Failed(SendError::Broken(what))),
            Err(Read::TooLarge) => Err(Exchange::Failed(SendError::TooLarge { limit })),
            Ok(answer) => Ok(answer),
        }
    }

    /// Reads more bytes into the buffer; `Closed` at the end of the stream.
    async fn fill(&mut self) -> Result<(), Read> {
        if self.buffer.capacity() - self.buffer.len() < 1024 {
            self.buffer.reserve(8192);
        }
        match self.stream.read_buf(&mut self.buffer).await {
            Ok(0) => Err(Read::Closed),
            Ok(_) => Ok(()),
            Err(e) => Err(Read::Io(e)),
        }
    }

    /// One answer: its head (informational heads skipped), then its body,
    /// of at most `limit` bytes.
    async fn read_reply(&mut self, limit: u64) -> Result<(Reply, bool), Read> {
        let (mut reply, framing, keep_alive) = self.read_head().await?;
        let (body, reusable) = self.read_body(framing?, keep_alive, limit).await?;
        reply.body = body;
        Ok((reply, reusable))
    }

    /// The head of the next final answer (informational ones skipped), how
    /// its body is framed, and whether the node keeps the connection open.
    async fn read_head(&mut self) -> Result<(Reply, Result<Framing, Read>, bool), Read> {
        loop {
            let (reply, framing, keep_alive, head_len) = loop {
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut parsed = httparse::Response::new(&mut headers);
                match parsed.parse(&self.buffer) {
                    Ok(httparse::Status::Complete(len)) => {
                        let status = parsed.code.unwrap_or(0);
                        let headers = || parsed.headers.iter().map(|h| (h.name, h.value));
                        let framing = Framing::of(status, headers());
                        let close =
                            headers().any(|(n, v)| n.eq_ignore_ascii_case("connection") && has_token(v, "close"));
                        let keep_alive = parsed.version == Some(1) && !close;
                        break (Reply::with_headers(status, headers()), framing, keep_alive, len);
                    }
                    Ok(httparse::Status::Partial) if self.buffer.len() < MAX_HEAD_BYTES => self.fill().await?,
                    Ok(httparse::Status::Partial) => return Err(Read::Malformed("answer head too large".into())),
                    Err(e) => return Err(Read::Malformed(format!("answer is not HTTP/1.1: {e}"))),
                }
            };
            self.buffer.advance(head_len);
            if !(100..200).contains(&reply.status) {
                return Ok((reply, framing, keep_alive));
            }
        }
    }

    /// A whole body framed by `framing`, of at most `limit` bytes, and
    /// whether the connection may carry another request after it.
    async fn read_body(&mut self, framing: Framing, keep_alive: bool, limit: u64) -> Result<(Bytes, bool), Read> {
        Ok(match framing {
            Framing::Length(len) => {
                // Refused before a byte is read; within the limit, the
                // length fits this machine's memory, so in a usize.
                let len = usize::try_from(len).ok().filter(|_| len <= limit).ok_or(Read::TooLarge)?;
                while self.buffer.len() < len {
                    self.fill().await?;
                }
                (self.buffer.split_to(len).freeze(), keep_alive)
            }
            Framing::Chunked => (self.read_chunked(limit).await?, keep_alive),
            Framing::UntilClose => {
                loop {
                    match self.fill().await {
                        Ok(()) if self.buffer.len() as u64 > limit => return Err(Read::TooLarge),
                        Ok(()) => {}
                        Err(Read::Closed) => break,
                        Err(e) => return Err(e),
                    }
                }
                (self.buffer.split().freeze(), false)
            }
        })
    }

    /// A `chunked` body of at most `limit` bytes: chunks until the last
    /// one, then the trailers.
    async fn read_chunked(&mut self, limit: u64) -> Result<Bytes, Read> {
        let mut body = BytesMut::new();
        loop {
            let line = self.read_line().await?;
            let size = line.split(|&b| b == b';').next().unwrap_or_default();
            let size = std::str::from_utf8(size)
                .ok()
                .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
                .ok_or_else(|| Read::Malformed("bad chunk size".into()))?;
            if size == 0 {
                // Trailers, up to the empty line, dropped.
                let mut trailers = 0;
                loop {
                    let trailer = self.read_line().await?;
                    if trailer.is_empty() {
                        return Ok(body.freeze());
                    }
                    trailers += trailer.len() + 2;
                    if trailers > MAX_TRAILER_BYTES {
                        return Err(Read::Malformed("answer trailers too large".into()));
                    }
                }
            }
            // The body so far is within the limit (no underflow), and so is
            // the chunk after this check: its CRLF cannot overflow a u64,
            // and one this machine cannot address is too large for it.
            if size > limit - body.len() as u64 {
                return Err(Read::TooLarge);
            }
            let end = usize::try_from(size + 2).map_err(|_| Read::TooLarge)?;
            while self.buffer.len() < end {
                self.fill().await?;
            }
            body.extend_from_slice(&self.buffer[..end - 2]);
            if &self.buffer[end - 2..end] != b"\r\n" {
                return Err(Read::Malformed("chunk not followed by CRLF".into()));
            }
            self.buffer.advance(end);
        }
    }

    /// One CRLF-terminated line, without its end.
    async fn read_line(&mut self) -> Result<Bytes, Read> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\r\n") {
                let line = self.buffer.split_to(end).freeze();
                self.buffer.advance(2);
                return Ok(line);
            }
            if self.buffer.len() > MAX_HEAD_BYTES {
                return Err(Read::Malformed("chunk line too long".into()));
            }
            self.fill().await?;
        }
    }
}

/// Why reading an answer stopped.
enum Read {
    Closed,
    Io(io::Error),
    Malformed(String),
    /// The body is, or says it is, longer than the request's limit.
    TooLarge,
}

fn is_reset(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionAborted)
}

/// How an answer's body ends.
enum Framing {
    /// `content-length`, as the node wrote it: not yet checked against any limit.
    Length(u64),
    Chunked,
    UntilClose,
}

impl Framing {
    fn of<'h>(status: u16, headers: impl Iterator<Item = (&'h str, &'h [u8])>) -> Result<Framing, Read> {
        if status == 204 || status == 304 {
            return Ok(Framing::Length(0));
        }
        let mut framing = Framing::UntilClose;
        for (name, value) in headers {
            if name.eq_ignore_ascii_case("transfer-encoding") && has_token(value, "chunked") {
                return Ok(Framing::Chunked);
            }
            if name.eq_ignore_ascii_case("content-length") {
                let len = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .ok_or_else(|| Read::Malformed("bad content-length".into()))?;
                framing = Framing::Length(len);
            }
        }
        Ok(framing)
    }
}

/// Whether a comma-separated header value holds `token` (any case).
fn has_token(value: &[u8], token: &str) -> bool {
    value.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::MAX_ANSWER_BYTES;
    use crate::{Client, ClientError};

    /// A node on 127.0.0.1 that answers every request with `head`, then
    /// `endless` zero bytes (stopping at twice the limit, so that a reader
    /// without one fails by its time bound, not by exhausting memory), and
    /// then holds the connection open: only the client ends it.
    async fn hostile_node(head: impl Into<Vec<u8>>, endless: bool) -> String {
        let head = head.into();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let head = head.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = socket.read(&mut request).await;
                    socket.write_all(&head).await?;
                    let zeros = [0u8; 64 * 1024];
                    let mut sent = 0;
                    while endless && sent < 2 * MAX_ANSWER_BYTES {
                        socket.write_all(&zeros).await?;
                        sent += zeros.len() as u64;
                    }
                    std::future::pending::<()>().await;
                    io::Result::Ok(())
                });
            }
        });
        addr
    }

    /// What `get` of a lock comes back with from `node`, tried once.
    async fn get_from(node: &str) -> ClientError {
        let client = Client::new(&[node]).unwrap().with_retry_budget(Duration::ZERO);
        let answer = tokio::time::timeout(Duration::from_secs(30), client.get("x")).await;
        answer.expect("an answer or an error within 30 s").expect_err("a hostile answer is an error")
    }

    fn is_too_large(e: &ClientError) -> bool {
        matches!(e, ClientError::Decode(m) if m == &format!("the answer is longer than {MAX_ANSWER_BYTES} bytes"))
    }

    // Ensures a content-length beyond the limit, or beyond any integer, is
    // refused at once as a typed error, before a byte of body is read.
    #[tokio::test]
    async fn a_huge_content_length_is_refused_before_reading() {
        let over = hostile_node(b"HTTP/1.1 200 OK\r\ncontent-length: 67108865\r\n\r\n", false).await;
        let e = get_from(&over).await;
        assert!(is_too_large(&e), "{e:?}");
        let max = hostile_node(b"HTTP/1.1 200 OK\r\ncontent-length: 18446744073709551615\r\n\r\n", false).await;
        let e = get_from(&max).await;
        assert!(is_too_large(&e), "{e:?}");
        let beyond = hostile_node(b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n", false).await;
        let e = get_from(&beyond).await;
        assert!(matches!(&e, ClientError::Unavailable(m) if m.contains("bad content-length")), "{e:?}");
    }

    // Ensures chunk sizes a node makes up (the largest 64-bit one, whose
    // CRLF used to overflow the arithmetic and panic; one beyond 64 bits;
    // one that only the sum of the chunks takes past the limit) are typed
    // errors.
    #[tokio::test]
    async fn chunk_sizes_are_checked_not_trusted() {
        let chunked = |size: &str| format!("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n{size}\r\n");
        let largest = hostile_node(chunked("ffffffffffffffff"), false).await;
        let e = get_from(&largest).await;
        assert!(is_too_large(&e), "{e:?}");
        let beyond = hostile_node(chunked("ffffffffffffffffff"), false).await;
        let e = get_from(&beyond).await;
        assert!(matches!(&e, ClientError::Unavailable(m) if m.contains("bad chunk size")), "{e:?}");
        let second = format!("{}\r\n4000000", "\0".repeat(0x10));
        let over_in_sum = hostile_node(chunked(&format!("10\r\n{second}")), false).await;
        let e = get_from(&over_in_sum).await;
        assert!(is_too_large(&e), "{e:?}");
    }

    // Ensures a body that never ends (no length, read to the end of the
    // connection) is cut off at the limit with a typed error.
    #[tokio::test]
    async fn an_endless_body_is_cut_off_at_the_limit() {
        let node = hostile_node(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n", true).await;
        let e = get_from(&node).await;
        assert!(is_too_large(&e), "{e:?}");
    }

    // Ensures answers framed by length, by chunks and by close are read
    // whole, and that only a kept-alive answer leaves the connection reusable.
    #[tokio::test]
    async fn answers_are_read_by_each_framing() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = Endpoint::parse(&listener.local_addr().unwrap().to_string(), false).unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let answers: [&[u8]; 3] = [
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-leasehold-leader-addr: n:1\r\n\r\n{}",
                b"HTTP/1.1 503 Service Unavailable\r\ntransfer-encoding: chunked\r\nretry-after: 2\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nto the end",
            ];
            for answer in answers {
                let mut request = [0u8; 1024];
                let _ = socket.read(&mut request).await.unwrap();
                socket.write_all(answer).await.unwrap();
            }
        });
        let mut connection = Connection::open(&endpoint, None).await.unwrap();
        let head = request_head(&Method::GET, "/x", &endpoint, None, None);
        let (reply, reusable) = connection.exchange(&head, None, MAX_ANSWER_BYTES).await.ok().unwrap();
        assert_eq!(
            (reply.status, &reply.body[..], reply.leader_addr.as_deref(), reusable),
            (200, &b"{}"[..], Some("n:1"), true)
        );
        let (reply, reusable) = connection.exchange(&head, None, MAX_ANSWER_BYTES).await.ok().unwrap();
        assert_eq!(
            (reply.status, &reply.body[..], reply.retry_after, reusable),
            (503, &b"abcde"[..], Some(Duration::from_secs(2)), true)
        );
        let (reply, reusable) = connection.exchange(&head, None, MAX_ANSWER_BYTES).await.ok().unwrap();
        assert_eq!((&reply.body[..], reusable), (&b"to the end"[..], false));
        server.await.unwrap();
    }
}
