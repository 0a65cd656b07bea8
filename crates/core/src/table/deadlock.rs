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
//! so a herd of fresh waiters on one lock never walks the graph. A search
//! that does walk it scans each queue at most twice, so its cost grows with
//! the places in the queues it reaches, not with their square.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

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
    /// `Deadlock` if `owner` waiting for `resources` (in `shared` mode, for
    /// a lock) would close a cycle in the wait-for graph, with the cycle:
    /// `owner` first, each waiting for the next, the last for `owner`.
    pub(super) fn refuse_deadlock(&self, owner: &str, resources: &[Resource], shared: bool) -> Result<(), LockError> {
        if self.wait_for.is_idle(owner) {
            return Ok(());
        }
        // Depth first from the owner's blockers, looking for the owner; each
        // owner is visited once, remembering who led to it.
        let mut search = Search { owner, came_from: BTreeMap::new(), stack: Vec::new(), expanded: BTreeMap::new() };
        for resource in resources {
            let position = match resource {
                Resource::Lock(name) => self.queues.get(name.as_str()).map_or(0, VecDeque::len),
                Resource::Semaphore(name) => self.semaphores.get(name.as_str()).map_or(0, |s| s.queue.len()),
            };
            self.expand(&mut search, resource, owner, Place { position, shared })?;
        }
        while let Some((next, known)) = search.stack.pop() {
            for resource in self.wait_for.resources_of(&next) {
                let place = match &known {
                    Some((at, place)) if at == resource => Some(*place),
                    _ => self.place_in(resource, &next),
                };
                if let Some(place) = place {
                    self.expand(&mut search, resource, &next, place)?;
                }
            }
        }
        Ok(())
    }

    /// Follows the edges from `from`, standing at `place` in the queue of
    /// `resource`, to the owners in its way there (see the module
    /// documentation), skipping those an earlier expansion of the same
    /// queue already reached: each queue is then scanned at most twice (for
    /// exclusive and shared waiters) in one search, however many of its
    /// waiters the search visits.
    fn expand(&self, search: &mut Search<'_>, resource: &Resource, from: &str, place: Place) -> Result<(), LockError> {
        let mut done = search.expanded.get(resource).copied().unwrap_or_default();
        // A shared waiter is in the way of no shared one, held or waiting.
        let in_way = |other_shared: bool| !(place.shared && other_shared);
        let from_position = if place.shared { done.ahead_all.max(done.ahead_exclusive) } else { done.ahead_all };
        let ahead = from_position..place.position.max(from_position);
        let mut found: Vec<(String, Option<Place>)> = Vec::new();
        match resource {
            Resource::Lock(name) => {
                if !done.exclusive_holders {
                    found.extend(self.leases.get(name.as_str()).map(|l| (l.owner.to_string(), None)));
                }
                if !place.shared && !done.shared_holders {
                    let shared = self.shared.get(name.as_str()).into_iter().flat_map(|h| h.keys());
                    found.extend(shared.map(|o| (o.clone(), None)));
                }
                if let Some(queue) = self.queues.get(name.as_str()) {
                    let ahead = ahead.start.min(queue.len())..ahead.end.min(queue.len());
                    for (position, w) in ahead.clone().zip(queue.range(ahead)) {
                        if in_way(w.shared) {
                            found.push((w.owner.clone(), Some(Place { position, shared: w.shared })));
                        }
                    }
                }
            }
            Resource::Semaphore(name) => {
                if let Some(semaphore) = self.semaphores.get(name.as_str()) {
                    // Every holder and waiter stands in the way.
                    if !done.exclusive_holders {
                        found.extend(semaphore.holders.keys().map(|o| (o.clone(), None)));
                    }
                    let queue = &semaphore.queue;
                    let ahead = ahead.start.min(queue.len())..ahead.end.min(queue.len());
                    for (position, w) in ahead.clone().zip(queue.range(ahead)) {
                        found.push((w.owner.clone(), Some(Place { position, shared: false })));
                    }
                }
            }
        }
        done.exclusive_holders = true;
        done.shared_holders |= !place.shared;
        if place.shared {
            done.ahead_exclusive = done.ahead_exclusive.max(place.position);
        } else {
            done.ahead_all = done.ahead_all.max(place.position);
        }
        search.expanded.insert(resource.clone(), done);
        for (to, at) in found {
            search.step(from, to, at.map(|place| (resource.clone(), place)))?;
        }
        Ok(())
    }

    /// Where `owner` stands in the queue of `resource`, if it waits there.
    fn place_in(&self, resource: &Resource, owner: &str) -> Option<Place> {
        match resource {
            Resource::Lock(name) => {
                let queue = self.queues.get(name.as_str())?;
                let position = queue.iter().position(|w| w.owner == owner)?;
                Some(Place { position, shared: queue[position].shared })
            }
            Resource::Semaphore(name) => {
                let position = self.semaphores.get(name.as_str())?.queue.iter().position(|w| w.owner == owner)?;
                Some(Place { position, shared: false })
            }
        }
    }
}

/// Where a waiter stands in a queue (0 = first; for an owner about to
/// join, the queue's length) and whether it asks for shared mode.
#[derive(Debug, Clone, Copy)]
struct Place {
    position: usize,
    shared: bool,
}

/// What one search already followed out of one queue: its exclusive
/// holder, its shared holders (or a semaphore's holders), and the waiters
/// before `ahead_all` (all of them) and before `ahead_exclusive` (the
/// exclusive ones).
#[derive(Debug, Clone, Copy, Default)]
struct Expanded {
    exclusive_holders: bool,
    shared_holders: bool,
    ahead_all: usize,
    ahead_exclusive: usize,
}

/// A depth-first search of the wait-for graph for a path back to `owner`.
struct Search<'a> {
    owner: &'a str,
    /// Every owner reached, and the owner it was reached from.
    came_from: BTreeMap<String, String>,
    /// Owners to visit, with where they were found waiting, if they were.
    stack: Vec<(String, Option<(Resource, Place)>)>,
    expanded: BTreeMap<Resource, Expanded>,
}

impl Search<'_> {
    /// Follows the edge `from` → `to` (found at `at`): the cycle if `to` is the owner.
    fn step(&mut self, from: &str, to: String, at: Option<(Resource, Place)>) -> Result<(), LockError> {
        if to == self.owner {
            return Err(cycle_to(self.owner, from, &self.came_from));
        }
        if to != from && !self.came_from.contains_key(&to) {
            self.came_from.insert(to.clone(), from.to_owned());
            self.stack.push((to, at));
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
