//! The socket as hyper sees it: a `TcpStream` wrapper that
//! - notes the first byte of each new request head (the header deadline starts there);
//! - on a draining connection that has no request, closes instead of waiting, unless bytes are
//!   already waiting in the kernel (then they are a request, and it is answered);
//! - answers 408 JSON when the header deadline passed;
//! - replaces hyper's own answers to heads it cannot parse (400, 414, 431 with empty bodies) by
//!   the same status with a JSON body;
//! - closes like nginx's lingering close: after the answer, shut down the sending side, then
//!   read and discard what the client still sends (at most [`LINGER_BYTES`] or [`LINGER_TIME`]),
//!   so that a client still sending a refused body reads the answer instead of a reset.
//!
//! The hot path pays one relaxed load per read, write and flush.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use crate::answer;
use crate::phase::{ConnState, Phase};

/// Longest a closing connection waits for the client to close its side.
pub const LINGER_TIME: Duration = Duration::from_secs(2);
/// Most bytes read and discarded while waiting.
pub const LINGER_BYTES: usize = 1 << 20;

pub(crate) struct Io {
    stream: TcpStream,
    conn: Arc<ConnState>,
    /// Some byte was ever read: a fresh connection that has sent nothing can be closed at once
    /// when draining.
    seen_bytes: bool,
    /// hyper's answer being replaced: our bytes, and how many are written.
    replacement: Option<(Bytes, usize)>,
    timeout_answered: bool,
    linger: Linger,
}

enum Linger {
    NotStarted,
    /// Shut down the sending side, then close without reading: a drained or evicted idle
    /// connection, where nothing of a request was received.
    ShutdownOnly,
    Reading {
        discarded: usize,
        timer: Option<Pin<Box<Sleep>>>,
    },
    Done,
}

impl Io {
    pub(crate) fn new(stream: TcpStream, conn: Arc<ConnState>) -> Self {
        Self { stream, conn, seen_bytes: false, replacement: None, timeout_answered: false, linger: Linger::NotStarted }
    }

    /// Whether bytes are waiting in the kernel, whatever the reactor has reported so far.
    fn bytes_waiting(&self) -> bool {
        let mut one = [MaybeUninit::<u8>::uninit(); 1];
        matches!(socket2::SockRef::from(&self.stream).peek(&mut one), Ok(n) if n > 0)
    }

    /// Writes our replacement of hyper's answer; done when all of it is written.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.replacement {
            if *written == bytes.len() {
                break;
            }
            let n = ready!(Pin::new(&mut self.stream).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }

    /// Starts replacing if `first` (the start of what hyper writes) is hyper's own answer: an
    /// answer while no request is with the service can only be that.
    fn maybe_replace(&mut self, first: &[u8]) {
        if self.replacement.is_none()
            && matches!(self.conn.phase(), Phase::Head | Phase::Idle)
            && let Some(status) = answer::status_line(first)
        {
            tracing::debug!(status = status.as_u16(), "answering a malformed request head");
            self.replacement = Some((answer::replacing_hyper(status), 0));
        }
    }

    fn poll_linger(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match &mut self.linger {
                Linger::Done => return Poll::Ready(()),
                Linger::NotStarted => {
                    let shut = ready!(Pin::new(&mut self.stream).poll_shutdown(cx));
                    self.linger =
                        if shut.is_ok() { Linger::Reading { discarded: 0, timer: None } } else { Linger::Done };
                }
                Linger::ShutdownOnly => {
                    let _ = ready!(Pin::new(&mut self.stream).poll_shutdown(cx));
                    self.linger = Linger::Done;
                }
                Linger::Reading { discarded, timer } => {
                    let mut scratch = [0u8; 4096];
                    let mut buf = ReadBuf::new(&mut scratch);
                    match Pin::new(&mut self.stream).poll_read(cx, &mut buf) {
                        Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                            *discarded += buf.filled().len();
                            if *discarded > LINGER_BYTES {
                                self.linger = Linger::Done;
                            }
                        }
                        Poll::Ready(_) => self.linger = Linger::Done,
                        Poll::Pending => {
                            let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(LINGER_TIME)));
                            ready!(timer.as_mut().poll(cx));
                            self.linger = Linger::Done;
                        }
                    }
                }
            }
        }
    }
}

impl AsyncRead for Io {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.conn.header_timed_out() {
            if !this.timeout_answered {
                this.timeout_answered = true;
                // Best effort: the socket is almost always writable here (nothing else is
                // being written); if it is not, the connection is closed without it.
                let _ = Pin::new(&mut this.stream).poll_write(cx, &answer::header_timeout());
            }
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "request head not received in time")));
        }
        let phase = this.conn.phase();
        let before = buf.filled().len();
        let res = Pin::new(&mut this.stream).poll_read(cx, buf);
        match res {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                this.seen_bytes = true;
                if phase == Phase::Idle {
                    this.conn.head_started();
                }
            }
            // Nothing to read now on a connection asked to close: no request has begun (idle,
            // or a head with nothing read), or, evicted at the cap, a head that stopped
            // mid-way (trickling; a client's head comes whole).
            Poll::Pending
                if this.conn.draining()
                    && (phase == Phase::Idle
                        || (phase == Phase::Head && (!this.seen_bytes || this.conn.evicted()))) =>
            {
                if !this.bytes_waiting() {
                    // End of stream, as if the client had closed: hyper closes cleanly.
                    this.linger = Linger::ShutdownOnly;
                    return Poll::Ready(Ok(()));
                }
                // A request is on its way in: read it when the reactor reports it.
                this.seen_bytes = true;
                if phase == Phase::Idle {
                    this.conn.head_started();
                }
            }
            _ => {}
        }
        res
    }
}

impl AsyncWrite for Io {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.maybe_replace(buf);
        if this.replacement.is_some() {
            ready!(this.poll_replacement(cx))?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            this.maybe_replace(first);
        }
        if this.replacement.is_some() {
            ready!(this.poll_replacement(cx))?;
            return Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()));
        }
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        ready!(Pin::new(&mut this.stream).poll_flush(cx))?;
        // hyper flushes only once everything it had to write is written.
        this.conn.flushed();
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.conn.closing();
        if ready!(this.poll_replacement(cx)).is_err() {
            this.linger = Linger::Done;
        }
        ready!(this.poll_linger(cx));
        Poll::Ready(Ok(()))
    }
}
