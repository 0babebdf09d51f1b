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
//! answer (the worker closed it while the request was on its way: the keep-alive race) is
//! reported as [`Error::Stale`]; whether to send it again is not decided here but in the
//! gateway's outcome policy (`pool::outcome::send`: once more, on a [`Conn::New`] connection).
//!
//! Checked against hyper's client: `vs_hyper.rs` generates worker answers (valid and broken
//! framing, odd spelling and spacing, interim answers, HTTP/1.0, pieces of random size) and
//! requires the same outcome and the same keep-alive decisions from both (600 cases in the test
//! suite; 20,000 clean with `UPSTREAM_CASES=20000`). One difference is by design: bytes a worker
//! sends after a complete answer, arriving after the answer was read, are found at the next
//! request on that connection (an exchange error, which the proxy retries on another worker),
//! where hyper finds them while the connection is idle; watching idle connections would cost a
//! syscall per request, for a worker that breaks the protocol.

mod budget;
mod codec;
mod conn;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod vs_hyper;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::uri::Authority;
use http::{HeaderValue, Method, StatusCode};
use tokio::net::TcpStream;
use tokio::time::Instant;

pub use budget::{AnswerBudget, Charge, Limit};
use conn::{Connection, Failed};

use crate::runtime::Slots;

/// An idle connection keeps buffers up to this capacity; larger ones (left by a large request or
/// answer) are freed when it goes back to the pool.
const KEEP_BUFFER_BYTES: usize = 64 * 1024;

/// How a request to a worker failed.
#[derive(Debug)]
pub enum Error {
    /// The request never reached the worker whole (no connection could be made, or it could not
    /// be written on a new connection): always safe to send elsewhere.
    Connect(String),
    /// A reused keep-alive connection ended before a single byte of answer: the worker closed it
    /// while idle and cannot have processed the request.
    Stale(String),
    /// The request was sent and no complete, valid answer came back.
    Exchange(String),
    /// The answer's body is larger than any the worker can legitimately send (`--max-answer-bytes`).
    TooLarge(String),
    /// The answer does not fit in what is left of the budget of answer bytes held at once.
    Budget(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connect(e) | Self::Stale(e) | Self::Exchange(e) | Self::TooLarge(e) | Self::Budget(e) => {
                f.write_str(e)
            }
        }
    }
}

/// Which connection a request goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conn {
    /// The most recently used idle connection, or a new one when none is idle.
    Reuse,
    /// A new connection.
    New,
}

/// A request to a worker (buffered by the caller: it may be sent twice).
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    pub method: &'a Method,
    /// Origin-form target, e.g. `/predict?query=hi`.
    pub path_and_query: &'a str,
    pub content_type: Option<&'a HeaderValue>,
    /// Headers passed through as they are (e.g. `x-request-id`, `traceparent`).
    pub headers: &'a [(&'static str, &'a HeaderValue)],
    pub body: &'a [u8],
}

impl<'a> Outgoing<'a> {
    pub fn get(path_and_query: &'a str) -> Self {
        Self { method: &Method::GET, path_and_query, content_type: None, headers: &[], body: &[] }
    }
}

/// A worker's answer, read to the end: what the gateway passes on.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub content_type: Option<HeaderValue>,
    pub retry_after: Option<HeaderValue>,
    pub body: Bytes,
    /// The body's bytes in the budget of answers held at once: keep it as long as the body.
    pub charge: Option<Charge>,
}

/// The connections of the gateway to one worker.
///
/// Idle connections are kept in stacks, one per slot: with one slot (the shared runtime) every
/// thread takes from the one stack. With more (the per-core runtime, `--runtime per-core`), a
/// data-plane core takes only from its own (`crate::runtime::core`), and every other thread (the
/// control plane's monitors, polling `/v1/stats`) from the last: a connection is registered with
/// the reactor of the runtime that opened it, and polled from another runtime it would be
/// driven by that one's reactor, or by none once it stops. `max_idle` holds per stack.
pub struct Upstream {
    authority: Authority,
    idle: Slots<Stack>,
    max_idle: usize,
    connect_timeout: Duration,
}

/// One slot's idle connections (on cache lines of their own: each core writes only its own).
type Stack = Mutex<Vec<Idle>>;

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
    /// `slots`: 1 for the shared runtime; the data-plane cores plus one in the per-core runtime
    /// (`Config::core_slots`).
    pub fn new(authority: Authority, max_idle: usize, connect_timeout: Duration, slots: usize) -> Self {
        let idle = Slots::new(slots, Stack::default);
        Self { authority, idle, max_idle, connect_timeout }
    }

    /// Send `out` on the connection `conn` asks for and read the answer, its body within `limit`
    /// (a size, or a size and the budget to charge). Sends once: [`Error::Stale`] is the caller's
    /// to resend.
    pub async fn request<'l>(
        &self,
        out: Outgoing<'_>,
        limit: impl Into<Limit<'l>>,
        conn: Conn,
    ) -> Result<Answer, Error> {
        let limit = limit.into();
        let reused = match conn {
            Conn::Reuse => self.checkout(),
            Conn::New => None,
        };
        let mut c = match reused {
            Some(c) => c,
            None => self.connect().await?,
        };
        match c.exchange(&out, self.authority.as_str(), limit).await {
            Ok((answer, keep_alive)) => {
                self.checkin(c, keep_alive);
                Ok(answer)
            }
            Err(Failed::Stale(detail)) => Err(Error::Stale(detail)),
            Err(Failed::NotSent(detail)) => Err(Error::Connect(detail)),
            Err(Failed::Sent(detail)) => Err(Error::Exchange(detail)),
            Err(Failed::TooLarge(detail)) => Err(Error::TooLarge(detail)),
            Err(Failed::Budget(detail)) => Err(Error::Budget(detail)),
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

    /// Close idle connections (of every slot) that the worker has closed or that have been idle
    /// for longer than `idle_timeout`.
    pub fn prune(&self, idle_timeout: Duration) {
        let now = Instant::now();
        for stack in self.idle.iter() {
            lock(stack).retain(|i| now.saturating_duration_since(i.since) < idle_timeout && !i.conn.closed_or_dirty());
        }
    }

    /// Idle connections, of every slot.
    pub fn idle_count(&self) -> usize {
        self.idle.iter().map(|s| lock(s).len()).sum()
    }

    /// The calling thread's stack: its core's in the per-core runtime.
    fn lock(&self) -> MutexGuard<'_, Vec<Idle>> {
        lock(self.idle.local())
    }
}

fn lock(stack: &Stack) -> MutexGuard<'_, Vec<Idle>> {
    match stack.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
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
    u.idle.iter().flat_map(|s| lock(s).iter().map(|i| i.conn.buffer_capacities()).collect::<Vec<_>>()).collect()
}
