//! A trivial upstream for the gateway-vs-nginx benchmark: answers `/predict` with a fixed small
//! JSON body (a list of them for a `{"queries": [...]}` body) and `/readyz` with 200, on a
//! single-threaded runtime. Prints `listening on http://ADDR`.
//!
//! `cargo run --release -p gateway --example trivial_upstream -- 127.0.0.1:0`

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

const PREDICTION: &[u8] = br#"{"intent":"PlayMusic","score":0.98}"#;

async fn handle(req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, body): (StatusCode, Bytes) = match req.uri().path() {
        // A list (`{"queries": [...]}`, the gateway's merged requests): one prediction per query,
        // as the worker answers it.
        "/predict" if req.method() == http::Method::POST => {
            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            match serde_json::from_slice::<Queries>(&body) {
                Ok(Queries { queries }) => (StatusCode::OK, list(queries.len())),
                Err(_) => (StatusCode::OK, Bytes::from_static(PREDICTION)),
            }
        }
        "/predict" => (StatusCode::OK, Bytes::from_static(PREDICTION)),
        "/readyz" | "/healthz" => (StatusCode::OK, Bytes::from_static(b"{\"status\":\"ready\"}")),
        _ => (StatusCode::NOT_FOUND, Bytes::from_static(br#"{"error":"no such route","error_type":"not_found"}"#)),
    };
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    Ok(resp)
}

#[derive(serde::Deserialize)]
struct Queries {
    queries: Vec<serde::de::IgnoredAny>,
}

/// `{"predictions": [PREDICTION, ...]}` with `n` items.
fn list(n: usize) -> Bytes {
    let mut out = b"{\"predictions\":[".to_vec();
    for i in 0..n {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(PREDICTION);
    }
    out.extend_from_slice(b"]}");
    Bytes::from(out)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:0".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    loop {
        let (sock, _) = listener.accept().await?;
        let _ = sock.set_nodelay(true);
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(sock), hyper::service::service_fn(handle))
                .await;
        });
    }
}
