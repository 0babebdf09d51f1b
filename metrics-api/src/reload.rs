//! Re-reads the files behind the serving certificate and the CA flags when they change. A
//! Kubernetes Secret or ConfigMap volume changes by swapping a symlink (`..data`), so the files
//! are read through their paths every [`POLL`] and compared with what was last tried: no inotify
//! edge to miss, and a pair caught half-written (new certificate, old key) fails the key check,
//! keeps the previous pair and is tried again once the key changes too.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::authn::{CaSet, RequestHeader};
use super::metrics::ApiMetrics;
use super::tls::{self, TlsState};
use super::trust::TrustStore;

/// How often the files are read.
pub const POLL: Duration = Duration::from_secs(1);

/// The front-proxy settings given by flags (everything but the CA's contents).
#[derive(Debug, Clone)]
pub struct RequestHeaderFlags {
    pub ca_file: PathBuf,
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_prefixes: Vec<String>,
}

impl RequestHeaderFlags {
    pub fn build(&self, pem: &[u8]) -> Result<RequestHeader, String> {
        let ca = CaSet::from_pem(pem, &self.ca_file.display().to_string())?;
        RequestHeader::new(
            ca,
            self.allowed_names.clone(),
            &self.username_headers,
            &self.group_headers,
            &self.extra_prefixes,
        )
    }
}

/// What to watch.
#[derive(Debug, Clone, Default)]
pub struct Files {
    pub tls: Option<(PathBuf, PathBuf)>,
    pub client_ca: Option<PathBuf>,
    pub request_header: Option<RequestHeaderFlags>,
}

/// Contents last tried for one source; `changed` says whether `now` differs.
#[derive(Default)]
struct Seen(Option<Vec<Vec<u8>>>);

impl Seen {
    fn changed(&mut self, now: Vec<Vec<u8>>) -> bool {
        if self.0.as_ref() == Some(&now) {
            return false;
        }
        self.0 = Some(now);
        true
    }
}

/// Every file's contents, or `None` while one cannot be read (mid-swap): tried again next round.
fn read_all(paths: &[&PathBuf]) -> Option<Vec<Vec<u8>>> {
    paths.iter().map(|p| std::fs::read(p).ok()).collect()
}

fn report(metrics: &ApiMetrics, what: &str, result: Result<(), String>) {
    match result {
        Ok(()) => ApiMetrics::result(&metrics.reloads, "ok"),
        Err(e) => {
            ApiMetrics::result(&metrics.reloads, "error");
            tracing::error!(error = %e, "{what} changed but cannot be used; keeping the previous one");
        }
    }
}

/// Poll the files; the first round only records what is there (the caller loaded it already).
pub fn spawn(files: Files, tls: Arc<TlsState>, trust: Arc<TrustStore>, metrics: ApiMetrics) -> JoinHandle<()> {
    tokio::spawn(async move {
        let (mut seen_tls, mut seen_client, mut seen_rh) = (Seen::default(), Seen::default(), Seen::default());
        let mut first = true;
        loop {
            if let Some((cert, key)) = &files.tls
                && let Some(now) = read_all(&[cert, key])
                && seen_tls.changed(now)
                && !first
            {
                let r = tls::read_pair(cert, key, tls.provider()).and_then(|pair| {
                    let fp = tls::fingerprint(&pair);
                    tls.set_cert(Arc::new(pair))?;
                    tracing::info!(sha256 = %fp, "serving certificate reloaded");
                    Ok(())
                });
                report(&metrics, "the serving certificate", r);
            }
            if let Some(path) = &files.client_ca
                && let Some(now) = read_all(&[path])
                && seen_client.changed(now.clone())
                && !first
            {
                let r = CaSet::from_pem(&now[0], &path.display().to_string()).map(|ca| trust.set_client_ca(Some(ca)));
                report(&metrics, "--client-ca-file", r);
            }
            if let Some(flags) = &files.request_header
                && let Some(now) = read_all(&[&flags.ca_file])
                && seen_rh.changed(now.clone())
                && !first
            {
                let r = flags.build(&now[0]).map(|rh| trust.set_request_header(Some(rh)));
                report(&metrics, "--requestheader-client-ca-file", r);
            }
            first = false;
            tokio::time::sleep(POLL).await;
        }
    })
}
