//! Health, readiness, metrics and the stats snapshot for the gateway.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::time::Instant;
use wire::{STATS_SCHEMA_VERSION, WorkerStats};

use super::AppState;
use super::error::ApiError;
use crate::core::CoreError;
use crate::telemetry::with_age;

pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "alive"}))
}

pub async fn readyz(State(state): State<AppState>) -> Response {
    if state.core.is_draining() {
        ApiError::from(CoreError::Draining).into_response()
    } else {
        Json(json!({"status": "ready", "model": state.model.name})).into_response()
    }
}

pub async fn metrics(State(state): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => {
            let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
            let (content_type, body) = crate::metrics::negotiate(body, accept);
            ([(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        Err(e) => ApiError::Internal(format!("encoding metrics: {e}")).into_response(),
    }
}

pub async fn stats(State(state): State<AppState>) -> Json<WorkerStats> {
    let now = Instant::now();
    let (rates, batches) = state.stats.snapshot(now);
    let draining = state.core.is_draining();
    Json(WorkerStats {
        schema_version: STATS_SCHEMA_VERSION,
        worker_id: state.worker_id.clone(),
        timestamp_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        uptime_s: state.stats.uptime(now).as_secs_f64(),
        ready: !draining,
        draining,
        model: state.model.clone(),
        queue: state.core.queue_stats(),
        rates,
        batches,
        gpu: with_age(state.gpu.borrow().clone()),
        capacity: crate::capacity::estimate(
            state.calibrated(),
            state.stats.backend_window(now),
            state.core.light_sessions(),
        ),
    })
}
