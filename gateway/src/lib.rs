//! The gateway: the front door for clients and the source of the scaling signal.
//!
//! Requests to `/predict` (default pool) and `/pools/{pool}/predict` are admitted (bounded),
//! balanced by power of two choices over workers discovered statically, from a file or from
//! Kubernetes EndpointSlices, and retried once on another worker where that is safe. Every
//! worker's `/v1/stats` is polled to compute each pool's scaling signal (`/v1/signal`). See
//! `gateway/README.md`.
#![forbid(unsafe_code)]

pub mod app;
pub mod balance;
pub mod config;
pub mod discovery;
pub mod endpoint;
pub mod error;
pub mod metrics;
pub mod metrics_api;
pub mod monitor;
pub mod pool;
pub mod proxy;
pub mod server;
pub mod signal;
pub mod signal_task;
pub mod upstream;

use std::sync::Arc;

use tokio::net::TcpListener;

pub use app::{AppState, app, metrics_app};
pub use config::Config;
pub use error::GatewayError;

use discovery::k8s::ServiceSpec;
use pool::{AbortOnDrop, Ctx, Pools};

/// The pools and the discovery tasks feeding them (stopped when dropped).
#[derive(Debug)]
pub struct Gateway {
    pub pools: Arc<Pools>,
    _tasks: Vec<AbortOnDrop>,
}

impl Gateway {
    pub fn state(&self) -> AppState {
        AppState::new(Arc::clone(&self.pools))
    }
}

/// Build the pools from the configuration and start discovery.
pub async fn build(config: Config) -> Result<Gateway, GatewayError> {
    let k8s: Vec<ServiceSpec> = config
        .k8s_services
        .iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| ServiceSpec::parse(&config.default_pool, s))
        .collect::<Result<_, _>>()?;
    let targets = discovery::static_targets(&config.default_pool, &config.workers, &config.pool_workers)?;
    let known = discovery::k8s::pool_metas(&k8s)?;
    let ctx = Arc::new(Ctx { metrics: metrics::Metrics::default(), config });
    let pools = Pools::new(Arc::clone(&ctx), known);
    pools.ensure(&ctx.config.default_pool);
    for spec in &k8s {
        pools.ensure(&spec.pool);
    }
    pools.update("static", targets);
    let mut tasks = Vec::new();
    if let Some(path) = &ctx.config.worker_file {
        tasks.push(AbortOnDrop(discovery::file::spawn(
            path.clone(),
            ctx.config.worker_file_interval,
            ctx.config.default_pool.clone(),
            pools.downgrade(),
        )));
    }
    if !k8s.is_empty() {
        let client = kube::Client::try_default().await?;
        for spec in k8s {
            tasks.push(AbortOnDrop(discovery::k8s::spawn(client.clone(), spec, pools.downgrade())));
        }
    }
    Ok(Gateway { pools, _tasks: tasks })
}

/// Run the gateway until SIGTERM or Ctrl-C, then finish the requests in flight.
pub async fn run(config: Config) -> Result<(), GatewayError> {
    let listen = config.listen;
    let metrics_listen = config.metrics_listen;
    let gateway = build(config).await?;
    let state = gateway.state();

    let listener = TcpListener::bind(listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    if let Some(addr) = metrics_listen {
        let ml = TcpListener::bind(addr).await?;
        println!("metrics listening on http://{}", ml.local_addr()?);
        let router = metrics_app(state.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(ml, router).await {
                tracing::error!(error = %e, "metrics listener failed");
            }
        });
    }
    let source: Arc<dyn metrics_api::PoolSource> = gateway.pools.clone();
    let api = metrics_api::spawn(&state.pools.ctx().config.metrics_api, source, state.pools.ctx().metrics.api.clone())
        .await?;
    if let Some(api) = &api {
        println!("metrics API listening on https://{}", api.addr);
    }
    server::serve(listener, state, shutdown()).await?;
    tracing::info!("gateway stopped");
    Ok(())
}

async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down: finishing requests in flight");
}
