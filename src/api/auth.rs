//! Bearer-token checks in front of each part of the API.
//!
//! A request names its token in `authorization: Bearer <token>`. Which token
//! opens what is in [`crate::security`]: with no secret configured every
//! part is open; once any is, every part asks for a credential and a part
//! whose token the node lacks is closed. Answers, before anything is read or
//! changed:
//! - no token (or not a Bearer one) where one is needed: 401
//!   `unauthenticated` with `WWW-Authenticate: Bearer realm="leasehold"`;
//! - a token that does not open this part, or a part this node keeps closed
//!   (the admin API without an admin token): 403 `permission_denied` (as
//!   Consul answers a token it does not know, and etcd a user without
//!   permission).
//!
//! Checked on every node, also on a follower before it forwards a request
//! (a user's token after the follower has caught up to the leader's read
//! index, so a revoke acknowledged before the request is in effect there);
//! the leader checks a relayed caller's token again.
//!
//! Without a token, a client certificate the TLS handshake verified against
//! `--client-trusted-ca` names a user by its subject's Common Name (etcd's
//! rule; [`crate::security::common_name`]): that user is the caller, looked
//! up by name in the same table and under the same catch-up rule as a
//! user's token, so removing the user or their roles takes effect at once.
//! A token wins when both are present. A certificate that names no user of
//! the table (or no usable name at all) is answered 401 `unauthenticated`,
//! its `details` naming the `credential` (`certificate`) and the `user`.
//! [`Credential`] says which of the two identified the caller (`whoami`).
//!
//! A token that opens a part is resolved to a [`Principal`]: the node's
//! client token and admin token are the two built-in ones, any other token
//! is looked up (by its SHA-256) among the users of the replicated table as
//! applied on this node. The principal goes to the handler as [`Authz`],
//! whose [`Authz::may`] every handler of the client and admin parts calls
//! on every name the request touches before it reads or changes anything
//! (the rule is [`leasehold_core::Access::may`]); `src/api/tests/access.rs`
//! walks every route to prove none forgets it.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::admission::Caller;
use crate::node::Node;
use crate::security::{ClientCertificate, Secrets};
use leasehold_core::{Denied, Permission, Principal, TokenHash};
use leasehold_proto::{ErrorCode, Secret};

/// The part of the API a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `/v1/cluster/status`, `/v1/cluster/nodes`, `/openapi.json`: how the
    /// node and the cluster are doing, no lock names or owners: any of the
    /// node's secrets (the members ask each other's status with theirs).
    Observe,
    /// `/v1/locks…`, `/v1/multi…`, `/v1/sessions…`, `/v1/fence…`,
    /// `/v1/records…`, `/v1/events`: client or admin token.
    Client,
    /// Init, membership, snapshots and backups, digests: admin token.
    Admin,
    /// Raft RPC: cluster secret.
    Raft,
}

/// A secret a node may be configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretKind {
    ClientToken,
    AdminToken,
    ClusterSecret,
}

impl SecretKind {
    /// Its name as a security scheme of the OpenAPI document.
    pub fn scheme(self) -> &'static str {
        match self {
            SecretKind::ClientToken => "client_token",
            SecretKind::AdminToken => "admin_token",
            SecretKind::ClusterSecret => "cluster_secret",
        }
    }

    fn of(self, secrets: &Secrets) -> &Option<Secret> {
        match self {
            SecretKind::ClientToken => &secrets.client_token,
            SecretKind::AdminToken => &secrets.admin_token,
            SecretKind::ClusterSecret => &secrets.cluster_secret,
        }
    }
}

impl Part {
    /// The secrets that open this part, any one of them: the one table the
    /// guard enforces and the OpenAPI document publishes.
    pub fn openers(self) -> &'static [SecretKind] {
        use SecretKind::*;
        match self {
            Part::Observe => &[ClientToken, AdminToken, ClusterSecret],
            Part::Client => &[ClientToken, AdminToken],
            Part::Admin => &[AdminToken],
            Part::Raft => &[ClusterSecret],
        }
    }
}

/// Who passes one guard.
#[derive(Debug, Clone)]
enum Access {
    /// Nothing to check: no secret is configured (the node warns at start),
    /// or Raft RPC without a cluster secret (the members send none).
    Open,
    /// A request must carry one of these, or a user's token (client and
    /// admin parts); `Closed`: the node has none of these, and only a
    /// user's token may open the part.
    Tokens(Vec<(SecretKind, Secret)>),
    Closed(&'static str),
}

const CLIENT_CLOSED: &str = "the client API needs a client token, the admin token or a user's token, and this node \
                             has neither of the first two configured (--client-token-file or \
                             $LEASEHOLD_CLIENT_TOKEN); it has other secrets, so the client API is closed to others";
const ADMIN_CLOSED: &str = "the admin API needs the admin token or the token of a user with admin on every name, \
                            and this node has no admin token configured (--admin-token-file or \
                            $LEASEHOLD_ADMIN_TOKEN); a client token never opens it";

/// Where a guard looks up users' tokens and permissions: the node's
/// replicated table ([`crate::node::Node`]), as applied on this node.
pub trait Directory: Send + Sync {
    /// The user whose live token hashes to `hash`.
    fn user_of(&self, hash: &TokenHash) -> Option<String>;
    /// Whether `name` is a user (a client certificate's Common Name).
    fn is_user(&self, name: &str) -> bool;
    /// [`leasehold_core::Access::may`] on the table as applied here.
    fn may(&self, principal: &Principal, permission: Permission, names: &[&str]) -> Result<(), Denied>;
    /// [`leasehold_core::Access::may_some`] on the table as applied here.
    fn may_some(&self, principal: &Principal, permission: Permission) -> Result<(), Denied>;
    /// Whether this node leads: it has applied every change acknowledged.
    fn leads(&self) -> bool;
    /// Returns once this node has applied every entry committed before the
    /// call (a read index from the leader, applied here).
    fn catch_up(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ApiError>> + Send + '_>>;
}

impl Directory for Node {
    fn user_of(&self, hash: &TokenHash) -> Option<String> {
        self.locks().read(|t| t.access().user_of(hash).map(str::to_owned))
    }

    fn is_user(&self, name: &str) -> bool {
        self.locks().read(|t| t.access().is_user(name))
    }

    fn may(&self, principal: &Principal, permission: Permission, names: &[&str]) -> Result<(), Denied> {
        match principal {
            // The built-in principals need no table: no lock taken per request.
            Principal::Client | Principal::Admin => NO_USERS.may(principal, permission, names.iter().copied()),
            Principal::User(_) => self.locks().read(|t| t.access().may(principal, permission, names.iter().copied())),
        }
    }

    fn may_some(&self, principal: &Principal, permission: Permission) -> Result<(), Denied> {
        match principal {
            Principal::Client | Principal::Admin => NO_USERS.may_some(principal, permission),
            Principal::User(_) => self.locks().read(|t| t.access().may_some(principal, permission)),
        }
    }

    fn leads(&self) -> bool {
        self.leader().is_some_and(|(id, _)| id == self.id())
    }

    fn catch_up(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ApiError>> + Send + '_>> {
        Box::pin(async move { Ok(self.read(|_| ()).await?) })
    }
}

/// The rule for the built-in principals, which no user or role changes.
static NO_USERS: std::sync::LazyLock<leasehold_core::Access> = std::sync::LazyLock::new(Default::default);

/// What one part of the API asks of a request.
#[derive(Clone)]
pub struct Guard {
    part: Part,
    access: Access,
    /// Users' tokens, for the client, admin and status parts.
    users: Option<Arc<dyn Directory>>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard").field("part", &self.part).field("access", &self.access).finish_non_exhaustive()
    }
}

impl Guard {
    /// The guard of `part`; `users` resolves users' tokens (none: only the
    /// node's own secrets open anything).
    pub fn new(secrets: &Secrets, part: Part, users: Option<Arc<dyn Directory>>) -> Guard {
        let accepted: Vec<(SecretKind, Secret)> =
            part.openers().iter().filter_map(|kind| kind.of(secrets).clone().map(|s| (*kind, s))).collect();
        let access = match part {
            _ if !accepted.is_empty() => Access::Tokens(accepted),
            _ if !secrets.any() => Access::Open,
            Part::Client => Access::Closed(CLIENT_CLOSED),
            Part::Admin => Access::Closed(ADMIN_CLOSED),
            // Observe takes any secret, so it has tokens whenever the node has
            // a secret; the members send none on Raft RPC without a cluster
            // secret, so closing it would stop the cluster.
            Part::Observe | Part::Raft => Access::Open,
        };
        let users = match part {
            Part::Raft => None,
            _ => users,
        };
        Guard { part, access, users }
    }

    /// The principal of a request whose `headers` carry a token that opens
    /// this part: the built-in one of a node secret, or a user. A node
    /// without secrets is open: everyone is [`Principal::Admin`].
    pub fn check(&self, headers: &HeaderMap) -> Result<Principal, ApiError> {
        self.check_with(headers, None)
    }

    /// [`Guard::check`], for a request that may come with a verified client
    /// `certificate` too (used when `headers` carry no token).
    pub fn check_with(
        &self,
        headers: &HeaderMap,
        certificate: Option<&ClientCertificate>,
    ) -> Result<Principal, ApiError> {
        self.resolve(headers, certificate).map(|(principal, _)| principal).map_err(|refusal| match refusal {
            Unresolved::Refused(e) | Unresolved::UnknownUser(e) => e,
        })
    }

    /// The principal and how it was identified, or why it was refused.
    fn resolve(
        &self,
        headers: &HeaderMap,
        certificate: Option<&ClientCertificate>,
    ) -> Result<(Principal, Credential), Unresolved> {
        let (accepted, closed): (&[(SecretKind, Secret)], _) = match &self.access {
            Access::Open => return Ok((Principal::Admin, Credential::None)),
            Access::Closed(reason) => (&[], Some(*reason)),
            Access::Tokens(accepted) => (accepted, None),
        };
        let what = match self.part {
            Part::Observe => "this endpoint",
            Part::Client => "the client API",
            Part::Admin => "the admin API",
            Part::Raft => "Raft RPC",
        };
        let refused = |reason: Option<&'static str>| {
            ApiError::new(
                ErrorCode::PermissionDenied,
                reason.map_or(format!("this token does not open {what}"), String::from),
            )
        };
        let Some(token) = bearer(headers) else {
            // A certificate never opens Raft RPC: members prove themselves
            // with the cluster secret or a peer certificate.
            if let (Some(certificate), Some(users)) = (certificate, &self.users) {
                return self.certified(users, certificate).map(|principal| (principal, Credential::Certificate));
            }
            if let Some(reason) = closed {
                return Err(Unresolved::Refused(refused(Some(reason))));
            }
            return Err(Unresolved::Refused(ApiError::new(
                ErrorCode::Unauthenticated,
                format!("{what} needs an 'authorization: Bearer <token>' header"),
            )));
        };
        // Every accepted secret is compared, so the time taken does not tell
        // which one came closest.
        let matched = accepted.iter().fold(None, |found, (kind, secret)| match secret.matches(token) {
            true => Some(*kind),
            false => found,
        });
        match matched {
            Some(SecretKind::AdminToken) => return Ok((Principal::Admin, Credential::Token)),
            Some(SecretKind::ClientToken) => return Ok((Principal::Client, Credential::Token)),
            // Opens status and Raft RPC only; nothing asks it for names.
            Some(SecretKind::ClusterSecret) => return Ok((Principal::Client, Credential::Token)),
            None => {}
        }
        // A user's token: looked up by its hash, so the table never holds
        // the token and a lookup takes the same time whatever it matches.
        let user = self.users.as_ref().and_then(|users| Some((users, users.user_of(&token_hash(token))?)));
        let Some((users, user)) = user else {
            // Only a token of the shape users' tokens have is worth a
            // follower's catch-up before it is refused.
            return Err(match self.users.is_some() && is_user_token(token) {
                true => Unresolved::UnknownUser(refused(closed)),
                false => Unresolved::Refused(refused(closed)),
            });
        };
        self.as_user(users.as_ref(), user).map(|principal| (principal, Credential::Token))
    }

    /// The user a verified client certificate names, if the table has it.
    fn certified(&self, users: &Arc<dyn Directory>, certificate: &ClientCertificate) -> Result<Principal, Unresolved> {
        let unauthenticated = |message: String| {
            ApiError::new(ErrorCode::Unauthenticated, message).with("credential", Credential::Certificate.as_str())
        };
        let user = match &certificate.0 {
            Ok(user) => user,
            Err(why) => {
                return Err(Unresolved::Refused(unauthenticated(format!(
                    "{why}, so it names no user; present a token instead"
                ))))
            }
        };
        if !users.is_user(user) {
            return Err(Unresolved::UnknownUser(
                unauthenticated(format!("the client certificate names the user {user:?}, who is not a user here"))
                    .with("user", user.as_ref()),
            ));
        }
        self.as_user(users.as_ref(), user.to_string())
    }

    /// `user` as the principal of a request for this part: the admin part
    /// takes only a user with admin on every name.
    fn as_user(&self, users: &dyn Directory, user: String) -> Result<Principal, Unresolved> {
        let principal = Principal::User(user);
        if self.part == Part::Admin {
            users.may(&principal, Permission::Admin, &[""]).map_err(|d| Unresolved::Refused(d.into()))?;
        }
        Ok(principal)
    }
}

/// How a guard identified the caller of a request, in its extensions next
/// to the [`Principal`] (`whoami` reports it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// A bearer token: one of the node's secrets or a user's.
    Token,
    /// A client certificate the handshake verified, naming a user.
    Certificate,
    /// Nothing: this node has no secret, and the part is open.
    None,
}

impl Credential {
    /// Its name on the wire (`whoami`'s `credential`, error details).
    pub fn as_str(self) -> &'static str {
        match self {
            Credential::Token => "token",
            Credential::Certificate => "certificate",
            Credential::None => "none",
        }
    }
}

/// Why a guard refused a request.
enum Unresolved {
    Refused(ApiError),
    /// A user's token or a certificate's user this node did not find among
    /// its users, which it may yet apply: a follower catches up and looks again.
    UnknownUser(ApiError),
}

/// The user a client certificate named, on a request a member relays to
/// the leader whole ([`super::forward`]): the leader never sees the caller's
/// TLS connection. Believed only on a member's peer connection (its hello
/// proved the cluster secret or a peer certificate), which sets
/// [`Caller::via_member`]; ignored on any other.
pub const CERTIFICATE_USER_HEADER: &str = "x-leasehold-certificate-user";

/// The verified client certificate a request comes with: its connection's,
/// or on a request relayed by a member, the user the member's guard took
/// from the caller's (a caller's own header of that name is never believed).
fn certificate_of(request: &Request) -> Option<ClientCertificate> {
    if let Some(certificate) = request.extensions().get::<ClientCertificate>() {
        return Some(certificate.clone());
    }
    let relayed = request.extensions().get::<Caller>().is_some_and(|caller| caller.via_member);
    let user = request.headers().get(CERTIFICATE_USER_HEADER).filter(|_| relayed)?.to_str().ok()?;
    Some(ClientCertificate(Ok(user.into())))
}

/// The token of an `authorization: Bearer <token>` header (scheme in any case).
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, token) = value.split_at_checked(7)?;
    (scheme.eq_ignore_ascii_case(b"bearer ") && !token.is_empty()).then_some(token)
}

/// Middleware: refuse the request unless its token (or, without one, its
/// client certificate) opens the guarded part; the principal it comes from
/// goes with it to the handler ([`Authz`]), and how it was identified
/// ([`Credential`]).
pub async fn require(State(guard): State<Guard>, mut request: Request, next: Next) -> Response {
    let certificate = certificate_of(&request);
    let mut resolved = guard.resolve(request.headers(), certificate.as_ref());
    // A node that does not lead resolves a user (by token or certificate),
    // and later reads its permissions, only once it has applied every entry
    // committed before the request: a revoke acknowledged before it, or a
    // user made a moment before, is then in effect here too, not a few
    // entries later. One read-index round trip to the leader, for users
    // only (the built-in tokens are the node's own; the leader has applied
    // every change it acknowledged). Handed-off commands are not checked
    // again on the leader, so this is the check that makes a revoke exact.
    let user = matches!(&resolved, Ok((Principal::User(_), _)) | Err(Unresolved::UnknownUser(_)));
    if let Some(users) = guard.users.as_ref().filter(|users| user && !users.leads()) {
        if let Err(e) = users.catch_up().await {
            return e.into_response();
        }
        resolved = guard.resolve(request.headers(), certificate.as_ref());
    }
    match resolved {
        Ok((principal, credential)) => {
            request.extensions_mut().insert(principal);
            request.extensions_mut().insert(credential);
            next.run(request).await
        }
        Err(Unresolved::Refused(e) | Unresolved::UnknownUser(e)) => e.into_response(),
    }
}

/// The principal a request comes from, as its guard resolved it, and the
/// one check every handler of the client and admin parts makes before it
/// reads or changes anything: [`Authz::may`] on every name the request
/// touches (`tests/auth.rs` walks every route to prove none forgets it).
#[derive(Debug, Clone)]
pub struct Authz(pub Principal);

impl<S: Send + Sync> FromRequestParts<S> for Authz {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        // Only a route behind a guard has one: a handler that asks for it
        // elsewhere is refused, never let through.
        match parts.extensions.get::<Principal>() {
            Some(principal) => Ok(Authz(principal.clone())),
            None => Err(ApiError::new(ErrorCode::PermissionDenied, "this endpoint authorizes nobody")),
        }
    }
}

impl Authz {
    /// `Ok` when the caller may `permission` on every one of `names`; else
    /// 403 `permission_denied` naming the permission and the first name
    /// refused (nothing was read or changed).
    pub fn may<'n>(
        &self,
        node: &Node,
        permission: Permission,
        names: impl IntoIterator<Item = &'n str>,
    ) -> Result<(), ApiError> {
        let names: Vec<&str> = names.into_iter().collect();
        Ok(node.may(&self.0, permission, &names)?)
    }

    /// `Ok` when the caller may `permission` on the names of a list that
    /// starts with `prefix`: a grant on a prefix of `prefix` (etcd's rule
    /// for ranges), so a list never shows what the caller may not read.
    pub fn may_list(&self, node: &Node, permission: Permission, prefix: &str) -> Result<(), ApiError> {
        self.may(node, permission, [prefix])
    }

    /// `Ok` when the caller may `permission` on some name: what asks about
    /// no name (a session of its own).
    pub fn may_some(&self, node: &Node, permission: Permission) -> Result<(), ApiError> {
        Ok(node.may_some(&self.0, permission)?)
    }
}

/// Whether `token` has the shape of the tokens [`new_user_token`] makes: only
/// for those does a follower catch up before it refuses one it does not know,
/// so a token of another shape is refused without a round trip.
fn is_user_token(token: &[u8]) -> bool {
    token.len() == 67 && token.starts_with(b"lh_") && token[3..].iter().all(u8::is_ascii_hexdigit)
}

/// The SHA-256 of a user's token, as the table keeps it.
pub fn token_hash(token: &[u8]) -> TokenHash {
    let digest = ring::digest::digest(&ring::digest::SHA256, token);
    TokenHash(digest.as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

/// A new user token: 32 random bytes (256 bits, so its unsalted hash
/// cannot be reversed by guessing), as `lh_` and 64 hex digits.
pub fn new_user_token() -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| ApiError::internal("no random bytes"))?;
    Ok(format!("lh_{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;
    use axum::http::StatusCode;

    fn secret(s: &str) -> Option<Secret> {
        Some(Secret::new(s, "test").unwrap())
    }

    fn with_auth(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    fn status(guard: &Guard, headers: &HeaderMap) -> Option<StatusCode> {
        guard.check(headers).err().map(|e| e.status())
    }

    const CLIENT: &str = "Bearer client-token-0123456789";
    const ADMIN: &str = "bearer admin-token-0123456789";
    const PEER: &str = "Bearer cluster-secret-0123456789";

    fn all_secrets() -> Secrets {
        Secrets {
            client_token: secret("client-token-0123456789"),
            admin_token: secret("admin-token-0123456789"),
            cluster_secret: secret("cluster-secret-0123456789"),
        }
    }

    // Ensures each part accepts exactly its tokens: missing → 401, wrong → 403.
    #[test]
    fn each_part_accepts_its_tokens() {
        let secrets = all_secrets();
        let [observe, client, admin, raft] =
            [Part::Observe, Part::Client, Part::Admin, Part::Raft].map(|part| Guard::new(&secrets, part, None));
        let (c, a, r) = (with_auth(CLIENT), with_auth(ADMIN), with_auth(PEER));
        for token in [&c, &a, &r] {
            assert_eq!(status(&observe, token), None, "any secret opens the status");
        }
        assert_eq!(status(&client, &c), None);
        assert_eq!(status(&client, &a), None, "the admin token opens the client API");
        assert_eq!(status(&client, &r), Some(StatusCode::FORBIDDEN));
        assert_eq!(status(&admin, &a), None);
        assert_eq!(status(&admin, &c), Some(StatusCode::FORBIDDEN));
        assert_eq!(status(&admin, &r), Some(StatusCode::FORBIDDEN));
        assert_eq!(status(&raft, &r), None);
        assert_eq!(status(&raft, &a), Some(StatusCode::FORBIDDEN));
        for guard in [&observe, &client, &admin, &raft] {
            assert_eq!(status(guard, &HeaderMap::new()), Some(StatusCode::UNAUTHORIZED));
            assert_eq!(status(guard, &with_auth("Basic client-token-0123456789")), Some(StatusCode::UNAUTHORIZED));
            assert_eq!(status(guard, &with_auth("Bearer ")), Some(StatusCode::UNAUTHORIZED));
        }
    }

    /// Users of a table: `alice` (lock on `a-`) and `root` (admin on every name).
    struct Table(leasehold_core::LockTable);

    impl Directory for Table {
        fn user_of(&self, hash: &TokenHash) -> Option<String> {
            self.0.access().user_of(hash).map(str::to_owned)
        }
        fn is_user(&self, name: &str) -> bool {
            self.0.access().is_user(name)
        }
        fn may(&self, principal: &Principal, permission: Permission, names: &[&str]) -> Result<(), Denied> {
            self.0.access().may(principal, permission, names.iter().copied())
        }
        fn may_some(&self, principal: &Principal, permission: Permission) -> Result<(), Denied> {
            self.0.access().may_some(principal, permission)
        }
        fn leads(&self) -> bool {
            true
        }
        fn catch_up(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ApiError>> + Send + '_>> {
            Box::pin(async { Ok(()) })
        }
    }

    const ALICE: &str = "Bearer lh_alice-token-0123456789";
    const ROOT: &str = "Bearer lh_root-token-0123456789";

    fn users() -> Arc<dyn Directory> {
        use leasehold_core::Command;
        let mut table = leasehold_core::LockTable::new();
        let hash = |t: &str| token_hash(t.strip_prefix("Bearer ").unwrap().as_bytes());
        let commands = [
            Command::AddUser { user: "alice".into(), token: Some(hash(ALICE)) },
            Command::AddUser { user: "root".into(), token: Some(hash(ROOT)) },
            Command::AddRole { role: "a".into() },
            Command::GrantPermission { role: "a".into(), permission: Permission::Lock, prefix: "a-".into() },
            Command::AssignRole { user: "alice".into(), role: "a".into() },
            Command::AddRole { role: "ops".into() },
            Command::GrantPermission { role: "ops".into(), permission: Permission::Admin, prefix: String::new() },
            Command::AssignRole { user: "root".into(), role: "ops".into() },
        ];
        for (i, c) in commands.iter().enumerate() {
            table.apply(c, i as u64 + 1).result.expect("applies");
        }
        Arc::new(Table(table))
    }

    // Ensures a user's token resolves to its user on the client and status
    // parts, opens the admin part only with admin on every name, never Raft
    // RPC, and that the node's own tokens resolve to the built-ins.
    #[test]
    fn users_tokens_resolve_to_principals() {
        let secrets = all_secrets();
        let guard = |part| Guard::new(&secrets, part, Some(users()));
        let alice = Principal::User("alice".into());
        assert_eq!(guard(Part::Client).check(&with_auth(ALICE)).unwrap(), alice);
        assert_eq!(guard(Part::Observe).check(&with_auth(ALICE)).unwrap(), alice);
        let refused = guard(Part::Admin).check(&with_auth(ALICE)).unwrap_err();
        assert_eq!((refused.status(), &refused.details["permission"]), (StatusCode::FORBIDDEN, &"admin".into()));
        assert_eq!(guard(Part::Admin).check(&with_auth(ROOT)).unwrap(), Principal::User("root".into()));
        assert_eq!(status(&guard(Part::Raft), &with_auth(ROOT)), Some(StatusCode::FORBIDDEN));
        assert_eq!(guard(Part::Client).check(&with_auth(CLIENT)).unwrap(), Principal::Client);
        assert_eq!(guard(Part::Client).check(&with_auth(ADMIN)).unwrap(), Principal::Admin);
        assert_eq!(
            status(&guard(Part::Client), &with_auth("Bearer lh_unknown-token-0123")),
            Some(StatusCode::FORBIDDEN)
        );
        // With only an admin token, the client part still takes users.
        let only_admin = Secrets { admin_token: secret("admin-token-0123456789"), ..Default::default() };
        assert_eq!(Guard::new(&only_admin, Part::Client, Some(users())).check(&with_auth(ALICE)).unwrap(), alice);
    }

    // Ensures a verified certificate names its user when there is no token
    // (never opening Raft RPC, and the admin part only for an admin user),
    // that a token wins over it, that an unknown or unusable name is 401
    // with the credential named, and that a node without secrets ignores it.
    #[test]
    fn certificates_name_users_without_a_token() {
        use crate::security::{ClientCertificate, CommonNameError};
        let secrets = all_secrets();
        let guard = |part| Guard::new(&secrets, part, Some(users()));
        let cert = |name: &str| ClientCertificate(Ok(name.into()));
        let none = HeaderMap::new();
        let alice = Principal::User("alice".into());
        let (client, admin) = (guard(Part::Client), guard(Part::Admin));
        assert_eq!(client.check_with(&none, Some(&cert("alice"))).unwrap(), alice);
        assert_eq!(client.resolve(&none, Some(&cert("alice"))).ok().map(|(_, c)| c), Some(Credential::Certificate));
        assert_eq!(guard(Part::Observe).check_with(&none, Some(&cert("alice"))).unwrap(), alice);
        assert_eq!(admin.check_with(&none, Some(&cert("alice"))).unwrap_err().status(), StatusCode::FORBIDDEN);
        assert_eq!(admin.check_with(&none, Some(&cert("root"))).unwrap(), Principal::User("root".into()));
        let raft = guard(Part::Raft).check_with(&none, Some(&cert("root"))).unwrap_err();
        assert_eq!(raft.status(), StatusCode::UNAUTHORIZED);
        // A token wins, and says so.
        let (principal, credential) = client.resolve(&with_auth(CLIENT), Some(&cert("alice"))).ok().unwrap();
        assert_eq!((principal, credential), (Principal::Client, Credential::Token));

        let unknown = client.check_with(&none, Some(&cert("mallory"))).unwrap_err();
        assert_eq!((unknown.status(), unknown.code), (StatusCode::UNAUTHORIZED, ErrorCode::Unauthenticated));
        assert_eq!(
            (&unknown.details["credential"], &unknown.details["user"]),
            (&"certificate".into(), &"mallory".into())
        );
        assert!(matches!(client.resolve(&none, Some(&cert("mallory"))), Err(Unresolved::UnknownUser(_))));
        let unnamed = ClientCertificate(Err(CommonNameError::Several));
        let refused = client.check_with(&none, Some(&unnamed)).unwrap_err();
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        assert!(refused.message.contains("several Common Names"), "{}", refused.message);
        assert!(matches!(client.resolve(&none, Some(&unnamed)), Err(Unresolved::Refused(_))));

        let open = Guard::new(&Secrets::default(), Part::Client, Some(users()));
        assert_eq!(open.resolve(&none, Some(&cert("alice"))).ok(), Some((Principal::Admin, Credential::None)));
    }

    // Ensures the certificate-user header is believed only on a request a
    // member relayed, and the connection's own certificate comes first.
    #[test]
    fn relayed_certificate_users_need_a_member() {
        use crate::security::ClientCertificate;
        let request = |via_member: Option<bool>, own: Option<&str>| {
            let mut request = Request::new(axum::body::Body::empty());
            request.headers_mut().insert(CERTIFICATE_USER_HEADER, HeaderValue::from_static("root"));
            if let Some(via_member) = via_member {
                let addr = std::net::Ipv4Addr::LOCALHOST.into();
                request.extensions_mut().insert(Caller { addr, via_member });
            }
            if let Some(own) = own {
                request.extensions_mut().insert(ClientCertificate(Ok(own.into())));
            }
            request
        };
        assert_eq!(certificate_of(&request(Some(true), None)), Some(ClientCertificate(Ok("root".into()))));
        assert_eq!(certificate_of(&request(Some(false), None)), None);
        assert_eq!(certificate_of(&request(None, None)), None);
        assert_eq!(certificate_of(&request(Some(false), Some("alice"))), Some(ClientCertificate(Ok("alice".into()))));
    }

    // Ensures the tokens made for users have the shape a follower waits
    // for, are 256 bits apart, and hash to the form the table keeps.
    #[test]
    fn user_tokens_are_random_and_recognised() {
        let (a, b) = (new_user_token().unwrap(), new_user_token().unwrap());
        assert_ne!(a, b);
        assert!(is_user_token(a.as_bytes()), "{a}");
        assert!(!is_user_token(b"client-token-0123456789"));
        assert!(token_hash(a.as_bytes()).is_well_formed());
        assert_ne!(token_hash(a.as_bytes()), token_hash(b.as_bytes()));
    }

    // Ensures a node without secrets is open everywhere.
    #[test]
    fn without_secrets_every_part_is_open() {
        for part in [Part::Observe, Part::Client, Part::Admin, Part::Raft] {
            assert_eq!(status(&Guard::new(&Secrets::default(), part, None), &HeaderMap::new()), None, "{part:?}");
        }
    }

    // Ensures one secret closes what it does not open: with only a client
    // token the admin API is refused to everyone (the client token
    // included), saying an admin token must be configured; with only an
    // admin token the client API takes the admin token; Raft RPC stays open
    // without a cluster secret, as the members then send none.
    #[test]
    fn any_secret_closes_what_no_token_opens() {
        let only_client = Secrets { client_token: secret("client-token-0123456789"), ..Default::default() };
        let admin = Guard::new(&only_client, Part::Admin, None);
        for headers in [HeaderMap::new(), with_auth(CLIENT)] {
            let refusal = admin.check(&headers).expect_err("the admin API is closed");
            assert_eq!(refusal.status(), StatusCode::FORBIDDEN);
            assert!(refusal.message.contains("admin token"), "{}", refusal.message);
        }
        assert_eq!(
            status(&Guard::new(&only_client, Part::Observe, None), &HeaderMap::new()),
            Some(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(status(&Guard::new(&only_client, Part::Raft, None), &HeaderMap::new()), None);

        let only_admin = Secrets { admin_token: secret("admin-token-0123456789"), ..Default::default() };
        let client = Guard::new(&only_admin, Part::Client, None);
        assert_eq!(status(&client, &HeaderMap::new()), Some(StatusCode::UNAUTHORIZED));
        assert_eq!(status(&client, &with_auth(ADMIN)), None);

        let only_peer = Secrets { cluster_secret: secret("cluster-secret-0123456789"), ..Default::default() };
        assert_eq!(status(&Guard::new(&only_peer, Part::Client, None), &with_auth(PEER)), Some(StatusCode::FORBIDDEN));
        assert_eq!(status(&Guard::new(&only_peer, Part::Observe, None), &with_auth(PEER)), None);
    }
}
