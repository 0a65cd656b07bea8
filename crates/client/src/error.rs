//! [`ClientError`]: what a call of the client can fail with.

use leasehold_proto::{ErrorCode, ErrorDetail};

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

    /// The API error body, if the cluster answered with one.
    pub fn detail(&self) -> Option<&ErrorDetail> {
        match self {
            ClientError::Api { error, .. } => Some(error),
            _ => None,
        }
    }
}
