//! Who may do what to which names: users with bearer tokens (kept only as
//! hashes), roles that grant permissions on name prefixes, and the one rule
//! every request is authorized by ([`Access::may`]).
//!
//! Users and roles are part of the replicated table: every change is a
//! command applied at its log index, so it takes effect on every replica at
//! the same index and survives restarts, snapshots and backups like a lease.
//! The core never sees a token: the node hashes it (SHA-256 of a
//! high-entropy random token) and the commands and rows carry the hash.
//!
//! The rule: a principal may use `permission` on a name when one of its
//! roles grants that permission (or `admin`, which implies the others) on a
//! prefix of the name; a request that touches several names needs it on
//! every one of them, or is refused whole. The two built-in principals keep
//! the tokens of earlier versions working: the client token may `read`,
//! `lock` and `fence` every name, the admin token may everything.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::tracked::Tracked;
use crate::LockError;

/// Users at most: each is a row, and every node keeps them all in memory.
pub const MAX_USERS: usize = 10_000;
/// Roles at most.
pub const MAX_ROLES: usize = 10_000;
/// Live tokens of one user at most (a few, to rotate without downtime).
pub const MAX_TOKENS_PER_USER: usize = 16;
/// Roles one user has at most.
pub const MAX_ROLES_PER_USER: usize = 64;
/// Grants one role has at most: each request checks a user's grants.
pub const MAX_GRANTS_PER_ROLE: usize = 256;

/// What a role may grant on a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// Read locks, semaphores, elections, sessions, records, events; check a token.
    Read,
    /// Acquire, renew and release locks, permits, leaderships; sessions.
    Lock,
    /// Write fenced records and pass gates.
    Fence,
    /// Everything above, and on every name (prefix `""`): membership,
    /// snapshots, backups, users and roles.
    Admin,
}

impl Permission {
    pub const ALL: [Permission; 4] = [Permission::Read, Permission::Lock, Permission::Fence, Permission::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Lock => "lock",
            Permission::Fence => "fence",
            Permission::Admin => "admin",
        }
    }

    /// Whether a grant of `self` allows `wanted`: `admin` allows all.
    fn allows(self, wanted: Permission) -> bool {
        self == wanted || self == Permission::Admin
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Permission {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Permission::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not a permission (read, lock, fence, admin)"))
    }
}

/// Who a request comes from, once its credential is resolved.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum Principal {
    /// The node's client token: `read`, `lock` and `fence` on every name.
    Client,
    /// The node's admin token (or a node without secrets): everything.
    Admin,
    /// A user of the table, by name.
    User(String),
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Client => f.write_str("the client token"),
            Principal::Admin => f.write_str("the admin token"),
            Principal::User(name) => write!(f, "user {name:?}"),
        }
    }
}

/// A refusal by [`Access::may`]: `principal` lacks `permission` on `name`
/// (a lock name, or for a list the prefix asked for).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{principal} may not {permission} {name:?}: no role grants {permission} on a prefix of it")]
pub struct Denied {
    pub principal: String,
    pub permission: Permission,
    pub name: String,
}

/// One user: its tokens' hashes by id (the index of the entry that added
/// the token), and its roles.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub tokens: BTreeMap<u64, TokenHash>,
    pub roles: BTreeSet<String>,
}

/// One role: the permissions it grants, each on a name prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    pub grants: BTreeSet<(Permission, String)>,
}

/// The SHA-256 of a token, as 64 lowercase hex digits: all the table keeps.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TokenHash(pub String);

impl TokenHash {
    /// Whether it has the form of a SHA-256 in lowercase hex.
    pub fn is_well_formed(&self) -> bool {
        self.0.len() == 64 && self.0.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }
}

/// A user as a lister sees it: no hashes, the ids of its tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserView {
    pub name: String,
    pub token_ids: Vec<u64>,
    pub roles: Vec<String>,
}

/// A role as a lister sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleView {
    pub name: String,
    pub grants: Vec<(Permission, String)>,
}

/// The users and roles of the table, and the index from token hash to user.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub(crate) users: Tracked<String, User>,
    pub(crate) roles: Tracked<String, Role>,
    /// Every live token's hash, to its user and id: rebuilt on load.
    by_hash: HashMap<TokenHash, (String, u64)>,
}

impl PartialEq for Access {
    fn eq(&self, other: &Self) -> bool {
        self.users == other.users && self.roles == other.roles
    }
}

impl Eq for Access {}

impl Access {
    pub(crate) fn from_maps(users: BTreeMap<String, User>, roles: BTreeMap<String, Role>) -> Access {
        let by_hash = users
            .iter()
            .flat_map(|(name, u)| u.tokens.iter().map(move |(id, h)| (h.clone(), (name.clone(), *id))))
            .collect();
        Access { users: users.into(), roles: roles.into(), by_hash }
    }

    /// The user a token hash belongs to, if it is live.
    pub fn user_of(&self, hash: &TokenHash) -> Option<&str> {
        self.by_hash.get(hash).map(|(user, _)| user.as_str())
    }

    /// Whether `name` is a user: how a name from elsewhere than a token (a
    /// client certificate's subject) is checked, at the same entry as tokens.
    pub fn is_user(&self, name: &str) -> bool {
        self.users.contains_key(name)
    }

    /// `Ok` when `principal` may use `permission` on every name of `names`;
    /// else the first name it may not (the request is refused whole).
    pub fn may<'n>(
        &self,
        principal: &Principal,
        permission: Permission,
        names: impl IntoIterator<Item = &'n str>,
    ) -> Result<(), Denied> {
        let grants = match principal {
            Principal::Admin => return Ok(()),
            Principal::Client if permission != Permission::Admin => return Ok(()),
            Principal::Client => None,
            Principal::User(user) => self.users.get(user),
        };
        let grants: Vec<&(Permission, String)> = grants
            .into_iter()
            .flat_map(|u| u.roles.iter().filter_map(|r| self.roles.get(r)))
            .flat_map(|r| r.grants.iter())
            .filter(|(granted, _)| granted.allows(permission))
            .collect();
        for name in names {
            // `admin` is granted on every name or on none: a prefix admin
            // could make itself admin of everything through users and roles.
            let allowed = grants.iter().any(|(granted, prefix)| {
                name.starts_with(prefix.as_str()) && (*granted != Permission::Admin || prefix.is_empty())
            });
            if !allowed {
                return Err(Denied { principal: principal.to_string(), permission, name: name.to_owned() });
            }
        }
        Ok(())
    }

    /// `Ok` when `principal` may `permission` at least on some name: what
    /// an operation that names none (a session of its own) asks.
    pub fn may_some(&self, principal: &Principal, permission: Permission) -> Result<(), Denied> {
        let some = match principal {
            Principal::Admin => true,
            Principal::Client => permission != Permission::Admin,
            Principal::User(user) => self
                .users
                .get(user)
                .into_iter()
                .flat_map(|u| u.roles.iter().filter_map(|r| self.roles.get(r)))
                .flat_map(|r| r.grants.iter())
                .any(|(granted, prefix)| {
                    granted.allows(permission) && (*granted != Permission::Admin || prefix.is_empty())
                }),
        };
        match some {
            true => Ok(()),
            false => Err(Denied { principal: principal.to_string(), permission, name: String::new() }),
        }
    }

    pub fn users(&self) -> Vec<UserView> {
        self.users
            .iter()
            .map(|(name, u)| UserView {
                name: name.clone(),
                token_ids: u.tokens.keys().copied().collect(),
                roles: u.roles.iter().cloned().collect(),
            })
            .collect()
    }

    pub fn roles(&self) -> Vec<RoleView> {
        self.roles
            .iter()
            .map(|(name, r)| RoleView { name: name.clone(), grants: r.grants.iter().cloned().collect() })
            .collect()
    }

    fn user_mut(&mut self, user: &str) -> Result<&mut User, LockError> {
        self.users.get_mut(user).ok_or_else(|| LockError::NoUser { user: user.to_owned() })
    }

    fn role_mut(&mut self, role: &str) -> Result<&mut Role, LockError> {
        self.roles.get_mut(role).ok_or_else(|| LockError::NoRole { role: role.to_owned() })
    }

    fn check_token_free(&self, hash: &TokenHash) -> Result<(), LockError> {
        // Tokens are random and 256 bits: a hash already in use is a replay
        // of the same token, refused so one token never names two users.
        match self.by_hash.contains_key(hash) {
            true => Err(LockError::Exists { what: "token".into(), name: String::new() }),
            false => Ok(()),
        }
    }

    /// Adds `user`, with a first token (id `index`) when `token` is given.
    pub(crate) fn add_user(&mut self, user: &str, token: Option<&TokenHash>, index: u64) -> Result<(), LockError> {
        if self.users.contains_key(user) {
            return Err(LockError::Exists { what: "user".into(), name: user.to_owned() });
        }
        if self.users.len() >= MAX_USERS {
            return Err(LockError::Full { what: "users".into(), limit: MAX_USERS });
        }
        let mut new = User::default();
        if let Some(hash) = token {
            self.check_token_free(hash)?;
            new.tokens.insert(index, hash.clone());
            self.by_hash.insert(hash.clone(), (user.to_owned(), index));
        }
        self.users.insert(user.to_owned(), new);
        Ok(())
    }

    pub(crate) fn remove_user(&mut self, user: &str) -> Result<(), LockError> {
        let removed = self.users.remove(user).ok_or_else(|| LockError::NoUser { user: user.to_owned() })?;
        for hash in removed.tokens.values() {
            self.by_hash.remove(hash);
        }
        Ok(())
    }

    /// Adds a token to `user` under id `index`.
    pub(crate) fn add_token(&mut self, user: &str, hash: &TokenHash, index: u64) -> Result<(), LockError> {
        self.check_token_free(hash)?;
        let found = self.user_mut(user)?;
        if found.tokens.len() >= MAX_TOKENS_PER_USER {
            return Err(LockError::Full { what: "tokens of one user".into(), limit: MAX_TOKENS_PER_USER });
        }
        found.tokens.insert(index, hash.clone());
        self.by_hash.insert(hash.clone(), (user.to_owned(), index));
        Ok(())
    }

    pub(crate) fn revoke_token(&mut self, user: &str, token_id: u64) -> Result<(), LockError> {
        let found = self.user_mut(user)?;
        let hash =
            found.tokens.remove(&token_id).ok_or_else(|| LockError::NoToken { user: user.to_owned(), token_id })?;
        self.by_hash.remove(&hash);
        Ok(())
    }

    pub(crate) fn add_role(&mut self, role: &str) -> Result<(), LockError> {
        if self.roles.contains_key(role) {
            return Err(LockError::Exists { what: "role".into(), name: role.to_owned() });
        }
        if self.roles.len() >= MAX_ROLES {
            return Err(LockError::Full { what: "roles".into(), limit: MAX_ROLES });
        }
        self.roles.insert(role.to_owned(), Role::default());
        Ok(())
    }

    /// Removes `role`, and takes it from every user that has it.
    pub(crate) fn remove_role(&mut self, role: &str) -> Result<(), LockError> {
        self.roles.remove(role).ok_or_else(|| LockError::NoRole { role: role.to_owned() })?;
        let holders: Vec<String> =
            self.users.iter().filter(|(_, u)| u.roles.contains(role)).map(|(n, _)| n.clone()).collect();
        for user in holders {
            if let Some(u) = self.users.get_mut(&user) {
                u.roles.remove(role);
            }
        }
        Ok(())
    }

    /// Grants `permission` on `prefix` to `role` (a no-op if it has it).
    pub(crate) fn grant(&mut self, role: &str, permission: Permission, prefix: &str) -> Result<(), LockError> {
        let found = self.role_mut(role)?;
        let grant = (permission, prefix.to_owned());
        if !found.grants.contains(&grant) && found.grants.len() >= MAX_GRANTS_PER_ROLE {
            return Err(LockError::Full { what: "grants of one role".into(), limit: MAX_GRANTS_PER_ROLE });
        }
        found.grants.insert(grant);
        Ok(())
    }

    /// Takes `permission` on exactly `prefix` from `role` (a no-op if it lacks it).
    pub(crate) fn revoke(&mut self, role: &str, permission: Permission, prefix: &str) -> Result<(), LockError> {
        self.role_mut(role)?.grants.remove(&(permission, prefix.to_owned()));
        Ok(())
    }

    /// Gives `role` to `user` (a no-op if it has it).
    pub(crate) fn assign(&mut self, user: &str, role: &str) -> Result<(), LockError> {
        if !self.roles.contains_key(role) {
            return Err(LockError::NoRole { role: role.to_owned() });
        }
        let found = self.user_mut(user)?;
        if !found.roles.contains(role) && found.roles.len() >= MAX_ROLES_PER_USER {
            return Err(LockError::Full { what: "roles of one user".into(), limit: MAX_ROLES_PER_USER });
        }
        found.roles.insert(role.to_owned());
        Ok(())
    }

    /// Takes `role` from `user` (a no-op if it lacks it).
    pub(crate) fn unassign(&mut self, user: &str, role: &str) -> Result<(), LockError> {
        self.user_mut(user)?.roles.remove(role);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Command, LockTable, Outcome, TableImage, TableLoader};

    fn hash(n: u8) -> TokenHash {
        TokenHash(format!("{n:02x}").repeat(32))
    }

    fn user(name: &str) -> Principal {
        Principal::User(name.into())
    }

    /// A table where `alice` (token 1) has role `team-a`: lock and read on
    /// `a/`, fence on `a/records/`; `bob` (token 2) has `ops`: admin on
    /// everything; `carol` has no role.
    fn table() -> LockTable {
        let mut t = LockTable::new();
        let commands = [
            Command::AddUser { user: "alice".into(), token: Some(hash(1)) },
            Command::AddUser { user: "bob".into(), token: Some(hash(2)) },
            Command::AddUser { user: "carol".into(), token: None },
            Command::AddRole { role: "team-a".into() },
            Command::GrantPermission { role: "team-a".into(), permission: Permission::Lock, prefix: "a/".into() },
            Command::GrantPermission { role: "team-a".into(), permission: Permission::Read, prefix: "a/".into() },
            Command::GrantPermission {
                role: "team-a".into(),
                permission: Permission::Fence,
                prefix: "a/records/".into(),
            },
            Command::AssignRole { user: "alice".into(), role: "team-a".into() },
            Command::AddRole { role: "ops".into() },
            Command::GrantPermission { role: "ops".into(), permission: Permission::Admin, prefix: String::new() },
            Command::AssignRole { user: "bob".into(), role: "ops".into() },
        ];
        for (i, c) in commands.iter().enumerate() {
            t.apply(c, i as u64 + 1).result.unwrap_or_else(|e| panic!("{c}: {e}"));
        }
        t
    }

    // Ensures a grant covers exactly the names that start with its prefix,
    // for its permission only.
    #[test]
    fn a_grant_covers_the_names_under_its_prefix() {
        let t = table();
        let a = t.access();
        let alice = user("alice");
        assert_eq!(a.may(&alice, Permission::Lock, ["a/x"]), Ok(()));
        assert_eq!(a.may(&alice, Permission::Lock, ["a/"]), Ok(()));
        assert_eq!(a.may(&alice, Permission::Read, ["a/deep/er"]), Ok(()));
        let denied = a.may(&alice, Permission::Lock, ["b/x"]).unwrap_err();
        assert_eq!((denied.permission, denied.name.as_str()), (Permission::Lock, "b/x"));
        assert!(a.may(&alice, Permission::Lock, ["a"]).is_err(), "a prefix is text, not a path: 'a' is not under 'a/'");
        assert!(a.may(&alice, Permission::Fence, ["a/x"]).is_err(), "lock does not imply fence");
        assert_eq!(a.may(&alice, Permission::Fence, ["a/records/1"]), Ok(()));
        assert!(a.may(&alice, Permission::Admin, [""]).is_err());
        assert!(a.may(&user("carol"), Permission::Read, ["a/x"]).is_err(), "no role, no permission");
        assert!(a.may(&user("nobody"), Permission::Read, ["a/x"]).is_err(), "an unknown user may nothing");
    }

    // Ensures a multi-name request is allowed only when every name is, and
    // the refusal names the first name that is not.
    #[test]
    fn every_name_of_a_request_must_be_allowed() {
        let t = table();
        let alice = user("alice");
        assert_eq!(t.access().may(&alice, Permission::Lock, ["a/1", "a/2"]), Ok(()));
        let denied = t.access().may(&alice, Permission::Lock, ["a/1", "b/2", "c/3"]).unwrap_err();
        assert_eq!(denied.name, "b/2");
        assert_eq!(denied.principal, "user \"alice\"");
    }

    // Ensures the built-in principals keep what the two tokens opened.
    #[test]
    fn built_in_principals_keep_what_the_tokens_opened() {
        let t = LockTable::new();
        let a = t.access();
        for p in [Permission::Read, Permission::Lock, Permission::Fence] {
            assert_eq!(a.may(&Principal::Client, p, ["any", "x/y"]), Ok(()));
            assert_eq!(a.may_some(&Principal::Client, p), Ok(()));
        }
        assert!(a.may(&Principal::Client, Permission::Admin, [""]).is_err());
        assert!(a.may_some(&Principal::Client, Permission::Admin).is_err());
        for p in Permission::ALL {
            assert_eq!(a.may(&Principal::Admin, p, ["any"]), Ok(()));
        }
    }

    // Ensures admin on every name implies the other permissions, and admin
    // on a narrower prefix counts for nothing (it could grant itself more).
    #[test]
    fn admin_counts_on_every_name_only() {
        let mut t = table();
        let bob = user("bob");
        for p in Permission::ALL {
            assert_eq!(t.access().may(&bob, p, ["anything"]), Ok(()));
        }
        let grant =
            Command::GrantPermission { role: "team-a".into(), permission: Permission::Admin, prefix: "a/".into() };
        t.apply(&grant, 100).result.unwrap();
        let alice = user("alice");
        assert!(t.access().may(&alice, Permission::Admin, ["a/x"]).is_err());
        assert!(t.access().may(&alice, Permission::Admin, [""]).is_err());
        assert!(t.access().may_some(&alice, Permission::Admin).is_err());
        assert!(t.access().may(&alice, Permission::Fence, ["a/x"]).is_err(), "a prefix admin implies nothing");
    }

    // Ensures tokens resolve to their user until revoked, or until the user
    // is removed, and that a revoke touches only its token.
    #[test]
    fn tokens_resolve_until_revoked() {
        let mut t = table();
        assert_eq!(t.access().user_of(&hash(1)), Some("alice"));
        let added = t.apply(&Command::AddToken { user: "alice".into(), token: hash(3) }, 50).result;
        assert_eq!(added, Ok(Outcome::AccessChanged { token_id: Some(50) }));
        assert_eq!(t.access().user_of(&hash(3)), Some("alice"));
        t.apply(&Command::RevokeToken { user: "alice".into(), token_id: 1 }, 51).result.unwrap();
        assert_eq!(t.access().user_of(&hash(1)), None);
        assert_eq!(t.access().user_of(&hash(3)), Some("alice"));
        t.apply(&Command::RemoveUser { user: "alice".into() }, 52).result.unwrap();
        assert_eq!(t.access().user_of(&hash(3)), None);
        assert!(t.access().may(&user("alice"), Permission::Read, ["a/x"]).is_err());
    }

    // Ensures every refused change leaves users and roles as they were.
    #[test]
    fn refused_changes_change_nothing() {
        let mut t = table();
        let before = t.clone();
        let refused = [
            (Command::AddUser { user: "alice".into(), token: None }, "exists"),
            (Command::AddUser { user: "dave".into(), token: Some(hash(1)) }, "exists"),
            (Command::AddToken { user: "alice".into(), token: hash(2) }, "exists"),
            (Command::AddToken { user: "nobody".into(), token: hash(9) }, "no_user"),
            (Command::RevokeToken { user: "alice".into(), token_id: 999 }, "no_token"),
            (Command::RemoveRole { role: "nope".into() }, "no_role"),
            (Command::AssignRole { user: "alice".into(), role: "nope".into() }, "no_role"),
            (Command::AssignRole { user: "nope".into(), role: "ops".into() }, "no_user"),
            (
                Command::GrantPermission { role: "nope".into(), permission: Permission::Read, prefix: "".into() },
                "no_role",
            ),
            (Command::AddUser { user: "has space".into(), token: None }, "invalid"),
            (Command::AddToken { user: "alice".into(), token: TokenHash("XYZ".into()) }, "invalid"),
            (
                Command::GrantPermission { role: "ops".into(), permission: Permission::Read, prefix: "a\nb".into() },
                "invalid",
            ),
        ];
        for (i, (command, code)) in refused.iter().enumerate() {
            let error = t.apply(command, 200 + i as u64).result.expect_err("refused");
            let json = serde_json::to_value(&error).unwrap();
            assert_eq!(json["error"], *code, "{command}: {error}");
        }
        assert_eq!(t, before);
        assert_eq!(t.access().user_of(&hash(9)), None);
    }

    // Ensures removing a role takes it from its users, and a user whose
    // role is gone may nothing it granted.
    #[test]
    fn removing_a_role_takes_it_from_users() {
        let mut t = table();
        t.apply(&Command::RemoveRole { role: "team-a".into() }, 60).result.unwrap();
        let alice = t.access().users().into_iter().find(|u| u.name == "alice").unwrap();
        assert!(alice.roles.is_empty());
        assert!(t.access().may(&user("alice"), Permission::Lock, ["a/x"]).is_err());
    }

    // Ensures a session keeps the user that opened it, and a built-in's none.
    #[test]
    fn a_session_keeps_who_opened_it() {
        let mut t = table();
        let open = |by: Option<&str>| Command::CreateSession {
            owner: "o".into(),
            ttl_ms: 5000,
            request_id: None,
            by: by.map(str::to_owned),
        };
        t.apply(&open(Some("alice")), 70).result.unwrap();
        t.apply(&open(None), 71).result.unwrap();
        assert_eq!(t.session_opened_by(70), Some(Some("alice")));
        assert_eq!(t.session_opened_by(71), Some(None));
        assert_eq!(t.session_opened_by(72), None);
        let bad = open(Some("not a name"));
        assert!(t.apply(&bad, 73).result.is_err(), "a malformed user is refused");
    }

    // Ensures users and roles survive the table's rows (checkpoints,
    // snapshots, backups) and its image, token index included, and that an
    // image from before users existed loads with none.
    #[test]
    fn users_and_roles_survive_rows_and_images() {
        let t = table();
        let mut loader = TableLoader::default();
        for row in t.rows() {
            let bytes = rmp_serde::to_vec(&row.value.expect("a value")).unwrap();
            loader.load(row.tree, &row.key, &mut rmp_serde::Deserializer::new(&bytes[..])).unwrap();
        }
        let loaded = loader.finish();
        assert_eq!(loaded, t);
        assert_eq!(loaded.access().user_of(&hash(1)), Some("alice"));
        assert_eq!(loaded.access().may(&user("alice"), Permission::Lock, ["a/x"]), Ok(()));

        let json = serde_json::to_value(TableImage::from(&t)).unwrap();
        let image: TableImage = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(LockTable::from(image).access().user_of(&hash(2)), Some("bob"));
        let mut old = json;
        old.as_object_mut().unwrap().remove("users");
        old.as_object_mut().unwrap().remove("roles");
        let image: TableImage = serde_json::from_value(old).unwrap();
        assert!(LockTable::from(image).access().users().is_empty());
    }
}
