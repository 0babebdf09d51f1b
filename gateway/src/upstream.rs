//! The gateway's connections to one worker: a stack of idle HTTP/1 keep-alive connections
//! (hyper's `client::conn::http1`), each one driven by the request that holds it.
//!
//! Why not hyper-util's pooled `Client` (what the gateway used first): every request went
//! through its generic pool (a checkout future, a SipHash-keyed map of hosts, `Authority`
//! comparisons) and then hopped twice between tasks: the request's task hands the request to
//! the connection's own task through a channel, that task writes it, reads the answer and hands
//! it back through a oneshot. Here the connection (its sender and its I/O state machine) is
//! owned by the request while it is in use, so the answer is read by the task that waits for
//! it: no channel wake-ups, no extra task polls. On one core this is a measurable share of the
//! gateway's CPU time per request (see `benches/RESULTS.md`, "Gateway vs nginx").
//!
//! The rules match the legacy client's: a connection is reused only after its answer was read
//! to the end and while it is open; the most recently used idle connection is taken first (it
//! is the least likely to have been closed by the worker's keep-alive timer); a request that a
//! stale pooled connection could not even send is sent again on another connection to the same
//! worker (it never reached the worker, so that is always safe); idle connections beyond
//! `max_idle` are closed, and those idle longer than the idle timeout are closed by [`prune`].
//!
//! [`prune`]: Upstream::prune

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::uri::Authority;
use http::{HeaderValue, Request, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The body of a request to a worker (buffered: it may be sent twice).
pub type RequestBody = Full<Bytes>;

/// How a request to a worker failed.
#[derive(Debug)]
pub enum Error {
    /// The request never reached the worker (no connection could be made, or the connection
    /// closed before the request was written): always safe to send elsewhere.
    Connect(String),
    /// The request was sent (or may have been) and no complete answer came back.
    Exchange(String),
}

impl Error {
    pub fn is_connect(&self) -> bool {
        matches!(self, Self::Connect(_))
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connect(e) | Self::Exchange(e) => f.write_str(e),
        }
    }
}

/// A worker's answer, read to the end.
#[derive(Debug)]
pub struct Answer {
    pub parts: http::response::Parts,
    pub body: Bytes,
}

/// The connections of the gateway to one worker.
pub struct Upstream {
    authority: Authority,
    host: HeaderValue,
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
    connect_timeout: Duration,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("authority", &self.authority).field("idle", &self.idle_count()).finish()
    }
}

struct Idle {
    conn: Connection,
    since: Instant,
}

type Io = TokioIo<TcpStream>;

/// One keep-alive connection: the request sender and the connection's I/O state machine,
/// polled together by whoever holds them.
struct Connection {
    sender: SendRequest<RequestBody>,
    io: http1::Connection<Io, RequestBody>,
    /// The I/O future has finished (closed or failed): it must not be polled again.
    done: bool,
}

/// Why an exchange on one connection failed.
enum Failed {
    /// The connection could not take the request: it was not written.
    NotSent(Box<Request<RequestBody>>, String),
    /// The request was written (or may have been).
    Sent(String),
}

impl Connection {
    /// Drive the connection's reads and writes; `true` once it has finished.
    fn poll_io(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.done
            && let Poll::Ready(result) = Pin::new(&mut self.io).poll(cx)
        {
            self.done = true;
            if let Err(e) = result {
                tracing::debug!(error = %e, "worker connection closed");
            }
        }
        self.done
    }

    /// Run `fut` to completion while driving the connection's I/O.
    async fn drive<F: Future>(&mut self, fut: F) -> F::Output {
        let mut fut = pin!(fut);
        poll_fn(|cx| {
            self.poll_io(cx);
            fut.as_mut().poll(cx)
        })
        .await
    }

    /// Open and ready for a request (polls the connection once, so that a close by the worker
    /// since it was last used is noticed).
    async fn usable(&mut self) -> bool {
        poll_fn(|cx| Poll::Ready(!self.poll_io(cx) && matches!(self.sender.poll_ready(cx), Poll::Ready(Ok(()))))).await
    }

    async fn exchange(&mut self, req: Request<RequestBody>, max_bytes: usize) -> Result<Answer, Failed> {
        let response = self.sender.try_send_request(req);
        let resp = match self.drive(response).await {
            Ok(r) => r,
            Err(mut e) => {
                let detail = e.error().to_string();
                return Err(match e.take_message() {
                    Some(req) => Failed::NotSent(Box::new(req), detail),
                    None => Failed::Sent(detail),
                });
            }
        };
        let (parts, body) = resp.into_parts();
        let body = self
            .drive(Limited::new(body, max_bytes).collect())
            .await
            .map_err(|e| Failed::Sent(format!("reading the answer: {e}")))?
            .to_bytes();
        Ok(Answer { parts, body })
    }

    /// Reusable after an answer read to the end.
    fn reusable(&self) -> bool {
        !self.done && !self.sender.is_closed()
    }
}

impl Upstream {
    pub fn new(authority: Authority, max_idle: usize, connect_timeout: Duration) -> Self {
        // An `Authority` is valid header text.
        let host = HeaderValue::from_str(authority.as_str()).unwrap_or_else(|_| HeaderValue::from_static("localhost"));
        Self { authority, host, idle: Mutex::new(Vec::new()), max_idle, connect_timeout }
    }

    /// Send `req` (origin-form URI, e.g. `/predict?query=hi`) and read the answer, at most
    /// `max_bytes` of body.
    pub async fn request(&self, mut req: Request<RequestBody>, max_bytes: usize) -> Result<Answer, Error> {
        req.headers_mut().insert(header::HOST, self.host.clone());
        while let Some(mut conn) = self.checkout().await {
            match conn.exchange(req, max_bytes).await {
                Ok(answer) => {
                    self.checkin(conn);
                    return Ok(answer);
                }
                // A stale keep-alive connection: try the next one, or a new one.
                Err(Failed::NotSent(r, detail)) => {
                    tracing::debug!(worker = %self.authority, detail, "pooled connection unusable, retrying");
                    req = *r;
                }
                Err(Failed::Sent(detail)) => return Err(Error::Exchange(detail)),
            }
        }
        let mut conn = self.connect().await?;
        match conn.exchange(req, max_bytes).await {
            Ok(answer) => {
                self.checkin(conn);
                Ok(answer)
            }
            Err(Failed::NotSent(_, detail)) => Err(Error::Connect(detail)),
            Err(Failed::Sent(detail)) => Err(Error::Exchange(detail)),
        }
    }

    /// The most recently used idle connection that is still open.
    async fn checkout(&self) -> Option<Connection> {
        loop {
            let mut idle = self.lock().pop()?;
            if idle.conn.usable().await {
                return Some(idle.conn);
            }
        }
    }

    fn checkin(&self, conn: Connection) {
        if !conn.reusable() {
            return;
        }
        let mut idle = self.lock();
        if idle.len() < self.max_idle {
            idle.push(Idle { conn, since: Instant::now() });
        }
    }

    async fn connect(&self) -> Result<Connection, Error> {
        let host = self.authority.host();
        let port = self.authority.port_u16().unwrap_or(80);
        let stream = match tokio::time::timeout(self.connect_timeout, TcpStream::connect((host, port))).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(Error::Connect(format!("connecting to {}: {e}", self.authority))),
            Err(_) => return Err(Error::Connect(format!("connecting to {}: timed out", self.authority))),
        };
        // Small requests and answers: without it, Nagle and delayed ACKs add tens of ms.
        let _ = stream.set_nodelay(true);
        let (sender, io) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| Error::Connect(format!("connecting to {}: {e}", self.authority)))?;
        Ok(Connection { sender, io, done: false })
    }

    /// Close idle connections that the worker has closed or that have been idle for longer
    /// than `idle_timeout`.
    pub fn prune(&self, idle_timeout: Duration) {
        let now = Instant::now();
        let mut cx = Context::from_waker(Waker::noop());
        self.lock().retain_mut(|i| now.saturating_duration_since(i.since) < idle_timeout && !i.conn.poll_io(&mut cx));
    }

    pub fn idle_count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        match self.idle.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}
