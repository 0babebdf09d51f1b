//! The accept loop: the connection cap, what happens at it, `accept` errors, and the drain.
//!
//! Per address (`--max-connections-per-address`; an IPv6 /64 counts as one address), under
//! pressure only: once no more places are free than that share, a new connection from an address
//! that holds the share already is answered 503 `overloaded` with `Retry-After` and closed,
//! before it takes a place under the global cap. While more are free, one address may hold more
//! (a load generator, the clients behind a source NAT).
//!
//! At the cap (`--max-connections`) a new connection is still accepted, never left in the
//! kernel's backlog (where clients hang until their connect timeout and a load balancer cannot
//! tell why). First connections without a request in progress are closed, those of the
//! addresses holding the most connections first and only of addresses holding more than the new
//! connection's (each closes at once unless a request's bytes are already there, which is then
//! answered with `Connection: close`; a head trickling in is closed when what came is read:
//! nginx too closes idle connections when it runs out), and the new one waits up to
//! [`EVICT_WAIT`] for their place (the places it freed are kept from later newcomers until its
//! wait is queued). If none could be closed, it is answered 503 `overloaded` with `Retry-After`
//! and `Connection: close` (read or not, the request is not served), as every other overload in
//! this project is. At most [`refusal_slots`] such answers are in progress at once; beyond that
//! a connection is closed at once. A newcomer that closed connections (or found those it could
//! take closing already, asked by an earlier newcomer) waits the same way, and if it gets no
//! place in time is always answered 503, never just closed (a close with its request unread
//! would be a reset).
//!
//! `accept` failures: out of file descriptors (`EMFILE`, `ENFILE`) or memory, the loop evicts
//! idle connections and sleeps with a doubling backoff (10 ms to 1 s) instead of spinning;
//! errors about the one connection (reset before it was accepted) are skipped.
//!
//! Drain (when `shutdown` resolves): connections that completed their handshake are still
//! accepted; then the listening socket is closed. Every open connection finishes the request it
//! has received with `Connection: close`; a connection without a request closes at once unless
//! its next request's bytes are already waiting (then that request is answered, with
//! `Connection: close`). After [`Config::drain_timeout`] the rest are closed.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper::service::Service;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::args::{Config, MAX_HEAD_BYTES};
use crate::body::BodyReader;
use crate::conn::{self, Shared, TimeoutCounters};
use crate::io::LINGER_BYTES;
use crate::metrics::Metrics;
use crate::nofile;
use crate::phase::{Clock, Deadlines};
use crate::registry::Registry;
use crate::{BoxError, answer};

/// How many connections are closed at once at the cap (nginx drains 32).
const EVICT_BATCH: usize = 16;
/// How long a connection accepted at the cap waits for an evicted connection's place.
const EVICT_WAIT: Duration = Duration::from_millis(100);
/// How long a refused connection may take to read its 503.
const REFUSE_TIME: Duration = Duration::from_secs(1);

/// Most refusals in progress at once: an eighth of the cap, between 16 and 1024.
fn refusal_slots(cap: usize) -> usize {
    (cap / 8).clamp(16, 1024)
}

/// The client listener: a bound socket and its limits. Build it with [`Server::new`], hand
/// [`Server::bodies`] to the handlers, then [`Server::serve`].
///
/// Several servers may share one set of limits ([`Server::sibling`]): one a core, each with its
/// own socket (`bind_shared`) and runtime, and the cap, the per-address cap and its registry,
/// the refusals, the metrics and the body budget the process's, as with one server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    config: Config,
    shared: Arc<Shared>,
    permits: Arc<Semaphore>,
    refusals: Arc<Semaphore>,
    bodies: BodyReader,
    /// Newcomers that made room at the cap and whose wait for it is not queued yet.
    room_waiters: Arc<AtomicUsize>,
    /// Runs the sweeper of the clock and the registry: the first server of a group, not its
    /// siblings (one sweep of the shared registry a tick, not one a core).
    sweeps: bool,
}

impl Server {
    /// Raises the open-file limit and prepares to serve `listener` under `config`; `metrics`
    /// are the caller's (see [`Metrics::register`]).
    pub fn new(listener: TcpListener, mut config: Config, metrics: Metrics) -> Self {
        let nofile = nofile::raise_nofile_limit();
        let cap = nofile::effective_cap(config.max_connections, nofile);
        if cap < config.max_connections {
            tracing::warn!(
                wanted = config.max_connections,
                cap,
                nofile,
                "--max-connections lowered to half the open file limit"
            );
        }
        config.max_connections = cap;
        metrics.limit.set(i64::try_from(cap).unwrap_or(i64::MAX));
        config.max_connections_per_address = config.max_connections_per_address.clamp(1, cap);
        metrics.limit_per_address.set(i64::try_from(config.max_connections_per_address).unwrap_or(i64::MAX));
        metrics.body_limit.set(i64::try_from(config.max_buffered_body_bytes).unwrap_or(i64::MAX));

        let mut http = http1::Builder::new();
        // Our own header timer (see `phase`) replaces hyper's, which starts when a connection
        // goes idle and allocates a timer per request.
        http.header_read_timeout(None);
        // Heads over MAX_HEAD_BYTES get hyper's 431, made JSON by the socket wrapper; the read
        // buffer never grows past that either (hyper's default is ~400 KiB per connection).
        http.max_header_size(MAX_HEAD_BYTES);
        http.max_buf_size(MAX_HEAD_BYTES);

        let bodies = BodyReader::new(config.max_buffered_body_bytes, config.body_read_timeout, &metrics);
        let deadlines = Deadlines { header: config.header_read_timeout, idle: config.idle_timeout };
        let shared = Arc::new(Shared {
            http,
            deadlines,
            registry: Arc::new(Registry::default()),
            timeouts: TimeoutCounters::new(&metrics),
            metrics,
            clock: Arc::new(Clock::new(deadlines)),
        });
        Self {
            listener,
            permits: Arc::new(Semaphore::new(cap)),
            refusals: Arc::new(Semaphore::new(refusal_slots(cap))),
            config,
            shared,
            bodies,
            room_waiters: Arc::new(AtomicUsize::new(0)),
            sweeps: true,
        }
    }

    /// A server for `listener` (another socket of the same address, `bind_shared`, served by
    /// another runtime) under the same limits as this one: the connection cap, the per-address
    /// cap and its registry (so making room at the cap takes from every sibling's connections),
    /// the refusal slots, the metrics and the body budget are shared, not multiplied. Its own:
    /// the socket, hyper's settings and the reference its connections hold. The coarse clock and
    /// its sweeper are this server's (the first's): the sweeper walks the shared registry, so one
    /// is enough for the group; serve this one as long as any sibling serves.
    pub fn sibling(&self, listener: TcpListener) -> Self {
        let s = &self.shared;
        let shared = Arc::new(Shared {
            http: s.http.clone(),
            deadlines: s.deadlines,
            registry: Arc::clone(&s.registry),
            timeouts: TimeoutCounters::new(&s.metrics),
            metrics: s.metrics.clone(),
            clock: Arc::clone(&s.clock),
        });
        Self {
            listener,
            config: self.config.clone(),
            shared,
            permits: Arc::clone(&self.permits),
            refusals: Arc::clone(&self.refusals),
            bodies: self.bodies.clone(),
            room_waiters: Arc::clone(&self.room_waiters),
            sweeps: false,
        }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The configuration in force (`max_connections` possibly lowered to fit the open-file
    /// limit).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Reads bodies with `bodies` (its budget and deadline) instead of a reader of its own: a
    /// process whose ports share one budget of bodies held ([`BodyReader::for_listener`]).
    #[must_use]
    pub fn with_bodies(mut self, bodies: BodyReader) -> Self {
        self.bodies = bodies;
        self
    }

    /// What handlers read request bodies with.
    pub fn bodies(&self) -> BodyReader {
        self.bodies.clone()
    }

    /// Serves `service` (one clone per connection) until `shutdown` resolves, then drains.
    pub async fn serve<S, B>(self, service: S, shutdown: impl Future<Output = ()>)
    where
        S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: Body<Data = Bytes> + From<Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let Self { listener, config, shared, permits, refusals, room_waiters, sweeps, .. } = self;
        let sweeper = sweeps.then(|| AbortOnDrop(tokio::spawn(sweep(Arc::clone(&shared)))));
        let admit = Admit {
            shared,
            permits,
            refusals,
            service,
            retry_after_s: config.retry_after_s,
            cap: config.max_connections,
            // At the whole cap it adds nothing: the cap's own rules (make room, else 503) apply.
            per_address: if config.max_connections_per_address < config.max_connections {
                config.max_connections_per_address
            } else {
                usize::MAX
            },
            room_waiters,
        };
        let mut shutdown = pin!(shutdown);
        let mut backoff = Backoff::default();
        loop {
            let accepted = tokio::select! {
                biased;
                () = &mut shutdown => break,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, peer)) => {
                    backoff.reset();
                    admit.admit(stream, peer);
                }
                Err(e) if is_about_one_connection(&e) => {
                    admit.shared.metrics.accept_errors.inc();
                }
                Err(e) => {
                    admit.shared.metrics.accept_errors.inc();
                    let evicted = admit.shared.registry.make_room(EVICT_BATCH, 0).closed;
                    let wait = backoff.next();
                    if wait == Backoff::FIRST {
                        tracing::warn!(error = %e, evicted, "accept failed; backing off");
                    } else {
                        tracing::debug!(error = %e, evicted, ?wait, "accept failed; backing off");
                    }
                    tokio::select! {
                        biased;
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
        admit.drain(listener, config.drain_timeout).await;
        drop(sweeper);
    }
}

/// Advances the coarse clock and signals the connections past a deadline, once per clock tick.
async fn sweep(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(shared.clock.resolution());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = shared.clock.advance();
        shared.registry.expire(shared.deadlines, now);
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Everything a new connection is admitted with.
struct Admit<S> {
    shared: Arc<Shared>,
    permits: Arc<Semaphore>,
    refusals: Arc<Semaphore>,
    service: S,
    retry_after_s: u64,
    /// The permits `permits` was made with.
    cap: usize,
    /// `--max-connections-per-address`; `usize::MAX` when it is the whole cap. Applied only
    /// while no more places than this are free.
    per_address: usize,
    /// Newcomers that made room at the cap and whose wait for it is not queued yet.
    room_waiters: Arc<AtomicUsize>,
}

impl<S, B> Admit<S>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + From<Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    fn admit(&self, stream: TcpStream, peer: SocketAddr) {
        // Small JSON answers on keep-alive connections: without it, Nagle and delayed ACKs add
        // tens of milliseconds.
        let _ = stream.set_nodelay(true);
        // The per-address cap holds under pressure only: while more places are free than one
        // address's share, an address may hold more (one load generator, or the clients behind a
        // source NAT, is served while the listener has room); once no more are free, an address
        // at its share gets no more, and the places left are the other addresses'.
        let per_address =
            if self.permits.available_permits() > self.per_address { usize::MAX } else { self.per_address };
        let Some(address) = self.shared.registry.reserve(peer.ip(), per_address) else {
            self.shared.metrics.refused_per_address.inc();
            if let Ok(slot) = Arc::clone(&self.refusals).try_acquire_owned() {
                let retry_after_s = self.retry_after_s;
                tokio::spawn(async move {
                    refuse(stream, retry_after_s).await;
                    drop(slot);
                });
            }
            return;
        };
        // Places freed for newcomers that made room are theirs: until such a newcomer's wait is
        // queued on the semaphore (its task has not run yet), the loop leaves that many alone.
        let waiting = self.room_waiters.load(Ordering::Acquire);
        if self.permits.available_permits() > waiting
            && let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned()
        {
            tokio::spawn(conn::serve(stream, Arc::clone(&self.shared), self.service.clone(), permit, address));
            return;
        }
        let room = self.shared.registry.make_room(EVICT_BATCH, address.held());
        let refusal = Arc::clone(&self.refusals).try_acquire_owned().ok();
        if !room.coming() && refusal.is_none() {
            self.shared.metrics.refused.inc();
            return;
        }
        let (shared, permits, service, retry_after_s) =
            (Arc::clone(&self.shared), Arc::clone(&self.permits), self.service.clone(), self.retry_after_s);
        // A newcomer that made room waits for it, and if it does not come in time is answered
        // 503, with or without a refusal slot: each such wait closed a connection, so they are
        // bounded by the connections there are to close, and its request (perhaps sent already)
        // gets an answer rather than the reset of a close with unread bytes.
        let waiter = room.coming().then(|| RoomWaiter::new(&self.room_waiters));
        tokio::spawn(async move {
            if let Some(waiter) = waiter {
                let acquire = permits.acquire_owned();
                let mut acquire = pin!(acquire);
                // Queued on the semaphore at this first poll: from here released places go to it.
                let first = futures::poll!(acquire.as_mut());
                drop(waiter);
                let permit = match first {
                    std::task::Poll::Ready(p) => p.ok(),
                    std::task::Poll::Pending => {
                        tokio::time::timeout(EVICT_WAIT, acquire).await.ok().and_then(Result::ok)
                    }
                };
                if let Some(permit) = permit {
                    drop(refusal);
                    return conn::serve(stream, shared, service, permit, address).await;
                }
                drop(address);
                shared.metrics.refused.inc();
                refuse(stream, retry_after_s).await;
                drop(refusal);
                return;
            }
            drop(address);
            shared.metrics.refused.inc();
            if let Some(slot) = refusal {
                refuse(stream, retry_after_s).await;
                drop(slot);
            }
        });
    }

    async fn drain(self, listener: TcpListener, timeout: Duration) {
        self.shared.registry.drain_all();
        // Handshakes the kernel completed before we stopped: their requests may be in already.
        // Accepted with plain non-blocking `accept` calls, whatever the reactor has reported.
        match listener.into_std() {
            Ok(std) => {
                while let Ok((stream, peer)) = std.accept() {
                    match stream.set_nonblocking(true).and_then(|()| TcpStream::from_std(stream)) {
                        Ok(stream) => self.admit(stream, peer),
                        Err(e) => tracing::debug!(error = %e, "dropping a connection accepted while draining"),
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not accept the connections waiting in the backlog"),
        }
        let open = self.shared.metrics.open.get();
        tracing::info!(open, "draining client connections");
        let cap = u32::try_from(self.cap).unwrap_or(u32::MAX);
        let all_closed = || Arc::clone(&self.permits).acquire_many_owned(cap);
        if tokio::time::timeout(timeout, all_closed()).await.is_err() {
            tracing::warn!(open = self.shared.metrics.open.get(), "drain timeout; closing the remaining connections");
            self.shared.registry.abort_all();
            let _ = tokio::time::timeout(Duration::from_secs(1), all_closed()).await;
        }
        let refusing = u32::try_from(refusal_slots(self.cap)).unwrap_or(u32::MAX);
        let _ = tokio::time::timeout(REFUSE_TIME * 2, Arc::clone(&self.refusals).acquire_many_owned(refusing)).await;
    }
}

/// Answers 503 and closes, reading what the client sends meanwhile so that it gets the answer
/// rather than a reset.
async fn refuse(mut stream: TcpStream, retry_after_s: u64) {
    let answer = answer::at_connection_cap(retry_after_s);
    let _ = tokio::time::timeout(REFUSE_TIME, async {
        stream.write_all(&answer).await?;
        stream.shutdown().await?;
        let mut scratch = [0u8; 4096];
        let mut discarded = 0;
        while discarded <= LINGER_BYTES {
            match stream.read(&mut scratch).await? {
                0 => break,
                n => discarded += n,
            }
        }
        Ok::<_, io::Error>(())
    })
    .await;
}

/// Counts a newcomer that made room at the cap until its wait for the place is queued.
struct RoomWaiter(Arc<AtomicUsize>);

impl RoomWaiter {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(count))
    }
}

impl Drop for RoomWaiter {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `accept` errors that concern only the connection being accepted.
pub(crate) fn is_about_one_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionRefused
    )
}

#[derive(Debug, Default)]
pub(crate) struct Backoff(Option<Duration>);

impl Backoff {
    pub(crate) const FIRST: Duration = Duration::from_millis(10);
    const MOST: Duration = Duration::from_secs(1);

    pub(crate) fn next(&mut self) -> Duration {
        let d = self.0.map_or(Self::FIRST, |d| (d * 2).min(Self::MOST));
        self.0 = Some(d);
        d
    }

    pub(crate) fn reset(&mut self) {
        self.0 = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_second_and_resets() {
        let mut b = Backoff::default();
        let seq: Vec<_> = (0..9).map(|_| b.next().as_millis()).collect();
        assert_eq!(seq, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.reset();
        assert_eq!(b.next(), Backoff::FIRST);
    }

    #[tokio::test]
    async fn siblings_share_one_connection_cap() {
        use http_body_util::Full;
        let (a, b) = (TcpListener::bind("127.0.0.1:0").await.unwrap(), TcpListener::bind("127.0.0.1:0").await.unwrap());
        let (at_a, at_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let metrics = Metrics::default();
        let cfg = Config { max_connections: 2, max_connections_per_address: 2, ..Config::default() };
        let first = Server::new(a, cfg, metrics.clone());
        let second = first.sibling(b);
        // Requests held until the test ends: their connections cannot be closed to make room.
        let (held, hold) = (Arc::new(AtomicUsize::new(0)), Arc::new(tokio::sync::Notify::new()));
        let svc = {
            let (held, hold) = (Arc::clone(&held), Arc::clone(&hold));
            hyper::service::service_fn(move |_req: Request<Incoming>| {
                let (held, hold) = (Arc::clone(&held), Arc::clone(&hold));
                async move {
                    held.fetch_add(1, Ordering::SeqCst);
                    hold.notified().await;
                    Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::new())))
                }
            })
        };
        let serving = [
            AbortOnDrop(tokio::spawn(first.serve(svc.clone(), std::future::pending()))),
            AbortOnDrop(tokio::spawn(second.serve(svc, std::future::pending()))),
        ];
        let request = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n";
        let mut busy = Vec::new();
        for at in [at_a, at_b] {
            let mut s = TcpStream::connect(at).await.unwrap();
            s.write_all(request).await.unwrap();
            busy.push(s);
        }
        while held.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(metrics.connections_open(), 2);
        // A third, on either socket: past the pair's cap, answered 503.
        let mut late = TcpStream::connect(at_b).await.unwrap();
        late.write_all(request).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), late.read_to_end(&mut answer)).await;
        assert!(answer.starts_with(b"HTTP/1.1 503"), "{}", String::from_utf8_lossy(&answer));
        assert_eq!((metrics.connections_refused(), metrics.connections_open()), (1, 2));
        drop(serving);
    }

    #[test]
    fn refusal_slots_stay_in_bounds() {
        assert_eq!(refusal_slots(10), 16);
        assert_eq!(refusal_slots(10_000), 1024);
        assert_eq!(refusal_slots(800), 100);
    }
}
