//! The gateway's HTTP surface: two listeners, one for clients and one for operators.
//!
//! | Route | client port (`--listen`) | admin port (`--admin-listen`) |
//! |---|---|---|
//! | `GET`/`POST /predict`, `/pools/{pool}/predict` | [`predict::handle`], the one entry | – |
//! | Open Inference Protocol: `/v2/models/...`, `/pools/{pool}/v2/models/...` | the same entry, to the worker's route | – |
//! | `GET /v2`, `/v2/health/live`, `/v2/health/ready` | yes ([`oip`]) | – |
//! | `GET /healthz`, `GET /readyz` | yes | yes |
//! | `GET /metrics`, `/v1/pools`, `/v1/signal`, `/pools/{pool}/signal` | – | yes |
//! | anything else | 404 `not_found` (405 for a wrong method) | the same |
//!
//! The client port's service sends every predict route to the predict entry (admission,
//! request identity, the forward) and everything else to a small router ([`client`]); the admin
//! port is an axum router ([`admin`]). Both are served by the `listener` crate ([`serve`]: its
//! timeouts, connection cap and body budget on both ports), a panic in a handler answered JSON
//! 500, counted and logged once per kind ([`panics`]).

mod admin;
mod admission;
mod client;
mod cost;
mod oip;
mod panics;
mod predict;
mod serve;
mod single;
mod trace;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use prometheus_client::registry::Registry;

pub(crate) use admin::serve as serve_admin;
pub(crate) use client::{serve as serve_client, serve_on as serve_client_on, server as client_server};
pub(crate) use oip::pool_ready;
pub(crate) use panics::{Guarded, PanicAnswer, Panics};
pub(crate) use predict::{ProtocolCall, Target, call, handle_to};
pub(crate) use single::oip_call;
pub(crate) use trace::Ids;

/// What the Open Inference Protocol's server metadata calls the gateway.
pub(crate) fn oip_server_name() -> &'static str {
    oip::SERVER_NAME
}

use crate::error::RequestError;
use crate::pool::Pools;
use admission::Admission;

/// What every handler of both ports shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) pools: Arc<Pools>,
    admission: Arc<Admission>,
    registry: Arc<Registry>,
    /// The listener's metrics of each port (`gateway_connections_*`, `gateway_admin_connections_*`, ...).
    client_listener: listener::Metrics,
    admin_listener: listener::Metrics,
    /// The gRPC port's (`gateway_grpc_connections_*`, ...).
    grpc_listener: listener::Metrics,
    /// The process's one budget of request bodies held, and their deadline: the client port's
    /// and the gRPC port's bodies draw from it (its gauge is the client port's).
    body_reader: listener::BodyReader,
    panics: Panics,
    /// The client listener's body reader (its deadline and budget), once serving; without one
    /// (handlers called directly in tests) bodies are read under `--max-body-bytes` only.
    bodies: Option<listener::BodyReader>,
    /// Coalescing is on: single-query requests are read for a merge (`single`).
    coalesce: bool,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").finish_non_exhaustive()
    }
}

impl AppState {
    /// The gRPC port's listener metrics.
    pub(crate) fn grpc_listener(&self) -> &listener::Metrics {
        &self.grpc_listener
    }

    /// The process's budget of request bodies held (shared by the client and gRPC ports).
    pub(crate) fn body_reader(&self) -> &listener::BodyReader {
        &self.body_reader
    }

    /// Where a handler's panic is counted and logged (the gRPC listener's calls too).
    pub(crate) fn panics(&self) -> &Panics {
        &self.panics
    }

    pub(crate) fn new(pools: Arc<Pools>) -> Self {
        let ctx = pools.ctx();
        let admission = Arc::new(Admission::new(&ctx.config, &ctx.metrics));
        let mut registry = ctx.metrics.registry();
        // The registry adds `gateway_` itself: `gateway_connections_*`, `gateway_admin_connections_*`.
        let client_listener = listener::Metrics::register_in(&mut registry);
        let admin_listener = listener::Metrics::register(&mut registry, "admin");
        let grpc_listener = listener::Metrics::register(&mut registry, "grpc");
        let body_reader = listener::BodyReader::for_listener(&ctx.config.listener.config(), &client_listener);
        let panics = Panics::new(ctx.metrics.panics.clone());
        let coalesce = crate::pool::merge_queue::Policy::from_config(&ctx.config).is_some();
        Self {
            pools,
            admission,
            registry: Arc::new(registry),
            client_listener,
            admin_listener,
            grpc_listener,
            body_reader,
            panics,
            bodies: None,
            coalesce,
        }
    }

    /// The listener's settings: the flags, the gateway's `Retry-After`, and a drain long enough
    /// for a request at its deadline.
    pub(crate) fn listener_config(&self) -> listener::Config {
        let c = &self.pools.ctx().config;
        let mut cfg = c.listener.config();
        cfg.retry_after_s = c.retry_after_s;
        cfg.drain_timeout = cfg.drain_timeout.max(c.request_timeout + std::time::Duration::from_secs(1));
        cfg
    }

    /// The task that sizes admission from the ready workers' capacity (`admission`).
    pub(crate) fn follow_capacity(&self) -> crate::task::AbortOnDrop {
        admission::follow_capacity(Arc::clone(&self.admission), Arc::clone(&self.pools))
    }

    fn default_pool(&self) -> &str {
        &self.pools.ctx().config.default_pool
    }
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
        RequestError::NoWorker { pool: state.default_pool().to_owned(), retry_after_s: 1 }.into_response()
    }
}

async fn not_found(req: Request) -> Response {
    RequestError::NotFound(req.uri().path().to_owned()).into_response()
}

async fn method_not_allowed(req: Request) -> Response {
    RequestError::MethodNotAllowed(req.method().to_string()).into_response()
}
