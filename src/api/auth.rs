//! Bearer-token checks in front of each part of the API.
//!
//! A request names its token in `authorization: Bearer <token>`. Which token
//! opens what is in [`crate::security`]. Answers, before anything is read or
//! changed:
//! - no token (or not a Bearer one) where one is needed: 401
//!   `unauthenticated` with `WWW-Authenticate: Bearer realm="leasehold"`;
//! - a token that does not open this part: 403 `permission_denied` (as Consul
//!   answers a token it does not know, and etcd a user without permission).
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
    /// `/v1/locks…`, `/v1/multi…`, `/v1/fence…`, `/v1/records…`: client or admin token.
    Client,
    /// Init and membership changes: admin token.
    Admin,
    /// Raft RPC: cluster secret.
    Raft,
}

/// What one part of the API asks of a request.
#[derive(Debug, Clone)]
pub struct Guard {
    part: Part,
    /// Secrets that open this part; empty when it is open to all.
    accepted: Vec<Secret>,
}

impl Guard {
    pub fn new(secrets: &Secrets, part: Part) -> Guard {
        let accepted = match part {
            // Without a client token the client API is open, even when an
            // admin token protects membership.
            Part::Client if secrets.client_token.is_some() => {
                [&secrets.client_token, &secrets.admin_token].into_iter().flatten().cloned().collect()
            }
            Part::Client => Vec::new(),
            Part::Admin => secrets.admin_token.iter().cloned().collect(),
            Part::Raft => secrets.cluster_secret.iter().cloned().collect(),
        };
        Guard { part, accepted }
    }

    /// `Ok` when `headers` carry a token that opens this part.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.accepted.is_empty() {
            return Ok(());
        }
        let what = match self.part {
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
        let matched = self.accepted.iter().fold(false, |any, secret| secret.matches(token) | any);
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

    // Ensures each part accepts exactly its tokens: missing → 401, wrong → 403.
    #[test]
    fn each_part_accepts_its_tokens() {
        let secrets = Secrets {
            client_token: secret("client-token-0123456789"),
            admin_token: secret("admin-token-0123456789"),
            cluster_secret: secret("cluster-secret-0123456789"),
        };
        let client = Guard::new(&secrets, Part::Client);
        let admin = Guard::new(&secrets, Part::Admin);
        let raft = Guard::new(&secrets, Part::Raft);
        let (c, a, r) = (
            with_auth("Bearer client-token-0123456789"),
            with_auth("bearer admin-token-0123456789"),
            with_auth("Bearer cluster-secret-0123456789"),
        );
        assert_eq!(status(&client, &c), None);
        assert_eq!(status(&client, &a), None, "the admin token opens the client API");
        assert_eq!(status(&client, &r), Some(StatusCode::FORBIDDEN));
        assert_eq!(status(&admin, &a), None);
        assert_eq!(status(&admin, &c), Some(StatusCode::FORBIDDEN));
        assert_eq!(status(&raft, &r), None);
        assert_eq!(status(&raft, &a), Some(StatusCode::FORBIDDEN));
        for guard in [&client, &admin, &raft] {
            assert_eq!(status(guard, &HeaderMap::new()), Some(StatusCode::UNAUTHORIZED));
            assert_eq!(status(guard, &with_auth("Basic client-token-0123456789")), Some(StatusCode::UNAUTHORIZED));
            assert_eq!(status(guard, &with_auth("Bearer ")), Some(StatusCode::UNAUTHORIZED));
        }
    }

    // Ensures a part without a configured secret is open.
    #[test]
    fn unconfigured_parts_are_open() {
        let only_admin = Secrets { admin_token: secret("admin-token-0123456789"), ..Default::default() };
        assert_eq!(status(&Guard::new(&only_admin, Part::Client), &HeaderMap::new()), None);
        assert_eq!(status(&Guard::new(&only_admin, Part::Raft), &HeaderMap::new()), None);
        assert_eq!(status(&Guard::new(&only_admin, Part::Admin), &HeaderMap::new()), Some(StatusCode::UNAUTHORIZED));
    }
}
