//! The gRPC listener (the Open Inference Protocol's service and KEDA's scaler) with TLS and a
//! client CA: a client presenting a certificate the CA signed is served; one presenting none is
//! refused in the handshake. Certificates are made in the test (rcgen).

#[path = "../../metrics-api/tests/support/mod.rs"]
mod metrics_api_support;

use clap::Parser;
use metrics_api_support::{Ca, TempDir, path_str};
use oip::pb::ServerLiveRequest;
use oip::pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

async fn connect(
    addr: std::net::SocketAddr,
    ca: &Ca,
    id: Option<&metrics_api_support::Identity>,
) -> Result<bool, String> {
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&ca.pem)).domain_name("localhost");
    if let Some(id) = id {
        tls = tls.identity(Identity::from_pem(&id.cert_pem, &id.key_pem));
    }
    let channel = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let live = GrpcInferenceServiceClient::new(channel).server_live(ServerLiveRequest {}).await;
    live.map(|r| r.into_inner().live).map_err(|e| e.to_string())
}

#[tokio::test]
async fn mutual_tls_serves_only_clients_the_ca_signed() {
    let dir = TempDir::new("grpc-tls");
    let (server_ca, client_ca) = (Ca::new("server-ca"), Ca::new("keda-clients"));
    let server = server_ca.server();
    let args = [
        "gateway".to_owned(),
        format!("--grpc-tls-cert-file={}", path_str(&dir.write("tls.crt", &server.cert_pem))),
        format!("--grpc-tls-key-file={}", path_str(&dir.write("tls.key", &server.key_pem))),
        format!("--grpc-tls-client-ca-file={}", path_str(&dir.write("ca.crt", &client_ca.pem))),
    ];
    let gw = gateway::build(gateway::Config::try_parse_from(args).unwrap()).await.unwrap();
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    tokio::spawn(async move { gw.serve_grpc(tcp, std::future::pending()).await });

    let keda = client_ca.client("keda", &[]);
    assert_eq!(connect(addr, &server_ca, Some(&keda)).await, Ok(true));
    assert!(connect(addr, &server_ca, None).await.is_err(), "no client certificate");
    let stranger = Ca::new("other").client("mallory", &[]);
    assert!(connect(addr, &server_ca, Some(&stranger)).await.is_err(), "a certificate of another CA");
}

#[test]
fn a_key_without_its_certificate_is_refused() {
    assert!(gateway::Config::try_parse_from(["gateway", "--grpc-tls-key-file=/k"]).is_err());
    assert!(gateway::Config::try_parse_from(["gateway", "--grpc-tls-client-ca-file=/ca"]).is_err());
}
