//! The worker: HTTP layer ([`http`]), core ([`core`]: validation, admission, tokenizing,
//! post-processing), batching engine ([`batching`]) and inference backend ([`backend`]), kept
//! apart as in text-embeddings-inference. Each layer imports only the ones below it.
//!
//! [`build`] wires a worker around any [`Backend`] (ONNX Runtime, or the fake one in tests);
//! [`Worker::serve`] serves it on a listener until told to stop, then drains; [`run`] is the
//! binary's whole life.
#![forbid(unsafe_code)]

pub mod backend;
pub mod batching;
pub mod capacity;
pub mod capacity_cache;
pub mod class;
pub mod config;
pub mod core;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod model;
pub mod sessions;
pub mod stats;
pub mod telemetry;

use std::future::Future;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

pub use config::Config;

use crate::backend::{Backend, BackendError, OrtBackend, ShapeBuckets};
use crate::batching::Limits;
use crate::capacity::Calibrated;
use crate::capacity_cache::{Cache, Key};
use crate::config::Device;
use crate::core::{Capacity, Class, Core, Parts, RequestLimits};
use crate::http::{AppState, Inner};
use crate::metrics::{LiveCollector, Metrics};
use crate::model::{ModelDir, ModelError};
use crate::stats::Stats;

/// mimalloc instead of glibc's malloc, for the worker binary and everything else linking this
/// crate (its tests, `examples/fake_worker.rs`): a request allocates and frees a few dozen small
/// blocks on whichever runtime thread serves it, and glibc's per-arena locks contend across many
/// runtime threads (a GPU host's profile in issue 14 found glibc's allocator and its lock
/// contention among the worker's largest costs; `benches/RESULTS.md`, "The worker's host cost
/// and allocations").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The least time the listener's drain gives answers already computed to be written.
const MIN_ANSWER_TIME: Duration = Duration::from_secs(1);

/// Longest the worker waits for NVML to name its GPU (the capacity cache's key).
const GPU_NAME_WAIT: Duration = Duration::from_secs(2);

/// Longest the worker waits at exit for its backend threads to drop their backends.
const BACKEND_EXIT_WAIT: Duration = Duration::from_secs(10);

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

/// A worker built and ready to serve.
#[derive(Debug)]
pub struct Worker {
    state: AppState,
    drain_timeout: Duration,
    /// The client listener's limits and its metrics (registered with the worker's).
    listener: listener::Config,
    listener_metrics: listener::Metrics,
    /// Whether every backend session is up yet (see [`sessions`]).
    up: watch::Receiver<sessions::Up>,
    /// The gRPC listener's metrics (`worker_grpc_connections_*`, ...).
    grpc_metrics: listener::Metrics,
}

/// Builds a worker for `model` around the backends that `make_backend` makes: one per session of
/// each lane ([`Class`]), each called on that session's own thread and then warmed up there.
/// Returns once every session is loaded and one of each lane is warm (see [`sessions`]); an error
/// before that is returned here, one after it stops [`run`].
pub async fn build<B, F>(config: &Config, model: ModelDir, make_backend: F) -> Result<Worker, StartupError>
where
    B: Backend,
    F: Fn(Class) -> Result<B, BackendError> + Send + Sync + 'static,
{
    let batch_limits = Limits {
        max_rows: config.max_batch_rows().max(1),
        max_tokens: config.max_batch_tokens().max(1),
        max_delay: config.max_queue_delay(),
        min_fill: config.min_batch_fill(),
    };
    let stats = Arc::new(Stats::new(config.stats_window));
    let gpu = telemetry::spawn_sampler(config.device, config.gpu_sample_interval.max(Duration::from_millis(10)));
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let listener_metrics = listener::Metrics::register(&mut registry, "worker");
    let grpc_metrics = listener::Metrics::register(&mut registry, "worker_grpc");

    // The light lane's sessions; the heavy lane's rare, long batches keep one.
    let sessions = [config.sessions(), 1];
    let (setup, reports) = sessions::reporting(sessions.iter().sum(), make_backend);
    let parts = Parts {
        encoder: model.encoder,
        labels: model.labels.clone(),
        limits: RequestLimits {
            max_queries: config.max_queries,
            max_query_bytes: config.max_query_bytes,
            max_query_tokens: model.max_tokens,
            request_timeout: config.request_timeout.max(Duration::from_millis(1)),
        },
        batch_limits,
        capacity: Capacity {
            queries: config.queue_capacity() as u64,
            tokens: config.queue_capacity_tokens,
            heavy_request_tokens: config.heavy_request_tokens,
        },
        sessions,
        stats: stats.clone(),
        metrics: metrics.clone(),
    };
    let core = Arc::new(Core::start(parts, setup).map_err(|e| StartupError::Other(format!("backend thread: {e}")))?);
    let up = sessions::wait_serving(reports).await?;

    let queue_of = core.clone();
    registry.register_collector(Box::new(LiveCollector {
        queue: Box::new(move || queue_of.queue_stats()),
        gpu: gpu.clone(),
    }));
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
    let state = AppState::new(Inner {
        core,
        worker_id: format!("{host}/{}", std::process::id()),
        model: wire::ModelInfo {
            name: config.model_name.clone().unwrap_or(model.name),
            device: config.device.to_string(),
            labels: model.labels,
        },
        max_body_bytes: config.max_body_bytes,
        bodies: std::sync::OnceLock::new(),
        stats,
        metrics,
        registry: Arc::new(registry),
        gpu,
        calibrated: std::sync::RwLock::new(None),
    });
    if let Some(per_s) = config.capacity.filter(|c| c.is_finite() && *c > 0.0) {
        state.set_calibrated(Calibrated { per_s, tokens_per_query: None, configured: true, carried_over: false });
    }
    let mut listener = config.listener.config();
    listener.drain_timeout = config.drain_timeout.max(MIN_ANSWER_TIME);
    listener.retry_after_s = http::RETRY_AFTER_S;
    Ok(Worker { state, drain_timeout: config.drain_timeout, listener, listener_metrics, up, grpc_metrics })
}

impl Worker {
    pub fn state(&self) -> AppState {
        self.state.clone()
    }

    /// Measures this worker's capacity with synthetic load through its own pipeline (see
    /// [`capacity`]), before it serves, takes it, and forgets that load's batches. Nothing to
    /// do when `--capacity` set it or `--calibration-time` is 0. A failed calibration is logged
    /// and leaves the capacity to what batches show once traffic comes.
    pub async fn calibrate(&self, config: &Config) -> Option<Calibrated> {
        let measured = measure(&self.state, config, self.up.clone()).await;
        self.state.stats.forget();
        measured
    }

    /// The process's one budget of request bodies held, and their deadline: the HTTP and gRPC
    /// listeners' bodies draw from it (its gauge is the HTTP listener's).
    fn bodies(&self) -> &listener::BodyReader {
        self.state.bodies.get_or_init(|| listener::BodyReader::for_listener(&self.listener, &self.listener_metrics))
    }

    /// Serves the Open Inference Protocol over gRPC on `tcp` (`listener::h2`: the HTTP
    /// listener's limits, its budget of bodies held) until `shutdown` resolves, then finishes
    /// the calls in flight: messages up to `max_message_bytes`, each call at most `timeout` (or
    /// the client's deadline, the shorter).
    pub fn serve_grpc(
        &self,
        tcp: TcpListener,
        max_message_bytes: usize,
        timeout: Duration,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static {
        let limits =
            listener::h2::Limits::new(&self.listener, self.bodies().clone(), max_message_bytes, &self.grpc_metrics);
        let incoming = listener::h2::Listener::new(tcp, &self.listener, self.grpc_metrics.clone());
        grpc::serve(self.state.clone(), incoming, limits, max_message_bytes, timeout, shutdown)
    }

    /// The router, for `oneshot` in tests or a server of one's own (`serve` serves
    /// `http::routes`, which answers the same with `/predict` past the router).
    pub fn app(&self) -> Router {
        http::app(self.state.clone())
    }

    /// Serves on `tcp` through the client listener (`listener` crate: timeouts, connection cap,
    /// body budget) until `shutdown` resolves, then drains in two steps. First `/readyz` turns
    /// 503 and new `/predict` calls get 503 (retryable elsewhere) while accepted work is
    /// answered, at most the drain timeout. Then the listener stops accepting and answers every
    /// request it has received, on keep-alive connections too (`Connection: close`), at most the
    /// drain timeout again, and returns.
    pub async fn serve(self, tcp: TcpListener, shutdown: impl Future<Output = ()>) -> Result<(), StartupError> {
        let core = self.state.core.clone();
        let server = listener::Server::new(tcp, self.listener.clone(), self.listener_metrics.clone())
            .with_bodies(self.bodies().clone());
        let service = hyper_util::service::TowerToHyperService::new(http::routes(self.state.clone()));
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let serving = tokio::spawn(server.serve(service, async {
            let _ = stop_rx.await;
        }));
        shutdown.await;
        core.start_draining();
        let deadline = Instant::now() + self.drain_timeout;
        tracing::info!(outstanding = core.outstanding(), "draining");
        while core.outstanding() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if core.outstanding() > 0 {
            tracing::warn!(outstanding = core.outstanding(), "drain timeout reached with work outstanding");
        }
        let _ = stop_tx.send(());
        // The listener bounds its own drain by the drain timeout; this only guards against a bug.
        if tokio::time::timeout(self.listener.drain_timeout + MIN_ANSWER_TIME, serving).await.is_err() {
            tracing::warn!("connections still open after the drain; exiting anyway");
        }
        tracing::info!("stopped");
        Ok(())
    }
}

/// Measures the capacity through `state`'s core and takes it (see [`capacity`]): before the
/// worker serves, or while it serves a carried-over capacity. `None` when `--capacity` set it,
/// `--calibration-time` is 0, or it failed (said in the log).
async fn measure(state: &AppState, config: &Config, mut up: watch::Receiver<sessions::Up>) -> Option<Calibrated> {
    if state.calibrated().is_some_and(|c| c.configured) || config.calibration_time.is_zero() {
        return None;
    }
    // Every session is measured: those still warming up first join.
    sessions::all_up(&mut up).await.ok()?;
    let core = &state.core;
    let plan = capacity::Plan::new(
        core.light_sessions(),
        config.max_batch_rows().max(1),
        core.queue_stats().capacity,
        config.calibration_time,
    );
    match capacity::calibrate(core, plan).await {
        Ok(c) => {
            tracing::info!(
                capacity_per_s = c.result.per_s,
                tokens_per_query = c.result.tokens_per_query,
                queries = c.measured_queries,
                seconds = c.measured.as_secs_f64(),
                in_flight = c.in_flight,
                "calibrated"
            );
            state.set_calibrated(c.result);
            Some(c.result)
        }
        Err(e) if core.is_draining() => {
            tracing::debug!(error = %e, "calibration stopped by the drain");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "calibration failed; capacity from traffic only");
            None
        }
    }
}

/// The capacity cache and this start's key in it, when `--capacity-cache` is set and the key can
/// be made (`model_hash`: the model file's, being read).
async fn capacity_cache(
    config: &Config,
    state: &AppState,
    model_hash: Option<tokio::task::JoinHandle<std::io::Result<u64>>>,
) -> Option<(Cache, Key)> {
    let (dir, hashing) = (config.capacity_cache.as_ref()?, model_hash?);
    let hash = match hashing.await {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "capacity cache unused: the model file could not be read");
            return None;
        }
        Err(e) => {
            tracing::warn!(error = %e, "capacity cache unused: hashing the model failed");
            return None;
        }
    };
    let device = match config.device {
        Device::Cpu => capacity_cache::cpu_name(),
        Device::Cuda(n) => {
            // NVML names the GPU within its first sample, taken while the sessions load.
            let mut gpu = state.gpu.clone();
            let named = |t: &wire::GpuTelemetry| matches!(t, wire::GpuTelemetry::Available(_));
            let _ = tokio::time::timeout(GPU_NAME_WAIT, gpu.wait_for(named)).await;
            match &*gpu.borrow() {
                wire::GpuTelemetry::Available(s) => format!("cuda:{n} {}", s.device.name),
                wire::GpuTelemetry::Unavailable { reason } => {
                    tracing::warn!(reason, "capacity cache unused: the GPU has no name");
                    return None;
                }
            }
        }
    };
    Some((Cache::new(dir), Key::new(hash, &device, &config.capacity_settings())))
}

/// Records a capacity just calibrated for the next start (a failure is only logged).
async fn store(cache: Cache, key: Key, c: Calibrated) {
    match tokio::task::spawn_blocking(move || cache.store(&key, &c)).await {
        Ok(Ok(())) => tracing::debug!("capacity stored for the next start"),
        Ok(Err(e)) => tracing::warn!(error = %e, "capacity not stored for the next start"),
        Err(e) => tracing::warn!(error = %e, "capacity not stored for the next start"),
    }
}

/// Loads the model and ONNX Runtime, serves until SIGTERM or SIGINT, drains, and returns.
pub async fn run(config: Config) -> Result<(), StartupError> {
    let model = ModelDir::load(&config.model, config.model_file.as_deref())?;
    tracing::info!(model = %model.model_path.display(), labels = model.labels.len(), device = %config.device, "loading");
    // The model file's hash, the carried-over capacity's key, is read while the sessions load.
    let model_hash = config.capacity_cache.is_some().then(|| {
        let path = model.model_path.clone();
        tokio::task::spawn_blocking(move || capacity_cache::file_hash(&path))
    });
    let env = backend::ort::load_library(config.ort_lib.as_deref())?;
    let (path, device, n) = (model.model_path.clone(), config.device, model.labels.len());
    let options = config.session_options();
    tracing::info!(?options, "ONNX Runtime session settings");
    let buckets = ShapeBuckets { max_rows: config.max_batch_rows().max(1), max_seq: model.max_tokens };
    let max_tokens = config.max_batch_tokens();
    let worker = build(&config, model, move |_lane| {
        let backend = OrtBackend::load_with(&env, &path, &options, n)?;
        match device {
            Device::Cuda(_) => backend.with_shape_buckets(buckets, max_tokens),
            Device::Cpu => Ok(backend),
        }
    })
    .await?;
    // With a capacity carried over, the worker serves at once and recalibrates meanwhile;
    // without one, it calibrates first, so that it never serves without a capacity.
    let cache = capacity_cache(&config, &worker.state, model_hash).await;
    let carried = cache.as_ref().and_then(|(cache, key)| match cache.load(key) {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(error = %e, "carried-over capacity ignored");
            None
        }
    });
    let recalibration = match (carried, cache) {
        // `--capacity` wins over a carried-over figure.
        (Some(c), Some((cache, key))) if worker.state.calibrated().is_none() => {
            tracing::info!(capacity_per_s = c.per_s, "capacity carried over from the last calibration; recalibrating");
            worker.state.set_calibrated(c);
            let (state, config, up) = (worker.state(), config.clone(), worker.up.clone());
            Some(tokio::spawn(async move {
                if let Some(c) = measure(&state, &config, up).await {
                    store(cache, key, c).await;
                }
            }))
        }
        (_, cache) => {
            if let (Some(c), Some((cache, key))) = (worker.calibrate(&config).await, cache) {
                store(cache, key, c).await;
            }
            None
        }
    };

    let listener = listener::bind(config.listen).map_err(|e| StartupError::Listen(config.listen, e))?;
    let addr = listener.local_addr().map_err(|e| StartupError::Listen(config.listen, e))?;
    // Before the port is announced (see `listener::stop_signal`).
    let stop = listener::stop_signal();
    let mut up = worker.up.clone();
    let shutdown = async move {
        tokio::select! {
            // Awaited outside the log macro, which skips its arguments when the level is off.
            signal = stop => tracing::info!("{signal}"),
            // A session that could not come up after the worker began serving stops it.
            Err(_) = sessions::all_up(&mut up) => {}
        }
    };
    // The gRPC service, announced before the HTTP port (whoever waits for `listening on` finds
    // this line already there); it stops once the HTTP side has drained.
    let (grpc_stop, grpc_stopped) = oneshot::channel::<()>();
    let grpc = match config.grpc_listen {
        Some(at) => {
            let tcp = listener::bind(at).map_err(|e| StartupError::Listen(at, e))?;
            let bound = tcp.local_addr().map_err(|e| StartupError::Listen(at, e))?;
            announce("grpc listening on", bound);
            let stop = async {
                let _ = grpc_stopped.await;
            };
            Some(tokio::spawn(worker.serve_grpc(tcp, config.max_body_bytes, config.request_timeout, stop)))
        }
        None => None,
    };
    announce("listening on", addr);
    tracing::info!(%addr, "ready");
    let backends = worker.state.core.take_backend_threads();
    let failed = worker.up.clone();
    let served = worker.serve(listener, shutdown).await;
    // A recalibration still running holds the core, which the backend threads wait to see go.
    if let Some(task) = recalibration {
        task.abort();
        let _ = task.await;
    }
    let _ = grpc_stop.send(());
    if let Some(grpc) = grpc
        && tokio::time::timeout(MIN_ANSWER_TIME, grpc).await.is_err()
    {
        tracing::warn!("grpc calls still open after the drain; exiting anyway");
    }
    // Each backend thread ends once the core's last handle is gone (`serve` dropped its own),
    // after dropping its backend: with CUDA, the session's state on the GPU. That has to happen
    // before the process exits: once the exit has begun tearing the CUDA driver down, ONNX
    // Runtime aborts on a free (measured on an H100 with CUDA graphs).
    let joined = tokio::task::spawn_blocking(move || backends.into_iter().for_each(|t| drop(t.join())));
    if tokio::time::timeout(BACKEND_EXIT_WAIT, joined).await.is_err() {
        tracing::warn!("backend threads still running at exit");
    }
    if let sessions::Up::Failed(why) = &*failed.borrow() {
        return Err(StartupError::Other(format!("a backend session did not come up: {why}")));
    }
    served
}

/// Tells whoever started us (tests, scripts) where we listen, once bound.
fn announce(what: &str, addr: std::net::SocketAddr) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{what} http://{addr}");
    let _ = out.flush();
}
