//! What happened to a lock, as applied from the log, and who caused it. The
//! state machine publishes these to waiting requests and to
//! `GET /v1/locks/{name}/events`.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{FencingToken, Principal, SessionId};

/// One change to one lock, stamped with the index of the log entry that made
/// it and who caused it; or, with an empty `name` (no lock has it), a
/// session's start or end, or a change of users and roles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockEvent {
    pub index: u64,
    pub name: String,
    #[serde(flatten)]
    pub kind: EventKind,
    /// Who caused it: the principal whose command made it, also for what
    /// that command caused in turn (a release's hand-over to a waiter is
    /// `by` the releaser; the event's `owner` names who got the lock); the
    /// cluster for everything a Tick does (expiries, ends of lock delays
    /// and waits, what they hand over, sessions that expire).
    pub by: Actor,
}

/// Who caused an event ([`LockEvent::by`]), as its text: `user:NAME`,
/// `client`, `admin`, `cluster`, or `unknown` for a command of an entry
/// written before entries recorded who proposed each command.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Actor {
    /// The cluster itself: the leader's Ticks, and all they cause.
    Cluster,
    /// Not recorded: a command of an entry from before entries carried it
    /// (or an event from a server that does not send it).
    #[default]
    Unknown,
    /// The principal whose request proposed the command.
    Principal(Principal),
}

impl Actor {
    /// Who caused the events of `command`, proposed by `by` (recorded with
    /// it in its entry, `None` when not): a Tick is always the cluster's.
    pub fn of(command: &super::Command, by: Option<&Principal>) -> Actor {
        match (command, by) {
            (super::Command::Tick { .. }, _) => Actor::Cluster,
            (_, Some(principal)) => Actor::Principal(principal.clone()),
            (_, None) => Actor::Unknown,
        }
    }
}

/// The prefix of a user's name in an actor's text.
const USER_PREFIX: &str = "user:";

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Cluster => f.write_str("cluster"),
            Actor::Unknown => f.write_str("unknown"),
            Actor::Principal(Principal::Client) => f.write_str("client"),
            Actor::Principal(Principal::Admin) => f.write_str("admin"),
            Actor::Principal(Principal::User(name)) => write!(f, "{USER_PREFIX}{name}"),
        }
    }
}

impl std::str::FromStr for Actor {
    type Err = String;

    fn from_str(s: &str) -> Result<Actor, String> {
        Ok(match s {
            "cluster" => Actor::Cluster,
            "unknown" => Actor::Unknown,
            "client" => Actor::Principal(Principal::Client),
            "admin" => Actor::Principal(Principal::Admin),
            _ => match s.strip_prefix(USER_PREFIX) {
                Some(name) if !name.is_empty() => Actor::Principal(Principal::User(name.to_owned())),
                _ => return Err(format!("{s:?} is not user:NAME, client, admin, cluster or unknown")),
            },
        })
    }
}

impl Serialize for Actor {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Actor {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Actor, D::Error> {
        String::deserialize(deserializer)?.parse().map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// A free lock was granted (token = `index`): to a new acquire, or to
    /// the first waiter when a lock delay ends.
    Acquired {
        owner: String,
        token: FencingToken,
    },
    /// The holder restarted its lease (also a same-owner re-acquire).
    Renewed {
        owner: String,
        token: FencingToken,
    },
    Released {
        owner: String,
        token: FencingToken,
        /// Ticks from the grant to this end: how long the lease was held.
        held_ticks: u64,
    },
    /// A Tick reached the lease's deadline. With `delayed_until_tick` the
    /// lease had a lock delay: the lock stays free for everyone until that
    /// tick (event `delay_ended`), and is not handed over before.
    Expired {
        owner: String,
        token: FencingToken,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delayed_until_tick: Option<u64>,
        /// Ticks from the grant to this end: how long the lease was held.
        held_ticks: u64,
    },
    /// The lock delay after the expiry of `owner`'s lease under `token`
    /// ended: the lock may be granted again (in this entry, to its first
    /// waiter, if any).
    DelayEnded {
        owner: String,
        token: FencingToken,
    },
    /// The lock passed to the first waiter in the entry that freed it
    /// (token = `index`).
    HandedOver {
        owner: String,
        token: FencingToken,
        from_owner: String,
        from_token: FencingToken,
    },
    /// `owner` joined the queue at `position` (1 = next).
    Queued {
        owner: String,
        position: usize,
    },
    /// `owner`'s wait ran out before the lock passed to it.
    WaitTimeout {
        owner: String,
    },
    /// `owner` left the queue because its client went away, or because
    /// the session it waited under ended.
    Cancelled {
        owner: String,
    },
    /// `owner` opened `session` (its id is `index`).
    SessionCreated {
        owner: String,
        session: SessionId,
        ttl_ms: u64,
    },
    /// A Tick reached the session's deadline; its locks expired in this
    /// entry (events `expired`, before this one).
    SessionExpired {
        owner: String,
        session: SessionId,
    },
    /// The session was deleted; its locks were released in this entry.
    SessionDeleted {
        owner: String,
        session: SessionId,
    },
    /// `owner`, leader of the election `name` under `token`, announces
    /// `value` (JSON text): when it is elected (after the `acquired` or
    /// `handed_over` event of the same entry) and when it proclaims.
    Proclaimed {
        owner: String,
        token: FencingToken,
        value: String,
    },
    /// Semaphore `name` granted `permits` to `owner` (token = `index`): a
    /// new acquire, or a waiter that now fits. Semaphore events have kinds
    /// of their own, so a lock and a semaphore of one name never wake each
    /// other's waiters.
    PermitsGranted {
        owner: String,
        token: FencingToken,
        permits: u32,
    },
    PermitsRenewed {
        owner: String,
        token: FencingToken,
    },
    PermitsReleased {
        owner: String,
        token: FencingToken,
        permits: u32,
    },
    /// A Tick reached the permits' deadline: they are free again.
    PermitsExpired {
        owner: String,
        token: FencingToken,
        permits: u32,
    },
    /// `owner` joined the semaphore's queue at `position` (1 = next).
    PermitsQueued {
        owner: String,
        permits: u32,
        position: usize,
    },
    /// `owner` left the semaphore's queue ungranted: its wait ran out
    /// (`timed_out`) or its client went away.
    PermitWaitEnded {
        owner: String,
        timed_out: bool,
    },
    /// Users and roles changed (no lock name; only admins read it): what
    /// changed (`user_added`, `user_removed`, `token_added`,
    /// `token_revoked`, `role_added`, `role_removed`, `granted`, `revoked`,
    /// `role_assigned`, `role_unassigned`), the user or role changed, and
    /// the rest (a token's id, never the token; a grant; a role).
    AccessChanged {
        change: String,
        subject: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
}

impl EventKind {
    /// The owner the event is about.
    pub fn owner(&self) -> &str {
        match self {
            EventKind::Acquired { owner, .. }
            | EventKind::Renewed { owner, .. }
            | EventKind::Released { owner, .. }
            | EventKind::Expired { owner, .. }
            | EventKind::DelayEnded { owner, .. }
            | EventKind::HandedOver { owner, .. }
            | EventKind::Queued { owner, .. }
            | EventKind::WaitTimeout { owner }
            | EventKind::Cancelled { owner }
            | EventKind::SessionCreated { owner, .. }
            | EventKind::SessionExpired { owner, .. }
            | EventKind::SessionDeleted { owner, .. }
            | EventKind::Proclaimed { owner, .. }
            | EventKind::PermitsGranted { owner, .. }
            | EventKind::PermitsRenewed { owner, .. }
            | EventKind::PermitsReleased { owner, .. }
            | EventKind::PermitsExpired { owner, .. }
            | EventKind::PermitsQueued { owner, .. }
            | EventKind::PermitWaitEnded { owner, .. } => owner,
            // No owner: the user or role it changed.
            EventKind::AccessChanged { subject, .. } => subject,
        }
    }

    /// The event of an applied change of users and roles, `None` for any
    /// other command. A token added by the entry at `index` has that id.
    pub fn access_changed(command: &super::Command, index: u64) -> Option<EventKind> {
        use super::Command as C;
        let token = |id: u64| Some(format!("token {id}"));
        let grant = |permission: &super::Permission, prefix: &str| Some(format!("{permission} on {prefix:?}"));
        let (change, subject, detail) = match command {
            C::AddUser { user, token: first } => ("user_added", user, first.as_ref().and_then(|_| token(index))),
            C::RemoveUser { user } => ("user_removed", user, None),
            C::AddToken { user, .. } => ("token_added", user, token(index)),
            C::RevokeToken { user, token_id } => ("token_revoked", user, token(*token_id)),
            C::AddRole { role } => ("role_added", role, None),
            C::RemoveRole { role } => ("role_removed", role, None),
            C::GrantPermission { role, permission, prefix } => ("granted", role, grant(permission, prefix)),
            C::RevokePermission { role, permission, prefix } => ("revoked", role, grant(permission, prefix)),
            C::AssignRole { user, role } => ("role_assigned", user, Some(role.clone())),
            C::UnassignRole { user, role } => ("role_unassigned", user, Some(role.clone())),
            _ => return None,
        };
        Some(EventKind::AccessChanged { change: change.to_owned(), subject: subject.clone(), detail })
    }
}
