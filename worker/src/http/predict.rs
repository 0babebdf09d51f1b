//! `/predict`: parse the query string or the body, hand the queries to the core, answer.

use std::time::Instant as StdInstant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, RawQuery, State};
use axum::response::{IntoResponse, Response};
use wire::{PredictBatchResponse, PredictParams, PredictRequest};

use super::AppState;
use super::error::ApiError;

/// A parsed `/predict` call.
#[derive(Debug, PartialEq)]
pub struct Call {
    pub queries: Vec<String>,
    /// `{"queries": [...]}`: answer with a list even for one query.
    pub batch: bool,
    pub all_scores: bool,
}

pub async fn get(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
    params: Result<Query<PredictParams>, QueryRejection>,
) -> Response {
    let call = parse_query(raw.as_deref().unwrap_or_default(), params);
    respond(state, call).await
}

pub async fn post(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    let limit = state.max_body_bytes;
    let call = body.map_err(|e| body_error(&e, limit)).and_then(|b| parse_body(&b));
    respond(state, call).await
}

/// A `GET /predict` query string, already decoded by axum's `Query` into `params`.
pub fn parse_query(raw: &str, params: Result<Query<PredictParams>, QueryRejection>) -> Result<Call, ApiError> {
    check_utf8(raw)?;
    let Query(p) = params.map_err(|e| ApiError::Invalid(format!("bad query string: {}", e.body_text())))?;
    let query = p.query.ok_or_else(|| ApiError::Invalid("missing `query` parameter".into()))?;
    Ok(Call { queries: vec![query], batch: false, all_scores: p.all_scores })
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

/// A `POST /predict` body.
pub fn parse_body(body: &[u8]) -> Result<Call, ApiError> {
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

async fn predict(state: &AppState, call: Call) -> Result<Response, ApiError> {
    let predictions = state.core.predict(call.queries, call.all_scores).await?;
    if call.batch {
        return Ok(Json(PredictBatchResponse { predictions }).into_response());
    }
    let one = predictions.into_iter().next().ok_or_else(|| ApiError::Internal("no prediction for the query".into()))?;
    Ok(Json(one).into_response())
}
