//! The Open Inference Protocol v2 over gRPC (`inference.GRPCInferenceService`), on its own
//! listener (`--grpc-listen`): the same model, checks and core as the REST routes
//! (`http::oip`), answered in raw contents as Triton's clients read them. Errors carry gRPC
//! codes (`oip::status`): overload and draining are RESOURCE_EXHAUSTED and UNAVAILABLE with the
//! worker's retry advice. Served on hyper's HTTP/2 server under the HTTP listener's limits
//! (`listener::h2`, as the gateway's gRPC port): a message over `--max-body-bytes` is
//! RESOURCE_EXHAUSTED, refused at its prefix.

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use hyper_util::rt::{TokioExecutor, TokioIo};

use oip::InferCall;
use oip::pb::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use oip::pb::{
    ModelConfigRequest, ModelConfigResponse, ModelInferRequest, ModelInferResponse, ModelMetadataRequest,
    ModelMetadataResponse, ModelReadyRequest, ModelReadyResponse, ServerLiveRequest, ServerLiveResponse,
    ServerMetadataRequest, ServerMetadataResponse, ServerReadyRequest, ServerReadyResponse,
};
use tokio::sync::watch;
use tonic::service::Routes;
use tonic::{Request, Response, Status};
use tower::Service as _;

use crate::core::CoreError;
use crate::http::oip::{self as rest, SERVER_NAME};
use crate::http::{AppState, RETRY_AFTER_S};

/// The service: the worker's state.
#[derive(Debug, Clone)]
pub struct Service(pub AppState);

/// A core error as a gRPC status.
pub fn core_status(e: &CoreError) -> Status {
    let retry = matches!(e, CoreError::Overloaded | CoreError::Draining).then(|| Duration::from_secs(RETRY_AFTER_S));
    if let CoreError::Internal(detail) = e {
        tracing::error!(%detail, "internal error");
        return Status::internal("internal error");
    }
    oip::status::status(e.error_type(), e.to_string(), retry)
}

fn version(v: &str) -> Option<&str> {
    Some(v).filter(|v| !v.is_empty())
}

#[tonic::async_trait]
impl GrpcInferenceService for Service {
    async fn server_live(&self, _: Request<ServerLiveRequest>) -> Result<Response<ServerLiveResponse>, Status> {
        Ok(Response::new(ServerLiveResponse { live: true }))
    }

    async fn server_ready(&self, _: Request<ServerReadyRequest>) -> Result<Response<ServerReadyResponse>, Status> {
        Ok(Response::new(ServerReadyResponse { ready: rest::is_ready(&self.0) }))
    }

    async fn model_ready(&self, req: Request<ModelReadyRequest>) -> Result<Response<ModelReadyResponse>, Status> {
        // Not ready, rather than an error, for a model or version not served (as the REST
        // route's 404 reads to a client asking whether it is ready).
        let r = req.into_inner();
        let served = rest::check_model(&self.0, &r.name, version(&r.version)).is_ok();
        Ok(Response::new(ModelReadyResponse { ready: served && rest::is_ready(&self.0) }))
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        Ok(Response::new(oip::meta::server_pb(SERVER_NAME)))
    }

    async fn model_metadata(
        &self,
        req: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        let r = req.into_inner();
        rest::check_model(&self.0, &r.name, version(&r.version))?;
        Ok(Response::new(oip::meta::model_pb(&rest::model(&self.0))))
    }

    async fn model_config(&self, req: Request<ModelConfigRequest>) -> Result<Response<ModelConfigResponse>, Status> {
        let r = req.into_inner();
        rest::check_model(&self.0, &r.name, version(&r.version))?;
        Ok(Response::new(oip::meta::config_pb(&rest::model(&self.0))))
    }

    async fn model_infer(&self, req: Request<ModelInferRequest>) -> Result<Response<ModelInferResponse>, Status> {
        let state = &self.0;
        let started = StdInstant::now();
        let req = req.into_inner();
        let checked = rest::check_model(state, &req.model_name, version(&req.model_version))
            .and_then(|()| InferCall::from_pb(req));
        let (n, result) = match checked {
            Ok(mut call) => {
                let n = call.texts.len() as u64;
                let answer = match rest::predict(state, &mut call).await {
                    Ok(p) => oip::answer::pb(&state.model.name, &call, &p).map_err(|e| (e.error_type, Status::from(e))),
                    Err(e) => Err((e.error_type(), core_status(&e))),
                };
                (n, answer)
            }
            Err(e) => (0, Err((e.error_type, Status::from(e)))),
        };
        let outcome = result.as_ref().map_or_else(|(t, _)| t.as_str(), |_| "ok");
        state.metrics.observe_request(outcome, n, started.elapsed().as_secs_f64());
        result.map(Response::new).map_err(|(_, s)| s)
    }
}

/// Serves the service on `incoming`'s connections under `limits` (`listener::h2`: the HTTP
/// listener's limits) until `shutdown` resolves, then finishes the calls in flight: messages up
/// to `max_message_bytes`, each call at most `timeout` (or the client's deadline, the shorter;
/// past it, DEADLINE_EXCEEDED).
pub async fn serve(
    state: AppState,
    mut incoming: listener::h2::Listener,
    limits: listener::h2::Limits,
    max_message_bytes: usize,
    timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let service = GrpcInferenceServiceServer::new(Service(state))
        .max_decoding_message_size(max_message_bytes)
        .max_encoding_message_size(max_message_bytes.max(4 << 20));
    let routes = Routes::new(service);
    let builder = limits.builder(TokioExecutor::new());
    // Each connection holds a receiver: told to finish at shutdown, and waited for.
    let (stop, stopping) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let conn = tokio::select! {
            () = &mut shutdown => break,
            c = incoming.accept() => c,
        };
        let watch = Arc::new(limits.watch(conn.accepted_at()));
        let io = TokioIo::new(watch.io(conn));
        let svc = {
            let (routes, watch) = (routes.clone(), Arc::clone(&watch));
            hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let (mut routes, watch) = (routes.clone(), Arc::clone(&watch));
                let req = watch.request(req).map(tonic::body::Body::new);
                // Boxed: hyper keeps a stream's task (sized by this future) until its answer has
                // been sent, which a peer that never reads can put off for --idle-timeout.
                Box::pin(async move {
                    let within = call_deadline(req.headers(), timeout);
                    let answer = match tokio::time::timeout(within, routes.call(req)).await {
                        Ok(Ok(answer)) => answer,
                        Ok(Err(never)) => match never {},
                        Err(_) => Status::deadline_exceeded(format!(
                            "the call took longer than {}",
                            humantime::format_duration(within)
                        ))
                        .into_http(),
                    };
                    Ok::<_, Infallible>(watch.answer(listener::h2::compact(answer)))
                })
            })
        };
        let conn = builder.serve_connection(io, svc);
        let mut stopping = stopping.clone();
        tokio::spawn(async move {
            let mut conn = pin!(conn);
            let stopped = async move {
                let _ = stopping.changed().await;
            };
            if let Some(Err(e)) = watch.drive(conn.as_mut(), stopped, |c| c.graceful_shutdown()).await {
                tracing::debug!(error = %e, "grpc connection ended");
            }
        });
    }
    // The listener closes here: no connection is taken once shutdown began.
    drop(incoming);
    let _ = stop.send(());
    drop(stopping);
    stop.closed().await;
}

/// How long a call may take: `timeout`, or the client's deadline (`grpc-timeout`: at most 8
/// digits and a unit, `H`, `M`, `S`, `m`, `u`, `n`) when shorter.
fn call_deadline(headers: &http::HeaderMap, timeout: Duration) -> Duration {
    let client = headers.get("grpc-timeout").and_then(|v| v.to_str().ok()).and_then(listener::h2::parse_grpc_timeout);
    client.map_or(timeout, |c| c.min(timeout))
}

#[cfg(test)]
mod tests {
    use tonic::Code;
    use tonic_types::StatusExt;

    use super::*;

    #[test]
    fn core_errors_map_to_codes_with_retry_advice_for_overload() {
        let s = core_status(&CoreError::Overloaded);
        assert_eq!(s.code(), Code::ResourceExhausted);
        let retry = s.get_details_retry_info().and_then(|r| r.retry_delay);
        assert_eq!(retry, Some(Duration::from_secs(RETRY_AFTER_S)));
        assert_eq!(core_status(&CoreError::Draining).code(), Code::Unavailable);
        assert!(core_status(&CoreError::Draining).get_details_retry_info().is_some());
        assert_eq!(core_status(&CoreError::Timeout(Duration::from_secs(1))).code(), Code::DeadlineExceeded);
        let long = CoreError::QueryTooLong { index: 0, len: 9, limit: 1 };
        assert_eq!(core_status(&long).code(), Code::InvalidArgument);
        let internal = core_status(&CoreError::Internal("secret detail".into()));
        assert_eq!((internal.code(), internal.message()), (Code::Internal, "internal error"));
    }
}
