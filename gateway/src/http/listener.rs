//! The listeners' accept loop: a plain hyper HTTP/1 server per connection, a handler per
//! request, a panic in a handler answered as a JSON 500, and a graceful stop.
//!
//! Why not `axum::serve`: it goes through hyper-util's HTTP/1+HTTP/2 auto-detection (a `Rewind`
//! wrapper on every read) and, per request, several response-mapping layers. On one core that
//! was a measurable share of the gateway's per-request CPU time next to nginx (see
//! `benches/RESULTS.md`).

use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::error::RequestError;

/// Serve `listener` with `handler` until `shutdown` resolves, then stop accepting and let every
/// open connection finish the request it is serving (keep-alive connections are closed after
/// their current answer).
pub(crate) async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + 'static,
    F: Future<Output = Response> + Send + 'static,
{
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
        let handler = handler.clone();
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let answer = AssertUnwindSafe(handler(req)).catch_unwind();
                async move { Ok::<_, Infallible>(answer.await.unwrap_or_else(panicked)) }
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

/// A panic in a handler: a JSON 500, never a dropped connection.
fn panicked(panic: Box<dyn std::any::Any + Send>) -> Response {
    let detail = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a handler panicked".to_owned());
    RequestError::Internal(detail).into_response()
}
