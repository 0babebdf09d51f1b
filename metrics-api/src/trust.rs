//! The trust in force ([`Trust`]) and its two sources, each the flag's file or, when the flag is
//! unset, the `kube-system/extension-apiserver-authentication` ConfigMap that kube-apiserver
//! publishes for extension servers:
//!
//! | slot | file flag | ConfigMap keys |
//! |---|---|---|
//! | client CA | `--client-ca-file` | `client-ca-file` |
//! | front proxy | `--requestheader-client-ca-file` (+ the other `--requestheader-*` flags) | `requestheader-client-ca-file`, `requestheader-allowed-names`, `requestheader-username-headers`, `requestheader-group-headers`, `requestheader-extra-headers-prefix` (JSON lists) |
//!
//! As kube's generic API server: the front-proxy header names and allowed CNs come with the CA,
//! from the same source. A source that turns bad (unreadable PEM) keeps the last good trust and
//! logs; a ConfigMap that disappears keeps the last one too.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::task::JoinHandle;

use super::authn::{CaSet, RequestHeader, Trust};
use super::tls::TlsState;

pub const CONFIGMAP_NAMESPACE: &str = "kube-system";
pub const CONFIGMAP_NAME: &str = "extension-apiserver-authentication";

/// Holds the current [`Trust`] and rebuilds the TLS hints when it changes.
pub struct TrustStore {
    current: ArcSwap<Trust>,
    next: Mutex<Trust>,
    tls: Arc<TlsState>,
}

impl std::fmt::Debug for TrustStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustStore").field("current", &self.current.load()).finish_non_exhaustive()
    }
}

impl TrustStore {
    pub fn new(tls: Arc<TlsState>) -> Self {
        Self { current: ArcSwap::from_pointee(Trust::default()), next: Mutex::new(Trust::default()), tls }
    }

    pub fn load(&self) -> Arc<Trust> {
        self.current.load_full()
    }

    fn update(&self, f: impl FnOnce(&mut Trust)) {
        let mut next = match self.next.lock() {
            Ok(n) => n,
            Err(p) => p.into_inner(),
        };
        f(&mut next);
        next.generation += 1;
        let trust = Arc::new(next.clone());
        if let Err(e) = self.tls.set_hints(trust.hints()) {
            tracing::error!(error = %e, "could not rebuild the TLS configuration with the new CAs");
        }
        self.current.store(trust);
    }

    pub fn set_client_ca(&self, ca: Option<CaSet>) {
        tracing::info!(source = ca.as_ref().map_or("none", |c| c.origin.as_str()), "client CA in force");
        self.update(|t| t.client_ca = ca);
    }

    pub fn set_request_header(&self, rh: Option<RequestHeader>) {
        tracing::info!(
            source = rh.as_ref().map_or("none", |r| r.ca.origin.as_str()),
            allowed_names = ?rh.as_ref().map(|r| &r.allowed_names),
            "front-proxy (request-header) CA in force"
        );
        self.update(|t| t.request_header = rh);
    }
}

fn strings(data: &BTreeMap<String, String>, key: &str) -> Result<Vec<String>, String> {
    match data.get(key).map(String::as_str) {
        None | Some("") => Ok(Vec::new()),
        Some(s) => serde_json::from_str(s).map_err(|e| format!("{CONFIGMAP_NAME} key {key}: not a JSON list: {e}")),
    }
}

/// The client CA in the ConfigMap (`None` when it has no `client-ca-file`).
pub fn client_ca_from(data: &BTreeMap<String, String>) -> Result<Option<CaSet>, String> {
    match data.get("client-ca-file").filter(|s| !s.trim().is_empty()) {
        None => Ok(None),
        Some(pem) => CaSet::from_pem(pem.as_bytes(), &format!("configmap {CONFIGMAP_NAME} client-ca-file")).map(Some),
    }
}

/// The front-proxy trust in the ConfigMap (`None` when it has no `requestheader-client-ca-file`).
pub fn request_header_from(data: &BTreeMap<String, String>) -> Result<Option<RequestHeader>, String> {
    let Some(pem) = data.get("requestheader-client-ca-file").filter(|s| !s.trim().is_empty()) else {
        return Ok(None);
    };
    let ca = CaSet::from_pem(pem.as_bytes(), &format!("configmap {CONFIGMAP_NAME} requestheader-client-ca-file"))?;
    RequestHeader::new(
        ca,
        strings(data, "requestheader-allowed-names")?,
        &strings(data, "requestheader-username-headers")?,
        &strings(data, "requestheader-group-headers")?,
        &strings(data, "requestheader-extra-headers-prefix")?,
    )
    .map(Some)
}

/// Which slots the ConfigMap feeds (those whose flag is unset).
#[derive(Debug, Clone, Copy)]
pub struct Slots {
    pub client_ca: bool,
    pub request_header: bool,
}

/// Apply the ConfigMap's contents to the slots it feeds; a bad entry keeps the previous trust.
pub fn apply(store: &TrustStore, slots: Slots, data: &BTreeMap<String, String>) {
    if slots.client_ca {
        match client_ca_from(data) {
            Ok(ca) => store.set_client_ca(ca),
            Err(e) => tracing::error!(error = %e, "keeping the previous client CA"),
        }
    }
    if slots.request_header {
        match request_header_from(data) {
            Ok(rh) => store.set_request_header(rh),
            Err(e) => tracing::error!(error = %e, "keeping the previous front-proxy CA"),
        }
    }
}

/// Read the ConfigMap once (at start, before serving).
pub async fn load_once(client: &kube::Client, store: &TrustStore, slots: Slots) -> Result<(), String> {
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), CONFIGMAP_NAMESPACE);
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), api.get_opt(CONFIGMAP_NAME))
        .await
        .map_err(|_| "no answer within 10s".to_owned())?
        .map_err(|e| e.to_string())?;
    match got {
        Some(cm) => {
            apply(store, slots, &cm.data.unwrap_or_default());
            Ok(())
        }
        None => Err(format!("{CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} does not exist")),
    }
}

/// Follow the ConfigMap's changes (kube's watcher: list, then watch, re-list with backoff on
/// errors). Unchanged contents (periodic re-lists) change nothing.
pub fn follow(client: kube::Client, store: Arc<TrustStore>, slots: Slots) -> JoinHandle<()> {
    tokio::spawn(async move {
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, CONFIGMAP_NAMESPACE);
        let cfg = watcher::Config::default().fields(&format!("metadata.name={CONFIGMAP_NAME}"));
        let mut events = watcher::watcher(api, cfg).default_backoff().boxed();
        let mut last: Option<BTreeMap<String, String>> = None;
        while let Some(ev) = events.next().await {
            match ev {
                Ok(Event::Apply(cm) | Event::InitApply(cm)) => {
                    let data = cm.data.unwrap_or_default();
                    if last.as_ref() != Some(&data) {
                        apply(&store, slots, &data);
                        last = Some(data);
                    }
                }
                Ok(Event::Delete(_)) => {
                    tracing::warn!("{CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME} was deleted; keeping the last CAs");
                }
                Ok(Event::Init | Event::InitDone) => {}
                Err(e) => tracing::warn!(error = %e, "watching {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}; retrying"),
            }
        }
    })
}
