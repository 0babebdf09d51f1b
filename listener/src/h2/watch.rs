//! One HTTP/2 connection's deadlines: its preface, and answers its peer leaves unread.
//!
//! **Preface.** The client's connection preface must be read within `--header-read-timeout` of
//! the accept (a TLS handshake included): a connection that never sends it is closed, as an
//! HTTP/1 connection that sends no head. [`WatchedIo`] notes when its bytes have been read.
//!
//! **Unread answers.** hyper writes an answer's data as the peer's flow-control windows take it,
//! and polls the answer's body (first, and for more) only when they have room. [`AnswerBody`] notes
//! an answer not polled yet, or that gave data and has not been polled since (it waits for the
//! peer), and each poll after that (it moved). A connection on which answers wait and none moved for a whole
//! `--idle-timeout` is closed, and with it the streams and answers it holds, as the HTTP/1
//! listener closes a connection whose answer is not read ("send" timeout). One stream its peer
//! leaves unread while the others move does not close it: a stream holds at most its window,
//! and the streams of a connection are bounded ([`super::MAX_CONCURRENT_STREAMS`]). (hyper
//! gives no way to reset one stream from outside its answer, which it does not poll then.)

use std::future::{Future, poll_fn};
use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::Limits;
use super::body::{CallBody, MessageLimits};
use crate::metrics::Metrics;
use crate::phase::TimeoutKind;

/// The client's connection preface, `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`.
const PREFACE_LEN: usize = 24;

/// What a connection's parts note for its task.
#[derive(Debug, Default)]
struct Notes {
    preface_read: AtomicBool,
    /// Answers that gave data and wait to be polled again.
    waiting: AtomicUsize,
    /// Polls of such answers (or their end) so far.
    moved: AtomicU64,
}

impl Notes {
    fn moved(&self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        self.moved.fetch_add(1, Ordering::Relaxed);
    }
}

/// One connection's deadlines (make one per connection, [`Limits::watch`]).
#[derive(Debug)]
pub struct Watch {
    notes: Arc<Notes>,
    preface_by: Instant,
    unread: std::time::Duration,
    messages: Arc<MessageLimits>,
    metrics: Metrics,
}

impl Watch {
    pub(super) fn new(limits: &Limits, accepted: Instant) -> Self {
        Self {
            notes: Arc::default(),
            preface_by: accepted + limits.preface,
            unread: limits.unread,
            messages: Arc::new(MessageLimits { reader: limits.bodies.clone(), max: limits.max_message }),
            metrics: limits.metrics.clone(),
        }
    }

    /// When the preface (and any TLS handshake before it) must be in.
    pub fn preface_deadline(&self) -> Instant {
        self.preface_by
    }

    /// The connection's socket (or TLS stream), noting when the preface has been read.
    pub fn io<T>(&self, io: T) -> WatchedIo<T> {
        WatchedIo { io, read: 0, notes: Arc::clone(&self.notes) }
    }

    /// A call's request, its body under the limits.
    pub fn request(&self, req: Request<hyper::body::Incoming>) -> Request<CallBody> {
        req.map(|b| CallBody::new(b, Arc::clone(&self.messages)))
    }

    /// A call's answer, watched for a peer that leaves it unread: it waits until hyper first
    /// polls it (at once, unless the peer's windows are full).
    pub fn answer<B>(&self, resp: Response<B>) -> Response<AnswerBody<B>> {
        self.notes.waiting.fetch_add(1, Ordering::Relaxed);
        resp.map(|inner| AnswerBody { inner, notes: Arc::clone(&self.notes), waiting: true })
    }

    /// Drives `conn` (hyper's connection, served on [`Watch::io`]) until it ends; once `stop`
    /// resolves, `graceful` is called on it (no new calls, those in flight finish). Returns
    /// `None` when a deadline closed it first (counted as a `header` or `send` timeout).
    pub async fn drive<C, S>(&self, mut conn: Pin<&mut C>, stop: S, graceful: impl Fn(Pin<&mut C>)) -> Option<C::Output>
    where
        C: Future,
        S: Future<Output = ()>,
    {
        let mut stop = pin!(stop);
        let mut stopping = false;
        let mut preface = pin!(tokio::time::sleep_until(self.preface_by));
        let mut check = tokio::time::interval_at(Instant::now() + self.unread, self.unread);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_moved = 0;
        let notes = &*self.notes;
        let ended = poll_fn(|cx| {
            if !stopping && stop.as_mut().poll(cx).is_ready() {
                stopping = true;
                graceful(conn.as_mut());
            }
            if let Poll::Ready(out) = conn.as_mut().poll(cx) {
                return Poll::Ready(Ok(out));
            }
            if !notes.preface_read.load(Ordering::Acquire) && preface.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(TimeoutKind::Header));
            }
            while check.poll_tick(cx).is_ready() {
                let moved = notes.moved.load(Ordering::Relaxed);
                if notes.waiting.load(Ordering::Relaxed) > 0 && moved == last_moved {
                    return Poll::Ready(Err(TimeoutKind::Send));
                }
                last_moved = moved;
            }
            Poll::Pending
        })
        .await;
        match ended {
            Ok(out) => Some(out),
            Err(kind) => {
                tracing::debug!(timeout = kind.as_str(), "grpc connection timed out");
                self.metrics.timeout(kind).inc();
                None
            }
        }
    }
}

pin_project! {
    /// A connection's socket (or TLS stream) that notes when the client's preface has been read.
    #[derive(Debug)]
    pub struct WatchedIo<T> {
        #[pin]
        io: T,
        read: usize,
        notes: Arc<Notes>,
    }
}

impl<T: AsyncRead> AsyncRead for WatchedIo<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let polled = this.io.poll_read(cx, buf);
        if *this.read < PREFACE_LEN {
            *this.read += buf.filled().len() - before;
            if *this.read >= PREFACE_LEN {
                // Checked by h2, which closes the connection on a wrong one.
                this.notes.preface_read.store(true, Ordering::Release);
            }
        }
        polled
    }
}

impl<T: AsyncWrite> AsyncWrite for WatchedIo<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

pin_project! {
    /// An answer's body, noting whether its peer takes its data ([`Watch::answer`]).
    pub struct AnswerBody<B> {
        #[pin]
        inner: B,
        notes: Arc<Notes>,
        waiting: bool,
    }

    impl<B> PinnedDrop for AnswerBody<B> {
        fn drop(this: Pin<&mut Self>) {
            if this.waiting {
                this.notes.moved();
            }
        }
    }
}

impl<B: Body<Data = Bytes>> Body for AnswerBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        if *this.waiting {
            *this.waiting = false;
            this.notes.moved();
        }
        let polled = this.inner.as_mut().poll_frame(cx);
        // hyper polls again once the peer's windows have room: until then the answer waits. Data
        // that ends the body is not polled after (hyper drops the body with it).
        if let Poll::Ready(Some(Ok(f))) = &polled
            && f.is_data()
            && !this.inner.is_end_stream()
        {
            *this.waiting = true;
            this.notes.waiting.fetch_add(1, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
