//! A minimal RESP2 connection: enough of the Redis protocol for `SET NX PX`,
//! `EVAL` and `PING`, on one TCP connection with no hidden reconnects or
//! multiplexing.
//!
//! Why not the `redis` crate: the benchmark needs exactly one connection per
//! client, requests written to several instances before any reply is read
//! (Redlock's parallel round), and full control over what happens when a
//! reply is late (the safety harness will stop Redis processes on purpose).
//! Three commands and four reply types are a few dozen lines; the crate's
//! connection manager, multiplexer and retries would each have to be turned
//! off.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

#[derive(Debug, thiserror::Error)]
pub enum RespError {
    #[error("redis {addr}: {source}")]
    Io { addr: SocketAddr, source: std::io::Error },
    #[error("redis {addr}: no reply within {timeout:?}")]
    Timeout { addr: SocketAddr, timeout: Duration },
    #[error("redis {addr}: malformed reply: {detail}")]
    Malformed { addr: SocketAddr, detail: String },
    #[error("redis {addr}: error reply: {message}")]
    ErrorReply { addr: SocketAddr, message: String },
}

/// Larger than any value these commands return; a longer length means the
/// stream is not what we think it is.
const MAX_BULK: i64 = 1 << 20;

/// A reply, without arrays: none of the commands used here returns one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Integer(i64),
    /// A bulk string; `None` is the nil reply (e.g. `SET NX` on a held key).
    Bulk(Option<Vec<u8>>),
}

/// One connection to one Redis server. After a transport failure (reset,
/// timeout, malformed reply) the stream is out of step with its replies, so
/// it is dropped and the next [`send`](Self::send) opens a new one.
pub struct RespConnection {
    addr: SocketAddr,
    stream: Option<BufReader<TcpStream>>,
}

impl RespConnection {
    pub async fn connect(addr: SocketAddr) -> Result<RespConnection, RespError> {
        let mut connection = RespConnection { addr, stream: None };
        connection.stream().await?;
        Ok(connection)
    }

    async fn stream(&mut self) -> Result<&mut BufReader<TcpStream>, RespError> {
        if self.stream.is_none() {
            let addr = self.addr;
            let stream = TcpStream::connect(addr).await.map_err(|source| RespError::Io { addr, source })?;
            stream.set_nodelay(true).map_err(|source| RespError::Io { addr, source })?;
            self.stream = Some(BufReader::new(stream));
        }
        Ok(self.stream.as_mut().expect("connected just above"))
    }

    /// Writes one command (an array of bulk strings) without waiting for
    /// its reply.
    pub async fn send(&mut self, args: &[&[u8]]) -> Result<(), RespError> {
        let mut frame = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            frame.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            frame.extend_from_slice(arg);
            frame.extend_from_slice(b"\r\n");
        }
        let addr = self.addr;
        let written = self.stream().await?.get_mut().write_all(&frame).await;
        written.map_err(|source| self.failed(RespError::Io { addr, source }))
    }

    /// Reads the next reply, waiting at most `timeout`.
    pub async fn read_reply(&mut self, timeout: Duration) -> Result<Reply, RespError> {
        let addr = self.addr;
        match tokio::time::timeout(timeout, self.read_reply_unbounded()).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e @ RespError::ErrorReply { .. })) => Err(e),
            Ok(Err(e)) => Err(self.failed(e)),
            Err(_) => Err(self.failed(RespError::Timeout { addr, timeout })),
        }
    }

    /// Forgets the stream after a transport failure.
    fn failed(&mut self, error: RespError) -> RespError {
        self.stream = None;
        error
    }

    /// Sends one command and reads its reply.
    pub async fn command(&mut self, args: &[&[u8]], timeout: Duration) -> Result<Reply, RespError> {
        self.send(args).await?;
        self.read_reply(timeout).await
    }

    async fn read_reply_unbounded(&mut self) -> Result<Reply, RespError> {
        let addr = self.addr;
        let io = |source| RespError::Io { addr, source };
        let malformed = |detail: String| RespError::Malformed { addr, detail };
        let Some(stream) = self.stream.as_mut() else {
            return Err(malformed("read with no request sent".into()));
        };
        let mut line = Vec::new();
        stream.read_until(b'\n', &mut line).await.map_err(io)?;
        let Some(body) = line.strip_suffix(b"\r\n") else {
            return Err(malformed(format!("unterminated line {:?}", String::from_utf8_lossy(&line))));
        };
        let (kind, rest) = body.split_first().ok_or_else(|| malformed("empty line".into()))?;
        let text = String::from_utf8_lossy(rest).into_owned();
        let number = || text.parse::<i64>().map_err(|_| malformed(format!("bad number {text:?}")));
        match kind {
            b'+' => Ok(Reply::Simple(text.clone())),
            b'-' => Err(RespError::ErrorReply { addr, message: text.clone() }),
            b':' => Ok(Reply::Integer(number()?)),
            b'$' => {
                let len = number()?;
                if len < 0 {
                    return Ok(Reply::Bulk(None));
                }
                if len > MAX_BULK {
                    return Err(malformed(format!("bulk string of {len} bytes")));
                }
                let mut data = vec![0; len as usize + 2];
                stream.read_exact(&mut data).await.map_err(io)?;
                data.truncate(len as usize);
                Ok(Reply::Bulk(Some(data)))
            }
            other => Err(malformed(format!("unsupported reply type {:?}", *other as char))),
        }
    }
}
