//! HTTP/2 over cleartext with prior knowledge (h2c), on hyper's client connection: a few
//! connections per thread, requests multiplexed over them as streams, taken in turn.

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use crate::http1::Failure;
use crate::target::Prepared;

/// The HTTP/2 connections of one thread.
#[derive(Debug)]
pub struct Pool {
    addr: SocketAddr,
    method: Method,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// gRPC: the outcome is the `grpc-status` trailer's.
    grpc: bool,
    conns: Vec<tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>>,
    next: Cell<usize>,
    open: Arc<AtomicI64>,
    connects: Arc<AtomicI64>,
}

/// What came back on a stream.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub error_body: Option<Bytes>,
}

impl Pool {
    pub fn new(
        addr: SocketAddr,
        method: Method,
        headers: Vec<(HeaderName, HeaderValue)>,
        grpc: bool,
        connections: usize,
        open: Arc<AtomicI64>,
        connects: Arc<AtomicI64>,
    ) -> Self {
        let conns = (0..connections.max(1)).map(|_| tokio::sync::Mutex::new(None)).collect();
        Self { addr, method, headers, grpc, conns, next: Cell::new(0), open, connects }
    }

    /// A sender on the next connection, connecting it first when needed.
    async fn sender(&self) -> Result<SendRequest<Full<Bytes>>, Failure> {
        let i = self.next.get();
        self.next.set((i + 1) % self.conns.len());
        let mut slot = self.conns[i].lock().await;
        if let Some(s) = slot.as_ref().filter(|s| !s.is_closed()) {
            return Ok(s.clone());
        }
        if slot.take().is_some() {
            self.open.fetch_sub(1, Ordering::Relaxed);
        }
        let stream = TcpStream::connect(self.addr).await.map_err(|e| Failure::Io(e.kind()))?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|_| Failure::Protocol("HTTP/2 handshake failed"))?;
        tokio::spawn(conn);
        self.open.fetch_add(1, Ordering::Relaxed);
        self.connects.fetch_add(1, Ordering::Relaxed);
        *slot = Some(sender.clone());
        Ok(sender)
    }

    pub async fn exchange(&self, req: &Prepared) -> Result<Answer, Failure> {
        let mut sender = self.sender().await?;
        let mut builder = Request::builder().method(self.method.clone()).uri(req.uri.clone());
        for (n, v) in &self.headers {
            builder = builder.header(n, v);
        }
        if self.method == Method::POST && !self.headers.iter().any(|(n, _)| n == http::header::CONTENT_TYPE) {
            builder = builder.header(http::header::CONTENT_TYPE, "application/json");
        }
        let request = builder.body(Full::new(req.body.clone())).map_err(|_| Failure::Protocol("bad request"))?;
        sender.ready().await.map_err(|e| h2_failure(&e))?;
        let resp = sender.send_request(request).await.map_err(|e| h2_failure(&e))?;
        let mut status = resp.status().as_u16();
        // A trailers-only gRPC answer carries its status in the headers.
        let head_status = resp.headers().get("grpc-status").cloned();
        let collected = resp.into_body().collect().await.map_err(|e| h2_failure(&e))?;
        if self.grpc && status == 200 {
            let code = collected.trailers().and_then(|t| t.get("grpc-status")).or(head_status.as_ref());
            status = grpc_as_http(code.and_then(|v| v.to_str().ok()));
        }
        let body = collected.to_bytes();
        Ok(Answer { status, error_body: (!(200..300).contains(&status)).then_some(body) })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let open = self.conns.iter_mut().map(|c| c.get_mut().is_some()).filter(|open| *open).count();
        self.open.fetch_sub(open as i64, Ordering::Relaxed);
    }
}

/// A gRPC status as the HTTP status of the same meaning (what the statistics count): 0 is 200,
/// RESOURCE_EXHAUSTED 429, UNAVAILABLE 503, DEADLINE_EXCEEDED 504, INVALID_ARGUMENT 400,
/// NOT_FOUND 404, anything else (or none) 500.
fn grpc_as_http(code: Option<&str>) -> u16 {
    match code {
        Some("0") => 200,
        Some("3") => 400,
        Some("4") => 504,
        Some("5") => 404,
        Some("8") => 429,
        Some("14") => 503,
        _ => 500,
    }
}

fn h2_failure(e: &hyper::Error) -> Failure {
    if let Some(io) = std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>()) {
        return Failure::Io(io.kind());
    }
    if e.is_closed() || e.is_incomplete_message() || e.is_canceled() {
        Failure::Closed
    } else {
        Failure::Protocol("HTTP/2 stream error")
    }
}
