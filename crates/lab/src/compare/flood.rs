//! A connection flood: idle TCP connections held open against one server
//! (leasehold's leader, etcd's member, the first Redis) while a workload
//! runs, as a deploy or a retry storm opens them. Each connection sends
//! nothing; when the server closes it (leasehold closes a silent connection
//! after its header-read timeout, or refuses one over its budget), it is
//! opened again at once, so the flood stays at its size.
//!
//! On loopback the connections come from [`SOURCES`] addresses in turn
//! (127.0.2.1, 127.0.2.2, ...), as many clients would, rather than all
//! from one address, whose share of a node's budget would cap them.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::TcpSocket;

/// Loopback source addresses the connections are spread over.
const SOURCES: u8 = 64;
/// How long opening the whole flood may take before the measurement starts.
const OPEN_BOUND: Duration = Duration::from_secs(20);
/// Pause before reopening a connection that failed to open.
const REOPEN_PAUSE: Duration = Duration::from_millis(50);

/// The flood's connections; closed when dropped.
pub struct Flood {
    open: Arc<AtomicUsize>,
    _tasks: tokio::task::JoinSet<()>,
}

impl Flood {
    /// Opens `connections` idle connections to `target` and waits (bounded)
    /// until they are open.
    pub async fn start(target: SocketAddr, connections: usize) -> Flood {
        let open = Arc::new(AtomicUsize::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..connections {
            let source = source_for(target, i);
            let open = open.clone();
            tasks.spawn(async move {
                loop {
                    hold_one(source, target, &open).await;
                    tokio::time::sleep(REOPEN_PAUSE).await;
                }
            });
        }
        let flood = Flood { open, _tasks: tasks };
        let give_up = Instant::now() + OPEN_BOUND;
        while flood.open_now() < connections && Instant::now() < give_up {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!("bench:   {} of {connections} idle connections open against {target}", flood.open_now());
        flood
    }

    /// Connections open now.
    pub fn open_now(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

/// The source address of connection `i`: spread over loopback when the
/// target is on loopback, else the system's choice.
fn source_for(target: SocketAddr, i: usize) -> Option<IpAddr> {
    target.ip().is_loopback().then(|| IpAddr::V4(Ipv4Addr::new(127, 0, 2, 1 + (i % SOURCES as usize) as u8)))
}

/// Opens one connection and holds it until the server closes it.
async fn hold_one(source: Option<IpAddr>, target: SocketAddr, open: &AtomicUsize) {
    let Ok(socket) = (if target.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() }) else { return };
    if let Some(source) = source {
        if socket.bind(SocketAddr::new(source, 0)).is_err() {
            return;
        }
    }
    let Ok(mut stream) = socket.connect(target).await else { return };
    open.fetch_add(1, Ordering::Relaxed);
    // Whatever the server says (a 503 to a refused connection) is read and
    // dropped; the connection ends when the server closes it.
    let mut sink = [0u8; 1024];
    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    open.fetch_sub(1, Ordering::Relaxed);
}
