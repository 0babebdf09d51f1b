//! The client port: every predict route (and the Open Inference Protocol's model routes) to the
//! predict entry, the other routes (`/healthz`, `/readyz`, the protocol's `/v2` and health;
//! anything else is 404) through a router.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use axum::routing::get;
use http::Request;
use tokio::net::TcpListener;
use tower::ServiceExt;

use super::predict::{self, Route, Target};
use super::{AppState, healthz, method_not_allowed, not_found, readyz, serve as serving};

/// The client port's routes other than the predict routes.
fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(super::oip::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Answer one request of the client port.
async fn handle<B>(state: &AppState, router: &Router, req: Request<B>) -> Response
where
    B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + std::fmt::Display,
{
    match predict::route(req.uri().path()) {
        Some(Route::Default) => predict::handle(state, state.default_pool(), req).await,
        Some(Route::Pool(pool)) => predict::handle(state, &pool, req).await,
        Some(Route::Oip { pool, path }) => {
            let pool = pool.as_deref().unwrap_or(state.default_pool());
            predict::handle_to(state, pool, Target::Oip(&path), req).await
        }
        None => match router.clone().oneshot(req.map(Body::new)).await {
            Ok(r) => r,
            Err(e) => match e {},
        },
    }
}

/// Serve clients on `tcp` until `shutdown` resolves, then finish the requests in flight.
pub(crate) async fn serve(
    tcp: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_on(server(tcp, &state), state, shutdown).await
}

/// The client port's listener on `tcp`: the flags' limits, the port's metrics, the process's
/// budget of bodies held. The per-core runtime makes one, then a sibling of it for each other
/// core's socket (`listener::Server::sibling`: the limits stay the process's).
pub(crate) fn server(tcp: TcpListener, state: &AppState) -> listener::Server {
    listener::Server::new(tcp, state.listener_config(), state.client_listener.clone())
        .with_bodies(state.body_reader.clone())
}

/// Serve clients with `server` until `shutdown` resolves, then finish the requests in flight.
pub(crate) async fn serve_on(
    server: listener::Server,
    state: AppState,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let state = AppState { bodies: Some(server.bodies()), ..state };
    let panics = state.panics.clone();
    // One reference count a request, not one for each of the state's shared parts (some forty:
    // every metric handle is one): under load on many threads each of those lines moved between
    // cores on every request.
    let shared = Arc::new((router(state.clone()), state));
    let handler = move |req| {
        let shared = Arc::clone(&shared);
        async move { handle(&shared.1, &shared.0, req).await }
    };
    serving::serve(server, handler, panics, shutdown).await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http::StatusCode;
    use http_body_util::BodyExt;

    use super::*;
    use crate::ctx::Ctx;
    use crate::pool::Pools;

    async fn call(state: &AppState, method: &str, uri: &str) -> (StatusCode, serde_json::Value) {
        let req = Request::builder().method(method).uri(uri).body(Body::empty()).unwrap();
        let resp = handle(state, &router(state.clone()), req).await;
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null))
    }

    #[tokio::test]
    async fn every_predict_route_is_admitted_by_the_one_entry() {
        let ctx = Arc::new(Ctx::for_tests(|c| c.max_outstanding = 0));
        let state = AppState::new(Pools::new(ctx, Default::default()));
        for uri in ["/predict?query=hi", "/pools/default/predict", "/pools/ghost/predict"] {
            for method in ["GET", "POST"] {
                let (status, body) = call(&state, method, uri).await;
                assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{method} {uri}: {body}");
                assert_eq!(body["error_type"], "overloaded");
            }
        }
        let (status, _) = call(&state, "HEAD", "/predict").await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        let (status, body) = call(&state, "DELETE", "/pools/default/predict").await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{body}");
        let (status, _) = call(&state, "GET", "/healthz").await;
        assert_eq!(status, StatusCode::OK, "the other routes are not admitted");
    }
}
