//! Reads an external metric the way the HPA controller does (`metrics/rest_metrics_client.go`,
//! `externalMetricsClient.GetExternalMetric`): `GET /apis/external.metrics.k8s.io/v1beta1/
//! namespaces/NS/METRIC?labelSelector=...` over HTTPS with a client certificate, each item's
//! `value` as milli-units; an empty list is an error ("no metrics returned from external metrics
//! API"), as are a refusal and a transport failure.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::Deserialize;

use crate::quantity::milli_value;

/// Where and what to read.
#[derive(Debug, Clone)]
pub struct Target {
    /// `https://HOST:PORT`
    pub base: String,
    pub namespace: String,
    pub metric: String,
    /// `labelSelector`, e.g. `pool=default` (sent percent-encoded).
    pub selector: String,
}

impl Target {
    /// The request's path and query, exactly as client-go builds it.
    pub fn path(&self) -> String {
        format!(
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/{}/{}?labelSelector={}",
            self.namespace,
            self.metric,
            encode_query(&self.selector)
        )
    }
}

/// Percent-encoding of a query value as Go's `url.QueryEscape` (space as `+`).
fn encode_query(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[derive(Deserialize)]
struct ValueList {
    #[serde(default)]
    items: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    value: String,
}

/// A client holding its TLS configuration (CA to trust, certificate to present).
#[derive(Clone)]
pub struct MetricsClient {
    tls: Arc<rustls::ClientConfig>,
    host: String,
    addr: String,
    target: Target,
    timeout: Duration,
}

impl MetricsClient {
    pub fn new(target: Target, ca: &Path, cert: &Path, key: &Path, timeout: Duration) -> anyhow::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(ca).with_context(|| format!("reading {}", ca.display()))? {
            roots.add(c.with_context(|| format!("{}", ca.display()))?)?;
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .with_context(|| format!("reading {}", cert.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("{}", cert.display()))?;
        let key = PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading {}", key.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .context("client certificate and key")?;
        let rest = target.base.strip_prefix("https://").ok_or_else(|| anyhow!("{}: not https://", target.base))?;
        let addr = rest.trim_end_matches('/').to_owned();
        let host = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h).trim_matches(['[', ']']).to_owned();
        Ok(Self { tls: Arc::new(tls), host, addr, target, timeout })
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The items' values in milli-units.
    pub async fn get(&self) -> anyhow::Result<Vec<i64>> {
        tokio::time::timeout(self.timeout, self.get_inner())
            .await
            .map_err(|_| anyhow!("timed out after {:?}", self.timeout))?
    }

    async fn get_inner(&self) -> anyhow::Result<Vec<i64>> {
        let tcp =
            tokio::net::TcpStream::connect(&self.addr).await.with_context(|| format!("connecting to {}", self.addr))?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from(self.host.clone()).context("server name")?;
        let tls =
            tokio_rustls::TlsConnector::from(self.tls.clone()).connect(name, tcp).await.context("TLS handshake")?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        let path = self.target.path();
        let req = http::Request::get(&path)
            .header("host", &self.addr)
            .header("accept", "application/json")
            .header("user-agent", "scaler (horizontal-pod-autoscaler's request)")
            .body(Full::new(Bytes::new()))?;
        let resp = send.send_request(req).await.context("request")?;
        let status = resp.status();
        let body = resp.into_body().collect().await.context("reading the answer")?.to_bytes();
        conn.abort();
        if !status.is_success() {
            let msg = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(200).collect());
            bail!("{status}: {msg}");
        }
        let list: ValueList = serde_json::from_slice(&body).context("not an ExternalMetricValueList")?;
        if list.items.is_empty() {
            bail!("no metrics returned from external metrics API");
        }
        list.items.iter().map(|i| milli_value(&i.value)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_is_the_hpas() {
        let t = Target {
            base: "https://127.0.0.1:1".into(),
            namespace: "default".into(),
            metric: "gateway_pool_signal".into(),
            selector: "pool=default".into(),
        };
        assert_eq!(
            t.path(),
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gateway_pool_signal?labelSelector=pool%3Ddefault"
        );
        assert_eq!(encode_query("pool in (a, b)"), "pool+in+%28a%2C+b%29");
    }
}
