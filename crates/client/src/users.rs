//! Users and roles on [`Client`] (`/v1/auth`): the admin API that scopes
//! who may do what to which lock names, and `whoami`.

use std::time::Duration;

use ::http::Method;

use leasehold_proto::auth::{
    AssignRoleRequest, CreateRoleRequest, CreateUserRequest, GrantView, Permission, Removed, RoleList, RoleView,
    TokenCreated, UserList, UserView, WhoAmI,
};

use crate::client::NO_BODY;
use crate::{Client, ClientError};

const USERS: [&str; 3] = ["v1", "auth", "users"];
const ROLES: [&str; 3] = ["v1", "auth", "roles"];

impl Client {
    /// Adds user `name` with a first token, returned this once: the cluster
    /// keeps only its hash. `409 already_exists` if the user exists.
    pub async fn create_user(&self, name: &str) -> Result<TokenCreated, ClientError> {
        let body = CreateUserRequest { name: name.to_owned() };
        Ok(self.call(Method::POST, &USERS, &[], Some(&body), Duration::ZERO).await?.0)
    }

    /// Every user, with its roles and the ids of its tokens.
    pub async fn list_users(&self) -> Result<Vec<UserView>, ClientError> {
        let list: UserList = self.call(Method::GET, &USERS, &[], NO_BODY, Duration::ZERO).await?.0;
        Ok(list.users)
    }

    /// Removes user `name`: its tokens open nothing from then on.
    pub async fn remove_user(&self, name: &str) -> Result<Removed, ClientError> {
        Ok(self.call(Method::DELETE, &["v1", "auth", "users", name], &[], NO_BODY, Duration::ZERO).await?.0)
    }

    /// A new token for user `name`, returned this once.
    pub async fn add_token(&self, name: &str) -> Result<TokenCreated, ClientError> {
        let path = ["v1", "auth", "users", name, "tokens"];
        Ok(self.call(Method::POST, &path, &[], NO_BODY, Duration::ZERO).await?.0)
    }

    /// Revokes token `token_id` of user `name`.
    pub async fn revoke_token(&self, name: &str, token_id: u64) -> Result<Removed, ClientError> {
        let id = token_id.to_string();
        let path = ["v1", "auth", "users", name, "tokens", &id];
        Ok(self.call(Method::DELETE, &path, &[], NO_BODY, Duration::ZERO).await?.0)
    }

    /// Gives user `name` role `role`.
    pub async fn assign_role(&self, name: &str, role: &str) -> Result<UserView, ClientError> {
        let body = AssignRoleRequest { role: role.to_owned() };
        let path = ["v1", "auth", "users", name, "roles"];
        Ok(self.call(Method::POST, &path, &[], Some(&body), Duration::ZERO).await?.0)
    }

    /// Takes role `role` from user `name`.
    pub async fn unassign_role(&self, name: &str, role: &str) -> Result<UserView, ClientError> {
        let path = ["v1", "auth", "users", name, "roles", role];
        Ok(self.call(Method::DELETE, &path, &[], NO_BODY, Duration::ZERO).await?.0)
    }

    /// Adds role `name`, granting nothing yet.
    pub async fn create_role(&self, name: &str) -> Result<RoleView, ClientError> {
        let body = CreateRoleRequest { name: name.to_owned() };
        Ok(self.call(Method::POST, &ROLES, &[], Some(&body), Duration::ZERO).await?.0)
    }

    /// Every role with its grants.
    pub async fn list_roles(&self) -> Result<Vec<RoleView>, ClientError> {
        let list: RoleList = self.call(Method::GET, &ROLES, &[], NO_BODY, Duration::ZERO).await?.0;
        Ok(list.roles)
    }

    /// Removes role `name`, and takes it from every user.
    pub async fn remove_role(&self, name: &str) -> Result<Removed, ClientError> {
        Ok(self.call(Method::DELETE, &["v1", "auth", "roles", name], &[], NO_BODY, Duration::ZERO).await?.0)
    }

    /// Grants `permission` on the names that start with `prefix` to role `name`.
    pub async fn grant(&self, name: &str, permission: Permission, prefix: &str) -> Result<RoleView, ClientError> {
        let body = GrantView { permission, prefix: prefix.to_owned() };
        let path = ["v1", "auth", "roles", name, "grants"];
        Ok(self.call(Method::POST, &path, &[], Some(&body), Duration::ZERO).await?.0)
    }

    /// Takes the grant of `permission` on exactly `prefix` from role `name`.
    pub async fn revoke(&self, name: &str, permission: Permission, prefix: &str) -> Result<RoleView, ClientError> {
        let body = GrantView { permission, prefix: prefix.to_owned() };
        let path = ["v1", "auth", "roles", name, "revoke"];
        Ok(self.call(Method::POST, &path, &[], Some(&body), Duration::ZERO).await?.0)
    }

    /// Who this client's token is, and what it may.
    pub async fn whoami(&self) -> Result<WhoAmI, ClientError> {
        Ok(self.call(Method::GET, &["v1", "auth", "whoami"], &[], NO_BODY, Duration::ZERO).await?.0)
    }
}
