//! The client listener: a plain hyper HTTP/1 server whose service sends `GET`/`POST /predict`
//! (the hot path) straight to admission and [`proxy::forward`](crate::proxy::forward), and every
//! other request to the axum [`app`](crate::app) router (same routes, same JSON errors).
//!
//! Why not `axum::serve`: it goes through hyper-util's HTTP/1+HTTP/2 auto-detection (a `Rewind`
//! wrapper on every read) and, per request, the router's route lookup, a boxed middleware future
//! and several response-mapping layers. On one core that was a measurable share of the
//! gateway's per-request CPU time next to nginx (see `benches/RESULTS.md`).

use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use http::{Method, Request};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

use crate::app::{self, AppState};
use crate::error::GatewayError;

/// Serve clients on `listener` until `shutdown` resolves, then stop accepting and let every
/// open connection finish the request it is serving (keep-alive connections are closed after
/// their current answer).
pub async fn serve(listener: TcpListener, state: AppState, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    let router = app::app(state.clone());
    // Every connection holds a receiver: `closed()` resolves when all of them are gone.
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (sock, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning (as axum::serve does).
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Small JSON answers on keep-alive connections: without TCP_NODELAY, Nagle and delayed
        // ACKs add tens of milliseconds under load.
        let _ = sock.set_nodelay(true);
        let state = state.clone();
        let router = router.clone();
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let state = state.clone();
                let router = router.clone();
                async move { Ok::<_, Infallible>(handle(&state, router, req).await) }
            });
            // As under axum::serve: no header-read timer (it would be re-armed on every
            // request of a keep-alive connection).
            let conn = hyper::server::conn::http1::Builder::new()
                .header_read_timeout(None)
                .serve_connection(TokioIo::new(sock), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = async { stop.wait_for(|s| *s).await.map(|_| ()) } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(stop);
        });
    }
    drop(listener);
    drop(stop_rx);
    let _ = stop_tx.send(true);
    stop_tx.closed().await;
    Ok(())
}

/// Answers one request; a panic anywhere in its handling becomes a JSON 500, never a dropped
/// connection.
async fn handle(state: &AppState, router: Router, req: Request<Incoming>) -> Response {
    match AssertUnwindSafe(route(state, router, req)).catch_unwind().await {
        Ok(resp) => resp,
        Err(panic) => {
            let detail = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a handler panicked".to_owned());
            GatewayError::Internal(detail).into_response()
        }
    }
}

/// The hot path (`GET`/`POST /predict`) without the router; everything else through it.
async fn route(state: &AppState, router: Router, req: Request<Incoming>) -> Response {
    if req.uri().path() == "/predict" && matches!(*req.method(), Method::GET | Method::POST) {
        return app::predict_default_admitted(state, req).await;
    }
    match router.oneshot(req.map(Body::new)).await {
        Ok(r) => r,
        Err(e) => match e {},
    }
}
