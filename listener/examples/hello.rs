//! A trivial service on the listener, or on a plain hyper accept loop like the gateway's before
//! the listener (`gateway/src/server.rs`), for comparing per-request cost:
//!
//! ```sh
//! cargo build --release -p listener --example hello
//! taskset -c 1 target/release/examples/hello listener 127.0.0.1:18080 &
//! taskset -c 0 wrk -t1 -c64 -d10s http://127.0.0.1:18080/
//! ```
//!
//! `GET` answers `ok`; `POST` reads the body (at most 1 MiB) and answers its length. One thread.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

fn ok(len: usize) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(format!("{{\"ok\":{len}}}"))));
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    r
}

async fn on_listener(tcp: TcpListener) {
    let server = listener::Server::new(tcp, listener::Config::default(), listener::Metrics::default());
    let bodies = server.bodies();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let bodies = bodies.clone();
        async move {
            Ok::<_, Infallible>(if req.method() == Method::POST {
                match bodies.collect(req.into_body(), 1 << 20).await {
                    Ok(b) => ok(b.len()),
                    Err(e) => e.response(1),
                }
            } else {
                ok(0)
            })
        }
    });
    server.serve(service, std::future::pending()).await;
}

/// The gateway's accept loop before the listener, with the same service.
async fn on_plain_hyper(tcp: TcpListener) {
    let (_stop_tx, stop_rx) = watch::channel(false);
    loop {
        let (sock, _) = match tcp.accept().await {
            Ok(a) => a,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
                Ok::<_, Infallible>(if req.method() == Method::POST {
                    match Limited::new(req.into_body(), 1 << 20).collect().await {
                        Ok(b) => ok(b.to_bytes().len()),
                        Err(_) => ok(0),
                    }
                } else {
                    ok(0)
                })
            });
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
        });
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "listener".to_owned());
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:18080".to_owned());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let tcp = TcpListener::bind(&addr).await.expect("bind");
        println!("listening on http://{}", tcp.local_addr().expect("addr"));
        match which.as_str() {
            "plain" => on_plain_hyper(tcp).await,
            _ => on_listener(tcp).await,
        }
    });
}
