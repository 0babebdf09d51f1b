//! The HTTP layer: routes, shared state, parsing and error mapping. The work is the core's.

mod context;
mod error;
pub mod oip;
mod ops;
mod predict;

use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::task::{Context, Poll};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Method, Request};
use axum::response::Response;
use axum::routing::get;
use futures::FutureExt;
use futures::future::Either;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tower::Service;
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
    /// The capacity known before traffic (`--capacity`, the start-up calibration, or the last
    /// one's carried over until it ends); see [`AppState::calibrated`].
    pub calibrated: RwLock<Option<crate::capacity::Calibrated>>,
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

    /// The capacity known now.
    pub fn calibrated(&self) -> Option<crate::capacity::Calibrated> {
        *self.calibrated.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `c` as the worker's capacity: reports it, and sizes admission from it (see
    /// `core::admission::sized`).
    pub fn set_calibrated(&self, c: crate::capacity::Calibrated) {
        *self.calibrated.write().unwrap_or_else(PoisonError::into_inner) = Some(c);
        let sized = self.core.size_admission(c.per_s, c.tokens_per_query);
        tracing::info!(
            capacity_per_s = c.per_s,
            carried_over = c.carried_over,
            max_outstanding = sized.queries,
            max_outstanding_tokens = sized.tokens,
            "admission sized from the capacity"
        );
    }
}

pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/predict", get(predict::get).post(predict::post))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/v1/stats", get(ops::stats))
        .merge(oip::routes())
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(CatchPanicLayer::custom(error::panic_response))
        .layer(axum::middleware::from_fn_with_state(state.clone(), context::request_context))
        .with_state(state)
}

/// The routes as served: `GET` and `POST /predict` go straight to their handlers, in the same
/// request context (`context::in_context`) and panic guard as the router's layers give every
/// route; anything else goes through [`app`]'s router. Same answers either way (the router's own
/// `/predict` route stays, for `app` in tests); the fast path saves the router's per-request work
/// (its boxed, cloned route service, the middleware's boxed `Next`, their futures), a few
/// microseconds of the worker's host CPU per request at the GPU's rates.
#[derive(Clone)]
pub struct Routes {
    router: Router,
    state: AppState,
}

pub fn routes(state: AppState) -> Routes {
    Routes { router: app(state.clone()), state }
}

type Answer = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl<B> Service<Request<B>> for Routes
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<Answer, <Router as Service<Request<B>>>::Future>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if req.uri().path() == "/predict" && matches!(*req.method(), Method::GET | Method::POST) {
            let (state, handler_state) = (self.state.clone(), self.state.clone());
            return Either::Left(Box::pin(async move {
                let answer = context::in_context(&state, req, |req| {
                    let handler = async move {
                        if req.method() == Method::GET {
                            predict::get_query(handler_state, req.uri().query()).await
                        } else {
                            predict::post(axum::extract::State(handler_state), Body::new(req.into_body())).await
                        }
                    };
                    AssertUnwindSafe(handler).catch_unwind().map(|r| r.unwrap_or_else(error::panic_response))
                })
                .await;
                Ok(answer)
            }));
        }
        Either::Right(self.router.call(req))
    }
}
