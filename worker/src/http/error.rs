//! Every error a client can see, mapped once to a status and a JSON body.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use wire::{ErrorBody, ErrorType};

use crate::core::CoreError;

/// Seconds a client is told to wait before retrying an overloaded or draining worker.
pub const RETRY_AFTER_S: u64 = 1;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Refused or failed by the core.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The request could not be parsed (bad JSON or query string).
    #[error("{0}")]
    Invalid(String),
    /// The body could not be read: too large (413), too slow (408), broken framing (400), or
    /// the listener's body budget is spent (503); answered as the listener answers it.
    #[error("{}", .0.public_message())]
    Body(listener::Error),
    #[error("request body over the {limit}-byte limit")]
    BodyTooLarge { limit: usize },
    #[error("no route for {0}")]
    NotFound(String),
    /// An Open Inference Protocol request for a model or version this worker does not serve.
    #[error("{0}")]
    UnknownModel(String),
    #[error("method not allowed")]
    MethodNotAllowed,
    /// Details go to the log, not to the client.
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    pub fn error_type(&self) -> ErrorType {
        match self {
            Self::Core(e) => e.error_type(),
            Self::Invalid(_) => ErrorType::InvalidRequest,
            Self::Body(e) => e.error_type(),
            Self::BodyTooLarge { .. } => ErrorType::TooLarge,
            Self::NotFound(_) | Self::UnknownModel(_) => ErrorType::NotFound,
            Self::MethodNotAllowed => ErrorType::MethodNotAllowed,
            Self::Internal(_) => ErrorType::Internal,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::Core(e) => match e {
                CoreError::Invalid(_) | CoreError::QueryTooLong { .. } => StatusCode::BAD_REQUEST,
                CoreError::Overloaded => StatusCode::TOO_MANY_REQUESTS,
                CoreError::Draining => StatusCode::SERVICE_UNAVAILABLE,
                CoreError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
                CoreError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            },
            Self::Invalid(_) => StatusCode::BAD_REQUEST,
            Self::Body(e) => e.status(),
            Self::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::NotFound(_) | Self::UnknownModel(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn retry_after(&self) -> bool {
        matches!(self, Self::Core(CoreError::Overloaded | CoreError::Draining))
    }

    fn detail(&self) -> Option<&str> {
        match self {
            Self::Internal(d) | Self::Core(CoreError::Internal(d)) => Some(d),
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Body(e) = &self {
            if tracing::enabled!(tracing::Level::DEBUG) {
                super::context::request_span().in_scope(|| tracing::debug!(error = %e, "request body refused"));
            }
            return e.response(RETRY_AFTER_S);
        }
        if let Some(detail) = self.detail() {
            super::context::request_span().in_scope(|| tracing::error!(%detail, "internal error"));
        }
        let body = ErrorBody { error: self.to_string(), error_type: self.error_type() };
        let mut response = (self.status(), Json(body)).into_response();
        if self.retry_after() {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
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
