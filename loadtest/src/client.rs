//! One request end to end: the connection (HTTP/1.1 or HTTP/2), the timeout, one resend on a
//! keep-alive connection the server had closed, and the outcome by status and `error_type`.

use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::time::{Instant, Sleep};

use crate::http1::{self, Failure};
use crate::http2;
use crate::target::{Http, Target};

/// Why a request did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Failed {
    /// An answer that is not `2xx`, with the `error_type` of its JSON error body (`non_json` when
    /// the body is not `{"error", "error_type"}`).
    Status { status: u16, error_type: String },
    /// No connection could be made.
    Connect { error: String },
    /// The connection failed during the exchange, or the answer was not valid HTTP.
    Transport { error: String },
    /// No complete answer within `--timeout`.
    Timeout,
}

impl Failed {
    /// How the summary and the report name it: `429 overloaded`, `connect: connection refused`.
    pub fn label(&self) -> String {
        match self {
            Self::Status { status, error_type } => format!("{status} {error_type}"),
            Self::Connect { error } => format!("connect: {error}"),
            Self::Transport { error } => format!("transport: {error}"),
            Self::Timeout => "timeout".to_owned(),
        }
    }
}

pub type Outcome = Result<(), Failed>;

/// Connection counters of one thread, read by the collector.
#[derive(Debug, Default)]
pub struct ConnCounters {
    /// Connections open now.
    pub open: Arc<AtomicI64>,
    /// Connections opened so far.
    pub opened: Arc<AtomicI64>,
    /// Requests sent again because a kept-alive connection had been closed by the server.
    pub resent: AtomicI64,
}

/// What the requests of one thread share.
#[derive(Debug)]
pub struct ThreadCtx {
    pub target: Arc<Target>,
    pub timeout: Duration,
    pub counters: Arc<ConnCounters>,
    h2: Option<http2::Pool>,
}

impl ThreadCtx {
    pub fn new(target: Arc<Target>, timeout: Duration, counters: Arc<ConnCounters>, h2_connections: usize) -> Self {
        let h2 = (target.http == Http::Http2).then(|| {
            http2::Pool::new(
                target.addr,
                target.method.clone(),
                target.headers.clone(),
                target.grpc,
                h2_connections,
                counters.open.clone(),
                counters.opened.clone(),
            )
        });
        Self { target, timeout, counters, h2 }
    }
}

/// An HTTP/1.1 connection counted in the open gauge while it lives.
#[derive(Debug)]
struct Tracked {
    conn: http1::Conn,
    open: Arc<AtomicI64>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A sender of requests: its own keep-alive connection (HTTP/1.1) or streams on the thread's
/// HTTP/2 connections.
#[derive(Debug)]
pub struct Client {
    ctx: Rc<ThreadCtx>,
    conn: Option<Tracked>,
    /// The timeout, one timer for every request: moving a registered deadline later needs no
    /// timer-wheel update (tokio extends it in place), a new timer per request would.
    deadline: Pin<Box<Sleep>>,
}

impl Client {
    pub fn new(ctx: Rc<ThreadCtx>) -> Self {
        let deadline = Box::pin(tokio::time::sleep(ctx.timeout));
        Self { ctx, conn: None, deadline }
    }

    /// Whether the next request can go without a new connection: a kept-alive HTTP/1.1
    /// connection, or the thread's HTTP/2 connections.
    pub fn connected(&self) -> bool {
        self.conn.is_some() || self.ctx.h2.is_some()
    }

    /// Send request `i` of the mix and wait for its answer, at most `--timeout`.
    pub async fn send(&mut self, i: u64) -> Outcome {
        self.deadline.as_mut().reset(Instant::now() + self.ctx.timeout);
        let Self { ctx, conn, deadline } = self;
        tokio::select! {
            biased;
            outcome = exchange(ctx, conn, i) => outcome,
            // The exchange is dropped half-way: its connection goes with it.
            () = deadline.as_mut() => Err(Failed::Timeout),
        }
    }
}

async fn exchange(ctx: &ThreadCtx, slot: &mut Option<Tracked>, i: u64) -> Outcome {
    let req = ctx.target.request(i);
    if let Some(h2) = &ctx.h2 {
        return match h2.exchange(req).await {
            Ok(a) => classify(a.status, a.error_body),
            Err(f) => Err(transport(f)),
        };
    }
    let head = ctx.target.method == http::Method::HEAD;
    let mut conn = match slot.take() {
        Some(c) => c,
        None => connect(ctx).await?,
    };
    let answer = match conn.conn.exchange(&req.h1, head, false).await {
        Err(Failure::Stale) => {
            drop(conn);
            ctx.counters.resent.fetch_add(1, Ordering::Relaxed);
            conn = connect(ctx).await?;
            conn.conn.exchange(&req.h1, head, false).await
        }
        other => other,
    };
    match answer {
        Ok(a) => {
            if a.keep_alive {
                *slot = Some(conn);
            }
            classify(a.status, a.body)
        }
        Err(f) => Err(transport(f)),
    }
}

async fn connect(ctx: &ThreadCtx) -> Result<Tracked, Failed> {
    let conn = http1::Conn::connect(ctx.target.addr).await.map_err(|e| Failed::Connect { error: io_text(e.kind()) })?;
    ctx.counters.open.fetch_add(1, Ordering::Relaxed);
    ctx.counters.opened.fetch_add(1, Ordering::Relaxed);
    Ok(Tracked { conn, open: ctx.counters.open.clone() })
}

/// Success for `2xx`; otherwise the status and the body's `error_type`.
pub fn classify(status: u16, body: Option<Bytes>) -> Outcome {
    if (200..300).contains(&status) {
        return Ok(());
    }
    #[derive(Deserialize)]
    struct ErrorBody {
        error_type: String,
    }
    let error_type = body
        .and_then(|b| serde_json::from_slice::<ErrorBody>(&b).ok())
        .map(|b| b.error_type)
        .filter(|t| !t.is_empty() && t.len() <= 64)
        .unwrap_or_else(|| "non_json".to_owned());
    Err(Failed::Status { status, error_type })
}

fn transport(f: Failure) -> Failed {
    let error = match f {
        Failure::Stale | Failure::Closed => "closed before the answer".to_owned(),
        Failure::Io(kind) => io_text(kind),
        Failure::Protocol(what) => what.to_owned(),
    };
    Failed::Transport { error }
}

fn io_text(kind: io::ErrorKind) -> String {
    match kind {
        io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
        io::ErrorKind::ConnectionReset => "connection reset".to_owned(),
        io::ErrorKind::ConnectionAborted => "connection aborted".to_owned(),
        io::ErrorKind::BrokenPipe => "broken pipe".to_owned(),
        io::ErrorKind::TimedOut => "timed out".to_owned(),
        io::ErrorKind::AddrNotAvailable => "address not available (out of ports?)".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_classified_by_status_and_error_type() {
        assert_eq!(classify(200, None), Ok(()));
        assert_eq!(classify(204, Some(Bytes::from_static(b"x"))), Ok(()));
        let e = classify(429, Some(Bytes::from_static(br#"{"error":"busy","error_type":"overloaded"}"#)));
        assert_eq!(e.unwrap_err().label(), "429 overloaded");
        assert_eq!(
            classify(502, Some(Bytes::from_static(b"<html>bad gateway</html>"))).unwrap_err().label(),
            "502 non_json"
        );
        assert_eq!(classify(500, None).unwrap_err().label(), "500 non_json");
        // Kinds this build does not know are kept as they are.
        let e = classify(503, Some(Bytes::from_static(br#"{"error":"x","error_type":"brand_new"}"#)));
        assert_eq!(e.unwrap_err().label(), "503 brand_new");
    }
}
