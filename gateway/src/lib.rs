//! The gateway: the front door for clients and the source of the scaling signal.
//!
//! Requests to `/predict` (default pool) and `/pools/{pool}/predict` are admitted (bounded),
//! balanced by power of two choices over workers discovered statically, from a file or from
//! Kubernetes EndpointSlices, and retried once on another worker where that is safe. Every
//! worker's `/v1/stats` is polled to compute each pool's scaling signal (`/v1/signal`). See
//! `gateway/README.md` and, for the layers and how a request and the signal cross them,
//! `docs/ARCHITECTURE.md`.
//!
//! Layers, each a module (private: the library's API is what this file exports):
//! `http` (listeners, routes, admission, the one predict entry) -> `routing` (balance, proxy,
//! retry budget) -> `pool` (pools, workers, their health, the monitor, the outcome policy) ->
//! `upstream` (the HTTP/1.1 client for workers). `signal` (pure signal and its task) reads
//! `pool`; `discovery` feeds it; `provider` serves the pools to the external metrics API (the
//! `metrics-api` crate). `error`, `config`, `metrics`, `ctx`, `task` and `runtime` (which
//! data-plane core a thread is) are shared. `cores` runs all of it on one single-threaded
//! runtime per core (`--runtime per-core`); [`run`] on one shared runtime.
#![forbid(unsafe_code)]

mod config;
mod cores;
mod ctx;
mod discovery;
mod error;
mod grpc;
mod http;
mod metrics;
mod pool;
mod provider;
mod routing;
mod runtime;
mod signal;
mod task;
mod upstream;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

pub use config::{Config, RENAMED_ENV, Runtime};
pub use cores::run_per_core;
pub use error::StartError;
pub use pool::{Health, Pool, PoolMeta, Pools, WorkerStatus};
pub use signal::{PoolSignal, RawSignal};

use ctx::Ctx;
use discovery::k8s::ServiceSpec;
use http::AppState;
use task::AbortOnDrop;

/// A built gateway: its pools, the tasks feeding them (discovery, monitors, the signal), and
/// what its listeners serve. Clones share all of it; the tasks stop when the last clone drops.
#[derive(Debug, Clone)]
pub struct Gateway {
    state: AppState,
    _tasks: Arc<Vec<AbortOnDrop>>,
}

impl Gateway {
    /// Every pool, with its workers and its signal.
    pub fn pools(&self) -> &Arc<Pools> {
        &self.state.pools
    }

    /// Serve clients (`/predict`, `/pools/{pool}/predict`, health) on `listener` until
    /// `shutdown` resolves, then finish the requests in flight.
    pub async fn serve(&self, listener: TcpListener, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        http::serve_client(listener, self.state.clone(), shutdown).await
    }

    /// Serve the gRPC services (the Open Inference Protocol's, KEDA's external scaler) on
    /// `listener` until `shutdown` resolves, then finish the calls in flight.
    pub async fn serve_grpc(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), StartError> {
        grpc::serve(listener, self.state.clone(), shutdown).await
    }

    /// Serve operators (`/metrics`, `/v1/pools`, `/v1/signal`, `/pools/{pool}/signal`, health)
    /// on `listener` until `shutdown` resolves.
    pub async fn serve_admin(&self, listener: TcpListener, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        http::serve_admin(listener, self.state.clone(), shutdown).await
    }
}

/// Build the pools from the configuration and start discovery (a Kubernetes client from the
/// environment when `--k8s-service` is given).
pub async fn build(config: Config) -> Result<Gateway, StartError> {
    build_with_kube_client(config, None).await
}

/// [`build`] with the Kubernetes client to watch EndpointSlices with (one from a given
/// kubeconfig, or one pointed at a test API server); `None`: one from the environment, made
/// only when `--k8s-service` is given.
pub async fn build_with_kube_client(config: Config, kube: Option<kube::Client>) -> Result<Gateway, StartError> {
    let k8s: Vec<ServiceSpec> = config
        .k8s_services
        .iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| ServiceSpec::parse(&config.default_pool, s))
        .collect::<Result<_, _>>()?;
    let targets = discovery::static_targets(&config.default_pool, &config.workers, &config.pool_workers)?;
    let known = discovery::k8s::pool_metas(&k8s)?;
    let ctx = Arc::new(Ctx::new(config, metrics::Metrics::default()));
    let pools = pool::Pools::new(Arc::clone(&ctx), known);
    pools.ensure(&ctx.config.default_pool);
    for spec in &k8s {
        pools.ensure(&spec.pool);
    }
    pools.update("static", targets);
    let mut tasks = vec![AbortOnDrop(signal::task::spawn(pools.downgrade(), Arc::clone(&ctx)))];
    if let Some(path) = &ctx.config.worker_file {
        tasks.push(AbortOnDrop(discovery::file::spawn(
            path.clone(),
            ctx.config.worker_file_interval,
            ctx.config.default_pool.clone(),
            pools.downgrade(),
        )));
    }
    if !k8s.is_empty() {
        let client = match kube {
            Some(c) => c,
            None => kube::Client::try_default().await?,
        };
        for spec in k8s {
            tasks.push(AbortOnDrop(discovery::k8s::spawn(client.clone(), spec, pools.downgrade())));
        }
    }
    let state = AppState::new(pools);
    tasks.push(state.follow_capacity());
    Ok(Gateway { state, _tasks: Arc::new(tasks) })
}

/// Bind `addr` and print `{what} http://ADDR` (scripts and tests read that line).
async fn bind(addr: std::net::SocketAddr, what: &str) -> Result<TcpListener, StartError> {
    let listener = listener::bind(addr)?;
    println!("{what} http://{}", listener.local_addr()?);
    Ok(listener)
}

/// Serve operators on `admin_listen` and, if on, the external metrics API, both announced,
/// until the process ends (a scrape during the drain still answers); the API serves while what
/// this returns is held.
async fn serve_operators(
    gateway: &Gateway,
    admin_listen: std::net::SocketAddr,
) -> Result<Option<metrics_api::MetricsApi>, StartError> {
    let admin = bind(admin_listen, "admin listening on").await?;
    let g = gateway.clone();
    tokio::spawn(async move {
        if let Err(e) = g.serve_admin(admin, std::future::pending()).await {
            tracing::error!(error = %e, "admin listener failed");
        }
    });
    // The external metrics API (off unless --metrics-api-listen): bound, announced, serving
    // until the process ends, like the admin listener.
    let source: Arc<dyn metrics_api::PoolSource> = gateway.pools().clone();
    let ctx = gateway.pools().ctx();
    let api = metrics_api::spawn(&ctx.config.metrics_api, source, ctx.metrics.api.clone()).await?;
    if let Some(api) = &api {
        println!("metrics API listening on https://{}", api.addr);
    }
    Ok(api)
}

/// Run the gateway until SIGTERM or Ctrl-C, then finish the requests in flight.
///
/// Every listener is bound before the client listener's `listening on` line is printed, so that
/// whoever waits for that line finds the others' lines already there.
pub async fn run(config: Config) -> Result<(), StartError> {
    let (listen, admin_listen) = (config.listen, config.admin_listen);
    // Before any port is announced (see `listener::stop_signal`).
    let stop = listener::stop_signal();
    let stop = async {
        let signal = stop.await;
        tracing::info!(signal, "shutting down: finishing requests in flight");
    };
    let gateway = build(config).await?;
    let _api = serve_operators(&gateway, admin_listen).await?;
    let ctx = gateway.pools().ctx();

    // gRPC (off unless --grpc-listen): bound and announced before the client port; stops with it.
    let (grpc_stop, grpc_stopped) = tokio::sync::oneshot::channel::<()>();
    if let Some(at) = ctx.config.grpc_listen {
        // Files read (and refused) before the port is announced.
        let tls = grpc::tls_config(&ctx.config)?.is_some();
        let grpc = listener::bind(at)?;
        let scheme = if tls { "https" } else { "http" };
        println!("grpc listening on {scheme}://{}", grpc.local_addr()?);
        let g = gateway.clone();
        tokio::spawn(async move {
            let stop = async {
                let _ = grpc_stopped.await;
            };
            if let Err(e) = g.serve_grpc(grpc, stop).await {
                tracing::error!(error = %e, "grpc listener failed");
            }
        });
    }

    let client = bind(listen, "listening on").await?;
    gateway.serve(client, stop).await?;
    let _ = grpc_stop.send(());
    tracing::info!("gateway stopped");
    Ok(())
}
