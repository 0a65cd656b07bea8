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
//! Checked on every node, also on a follower before it forwards a request;
//! the leader checks the forwarded caller's token again.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::security::Secrets;
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
    /// A request must carry one of these.
    Tokens(Vec<Secret>),
    /// The node has secrets, but not the one this part needs: refused to
    /// all, with this reason.
    Closed(&'static str),
}

const CLIENT_CLOSED: &str = "the client API needs a client token or the admin token, and this node has neither \
                             configured (--client-token-file or $LEASEHOLD_CLIENT_TOKEN); it has other secrets, so the \
                             client API is closed";
const ADMIN_CLOSED: &str = "the admin API needs the admin token, and this node has none configured \
                            (--admin-token-file or $LEASEHOLD_ADMIN_TOKEN); a client token never opens it";

/// What one part of the API asks of a request.
#[derive(Debug, Clone)]
pub struct Guard {
    part: Part,
    access: Access,
}

impl Guard {
    pub fn new(secrets: &Secrets, part: Part) -> Guard {
        let accepted: Vec<Secret> = part.openers().iter().filter_map(|kind| kind.of(secrets).clone()).collect();
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
        Guard { part, access }
    }

    /// `Ok` when `headers` carry a token that opens this part.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let accepted = match &self.access {
            Access::Open => return Ok(()),
            Access::Closed(reason) => return Err(ApiError::new(ErrorCode::PermissionDenied, *reason)),
            Access::Tokens(accepted) => accepted,
        };
        let what = match self.part {
            Part::Observe => "this endpoint",
            Part::Client => "the client API",
            Part::Admin => "the admin API",
            Part::Raft => "Raft RPC",
        };
        let Some(token) = bearer(headers) else {
            return Err(ApiError::new(
                ErrorCode::Unauthenticated,
                format!("{what} needs an 'authorization: Bearer <token>' header"),
            ));
        };
        // Every accepted secret is compared, so the time taken does not tell
        // which one came closest.
        let matched = accepted.iter().fold(false, |any, secret| secret.matches(token) | any);
        if matched {
            Ok(())
        } else {
            Err(ApiError::new(ErrorCode::PermissionDenied, format!("this token does not open {what}")))
        }
    }
}

/// The token of an `authorization: Bearer <token>` header (scheme in any case).
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, token) = value.split_at_checked(7)?;
    (scheme.eq_ignore_ascii_case(b"bearer ") && !token.is_empty()).then_some(token)
}

/// Middleware: refuse the request unless its token opens the guarded part.
pub async fn require(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    match guard.check(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
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
            [Part::Observe, Part::Client, Part::Admin, Part::Raft].map(|part| Guard::new(&secrets, part));
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

    // Ensures a node without secrets is open everywhere.
    #[test]
    fn without_secrets_every_part_is_open() {
        for part in [Part::Observe, Part::Client, Part::Admin, Part::Raft] {
            assert_eq!(status(&Guard::new(&Secrets::default(), part), &HeaderMap::new()), None, "{part:?}");
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
        let admin = Guard::new(&only_client, Part::Admin);
        for headers in [HeaderMap::new(), with_auth(CLIENT)] {
            let refusal = admin.check(&headers).expect_err("the admin API is closed");
            assert_eq!(refusal.status(), StatusCode::FORBIDDEN);
            assert!(refusal.message.contains("admin token"), "{}", refusal.message);
        }
        assert_eq!(status(&Guard::new(&only_client, Part::Observe), &HeaderMap::new()), Some(StatusCode::UNAUTHORIZED));
        assert_eq!(status(&Guard::new(&only_client, Part::Raft), &HeaderMap::new()), None);

        let only_admin = Secrets { admin_token: secret("admin-token-0123456789"), ..Default::default() };
        let client = Guard::new(&only_admin, Part::Client);
        assert_eq!(status(&client, &HeaderMap::new()), Some(StatusCode::UNAUTHORIZED));
        assert_eq!(status(&client, &with_auth(ADMIN)), None);

        let only_peer = Secrets { cluster_secret: secret("cluster-secret-0123456789"), ..Default::default() };
        assert_eq!(status(&Guard::new(&only_peer, Part::Client), &with_auth(PEER)), Some(StatusCode::FORBIDDEN));
        assert_eq!(status(&Guard::new(&only_peer, Part::Observe), &with_auth(PEER)), None);
    }
}
