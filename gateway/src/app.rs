//! The HTTP surface: routes, admission control, and the request/response plumbing around
//! [`proxy::forward`].

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::uri::PathAndQuery;
use http::{Method, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Body as HttpBody;
use prometheus_client::registry::Registry;
use serde::Serialize;
use tokio::sync::Semaphore;

use crate::endpoint::Health;
use crate::error::GatewayError;
use crate::metrics::{self, RequestLabels};
use crate::pool::{Pool, Pools};
use crate::proxy::{self, Incoming};
use crate::signal::PoolSignal;

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    pub pools: Arc<Pools>,
    admission: Arc<Semaphore>,
    registry: Arc<Registry>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").finish_non_exhaustive()
    }
}

impl AppState {
    pub fn new(pools: Arc<Pools>) -> Self {
        let ctx = pools.ctx();
        let admission = Arc::new(Semaphore::new(ctx.config.max_outstanding));
        let registry = Arc::new(ctx.metrics.registry());
        Self { pools, admission, registry }
    }

    fn default_pool(&self) -> &str {
        &self.pools.ctx().config.default_pool
    }
}

/// The client-facing router. `/metrics` is included unless it has its own listener.
pub fn app(state: AppState) -> Router {
    let predict = Router::new()
        .route("/predict", get(predict_default).post(predict_default))
        .route("/pools/{pool}/predict", get(predict_pool).post(predict_pool))
        .route_layer(middleware::from_fn_with_state(state.clone(), admit));
    let mut router = Router::new()
        .merge(predict)
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/signal", get(signals))
        .route("/pools/{pool}/signal", get(pool_signal))
        .route("/v1/pools", get(pools_view));
    if state.pools.ctx().config.metrics_listen.is_none() {
        router = router.route("/metrics", get(metrics_handler));
    }
    router.fallback(not_found).method_not_allowed_fallback(method_not_allowed).with_state(state)
}

/// The router of the separate metrics listener.
pub fn metrics_app(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Bounded admission: at most `--max-outstanding` requests inside the gateway; beyond it 429
/// with `Retry-After`, at once.
async fn admit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    admitted(&state, next.run(req)).await
}

/// Run `work` under admission, counted in `gateway_outstanding`; 429 at once when full.
async fn admitted(state: &AppState, work: impl Future<Output = Response>) -> Response {
    match state.admission.try_acquire() {
        Ok(_permit) => {
            let _counted = Outstanding::new(&state.pools.ctx().metrics.outstanding);
            work.await
        }
        Err(_) => overloaded(state),
    }
}

fn overloaded(state: &AppState) -> Response {
    let ctx = state.pools.ctx();
    ctx.metrics.admission_rejected.inc();
    ctx.metrics
        .requests
        .get_or_create(&RequestLabels {
            pool: String::new(),
            worker: "none".to_owned(),
            outcome: wire::ErrorType::Overloaded.as_str().to_owned(),
        })
        .inc();
    GatewayError::Overloaded { retry_after_s: ctx.config.retry_after_s }.into_response()
}

/// `GET`/`POST /predict` with admission, as the router's route and `admit` do it, for the
/// listener's fast path (`server`), which skips the router.
pub(crate) async fn predict_default_admitted<B>(state: &AppState, req: http::Request<B>) -> Response
where
    B: HttpBody<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    admitted(state, predict(state, state.default_pool(), req)).await
}

/// Counts a request in `gateway_outstanding` while it lives, also when the client goes away.
struct Outstanding<'a>(&'a prometheus_client::metrics::gauge::Gauge);

impl<'a> Outstanding<'a> {
    fn new(g: &'a prometheus_client::metrics::gauge::Gauge) -> Self {
        g.inc();
        Self(g)
    }
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

async fn predict_default(State(state): State<AppState>, req: Request) -> Response {
    predict(&state, state.default_pool(), req).await
}

async fn predict_pool(State(state): State<AppState>, Path(pool): Path<String>, req: Request) -> Response {
    predict(&state, &pool, req).await
}

async fn predict<B>(state: &AppState, pool_name: &str, req: http::Request<B>) -> Response
where
    B: HttpBody<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Some(pool) = state.pools.get(pool_name) else {
        return GatewayError::UnknownPool(pool_name.to_owned()).into_response();
    };
    match incoming(req, state.pools.ctx().config.max_body_bytes).await {
        Ok(inc) => proxy::forward(&pool, inc).await,
        Err(e) => e.into_response(),
    }
}

/// Buffer the client's request (bounded), keeping what the worker needs.
async fn incoming<B>(req: http::Request<B>, max_body: usize) -> Result<Incoming, GatewayError>
where
    B: HttpBody<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (parts, body) = req.into_parts();
    // `/predict?...` is forwarded as it came (a cheap clone of the parsed URI's bytes); other
    // routes (`/pools/{pool}/predict`) become `/predict` with the same query.
    let path_and_query = match parts.uri.path_and_query() {
        Some(pq) if pq.path() == "/predict" => pq.clone(),
        _ => {
            let pq = match parts.uri.query() {
                Some(q) => format!("/predict?{q}"),
                None => "/predict".to_owned(),
            };
            PathAndQuery::try_from(pq).map_err(|e| GatewayError::InvalidRequest(format!("bad path: {e}")))?
        }
    };
    let body = if parts.method == Method::GET {
        bytes::Bytes::new()
    } else {
        Limited::new(body, max_body).collect().await.map_err(|_| GatewayError::TooLarge(max_body))?.to_bytes()
    };
    Ok(Incoming {
        method: parts.method,
        path_and_query,
        content_type: parts.headers.get(header::CONTENT_TYPE).cloned(),
        body,
    })
}

async fn healthz() -> &'static str {
    "ok"
}

/// Ready when the default pool has a worker receiving traffic.
async fn readyz(State(state): State<AppState>) -> Response {
    let ready = state.pools.get(state.default_pool()).is_some_and(|p| p.endpoints().iter().any(|e| e.is_ready()));
    if ready {
        (StatusCode::OK, "ready").into_response()
    } else {
        GatewayError::NoWorker { pool: state.default_pool().to_owned(), retry_after_s: 1 }.into_response()
    }
}

fn current_signal(pool: &Pool) -> PoolSignal {
    pool.signal().borrow().clone()
}

async fn signals(State(state): State<AppState>) -> Json<Vec<PoolSignal>> {
    Json(state.pools.all().iter().map(|p| current_signal(p)).collect())
}

async fn pool_signal(State(state): State<AppState>, Path(pool): Path<String>) -> Response {
    match state.pools.get(&pool) {
        Some(p) => Json(current_signal(&p)).into_response(),
        None => GatewayError::UnknownPool(pool).into_response(),
    }
}

#[derive(Serialize)]
struct WorkerView {
    url: String,
    health: Health,
    outstanding: u64,
    rtt_estimate_ms: f64,
    telemetry_age_ms: Option<u64>,
    reported_queue: Option<u64>,
    gpu_pct: Option<f64>,
}

#[derive(Serialize)]
struct PoolView {
    pool: String,
    backlog: u64,
    workers: Vec<WorkerView>,
}

/// Debugging view of every pool's workers.
async fn pools_view(State(state): State<AppState>) -> Json<Vec<PoolView>> {
    let pools = state.pools.all();
    Json(
        pools
            .iter()
            .map(|p| PoolView {
                pool: p.name.clone(),
                backlog: p.backlog(),
                workers: p
                    .endpoints()
                    .iter()
                    .map(|e| {
                        let s = e.snapshot();
                        WorkerView {
                            url: e.url.clone(),
                            health: e.health(),
                            outstanding: e.outstanding(),
                            rtt_estimate_ms: e.rtt_estimate_s() * 1000.0,
                            telemetry_age_ms: s.as_ref().map(|s| s.at.elapsed().as_millis() as u64),
                            reported_queue: s.as_ref().map(|s| s.reported_queue),
                            gpu_pct: s.and_then(|s| s.gpu_pct),
                        }
                    })
                    .collect(),
            })
            .collect(),
    )
}

async fn metrics_handler(State(state): State<AppState>) -> Response {
    let body = metrics::render(&state.registry);
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], Body::from(body))
        .into_response()
}

async fn not_found(req: Request) -> Response {
    GatewayError::NotFound(req.uri().path().to_owned()).into_response()
}

async fn method_not_allowed(req: Request) -> Response {
    GatewayError::MethodNotAllowed(req.method().to_string()).into_response()
}
