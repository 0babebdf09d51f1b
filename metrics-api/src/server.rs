//! The HTTPS listener: TLS (rustls) on each accepted connection, the client certificate chain
//! attached to every request of the connection, HTTP/1.1 with keep-alive. Bounded: at most
//! `MAX_CONNECTIONS` at once (the kernel's backlog holds the rest), a handshake must finish in
//! `HANDSHAKE_TIMEOUT`, and a connection idle between requests for `IDLE_TIMEOUT` is closed.

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use futures::FutureExt;
use http::{Request, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use super::authn::PeerCert;
use super::metrics::ApiMetrics;
use super::status::status_response;
use super::tls::TlsState;

pub const MAX_CONNECTIONS: usize = 4096;
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Serve `router` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, tls: Arc<TlsState>, router: Router, metrics: ApiMetrics) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else { return };
        let sock = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "metrics API: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let acceptor = TlsAcceptor::from(tls.current());
        let router = router.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(sock)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    metrics.handshake_failures.inc();
                    tracing::debug!(error = %e, "metrics API: TLS handshake failed");
                    return;
                }
                Err(_) => {
                    metrics.handshake_failures.inc();
                    return;
                }
            };
            let chain =
                stream.get_ref().1.peer_certificates().map(|c| c.iter().map(|c| c.clone().into_owned()).collect());
            let peer = Arc::new(PeerCert::new(chain));
            let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(Arc::clone(&peer));
                let router = router.clone();
                async move {
                    let resp = AssertUnwindSafe(router.oneshot(req.map(Body::new))).catch_unwind().await;
                    Ok::<_, Infallible>(match resp {
                        Ok(Ok(r)) => r,
                        Ok(Err(e)) => match e {},
                        Err(_) => {
                            tracing::error!("metrics API: a handler panicked");
                            status_response(
                                StatusCode::INTERNAL_SERVER_ERROR,
                                "InternalError",
                                "Internal error occurred".to_owned(),
                                None,
                            )
                        }
                    })
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(IDLE_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
