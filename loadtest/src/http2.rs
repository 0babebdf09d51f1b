//! HTTP/2 over cleartext with prior knowledge (h2c), on the `h2` crate's client: a few
//! connections per thread, requests multiplexed over them as streams, taken in turn.
//!
//! `h2` directly rather than hyper's HTTP/2 client, which spawns a task per request to send its
//! body: here the body goes out with the request, and the answer (data and trailers) is read in
//! the request's own task. On gRPC through the gateway that took the load generator from 11.2-13.7
//! µs of CPU a call to 8.6-9.0 (`benches/RESULTS.md`).

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use http::{HeaderName, HeaderValue, Method, Request};
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
    conns: Vec<Slot>,
    next: Cell<usize>,
    open: Arc<AtomicI64>,
    connects: Arc<AtomicI64>,
}

/// One connection: its sender once connected; the lock is held while connecting, so that the
/// requests that find it unconnected wait for one handshake rather than each making one.
#[derive(Debug, Default)]
struct Slot {
    connecting: tokio::sync::Mutex<()>,
    sender: RefCell<Option<SendRequest<Bytes>>>,
}

/// A connection counted in the open gauge while its task lives (ended or dropped with the run).
struct Open(Arc<AtomicI64>);

impl Open {
    fn new(gauge: Arc<AtomicI64>) -> Self {
        gauge.fetch_add(1, Ordering::Relaxed);
        Self(gauge)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
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
        let conns = (0..connections.max(1)).map(|_| Slot::default()).collect();
        Self { addr, method, headers, grpc, conns, next: Cell::new(0), open, connects }
    }

    /// A sender on the next connection, connecting it first when needed.
    async fn sender(&self) -> Result<(usize, SendRequest<Bytes>), Failure> {
        let i = self.next.get();
        self.next.set((i + 1) % self.conns.len());
        let slot = &self.conns[i];
        if let Some(s) = slot.sender.borrow().as_ref() {
            return Ok((i, s.clone()));
        }
        let _connecting = slot.connecting.lock().await;
        // Another request may have connected it while this one waited.
        if let Some(s) = slot.sender.borrow().as_ref() {
            return Ok((i, s.clone()));
        }
        let stream = TcpStream::connect(self.addr).await.map_err(|e| Failure::Io(e.kind()))?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) =
            h2::client::handshake(stream).await.map_err(|_| Failure::Protocol("HTTP/2 handshake failed"))?;
        let open = Open::new(self.open.clone());
        tokio::spawn(async move {
            let _open = open;
            let _ = conn.await;
        });
        self.connects.fetch_add(1, Ordering::Relaxed);
        *slot.sender.borrow_mut() = Some(sender.clone());
        Ok((i, sender))
    }

    /// Forget connection `i`'s sender after it failed, so that the next request connects again.
    fn forget(&self, i: usize) {
        self.conns[i].sender.borrow_mut().take();
    }

    pub async fn exchange(&self, req: &Prepared) -> Result<Answer, Failure> {
        let (i, sender) = self.sender().await?;
        let mut request = Request::builder().method(self.method.clone()).uri(req.uri.clone());
        for (n, v) in &self.headers {
            request = request.header(n, v);
        }
        if self.method == Method::POST && !self.headers.iter().any(|(n, _)| n == http::header::CONTENT_TYPE) {
            request = request.header(http::header::CONTENT_TYPE, "application/json");
        }
        let request = request.body(()).map_err(|_| Failure::Protocol("bad request"))?;
        let mut sender = sender.ready().await.map_err(|e| {
            self.forget(i);
            h2_failure(&e)
        })?;
        let no_body = req.body.is_empty();
        let (response, mut body_out) = sender.send_request(request, no_body).map_err(|e| {
            self.forget(i);
            h2_failure(&e)
        })?;
        if !no_body {
            // Buffered by h2 and sent as the stream's window allows.
            body_out.send_data(req.body.clone(), true).map_err(|e| h2_failure(&e))?;
        }
        let resp = response.await.map_err(|e| h2_failure(&e))?;
        let mut status = resp.status().as_u16();
        // A trailers-only gRPC answer carries its status in the headers.
        let head_status = resp.headers().get("grpc-status").cloned();
        let mut body = resp.into_body();
        let mut bytes = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| h2_failure(&e))?;
            let _ = body.flow_control().release_capacity(chunk.len());
            bytes.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await.map_err(|e| h2_failure(&e))?;
        if self.grpc && status == 200 {
            let code = trailers.as_ref().and_then(|t| t.get("grpc-status")).or(head_status.as_ref());
            status = grpc_as_http(code.and_then(|v| v.to_str().ok()));
        }
        Ok(Answer { status, error_body: (!(200..300).contains(&status)).then(|| bytes.freeze()) })
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

fn h2_failure(e: &h2::Error) -> Failure {
    if let Some(io) = e.get_io() {
        return Failure::Io(io.kind());
    }
    if e.is_go_away() || e.is_reset() || e.is_io() { Failure::Closed } else { Failure::Protocol("HTTP/2 stream error") }
}
