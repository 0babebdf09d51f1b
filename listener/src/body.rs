//! Reading a request body into memory under the per-request size limit, the body deadline and
//! the process-wide byte budget ([`BodyReader::collect`]).
//!
//! Budget accounting follows the memory actually held:
//! - a body that arrives in one piece (the usual case: it came with the head) is kept as that
//!   piece, no copy, and counted at its length;
//! - a body in several pieces is copied into one buffer: up to [`LARGE_BODY_BYTES`] a heap buffer
//!   that grows by doubling (from 16 KiB, up to the declared length or the limit), charged for
//!   its capacity before it grows; beyond, an anonymous memory mapping of the declared length
//!   (or the limit), charged for the pages written, whose memory goes back to the system the
//!   moment it is dropped (a freed heap block stays with the allocator). Either way a client has
//!   to send bytes to hold budget: a head declaring 1 MiB followed by one byte holds one byte
//!   (the bytes are charged when the second piece arrives: a page, or 16 KiB of heap);
//! - the returned `Bytes` carries the charge and gives it back when its last clone is dropped,
//!   which is when the memory is freed (typically when the request has been answered);
//! - a declared length that cannot fit in what is left of the budget is refused before reading;
//! - growth past [`LARGE_BODY_BYTES`] may only use three quarters of the budget, so a flood of
//!   large bodies leaves room for ordinary small requests.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use hyper::body::Body;
use memmap2::{MmapMut, MmapOptions};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Sleep;

use crate::error::Error;
use crate::metrics::Metrics;
use crate::phase::TimeoutKind;

/// Bodies beyond this size may use only three quarters of the budget.
pub const LARGE_BODY_BYTES: usize = 64 << 10;
/// First capacity of the buffer a body in several pieces is copied into.
const FIRST_BUFFER: usize = 16 << 10;

/// The process-wide budget of buffered body bytes; its count is the
/// `*_request_body_buffered_bytes` gauge.
#[derive(Debug)]
struct Budget {
    max: i64,
    used: Gauge,
}

impl Budget {
    fn limit_for(&self, large: bool) -> i64 {
        if large { self.max / 4 * 3 } else { self.max }
    }

    fn would_fit(&self, n: usize, large: bool) -> bool {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.used.get().saturating_add(n) <= self.limit_for(large)
    }

    fn try_take(&self, n: usize, large: bool) -> bool {
        let Ok(n) = i64::try_from(n) else { return false };
        let limit = self.limit_for(large);
        self.used
            .inner()
            .fetch_update(std::sync::atomic::Ordering::AcqRel, std::sync::atomic::Ordering::Acquire, |u| {
                (u.saturating_add(n) <= limit).then_some(u + n)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        self.used.dec_by(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// Bytes taken from the budget, given back on drop.
#[derive(Debug)]
pub(crate) struct Charge {
    budget: Arc<Budget>,
    bytes: usize,
}

impl Charge {
    pub(crate) fn grow(&mut self, n: usize, large: bool) -> Result<(), Error> {
        if !self.budget.try_take(n, large) {
            return Err(Error::Overloaded);
        }
        self.bytes += n;
        Ok(())
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.give_back(self.bytes);
        }
    }
}

/// `bytes` as `Bytes` that keep `charge` until their last clone is dropped.
pub(crate) fn held<T: AsRef<[u8]> + Send + 'static>(bytes: T, charge: Charge) -> Bytes {
    Bytes::from_owner(Held { bytes, _charge: charge })
}

/// A body's bytes together with their charge: the owner behind the returned `Bytes`.
struct Held<T> {
    bytes: T,
    _charge: Charge,
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Held<T> {
    fn as_ref(&self) -> &[u8] {
        self.bytes.as_ref()
    }
}

/// Reads request bodies under the listener's limits. Cheap to clone (one `Arc`); get it from
/// [`Server::bodies`](crate::Server::bodies).
#[derive(Debug, Clone)]
pub struct BodyReader(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    budget: Arc<Budget>,
    timeout: Duration,
    body_timeouts: Counter,
    errors: ErrorCounters,
}

#[derive(Debug)]
struct ErrorCounters {
    too_large: Counter,
    timeout: Counter,
    broken: Counter,
    overloaded: Counter,
}

impl BodyReader {
    /// The reader of a listener configured by `config` (its budget and body deadline), its
    /// gauge and counters in `metrics`: for a process whose ports share one budget, made
    /// before them and handed to each ([`Server::with_bodies`](crate::Server::with_bodies), the
    /// HTTP/2 listener's [`Limits`](crate::h2::Limits)).
    pub fn for_listener(config: &crate::Config, metrics: &Metrics) -> Self {
        Self::new(config.max_buffered_body_bytes, config.body_read_timeout, metrics)
    }

    pub(crate) fn new(max_bytes: usize, timeout: Duration, metrics: &Metrics) -> Self {
        let budget =
            Arc::new(Budget { max: i64::try_from(max_bytes).unwrap_or(i64::MAX), used: metrics.body_buffered.clone() });
        let errors = ErrorCounters {
            too_large: metrics.body_error(wire::ErrorType::TooLarge),
            timeout: metrics.body_error(wire::ErrorType::Timeout),
            broken: metrics.body_error(wire::ErrorType::InvalidRequest),
            overloaded: metrics.body_error(wire::ErrorType::Overloaded),
        };
        Self(Arc::new(Inner { budget, timeout, body_timeouts: metrics.timeout(TimeoutKind::Body), errors }))
    }

    /// Bytes of bodies held now, over all requests.
    pub fn buffered_bytes(&self) -> usize {
        usize::try_from(self.0.budget.used.get()).unwrap_or(0)
    }

    /// The whole body, at most `limit` bytes, within `--body-read-timeout` of the first moment it
    /// has to be waited for, and within `--max-buffered-body-bytes`. Keep the returned `Bytes`
    /// (or clones of it) only as long as the request: the budget is given back when the last
    /// clone is dropped. An empty body costs nothing (no allocation, no clock, no budget).
    pub fn collect<B>(&self, body: B, limit: usize) -> impl Future<Output = Result<Bytes, Error>>
    where
        B: Body<Data = Bytes>,
        B::Error: std::fmt::Display,
    {
        // One state machine, not an `async fn` awaiting another: this future lives inside every
        // request's future, which hyper moves once per request.
        self.collect_inner(body, limit).inspect(|result| {
            if let Err(e) = result {
                self.count(e);
            }
        })
    }

    /// An empty charge against the budget, to grow as a body's bytes arrive.
    pub(crate) fn charge(&self) -> Charge {
        Charge { budget: Arc::clone(&self.0.budget), bytes: 0 }
    }

    /// `--body-read-timeout`.
    pub(crate) fn timeout(&self) -> Duration {
        self.0.timeout
    }

    pub(crate) fn count(&self, e: &Error) {
        let errors = &self.0.errors;
        let counter = match e {
            Error::TooLarge { .. } => &errors.too_large,
            Error::Timeout(_) => {
                self.0.body_timeouts.inc();
                &errors.timeout
            }
            Error::Broken(_) => &errors.broken,
            Error::Overloaded => &errors.overloaded,
        };
        counter.inc();
    }

    async fn collect_inner<B>(&self, body: B, limit: usize) -> Result<Bytes, Error>
    where
        B: Body<Data = Bytes>,
        B::Error: std::fmt::Display,
    {
        let hint = body.size_hint();
        if hint.lower() > limit as u64 {
            return Err(Error::TooLarge { limit });
        }
        if body.is_end_stream() {
            return Ok(Bytes::new());
        }
        let declared = hint.exact().and_then(|n| usize::try_from(n).ok());
        let inner = &*self.0;
        if let Some(n) = declared
            && !inner.budget.would_fit(n, n > LARGE_BODY_BYTES)
        {
            return Err(Error::Overloaded);
        }

        let mut body = pin!(body);
        // Created (and allocated) the first time the body has to be waited for: a body that is
        // already here costs no timer, and the future stays small.
        let mut deadline: Option<Pin<Box<Sleep>>> = None;
        let timeout = inner.timeout;
        let mut acc = Accumulator::new(Arc::clone(&inner.budget), limit, declared);
        loop {
            let frame = poll_fn(|cx| match body.as_mut().poll_frame(cx) {
                Poll::Ready(f) => Poll::Ready(Ok(f)),
                Poll::Pending => {
                    let d = deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                    match d.as_mut().poll(cx) {
                        Poll::Ready(()) => Poll::Ready(Err(Error::Timeout(timeout))),
                        Poll::Pending => Poll::Pending,
                    }
                }
            })
            .await?;
            match frame {
                None => return Ok(acc.finish()),
                Some(Err(e)) => return Err(Error::Broken(e.to_string())),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        acc.push(data)?;
                    }
                }
            }
        }
    }
}

/// Where a body in several pieces is copied.
enum Buffer {
    /// Not needed yet: at most one piece so far.
    None,
    /// Up to [`LARGE_BODY_BYTES`]: a heap buffer growing by doubling, charged for its capacity.
    Heap(Vec<u8>),
    /// Larger: an anonymous mapping of the whole expected length, charged for the pages written.
    /// Untouched pages cost no memory, and unmapping gives the memory back to the system at
    /// once, whatever the allocator keeps (mimalloc and glibc both keep freed large blocks).
    Mapped { map: MmapMut, len: usize },
}

/// The written part of a mapping.
struct MappedBody {
    map: MmapMut,
    len: usize,
}

impl AsRef<[u8]> for MappedBody {
    fn as_ref(&self) -> &[u8] {
        &self.map[..self.len]
    }
}

/// The granularity of a mapping's memory.
const PAGE: usize = 4096;

fn pages(n: usize) -> usize {
    n.div_ceil(PAGE) * PAGE
}

/// The pieces of one body, as one buffer.
struct Accumulator {
    limit: usize,
    declared: Option<usize>,
    /// The first piece, while it is the only one.
    first: Option<Bytes>,
    buf: Buffer,
    /// What `buf` is charged for.
    charged: usize,
    charge: Charge,
}

impl Accumulator {
    fn new(budget: Arc<Budget>, limit: usize, declared: Option<usize>) -> Self {
        Self { limit, declared, first: None, buf: Buffer::None, charged: 0, charge: Charge { budget, bytes: 0 } }
    }

    fn len(&self) -> usize {
        match (&self.first, &self.buf) {
            (Some(b), _) => b.len(),
            (None, Buffer::Heap(v)) => v.len(),
            (None, Buffer::Mapped { len, .. }) => *len,
            (None, Buffer::None) => 0,
        }
    }

    /// Charges `buf` for `bytes` in all.
    fn charge_buffer(&mut self, bytes: usize, large: bool) -> Result<(), Error> {
        if bytes > self.charged {
            self.charge.grow(bytes - self.charged, large)?;
            self.charged = bytes;
        }
        Ok(())
    }

    fn push(&mut self, piece: Bytes) -> Result<(), Error> {
        if piece.is_empty() {
            return Ok(());
        }
        let len = self.len() + piece.len();
        if len > self.limit {
            return Err(Error::TooLarge { limit: self.limit });
        }
        let large = len > LARGE_BODY_BYTES;
        if self.first.is_none() && matches!(self.buf, Buffer::None) {
            self.charge.grow(piece.len(), large)?;
            self.first = Some(piece);
            return Ok(());
        }
        if matches!(self.buf, Buffer::None) {
            let expected = self.declared.unwrap_or(self.limit).min(self.limit).max(len);
            self.buf = if expected > LARGE_BODY_BYTES {
                match MmapOptions::new().len(expected).no_reserve_swap().map_anon() {
                    Ok(map) => Buffer::Mapped { map, len: 0 },
                    Err(e) => {
                        tracing::debug!(error = %e, expected, "no anonymous mapping for a body; using the heap");
                        Buffer::Heap(Vec::new())
                    }
                }
            } else {
                Buffer::Heap(Vec::new())
            };
        }
        match &mut self.buf {
            Buffer::Heap(v) if len > v.capacity() => {
                let ceiling = self.declared.unwrap_or(self.limit).min(self.limit).max(len);
                let cap = (v.capacity() * 2).max(FIRST_BUFFER).max(len).min(ceiling);
                self.charge_buffer(cap, large)?;
                if let Buffer::Heap(v) = &mut self.buf {
                    v.reserve_exact(cap - v.len());
                }
            }
            Buffer::Mapped { map, .. } if len > map.len() => {
                // More than declared: hyper does not let that happen; refuse rather than remap.
                return Err(Error::Broken("body longer than its declared length".to_owned()));
            }
            Buffer::Mapped { .. } => self.charge_buffer(pages(len), large)?,
            _ => {}
        }
        let first = self.first.take();
        for p in first.iter().chain(std::iter::once(&piece)) {
            match &mut self.buf {
                Buffer::Heap(v) => v.extend_from_slice(p),
                Buffer::Mapped { map, len } => {
                    map[*len..*len + p.len()].copy_from_slice(p);
                    *len += p.len();
                }
                Buffer::None => {}
            }
        }
        if let Some(first) = first {
            // Now in the buffer (charged there): give its own charge back.
            self.charge.budget.give_back(first.len());
            self.charge.bytes -= first.len();
        }
        Ok(())
    }

    fn finish(self) -> Bytes {
        let Self { first, buf, charge, .. } = self;
        match (first, buf) {
            (Some(bytes), _) => Bytes::from_owner(Held { bytes, _charge: charge }),
            (None, Buffer::Heap(v)) if !v.is_empty() => Bytes::from_owner(Held { bytes: v, _charge: charge }),
            (None, Buffer::Mapped { map, len }) if len > 0 => {
                Bytes::from_owner(Held { bytes: MappedBody { map, len }, _charge: charge })
            }
            _ => Bytes::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full, StreamBody};
    use hyper::body::Frame;

    fn reader(budget: usize) -> BodyReader {
        BodyReader::new(budget, Duration::from_secs(5), &Metrics::default())
    }

    fn pieces(parts: Vec<&'static [u8]>) -> impl Body<Data = Bytes, Error = std::io::Error> {
        StreamBody::new(futures::stream::iter(parts.into_iter().map(|p| Ok(Frame::data(Bytes::from_static(p))))))
    }

    #[tokio::test]
    async fn a_body_in_one_piece_is_returned_without_copy_and_charged_until_dropped() {
        let r = reader(1000);
        let b = r.collect(Full::new(Bytes::from_static(b"hello")), 100).await.unwrap();
        assert_eq!(&b[..], b"hello");
        assert_eq!(r.buffered_bytes(), 5);
        let clone = b.clone();
        drop(b);
        assert_eq!(r.buffered_bytes(), 5);
        drop(clone);
        assert_eq!(r.buffered_bytes(), 0);
    }

    #[tokio::test]
    async fn pieces_are_joined_and_the_buffer_capacity_is_charged() {
        let r = reader(1 << 20);
        let b = r.collect(pieces(vec![b"ab", b"cd", b"e"]), 100).await.unwrap();
        assert_eq!(&b[..], b"abcde");
        // Three pieces, limit 100: the buffer is capped at the limit, and charged for it.
        assert_eq!(r.buffered_bytes(), 100);
        drop(b);
        assert_eq!(r.buffered_bytes(), 0);
    }

    #[tokio::test]
    async fn a_large_body_in_pieces_is_mapped_and_charged_by_the_page() {
        let r = reader(4 << 20);
        let piece: &'static [u8] = &[7u8; 100_000];
        let b = r.collect(pieces(vec![piece, piece, piece]), 1 << 20).await.unwrap();
        assert_eq!(b.len(), 300_000);
        assert!(b.iter().all(|&x| x == 7));
        assert_eq!(r.buffered_bytes(), pages(300_000));
        drop(b);
        assert_eq!(r.buffered_bytes(), 0);
    }

    #[tokio::test]
    async fn too_large_is_refused_from_the_declared_length_or_the_bytes() {
        let r = reader(1 << 20);
        let e = r.collect(Full::new(Bytes::from(vec![0u8; 11])), 10).await.unwrap_err();
        assert_eq!(e, Error::TooLarge { limit: 10 });
        let e = r.collect(pieces(vec![b"123456", b"78901"]), 10).await.unwrap_err();
        assert_eq!(e, Error::TooLarge { limit: 10 });
        assert_eq!(r.buffered_bytes(), 0);
    }

    #[tokio::test]
    async fn an_exhausted_budget_is_overloaded_and_large_bodies_leave_a_quarter() {
        let r = reader(400 << 10);
        // A large body may take three quarters (300 KiB), not more.
        let big = r.collect(Full::new(Bytes::from(vec![1u8; 200 << 10])), 1 << 20).await.unwrap();
        let e = r.collect(Full::new(Bytes::from(vec![1u8; 150 << 10])), 1 << 20).await.unwrap_err();
        assert_eq!(e, Error::Overloaded);
        // Small bodies still fit in the last quarter.
        let small = r.collect(Full::new(Bytes::from(vec![1u8; 60 << 10])), 1 << 20).await.unwrap();
        assert_eq!(r.buffered_bytes(), (200 << 10) + (60 << 10));
        drop((big, small));
        assert_eq!(r.buffered_bytes(), 0);
    }

    #[tokio::test]
    async fn broken_framing_is_broken() {
        let r = reader(1 << 20);
        let body = StreamBody::new(futures::stream::iter(vec![
            Ok(Frame::data(Bytes::from_static(b"ab"))),
            Err(std::io::Error::other("invalid chunk size")),
        ]));
        let e = r.collect(body, 100).await.unwrap_err();
        assert!(matches!(e, Error::Broken(_)), "{e:?}");
        assert_eq!(r.buffered_bytes(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_times_out_at_the_deadline_and_gives_its_bytes_back() {
        let r = BodyReader::new(1 << 20, Duration::from_secs(7), &Metrics::default());
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
        tx.send(Ok(Frame::data(Bytes::from_static(b"a")))).await.unwrap();
        let body = StreamBody::new(tokio_stream_from(rx));
        let start = tokio::time::Instant::now();
        let e = r.collect(body, 100).await.unwrap_err();
        assert_eq!(e, Error::Timeout(Duration::from_secs(7)));
        assert_eq!(start.elapsed(), Duration::from_secs(7));
        assert_eq!(r.buffered_bytes(), 0);
        drop(tx);
    }

    #[tokio::test]
    async fn an_empty_body_is_free() {
        let r = reader(0);
        let b = r.collect(http_body_util::Empty::<Bytes>::new(), 10).await.unwrap();
        assert!(b.is_empty());
        let b = r.collect(Full::new(Bytes::new()).map_err(|e| match e {}), 10).await.unwrap();
        assert!(b.is_empty());
    }

    fn tokio_stream_from<T: Send + 'static>(
        mut rx: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures::Stream<Item = T> + Send + 'static {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
