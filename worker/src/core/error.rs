//! Why the core refused or failed a request. The HTTP layer maps each to a status and a JSON body.

use std::time::Duration;

use wire::ErrorType;

#[derive(Debug, Clone, thiserror::Error)]
pub enum CoreError {
    #[error("{0}")]
    Invalid(String),
    #[error("query {index} is {len} bytes; the limit is {limit}")]
    QueryTooLong { index: usize, len: usize, limit: usize },
    #[error("the worker is at capacity; retry later")]
    Overloaded,
    #[error("the worker is shutting down; retry on another worker")]
    Draining,
    #[error("no answer within {:.1} s", .0.as_secs_f64())]
    Timeout(Duration),
    /// Details go to the log, not to the client.
    #[error("internal error")]
    Internal(String),
}

impl CoreError {
    pub fn error_type(&self) -> ErrorType {
        match self {
            Self::Invalid(_) => ErrorType::InvalidRequest,
            Self::QueryTooLong { .. } => ErrorType::TooLarge,
            Self::Overloaded => ErrorType::Overloaded,
            Self::Draining => ErrorType::Unavailable,
            Self::Timeout(_) => ErrorType::Timeout,
            Self::Internal(_) => ErrorType::Internal,
        }
    }
}
