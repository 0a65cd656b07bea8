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
use crate::node::Node;
use crate::security::Secrets;
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
        self.resolve(headers).map_err(|(refusal, _)| refusal)
    }

    /// [`Guard::check`]; a refusal says too whether it was a token this
    /// node did not find among its users (`true`), which it may yet apply.
    fn resolve(&self, headers: &HeaderMap) -> Result<Principal, (ApiError, bool)> {
        self.resolve_inner(headers).map_err(|refusal| match refusal {
            Unresolved::Refused(e) => (e, false),
            Unresolved::UnknownUser(e) => (e, true),
        })
    }

    fn resolve_inner(&self, headers: &HeaderMap) -> Result<Principal, Unresolved> {
        let (accepted, closed): (&[(SecretKind, Secret)], _) = match &self.access {
            Access::Open => return Ok(Principal::Admin),
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
            Some(SecretKind::AdminToken) => return Ok(Principal::Admin),
            Some(SecretKind::ClientToken) => return Ok(Principal::Client),
            // Opens status and Raft RPC only; nothing asks it for names.
            Some(SecretKind::ClusterSecret) => return Ok(Principal::Client),
            None => {}
        }
        // A user's token: looked up by its hash, so the table never holds
        // the token and a lookup takes the same time whatever it matches.
        let user = self.users.as_ref().and_then(|users| Some((users, users.user_of(&token_hash(token))?)));
        let Some((users, user)) = user else {
            return Err(match self.users.is_some() {
                true => Unresolved::UnknownUser(refused(closed)),
                false => Unresolved::Refused(refused(closed)),
            });
        };
        let principal = Principal::User(user);
        if self.part == Part::Admin {
            users.may(&principal, Permission::Admin, &[""]).map_err(|d| Unresolved::Refused(d.into()))?;
        }
        Ok(principal)
    }
}

/// Why a guard refused a request.
enum Unresolved {
    Refused(ApiError),
    /// A token that is none of the node's secrets nor of its users.
    UnknownUser(ApiError),
}

/// The token of an `authorization: Bearer <token>` header (scheme in any case).
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, token) = value.split_at_checked(7)?;
    (scheme.eq_ignore_ascii_case(b"bearer ") && !token.is_empty()).then_some(token)
}

/// Middleware: refuse the request unless its token opens the guarded part;
/// the principal it comes from goes with it to the handler ([`Authz`]).
pub async fn require(State(guard): State<Guard>, mut request: Request, next: Next) -> Response {
    let mut resolved = guard.resolve(request.headers());
    // A node that does not lead resolves a user's token, and later reads
    // its permissions, only once it has applied every entry committed
    // before the request: a revoke acknowledged before it, or a user made a
    // moment before, is then in effect here too, not a few entries later.
    // One read-index round trip to the leader, for users' tokens only (the
    // built-in tokens are the node's own; the leader has applied every
    // change it acknowledged). Handed-off commands are not checked again
    // on the leader, so this is the check that makes a revoke exact.
    let user = match &resolved {
        Ok(Principal::User(_)) => true,
        Err((_, unknown_user)) => *unknown_user && bearer(request.headers()).is_some_and(is_user_token),
        Ok(_) => false,
    };
    if let Some(users) = guard.users.as_ref().filter(|users| user && !users.leads()) {
        if let Err(e) = users.catch_up().await {
            return e.into_response();
        }
        resolved = guard.resolve(request.headers());
    }
    match resolved.map_err(|(refusal, _)| refusal) {
        Ok(principal) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(e) => e.into_response(),
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
