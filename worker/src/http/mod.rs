//! The HTTP layer: routes, shared state, parsing and error mapping. The work is the core's.

mod context;
mod error;
mod ops;
mod predict;

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tower_http::catch_panic::CatchPanicLayer;
use wire::{GpuTelemetry, ModelInfo};

pub use context::X_REQUEST_ID;
pub use error::{ApiError, RETRY_AFTER_S};

use crate::core::Core;
use crate::metrics::Metrics;
use crate::stats::Stats;

/// Everything the handlers share. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState(Arc<Inner>);

#[derive(Debug)]
pub struct Inner {
    pub core: Arc<Core>,
    pub worker_id: String,
    pub model: ModelInfo,
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// The listener's body reader (its deadline and byte budget), once served by
    /// `Worker::serve`; without one (the routes alone, in tests) bodies are read under
    /// `max_body_bytes` only.
    pub bodies: OnceLock<listener::BodyReader>,
    pub stats: Arc<Stats>,
    pub metrics: Arc<Metrics>,
    pub registry: Arc<Registry>,
    pub gpu: watch::Receiver<GpuTelemetry>,
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    pub fn new(inner: Inner) -> Self {
        Self(Arc::new(inner))
    }
}

pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/predict", get(predict::get).post(predict::post))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/v1/stats", get(ops::stats))
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(CatchPanicLayer::custom(error::panic_response))
        .layer(axum::middleware::from_fn_with_state(state.clone(), context::request_context))
        .with_state(state)
}
