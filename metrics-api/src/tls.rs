//! The serving TLS configuration: the certificate (from `--tls-cert-file` and
//! `--tls-private-key-file`, or self-signed at start), and the client-certificate request whose
//! CA hints follow the trust in force. Rebuilt whole when either changes; every new connection
//! takes the current one, connections already open keep theirs. Session resumption state is
//! shared across rebuilds.
//!
//! The handshake asks for a client certificate and proves the client holds its key, but does not
//! judge the chain: kubelet probes reach `/healthz` without one, and a chain no CA signed must
//! get a 401 `Status`, not a TLS alert. [`super::authn`] verifies it.
//!
//! A new certificate also starts new session-resumption state: a resumed session would skip the
//! certificate, so without that, clients holding a ticket would go on seeing the old one.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ProducesTickets, ServerSessionMemoryCache, StoresServerSessions};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

/// Asks for a client certificate (hinting the trusted CAs), never requires one, checks the
/// handshake signature, leaves the chain to the authenticator.
#[derive(Debug)]
struct RequestClientCert {
    hints: Vec<DistinguishedName>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

struct Parts {
    cert: Arc<CertifiedKey>,
    hints: Vec<DistinguishedName>,
    /// Session resumption state, shared by the configurations built for one certificate.
    sessions: Arc<dyn StoresServerSessions>,
    tickets: Arc<dyn ProducesTickets>,
}

type Resumption = (Arc<dyn StoresServerSessions>, Arc<dyn ProducesTickets>);

fn resumption() -> Result<Resumption, String> {
    let tickets: Arc<dyn ProducesTickets> =
        rustls::crypto::ring::Ticketer::new().map_err(|e| format!("TLS session tickets: {e}"))?;
    Ok((ServerSessionMemoryCache::new(1024), tickets))
}

/// The current server configuration and what it is built from.
pub struct TlsState {
    current: ArcSwap<ServerConfig>,
    parts: Mutex<Parts>,
    provider: Arc<CryptoProvider>,
}

impl std::fmt::Debug for TlsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsState").finish_non_exhaustive()
    }
}

pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsState {
    pub fn new(cert: Arc<CertifiedKey>, hints: Vec<DistinguishedName>) -> Result<Self, String> {
        let provider = provider();
        let (sessions, tickets) = resumption()?;
        let parts = Parts { cert, hints, sessions, tickets };
        let config = build(&provider, &parts)?;
        Ok(Self { current: ArcSwap::new(config), parts: Mutex::new(parts), provider })
    }

    /// The configuration for the next connection.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }

    pub fn provider(&self) -> &CryptoProvider {
        &self.provider
    }

    fn update(&self, f: impl FnOnce(&mut Parts)) -> Result<(), String> {
        let mut parts = match self.parts.lock() {
            Ok(p) => p,
            Err(p) => p.into_inner(),
        };
        f(&mut parts);
        self.current.store(build(&self.provider, &parts)?);
        Ok(())
    }

    /// Serve `cert` to new connections (with fresh resumption state).
    pub fn set_cert(&self, cert: Arc<CertifiedKey>) -> Result<(), String> {
        let (sessions, tickets) = resumption()?;
        self.update(|p| {
            p.cert = cert;
            p.sessions = sessions;
            p.tickets = tickets;
        })
    }

    pub fn set_hints(&self, hints: Vec<DistinguishedName>) -> Result<(), String> {
        self.update(|p| p.hints = hints)
    }
}

fn build(provider: &Arc<CryptoProvider>, parts: &Parts) -> Result<Arc<ServerConfig>, String> {
    let verifier =
        RequestClientCert { hints: parts.hints.clone(), algorithms: provider.signature_verification_algorithms };
    let mut cfg = ServerConfig::builder_with_provider(Arc::clone(provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_client_cert_verifier(Arc::new(verifier))
        .with_cert_resolver(Arc::new(SingleCertAndKey::from(Arc::clone(&parts.cert))));
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.session_storage = Arc::clone(&parts.sessions);
    cfg.ticketer = Arc::clone(&parts.tickets);
    Ok(Arc::new(cfg))
}

/// A certificate chain and its key from PEM bytes; the key must match the first certificate.
pub fn pair_from_pem(cert_pem: &[u8], key_pem: &[u8], provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("certificate file: {e}"))?;
    if chain.is_empty() {
        return Err("certificate file: no certificate".to_owned());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("private key file: {e}"))?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| format!("certificate and key: {e}"))
}

pub fn read_pair(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let c = std::fs::read(cert).map_err(|e| format!("{}: {e}", cert.display()))?;
    let k = std::fs::read(key).map_err(|e| format!("{}: {e}", key.display()))?;
    pair_from_pem(&c, &k, provider)
}

/// A self-signed certificate for `localhost`, the loopback addresses and the listen address.
pub fn self_signed(listen: SocketAddr, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    if !listen.ip().is_unspecified() && !listen.ip().is_loopback() {
        names.push(listen.ip().to_string());
    }
    let made = rcgen::generate_simple_self_signed(names).map_err(|e| format!("self-signed certificate: {e}"))?;
    let key = PrivateKeyDer::try_from(made.signing_key.serialize_der()).map_err(|e| format!("self-signed key: {e}"))?;
    CertifiedKey::from_der(vec![made.cert.der().clone()], key, provider).map_err(|e| format!("self-signed: {e}"))
}

/// SHA-256 of a certificate's DER, as `openssl x509 -fingerprint -sha256` prints it.
pub fn fingerprint(cert: &CertifiedKey) -> String {
    let der = cert.cert.first().map(|c| c.as_ref()).unwrap_or_default();
    let d = ring::digest::digest(&ring::digest::SHA256, der);
    d.as_ref().iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":")
}
