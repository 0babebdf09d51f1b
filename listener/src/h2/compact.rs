//! An answer held as the bytes it sends, not as the encoder that made them.
//!
//! tonic's answer body (`EncodeBody`) allocates an 8 KiB buffer when it is made, and the message
//! it yields is a slice of that buffer: while a peer leaves the answer unread (its windows full,
//! so hyper does not poll the body), every open stream holds those 8 KiB for an answer of a few
//! hundred bytes. That was most of what 200 connections of 128 unread `ModelMetadata` calls each
//! cost. [`compact`] takes the frames that are ready when the answer is made (a unary answer's
//! are: the message, then the trailers), copies each message to an allocation of its own size,
//! and drops the encoder; an answer that is not finished yet (a server stream) keeps the rest of
//! its body behind the frames taken.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::Response;
use hyper::body::{Body, Frame, SizeHint};

/// An answer's frames taken when it was made, then what was left of its body (if anything).
#[derive(Debug)]
pub struct Compact<B: Body> {
    ready: VecDeque<Frame<Bytes>>,
    error: Option<B::Error>,
    rest: Option<B>,
}

/// `resp` with the frames its body has ready taken out (messages copied to fit) and the body
/// dropped once it has ended.
pub fn compact<B>(resp: Response<B>) -> Response<Compact<B>>
where
    B: Body<Data = Bytes> + Unpin,
{
    let (parts, mut body) = resp.into_parts();
    // Polled outside hyper: a body that is not ready registers this waker, and hyper's first
    // poll registers its own in its place.
    let mut cx = Context::from_waker(Waker::noop());
    let mut ready = VecDeque::new();
    let mut error = None;
    let rest = loop {
        if body.is_end_stream() {
            break None;
        }
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(None) => break None,
            Poll::Ready(Some(Ok(frame))) => ready.push_back(match frame.into_data() {
                Ok(data) => Frame::data(Bytes::copy_from_slice(&data)),
                Err(other) => other,
            }),
            Poll::Ready(Some(Err(e))) => {
                error = Some(e);
                break None;
            }
            Poll::Pending => break Some(body),
        }
    };
    Response::from_parts(parts, Compact { ready, error, rest })
}

impl<B> Body for Compact<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if let Some(frame) = this.ready.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Some(e) = this.error.take() {
            return Poll::Ready(Some(Err(e)));
        }
        match &mut this.rest {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ready.is_empty() && self.error.is_none() && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let taken: u64 = self.ready.iter().filter_map(|f| f.data_ref()).map(|d| d.len() as u64).sum();
        match &self.rest {
            None => SizeHint::with_exact(taken),
            Some(rest) => {
                let r = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(r.lower() + taken);
                if let Some(upper) = r.upper() {
                    hint.set_upper(upper + taken);
                }
                hint
            }
        }
    }
}

// Where B is Unpin (every field is), Compact is too.
impl<B: Body + Unpin> Unpin for Compact<B> {}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::{BodyExt, StreamBody};

    use super::*;

    fn frames() -> Vec<Result<Frame<Bytes>, Infallible>> {
        let mut big = bytes::BytesMut::with_capacity(8192);
        big.extend_from_slice(b"answer");
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        vec![Ok(Frame::data(big.freeze())), Ok(Frame::trailers(trailers))]
    }

    #[tokio::test]
    async fn a_finished_answer_is_taken_whole_and_its_body_dropped() {
        let body = StreamBody::new(futures::stream::iter(frames()));
        let resp = compact(Response::new(body));
        assert!(resp.body().rest.is_none(), "the encoder is dropped");
        assert_eq!(resp.body().size_hint().exact(), Some(6));
        let collected = resp.into_body().collect().await.unwrap();
        assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
        assert_eq!(collected.to_bytes(), "answer");
    }

    #[tokio::test]
    async fn an_unfinished_answer_keeps_the_rest_of_its_body() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
        tx.send(Ok(Frame::data(Bytes::from_static(b"first ")))).await.unwrap();
        let body = StreamBody::new(tokio_stream_from(rx));
        let resp = compact(Response::new(body));
        assert!(resp.body().rest.is_some());
        assert!(!resp.body().is_end_stream());
        let later = tokio::spawn(async move {
            tx.send(Ok(Frame::data(Bytes::from_static(b"second")))).await.unwrap();
        });
        let collected = resp.into_body().collect().await.unwrap().to_bytes();
        later.await.unwrap();
        assert_eq!(collected, "first second");
    }

    fn tokio_stream_from<T>(mut rx: tokio::sync::mpsc::Receiver<T>) -> impl futures::Stream<Item = T> + Unpin {
        Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}
