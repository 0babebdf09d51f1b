//! The caller's service, wrapped per connection: marks the connection busy when a request goes
//! in and answered when the answer's body has been handed over whole, answers 414 for an
//! over-long target, and adds `Connection: close` to answers given while draining.
//!
//! Per request this is two relaxed stores, a length comparison, one clock read (when the answer
//! is handed over) and one `Arc` clone; no allocation, no timer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, header};
use hyper::body::{Body, Incoming};
use hyper::service::Service;
use pin_project_lite::pin_project;

use crate::answer;
use crate::args::MAX_URI_BYTES;
use crate::phase::ConnState;

/// The caller's service on one connection.
#[derive(Debug)]
pub(crate) struct Tracked<S> {
    inner: S,
    conn: Arc<ConnState>,
}

impl<S> Tracked<S> {
    pub(crate) fn new(inner: S, conn: Arc<ConnState>) -> Self {
        Self { inner, conn }
    }
}

/// Length of the request target as received (origin form: path and query).
fn target_len<B>(req: &Request<B>) -> usize {
    let uri = req.uri();
    uri.path_and_query().map_or(0, |p| p.as_str().len()) + uri.authority().map_or(0, |a| a.as_str().len())
}

impl<S, B> Service<Request<Incoming>> for Tracked<S>
where
    S: Service<Request<Incoming>, Response = Response<B>>,
    B: Body<Data = Bytes> + From<Bytes>,
{
    type Response = Response<TrackedBody<B>>;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        self.conn.busy();
        if target_len(&req) > MAX_URI_BYTES {
            return TrackedFuture { state: State::UriTooLong, conn: Some(self.conn.clone()) };
        }
        TrackedFuture { state: State::Inner { fut: self.inner.call(req) }, conn: Some(self.conn.clone()) }
    }
}

pin_project! {
    /// The answer to come, from the service or from the listener itself.
    pub(crate) struct TrackedFuture<F> {
        #[pin]
        state: State<F>,
        // Moved into the answer's body when the answer is ready.
        conn: Option<Arc<ConnState>>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Inner { #[pin] fut: F },
        // Built when polled: the future stays the size of the service's.
        UriTooLong,
    }
}

impl<F, B, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body<Data = Bytes> + From<Bytes>,
{
    type Output = Result<Response<TrackedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let resp = match this.state.project() {
            StateProj::Inner { fut } => ready!(fut.poll(cx))?,
            StateProj::UriTooLong => answer::uri_too_long(),
        };
        let conn = this.conn.take();
        let close = conn.as_ref().is_some_and(|c| c.draining());
        let mut resp = resp.map(|inner| TrackedBody { inner, guard: Answered(conn) });
        if close {
            resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        Poll::Ready(Ok(resp))
    }
}

/// Marks the connection answered when dropped: hyper drops an answer's body once all of it is
/// in its write buffer.
struct Answered(Option<Arc<ConnState>>);

impl Drop for Answered {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            conn.answered();
        }
    }
}

pin_project! {
    /// The answer's body, as the service made it (or the listener's own).
    pub(crate) struct TrackedBody<B> {
        #[pin]
        inner: B,
        guard: Answered,
    }
}

impl<B> Body for TrackedBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
