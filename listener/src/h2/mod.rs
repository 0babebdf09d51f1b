//! The gRPC (HTTP/2) listeners of both binaries under the limits of the HTTP/1 one
//! (`listener/README.md` has them in one table):
//!
//! - [`Listener`]: the accept loop, with `--max-connections` and the per-address cap of the
//!   HTTP/1 listener (the same per-address accounting); a connection past either is closed at
//!   once (HTTP/2 has no answer to give before its preface). `accept` failures back off as
//!   there.
//! - [`Limits::builder`]: hyper's HTTP/2 settings: a bound on concurrent streams, bounded
//!   windows and send buffers, h2's reset-abuse protections left on, keep-alive pings.
//! - [`Watch`], one a connection: its preface must come within `--header-read-timeout` of its
//!   accept (a TLS handshake included), and a connection whose answers the peer leaves unread
//!   for `--idle-timeout` is closed ([`AnswerBody`]).
//! - [`CallBody`]: a request's body: each message's declared length checked against the
//!   binary's `--max-body-bytes` before a byte of it is taken, the bytes drawn from the same
//!   budget as HTTP/1 bodies (`--max-buffered-body-bytes`), the whole body within
//!   `--body-read-timeout`; past any, the call is answered its gRPC status, the connection's
//!   other calls go on.
//! - [`compact`]: an answer made by tonic held as the bytes it sends, not as tonic's encoder
//!   and its 8 KiB buffer, while the peer leaves it unread.

mod body;
mod compact;
mod watch;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::server::conn::http2;
use hyper_util::rt::TokioTimer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

pub use body::CallBody;
pub use compact::{Compact, compact};
pub use watch::{AnswerBody, Watch, WatchedIo};

use crate::args::Config;
use crate::body::BodyReader;
use crate::metrics::Metrics;
use crate::nofile;
use crate::registry::{AddrSlot, Registry};
use crate::server::{Backoff, is_about_one_connection};

/// Most concurrent streams (calls) on one connection. Clients queue their calls past it rather
/// than fail them (grpc-go's, KEDA's; gRPC C++'s, Triton's; tonic's), so it bounds what one
/// connection may hold, not what a client may send: each stream open costs some kilobytes
/// (its state, its call, its answer waiting), and a peer that never reads holds them all.
/// nginx's `http2_max_concurrent_streams` is the same; it leaves room for a load generator's
/// or Triton's client's calls in flight on one connection, and KEDA opens a few.
pub const MAX_CONCURRENT_STREAMS: u32 = 128;
/// A stream's receive window: a message of the default `--max-body-bytes` in one round trip.
const STREAM_WINDOW: u32 = 512 << 10;
/// A connection's receive window: what a peer may send that no call has read yet.
const CONNECTION_WINDOW: u32 = 1 << 20;
/// Most bytes of answers buffered on one stream beyond what the peer's window takes.
const SEND_BUFFER: usize = 64 << 10;
/// Streams a peer may open and reset before the server has taken them (h2's default; Rapid
/// Reset is closed at it, `ENHANCE_YOUR_CALM`).
const PENDING_ACCEPT_RESETS: usize = 20;
/// Streams the server may reset for a peer's errors before it closes the connection (hyper's
/// default; "MadeYouReset": a peer provoking resets on purpose).
const LOCAL_ERROR_RESETS: usize = 1024;
/// Keep-alive pings: a dead peer is dropped.
const PING_INTERVAL: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// What every connection of one gRPC listener is held to.
#[derive(Debug, Clone)]
pub struct Limits {
    bodies: BodyReader,
    max_message: usize,
    preface: Duration,
    unread: Duration,
    metrics: Metrics,
}

impl Limits {
    /// The limits of `config` (its timeouts), messages of at most `max_message` bytes read by
    /// `bodies` (its budget and deadline, shared with the process's HTTP/1 port), timeouts
    /// counted in `metrics`.
    pub fn new(config: &Config, bodies: BodyReader, max_message: usize, metrics: &Metrics) -> Self {
        Self {
            bodies,
            max_message,
            preface: config.header_read_timeout,
            unread: config.idle_timeout,
            metrics: metrics.clone(),
        }
    }

    /// hyper's HTTP/2 server for these limits, its calls run by `exec`.
    pub fn builder<E>(&self, exec: E) -> http2::Builder<E> {
        let mut b = http2::Builder::new(exec);
        b.timer(TokioTimer::new())
            .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_send_buf_size(SEND_BUFFER)
            .max_pending_accept_reset_streams(PENDING_ACCEPT_RESETS)
            .max_local_error_reset_streams(LOCAL_ERROR_RESETS)
            .keep_alive_interval(PING_INTERVAL)
            .keep_alive_timeout(PING_TIMEOUT);
        b
    }

    /// The watch of a connection accepted at `accepted`.
    pub fn watch(&self, accepted: Instant) -> Watch {
        Watch::new(self, accepted)
    }
}

/// The gRPC listener's accept loop: its connections under the cap and the per-address cap.
#[derive(Debug)]
pub struct Listener {
    tcp: TcpListener,
    registry: Arc<Registry>,
    permits: Arc<Semaphore>,
    per_address: usize,
    metrics: Metrics,
    backoff: Backoff,
}

impl Listener {
    /// `tcp`'s connections: at most `config.max_connections` (clamped to half the open-file
    /// limit, as the HTTP/1 listener's), at most `config.max_connections_per_address` of one
    /// address; counted in `metrics`.
    pub fn new(tcp: TcpListener, config: &Config, metrics: Metrics) -> Self {
        let cap = nofile::effective_cap(config.max_connections, nofile::raise_nofile_limit());
        let per_address = config.max_connections_per_address.clamp(1, cap);
        metrics.limit.set(i64::try_from(cap).unwrap_or(i64::MAX));
        metrics.limit_per_address.set(i64::try_from(per_address).unwrap_or(i64::MAX));
        Self {
            tcp,
            registry: Arc::new(Registry::default()),
            permits: Arc::new(Semaphore::new(cap)),
            per_address,
            metrics,
            backoff: Backoff::default(),
        }
    }

    /// A listener for `tcp` (another socket of the same address, `bind_shared`, served by
    /// another runtime) under the same caps as this one: the connection cap, the per-address
    /// cap and its registry, and the metrics are shared, not multiplied.
    pub fn sibling(&self, tcp: TcpListener) -> Self {
        Self {
            tcp,
            registry: Arc::clone(&self.registry),
            permits: Arc::clone(&self.permits),
            per_address: self.per_address,
            metrics: self.metrics.clone(),
            backoff: Backoff::default(),
        }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// The next connection under both caps (those past them are closed). Cancel-safe.
    pub async fn accept(&mut self) -> Accepted {
        loop {
            let (tcp, peer) = match self.tcp.accept().await {
                Ok(c) => c,
                Err(e) => {
                    self.metrics.accept_errors.inc();
                    if !is_about_one_connection(&e) {
                        let wait = self.backoff.next();
                        tracing::debug!(error = %e, ?wait, "grpc accept failed; backing off");
                        tokio::time::sleep(wait).await;
                    }
                    continue;
                }
            };
            self.backoff.reset();
            // Under pressure only, as the HTTP/1 listener's: while more places are free than one
            // address's share, an address may hold more; once no more are free, the places left
            // are the other addresses'.
            let per_address =
                if self.permits.available_permits() > self.per_address { usize::MAX } else { self.per_address };
            let Some(address) = self.registry.reserve(peer.ip(), per_address) else {
                self.metrics.refused_per_address.inc();
                tracing::debug!(%peer, "grpc connection refused: --max-connections-per-address reached");
                continue;
            };
            let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
                self.metrics.refused.inc();
                tracing::debug!("grpc connection refused: --max-connections reached");
                continue;
            };
            // Small answers on a connection that carries many calls: without it, Nagle holds
            // an answer back until the client's delayed ACK. Neither hyper's HTTP/2 server nor
            // tokio sets it on an accepted connection.
            let _ = tcp.set_nodelay(true);
            self.metrics.accepted.inc();
            self.metrics.open.inc();
            let held = Held { _permit: permit, _address: address, metrics: self.metrics.clone() };
            return Accepted { tcp, peer, accepted: Instant::now(), _held: held };
        }
    }
}

/// A connection's places under the caps, given back (and the open gauge lowered) when dropped.
#[derive(Debug)]
struct Held {
    _permit: OwnedSemaphorePermit,
    _address: AddrSlot,
    metrics: Metrics,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.metrics.open.dec();
    }
}

/// An accepted connection; its places are given back when it is dropped.
#[derive(Debug)]
pub struct Accepted {
    tcp: TcpStream,
    peer: SocketAddr,
    accepted: Instant,
    _held: Held,
}

impl Accepted {
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// When it was accepted: its preface deadline counts from here.
    pub fn accepted_at(&self) -> Instant {
        self.accepted
    }

    #[cfg(test)]
    fn nodelay(&self) -> bool {
        self.tcp.nodelay().unwrap_or(false)
    }
}

impl AsyncRead for Accepted {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

/// A gRPC client's deadline as its `grpc-timeout` header writes it: an integer of at most 8
/// digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`); `None` for anything else.
pub fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok().filter(|_| digits.len() <= 8)?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    async fn closed(s: &mut TcpStream) -> bool {
        let mut buf = [0u8; 1];
        matches!(tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await, Ok(Ok(0) | Err(_)))
    }

    #[tokio::test]
    async fn connections_past_the_per_address_cap_or_the_cap_are_closed_and_places_come_back() {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let cfg = Config { max_connections: 3, max_connections_per_address: 2, ..Config::default() };
        let metrics = Metrics::default();
        let mut l = Listener::new(tcp, &cfg, metrics.clone());
        let from = |ip: [u8; 4]| {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.bind(SocketAddr::from((ip, 0))).unwrap();
            s.connect(addr)
        };
        let _a1 = from([127, 0, 0, 2]).await.unwrap();
        let c1 = l.accept().await;
        assert!(c1.nodelay(), "TCP_NODELAY on the accepted connection");
        let _a2 = from([127, 0, 0, 2]).await.unwrap();
        let _c2 = l.accept().await;
        // A third from the same address is closed; one from another address is taken.
        let mut a3 = from([127, 0, 0, 2]).await.unwrap();
        let _b1 = from([127, 0, 0, 3]).await.unwrap();
        let c3 = l.accept().await;
        assert_eq!(c3.peer_addr().ip(), std::net::IpAddr::from([127, 0, 0, 3]));
        assert!(closed(&mut a3).await, "past the per-address cap: closed");
        assert_eq!(metrics.connections_refused_per_address(), 1);
        // At the cap (3): closed.
        let mut b2 = from([127, 0, 0, 3]).await.unwrap();
        let accepting = tokio::time::timeout(Duration::from_millis(200), l.accept()).await;
        assert!(accepting.is_err(), "nothing past the cap is handed out");
        assert!(closed(&mut b2).await, "past the cap: closed");
        assert_eq!((metrics.connections_refused(), metrics.connections_open()), (1, 3));
        drop(c1);
        let _a4 = from([127, 0, 0, 2]).await.unwrap();
        let c4 = tokio::time::timeout(Duration::from_secs(5), l.accept()).await.expect("a freed place is taken");
        assert_eq!(c4.peer_addr().ip(), std::net::IpAddr::from([127, 0, 0, 2]));
    }

    #[tokio::test]
    async fn siblings_share_the_caps() {
        let (tcp_a, tcp_b) =
            (TcpListener::bind("127.0.0.1:0").await.unwrap(), TcpListener::bind("127.0.0.1:0").await.unwrap());
        let (addr_a, addr_b) = (tcp_a.local_addr().unwrap(), tcp_b.local_addr().unwrap());
        let cfg = Config { max_connections: 2, max_connections_per_address: 2, ..Config::default() };
        let metrics = Metrics::default();
        let mut a = Listener::new(tcp_a, &cfg, metrics.clone());
        let mut b = a.sibling(tcp_b);
        let from = |ip: [u8; 4], to: SocketAddr| {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.bind(SocketAddr::from((ip, 0))).unwrap();
            s.connect(to)
        };
        let _ca = from([127, 0, 0, 2], addr_a).await.unwrap();
        let _a1 = a.accept().await;
        let _cb = from([127, 0, 0, 3], addr_b).await.unwrap();
        let _b1 = b.accept().await;
        assert_eq!(metrics.connections_open(), 2);
        // The cap is the pair's: a third connection, from a third address, on either socket, is
        // closed.
        let mut late = from([127, 0, 0, 4], addr_b).await.unwrap();
        let accepting = tokio::time::timeout(Duration::from_millis(200), b.accept()).await;
        assert!(accepting.is_err(), "nothing past the shared cap is handed out");
        assert!(closed(&mut late).await);
        assert_eq!(metrics.connections_refused(), 1);
    }
}
