//! The gateway's gRPC listener (`--grpc-listen`): the Open Inference Protocol's
//! `inference.GRPCInferenceService` ([`infer`], through the predict entry) and KEDA's
//! `externalscaler.ExternalScaler` ([`keda`]).
//!
//! Hygiene, as the HTTP listeners': at most `--max-connections` connections (one past it is
//! closed at once, [`capped`]), messages up to `--max-body-bytes` (RESOURCE_EXHAUSTED past it),
//! at most 1024 concurrent streams a connection, HTTP/2 keep-alive pings (a dead peer is
//! dropped). A model call is bounded as a REST request is (`--request-timeout`, inside the
//! predict entry) and by the client's own deadline; KEDA's streams stay open by design.
//! Optional TLS, and mutual TLS with a client CA ([`tls_config`]): KEDA's external scalers
//! support both (`caCert`, `tlsClientCert`, `tlsClientKey`).

mod capped;
pub(crate) mod infer;
pub(crate) mod keda;

use std::future::Future;
use std::time::Duration;

use oip::pb::grpc_inference_service_server::GrpcInferenceServiceServer;
use tokio::net::TcpListener;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::StartError;
use crate::http::AppState;
use keda::pb::external_scaler_server::ExternalScalerServer;

/// Most concurrent streams on one HTTP/2 connection.
const MAX_STREAMS: u32 = 1024;

/// The listener's TLS (`--grpc-tls-cert-file`, `--grpc-tls-key-file`) and client verification
/// (`--grpc-tls-client-ca-file`), if asked for; read once, at start.
pub(crate) fn tls_config(cfg: &crate::Config) -> Result<Option<ServerTlsConfig>, StartError> {
    let (Some(cert), Some(key)) = (&cfg.grpc_tls_cert_file, &cfg.grpc_tls_key_file) else {
        return Ok(None);
    };
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| StartError::Config(format!("gRPC TLS: reading {}: {e}", p.display())))
    };
    let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(read(cert)?, read(key)?));
    if let Some(ca) = &cfg.grpc_tls_client_ca_file {
        tls = tls.client_ca_root(Certificate::from_pem(read(ca)?));
    }
    Ok(Some(tls))
}

/// Serve both services on `tcp` until `shutdown` resolves, then finish the calls in flight.
pub(crate) async fn serve(
    tcp: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartError> {
    let cfg = &state.pools.ctx().config;
    let max = cfg.max_body_bytes;
    let incoming = capped::Incoming::new(tcp, cfg.listener.max_connections);
    let infer = GrpcInferenceServiceServer::new(infer::Service(state.clone()))
        .max_decoding_message_size(max)
        .max_encoding_message_size(max.max(4 << 20));
    let scaler = ExternalScalerServer::new(keda::Scaler { pools: state.pools.clone() }).max_decoding_message_size(max);
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls_config(cfg)? {
        builder = builder.tls_config(tls).map_err(|e| StartError::Config(format!("gRPC TLS: {e}")))?;
    }
    // TCP_NODELAY is set by `capped::Incoming` (tonic's `tcp_nodelay` does not reach it).
    builder
        .max_concurrent_streams(Some(MAX_STREAMS))
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .add_service(infer)
        .add_service(scaler)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(|e| StartError::Config(format!("grpc: {e}")))
}
