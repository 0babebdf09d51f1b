//! The gateway's gRPC listener (`--grpc-listen`): the Open Inference Protocol's
//! `inference.GRPCInferenceService` ([`infer`], through the predict entry) and KEDA's
//! `externalscaler.ExternalScaler` ([`keda`]), on hyper's HTTP/2 server ([`server`]:
//! `ModelInfer` answered there directly, every other call through tonic's router).
//!
//! Hygiene, the HTTP listener's (`listener::h2`, `listener/README.md`): `--max-connections`
//! and the per-address cap, the preface within `--header-read-timeout`, messages up to
//! `--max-body-bytes` (RESOURCE_EXHAUSTED at the prefix past it) drawn from the client port's
//! budget of bodies held, bodies within `--body-read-timeout`, a bound on concurrent streams a
//! connection, a connection whose answers go unread for `--idle-timeout` closed, HTTP/2
//! keep-alive pings (a dead peer is dropped). A model call is bounded as a REST request is
//! (`--request-timeout`, inside the predict entry) and by the client's own deadline; KEDA's
//! streams stay open by design, at most [`keda::MAX_STREAMS`] at once.
//! Optional TLS, and mutual TLS with a client CA ([`tls_config`]): KEDA's external scalers
//! support both (`caCert`, `tlsClientCert`, `tlsClientKey`).

pub(crate) mod infer;
pub(crate) mod keda;
mod local;
mod server;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;

use oip::pb::grpc_inference_service_server::GrpcInferenceServiceServer;
use rustls::RootCertStore;
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::sign::SingleCertAndKey;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tonic::service::Routes;

use crate::StartError;
use crate::http::AppState;
use keda::pb::external_scaler_server::ExternalScalerServer;

/// The listener's TLS (`--grpc-tls-cert-file`, `--grpc-tls-key-file`) and client verification
/// (`--grpc-tls-client-ca-file`: a client must present a certificate the CA signed), if asked
/// for; read once, at start. HTTP/2 only (ALPN `h2`).
pub(crate) fn tls_config(cfg: &crate::Config) -> Result<Option<Arc<ServerConfig>>, StartError> {
    let (Some(cert), Some(key)) = (&cfg.grpc_tls_cert_file, &cfg.grpc_tls_key_file) else {
        return Ok(None);
    };
    let bad = |e: String| StartError::Config(format!("gRPC TLS: {e}"));
    let provider = metrics_api::tls_provider();
    let pair = metrics_api::read_tls_pair(cert, key, &provider).map_err(bad)?;
    let versions = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?;
    let verified = match &cfg.grpc_tls_client_ca_file {
        Some(ca) => {
            let pem = std::fs::read(ca).map_err(|e| bad(format!("reading {}: {e}", ca.display())))?;
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&pem) {
                roots.add(c.map_err(|e| bad(format!("{}: {e}", ca.display())))?).map_err(|e| bad(e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| bad(format!("{}: {e}", ca.display())))?;
            versions.with_client_cert_verifier(verifier)
        }
        None => versions.with_no_client_auth(),
    };
    let mut tls = verified.with_cert_resolver(Arc::new(SingleCertAndKey::from(Arc::new(pair))));
    tls.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Some(Arc::new(tls)))
}

/// Serve both services on `tcp` until `shutdown` resolves, then finish the calls in flight.
pub(crate) async fn serve(
    tcp: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartError> {
    let tls = tls_config(&state.pools.ctx().config)?;
    serve_on(incoming(tcp, &state), tls, state, shutdown).await;
    Ok(())
}

/// The gRPC port's accept loop on `tcp`, under the client port's flags (each port its own
/// connections). The per-core runtime makes one, then a sibling of it for each other core's
/// socket (`listener::h2::Listener::sibling`: the caps stay the process's).
pub(crate) fn incoming(tcp: TcpListener, state: &AppState) -> listener::h2::Listener {
    listener::h2::Listener::new(tcp, &state.listener_config(), state.grpc_listener().clone())
}

/// Serve both services on `incoming`'s connections (with `tls`, [`tls_config`]'s) until
/// `shutdown` resolves, then finish the calls in flight.
pub(crate) async fn serve_on(
    mut incoming: listener::h2::Listener,
    tls: Option<Arc<ServerConfig>>,
    state: AppState,
    shutdown: impl Future<Output = ()>,
) {
    let cfg = &state.pools.ctx().config;
    let max = cfg.max_body_bytes;
    let tls = tls.map(TlsAcceptor::from);
    let infer = GrpcInferenceServiceServer::new(infer::Service(state.clone()))
        .max_decoding_message_size(max)
        .max_encoding_message_size(max.max(4 << 20));
    let scaler = ExternalScalerServer::new(keda::Scaler::new(state.pools.clone())).max_decoding_message_size(max);
    // The client port's limits: the same flags, each port its own connections.
    let listener_cfg = state.listener_config();
    let limits = listener::h2::Limits::new(&listener_cfg, state.body_reader().clone(), max, state.grpc_listener());
    let calls = Arc::new(server::Calls {
        infer: infer::Service(state.clone()),
        routes: Routes::new(infer).add_service(scaler),
        max_message: max,
        call_tasks: cfg.grpc_call_tasks,
        panics: Arc::new(state.panics().clone()),
        limits,
    });
    // Each connection holds a receiver: told to finish at shutdown, and waited for.
    let (stop, stopping) = watch::channel(());
    {
        let mut shutdown = pin!(shutdown);
        loop {
            let conn = tokio::select! {
                () = &mut shutdown => break,
                c = incoming.accept() => c,
            };
            let mut stopping = stopping.clone();
            let stopped = async move {
                let _ = stopping.changed().await;
            };
            tokio::spawn(server::connection(conn, tls.clone(), Arc::clone(&calls), stopped));
        }
    }
    // The listener closes here: no connection is taken once shutdown began.
    drop(incoming);
    let _ = stop.send(());
    drop(stopping);
    stop.closed().await;
}
