//! `/predict`: parse the query string or the body, hand the queries to the core, answer.

use std::cell::RefCell;
use std::time::Instant as StdInstant;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use smallvec::smallvec;
use wire::{PredictBatchResponse, PredictParams, PredictRequest};

use super::AppState;
use super::error::ApiError;
use crate::core::{Detail, Queries};

/// A parsed `/predict` call.
#[derive(Debug, PartialEq)]
pub struct Call {
    pub queries: Queries,
    /// `{"queries": [...]}`: answer with a list even for one query.
    pub batch: bool,
    pub all_scores: bool,
}

pub async fn get(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Response {
    get_query(state, raw.as_deref()).await
}

/// `GET /predict` given its query string (what `RawQuery` extracts).
pub async fn get_query(state: AppState, raw: Option<&str>) -> Response {
    let call = parse_query(raw.unwrap_or_default());
    respond(state, call).await
}

pub async fn post(State(state): State<AppState>, body: Body) -> Response {
    let call = read_body(&state, body).await.and_then(|b| parse_body(&b));
    respond(state, call).await
}

/// The whole body, under the listener's deadline and budget when served by it.
pub(super) async fn read_body(state: &AppState, body: Body) -> Result<Bytes, ApiError> {
    let limit = state.max_body_bytes;
    if let Some(bodies) = state.bodies.get() {
        return bodies.collect(body, limit).await.map_err(ApiError::Body);
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(ApiError::BodyTooLarge { limit }),
        Err(e) => Err(ApiError::Invalid(format!("could not read the body: {e}"))),
    }
}

/// A `GET /predict` query string (what follows `?`, still percent-encoded), decoded as axum's
/// `Query` decodes it, but refusing invalid UTF-8 instead of replacing it.
pub fn parse_query(raw: &str) -> Result<Call, ApiError> {
    match parse_lone_query(raw) {
        Some(call) => Ok(call),
        None => parse_query_general(raw),
    }
}

/// The usual query string, `query=VALUE` and nothing else, decoded in one pass as the form
/// decoder decodes it (`+` is a space, `%` and two hex digits a byte, any other `%` itself).
/// `None` for any other shape, or a value that is not UTF-8 once decoded: the general path
/// parses or refuses those, and answers as before. Same call as the general path whenever it
/// gives one (`lone_queries_parse_as_the_general_path_parses_them` below), without its check
/// pass, its form parser's copies and lossy decoding, or serde, which were a large share of the
/// worker's own instructions per request.
fn parse_lone_query(raw: &str) -> Option<Call> {
    let query = wire::decode_lone_query(raw)?;
    Some(Call { queries: smallvec![query], batch: false, all_scores: false })
}

/// Any query string: checked for UTF-8, then parsed by the form decoder.
fn parse_query_general(raw: &str) -> Result<Call, ApiError> {
    check_utf8(raw)?;
    let p: PredictParams =
        serde_urlencoded::from_str(raw).map_err(|e| ApiError::Invalid(format!("bad query string: {e}")))?;
    let query = p.query.ok_or_else(|| ApiError::Invalid("missing `query` parameter".into()))?;
    Ok(Call { queries: smallvec![query], batch: false, all_scores: p.all_scores })
}

/// The form decoder replaces invalid UTF-8 silently; a query must not change meaning that way.
fn check_utf8(raw: &str) -> Result<(), ApiError> {
    for part in raw.split('&') {
        if percent_encoding::percent_decode_str(part).decode_utf8().is_err() {
            return Err(ApiError::Invalid("the query string is not valid UTF-8".into()));
        }
    }
    Ok(())
}

/// A `POST /predict` body.
pub fn parse_body(body: &[u8]) -> Result<Call, ApiError> {
    // serde's derived `Deserialize` also reads a struct from a JSON array (`["jazz"]` would be
    // `{"query": "jazz"}`): the body must be an object, as documented.
    if body.iter().find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r')) != Some(&b'{') {
        return Err(ApiError::Invalid("body is not a valid request: expected a JSON object".into()));
    }
    let req: PredictRequest =
        serde_json::from_slice(body).map_err(|e| ApiError::Invalid(format!("body is not a valid request: {e}")))?;
    match (req.query, req.queries) {
        (Some(q), None) => Ok(Call { queries: smallvec![q], batch: false, all_scores: req.all_scores }),
        (None, Some(qs)) => Ok(Call { queries: Queries::from_vec(qs), batch: true, all_scores: req.all_scores }),
        (Some(_), Some(_)) => Err(ApiError::Invalid("give `query` or `queries`, not both".into())),
        (None, None) => Err(ApiError::Invalid("missing `query` or `queries`".into())),
    }
}

async fn respond(state: AppState, call: Result<Call, ApiError>) -> Response {
    let started = StdInstant::now();
    let n = call.as_ref().map_or(0, |c| c.queries.len()) as u64;
    let result = match call {
        Ok(call) => predict(&state, call).await,
        Err(e) => Err(e),
    };
    let outcome = result.as_ref().map_or_else(|e| e.error_type().as_str(), |_| "ok");
    state.metrics.observe_request(outcome, n, started.elapsed().as_secs_f64());
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn predict(state: &AppState, call: Call) -> Result<Response, ApiError> {
    let detail = Detail { all_scores: call.all_scores, logits: false };
    let predictions = state.core.predict(call.queries, detail).await?;
    if call.batch {
        return Ok(json(PredictBatchResponse { predictions: predictions.into_vec() }));
    }
    let one = predictions.into_iter().next().ok_or_else(|| ApiError::Internal("no prediction for the query".into()))?;
    Ok(json(one))
}

/// The answer `Json(value).into_response()` gives (the same body and headers), built directly:
/// axum's builds a response with an `application/octet-stream` content type and then replaces
/// it, through a `BytesMut` writer. The JSON is written into this thread's reused buffer and
/// copied out at its exact length: one allocation, where a body made from a growing `Vec` takes
/// one for the `Vec` and, as its length is not its capacity, one more for the `Bytes`.
fn json<T: serde::Serialize>(value: T) -> Response {
    thread_local! {
        static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    /// A buffer grown past this (a large batch's answer) is not kept.
    const KEEP: usize = 64 * 1024;
    let body = BUFFER.with_borrow_mut(|buffer| {
        buffer.clear();
        let body = serde_json::to_writer(&mut *buffer, &value).map(|()| Bytes::copy_from_slice(buffer));
        if buffer.capacity() > KEEP {
            *buffer = Vec::new();
        }
        body
    });
    match body {
        Ok(body) => {
            let mut response = Response::new(Body::from(body));
            response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        // Cannot happen for these types; axum's own answer if it did.
        Err(_) => Json(value).into_response(),
    }
}

#[cfg(test)]
mod tests {
    //! Property tests of the parsers: any query string and any body is parsed or refused as
    //! `invalid_request`, never a panic. `PROPTEST_CASES` sets the number of cases (2,000 by
    //! default; `PROPTEST_CASES=10000000` for the long run in `benches/RESULTS.md`).
    use proptest::prelude::*;
    use wire::ErrorType;

    use super::*;

    fn config() -> ProptestConfig {
        let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(2000);
        ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
    }

    /// Percent-encodes every byte, valid UTF-8 or not.
    fn encode(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("%{b:02X}")).collect()
    }

    pub(crate) fn query_string() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            Just("query".to_owned()),
            Just("all_scores".to_owned()),
            Just("queries".to_owned()),
            Just(String::new()),
            "[a-z_]{1,8}",
        ];
        let value = prop_oneof![
            any::<String>().prop_map(|s| encode(s.as_bytes())),
            prop::collection::vec(any::<u8>(), 0..40).prop_map(|b| encode(&b)),
            "[a-zA-Z0-9+%=&._~-]{0,40}",
            Just("true".to_owned()),
            Just("false".to_owned()),
        ];
        let pairs = prop::collection::vec((key, value), 0..5)
            .prop_map(|ps| ps.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&"));
        prop_oneof![pairs, any::<String>(), "[a-z_=&%0-9A-Fa-f+.]{0,64}"]
    }

    /// Mostly `query=` and a value: percent-encoded bytes (UTF-8 or not), stray `%`s and `+`s,
    /// raw text, a second `=` or parameter; sometimes any query string.
    fn lone_query_string() -> impl Strategy<Value = String> {
        let value = prop_oneof![
            any::<String>().prop_map(|s| encode(s.as_bytes())),
            prop::collection::vec(any::<u8>(), 0..40).prop_map(|b| encode(&b)),
            "[a-zA-Z0-9+%=._~ -]{0,40}",
            "(%[0-9a-fA-FgG+%]{0,2}|[a-z+ ]|%[cC][0-9]|%[eE]2%8[0-9]){0,12}",
            any::<String>(),
            "[a-z&=%0-9]{0,20}",
        ];
        prop_oneof![4 => value.prop_map(|v| format!("query={v}")), 1 => query_string()]
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[ a-z]{0,30}".prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("query".to_owned()),
                        Just("queries".to_owned()),
                        Just("all_scores".to_owned()),
                        any::<String>()
                    ],
                    inner,
                    0..5
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    pub(crate) fn body() -> impl Strategy<Value = Vec<u8>> {
        let nested = (1..2000usize, any::<bool>()).prop_map(|(depth, obj)| {
            let (open, close) = if obj { (r#"{"a":"#, "}") } else { ("[", "]") };
            format!("{}1{}", open.repeat(depth), close.repeat(depth)).into_bytes()
        });
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
            json_value().prop_map(|v| serde_json::to_vec(&serde_json::json!({"query": v})).unwrap()),
            json_value()
                .prop_map(|v| serde_json::to_vec(&serde_json::json!({"queries": v, "all_scores": true})).unwrap()),
            prop::collection::vec(any::<String>(), 0..6)
                .prop_map(|qs| serde_json::to_vec(&serde_json::json!({"queries": qs})).unwrap()),
            nested,
        ]
    }

    #[tokio::test]
    async fn json_answers_are_axums() {
        let one = || wire::Prediction { intent: "PlayMusic".into(), score: 0.75, scores: None, logits: None };
        let all = wire::Prediction { scores: Some([("A".to_owned(), 0.25), ("B\"".to_owned(), 0.75)].into()), ..one() };
        let batch = || PredictBatchResponse { predictions: vec![one(), all.clone()] };
        // Past the reused buffer's kept size (then dropped), and a small one after it.
        let big = || PredictBatchResponse { predictions: vec![all.clone(); 2000] };
        let pairs = [
            (json(one()), Json(one()).into_response()),
            (json(batch()), Json(batch()).into_response()),
            (json(big()), Json(big()).into_response()),
            (json(one()), Json(one()).into_response()),
        ];
        for (ours, axums) in pairs {
            assert_eq!(ours.status(), axums.status());
            assert_eq!(ours.headers(), axums.headers());
            let body = |r: Response| axum::body::to_bytes(r.into_body(), usize::MAX);
            assert_eq!(body(ours).await.unwrap(), body(axums).await.unwrap());
        }
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_query_string_is_one_query_or_invalid_request(raw in query_string()) {
            match parse_query(&raw) {
                Ok(call) => {
                    prop_assert_eq!(call.queries.len(), 1);
                    prop_assert!(!call.batch);
                }
                Err(e) => prop_assert_eq!(e.error_type(), ErrorType::InvalidRequest, "{}", e),
            }
        }

        #[test]
        fn any_body_is_a_call_or_invalid_request(body in body()) {
            match parse_body(&body) {
                Ok(call) => {
                    let v: serde_json::Value = serde_json::from_slice(&body).expect("accepted bodies are JSON");
                    let expected = match &v["queries"] {
                        serde_json::Value::Array(qs) => qs.len(),
                        _ => 1,
                    };
                    prop_assert_eq!(call.queries.len(), expected);
                }
                Err(e) => prop_assert_eq!(e.error_type(), ErrorType::InvalidRequest, "{}", e),
            }
        }

        #[test]
        fn a_json_array_is_not_a_request(v in json_value()) {
            let body = serde_json::to_vec(&serde_json::Value::Array(vec![v])).unwrap();
            prop_assert_eq!(parse_body(&body).map(|c| c.queries).unwrap_err().error_type(), ErrorType::InvalidRequest);
        }

        #[test]
        fn lone_queries_parse_as_the_general_path_parses_them(raw in lone_query_string()) {
            let general = parse_query_general(&raw);
            match parse_lone_query(&raw) {
                Some(call) => prop_assert_eq!(Some(call), general.ok()),
                // Only a query string of another shape, or one the general path refuses.
                None => prop_assert!(raw.contains('&') || !raw.starts_with("query=") || general.is_err(), "{}", raw),
            }
        }

        #[test]
        fn encoded_queries_come_back_unchanged(q in any::<String>(), all in any::<bool>()) {
            let raw = format!("all_scores={all}&query={}", encode(q.as_bytes()));
            let call = parse_query(&raw).unwrap();
            prop_assert_eq!(call, Call { queries: smallvec![q.clone()], batch: false, all_scores: all });
            let body = serde_json::to_vec(&serde_json::json!({"queries": [q.clone(), q.clone()]})).unwrap();
            prop_assert_eq!(parse_body(&body).unwrap().queries.into_vec(), vec![q.clone(), q]);
        }
    }
}
