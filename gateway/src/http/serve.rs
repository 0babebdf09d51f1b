//! Both ports are served by the `listener` crate (the worker's client listener too): header,
//! body and idle timeouts, a cap on open connections, a budget of buffered body bytes, JSON
//! answers to protocol errors, and a drain that answers every request received (see
//! `listener/README.md`). Here: a handler per request, its panics answered by [`Guarded`].

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use axum::response::Response;
use http::Request;
use hyper::body::Incoming;

use super::panics::{Guarded, Panics};

/// Serve `server` with `handler` until `shutdown` resolves, then drain.
pub(crate) async fn serve<H, F>(
    server: listener::Server,
    handler: H,
    panics: Panics,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    let panics = Arc::new(panics);
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let answer = Guarded::new(handler(req), Arc::clone(&panics));
        async move { Ok::<_, Infallible>(answer.await) }
    });
    server.serve(svc, shutdown).await;
    Ok(())
}
