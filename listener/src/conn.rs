//! One client connection's task: hyper's HTTP/1 connection over [`Io`], with the caller's
//! service wrapped in [`Tracked`], and the signals of the accept loop (drain, evict, abort) and
//! of the sweeper (a deadline passed).

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper::service::Service;
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::counter::Counter;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use crate::io::Io;
use crate::metrics::Metrics;
use crate::phase::{ABORT, Clock, ConnState, DRAIN, Deadlines, EVICT, EXPIRED, Phase, TimeoutKind};
use crate::registry::{AddrSlot, Registry};
use crate::service::Tracked;

/// What every connection of one listener shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub http: http1::Builder,
    pub deadlines: Deadlines,
    pub registry: Arc<Registry>,
    pub metrics: Metrics,
    pub clock: Arc<Clock>,
    pub timeouts: TimeoutCounters,
}

#[derive(Debug)]
pub(crate) struct TimeoutCounters {
    header: Counter,
    idle: Counter,
    send: Counter,
}

impl TimeoutCounters {
    pub(crate) fn new(m: &Metrics) -> Self {
        Self {
            header: m.timeout(TimeoutKind::Header),
            idle: m.timeout(TimeoutKind::Idle),
            send: m.timeout(TimeoutKind::Send),
        }
    }

    fn inc(&self, kind: TimeoutKind) {
        match kind {
            TimeoutKind::Header => self.header.inc(),
            TimeoutKind::Idle => self.idle.inc(),
            TimeoutKind::Send => self.send.inc(),
            // Counted by the body reader, which sees it.
            TimeoutKind::Body => 0,
        };
    }
}

/// How a connection ended.
#[derive(Debug)]
enum End {
    /// hyper finished it (client closed, `Connection: close`, an error answer, or drained).
    Done(Result<(), hyper::Error>),
    Timeout(TimeoutKind),
    Aborted,
}

/// Decrements the open-connections gauge when the connection ends, however it ends.
struct Open<'a>(&'a Metrics);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.open.dec();
    }
}

/// Serves one accepted connection until it ends; holds `_permit` (a place under the cap) and
/// `address` (its address's place under the per-address cap) until then.
pub(crate) async fn serve<S, B>(
    stream: TcpStream,
    shared: Arc<Shared>,
    service: S,
    _permit: OwnedSemaphorePermit,
    address: AddrSlot,
) where
    S: Service<Request<Incoming>, Response = Response<B>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body<Data = Bytes> + From<Bytes> + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let state = Arc::new(ConnState::new(Arc::clone(&shared.clock)));
    let _entry = shared.registry.insert(Arc::clone(&state), address.key());
    let _address = address;
    shared.metrics.accepted.inc();
    shared.metrics.open.inc();
    let _open = Open(&shared.metrics);

    let io = TokioIo::new(Io::new(stream, Arc::clone(&state)));
    let conn = shared.http.serve_connection(io, Tracked::new(service, Arc::clone(&state)));
    let end = drive(conn, &state, shared.deadlines).await;
    if state.signals() & EVICT != 0 {
        shared.metrics.evicted.inc();
    }
    match end {
        End::Done(Ok(())) | End::Aborted => {}
        End::Done(Err(e)) => tracing::debug!(error = %e, "client connection ended with an error"),
        End::Timeout(kind) => {
            tracing::debug!(timeout = kind.as_str(), "client connection timed out");
            shared.timeouts.inc(kind);
        }
    }
}

async fn drive<C>(conn: C, state: &ConnState, deadlines: Deadlines) -> End
where
    C: Future<Output = Result<(), hyper::Error>> + GracefulShutdown,
{
    let mut conn = pin!(conn);
    let mut drain_seen = false;
    let mut header_expired = false;
    poll_fn(|cx| {
        state.register(cx.waker());
        let signals = state.signals();
        if signals & ABORT != 0 {
            return Poll::Ready(End::Aborted);
        }
        if signals & (DRAIN | EVICT) != 0 && !drain_seen {
            drain_seen = true;
            // A request in progress is answered with `Connection: close`. Without a request
            // (Idle, or Head with nothing read), the socket wrapper closes unless bytes are
            // waiting; a head in progress is answered, and the service wrapper closes after it.
            if matches!(state.phase(), Phase::Busy | Phase::Flushing) {
                conn.as_mut().shutdown_gracefully();
            }
        }
        if signals & EXPIRED != 0 && !header_expired {
            state.clear(EXPIRED);
            // Checked again: a request may have moved the connection on since the sweep.
            match deadlines.expired(state.phase(), state.since(), state.clock().now()) {
                None => {}
                // Let hyper read once more: the socket wrapper answers 408 and fails the read,
                // and hyper ends the connection.
                Some(TimeoutKind::Header) => {
                    state.set_header_timed_out();
                    header_expired = true;
                }
                Some(kind) => return Poll::Ready(End::Timeout(kind)),
            }
        }
        if let Poll::Ready(res) = conn.as_mut().poll(cx) {
            return Poll::Ready(if header_expired { End::Timeout(TimeoutKind::Header) } else { End::Done(res) });
        }
        if header_expired {
            // The 408 was written (or could not be) when hyper last read; close now.
            return Poll::Ready(End::Timeout(TimeoutKind::Header));
        }
        Poll::Pending
    })
    .await
}

/// hyper's graceful shutdown, behind a trait so [`drive`] does not repeat hyper's bounds.
trait GracefulShutdown {
    fn shutdown_gracefully(self: std::pin::Pin<&mut Self>);
}

impl<S, B> GracefulShutdown for http1::Connection<TokioIo<Io>, Tracked<S>>
where
    S: Service<Request<Incoming>, Response = Response<B>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body<Data = Bytes> + From<Bytes> + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn shutdown_gracefully(self: std::pin::Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}
