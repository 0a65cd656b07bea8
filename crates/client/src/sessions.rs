//! The session endpoints on [`Client`] (`/v1/sessions`): create, keep
//! alive, delete, get and list. The [`Session`](crate::Session) guard that
//! keeps one alive is `session.rs`'s.

use std::time::{Duration, Instant};

use ::http::Method;

use leasehold_proto::sessions::{
    CreateSessionRequest, DeleteSessionResponse, KeepAliveRequest, SessionListResponse, SessionView,
};
use leasehold_proto::ErrorCode;

use crate::client::NO_BODY;
use crate::{new_request_id, Client, ClientError};

/// A session's id: the log index of the entry that created it.
pub type SessionId = u64;

impl Client {
    /// `POST /v1/sessions`: the new session, and the send time of the request.
    pub async fn create_session(&self, owner: &str, ttl_ms: u64) -> Result<(SessionView, Instant), ClientError> {
        let body = CreateSessionRequest { owner: owner.to_owned(), ttl_ms, request_id: Some(new_request_id()) };
        self.call(Method::POST, &["v1", "sessions"], &[], Some(&body), Duration::ZERO).await
    }

    /// `POST /v1/sessions/{id}/keepalive`: restarts the session's deadline;
    /// `seq`, the request's number in the session's sequence, if it keeps one.
    pub async fn keep_alive(
        &self,
        session: SessionId,
        seq: Option<u64>,
    ) -> Result<(SessionView, Instant), ClientError> {
        let body = KeepAliveRequest { ttl_ms: None, request_id: Some(new_request_id()), seq };
        let id = session.to_string();
        self.call(Method::POST, &["v1", "sessions", &id, "keepalive"], &[], Some(&body), Duration::ZERO).await
    }

    /// `DELETE /v1/sessions/{id}`: releases every lock of the session.
    /// Answers the locks released. Under a request id, so that a retry of a
    /// delete whose answer was lost gets that answer, not `session_not_found`.
    pub async fn delete_session(&self, session: SessionId) -> Result<Vec<String>, ClientError> {
        let id = session.to_string();
        let request_id = new_request_id();
        let query = [("request_id", request_id.as_str())];
        let (deleted, _): (DeleteSessionResponse, _) =
            self.call(Method::DELETE, &["v1", "sessions", &id], &query, NO_BODY, Duration::ZERO).await?;
        Ok(deleted.released)
    }

    /// `GET /v1/sessions/{id}`: the session with its locks, `None` when it is gone.
    pub async fn get_session(&self, session: SessionId) -> Result<Option<SessionView>, ClientError> {
        let id = session.to_string();
        match self.call(Method::GET, &["v1", "sessions", &id], &[], NO_BODY, Duration::ZERO).await {
            Ok((view, _)) => Ok(Some(view)),
            Err(e) if e.code() == Some(ErrorCode::SessionNotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `GET /v1/sessions`: live sessions with ids above `after`, at most `limit`.
    pub async fn list_sessions(&self, after: SessionId, limit: usize) -> Result<Vec<SessionView>, ClientError> {
        let (after, limit) = (after.to_string(), limit.to_string());
        let query = [("after", after.as_str()), ("limit", limit.as_str())];
        let (listed, _): (SessionListResponse, _) =
            self.call(Method::GET, &["v1", "sessions"], &query, NO_BODY, Duration::ZERO).await?;
        Ok(listed.sessions)
    }
}
