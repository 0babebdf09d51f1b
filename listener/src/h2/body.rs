//! A gRPC call's request body under the listener's limits ([`CallBody`]).
//!
//! Each message of the body comes after a 5-byte prefix (a compression flag, a length). The
//! length is read as the prefix passes and checked against the binary's `--max-body-bytes`
//! before any byte of the message is handed on: a 4 GB message is refused at its prefix,
//! however slowly it comes. The bytes handed on are charged to the process's budget of bodies
//! held (`--max-buffered-body-bytes`, the HTTP/1 bodies' budget: messages over 64 KiB may
//! take three quarters of it), as they arrive, and given back when the body is dropped (or, read
//! whole by [`CallBody::message`], when its bytes are). The whole body must come within
//! `--body-read-timeout` of the first moment it has to be waited for. Past any of them the body
//! gives the call's gRPC status as its error (tonic's codec answers it as it is) and ends; the
//! connection's other calls go on.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Sleep;
use tonic::Status;

use crate::body::{BodyReader, Charge, LARGE_BODY_BYTES, held};
use crate::error::Error;

/// The gRPC message prefix: a compression flag and a 4-byte big-endian length.
const PREFIX: usize = 5;

/// What a connection's request bodies are read under.
#[derive(Debug)]
pub(super) struct MessageLimits {
    pub(super) reader: BodyReader,
    /// `--max-body-bytes`: the largest message.
    pub(super) max: usize,
}

/// A call's request body (hyper's, under the limits); see the module's documentation.
#[derive(Debug)]
pub struct CallBody {
    inner: hyper::body::Incoming,
    limits: Arc<MessageLimits>,
    charge: Option<Charge>,
    /// The current message's prefix, as far as it has come (`PREFIX`: its message is coming).
    prefix: [u8; PREFIX],
    have: usize,
    /// Bytes of the current message still to come.
    left: u64,
    large: bool,
    deadline: Option<Pin<Box<Sleep>>>,
    ended: bool,
}

impl CallBody {
    pub(super) fn new(inner: hyper::body::Incoming, limits: Arc<MessageLimits>) -> Self {
        Self {
            inner,
            limits,
            charge: None,
            prefix: [0; PREFIX],
            have: 0,
            left: 0,
            large: false,
            deadline: None,
            ended: false,
        }
    }

    /// The whole body (prefix and message of a unary call), at most a message of the limit and
    /// its prefix; the returned bytes keep their charge until their last clone is dropped.
    pub async fn message(mut self) -> Result<Bytes, Status> {
        let most = self.limits.max.saturating_add(PREFIX);
        let mut first: Option<Bytes> = None;
        let mut rest = BytesMut::new();
        while let Some(frame) = self.frame().await {
            let Ok(data) = frame?.into_data() else { continue };
            if first.as_ref().map_or(0, Bytes::len) + rest.len() + data.len() > most {
                return Err(self.fail(Error::TooLarge { limit: self.limits.max }));
            }
            match &first {
                None if rest.is_empty() => first = Some(data),
                _ => {
                    if let Some(f) = first.take() {
                        rest.extend_from_slice(&f);
                    }
                    rest.extend_from_slice(&data);
                }
            }
        }
        let bytes = first.unwrap_or_else(|| rest.freeze());
        let charge = self.charge.take().unwrap_or_else(|| self.limits.reader.charge());
        Ok(held(bytes, charge))
    }

    /// Reads the prefixes in `data`; refuses a declared length over the limit.
    fn inspect(&mut self, mut data: &[u8]) -> Result<(), Error> {
        while !data.is_empty() {
            if self.have < PREFIX {
                let n = (PREFIX - self.have).min(data.len());
                self.prefix[self.have..self.have + n].copy_from_slice(&data[..n]);
                self.have += n;
                data = &data[n..];
                if self.have == PREFIX {
                    let len = u32::from_be_bytes([self.prefix[1], self.prefix[2], self.prefix[3], self.prefix[4]]);
                    if u64::from(len) > self.limits.max as u64 {
                        return Err(Error::TooLarge { limit: self.limits.max });
                    }
                    self.left = u64::from(len);
                    self.large = len as usize > LARGE_BODY_BYTES;
                    if len == 0 {
                        self.have = 0;
                    }
                }
            } else {
                let n = usize::try_from(self.left).unwrap_or(usize::MAX).min(data.len());
                self.left -= n as u64;
                data = &data[n..];
                if self.left == 0 {
                    self.have = 0;
                }
            }
        }
        Ok(())
    }

    /// Ends the body with `e`'s status, its charge given back.
    fn fail(&mut self, e: Error) -> Status {
        self.ended = true;
        self.charge = None;
        self.limits.reader.count(&e);
        status(&e)
    }
}

/// A refused body's gRPC status.
fn status(e: &Error) -> Status {
    match e {
        Error::TooLarge { limit } => {
            Status::resource_exhausted(format!("the message is larger than the limit of {limit} bytes"))
        }
        Error::Overloaded => Status::resource_exhausted(e.to_string()),
        Error::Timeout(_) => Status::deadline_exceeded(e.to_string()),
        Error::Broken(_) => Status::cancelled(e.public_message()),
    }
}

impl Body for CallBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                let timeout = this.limits.reader.timeout();
                let deadline = this.deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(this.fail(Error::Timeout(timeout))))),
                    Poll::Pending => Poll::Pending,
                }
            }
            Poll::Ready(None) => Poll::Ready(None),
            // The peer reset the stream, or the connection went: as tonic words it.
            Poll::Ready(Some(Err(e))) => {
                this.ended = true;
                Poll::Ready(Some(Err(Status::from_error(e.into()))))
            }
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if let Err(e) = this.inspect(data) {
                        return Poll::Ready(Some(Err(this.fail(e))));
                    }
                    let reader = &this.limits.reader;
                    let charge = this.charge.get_or_insert_with(|| reader.charge());
                    if let Err(e) = charge.grow(data.len(), this.large) {
                        return Poll::Ready(Some(Err(this.fail(e))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
