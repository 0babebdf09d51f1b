//! The HTTP layer: routes, shared state, error mapping.

mod error;
mod ops;
mod predict;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokenizers::Tokenizer;
use tokio::sync::{mpsc, watch};
use tower_http::catch_panic::CatchPanicLayer;
use wire::{GpuTelemetry, ModelInfo};

pub use error::ApiError;

use crate::batching::{Entry, Limits};
use crate::load::Load;
use crate::metrics::Metrics;
use crate::stats::Stats;

/// Per-request bounds.
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    pub max_queries: usize,
    pub max_query_bytes: usize,
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
}

/// Everything the handlers share. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState(Arc<Inner>);

#[derive(Debug)]
pub struct Inner {
    pub worker_id: String,
    pub model: ModelInfo,
    pub labels: Arc<[String]>,
    pub tokenizer: Arc<Tokenizer>,
    pub queue: mpsc::Sender<Entry>,
    pub batch_limits: Limits,
    pub limits: RequestLimits,
    pub load: Arc<Load>,
    pub stats: Arc<Stats>,
    pub metrics: Arc<Metrics>,
    pub registry: Arc<Registry>,
    pub gpu: watch::Receiver<GpuTelemetry>,
    pub draining: AtomicBool,
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

    /// Readiness turns false and new work is refused; accepted work goes on.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }
}

pub fn app(state: AppState) -> Router {
    let body_limit = state.limits.max_body_bytes;
    Router::new()
        .route("/predict", get(predict::get).post(predict::post))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/v1/stats", get(ops::stats))
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(CatchPanicLayer::custom(error::panic_response))
        .with_state(state)
}
