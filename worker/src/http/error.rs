//! Every error a client can see, mapped once to a status and a JSON body.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use wire::{ErrorBody, ErrorType};

/// Seconds a client is told to wait before retrying an overloaded or draining worker.
const RETRY_AFTER_S: &str = "1";

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    Invalid(String),
    #[error("query {index} is {len} bytes; the limit is {limit}")]
    QueryTooLong { index: usize, len: usize, limit: usize },
    #[error("request body over the {limit}-byte limit")]
    BodyTooLarge { limit: usize },
    #[error("the worker is at capacity; retry later")]
    Overloaded,
    #[error("the worker is shutting down; retry on another worker")]
    Draining,
    #[error("no answer within {0:.1} s")]
    Timeout(f64),
    #[error("no route for {0}")]
    NotFound(String),
    #[error("method not allowed")]
    MethodNotAllowed,
    /// Details go to the log, not to the client.
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    pub fn error_type(&self) -> ErrorType {
        match self {
            Self::Invalid(_) => ErrorType::InvalidRequest,
            Self::QueryTooLong { .. } | Self::BodyTooLarge { .. } => ErrorType::TooLarge,
            Self::Overloaded => ErrorType::Overloaded,
            Self::Draining => ErrorType::Unavailable,
            Self::Timeout(_) => ErrorType::Timeout,
            Self::NotFound(_) => ErrorType::NotFound,
            Self::MethodNotAllowed => ErrorType::MethodNotAllowed,
            Self::Internal(_) => ErrorType::Internal,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::Invalid(_) | Self::QueryTooLong { .. } => StatusCode::BAD_REQUEST,
            Self::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Overloaded => StatusCode::TOO_MANY_REQUESTS,
            Self::Draining => StatusCode::SERVICE_UNAVAILABLE,
            Self::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Internal(detail) = &self {
            tracing::error!(%detail, "internal error");
        }
        let body = ErrorBody { error: self.to_string(), error_type: self.error_type() };
        let mut response = (self.status(), Json(body)).into_response();
        if matches!(self, Self::Overloaded | Self::Draining) {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_S));
        }
        response
    }
}

/// Maps a panic in a handler to a JSON 500 (installed with `CatchPanicLayer`).
pub fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    ApiError::Internal("a handler panicked".into()).into_response()
}

pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(uri.path().to_owned())
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
