//! HTTP/2 over cleartext with prior knowledge (h2c), on the `h2` crate's client: a few
//! connections per thread, requests multiplexed over them as streams, taken in turn.
//!
//! `h2` directly rather than hyper's HTTP/2 client, which spawns a task per request to send its
//! body: here the body goes out with the request, and the answer (data and trailers) is read in
//! the request's own task, which spends less of the load generator's CPU a gRPC call
//! (`benches/RESULTS.md`, "Open Inference Protocol through the gateway").

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

/// A connection's receive window, in bytes: the answers to every call in flight on it may
/// arrive before any is read (h2's default, 64 KiB, holds some 600 gRPC answers of one text).
const CONNECTION_WINDOW: u32 = 8 << 20;

/// The framing overhead of small DATA frames a connection may hold unread, in bytes (each frame
/// of fewer than 256 bytes counts 256 less its length: a gRPC answer of one text, whose
/// message is a DATA frame of its own before the trailers, some 150). With h2's default, half
/// the window and 32 KiB with its default window, the connection was closed (ENHANCE_YOUR_CALM,
/// every call on it failed) once some 200 answers waited to be read, as they do on a busy load
/// generator with hundreds of calls on one connection. 4 MiB holds some 28,000.
const SMALL_FRAMES_BUDGET: usize = 4 << 20;

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
        let (sender, conn) = h2::client::Builder::new()
            .initial_connection_window_size(CONNECTION_WINDOW)
            .data_frame_budget(SMALL_FRAMES_BUDGET)
            .handshake(stream)
            .await
            .map_err(|_| Failure::Protocol("HTTP/2 handshake failed"))?;
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

#[cfg(test)]
mod tests {
    use http::{HeaderMap, Response};
    use tokio::net::TcpListener;

    use super::*;

    /// Many answers arrive at once, each a small DATA frame before its trailers (every gRPC
    /// answer is), read from the socket before any request reads its own. h2's client counts
    /// such frames held unread against a budget of framing overhead (half its connection
    /// window, 32 KiB by default: some 150 answers of 40 bytes) and past it closes the
    /// connection (ENHANCE_YOUR_CALM, "too_many_data_frames"), failing every call in flight: a
    /// busy load generator with hundreds of calls on one connection did. The pool's
    /// connections take a window, and so a budget, for many more.
    #[tokio::test]
    async fn many_small_answers_held_at_once_do_not_close_the_connection() {
        const CALLS: usize = 600;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (io, _) = listener.accept().await.unwrap();
            let mut conn = h2::server::handshake(io).await.unwrap();
            let mut calls = Vec::new();
            while calls.len() < CALLS {
                calls.push(conn.accept().await.unwrap().unwrap());
            }
            // Every answer queued before the connection writes any.
            for (_, mut respond) in calls {
                let mut send = respond.send_response(Response::new(()), false).unwrap();
                send.send_data(Bytes::from_static(&[0; 40]), false).unwrap();
                let mut trailers = HeaderMap::new();
                trailers.insert("grpc-status", HeaderValue::from_static("0"));
                send.send_trailers(trailers).unwrap();
            }
            while let Some(Ok(_)) = conn.accept().await {}
        });
        let pool = Pool::new(addr, Method::POST, Vec::new(), true, 1, Arc::default(), Arc::default());
        let req = Prepared {
            h1: Bytes::new(),
            uri: format!("http://{addr}/inference.GRPCInferenceService/ModelInfer").parse().unwrap(),
            body: Bytes::from_static(b"call"),
        };
        let answers = futures::future::join_all((0..CALLS).map(|_| pool.exchange(&req))).await;
        let failed = answers.iter().filter(|a| !matches!(a, Ok(Answer { status: 200, .. }))).count();
        assert_eq!(failed, 0, "calls failed: {:?}", answers.iter().find(|a| a.is_err()));
        server.abort();
    }
}
