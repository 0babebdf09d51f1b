//! The Open Inference Protocol's server routes of the client port, answered by the gateway
//! itself: `GET /v2` (server metadata), `/v2/health/live` and `/v2/health/ready` (ready as
//! `/readyz` is: the default pool has a worker receiving traffic). The model routes
//! (`/v2/models/...`) are a worker's, forwarded by the predict entry (`predict::handle_to`).

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::AppState;
use crate::error::RequestError;

/// What `GET /v2` calls this server.
pub(crate) const SERVER_NAME: &str = "inference-gateway";

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v2", get(|| async { Json(oip::meta::server(SERVER_NAME)) }))
        .route("/v2/health/live", get(|| async { Json(json!({"live": true})) }))
        .route("/v2/health/ready", get(ready))
}

/// Whether the pool `pool` has a worker receiving traffic.
pub(crate) fn pool_ready(state: &AppState, pool: &str) -> bool {
    state.pools.get(pool).is_some_and(|p| p.endpoints().iter().any(|e| e.is_ready()))
}

async fn ready(State(state): State<AppState>) -> Response {
    if pool_ready(&state, state.default_pool()) {
        Json(json!({"ready": true})).into_response()
    } else {
        RequestError::NoWorker { pool: state.default_pool().to_owned(), retry_after_s: 1 }.into_response()
    }
}
