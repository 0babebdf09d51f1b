//! Refusals and errors as Kubernetes `Status` objects (`kind: Status`, `apiVersion: v1`), the
//! body every Kubernetes client decodes on a non-2xx answer. The `reason` is the stable,
//! machine-readable kind; it is also the `reason` label of `gateway_metrics_api_requests_total`.

use axum::body::Body;
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusDetails};

/// Why a request was not served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// No identity: no client certificate, one no configured CA signed, a front-proxy certificate
    /// whose CN is not allowed, or one without a user header.
    Unauthorized(&'static str),
    /// Authenticated but not allowed: kube-apiserver's message (who cannot do what, and the
    /// authorizer's reason if it gave one).
    Forbidden(String),
    NotFound(String),
    BadRequest(String),
    NotAcceptable(String),
    MethodNotAllowed(String),
    /// The authorizer could not be asked (the detail goes to the log only).
    AuthorizationUnavailable,
}

impl ApiError {
    /// The HTTP status and the Kubernetes `reason`.
    pub fn code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "Forbidden"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "NotFound"),
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
            Self::NotAcceptable(_) => (StatusCode::NOT_ACCEPTABLE, "NotAcceptable"),
            Self::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
            Self::AuthorizationUnavailable => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
        }
    }

    /// The metric label: the Kubernetes reason, refined for 401s (which check refused).
    pub fn label(&self) -> &'static str {
        match self {
            Self::Unauthorized(why) => why,
            other => other.code().1,
        }
    }

    pub fn message(&self) -> String {
        match self {
            // As kube-apiserver: nothing about why, to a caller without an identity.
            Self::Unauthorized(_) => "Unauthorized".to_owned(),
            Self::Forbidden(m)
            | Self::NotFound(m)
            | Self::BadRequest(m)
            | Self::NotAcceptable(m)
            | Self::MethodNotAllowed(m) => m.clone(),
            Self::AuthorizationUnavailable => {
                "Internal error occurred: the authorization check could not be completed; retry".to_owned()
            }
        }
    }

    pub fn into_response(self) -> Response {
        let (code, reason) = self.code();
        let details = match &self {
            Self::Forbidden(_) | Self::NotFound(_) => {
                Some(StatusDetails { group: Some(super::values::GROUP.to_owned()), ..Default::default() })
            }
            _ => None,
        };
        status_response(code, reason, self.message(), details)
    }
}

pub fn status_response(code: StatusCode, reason: &str, message: String, details: Option<StatusDetails>) -> Response {
    let status = Status {
        code: Some(i32::from(code.as_u16())),
        message: Some(message),
        reason: Some(reason.to_owned()),
        status: Some("Failure".to_owned()),
        details,
        ..Default::default()
    };
    let body = serde_json::to_vec(&status).unwrap_or_default();
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = code;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}
