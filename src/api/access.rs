//! Users and roles, under `/v1/auth/` (the admin API, served by the
//! leader), and `GET /v1/auth/whoami` (the client API).
//!
//! Every change is one command through the Raft log, so it takes effect on
//! every node at the entry that makes it and survives restarts, snapshots
//! and backups. A user's token is made here, on the leader, from 32 random
//! bytes; the log, the table and the backups hold only its SHA-256, and the
//! answer that creates it is the only place it is ever shown.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::{delete, get, post};
use axum::Extension;
use axum::{Json, Router};

use super::auth::{new_user_token, token_hash, Authz, Credential};
use super::{propose, unexpected, ApiError, ApiJson, ApiPath};
use crate::node::Node;
use leasehold_core::{Command, Outcome, Permission, Principal};
use leasehold_proto::auth::{
    AssignRoleRequest, CreateRoleRequest, CreateUserRequest, GrantView, Removed, RoleList, RoleView, TokenCreated,
    UserList, UserView, WhoAmI,
};
use leasehold_proto::ErrorCode;

/// The admin API's users and roles: served by the leader.
pub fn admin_routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/v1/auth/users", get(list_users).post(create_user))
        .route("/v1/auth/users/{name}", delete(remove_user))
        .route("/v1/auth/users/{name}/tokens", post(add_token))
        .route("/v1/auth/users/{name}/tokens/{id}", delete(revoke_token))
        .route("/v1/auth/users/{name}/roles", post(assign_role))
        .route("/v1/auth/users/{name}/roles/{role}", delete(unassign_role))
        .route("/v1/auth/roles", get(list_roles).post(create_role))
        .route("/v1/auth/roles/{name}", delete(remove_role))
        .route("/v1/auth/roles/{name}/grants", post(grant))
        .route("/v1/auth/roles/{name}/revoke", post(revoke))
}

/// Any caller's own principal and grants.
pub fn client_routes() -> Router<Arc<Node>> {
    Router::new().route("/v1/auth/whoami", get(whoami))
}

/// Users and roles are the cluster's administration: `admin` on every name.
fn may_administer(authz: &Authz, node: &Node) -> Result<(), ApiError> {
    authz.may(node, Permission::Admin, [""])
}

/// Proposes a change of users or roles that adds no token.
async fn change(node: &Node, authz: &Authz, command: Command) -> Result<(), ApiError> {
    match propose_change(node, authz, command).await? {
        Outcome::AccessChanged { .. } => Ok(()),
        other => Err(unexpected(other)),
    }
}

/// Proposes a change of users or roles, and logs who made it once applied
/// (the audit trail of administration; a command's text never holds a token).
async fn propose_change(node: &Node, authz: &Authz, command: Command) -> Result<Outcome, ApiError> {
    let text = command.to_string();
    let outcome = propose(node, authz, command).await?;
    tracing::info!(principal = %authz.0, change = %text, "users and roles changed");
    Ok(outcome)
}

/// A user as applied on this node (the leader, after its change applied).
fn user_view(node: &Node, name: &str) -> Result<Json<UserView>, ApiError> {
    node.locks()
        .read(|t| t.access().users().into_iter().find(|u| u.name == name))
        .map(|u| Json(u.into()))
        .ok_or_else(|| ApiError::new(ErrorCode::NoUser, format!("no user {name:?}")).with("user", name))
}

fn role_view(node: &Node, name: &str) -> Result<Json<RoleView>, ApiError> {
    node.locks()
        .read(|t| t.access().roles().into_iter().find(|r| r.name == name))
        .map(|r| Json(r.into()))
        .ok_or_else(|| ApiError::new(ErrorCode::NoRole, format!("no role {name:?}")).with("role", name))
}

/// `POST /v1/auth/users`: 200 with the user's first token, shown this
/// once; 409 `already_exists`; 400 on a malformed name; 507 `full`.
async fn create_user(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiJson(req): ApiJson<CreateUserRequest>,
) -> Result<Json<TokenCreated>, ApiError> {
    may_administer(&authz, &node)?;
    let token = new_user_token()?;
    let command = Command::AddUser { user: req.name.clone(), token: Some(token_hash(token.as_bytes())) };
    match propose_change(&node, &authz, command).await? {
        Outcome::AccessChanged { token_id: Some(token_id) } => {
            Ok(Json(TokenCreated { user: req.name, token_id, token }))
        }
        other => Err(unexpected(other)),
    }
}

/// `GET /v1/auth/users`: every user with its roles and token ids; linearizable.
async fn list_users(State(node): State<Arc<Node>>, authz: Authz) -> Result<Json<UserList>, ApiError> {
    may_administer(&authz, &node)?;
    let users = node.read(|t| t.access().users()).await?;
    Ok(Json(UserList { users: users.into_iter().map(Into::into).collect() }))
}

/// `DELETE /v1/auth/users/{name}`: 200 once its tokens open nothing; 404 `no_user`.
async fn remove_user(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<Removed>, ApiError> {
    may_administer(&authz, &node)?;
    change(&node, &authz, Command::RemoveUser { user: name.clone() }).await?;
    Ok(Json(Removed { what: "user".into(), name, removed: true }))
}

/// `POST /v1/auth/users/{name}/tokens`: 200 with a new token, shown this
/// once (a user may have several, to rotate without a gap); 404 `no_user`;
/// 507 `full`.
async fn add_token(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<TokenCreated>, ApiError> {
    may_administer(&authz, &node)?;
    let token = new_user_token()?;
    let command = Command::AddToken { user: name.clone(), token: token_hash(token.as_bytes()) };
    match propose_change(&node, &authz, command).await? {
        Outcome::AccessChanged { token_id: Some(token_id) } => Ok(Json(TokenCreated { user: name, token_id, token })),
        other => Err(unexpected(other)),
    }
}

/// `DELETE /v1/auth/users/{name}/tokens/{id}`: 200 once the token opens
/// nothing (on each node from the entry that revoked it); 404 `no_user`, `no_token`.
async fn revoke_token(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath((name, id)): ApiPath<(String, u64)>,
) -> Result<Json<Removed>, ApiError> {
    may_administer(&authz, &node)?;
    change(&node, &authz, Command::RevokeToken { user: name.clone(), token_id: id }).await?;
    Ok(Json(Removed { what: "token".into(), name: format!("{name}/{id}"), removed: true }))
}

/// `POST /v1/auth/users/{name}/roles`: 200 with the user; 404 `no_user`, `no_role`.
async fn assign_role(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<AssignRoleRequest>,
) -> Result<Json<UserView>, ApiError> {
    may_administer(&authz, &node)?;
    change(&node, &authz, Command::AssignRole { user: name.clone(), role: req.role }).await?;
    user_view(&node, &name)
}

/// `DELETE /v1/auth/users/{name}/roles/{role}`: 200 with the user; 404 `no_user`.
async fn unassign_role(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath((name, role)): ApiPath<(String, String)>,
) -> Result<Json<UserView>, ApiError> {
    may_administer(&authz, &node)?;
    change(&node, &authz, Command::UnassignRole { user: name.clone(), role }).await?;
    user_view(&node, &name)
}

/// `POST /v1/auth/roles`: 200 with the role, granting nothing yet; 409
/// `already_exists`; 507 `full`.
async fn create_role(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiJson(req): ApiJson<CreateRoleRequest>,
) -> Result<Json<RoleView>, ApiError> {
    may_administer(&authz, &node)?;
    change(&node, &authz, Command::AddRole { role: req.name.clone() }).await?;
    role_view(&node, &req.name)
}

/// `GET /v1/auth/roles`: every role with its grants; linearizable.
async fn list_roles(State(node): State<Arc<Node>>, authz: Authz) -> Result<Json<RoleList>, ApiError> {
    may_administer(&authz, &node)?;
    let roles = node.read(|t| t.access().roles()).await?;
    Ok(Json(RoleList { roles: roles.into_iter().map(Into::into).collect() }))
}

/// `DELETE /v1/auth/roles/{name}`: 200 once no user has it; 404 `no_role`.
async fn remove_role(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<Removed>, ApiError> {
    may_administer(&authz, &node)?;
    change(&node, &authz, Command::RemoveRole { role: name.clone() }).await?;
    Ok(Json(Removed { what: "role".into(), name, removed: true }))
}

/// `POST /v1/auth/roles/{name}/grants`: 200 with the role; 404 `no_role`; 507 `full`.
async fn grant(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<GrantView>,
) -> Result<Json<RoleView>, ApiError> {
    may_administer(&authz, &node)?;
    let command =
        Command::GrantPermission { role: name.clone(), permission: req.permission.into(), prefix: req.prefix };
    change(&node, &authz, command).await?;
    role_view(&node, &name)
}

/// `POST /v1/auth/roles/{name}/revoke`: 200 with the role, the grant of
/// exactly this permission on exactly this prefix gone; 404 `no_role`.
async fn revoke(
    State(node): State<Arc<Node>>,
    authz: Authz,
    ApiPath(name): ApiPath<String>,
    ApiJson(req): ApiJson<GrantView>,
) -> Result<Json<RoleView>, ApiError> {
    may_administer(&authz, &node)?;
    let command =
        Command::RevokePermission { role: name.clone(), permission: req.permission.into(), prefix: req.prefix };
    change(&node, &authz, command).await?;
    role_view(&node, &name)
}

/// `GET /v1/auth/whoami`: who the caller is, how the guard identified it
/// (token or client certificate), and its grants.
async fn whoami(
    State(node): State<Arc<Node>>,
    authz: Authz,
    credential: Option<Extension<Credential>>,
) -> Result<Json<WhoAmI>, ApiError> {
    let every =
        |ps: &[Permission]| ps.iter().map(|p| GrantView { permission: (*p).into(), prefix: String::new() }).collect();
    let credential = credential.map(|Extension(c)| c.as_str().to_owned());
    Ok(Json(match &authz.0 {
        Principal::Admin => {
            WhoAmI { kind: "admin".into(), user: None, credential, grants: every(&[Permission::Admin]) }
        }
        Principal::Client => WhoAmI {
            kind: "client".into(),
            user: None,
            credential,
            grants: every(&[Permission::Read, Permission::Lock, Permission::Fence]),
        },
        Principal::User(user) => {
            let grants = node.locks().read(|t| {
                let roles = t.access().roles();
                let mine =
                    t.access().users().into_iter().find(|u| &u.name == user).map(|u| u.roles).unwrap_or_default();
                let mut grants: Vec<(leasehold_core::Permission, String)> =
                    roles.into_iter().filter(|r| mine.contains(&r.name)).flat_map(|r| r.grants).collect();
                grants.sort();
                grants.dedup();
                grants
            });
            let grants = grants.into_iter().map(|(p, prefix)| GrantView { permission: p.into(), prefix }).collect();
            WhoAmI { kind: "user".into(), user: Some(user.clone()), credential, grants }
        }
    }))
}
