//! [`ClientError`]: what a call of the client can fail with.

use leasehold_proto::auth::Permission;
use leasehold_proto::{ErrorCode, ErrorDetail};

/// A `403 permission_denied`, as [`ClientError::denied`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The permission the caller lacks (`read`, `lock`, `fence`, `admin`).
    pub permission: Option<Permission>,
    /// The lock name (or a list's prefix) it lacks it on.
    pub name: Option<String>,
    pub message: String,
}

/// Why a call failed: the cluster's answer, or why there is none.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The cluster answered with an error: its status and error body.
    #[error("{status} {}: {}", .error.code, .error.message)]
    Api { status: u16, error: ErrorDetail },
    /// No node gave a usable answer within the retry budget.
    #[error("cluster unavailable: {0}")]
    Unavailable(String),
    #[error("invalid endpoint {0:?}")]
    InvalidEndpoint(String),
    #[error("unexpected response: {0}")]
    Decode(String),
    /// The client refused the call before sending anything (e.g. a lock
    /// guard's ttl or drift margin out of range).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl ClientError {
    /// The API error code (`held`, `stale_token`, `not_held`, ...), if any.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Api { error, .. } => Some(error.code),
            _ => None,
        }
    }

    /// The refusal of a `403 permission_denied`: the token opens this part
    /// of the API but its user lacks `permission` on `name` (or the token
    /// opens no part at all, when both are absent). `None` for any other error.
    pub fn denied(&self) -> Option<Denial> {
        let error = self.detail().filter(|e| e.code == ErrorCode::PermissionDenied)?;
        let permission = error.text("permission").and_then(|p| serde_json::from_value(p.into()).ok());
        Some(Denial { permission, name: error.text("name").map(str::to_owned), message: error.message.clone() })
    }

    /// The API error body, if the cluster answered with one.
    pub fn detail(&self) -> Option<&ErrorDetail> {
        match self {
            ClientError::Api { error, .. } => Some(error),
            _ => None,
        }
    }
}
