//! The gateway's errors: [`StartError`] (what stops it from starting) and [`RequestError`] (what
//! a client is answered), with the one mapping of request errors to HTTP: status, `Retry-After`
//! where it helps, and a JSON [`wire::ErrorBody`] whose `error_type` is also the metric outcome
//! label.

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use wire::{ErrorBody, ErrorType};

/// What stops the gateway from starting (or a listener from running).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    MetricsApi(#[from] metrics_api::Error),
}

/// Everything a client's request can be answered with instead of a worker's answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    #[error("no route for {0}")]
    NotFound(String),
    #[error("no pool named {0:?}")]
    UnknownPool(String),
    #[error("method {0} not allowed here")]
    MethodNotAllowed(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("request body larger than {0} bytes")]
    TooLarge(usize),
    /// The body could not be read: too large, not received in time, malformed, or the
    /// listener's body budget is spent (the listener's mapping: 413, 408, 400, 503).
    #[error("{error}")]
    Body { error: listener::Error, retry_after_s: u64 },
    #[error("the gateway is at capacity; retry later")]
    Overloaded { retry_after_s: u64 },
    #[error("no ready worker in pool {pool:?}; retry later")]
    NoWorker { pool: String, retry_after_s: u64 },
    #[error("the workers of pool {pool:?} are shutting down; retry later")]
    Draining { pool: String, retry_after_s: u64 },
    #[error("no answer from the workers in time")]
    Timeout,
    #[error("the worker failed: {0}")]
    Upstream(String),
    /// A bug (a handler panicked); the detail goes to the log only.
    #[error("internal error: {0}")]
    Internal(String),
}

impl RequestError {
    /// The stable kind, as sent to clients and used as the `outcome` metric label.
    pub(crate) fn error_type(&self) -> ErrorType {
        match self {
            Self::NotFound(_) | Self::UnknownPool(_) => ErrorType::NotFound,
            Self::MethodNotAllowed(_) => ErrorType::MethodNotAllowed,
            Self::InvalidRequest(_) => ErrorType::InvalidRequest,
            Self::TooLarge(_) => ErrorType::TooLarge,
            Self::Body { error, .. } => error.error_type(),
            Self::Overloaded { .. } => ErrorType::Overloaded,
            Self::NoWorker { .. } | Self::Draining { .. } => ErrorType::Unavailable,
            Self::Timeout => ErrorType::Timeout,
            Self::Upstream(_) => ErrorType::Upstream,
            Self::Internal(_) => ErrorType::Internal,
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            Self::NotFound(_) | Self::UnknownPool(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Body { error, .. } => error.status(),
            Self::Overloaded { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::NoWorker { .. } | Self::Draining { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Self::Upstream(_) => StatusCode::BAD_GATEWAY,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub(crate) fn retry_after_s(&self) -> Option<u64> {
        match self {
            Self::Overloaded { retry_after_s }
            | Self::NoWorker { retry_after_s, .. }
            | Self::Draining { retry_after_s, .. } => Some(*retry_after_s),
            Self::Body { error: listener::Error::Overloaded, retry_after_s } => Some(*retry_after_s),
            _ => None,
        }
    }

    /// What the client reads: never internal detail.
    pub(crate) fn public_message(&self) -> String {
        match self {
            Self::Upstream(_) => "the worker failed or could not be reached".to_owned(),
            Self::Internal(_) => "internal error".to_owned(),
            Self::Body { error, .. } => error.public_message(),
            other => other.to_string(),
        }
    }
}

impl RequestError {
    /// Its log line, for an error of the gateway's or a worker's (5xx): "request failed".
    pub(crate) fn log(&self) {
        if self.status().is_server_error() {
            tracing::warn!(error = %self, error_type = self.error_type().as_str(), "request failed");
        }
    }

    /// The answer, without the log line of [`IntoResponse::into_response`] (for errors logged
    /// otherwise, e.g. once per kind).
    pub(crate) fn quiet_response(self) -> Response {
        let body = ErrorBody { error: self.public_message(), error_type: self.error_type() };
        let mut resp = (self.status(), Json(body)).into_response();
        if let Some(s) = self.retry_after_s() {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if matches!(self, Self::Body { .. }) {
            // The body was left partly unread: the connection cannot carry another request.
            resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

impl IntoResponse for RequestError {
    fn into_response(self) -> Response {
        self.log();
        self.quiet_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn overload_answers_429_with_retry_after_and_json() {
        let resp = RequestError::Overloaded { retry_after_s: 2 }.into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "2");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let e: ErrorBody = serde_json::from_slice(&body).unwrap();
        assert_eq!(e.error_type, ErrorType::Overloaded);
    }

    #[tokio::test]
    async fn upstream_detail_stays_in_the_log() {
        let resp = RequestError::Upstream("connection reset by 10.0.0.1".into()).into_response();
        assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let e: ErrorBody = serde_json::from_slice(&body).unwrap();
        assert_eq!(e.error_type, ErrorType::Upstream);
        assert!(!e.error.contains("10.0.0.1"));
    }
}
