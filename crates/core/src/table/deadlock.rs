//! Deadlocks refused instead of waited out: the wait-for graph of owners,
//! and the check a waiting acquire passes before it joins a queue.
//!
//! The graph has an edge from owner `a` to owner `b` when `a` waits for a
//! lock or semaphore and `b` stands in its way there:
//!
//! - on a lock, for an exclusive waiter: the exclusive holder, every shared
//!   holder, and every waiter ahead of it in the queue (FIFO: each of them
//!   is granted first);
//! - on a lock, for a shared waiter: the exclusive holder and every
//!   exclusive waiter ahead of it (shared holders and shared waiters ahead
//!   are granted with it, not before it);
//! - on a semaphore: every holder and every waiter ahead of it. This is
//!   conservative: any one holder's release may be enough, so a cycle
//!   through a semaphore is refused even when a holder outside it could
//!   have freed a permit.
//!
//! A waiting acquire (any kind) that would close a cycle through its own
//! owner is refused with `Deadlock` in the entry that applies it, so every
//! replica decides alike. Only waits add edges towards a holder that stays
//! (grants, expiries and releases only turn "waits behind" into "waits
//! for the holder" or remove edges), so checking each new wait keeps the
//! graph acyclic. An owner that holds nothing and waits nowhere else has no
//! edge into it and cannot close a cycle: that answer costs two lookups,
//! so a herd of fresh waiters on one lock never walks the graph.

use std::collections::{BTreeMap, BTreeSet};

use super::{LockError, LockTable};

/// What an owner can wait for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Resource {
    Lock(String),
    Semaphore(String),
}

/// The wait-for graph's index: derived from the table, rebuilt on load.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct WaitFor {
    /// `(owner, resource)` of every wait (a multi-acquire waits for each of
    /// its locks).
    waits: BTreeSet<(String, Resource)>,
    /// How many leases of every kind each owner holds (owners holding none
    /// are absent).
    holdings: BTreeMap<String, usize>,
}

impl WaitFor {
    pub(super) fn wait(&mut self, owner: &str, resource: Resource) {
        self.waits.insert((owner.to_owned(), resource));
    }

    pub(super) fn unwait(&mut self, owner: &str, resource: Resource) {
        self.waits.remove(&(owner.to_owned(), resource));
    }

    pub(super) fn hold(&mut self, owner: &str) {
        *self.holdings.entry(owner.to_owned()).or_default() += 1;
    }

    pub(super) fn unhold(&mut self, owner: &str) {
        if let Some(count) = self.holdings.get_mut(owner) {
            *count -= 1;
            if *count == 0 {
                self.holdings.remove(owner);
            }
        }
    }

    /// Leases of every kind held, over all owners.
    pub(super) fn holdings(&self) -> usize {
        self.holdings.values().sum()
    }

    /// What `owner` waits for.
    fn resources_of<'a>(&'a self, owner: &'a str) -> impl Iterator<Item = &'a Resource> + 'a {
        let from = (owner.to_owned(), Resource::Lock(String::new()));
        self.waits.range(from..).take_while(move |(o, _)| o == owner).map(|(_, r)| r)
    }

    /// Nothing can wait for `owner`: it holds nothing and waits nowhere.
    fn is_idle(&self, owner: &str) -> bool {
        !self.holdings.contains_key(owner) && self.resources_of(owner).next().is_none()
    }
}

impl LockTable {
    /// The owners in the way of `owner` on `resource` (see the module
    /// documentation). `joining`: it is about to join the queue at its back
    /// (`Some(shared)`), or stands in it already (`None`).
    pub(super) fn blockers(&self, resource: &Resource, owner: &str, joining: Option<bool>) -> Vec<String> {
        let mut blockers = Vec::new();
        match resource {
            Resource::Lock(name) => {
                let queue = self.queues.get(name.as_str());
                let waiters = queue.into_iter().flatten();
                let (ahead, shared): (Vec<_>, bool) = match joining {
                    Some(shared) => (waiters.collect(), shared),
                    None => {
                        let ahead: Vec<_> = waiters.take_while(|w| w.owner != owner).collect();
                        let me = queue.and_then(|q| q.get(ahead.len()));
                        (ahead, me.is_some_and(|w| w.shared))
                    }
                };
                blockers.extend(self.leases.get(name.as_str()).map(|l| l.owner.to_string()));
                if !shared {
                    blockers.extend(self.shared.get(name.as_str()).into_iter().flat_map(|h| h.keys().cloned()));
                }
                blockers.extend(ahead.into_iter().filter(|w| !(shared && w.shared)).map(|w| w.owner.clone()));
            }
            Resource::Semaphore(name) => {
                if let Some(semaphore) = self.semaphores.get(name.as_str()) {
                    blockers.extend(semaphore.holders.keys().cloned());
                    let ahead = semaphore.queue.iter().take_while(|w| joining.is_some() || w.owner != owner);
                    blockers.extend(ahead.map(|w| w.owner.clone()));
                }
            }
        }
        blockers
    }

    /// `Deadlock` if `owner` waiting for `resources` (in `shared` mode, for
    /// a lock) would close a cycle in the wait-for graph, with the cycle:
    /// `owner` first, each waiting for the next, the last for `owner`.
    pub(super) fn refuse_deadlock(&self, owner: &str, resources: &[Resource], shared: bool) -> Result<(), LockError> {
        if self.wait_for.is_idle(owner) {
            return Ok(());
        }
        // Depth first from the owner's blockers, looking for the owner; each
        // owner is visited once, remembering who led to it.
        let mut search = Search { owner, came_from: BTreeMap::new(), stack: Vec::new() };
        for resource in resources {
            for blocker in self.blockers(resource, owner, Some(shared)) {
                if blocker == owner {
                    return Err(LockError::Deadlock { cycle: vec![owner.to_owned()] });
                }
                search.step(owner, blocker)?;
            }
        }
        while let Some(next) = search.stack.pop() {
            for resource in self.wait_for.resources_of(&next) {
                for blocker in self.blockers(resource, &next, None) {
                    search.step(&next, blocker)?;
                }
            }
        }
        Ok(())
    }
}

/// A depth-first search of the wait-for graph for a path back to `owner`.
struct Search<'a> {
    owner: &'a str,
    /// Every owner reached, and the owner it was reached from.
    came_from: BTreeMap<String, String>,
    stack: Vec<String>,
}

impl Search<'_> {
    /// Follows the edge `from` → `to`: the cycle if `to` is the owner.
    fn step(&mut self, from: &str, to: String) -> Result<(), LockError> {
        if to == self.owner {
            return Err(cycle_to(self.owner, from, &self.came_from));
        }
        if to != from && !self.came_from.contains_key(&to) {
            self.came_from.insert(to.clone(), from.to_owned());
            self.stack.push(to);
        }
        Ok(())
    }
}

/// The cycle `owner` → ... → `last` → `owner`, read back through `came_from`.
fn cycle_to(owner: &str, last: &str, came_from: &BTreeMap<String, String>) -> LockError {
    let mut cycle = vec![last.to_owned()];
    while cycle.last().map(String::as_str) != Some(owner) {
        let previous = &came_from[cycle.last().expect("never empty")];
        cycle.push(previous.clone());
    }
    cycle.reverse();
    LockError::Deadlock { cycle }
}
