//! The routes and the guard in front of all of them: always-allow paths pass; every other
//! request is authenticated (401 `Status` without an identity), authorized (403, or 500 when the
//! authorizer cannot be asked), then routed. Unknown paths are 404 only after that, so a caller
//! without an identity learns nothing, not even which paths exist. Every answer is counted in
//! `gateway_metrics_api_requests_total{code,reason}` and timed; every refusal is logged.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use http::{HeaderMap, HeaderValue, StatusCode, header};

use super::authn::{self, PeerCert};
use super::authz::{Authorizer, Decision};
use super::discovery::Discovery;
use super::doc::{Format, negotiate};
use super::metrics::ApiMetrics;
use super::openapi::{OpenApi, V3_GROUP_PATH};
use super::request_info;
use super::selector::LabelSelector;
use super::source::PoolSource;
use super::status::ApiError;
use super::trust::TrustStore;
use super::values::{self, GROUP, GROUP_VERSION, Metric};

/// One always-allow path: exact, or a prefix when written with a trailing `*` (as kube's).
#[derive(Debug, Clone)]
pub enum PathRule {
    Exact(String),
    Prefix(String),
}

impl PathRule {
    pub fn parse(s: &str) -> Self {
        match s.strip_suffix('*') {
            Some(p) => Self::Prefix(p.to_owned()),
            None => Self::Exact(s.to_owned()),
        }
    }

    fn matches(&self, path: &str) -> bool {
        match self {
            Self::Exact(p) => p == path,
            Self::Prefix(p) => path.starts_with(p.as_str()),
        }
    }
}

/// Shared by every handler.
#[derive(Clone)]
pub struct ApiState {
    pub source: Arc<dyn PoolSource>,
    pub trust: Arc<TrustStore>,
    pub authorizer: Arc<Authorizer>,
    pub always_allow: Arc<Vec<PathRule>>,
    pub metrics: ApiMetrics,
    discovery: Arc<Discovery>,
    openapi: Arc<OpenApi>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState").finish_non_exhaustive()
    }
}

impl ApiState {
    pub fn new(
        source: Arc<dyn PoolSource>,
        trust: Arc<TrustStore>,
        authorizer: Arc<Authorizer>,
        always_allow: Vec<PathRule>,
        metrics: ApiMetrics,
    ) -> Self {
        Self {
            source,
            trust,
            authorizer,
            always_allow: Arc::new(always_allow),
            metrics,
            discovery: Arc::new(Discovery::new()),
            openapi: Arc::new(OpenApi::new()),
        }
    }
}

/// The metric label of a refusal, carried on the response from the guard to the counter.
#[derive(Clone, Copy)]
struct Reason(&'static str);

fn refuse(e: ApiError) -> Response {
    let label = e.label();
    let mut r = e.into_response();
    r.extensions_mut().insert(Reason(label));
    r
}

/// The router: every route and the fallback behind the guard. The connection's client
/// certificate travels as an `Arc<PeerCert>` request extension (none: no certificate).
pub fn app(state: ApiState) -> Router {
    Router::new()
        .route("/apis", get(apis))
        .route(&format!("/apis/{GROUP}"), get(group))
        .route(&format!("/apis/{GROUP_VERSION}"), get(resources))
        .route(&format!("/apis/{GROUP_VERSION}/namespaces/{{namespace}}/{{metric}}"), get(metric_values))
        .route("/openapi/v2", get(openapi_v2))
        .route("/openapi/v3", get(openapi_v3))
        .route(&format!("/openapi/v3/{V3_GROUP_PATH}"), get(openapi_v3_group))
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(ok))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

async fn guard(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let resp = check_then_run(&state, req, next).await;
    state.metrics.duration.observe(started.elapsed().as_secs_f64());
    let code = resp.status();
    let reason = match resp.extensions().get::<Reason>() {
        Some(Reason(r)) => r,
        None if code.is_success() => "ok",
        None if code == StatusCode::NOT_MODIFIED => "NotModified",
        None => code.canonical_reason().unwrap_or("other"),
    };
    state.metrics.count(code.as_u16(), reason);
    resp
}

async fn check_then_run(state: &ApiState, req: Request, next: Next) -> Response {
    if state.always_allow.iter().any(|r| r.matches(req.uri().path())) {
        return next.run(req).await;
    }
    let path = req.uri().path().to_owned();
    let path = path.as_str();
    let trust = state.trust.load();
    let peer = req.extensions().get::<Arc<PeerCert>>().cloned().unwrap_or_default();
    let user = match authn::authenticate(&trust, &peer, req.headers()) {
        Ok(u) => u,
        Err(why) => {
            tracing::info!(reason = why, path, "metrics API: unauthenticated request refused (401)");
            return refuse(ApiError::Unauthorized(why));
        }
    };
    let attrs = request_info::resolve(req.method(), path, req.uri().query());
    match state.authorizer.authorize(&user, &attrs, &state.metrics).await {
        Decision::Allowed => next.run(req).await,
        Decision::Denied(reason) => {
            let mut message = attrs.forbidden_message(&user.name);
            if !reason.is_empty() {
                message = format!("{message}: {reason}");
            }
            tracing::warn!(user = %user.name, groups = ?user.groups, %message, "metrics API: request refused (403)");
            refuse(ApiError::Forbidden(message))
        }
        Decision::Unavailable(detail) => {
            tracing::error!(user = %user.name, error = %detail, "metrics API: authorization failed (500)");
            refuse(ApiError::AuthorizationUnavailable)
        }
    }
}

fn not_acceptable() -> Response {
    refuse(ApiError::NotAcceptable(
        "only application/json (and, on /apis, aggregated discovery apidiscovery.k8s.io/v2) is served".to_owned(),
    ))
}

async fn apis(State(s): State<ApiState>, headers: HeaderMap) -> Response {
    match negotiate(&headers, true) {
        Some(Format::AggregatedV2) => s.discovery.aggregated.respond(&headers),
        Some(Format::Json) => s.discovery.group_list.respond(&headers),
        None => not_acceptable(),
    }
}

async fn group(State(s): State<ApiState>, headers: HeaderMap) -> Response {
    match negotiate(&headers, false) {
        Some(_) => s.discovery.group.respond(&headers),
        None => not_acceptable(),
    }
}

async fn resources(State(s): State<ApiState>, headers: HeaderMap) -> Response {
    match negotiate(&headers, false) {
        Some(_) => s.discovery.resources.respond(&headers),
        None => not_acceptable(),
    }
}

async fn openapi_v2(State(s): State<ApiState>, headers: HeaderMap) -> Response {
    s.openapi.v2.respond(&headers)
}

async fn openapi_v3(State(s): State<ApiState>, headers: HeaderMap) -> Response {
    s.openapi.v3_index.respond(&headers)
}

async fn openapi_v3_group(State(s): State<ApiState>, headers: HeaderMap) -> Response {
    s.openapi.v3_group.respond(&headers)
}

async fn ok() -> Response {
    let mut r = Response::new(Body::from("ok"));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

async fn not_found() -> Response {
    refuse(ApiError::NotFound("the server could not find the requested resource".to_owned()))
}

async fn method_not_allowed() -> Response {
    refuse(ApiError::MethodNotAllowed("only GET is served".to_owned()))
}

/// The first `labelSelector` of a query string, form-decoded (`+` is a space).
fn label_selector(query: Option<&str>) -> Result<String, ApiError> {
    for pair in query.unwrap_or("").split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == "labelSelector" {
            let v = v.replace('+', " ");
            return percent_encoding::percent_decode_str(&v)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| ApiError::BadRequest("labelSelector is not UTF-8".to_owned()));
        }
    }
    Ok(String::new())
}

async fn metric_values(
    State(s): State<ApiState>,
    Path((namespace, metric)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    if negotiate(&headers, false).is_none() {
        return not_acceptable();
    }
    let Some(m) = Metric::from_name(&metric) else {
        let served: Vec<_> = Metric::ALL.iter().map(|m| m.name()).collect();
        return refuse(ApiError::NotFound(format!(
            "external metric {metric:?} is not served here; served: {}",
            served.join(", ")
        )));
    };
    let selector = match label_selector(query.as_deref()).and_then(|raw| {
        LabelSelector::parse(&raw).map_err(|e| ApiError::BadRequest(format!("labelSelector {raw:?}: {e}")))
    }) {
        Ok(sel) => sel,
        Err(e) => return refuse(e),
    };
    let list = values::list(m, &s.source.pools(&namespace), &selector);
    let mut r = Response::new(Body::from(serde_json::to_vec(&list).unwrap_or_default()));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}
