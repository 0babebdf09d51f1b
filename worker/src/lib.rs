//! The worker: HTTP layer ([`http`]), batching engine ([`batching`]) and inference backend
//! ([`backend`]), kept apart as in text-embeddings-inference.
#![forbid(unsafe_code)]

pub mod backend;
pub mod batching;
pub mod config;
pub mod http;
pub mod load;
pub mod metrics;
pub mod model;
pub mod stats;
pub mod telemetry;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

pub use config::Config;

use crate::backend::{BackendError, OrtBackend, ShapeBuckets};
use crate::batching::Limits;
use crate::config::Device;
use crate::http::{AppState, Inner, RequestLimits};
use crate::load::Load;
use crate::metrics::{LiveCollector, Metrics};
use crate::model::{ModelDir, ModelError};
use crate::stats::Stats;

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("listening on {0}: {1}")]
    Listen(std::net::SocketAddr, std::io::Error),
    #[error("{0}")]
    Other(String),
}

/// Loads the model, serves until SIGTERM or SIGINT, drains, and returns.
pub async fn run(config: Config) -> Result<(), StartupError> {
    let model = ModelDir::load(&config.model, config.model_file.as_deref())?;
    tracing::info!(model = %model.model_path.display(), labels = model.labels.len(), device = %config.device, "loading");
    let env = backend::ort::load_library(config.ort_lib.as_deref())?;
    let backend = {
        let (path, device, threads, n) = (model.model_path.clone(), config.device, config.threads, model.labels.len());
        let buckets = ShapeBuckets { max_rows: config.max_batch_rows.max(1), max_seq: model.max_tokens };
        let max_tokens = config.max_batch_tokens;
        tokio::task::spawn_blocking(move || {
            let backend = OrtBackend::load(&env, &path, device, threads, n)?;
            match device {
                Device::Cuda(_) => backend.with_shape_buckets(buckets, max_tokens),
                Device::Cpu => Ok(backend),
            }
        })
        .await
        .map_err(|e| StartupError::Other(format!("model loading task: {e}")))??
    };

    let batch_limits = Limits {
        max_rows: config.max_batch_rows.max(1),
        max_tokens: config.max_batch_tokens.max(1),
        max_delay: config.max_queue_delay(),
        min_fill: config.min_batch_fill(),
    };
    let load = Arc::new(Load::new(config.queue_capacity.max(1)));
    let stats = Arc::new(Stats::new(Duration::from_secs(config.stats_window_s)));
    let gpu = telemetry::spawn_sampler(config.device, Duration::from_millis(config.gpu_sample_ms.max(10)));
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    registry.register_collector(Box::new(LiveCollector { load: load.clone(), limits: batch_limits, gpu: gpu.clone() }));

    let (queue_tx, queue_rx) = mpsc::channel(config.queue_capacity.max(1));
    let (batch_tx, batch_rx) = mpsc::channel(1);
    let backend_load = Arc::new(batching::BackendLoad::default());
    tokio::spawn(batching::task::run(
        batch_limits,
        queue_rx,
        batch_tx,
        backend_load.clone(),
        metrics.cancelled.clone(),
    ));
    let observers = backend::runner::Observers {
        load: load.clone(),
        stats: stats.clone(),
        metrics: metrics.clone(),
        backend: backend_load,
    };
    backend::spawn(backend, batch_rx, observers).map_err(|e| StartupError::Other(format!("backend thread: {e}")))?;

    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
    let state = AppState::new(Inner {
        worker_id: format!("{host}/{}", std::process::id()),
        model: wire::ModelInfo {
            name: model.name.clone(),
            device: config.device.to_string(),
            labels: model.labels.clone(),
        },
        labels: model.labels.into(),
        tokenizer: Arc::new(model.tokenizer),
        queue: queue_tx,
        batch_limits,
        limits: RequestLimits {
            max_queries: config.max_queries,
            max_query_bytes: config.max_query_bytes,
            max_body_bytes: config.max_body_bytes,
            request_timeout: config.request_timeout(),
        },
        load: load.clone(),
        stats,
        metrics,
        registry: Arc::new(registry),
        gpu,
        draining: AtomicBool::new(false),
    });

    let listener = TcpListener::bind(config.listen).await.map_err(|e| StartupError::Listen(config.listen, e))?;
    let addr = listener.local_addr().map_err(|e| StartupError::Listen(config.listen, e))?;
    announce(addr);
    tracing::info!(%addr, "ready");

    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(
        axum::serve(listener, http::app(state.clone()))
            .with_graceful_shutdown(async {
                let _ = stop_rx.await;
            })
            .into_future(),
    );
    shutdown_signal().await;
    state.start_draining();
    let deadline = Instant::now() + config.drain_timeout();
    tracing::info!(outstanding = load.outstanding(), "draining");
    while load.outstanding() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if load.outstanding() > 0 {
        tracing::warn!(outstanding = load.outstanding(), "drain timeout reached with work outstanding");
    }
    let _ = stop_tx.send(());
    // Responses already computed are being written; idle keep-alive connections close at once.
    if tokio::time::timeout(Duration::from_secs(5), server).await.is_err() {
        tracing::warn!("connections still open after drain; exiting anyway");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Tells whoever started us (tests, scripts) where we listen, once bound.
fn announce(addr: std::net::SocketAddr) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "listening on http://{addr}");
    let _ = out.flush();
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the worker");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT"),
    }
}
