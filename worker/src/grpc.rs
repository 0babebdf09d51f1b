//! The Open Inference Protocol v2 over gRPC (`inference.GRPCInferenceService`), on its own
//! listener (`--grpc-listen`): the same model, checks and core as the REST routes
//! (`http::oip`), answered in raw contents as Triton's clients read them. Errors carry gRPC
//! codes (`oip::status`): overload and draining are RESOURCE_EXHAUSTED and UNAVAILABLE with the
//! worker's retry advice.

use std::future::Future;
use std::time::{Duration, Instant as StdInstant};

use oip::InferCall;
use oip::pb::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use oip::pb::{
    ModelConfigRequest, ModelConfigResponse, ModelInferRequest, ModelInferResponse, ModelMetadataRequest,
    ModelMetadataResponse, ModelReadyRequest, ModelReadyResponse, ServerLiveRequest, ServerLiveResponse,
    ServerMetadataRequest, ServerMetadataResponse, ServerReadyRequest, ServerReadyResponse,
};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

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

/// Serves the service on `tcp` until `shutdown` resolves (then finishes the calls in flight):
/// messages up to `max_message_bytes`, each call at most `timeout` (or the client's deadline,
/// the shorter).
pub async fn serve(
    state: AppState,
    tcp: TcpListener,
    max_message_bytes: usize,
    timeout: Duration,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let service = GrpcInferenceServiceServer::new(Service(state))
        .max_decoding_message_size(max_message_bytes)
        .max_encoding_message_size(max_message_bytes.max(4 << 20));
    tonic::transport::Server::builder()
        .timeout(timeout)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .add_service(service)
        .serve_with_incoming_shutdown(incoming(tcp), shutdown)
        .await
}

/// The connections `tcp` accepts, with TCP_NODELAY: small answers on a connection that carries
/// many calls, which Nagle would otherwise hold back until the client's delayed ACK (40 ms on
/// Linux; measured on the gateway's listener: p99 43 ms at 128 concurrent calls). tonic's own
/// `tcp_nodelay` applies only to a listener it binds, not to an incoming stream.
fn incoming(tcp: TcpListener) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    tokio_stream::StreamExt::map(tokio_stream::wrappers::TcpListenerStream::new(tcp), |conn| {
        conn.inspect(|c| {
            let _ = c.set_nodelay(true);
        })
    })
}

#[cfg(test)]
mod tests {
    use tonic::Code;
    use tonic_types::StatusExt;

    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let mut conns = std::pin::pin!(incoming(tcp));
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let conn = futures::StreamExt::next(&mut conns).await.unwrap().unwrap();
        assert!(conn.nodelay().unwrap(), "TCP_NODELAY on the accepted connection");
    }

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
