//! The Open Inference Protocol v2 over REST (KServe's `required_api.md`): health, metadata and
//! inference for the one model this worker serves. Parsing and answers are the `oip` crate's;
//! the work is the core's, through the same `predict` as `/predict` (validation, admission,
//! batching, timeouts). Errors are the worker's own answers (`{"error", "error_type"}`, status,
//! `Retry-After`), which is OIP's `{"error": "..."}` with the stable kind beside it.

use std::time::Instant as StdInstant;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use oip::{InferCall, OipError, Output};
use serde_json::json;

use super::AppState;
use super::error::ApiError;
use crate::core::{CoreError, Detail, Queries};

/// What `GET /v2` calls this server.
pub const SERVER_NAME: &str = "inference-worker";

/// Triton's binary tensor data extension: the length of the JSON before the tensors' bytes.
const BINARY_HEADER: &str = "inference-header-content-length";

/// The protocol's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v2", get(server_metadata))
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        .route("/v2/models/{model}", get(model_metadata))
        .route("/v2/models/{model}/versions/{version}", get(model_metadata_version))
        .route("/v2/models/{model}/config", get(model_config))
        .route("/v2/models/{model}/versions/{version}/config", get(model_config_version))
        .route("/v2/models/{model}/ready", get(model_ready))
        .route("/v2/models/{model}/versions/{version}/ready", get(model_ready_version))
        .route("/v2/models/{model}/infer", post(infer))
        .route("/v2/models/{model}/versions/{version}/infer", post(infer_version))
}

impl From<OipError> for ApiError {
    fn from(e: OipError) -> Self {
        match e.error_type {
            wire::ErrorType::NotFound => ApiError::UnknownModel(e.message),
            wire::ErrorType::Internal => ApiError::Internal(e.message),
            _ => ApiError::Invalid(e.message),
        }
    }
}

/// The served model as the protocol names it.
pub fn model(state: &AppState) -> oip::Model {
    oip::Model { name: state.model.name.clone(), labels: state.model.labels.clone() }
}

/// `Ok` when `name` (and `version`, if any) is the served model.
pub fn check_model(state: &AppState, name: &str, version: Option<&str>) -> Result<(), OipError> {
    oip::check_model(&state.model.name, name, version)
}

/// Serving: alive, and not draining (the same answer as `/readyz`).
pub fn is_ready(state: &AppState) -> bool {
    !state.core.is_draining()
}

async fn server_metadata() -> Response {
    Json(oip::meta::server(SERVER_NAME)).into_response()
}

async fn live() -> Response {
    Json(json!({"live": true})).into_response()
}

async fn ready(State(state): State<AppState>) -> Response {
    if is_ready(&state) {
        Json(json!({"ready": true})).into_response()
    } else {
        ApiError::from(CoreError::Draining).into_response()
    }
}

async fn model_metadata(State(state): State<AppState>, Path(name): Path<String>) -> Response {
    metadata(&state, &name, None)
}

async fn model_metadata_version(
    State(state): State<AppState>,
    Path((name, version)): Path<(String, String)>,
) -> Response {
    metadata(&state, &name, Some(&version))
}

fn metadata(state: &AppState, name: &str, version: Option<&str>) -> Response {
    of_model(state, name, version, oip::meta::model)
}

/// `answer` of the served model as JSON once `name` (and `version`) is that model's.
fn of_model<T: serde::Serialize>(
    state: &AppState,
    name: &str,
    version: Option<&str>,
    answer: fn(&oip::Model) -> T,
) -> Response {
    match check_model(state, name, version) {
        Ok(()) => Json(answer(&model(state))).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

async fn model_config(State(state): State<AppState>, Path(name): Path<String>) -> Response {
    configuration(&state, &name, None)
}

async fn model_config_version(
    State(state): State<AppState>,
    Path((name, version)): Path<(String, String)>,
) -> Response {
    configuration(&state, &name, Some(&version))
}

fn configuration(state: &AppState, name: &str, version: Option<&str>) -> Response {
    of_model(state, name, version, oip::meta::config)
}

async fn model_ready(State(state): State<AppState>, Path(name): Path<String>) -> Response {
    readiness(&state, &name, None)
}

async fn model_ready_version(State(state): State<AppState>, Path((name, version)): Path<(String, String)>) -> Response {
    readiness(&state, &name, Some(&version))
}

fn readiness(state: &AppState, name: &str, version: Option<&str>) -> Response {
    match check_model(state, name, version) {
        Ok(()) if is_ready(state) => Json(json!({"name": name, "ready": true})).into_response(),
        Ok(()) => ApiError::from(CoreError::Draining).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

async fn infer(State(state): State<AppState>, Path(name): Path<String>, req: Request) -> Response {
    respond(&state, &name, None, req).await
}

async fn infer_version(
    State(state): State<AppState>,
    Path((name, version)): Path<(String, String)>,
    req: Request,
) -> Response {
    respond(&state, &name, Some(&version), req).await
}

async fn respond(state: &AppState, name: &str, version: Option<&str>, req: Request) -> Response {
    let started = StdInstant::now();
    let (parts, body) = req.into_parts();
    let call = parse(state, name, version, &parts.headers, body).await;
    let n = call.as_ref().map_or(0, |c| c.texts.len()) as u64;
    let result = match call {
        Ok(mut call) => run(state, &mut call).await.map_err(ApiError::from),
        Err(e) => Err(e),
    };
    let outcome = result.as_ref().map_or_else(|e| e.error_type().as_str(), |_| "ok");
    state.metrics.observe_request(outcome, n, started.elapsed().as_secs_f64());
    match result {
        Ok(answer) => ([(axum::http::header::CONTENT_TYPE, "application/json")], answer).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn parse(
    state: &AppState,
    name: &str,
    version: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<InferCall, ApiError> {
    let body = super::predict::read_body(state, body).await?;
    check_model(state, name, version)?;
    match headers.get(BINARY_HEADER) {
        Some(len) => {
            let len = len.to_str().ok().and_then(|v| v.trim().parse().ok()).ok_or_else(|| {
                ApiError::Invalid(format!(
                    "{BINARY_HEADER} is not a length: {:?}",
                    String::from_utf8_lossy(len.as_bytes())
                ))
            })?;
            Ok(InferCall::from_binary(&body, len)?)
        }
        None => Ok(InferCall::from_json(&body)?),
    }
}

/// Runs a checked call through the core, answered as REST (JSON; the gateway makes the same
/// bytes with the same function for a request it merged).
async fn run(state: &AppState, call: &mut InferCall) -> Result<Vec<u8>, RunError> {
    let predictions = predict(state, call).await?;
    Ok(oip::answer::rest_json(&state.model.name, call, &predictions)?)
}

/// The predictions for a checked call, one per text (shared with the gRPC service); the texts
/// are moved out of the call.
pub async fn predict(state: &AppState, call: &mut InferCall) -> Result<Vec<wire::Prediction>, CoreError> {
    let detail = Detail { all_scores: false, logits: call.wants(Output::Logits) };
    let queries = Queries::from_vec(std::mem::take(&mut call.texts));
    Ok(state.core.predict(queries, detail).await?.into_vec())
}

/// Why a checked call was not answered.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Core(#[from] CoreError),
    #[error(transparent)]
    Oip(#[from] OipError),
}

impl From<RunError> for ApiError {
    fn from(e: RunError) -> Self {
        match e {
            RunError::Core(e) => ApiError::Core(e),
            RunError::Oip(e) => e.into(),
        }
    }
}
