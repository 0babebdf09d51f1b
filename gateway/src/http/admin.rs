//! The admin port: what operators and the autoscaler read (`/metrics`, `/v1/pools`,
//! `/v1/signal`, `/pools/{pool}/signal`) and the health routes. Worker addresses and the signal
//! are not the clients' business: this port is loopback by default (`--admin-listen`).

use std::future::Future;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use http::header;
use serde::Serialize;
use tokio::net::TcpListener;
use tower::ServiceExt;

use super::{AppState, healthz, method_not_allowed, not_found, readyz, serve as serving};
use crate::error::RequestError;
use crate::metrics;
use crate::pool::{Pool, WorkerStatus};
use crate::signal::PoolSignal;

/// The admin port's router.
fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_handler))
        .route("/v1/pools", get(pools_view))
        .route("/v1/signal", get(signals))
        .route("/pools/{pool}/signal", get(pool_signal))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Serve operators on `tcp` until `shutdown` resolves, under the same listener limits as the
/// client port (its own connection cap and body budget).
pub(crate) async fn serve(
    tcp: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let server = listener::Server::new(tcp, state.listener_config(), state.admin_listener.clone());
    let panics = state.panics.clone();
    let router = router(state);
    let handler = move |req: http::Request<hyper::body::Incoming>| {
        let router = router.clone();
        async move {
            match router.oneshot(req.map(Body::new)).await {
                Ok(r) => r,
                Err(e) => match e {},
            }
        }
    };
    serving::serve(server, handler, panics, shutdown).await
}

/// The pool's last published signal, with the requests held for a worker now (read at once,
/// not at the next signal step: a pool waking from zero shows its first request).
fn current_signal(pool: &Pool) -> PoolSignal {
    let mut s = pool.signal().borrow().clone();
    s.held_requests = pool.backlog();
    s
}

async fn signals(State(state): State<AppState>) -> Json<Vec<PoolSignal>> {
    Json(state.pools.all().iter().map(|p| current_signal(p)).collect())
}

async fn pool_signal(State(state): State<AppState>, Path(pool): Path<String>) -> Response {
    match state.pools.get(&pool) {
        Some(p) => Json(current_signal(&p)).into_response(),
        None => RequestError::UnknownPool(pool).into_response(),
    }
}

#[derive(Serialize)]
struct PoolView {
    pool: String,
    backlog: u64,
    workers: Vec<WorkerStatus>,
}

/// Every pool's workers (debugging).
async fn pools_view(State(state): State<AppState>) -> Json<Vec<PoolView>> {
    Json(
        state
            .pools
            .all()
            .iter()
            .map(|p| PoolView { pool: p.name.clone(), backlog: p.backlog(), workers: p.workers() })
            .collect(),
    )
}

async fn metrics_handler(State(state): State<AppState>, headers: http::HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (content_type, body) = metrics::negotiate(metrics::render(&state.registry), accept);
    ([(header::CONTENT_TYPE, content_type)], Body::from(body)).into_response()
}
