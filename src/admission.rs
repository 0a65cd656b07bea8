//! How much of a node one caller may hold at once: open connections (the
//! listener, [`crate::server`]), waiting requests (the API's request
//! slots, `api/limits.rs`) and event streams (`api/events.rs`), each
//! bounded in total and per client address, so one runaway client cannot
//! take a node's whole budget.
//!
//! Requests the other members relay (leader forwarding) arrive on the
//! members' own authenticated connections, outside these budgets: the
//! member that took the client's request counted it already, and refusing
//! a member would turn one client's flood into every client's outage.
//!
//! The defaults are sized from the process's file-descriptor limit, which
//! `serve` raises to its hard limit at start (`leasehold_cli::raise_fd_limit`),
//! but for event streams ([`DEFAULT_MAX_SUBSCRIBERS`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Who sent a request, in its extensions (set by the listener per connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// The client's address, or the relaying member's for relayed requests.
    pub addr: IpAddr,
    /// Relayed by another member over its peer connection.
    pub via_member: bool,
}

/// File descriptors kept back from client connections: sled's and the
/// log's files, peer connections, refusals in progress, accept headroom.
const RESERVED_FDS: u64 = 512;
/// Connection bounds above this buy nothing on one node but memory.
const MAX_DEFAULT_CONNECTIONS: u64 = 65_536;
/// A client address may hold at most this share (1/n) of a budget.
const PER_CLIENT_SHARE: usize = 4;
/// Waiting requests per connection slot: over HTTP/2 many waits share one
/// connection, and a waiting request costs a queue place and a few KiB.
const WAITING_PER_CONNECTION: usize = 4;
/// Event streams open at once on a node. Each receives every applied event:
/// an entry costs every stream a wakeup, a filter and a write (the frame is
/// made once and shared), so streams are bounded by CPU, not by file
/// descriptors. A thousand streams is more than any dashboard or tool
/// needs; the clients do not use streams to wait.
pub const DEFAULT_MAX_SUBSCRIBERS: usize = 1024;

/// A node's default admission bounds, from its file-descriptor limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Defaults {
    pub max_connections: usize,
    pub max_connections_per_client: usize,
    pub max_waiting: usize,
    pub max_waiting_per_client: usize,
    pub max_subscribers: usize,
    pub max_subscribers_per_client: usize,
}

impl Defaults {
    /// The bounds for a process that may open `fd_limit` descriptors.
    pub fn for_fd_limit(fd_limit: u64) -> Defaults {
        // A tiny limit still leaves a usable node: the reserve shrinks first.
        let connections = fd_limit.saturating_sub(RESERVED_FDS).max(fd_limit / 2).clamp(16, MAX_DEFAULT_CONNECTIONS);
        Defaults::for_connections(connections as usize)
    }

    /// The bounds that follow from `max_connections` connections.
    pub fn for_connections(max_connections: usize) -> Defaults {
        Defaults { max_connections, max_connections_per_client: share(max_connections), ..Defaults::default() }
            .with_waiting(max_connections.saturating_mul(WAITING_PER_CONNECTION))
            .with_subscribers(DEFAULT_MAX_SUBSCRIBERS)
    }

    /// These bounds with `max_waiting` waiting requests, and its share.
    pub fn with_waiting(self, max_waiting: usize) -> Defaults {
        Defaults { max_waiting, max_waiting_per_client: share(max_waiting), ..self }
    }

    /// These bounds with `max_subscribers` event streams, and its share.
    pub fn with_subscribers(self, max_subscribers: usize) -> Defaults {
        Defaults { max_subscribers, max_subscribers_per_client: share(max_subscribers), ..self }
    }
}

/// A client's share of `total`.
fn share(total: usize) -> usize {
    (total / PER_CLIENT_SHARE).max(1)
}

/// Why a caller was refused a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The node's whole budget is in use.
    Total,
    /// This client address holds its whole share.
    PerClient,
}

impl Refusal {
    /// Says what is full, for the 503's message.
    pub fn describe(self, what: &str) -> String {
        match self {
            Refusal::Total => format!("too many {what} on this node; retry later or on another node"),
            Refusal::PerClient => format!("too many {what} from your address on this node; retry later"),
        }
    }
}

/// Places of one kind (connections, waiting requests), bounded in total and
/// per client address.
#[derive(Debug)]
pub struct Budget {
    total: usize,
    per_client: usize,
    used: Mutex<Used>,
}

#[derive(Debug, Default)]
struct Used {
    total: usize,
    by_client: HashMap<IpAddr, usize>,
}

impl Budget {
    pub fn new(total: usize, per_client: usize) -> Arc<Budget> {
        Arc::new(Budget { total, per_client: per_client.min(total), used: Mutex::new(Used::default()) })
    }

    fn used(&self) -> std::sync::MutexGuard<'_, Used> {
        // Two counters, updated together under the lock: a panic elsewhere
        // cannot leave them torn.
        self.used.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes a place for `client`, given back when the permit drops.
    pub fn try_take(self: &Arc<Self>, client: IpAddr) -> Result<Permit, Refusal> {
        let mut used = self.used();
        if used.total >= self.total {
            return Err(Refusal::Total);
        }
        let mine = used.by_client.entry(client).or_default();
        if *mine >= self.per_client {
            return Err(Refusal::PerClient);
        }
        *mine += 1;
        used.total += 1;
        Ok(Permit { budget: self.clone(), client })
    }

    /// Places in use now.
    pub fn in_use(&self) -> usize {
        self.used().total
    }

    /// Places in all.
    pub fn total(&self) -> usize {
        self.total
    }
}

/// One place in a [`Budget`].
#[derive(Debug)]
pub struct Permit {
    budget: Arc<Budget>,
    client: IpAddr,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut used = self.budget.used();
        used.total -= 1;
        if let Some(mine) = used.by_client.get_mut(&self.client) {
            *mine -= 1;
            if *mine == 0 {
                used.by_client.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    // Ensures one address cannot take more than its share, others still get
    // places, and places come back when permits drop.
    #[test]
    fn budgets_bound_each_client_and_the_total() {
        let budget = Budget::new(4, 2);
        let a1 = budget.try_take(ip(1)).unwrap();
        let _a2 = budget.try_take(ip(1)).unwrap();
        assert_eq!(budget.try_take(ip(1)).unwrap_err(), Refusal::PerClient);
        let _b1 = budget.try_take(ip(2)).unwrap();
        let _c1 = budget.try_take(ip(3)).unwrap();
        assert_eq!(budget.try_take(ip(4)).unwrap_err(), Refusal::Total);
        drop(a1);
        assert_eq!(budget.in_use(), 3);
        let _a3 = budget.try_take(ip(1)).unwrap();
        assert_eq!(budget.in_use(), 4);
    }

    // Ensures the defaults leave room for the reserve on usual limits and
    // stay usable on tiny ones.
    #[test]
    fn defaults_follow_the_fd_limit() {
        let usual = Defaults::for_fd_limit(65_536);
        assert_eq!(usual.max_connections, 65_536 - 512);
        assert_eq!(usual.max_connections_per_client, (65_536 - 512) / 4);
        assert_eq!(usual.max_waiting, 4 * (65_536 - 512));
        let tiny = Defaults::for_fd_limit(256);
        assert_eq!(tiny.max_connections, 128);
        assert!(tiny.max_connections_per_client >= 1);
        assert_eq!(Defaults::for_fd_limit(1 << 20).max_connections, 65_536);
        assert_eq!((tiny.max_subscribers, tiny.max_subscribers_per_client), (1024, 256), "not from the fd limit");
    }
}
