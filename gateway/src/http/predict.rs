//! The one way into a prediction. Every predict route of the client port (`/predict` for the
//! default pool, `/pools/{pool}/predict`) and every Open Inference Protocol model route
//! (`/v2/models/...`, `/pools/{pool}/v2/models/...`, and the gRPC service's calls) comes to
//! [`handle`] (the gRPC service's `ModelInfer` to [`call`], the same entry for a request read
//! already), and only there is a request admitted, identified, buffered and forwarded.
//! Per-request policy for predictions belongs here, not in a router layer: the client port's
//! router serves only its other routes.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::uri::PathAndQuery;
use http::{HeaderValue, Method, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Body as HttpBody;

use super::AppState;
use super::trace::{Ids, X_REQUEST_ID};
use crate::error::RequestError;
use crate::routing::{self, ClientRequest};
use crate::upstream::Answer;

/// A predict route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Route {
    /// `/predict`: the default pool.
    Default,
    /// `/pools/{pool}/predict` (the pool name percent-decoded, as a path parameter is).
    Pool(String),
    /// An Open Inference Protocol model route, `/v2/models/...` (the default pool) or
    /// `/pools/{pool}/v2/models/...`: sent to a worker as `path`, the same route of the worker's.
    Oip { pool: Option<String>, path: String },
}

/// The predict route `path` is, if any: a string comparison for `/predict` (the hot path).
pub(super) fn route(path: &str) -> Option<Route> {
    if path == "/predict" {
        return Some(Route::Default);
    }
    if path.starts_with(OIP_MODELS) {
        return Some(Route::Oip { pool: None, path: path.to_owned() });
    }
    let rest = path.strip_prefix("/pools/")?;
    let (pool, tail) = rest.split_once('/')?;
    if pool.is_empty() {
        return None;
    }
    let decoded = || percent_encoding::percent_decode_str(pool).decode_utf8_lossy().into_owned();
    if tail == "predict" {
        return Some(Route::Pool(decoded()));
    }
    let oip = &rest[pool.len()..];
    oip.starts_with(OIP_MODELS).then(|| Route::Oip { pool: Some(decoded()), path: oip.to_owned() })
}

/// Where the protocol's model routes begin.
const OIP_MODELS: &str = "/v2/models/";

/// Which route of the worker a request goes to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// `/predict`, with the client's query string.
    Predict,
    /// An Open Inference Protocol route of the worker's, e.g. `/v2/models/m/infer`.
    Oip(&'a str),
}

/// Serve one request to a predict route of pool `pool`: request identity, the body (under the
/// listener's deadline and byte budget), admission, the forward to a worker with its retry
/// budget, and the answer with the request id.
pub(super) async fn handle<B>(state: &AppState, pool: &str, req: http::Request<B>) -> Response
where
    B: HttpBody<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + std::fmt::Display,
{
    handle_to(state, pool, Target::Predict, req).await
}

/// [`handle`] for a request to `target` of the worker's.
pub(crate) async fn handle_to<B>(state: &AppState, pool: &str, target: Target<'_>, req: http::Request<B>) -> Response
where
    B: HttpBody<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + std::fmt::Display,
{
    // HEAD as a GET without the body, as routers do.
    if !matches!(*req.method(), Method::GET | Method::POST | Method::HEAD) {
        let e = RequestError::MethodNotAllowed(req.method().to_string());
        state.admission.answered_early(&e);
        return e.into_response();
    }
    let ids = Ids::from_headers(req.headers());
    let mut resp = match admitted(state, pool, target, req, &ids).await {
        Ok(resp) => resp,
        Err(e) => {
            // Its log line ("request failed") carries the request's ids.
            let _span = ids.span(pool).entered();
            e.into_response()
        }
    };
    resp.headers_mut().insert(&X_REQUEST_ID, ids.request_id);
    resp
}

async fn admitted<B>(
    state: &AppState,
    pool: &str,
    target: Target<'_>,
    req: http::Request<B>,
    ids: &Ids,
) -> Result<Response, RequestError>
where
    B: HttpBody<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + std::fmt::Display,
{
    let (ids_headers, mut n) = ids.headers();
    // Triton's binary tensor data extension: the worker finds where the body's JSON ends by it.
    let binary = match target {
        Target::Oip(_) => req.headers().get(&super::single::BINARY_HEADER).cloned(),
        Target::Predict => None,
    };
    let mut headers = [ids_headers[0], ids_headers[1], ids_headers[0]];
    if let Some(v) = &binary {
        headers[n] = (super::single::BINARY_HEADER.as_str(), v);
        n += 1;
    }
    // The request's log span, made only when something is logged about the request (a retry,
    // an ejection, a draining worker, an error): on the success path nothing is, and a span per
    // request costs as much as the rest of the gateway's work for it when the log takes it.
    let pool_name = pool;
    let span = || ids.span(pool_name);
    // The body first: admission counts a request once it has arrived whole, so that clients
    // trickling bodies hold no admission permit (only their bytes, within the listener's
    // budget and its body deadline).
    let early = |e: RequestError| {
        state.admission.answered_early(&e);
        e
    };
    let inc = incoming(state, target, req, &headers[..n], &span).await.map_err(early)?;
    forward(state, pool, &inc).await.map(response)
}

/// Admission and the forward of request `inc`, read whole, to pool `pool`.
async fn forward(state: &AppState, pool: &str, inc: &ClientRequest<'_>) -> Result<Answer, RequestError> {
    let found = state.pools.get(pool);
    // Demand is counted before admission: what is refused was asked for all the same.
    if let Some(p) = &found {
        p.offer(inc.cost.queries);
    }
    // A pool at zero takes no admission: what it holds while a worker starts is bounded by its
    // hold (--cold-start-hold-requests and -bytes, 503 `unavailable` beyond), and the admission
    // bounds, sized from ready workers' capacity, are only their floors then: a burst to an
    // empty pool larger than --max-outstanding was answered 429 while the hold had room.
    let _admitted = match &found {
        Some(p) if p.holds() => None,
        _ => Some(state.admission.admit(inc.cost)?),
    };
    let Some(pool) = found else {
        let e = RequestError::UnknownPool(pool.to_owned());
        state.admission.answered_early(&e);
        return Err(e);
    };
    routing::forward(&pool, inc).await
}

/// A protocol inference its listener has read already (the gRPC service's `ModelInfer`): what
/// the predict entry would read from the REST request of the same meaning.
pub(crate) struct ProtocolCall {
    /// The worker's route, `/v2/models/{model}[/versions/{version}]/infer`.
    pub(crate) path: PathAndQuery,
    /// The REST request's JSON body: what the worker is sent when the call goes alone.
    pub(crate) body: bytes::Bytes,
    /// Its texts: its queries in the signal's demand.
    pub(crate) texts: u64,
    /// Its one text, when it may be merged (`single::oip_call`).
    pub(crate) single: Option<crate::routing::Single>,
}

/// The predict entry for `call` of pool `pool`, identified by `ids`: the body's limits,
/// admission, the forward with its retries and metrics, as [`handle_to`] for its REST request,
/// without that request to build and its answer to read back. A failure is logged as there,
/// in the request's span; the worker's answer, a success or not, is the caller's to translate.
pub(crate) async fn call(state: &AppState, pool: &str, ids: &Ids, call: ProtocolCall) -> Result<Answer, RequestError> {
    let (headers, n) = ids.headers();
    let span = || ids.span(pool);
    let result = async {
        let cfg = &state.pools.ctx().config;
        // As a REST body is read: the limit, and the listener's budget of bodies held.
        let body = read_body(state, http_body_util::Full::new(call.body))
            .await
            .inspect_err(|e| state.admission.answered_early(e))?;
        let cost = super::cost::estimate_oip(cfg, &body, Some(call.texts));
        let inc = ClientRequest {
            method: Method::POST,
            path_and_query: call.path,
            content_type: Some(HeaderValue::from_static("application/json")),
            headers: &headers[..n],
            span: &span,
            single: call.single.filter(|_| !cost.heavy && state.coalesce),
            body,
            cost,
        };
        forward(state, pool, &inc).await
    }
    .await;
    if let Err(e) = &result {
        let _span = span().entered();
        e.log();
    }
    result
}

/// Buffer the client's request (bounded), keeping what the worker needs.
async fn incoming<'a, B>(
    state: &AppState,
    target: Target<'_>,
    req: http::Request<B>,
    headers: &'a [(&'static str, &'a HeaderValue)],
    span: &'a (dyn Fn() -> tracing::Span + Sync),
) -> Result<ClientRequest<'a>, RequestError>
where
    B: HttpBody<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + std::fmt::Display,
{
    let (parts, body) = req.into_parts();
    // `/predict?...` is forwarded as it came (a cheap clone of the parsed URI's bytes); other
    // routes (`/pools/{pool}/predict`) become `/predict` with the same query.
    let path_and_query = match (target, parts.uri.path_and_query()) {
        (Target::Predict, Some(pq)) if pq.path() == "/predict" => pq.clone(),
        (Target::Oip(path), _) => {
            PathAndQuery::try_from(path).map_err(|e| RequestError::InvalidRequest(format!("bad path: {e}")))?
        }
        (Target::Predict, _) => {
            let pq = match parts.uri.query() {
                Some(q) => format!("/predict?{q}"),
                None => "/predict".to_owned(),
            };
            PathAndQuery::try_from(pq).map_err(|e| RequestError::InvalidRequest(format!("bad path: {e}")))?
        }
    };
    let body = if parts.method == Method::GET { bytes::Bytes::new() } else { read_body(state, body).await? };
    let cfg = &state.pools.ctx().config;
    // A light request of one query may go to the worker merged with others (`routing::coalesce`).
    // A protocol inference too short to be heavy is read here once, for both its cost (its
    // texts) and a merge; a longer one is read for a merge only once its cost says it is light.
    let may_merge_oip = state.coalesce && parts.method == Method::POST;
    let light = super::cost::light_by_length(cfg, &body);
    let call = match target {
        Target::Oip(path) if may_merge_oip && light => super::single::oip_request(path, &parts.headers, &body),
        _ => None,
    };
    let cost = match target {
        Target::Predict => super::cost::estimate(cfg, parts.uri.query(), &body),
        Target::Oip(_) => {
            let texts = call.as_ref().map(|(.., c)| c.texts.len() as u64);
            super::cost::estimate_oip(cfg, &body, texts)
        }
    };
    let single = match target {
        _ if cost.heavy || !state.coalesce => None,
        Target::Predict => super::single::single(&parts.method, parts.uri.query(), &body, cfg.max_query_tokens),
        Target::Oip(_) if light => {
            call.and_then(|(model, version, c)| super::single::oip_call(model, version, c, cfg.max_query_tokens, None))
        }
        Target::Oip(path) if may_merge_oip => super::single::oip(path, &parts.headers, &body, cfg.max_query_tokens),
        _ => None,
    };
    Ok(ClientRequest {
        method: parts.method,
        path_and_query,
        content_type: parts.headers.get(header::CONTENT_TYPE).cloned(),
        headers,
        span,
        body,
        cost,
        single,
    })
}

/// A request's body, whole, under `--max-body-bytes` and the client listener's deadline and
/// budget of bodies held: 413 too large, 408 not in time, 400 malformed (as the worker), 503
/// budget spent. Without the listener's reader (handlers called directly in tests), under
/// `--max-body-bytes` only.
async fn read_body<B>(state: &AppState, body: B) -> Result<bytes::Bytes, RequestError>
where
    B: HttpBody<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + std::fmt::Display,
{
    let cfg = &state.pools.ctx().config;
    let max_body = cfg.max_body_bytes;
    match &state.bodies {
        Some(bodies) => bodies
            .collect(body, max_body)
            .await
            .map_err(|error| RequestError::Body { error, retry_after_s: cfg.retry_after_s }),
        None => {
            Ok(Limited::new(body, max_body).collect().await.map_err(|_| RequestError::TooLarge(max_body))?.to_bytes())
        }
    }
}

/// The worker's answer as the client gets it: status, `Content-Type`, `Retry-After`, body. The
/// body keeps its charge in the budget of answers held until hyper has written and dropped it.
fn response(a: Answer) -> Response {
    let body = match a.charge {
        Some(charge) => Body::new(Charged { body: http_body_util::Full::new(a.body), _charge: charge }),
        None => Body::from(a.body),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = a.status;
    if let Some(v) = a.content_type {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    if let Some(v) = a.retry_after {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// An answer's body with its charge in the answer budget, given back when the body is dropped.
struct Charged {
    body: http_body_util::Full<bytes::Bytes>,
    _charge: crate::upstream::Charge,
}

impl HttpBody for Charged {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predict_routes_and_only_those() {
        assert_eq!(route("/predict"), Some(Route::Default));
        assert_eq!(route("/pools/big/predict"), Some(Route::Pool("big".into())));
        assert_eq!(route("/pools/my%20pool/predict"), Some(Route::Pool("my pool".into())));
        for other in ["/predict/", "/pools//predict", "/pools/a/b/predict", "/pools/big/predict/", "/v1/signal", "/"] {
            assert_eq!(route(other), None, "{other}");
        }
        let oip =
            |pool: Option<&str>, path: &str| Some(Route::Oip { pool: pool.map(str::to_owned), path: path.into() });
        assert_eq!(route("/v2/models/m/infer"), oip(None, "/v2/models/m/infer"));
        assert_eq!(route("/pools/big/v2/models/m/versions/1/ready"), oip(Some("big"), "/v2/models/m/versions/1/ready"));
        assert_eq!(route("/pools/my%20pool/v2/models/m"), oip(Some("my pool"), "/v2/models/m"));
        for other in ["/v2", "/v2/health/ready", "/pools/big/v2", "/pools//v2/models/m", "/v2/modelsx"] {
            assert_eq!(route(other), None, "{other}");
        }
    }
}
