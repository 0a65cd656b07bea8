//! Users and roles: `/v1/auth/*` (admin), and `/v1/auth/whoami` (any caller).
//!
//! A user signs in with a bearer token the cluster made for it, shown once
//! (the cluster keeps only its SHA-256); a role grants permissions on name
//! prefixes, and a user may everything its roles grant.

use serde::{Deserialize, Serialize};

/// What a role may grant on a name prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// Read locks, semaphores, elections, sessions, records and events; check tokens.
    Read,
    /// Acquire, renew and release locks, permits and leaderships; sessions.
    Lock,
    /// Write fenced records, pass gates.
    Fence,
    /// Everything, and the admin API; counts on the prefix `""` (every name) only.
    Admin,
}

impl From<Permission> for leasehold_core::Permission {
    fn from(p: Permission) -> Self {
        match p {
            Permission::Read => leasehold_core::Permission::Read,
            Permission::Lock => leasehold_core::Permission::Lock,
            Permission::Fence => leasehold_core::Permission::Fence,
            Permission::Admin => leasehold_core::Permission::Admin,
        }
    }
}

impl From<leasehold_core::Permission> for Permission {
    fn from(p: leasehold_core::Permission) -> Self {
        match p {
            leasehold_core::Permission::Read => Permission::Read,
            leasehold_core::Permission::Lock => Permission::Lock,
            leasehold_core::Permission::Fence => Permission::Fence,
            leasehold_core::Permission::Admin => Permission::Admin,
        }
    }
}

/// `POST /v1/auth/users`: a new user, with a first token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateUserRequest {
    /// 1 to 128 ASCII letters, digits, `-`, `_`, `.`, `@`.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::principal_name))]
    pub name: String,
}

/// A token made for a user: shown this once, never again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenCreated {
    pub user: String,
    /// Names the token to revoke it (the index of the entry that added it).
    pub token_id: u64,
    /// `authorization: Bearer <token>`. The cluster keeps only its SHA-256.
    pub token: String,
}

/// A user: its roles and the ids of its live tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserView {
    pub name: String,
    pub token_ids: Vec<u64>,
    pub roles: Vec<String>,
}

impl From<leasehold_core::UserView> for UserView {
    fn from(u: leasehold_core::UserView) -> Self {
        UserView { name: u.name, token_ids: u.token_ids, roles: u.roles }
    }
}

/// `GET /v1/auth/users`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserList {
    pub users: Vec<UserView>,
}

/// `POST /v1/auth/roles`: a new role, granting nothing yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateRoleRequest {
    /// 1 to 128 ASCII letters, digits, `-`, `_`, `.`, `@`.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::principal_name))]
    pub name: String,
}

/// A permission on the names that start with `prefix` (`""`: every name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GrantView {
    pub permission: Permission,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::prefix))]
    pub prefix: String,
}

/// A role and what it grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RoleView {
    pub name: String,
    pub grants: Vec<GrantView>,
}

impl From<leasehold_core::RoleView> for RoleView {
    fn from(r: leasehold_core::RoleView) -> Self {
        let grants = r.grants.into_iter().map(|(p, prefix)| GrantView { permission: p.into(), prefix }).collect();
        RoleView { name: r.name, grants }
    }
}

/// `GET /v1/auth/roles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RoleList {
    pub roles: Vec<RoleView>,
}

/// `POST /v1/auth/users/{name}/roles`: give the user a role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AssignRoleRequest {
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::schema::principal_name))]
    pub role: String,
}

/// The answer to a removal or a revoke: what is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Removed {
    /// `user`, `role` or `token`.
    pub what: String,
    pub name: String,
    pub removed: bool,
}

/// `GET /v1/auth/whoami`: the principal the caller is, how it was identified, and what it
/// may (the built-in tokens' grants are shown as the rule applies them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WhoAmI {
    /// `client` (the client token), `admin` (the admin token, or a node
    /// without secrets) or `user`.
    pub kind: String,
    /// The user's name; absent for the built-in principals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// How the caller was identified: `token` (a bearer token),
    /// `certificate` (a client certificate's Common Name, with no token) or
    /// `none` (a node without secrets). Absent from earlier versions' nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    pub grants: Vec<GrantView>,
}
