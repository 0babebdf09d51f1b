//! `inference.GRPCInferenceService` on the gateway. Each model call has the meaning of a REST
//! request (`/v2/models/{model}[/versions/{v}]/...`) and goes through the client port's one
//! predict entry: the same request ids, admission in requests and tokens, p2c, retries,
//! deadline and metrics as `/predict`; the worker's answer is translated back. `ModelInfer`,
//! the call that carries the load, goes in as the call it is, read already
//! (`predict::call`); `ModelReady`, `ModelMetadata` and `ModelConfig` as the REST requests they
//! are (`predict::handle_to`). The pool is the `pool` metadata entry's, else the default pool. A
//! client's deadline (`grpc-timeout`) bounds the call: past it, DEADLINE_EXCEEDED and the
//! request is dropped (its admission freed, its attempt on the worker cancelled).

use std::borrow::Cow;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::response::Response as HttpResponse;
use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{HeaderValue, Method, StatusCode, header};
use http_body_util::{BodyExt, Full};
use oip::InferCall;
use oip::pb::grpc_inference_service_server::GrpcInferenceService;
use oip::pb::{
    ModelConfigRequest, ModelConfigResponse, ModelInferRequest, ModelInferResponse, ModelMetadataRequest,
    ModelMetadataResponse, ModelReadyRequest, ModelReadyResponse, ServerLiveRequest, ServerLiveResponse,
    ServerMetadataRequest, ServerMetadataResponse, ServerReadyRequest, ServerReadyResponse,
};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use tonic::metadata::{Ascii, MetadataMap, MetadataValue};
use tonic::{Request, Response, Status};
use wire::{ErrorBody, ErrorType};

use crate::http::{AppState, Ids, ProtocolCall, Target, handle_to, oip_call, oip_server_name, pool_ready};

/// Characters escaped in a model name or version put into a path.
const SEGMENT: &AsciiSet = &CONTROLS.add(b' ').add(b'/').add(b'?').add(b'#').add(b'%').add(b'"').add(b'<').add(b'>');

/// The service: the client port's state.
#[derive(Clone)]
pub(crate) struct Service(pub(crate) AppState);

impl Service {
    fn pool<'a>(&'a self, md: &'a MetadataMap) -> &'a str {
        md.get("pool").and_then(|v| v.to_str().ok()).unwrap_or(&self.0.pools.ctx().config.default_pool)
    }

    /// Sends `method path` (with `body`) through the predict entry, within the client's deadline:
    /// the service's calls other than `ModelInfer`, rare, as the REST requests they are.
    async fn call(&self, md: &MetadataMap, method: Method, path: String, body: Bytes) -> Result<HttpResponse, Status> {
        let mut req = http::Request::builder().method(method).uri(path.as_str());
        for name in ["x-request-id", "traceparent"] {
            if let Some(v) = md.get(name).and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok()) {
                req = req.header(name, v);
            }
        }
        let req = req
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| Status::invalid_argument(format!("bad model name or version: {e}")))?;
        // Pinned here, awaited in either arm: moved into one arm's `timeout`, the future (some
        // kilobytes) would be laid out twice in this one's, and copied in full at each call.
        let mut answer = pin!(handle_to(&self.0, self.pool(md), Target::Oip(&path), req));
        match deadline(md) {
            Some(d) => tokio::time::timeout(d, answer.as_mut())
                .await
                .map_err(|_| Status::deadline_exceeded("the client's deadline passed before the answer")),
            None => Ok(answer.await),
        }
    }

    /// `ModelInfer`: the answer and the request id to give back. Called by the trait's method
    /// and, without its boxed future and `tonic::Request` wrapping, by the listener's direct
    /// path (`server.rs`). The call goes to the predict entry as read already
    /// ([`predict::call`](crate::http::call)), not as a REST request to build and read again.
    pub(crate) async fn infer(
        &self,
        md: &MetadataMap,
        mut r: ModelInferRequest,
    ) -> Result<(Option<MetadataValue<Ascii>>, ModelInferResponse), Status> {
        let (model, version) = (std::mem::take(&mut r.model_name), std::mem::take(&mut r.model_version));
        let path = model_path(&model, &version, "/infer");
        let path = PathAndQuery::try_from(path)
            .map_err(|e| Status::invalid_argument(format!("bad model name or version: {e}")))?;
        let call = InferCall::from_pb(r)?;
        let body = serde_json::to_vec(&call.to_rest()).map_err(|e| Status::internal(e.to_string()))?;
        let texts = call.texts.len() as u64;
        // A call of one text may be merged (`routing::coalesce`): checked here, from the call
        // read already. Merged, its prediction comes back beside the answer and is answered in
        // protobuf directly.
        let version = Some(version).filter(|v| !v.is_empty());
        let meta =
            InferCall { id: call.id.clone(), texts: Vec::new(), column: call.column, outputs: call.outputs.clone() };
        let reply = Arc::new(OnceLock::new());
        let max_tokens = self.0.pools.ctx().config.max_query_tokens;
        let single = oip_call(model.clone(), version, call, max_tokens, Some(Arc::clone(&reply)));
        let ids = Ids::from_headers(md.as_ref());
        // Pinned here, awaited in either arm: moved into one arm's `timeout`, the future (some
        // kilobytes) would be laid out twice in this one's, and copied in full at each call.
        let mut answer = pin!(crate::http::call(
            &self.0,
            self.pool(md),
            &ids,
            ProtocolCall { path, body: body.into(), texts, single }
        ));
        let result = match deadline(md) {
            Some(d) => tokio::time::timeout(d, answer.as_mut())
                .await
                .map_err(|_| Status::deadline_exceeded("the client's deadline passed before the answer"))?,
            None => answer.await,
        };
        let id = MetadataValue::try_from(ids.request_id.as_bytes()).ok();
        let a = result.map_err(|e| {
            let retry = e.retry_after_s().map(Duration::from_secs);
            with_id_status(oip::status::status(e.error_type(), e.public_message(), retry), &id)
        })?;
        if !a.status.is_success() {
            return Err(with_id_status(refusal(a.status, a.retry_after.as_ref(), &a.body), &id));
        }
        let out = match reply.get() {
            Some(p) => oip::answer::pb(&model, &meta, std::slice::from_ref(p))?,
            None => oip::answer::pb_from_rest(json(&a.body)?)?,
        };
        Ok((id, out))
    }
}

/// `/v2/models/{name}[/versions/{version}]{tail}`.
fn model_path(name: &str, version: &str, tail: &str) -> String {
    const MODELS: &str = "/v2/models/";
    const VERSIONS: &str = "/versions/";
    // Borrowed where nothing needs escaping, as a model's name usually is: no formatting machinery.
    let name: Cow<'_, str> = utf8_percent_encode(name, SEGMENT).into();
    let version: Cow<'_, str> = utf8_percent_encode(version, SEGMENT).into();
    let mut path = String::with_capacity(MODELS.len() + name.len() + VERSIONS.len() + version.len() + tail.len());
    path.push_str(MODELS);
    path.push_str(&name);
    if !version.is_empty() {
        path.push_str(VERSIONS);
        path.push_str(&version);
    }
    path.push_str(tail);
    path
}

/// The client's deadline, from `grpc-timeout` (an integer of at most 8 digits and a unit:
/// `H`, `M`, `S`, `m`, `u`, `n`).
pub(crate) fn deadline(md: &MetadataMap) -> Option<Duration> {
    listener::h2::parse_grpc_timeout(md.get("grpc-timeout")?.to_str().ok()?)
}

/// An answer's body and its request id (`x-request-id`, given back to the client as metadata).
#[derive(Debug)]
struct CallAnswer {
    body: Bytes,
    id: Option<MetadataValue<Ascii>>,
}

impl CallAnswer {
    /// `msg` as the call's response, with the request id.
    fn respond<T>(&self, msg: T) -> Response<T> {
        with_id(msg, self.id.clone())
    }
}

/// `msg` as a call's response, with request id `id` as its metadata.
fn with_id<T>(msg: T, id: Option<MetadataValue<Ascii>>) -> Response<T> {
    let mut out = Response::new(msg);
    if let Some(id) = id {
        out.metadata_mut().insert(X_REQUEST_ID, id);
    }
    out
}

pub(crate) const X_REQUEST_ID: &str = "x-request-id";

/// The answer once it is a success, else its error as a status (see [`refusal`]); both with
/// the request id.
async fn success(resp: HttpResponse) -> Result<CallAnswer, Status> {
    let (parts, body) = resp.into_parts();
    let id = parts.headers.get(X_REQUEST_ID).and_then(|v| MetadataValue::try_from(v.as_bytes()).ok());
    let body = body
        .collect()
        .await
        .map_err(|_| with_id_status(Status::unavailable("the answer was cut short"), &id))?
        .to_bytes();
    if parts.status.is_success() {
        return Ok(CallAnswer { body, id });
    }
    Err(with_id_status(refusal(parts.status, parts.headers.get(header::RETRY_AFTER), &body), &id))
}

/// `s` with the request id `id` in its metadata.
fn with_id_status(mut s: Status, id: &Option<MetadataValue<Ascii>>) -> Status {
    if let Some(id) = id {
        s.metadata_mut().insert(X_REQUEST_ID, id.clone());
    }
    s
}

/// An answer that is not a success, as a status: its error body's kind and message (else the
/// kind its HTTP status says), its `Retry-After` as retry info.
fn refusal(status: StatusCode, retry_after: Option<&HeaderValue>, body: &[u8]) -> Status {
    let retry = retry_after.and_then(|v| v.to_str().ok()?.parse().ok()).map(Duration::from_secs);
    let e = serde_json::from_slice::<ErrorBody>(body)
        .unwrap_or_else(|_| ErrorBody { error: format!("the worker answered {status}"), error_type: kind_of(status) });
    oip::status::status(e.error_type, e.error, retry)
}

fn kind_of(status: StatusCode) -> ErrorType {
    match status {
        StatusCode::NOT_FOUND => ErrorType::NotFound,
        StatusCode::TOO_MANY_REQUESTS => ErrorType::Overloaded,
        StatusCode::SERVICE_UNAVAILABLE => ErrorType::Unavailable,
        StatusCode::GATEWAY_TIMEOUT => ErrorType::Timeout,
        s if s.is_client_error() => ErrorType::InvalidRequest,
        _ => ErrorType::Upstream,
    }
}

fn json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Status> {
    serde_json::from_slice(body).map_err(|e| {
        tracing::warn!(error = %e, "a worker's Open Inference Protocol answer did not parse");
        Status::unavailable("the worker's answer did not parse")
    })
}

#[tonic::async_trait]
impl GrpcInferenceService for Service {
    async fn server_live(&self, _: Request<ServerLiveRequest>) -> Result<Response<ServerLiveResponse>, Status> {
        Ok(Response::new(ServerLiveResponse { live: true }))
    }

    async fn server_ready(&self, req: Request<ServerReadyRequest>) -> Result<Response<ServerReadyResponse>, Status> {
        Ok(Response::new(ServerReadyResponse { ready: pool_ready(&self.0, self.pool(req.metadata())) }))
    }

    async fn model_ready(&self, req: Request<ModelReadyRequest>) -> Result<Response<ModelReadyResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let path = model_path(&r.name, &r.version, "/ready");
        // Not ready for any refusal: a model or version not served, no worker, overload.
        let ready = success(self.call(&md, Method::GET, path, Bytes::new()).await?).await.is_ok();
        Ok(Response::new(ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        Ok(Response::new(oip::meta::server_pb(oip_server_name())))
    }

    async fn model_metadata(
        &self,
        req: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let answer =
            success(self.call(&md, Method::GET, model_path(&r.name, &r.version, ""), Bytes::new()).await?).await?;
        Ok(answer.respond(oip::meta::from_rest(json(&answer.body)?)))
    }

    async fn model_config(&self, req: Request<ModelConfigRequest>) -> Result<Response<ModelConfigResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let path = model_path(&r.name, &r.version, "/config");
        let answer = success(self.call(&md, Method::GET, path, Bytes::new()).await?).await?;
        Ok(answer.respond(oip::meta::config_from_rest(json(&answer.body)?)))
    }

    async fn model_infer(&self, req: Request<ModelInferRequest>) -> Result<Response<ModelInferResponse>, Status> {
        let (md, _, r) = req.into_parts();
        let (id, answer) = self.infer(&md, r).await?;
        Ok(with_id(answer, id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_as_the_spec_writes_them() {
        let md = |v: &str| {
            let mut m = MetadataMap::new();
            m.insert("grpc-timeout", v.parse().unwrap());
            m
        };
        assert_eq!(deadline(&md("250m")), Some(Duration::from_millis(250)));
        assert_eq!(deadline(&md("2S")), Some(Duration::from_secs(2)));
        assert_eq!(deadline(&md("1H")), Some(Duration::from_secs(3600)));
        assert_eq!(deadline(&md("99999999n")), Some(Duration::from_nanos(99_999_999)));
        for bad in ["", "m", "123456789m", "5x", "-1S"] {
            assert_eq!(deadline(&md(bad)), None, "{bad}");
        }
        assert_eq!(deadline(&MetadataMap::new()), None);
    }

    #[test]
    fn model_paths_escape_names() {
        assert_eq!(model_path("m", "", "/infer"), "/v2/models/m/infer");
        assert_eq!(model_path("a b/c", "1", "/ready"), "/v2/models/a%20b%2Fc/versions/1/ready");
    }

    #[tokio::test]
    async fn worker_errors_become_statuses_with_retry_info() {
        use tonic_types::StatusExt;
        let resp = |status: u16, body: &str, retry: Option<&str>| {
            let mut r = HttpResponse::new(axum::body::Body::from(body.to_owned()));
            *r.status_mut() = StatusCode::from_u16(status).unwrap();
            if let Some(v) = retry {
                r.headers_mut().insert(header::RETRY_AFTER, v.parse().unwrap());
            }
            r
        };
        let s = success(resp(429, r#"{"error":"busy","error_type":"overloaded"}"#, Some("1"))).await.unwrap_err();
        assert_eq!(s.code(), tonic::Code::ResourceExhausted);
        assert_eq!(s.get_details_retry_info().unwrap().retry_delay, Some(Duration::from_secs(1)));
        let s =
            success(resp(404, r#"{"error":"unknown model \"x\"","error_type":"not_found"}"#, None)).await.unwrap_err();
        assert_eq!((s.code(), s.message()), (tonic::Code::NotFound, "unknown model \"x\""));
        let s = success(resp(502, "<html>", None)).await.unwrap_err();
        assert_eq!(s.code(), tonic::Code::Unavailable);
        let ok = success(resp(200, "{}", None)).await.unwrap();
        assert_eq!((ok.body.as_ref(), ok.id.is_none()), (b"{}".as_ref(), true));
    }

    #[tokio::test]
    async fn the_request_id_reaches_the_client_on_answers_and_errors() {
        let resp = |status: u16| {
            let mut r = HttpResponse::new(axum::body::Body::from(r#"{"error":"busy","error_type":"overloaded"}"#));
            *r.status_mut() = StatusCode::from_u16(status).unwrap();
            r.headers_mut().insert(X_REQUEST_ID, "abc-123".parse().unwrap());
            r
        };
        let ok = success(resp(200)).await.unwrap();
        let out = ok.respond(());
        assert_eq!(out.metadata().get(X_REQUEST_ID).unwrap(), "abc-123");
        let err = success(resp(429)).await.unwrap_err();
        assert_eq!(err.metadata().get(X_REQUEST_ID).unwrap(), "abc-123");
    }
}
