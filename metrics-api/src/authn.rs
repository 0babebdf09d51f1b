//! Authentication as an aggregated API server does it (kube-apiserver's delegating
//! authenticator, minus bearer tokens):
//!
//! 1. Front proxy: a client certificate that chains to the request-header CA and whose CN is in
//!    the allowed names (empty list: any) makes the user, groups and extras in the request-header
//!    headers trusted. Without a user header the next step is tried.
//! 2. Client certificate: one that chains to the client CA is the user named by its CN, in the
//!    groups named by its O entries.
//! 3. Anything else is 401. The request-header headers of anyone but a verified front proxy are
//!    ignored.
//!
//! Every authenticated user is also in `system:authenticated`. The TLS handshake asks for a
//! certificate but accepts any (the health paths must answer without one); the chain is verified
//! here, against the CA sets in force now (they follow file and ConfigMap changes), once per
//! connection and CA generation.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{HeaderMap, HeaderName};
use rustls::DistinguishedName;
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, UnixTime};

/// Group every authenticated user belongs to.
pub const AUTHENTICATED: &str = "system:authenticated";

/// The CA certificates of one trust source, ready to verify client chains.
#[derive(Clone)]
pub struct CaSet {
    verifier: Arc<dyn ClientCertVerifier>,
    subjects: Vec<DistinguishedName>,
    /// Where it came from (a file or the ConfigMap key), for logs.
    pub origin: String,
}

impl std::fmt::Debug for CaSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaSet").field("origin", &self.origin).field("cas", &self.subjects.len()).finish()
    }
}

impl CaSet {
    /// Every certificate in a PEM bundle becomes a trust anchor.
    pub fn from_pem(pem: &[u8], origin: &str) -> Result<Self, String> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("{origin}: bad PEM: {e}"))?;
            roots.add(cert).map_err(|e| format!("{origin}: not a CA certificate: {e}"))?;
        }
        if roots.is_empty() {
            return Err(format!("{origin}: no certificate in the bundle"));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .allow_unauthenticated()
            .build()
            .map_err(|e| format!("{origin}: {e}"))?;
        let subjects = verifier.root_hint_subjects().to_vec();
        Ok(Self { verifier, subjects, origin: origin.to_owned() })
    }

    /// The chain (end entity first) is valid now, for client authentication, under these CAs.
    fn verify(&self, chain: &[CertificateDer<'static>]) -> bool {
        match chain.split_first() {
            Some((leaf, rest)) => self.verifier.verify_client_cert(leaf, rest, UnixTime::now()).is_ok(),
            None => false,
        }
    }
}

/// Front-proxy trust: its CA, the CNs allowed to assert users, and the headers they use.
#[derive(Debug, Clone)]
pub struct RequestHeader {
    pub ca: CaSet,
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<HeaderName>,
    pub group_headers: Vec<HeaderName>,
    /// Lower-cased.
    pub extra_prefixes: Vec<String>,
}

impl RequestHeader {
    pub fn new(
        ca: CaSet,
        allowed_names: Vec<String>,
        username: &[String],
        group: &[String],
        extra: &[String],
    ) -> Result<Self, String> {
        let names = |list: &[String]| {
            list.iter()
                .map(|h| HeaderName::from_bytes(h.trim().as_bytes()).map_err(|_| format!("not a header name: {h:?}")))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Self {
            ca,
            allowed_names,
            username_headers: names(username)?,
            group_headers: names(group)?,
            extra_prefixes: extra.iter().map(|p| p.trim().to_ascii_lowercase()).filter(|p| !p.is_empty()).collect(),
        })
    }
}

/// The CA sets in force. Replaced whole when a source changes; `generation` tells connections
/// that their cached verification is out of date.
#[derive(Debug, Clone, Default)]
pub struct Trust {
    pub client_ca: Option<CaSet>,
    pub request_header: Option<RequestHeader>,
    pub generation: u64,
}

impl Trust {
    /// The CA names a client is told its certificate should chain to (so a Go client with several
    /// certificates picks the right one).
    pub fn hints(&self) -> Vec<DistinguishedName> {
        let mut v: Vec<DistinguishedName> = self.client_ca.iter().flat_map(|c| c.subjects.clone()).collect();
        if let Some(rh) = &self.request_header {
            v.extend(rh.ca.subjects.iter().cloned());
        }
        v
    }
}

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Why a request has no identity (the `reason` label of the 401s).
pub mod refusal {
    pub const NO_CERTIFICATE: &str = "no_client_certificate";
    pub const UNTRUSTED: &str = "untrusted_certificate";
    pub const PROXY_NOT_ALLOWED: &str = "proxy_name_not_allowed";
    pub const PROXY_WITHOUT_USER: &str = "proxy_without_user";
}

/// What a connection's certificate proves under one generation of trust.
#[derive(Debug)]
struct CertCheck {
    /// `Ok`: a front proxy allowed to assert users; `Err`: why not.
    proxy: Result<(), &'static str>,
    /// `Ok`: the certificate's own identity under the client CA.
    client: Result<User, &'static str>,
}

/// The client certificate chain of one TLS connection.
#[derive(Debug, Default)]
pub struct PeerCert {
    chain: Option<Vec<CertificateDer<'static>>>,
    checked: Mutex<Option<(u64, Arc<CertCheck>)>>,
}

impl PeerCert {
    pub fn new(chain: Option<Vec<CertificateDer<'static>>>) -> Self {
        Self { chain: chain.filter(|c| !c.is_empty()), checked: Mutex::new(None) }
    }

    fn check(&self, trust: &Trust) -> Arc<CertCheck> {
        let mut slot = match self.checked.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        if let Some((generation, c)) = slot.as_ref()
            && *generation == trust.generation
        {
            return Arc::clone(c);
        }
        let c = Arc::new(check(trust, self.chain.as_deref()));
        *slot = Some((trust.generation, Arc::clone(&c)));
        c
    }
}

fn check(trust: &Trust, chain: Option<&[CertificateDer<'static>]>) -> CertCheck {
    let Some(chain) = chain else {
        return CertCheck { proxy: Err(refusal::NO_CERTIFICATE), client: Err(refusal::NO_CERTIFICATE) };
    };
    let names = names(&chain[0]);
    let proxy = match &trust.request_header {
        Some(rh) if rh.ca.verify(chain) => {
            let cn = names.as_ref().map(|n| n.0.as_str()).unwrap_or("");
            if rh.allowed_names.is_empty() || rh.allowed_names.iter().any(|a| a == cn) {
                Ok(())
            } else {
                tracing::warn!(cn, "front-proxy certificate with a CN not in --requestheader-allowed-names");
                Err(refusal::PROXY_NOT_ALLOWED)
            }
        }
        _ => Err(refusal::UNTRUSTED),
    };
    let client = match (&trust.client_ca, names) {
        (Some(ca), Some((cn, orgs))) if !cn.is_empty() && ca.verify(chain) => {
            Ok(User { name: cn, groups: orgs, extra: BTreeMap::new() })
        }
        _ => Err(refusal::UNTRUSTED),
    };
    CertCheck { proxy, client }
}

/// The subject's CN and O entries.
fn names(der: &CertificateDer<'_>) -> Option<(String, Vec<String>)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let subject = cert.subject();
    let cn = subject.iter_common_name().next().and_then(|a| a.as_str().ok()).unwrap_or("").to_owned();
    let orgs = subject.iter_organization().filter_map(|a| a.as_str().ok().map(str::to_owned)).collect();
    Some((cn, orgs))
}

/// The user a request acts as, or the reason it has none.
pub fn authenticate(trust: &Trust, peer: &PeerCert, headers: &HeaderMap) -> Result<User, &'static str> {
    let checked = peer.check(trust);
    let mut user = match (&checked.proxy, &trust.request_header) {
        (Ok(()), Some(rh)) => match from_headers(rh, headers) {
            Some(u) => Ok(u),
            None => checked.client.clone().map_err(|_| refusal::PROXY_WITHOUT_USER),
        },
        (Err(why), _) => checked.client.clone().map_err(|_| *why),
        (Ok(()), None) => checked.client.clone(),
    }?;
    if !user.groups.iter().any(|g| g == AUTHENTICATED) {
        user.groups.push(AUTHENTICATED.to_owned());
    }
    Ok(user)
}

/// As kube's request-header authenticator: the first non-empty user header; every value of every
/// group header (one group per value); extras keyed by the lower-cased, %-decoded rest of the
/// header name.
fn from_headers(rh: &RequestHeader, headers: &HeaderMap) -> Option<User> {
    let name = rh
        .username_headers
        .iter()
        .filter_map(|h| headers.get(h).and_then(|v| v.to_str().ok()))
        .find(|v| !v.is_empty())?
        .to_owned();
    let groups = rh
        .group_headers
        .iter()
        .flat_map(|h| headers.get_all(h).iter())
        .filter_map(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for prefix in &rh.extra_prefixes {
        for (h, v) in headers {
            if let Some(key) = h.as_str().strip_prefix(prefix.as_str())
                && let Ok(v) = v.to_str()
            {
                let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy().into_owned();
                extra.entry(key).or_default().push(v.to_owned());
            }
        }
    }
    Some(User { name, groups, extra })
}
