//! Why a request body could not be read, and its one mapping to HTTP.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use wire::ErrorType;

use crate::answer;

/// A request body that [`BodyReader::collect`](crate::BodyReader::collect) refused.
///
/// Every variant leaves the body partly unread, so the answer carries `Connection: close`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Declared or received length over the caller's limit: 413 `too_large`.
    #[error("request body larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// Not received within `--body-read-timeout`: 408 `timeout`.
    #[error("request body not received within {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    /// Broken framing (a malformed chunked body, a body cut short): 400 `invalid_request`. The
    /// detail is for the log.
    #[error("malformed request body: {0}")]
    Broken(String),
    /// `--max-buffered-body-bytes` reached: 503 `overloaded` with `Retry-After`.
    #[error("the server is receiving too many request bodies; retry later")]
    Overloaded,
}

impl Error {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::Broken(_) => StatusCode::BAD_REQUEST,
            Self::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The stable kind, as sent to clients and used as the metric label.
    pub fn error_type(&self) -> ErrorType {
        match self {
            Self::TooLarge { .. } => ErrorType::TooLarge,
            Self::Timeout(_) => ErrorType::Timeout,
            Self::Broken(_) => ErrorType::InvalidRequest,
            Self::Overloaded => ErrorType::Overloaded,
        }
    }

    /// What the client reads (never the framing detail of [`Error::Broken`]).
    pub fn public_message(&self) -> String {
        match self {
            Self::Broken(_) => "malformed request body".to_owned(),
            other => other.to_string(),
        }
    }

    /// The JSON answer: status, `{"error", "error_type"}`, `Connection: close`, and
    /// `Retry-After: retry_after_s` on [`Error::Overloaded`]. Generic over the body type
    /// (`axum::body::Body` and `Full<Bytes>` both work).
    pub fn response<B: From<Bytes>>(&self, retry_after_s: u64) -> Response<B> {
        let mut resp = answer::json_response(self.status(), self.error_type(), &self.public_message());
        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        if matches!(self, Self::Overloaded) {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
        }
        resp
    }
}
