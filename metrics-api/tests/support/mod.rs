//! Support for the external metrics API tests: certificates made in the test (rcgen), a TLS
//! client that can present one, a mocked kube-apiserver over HTTPS (SubjectAccessReviews and the
//! `extension-apiserver-authentication` ConfigMap, list + watch) reached through a kubeconfig,
//! and the API started in-process over real pools or a fixed set of pools.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tower::ServiceExt;

use metrics_api::{ApiMetrics, MetricsApi, MetricsApiConfig, PoolSource, PoolView};

mod mock_api;

#[allow(unused_imports)] // Not every test that includes the support uses the mock.
pub use mock_api::*;

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let p = std::env::temp_dir().join(format!("gw-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A certificate authority made for the test.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pub pem: String,
}

/// A certificate and its key, PEM.
#[derive(Clone)]
pub struct Identity {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Identity {
    pub fn der(&self) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(self.cert_pem.as_bytes()).unwrap()
    }
}

impl Ca {
    pub fn new(cn: &str) -> Self {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, cn);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let issuer = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
        let pem = issuer.pem();
        Self { issuer, pem }
    }

    fn leaf(&self, sans: &[&str], cn: &str, orgs: &[&str], eku: ExtendedKeyUsagePurpose) -> Identity {
        let mut p = CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        for o in orgs {
            p.distinguished_name.push(DnType::OrganizationName, *o);
        }
        p.extended_key_usages = vec![eku];
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        Identity { cert_pem: cert.pem(), key_pem: key.serialize_pem() }
    }

    /// A client certificate: CN = user, O = groups.
    pub fn client(&self, cn: &str, orgs: &[&str]) -> Identity {
        self.leaf(&[], cn, orgs, ExtendedKeyUsagePurpose::ClientAuth)
    }

    /// A serving certificate for `localhost` and 127.0.0.1.
    pub fn server(&self) -> Identity {
        self.leaf(&["localhost", "127.0.0.1"], "localhost", &[], ExtendedKeyUsagePurpose::ServerAuth)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS client trusting `server_ca`, presenting `identity` if given.
pub fn client_config(server_ca: &Ca, identity: Option<&Identity>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(server_ca.pem.as_bytes()).unwrap()).unwrap();
    let b = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let cfg = match identity {
        Some(id) => b
            .with_client_auth_cert(vec![id.der()], PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap())
            .unwrap(),
        None => b.with_no_client_auth(),
    };
    Arc::new(cfg)
}

/// An answer: status, headers, body as JSON (or a JSON string holding the text).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Value,
    pub raw: Bytes,
}

/// One keep-alive HTTPS connection.
pub struct Conn {
    send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    /// The server's certificate on this connection.
    pub server_cert: CertificateDer<'static>,
    _conn: JoinHandle<()>,
}

impl Conn {
    pub async fn open(addr: SocketAddr, cfg: Arc<rustls::ClientConfig>) -> std::io::Result<Self> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let tls =
            tokio_rustls::TlsConnector::from(cfg).connect(ServerName::try_from("localhost").unwrap(), tcp).await?;
        let server_cert = tls.get_ref().1.peer_certificates().unwrap()[0].clone().into_owned();
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Self { send, server_cert, _conn: conn })
    }

    pub async fn try_get(&mut self, path: &str, headers: &[(&str, &str)]) -> Result<Answer, String> {
        let mut req = Request::get(path).header("host", "localhost");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send.ready().await.map_err(|e| e.to_string())?;
        let resp =
            self.send.send_request(req.body(Full::new(Bytes::new())).unwrap()).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let raw = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        let body = serde_json::from_slice(&raw).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&raw).into()));
        Ok(Answer { status, headers, body, raw })
    }

    /// The status only; the body is read but not parsed (the benchmark's client).
    pub async fn status(&mut self, path: &str) -> Result<StatusCode, String> {
        let req = Request::get(path).header("host", "localhost").body(Full::new(Bytes::new())).unwrap();
        self.send.ready().await.map_err(|e| e.to_string())?;
        let resp = self.send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        resp.into_body().collect().await.map_err(|e| e.to_string())?;
        Ok(status)
    }

    pub async fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> Answer {
        self.try_get(path, headers).await.unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }
}

/// GET on a fresh connection.
pub async fn get_once(
    addr: SocketAddr,
    cfg: &Arc<rustls::ClientConfig>,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    Conn::open(addr, Arc::clone(cfg)).await.expect("connect").get(path, headers).await
}

/// Serve `router` over TLS with `identity` on 127.0.0.1:0.
pub async fn serve_tls(router: Router, identity: &Identity) -> (SocketAddr, JoinHandle<()>) {
    let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes()).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![identity.der()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else { return };
            let (acceptor, router) = (acceptor.clone(), router.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(sock).await else { return };
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let router = router.clone();
                    async move { Ok::<_, Infallible>(router.oneshot(req.map(Body::new)).await.unwrap()) }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), svc).await;
            });
        }
    });
    (addr, task)
}

/// A fixed set of pools (the API's view of the gateway, without one).
pub struct FixedPools(pub Mutex<Vec<PoolView>>);

impl PoolSource for FixedPools {
    fn pools(&self, namespace: &str) -> Vec<PoolView> {
        self.0.lock().unwrap().iter().filter(|p| p.namespace == namespace).cloned().collect()
    }
}

pub fn pool(name: &str, namespace: &str, labels: &[(&str, &str)], signal: f64) -> PoolView {
    let mut l: BTreeMap<String, String> = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    l.insert("pool".to_owned(), name.to_owned());
    PoolView {
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        labels: l,
        signal,
        queue: signal,
        gpu: signal / 2.0,
        ready_workers: 2,
        gpu_memory_used_ratio: Some(0.5),
        stale: false,
        updated_unix_ms: 1_700_000_000_000,
    }
}

/// The API's flags with defaults, listening on 127.0.0.1:0.
pub fn api_config(args: &[&str]) -> MetricsApiConfig {
    use clap::Parser;
    /// The flags as a server flattens them into its command line.
    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        api: MetricsApiConfig,
    }
    let mut all = vec!["server", "--metrics-api-listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    Flags::parse_from(all).api
}

pub async fn start_api(args: &[&str], source: Arc<dyn PoolSource>) -> (MetricsApi, ApiMetrics) {
    let metrics = ApiMetrics::default();
    let api = metrics_api::spawn(&api_config(args), source, metrics.clone())
        .await
        .expect("metrics API starts")
        .expect("enabled");
    (api, metrics)
}

/// Paths of files written for the API.
pub struct Files {
    pub dir: TempDir,
}

impl Files {
    pub fn path(&self, name: &str) -> String {
        self.dir.0.join(name).display().to_string()
    }
}

pub fn path_str(p: &Path) -> String {
    p.display().to_string()
}

/// Accepts any server certificate (to read a self-signed one and compare its fingerprint).
#[derive(Debug)]
pub struct AnyServerCert(pub Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client that trusts any server certificate, presenting `identity`.
pub fn insecure_client_config(identity: &Identity) -> Arc<rustls::ClientConfig> {
    let p = provider();
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::clone(&p))
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCert(p)))
        .with_client_auth_cert(
            vec![identity.der()],
            PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    Arc::new(cfg)
}

/// SHA-256 of a DER certificate as the gateway logs it (`AB:CD:...`).
pub fn fingerprint(der: &CertificateDer<'_>) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
    d.as_ref().iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":")
}

/// The API's group and version path.
pub const V: &str = "/apis/external.metrics.k8s.io/v1beta1";

/// The external metric marker for decoding with the `k8s-metrics` crate.
pub struct Served;
impl k8s_metrics::external_metrics::ExternalMetric for Served {
    const KIND: &'static str = "ExternalMetricValue";
    const URL_PATH_SEGMENT: &'static str = "gateway_pool_signal";
}
pub type List = k8s_metrics::external_metrics::v1beta1::ExternalMetricValueList<Served>;

/// Decode with the `k8s-metrics` types (what a Rust client decodes; the same fields as the
/// HPA's Go types) and check that re-encoding gives back exactly what was served.
pub fn decode(a: &Answer) -> List {
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    let list: List = serde_json::from_slice(&a.raw).unwrap_or_else(|e| panic!("{e}: {}", a.body));
    assert_eq!(serde_json::to_value(&list).unwrap(), a.body, "re-encoded differently");
    list
}

/// The three CAs of a test (serving, front proxy, clients) and its folder.
pub struct Pki {
    pub server_ca: Ca,
    pub proxy_ca: Ca,
    pub client_ca: Ca,
    pub dir: TempDir,
}

impl Pki {
    pub fn new(tag: &str) -> Self {
        Self {
            server_ca: Ca::new("serving-ca"),
            proxy_ca: Ca::new("front-proxy-ca"),
            client_ca: Ca::new("client-ca"),
            dir: TempDir::new(tag),
        }
    }

    /// `--tls-cert-file X --tls-private-key-file Y`.
    pub fn serving_args(&self) -> Vec<String> {
        let id = self.server_ca.server();
        vec![
            "--tls-cert-file".into(),
            path_str(&self.dir.write("tls.crt", &id.cert_pem)),
            "--tls-private-key-file".into(),
            path_str(&self.dir.write("tls.key", &id.key_pem)),
        ]
    }

    pub fn proxy(&self, cn: &str) -> Arc<rustls::ClientConfig> {
        client_config(&self.server_ca, Some(&self.proxy_ca.client(cn, &[])))
    }

    pub fn client(&self, cn: &str, groups: &[&str]) -> Arc<rustls::ClientConfig> {
        client_config(&self.server_ca, Some(&self.client_ca.client(cn, groups)))
    }
}

pub fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Wait (10 s at most) until `cond` holds.
pub async fn wait_for(mut cond: impl FnMut() -> bool, what: &str) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
