//! The gRPC listener's connections, served on hyper's HTTP/2 server. `ModelInfer`, the call
//! that carries the load, is answered here directly: its one message read from the request's
//! body and decoded with prost, handed to [`infer::Service`], and its answer encoded with prost
//! into one data frame, followed by the `grpc-status` trailer. Every other call goes to tonic's
//! router ([`tonic::service::Routes`]) unchanged. tonic's transport would put five service
//! layers, an axum router's lookup, a boxed body and its streaming codec around every call, which
//! cost the gateway CPU on every `ModelInfer` (`benches/RESULTS.md`, "Open Inference Protocol
//! through the gateway", has the comparison).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderValue, Request, Response, header};
use http_body_util::StreamBody;
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use listener::h2::{Accepted, AnswerBody, CallBody, Limits};
use oip::pb::ModelInferRequest;
use prost::Message;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tonic::Status;
use tonic::body::Body;
use tonic::metadata::MetadataMap;
use tonic::service::Routes;
use tonic::transport::server::TcpConnectInfo;
use tower::Service as _;

use super::infer::{self, X_REQUEST_ID};
use super::local::Exec;
use crate::http::{Guarded, PanicAnswer, Panics};

/// The path of `ModelInfer`.
const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";
/// The paths of KEDA's external scaler.
const KEDA_PREFIX: &str = "/externalscaler.ExternalScaler/";

/// What a connection's calls share.
pub(super) struct Calls {
    pub(super) infer: infer::Service,
    pub(super) routes: Routes,
    /// Largest message taken, in bytes (`--max-body-bytes`).
    pub(super) max_message: usize,
    /// Each call a task of its own (`--grpc-call-tasks`), not run in its connection's task.
    pub(super) call_tasks: bool,
    /// Where a call's panic is counted and logged (the HTTP listeners' too); this listener's own
    /// reference.
    pub(super) panics: Arc<Panics>,
    /// The listener's limits (`listener::h2`): the connections' settings and deadlines, the
    /// bodies' budget.
    pub(super) limits: Limits,
}

/// A call that panicked (a bug) answers INTERNAL, no detail for the client; its connection and
/// the other calls on it go on.
impl PanicAnswer for Response<Body> {
    fn panicked() -> Self {
        Status::internal("internal error").into_http()
    }
}

/// A connection's HTTP/2 settings (the listener's), its calls run by `exec`.
fn builder(limits: &Limits, exec: Exec) -> hyper::server::conn::http2::Builder<Exec> {
    let mut b = limits.builder(exec);
    // No `date` header: gRPC clients don't read it, and a value that changes every second is
    // one more header to encode on every answer.
    b.auto_date_header(false);
    b
}

/// Serve one connection (after its TLS handshake, with `tls`) until it closes, or gracefully
/// (its calls in flight finished, no new ones taken) once `stop` resolves.
pub(super) async fn connection(
    conn: Accepted,
    tls: Option<TlsAcceptor>,
    calls: Arc<Calls>,
    stop: impl Future<Output = ()>,
) {
    let mut stop = pin!(stop);
    let watch = calls.limits.watch(conn.accepted_at());
    let peer = conn.peer_addr();
    match tls {
        None => serve(watch.io(conn), watch, peer, calls, stop).await,
        Some(tls) => {
            // Within the preface's deadline, which counts from the accept.
            let handshake = tokio::time::timeout_at(watch.preface_deadline(), tls.accept(conn));
            let conn = tokio::select! {
                h = handshake => match h {
                    Ok(Ok(c)) => c,
                    Ok(Err(e)) => return tracing::debug!(error = %e, "grpc TLS handshake failed"),
                    Err(_) => return tracing::debug!("grpc TLS handshake timed out"),
                },
                () = &mut stop => return,
            };
            serve(watch.io(conn), watch, peer, calls, stop).await;
        }
    }
}

async fn serve<IO>(
    io: listener::h2::WatchedIo<IO>,
    watch: listener::h2::Watch,
    peer: SocketAddr,
    calls: Arc<Calls>,
    stop: Pin<&mut impl Future<Output = ()>>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // The call's future (some kilobytes: the predict entry's is inside) boxed once here. Unboxed,
    // it is inside the stream's future, which hyper moves by value as it hands it to the
    // executor, and a tokio task (`--grpc-call-tasks`) copies in full as it spawns and finishes.
    let call_tasks = calls.call_tasks;
    // The connection's calls run in this task (`local`), unless `--grpc-call-tasks`.
    let exec = Exec::new(call_tasks);
    let builder = builder(&calls.limits, exec.clone());
    let watch = Arc::new(watch);
    let svc = {
        let watch = Arc::clone(&watch);
        hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
            // KEDA's streams are bounded per address too (`keda`): its calls learn their peer
            // as tonic's own transport tells it. Not the others: an insert allocates.
            if req.uri().path().starts_with(KEDA_PREFIX) {
                req.extensions_mut().insert(TcpConnectInfo { local_addr: None, remote_addr: Some(peer) });
            }
            let (calls, watch) = (Arc::clone(&calls), Arc::clone(&watch));
            let panics = Arc::clone(&calls.panics);
            Box::pin(async move {
                let answer = Guarded::new(calls.call(watch.request(req)), panics).await;
                Ok::<Response<AnswerBody<Body>>, Infallible>(watch.answer(answer))
            })
        })
    };
    let mut conn = pin!(builder.serve_connection(TokioIo::new(io), svc));
    let ended = exec.run(watch.drive(conn.as_mut(), stop, |c| c.graceful_shutdown())).await;
    if let Some(Err(e)) = ended {
        tracing::debug!(error = %e, "grpc connection ended");
    }
}

impl Calls {
    async fn call(&self, req: Request<CallBody>) -> Response<Body> {
        if req.uri().path() == MODEL_INFER {
            return self.model_infer(req).await.unwrap_or_else(|s| s.into_http());
        }
        let mut routes = self.routes.clone();
        match routes.call(req.map(Body::new)).await {
            Ok(r) => listener::h2::compact(r).map(Body::new),
            Err(never) => match never {},
        }
    }

    /// `ModelInfer`: its message read and decoded, answered by the service, written back.
    async fn model_infer(&self, req: Request<CallBody>) -> Result<Response<Body>, Status> {
        let (parts, body) = req.into_parts();
        if let Some(enc) = parts.headers.get("grpc-encoding").filter(|v| v.as_bytes() != b"identity") {
            return Err(Status::unimplemented(format!(
                "message compression {} is not supported; send it uncompressed",
                String::from_utf8_lossy(enc.as_bytes())
            )));
        }
        let msg = read_message(body, self.max_message).await?;
        let msg = ModelInferRequest::decode(msg).map_err(|e| Status::internal(format!("failed to decode: {e}")))?;
        let (id, answer) = self.infer.infer(&MetadataMap::from_headers(parts.headers), msg).await?;
        let len = answer.encoded_len();
        let mut frame = BytesMut::with_capacity(5 + len);
        frame.put_u8(0);
        frame.put_u32(u32::try_from(len).map_err(|_| Status::internal("the answer is larger than 4 GiB"))?);
        answer.encode_raw(&mut frame);
        let mut trailers = http::HeaderMap::with_capacity(1);
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let frames = [Ok::<_, Infallible>(Frame::data(frame.freeze())), Ok(Frame::trailers(trailers))];
        let mut md = MetadataMap::new();
        if let Some(mut id) = id {
            // The request id is new on every answer: HPACK-indexed it would only push the
            // connection's other headers out of its table, and cost the insertion every call.
            id.set_sensitive(true);
            md.insert(X_REQUEST_ID, id);
        }
        let mut resp = Response::new(Body::new(StreamBody::new(futures::stream::iter(frames))));
        *resp.headers_mut() = md.into_headers();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        Ok(resp)
    }
}

/// The one message of a unary call's body: its 5-byte prefix (not compressed, its length)
/// and the message, at most `max` bytes (RESOURCE_EXHAUSTED past it, at the prefix: the
/// listener's body, which also holds it to the budget of bodies held and the body deadline).
async fn read_message(body: CallBody, max: usize) -> Result<Bytes, Status> {
    let mut buf = body.message().await?;
    if buf.len() < 5 {
        return Err(Status::internal("the request carried no message"));
    }
    if buf[0] != 0 {
        return Err(Status::unimplemented("compressed messages are not supported; send it uncompressed"));
    }
    buf.advance(1);
    let len = buf.get_u32() as usize;
    if len > max {
        return Err(Status::resource_exhausted(format!("the message is larger than the limit of {max} bytes")));
    }
    if buf.len() != len {
        return Err(Status::internal(format!("the message's prefix says {len} bytes, the body carries {}", buf.len())));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_that_panics_answers_internal_and_is_counted() {
        let metrics = crate::metrics::Metrics::default();
        let panics = Arc::new(Panics::new(metrics.panics.clone()));
        let call = async {
            let calls: Vec<u8> = Vec::new();
            // An index out of bounds: a bug.
            Response::new(Body::new(http_body_util::Full::new(Bytes::from(vec![calls[3]]))))
        };
        let resp = Guarded::new(call, panics).await;
        let status = Status::from_header_map(resp.headers()).expect("a gRPC status in the headers");
        assert_eq!((status.code(), status.message()), (tonic::Code::Internal, "internal error"));
        let text = crate::metrics::render(&metrics.registry());
        assert!(text.lines().any(|l| l.starts_with("gateway_panics_total{") && l.ends_with(" 1")), "{text}");
    }
}
