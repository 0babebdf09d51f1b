//! `/predict`: validate, admit, tokenize, queue, await the batch, answer.

use std::collections::BTreeMap;
use std::time::Instant as StdInstant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, RawQuery, State};
use axum::response::{IntoResponse, Response};
use futures::future::try_join_all;
use tokio::sync::oneshot;
use tokio::time::Instant;
use wire::{PredictBatchResponse, PredictParams, PredictRequest, Prediction};

use super::AppState;
use super::error::ApiError;
use crate::batching::Entry;

/// Requests with at most this many bytes of queries are tokenized on the runtime thread.
const INLINE_TOKENIZE_BYTES: usize = 512;

/// A parsed `/predict` call.
#[derive(Debug)]
struct Call {
    queries: Vec<String>,
    /// `{"queries": [...]}`: answer with a list even for one query.
    batch: bool,
    all_scores: bool,
}

pub async fn get(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
    params: Result<Query<PredictParams>, QueryRejection>,
) -> Response {
    let call = check_utf8(raw.as_deref().unwrap_or_default())
        .and(params.map_err(|e| ApiError::Invalid(format!("bad query string: {}", e.body_text()))))
        .and_then(|Query(p)| {
            let query = p.query.ok_or_else(|| ApiError::Invalid("missing `query` parameter".into()))?;
            Ok(Call { queries: vec![query], batch: false, all_scores: p.all_scores })
        });
    respond(state, call).await
}

pub async fn post(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    let limit = state.limits.max_body_bytes;
    let call = body.map_err(|e| body_error(&e, limit)).and_then(|b| parse_body(&b));
    respond(state, call).await
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

fn body_error(e: &BytesRejection, limit: usize) -> ApiError {
    if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::BodyTooLarge { limit }
    } else {
        ApiError::Invalid(format!("could not read the body: {}", e.body_text()))
    }
}

fn parse_body(body: &[u8]) -> Result<Call, ApiError> {
    let req: PredictRequest =
        serde_json::from_slice(body).map_err(|e| ApiError::Invalid(format!("body is not a valid request: {e}")))?;
    match (req.query, req.queries) {
        (Some(q), None) => Ok(Call { queries: vec![q], batch: false, all_scores: req.all_scores }),
        (None, Some(qs)) => Ok(Call { queries: qs, batch: true, all_scores: req.all_scores }),
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

fn validate(state: &AppState, call: &Call) -> Result<(), ApiError> {
    let limits = &state.limits;
    if call.queries.is_empty() {
        return Err(ApiError::Invalid("`queries` is empty".into()));
    }
    if call.queries.len() > limits.max_queries {
        return Err(ApiError::Invalid(format!(
            "{} queries in one request; the limit is {}",
            call.queries.len(),
            limits.max_queries
        )));
    }
    for (index, q) in call.queries.iter().enumerate() {
        if q.trim().is_empty() {
            return Err(ApiError::Invalid(format!("query {index} is empty")));
        }
        if q.len() > limits.max_query_bytes {
            return Err(ApiError::QueryTooLong { index, len: q.len(), limit: limits.max_query_bytes });
        }
    }
    Ok(())
}

async fn predict(state: &AppState, call: Call) -> Result<Response, ApiError> {
    if state.is_draining() {
        return Err(ApiError::Draining);
    }
    validate(state, &call)?;
    let n = call.queries.len();
    let Some(_permit) = state.load.try_admit(n) else {
        state.stats.rejected(Instant::now(), n as u64);
        return Err(ApiError::Overloaded);
    };
    let admitted_at = Instant::now();
    state.stats.admitted(admitted_at, n as u64);
    let timeout = state.limits.request_timeout;
    let answers = tokio::time::timeout(timeout, run(state, &call.queries, admitted_at))
        .await
        .map_err(|_| ApiError::Timeout(timeout.as_secs_f64()))??;
    state.stats.completed(Instant::now(), n as u64);

    let predictions: Vec<Prediction> =
        answers.into_iter().map(|probs| state.prediction(&probs, call.all_scores)).collect();
    Ok(if call.batch {
        Json(PredictBatchResponse { predictions }).into_response()
    } else {
        Json(predictions.into_iter().next().expect("one query")).into_response()
    })
}

/// Tokenizes (inline when short, on the blocking pool otherwise), queues every query, and waits
/// for all answers.
async fn run(state: &AppState, queries: &[String], admitted_at: Instant) -> Result<Vec<Vec<f32>>, ApiError> {
    let encode = |tokenizer: &tokenizers::Tokenizer, qs: &[String]| {
        qs.iter().map(|q| tokenizer.encode(q.as_str(), true)).collect::<Result<Vec<_>, _>>()
    };
    // A short request tokenizes in tens of microseconds: inline is cheaper than a thread hand-off.
    // Longer ones go to the blocking pool so they never stall the runtime.
    let encodings = if queries.iter().map(String::len).sum::<usize>() <= INLINE_TOKENIZE_BYTES {
        encode(&state.tokenizer, queries)
    } else {
        let tokenizer = state.tokenizer.clone();
        let owned = queries.to_vec();
        tokio::task::spawn_blocking(move || encode(&tokenizer, &owned))
            .await
            .map_err(|e| ApiError::Internal(format!("tokenizer task: {e}")))?
    }
    .map_err(|e| ApiError::Invalid(format!("could not tokenize: {e}")))?;

    let span = tracing::Span::current();
    let mut receivers = Vec::with_capacity(encodings.len());
    for enc in encodings {
        let (respond, rx) = oneshot::channel();
        let entry = Entry {
            input_ids: enc.get_ids().iter().map(|&i| i64::from(i)).collect(),
            type_ids: enc.get_type_ids().iter().map(|&i| i64::from(i)).collect(),
            admitted_at,
            respond,
            span: span.clone(),
        };
        // The queue holds as many entries as there are admission permits, so this never waits.
        state.queue.try_send(entry).map_err(|e| ApiError::Internal(format!("queue: {e}")))?;
        receivers.push(rx);
    }
    let answers =
        try_join_all(receivers).await.map_err(|_| ApiError::Internal("the backend dropped a query".into()))?;
    answers.into_iter().map(|a| a.map_err(|e| ApiError::Internal(e.to_string()))).collect()
}

impl AppState {
    fn prediction(&self, probs: &[f32], all_scores: bool) -> Prediction {
        let (best, score) = probs.iter().copied().enumerate().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap_or((0, 0.0));
        let scores =
            all_scores.then(|| self.labels.iter().cloned().zip(probs.iter().copied()).collect::<BTreeMap<_, _>>());
        Prediction { intent: self.labels[best].clone(), score, scores }
    }
}
