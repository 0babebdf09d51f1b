//! The gateway's HTTP/1.1 client for its workers: a stack of idle keep-alive connections per
//! worker ([`Upstream`], here), one connection's request/answer exchange ([`conn`]) and the
//! encoding and head parsing on `httparse`, the parser hyper uses ([`codec`]), as pingora does
//! for its upstream connections.
//!
//! Why not hyper's client: the gateway first used hyper-util's pooled `Client`, then a pool of
//! hyper `client::conn::http1` connections. Both cost user-space CPU per request that nginx
//! does not spend (see `benches/RESULTS.md`, "Gateway vs nginx"): the request is handed to a
//! dispatcher through a channel and the answer comes back through a oneshot; the request and
//! answer headers are built into and parsed out of `HeaderMap`s (hashing every name); the body
//! arrives through another channel. The gateway needs none of that for a worker exchange: it
//! sends a small buffered request and reads a small buffered answer, of which it keeps the
//! status, `Content-Type`, `Retry-After` and the body. Here one buffer is written, the answer
//! is parsed in place and the connection is read by the task that waits for the answer.
//!
//! What is implemented of HTTP/1.1 (RFC 9112) for answers: interim `1xx` answers are skipped;
//! the body is delimited by `Transfer-Encoding: chunked` (trailers are read and dropped), by
//! `Content-Length`, or by the end of the connection; `HEAD`, `204` and `304` answers have no
//! body; conflicting `Content-Length`s and malformed chunks are errors. A connection is reused
//! only when its answer was read to the end, was length-delimited, said nothing of
//! `Connection: close` (HTTP/1.1) or said `keep-alive` (HTTP/1.0), and no byte followed it.
//!
//! Pooling follows hyper-util's legacy client: the most recently used idle connection is taken
//! first (the least likely to have been closed by the worker's keep-alive timer), at most
//! `max_idle` are kept, and [`Upstream::prune`] closes those the worker has closed or that have
//! been idle too long. A request sent on a reused connection that ends before a single byte of
//! answer (the worker closed it while the request was on its way: the keep-alive race) is sent
//! again once on a new connection to the same worker; the worker cannot have answered it.
//!
//! Checked against hyper's client: `tests/upstream_vs_hyper.rs` generates worker answers (valid and broken
//! framing, odd spelling and spacing, interim answers, HTTP/1.0, pieces of random size) and
//! requires the same outcome and the same keep-alive decisions from both (600 cases in the test
//! suite; 20,000 clean with `UPSTREAM_CASES=20000`). One difference is by design: bytes a worker
//! sends after a complete answer, arriving after the answer was read, are found at the next
//! request on that connection (an exchange error, which the proxy retries on another worker),
//! where hyper finds them while the connection is idle; watching idle connections would cost a
//! syscall per request, for a worker that breaks the protocol.

mod codec;
mod conn;
#[cfg(test)]
mod tests;

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http::uri::Authority;
use http::{HeaderValue, Method, StatusCode};
use tokio::net::TcpStream;
use tokio::time::Instant;

use conn::{Connection, Failed};

/// An idle connection keeps buffers up to this capacity; larger ones (left by a large request or
/// answer) are freed when it goes back to the pool.
const KEEP_BUFFER_BYTES: usize = 64 * 1024;

/// How a request to a worker failed.
#[derive(Debug)]
pub enum Error {
    /// The request never reached the worker whole (no connection could be made, or it could not
    /// be written on a new connection): always safe to send elsewhere.
    Connect(String),
    /// The request was sent and no complete, valid answer came back.
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

/// A request to a worker (buffered by the caller: it may be sent twice).
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    pub method: &'a Method,
    /// Origin-form target, e.g. `/predict?query=hi`.
    pub path_and_query: &'a str,
    pub content_type: Option<&'a HeaderValue>,
    pub body: &'a [u8],
}

impl<'a> Outgoing<'a> {
    pub fn get(path_and_query: &'a str) -> Self {
        Self { method: &Method::GET, path_and_query, content_type: None, body: &[] }
    }
}

/// A worker's answer, read to the end: what the gateway passes on.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub content_type: Option<HeaderValue>,
    pub retry_after: Option<HeaderValue>,
    pub body: Bytes,
}

/// The connections of the gateway to one worker.
pub struct Upstream {
    authority: Authority,
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

impl Upstream {
    pub fn new(authority: Authority, max_idle: usize, connect_timeout: Duration) -> Self {
        Self { authority, idle: Mutex::new(Vec::new()), max_idle, connect_timeout }
    }

    /// Send `out` and read the answer, at most `max_bytes` of body.
    pub async fn request(&self, out: Outgoing<'_>, max_bytes: usize) -> Result<Answer, Error> {
        let host = self.authority.as_str();
        let mut conn = match self.checkout() {
            Some(conn) => conn,
            None => self.connect().await?,
        };
        loop {
            match conn.exchange(&out, host, max_bytes).await {
                Ok((answer, keep_alive)) => {
                    self.checkin(conn, keep_alive);
                    return Ok(answer);
                }
                // Only a reused connection is stale, so this sends once more at most.
                Err(Failed::Stale(detail)) => {
                    tracing::debug!(worker = %self.authority, detail, "idle connection was closed; sending on a new one");
                    conn = self.connect().await?;
                }
                Err(Failed::NotSent(detail)) => return Err(Error::Connect(detail)),
                Err(Failed::Sent(detail)) => return Err(Error::Exchange(detail)),
            }
        }
    }

    /// The most recently used idle connection.
    fn checkout(&self) -> Option<Connection> {
        self.lock().pop().map(|i| i.conn)
    }

    fn checkin(&self, mut conn: Connection, keep_alive: bool) {
        if !keep_alive {
            return;
        }
        conn.shrink_buffers(KEEP_BUFFER_BYTES);
        let mut idle = self.lock();
        if idle.len() < self.max_idle {
            idle.push(Idle { conn, since: Instant::now() });
        }
    }

    async fn connect(&self) -> Result<Connection, Error> {
        let (host, port) = socket_host(&self.authority);
        let stream = match tokio::time::timeout(self.connect_timeout, TcpStream::connect((host, port))).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(Error::Connect(format!("connecting to {}: {e}", self.authority))),
            Err(_) => return Err(Error::Connect(format!("connecting to {}: timed out", self.authority))),
        };
        // Small requests and answers: without it, Nagle and delayed ACKs add tens of ms.
        let _ = stream.set_nodelay(true);
        Ok(Connection::new(stream))
    }

    /// Close idle connections that the worker has closed or that have been idle for longer
    /// than `idle_timeout`.
    pub fn prune(&self, idle_timeout: Duration) {
        let now = Instant::now();
        self.lock().retain(|i| now.saturating_duration_since(i.since) < idle_timeout && !i.conn.closed_or_dirty());
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

/// The host and port to resolve for `authority`: `[::1]` in a URL is `::1` to the resolver; no
/// port means 80.
fn socket_host(authority: &Authority) -> (&str, u16) {
    let host = authority.host().trim_start_matches('[').trim_end_matches(']');
    (host, authority.port_u16().unwrap_or(80))
}

/// The (read, write) buffer capacities of the idle connections.
#[cfg(test)]
fn idle_buffer_capacities(u: &Upstream) -> Vec<(usize, usize)> {
    u.lock().iter().map(|i| i.conn.buffer_capacities()).collect()
}
