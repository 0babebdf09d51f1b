//! The gateway's gRPC listener (`--grpc-listen`): the Open Inference Protocol's
//! `inference.GRPCInferenceService` ([`infer`], through the predict entry) and KEDA's
//! `externalscaler.ExternalScaler` ([`keda`]).
//!
//! Hygiene, as the HTTP listeners': at most `--max-connections` connections (one past it is
//! closed at once, [`capped`]), messages up to `--max-body-bytes` (RESOURCE_EXHAUSTED past it),
//! at most 1024 concurrent streams a connection, HTTP/2 keep-alive pings (a dead peer is
//! dropped). A model call is bounded as a REST request is (`--request-timeout`, inside the
//! predict entry) and by the client's own deadline; KEDA's streams stay open by design.

mod capped;
pub(crate) mod infer;
pub(crate) mod keda;

use std::future::Future;
use std::time::Duration;

use oip::pb::grpc_inference_service_server::GrpcInferenceServiceServer;
use tokio::net::TcpListener;

use crate::http::AppState;
use keda::pb::external_scaler_server::ExternalScalerServer;

/// Most concurrent streams on one HTTP/2 connection.
const MAX_STREAMS: u32 = 1024;

/// Serve both services on `tcp` until `shutdown` resolves, then finish the calls in flight.
pub(crate) async fn serve(
    tcp: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let cfg = &state.pools.ctx().config;
    let max = cfg.max_body_bytes;
    let incoming = capped::Incoming::new(tcp, cfg.listener.max_connections);
    let infer = GrpcInferenceServiceServer::new(infer::Service(state.clone()))
        .max_decoding_message_size(max)
        .max_encoding_message_size(max.max(4 << 20));
    let scaler = ExternalScalerServer::new(keda::Scaler { pools: state.pools.clone() }).max_decoding_message_size(max);
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .max_concurrent_streams(Some(MAX_STREAMS))
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .add_service(infer)
        .add_service(scaler)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
