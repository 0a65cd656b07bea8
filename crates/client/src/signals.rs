//! The signals that ask a leasehold process to stop (SIGTERM, SIGINT,
//! SIGHUP), as one stream: `leasehold run` forwards them to its command,
//! `serve`, `up` and the demo shut down on them.

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};

/// SIGTERM, SIGINT and SIGHUP, from the moment this is created.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn new() -> std::io::Result<Self> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal received; pends forever if the streams end.
    pub async fn recv(&mut self) -> Signal {
        tokio::select! {
            Some(()) = self.term.recv() => Signal::SIGTERM,
            Some(()) = self.int.recv() => Signal::SIGINT,
            Some(()) = self.hup.recv() => Signal::SIGHUP,
            else => std::future::pending().await,
        }
    }
}
