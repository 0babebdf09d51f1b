//! The Kubernetes external metrics API (`external.metrics.k8s.io/v1beta1`), served from a
//! provider's pools on its own HTTPS listener, secured as kube-apiserver's aggregation layer
//! expects of an extension API server. See `docs/metrics-api.md`.
//!
//! Like kubernetes-sigs/custom-metrics-apiserver, the library keeps TLS, authentication,
//! authorization and flags; an adapter implements only the provider. A server reaches it
//! through four things: [`MetricsApiConfig`] (flattened into its command line), [`spawn`]
//! (with its pools as a [`PoolSource`], the provider trait), [`ApiMetrics`] (registered into
//! its Prometheus registry) and [`Error`] (what stops it from starting). The gateway's provider
//! is `gateway/src/provider.rs`.
//!
//! - `app`: routes and the authentication/authorization guard; `values`, `discovery`,
//!   `openapi`, `doc`: what is served; `selector`: label selectors; `status`: refusals as
//!   Kubernetes `Status`.
//! - `authn`, `trust`: who is asking (client and front-proxy certificates, the CA sources);
//!   `request_info`, `authz`: what they ask and whether they may (SubjectAccessReview + cache).
//! - `tls`, `reload`, `server`: the TLS listener and certificate rotation.
#![forbid(unsafe_code)]

mod app;
mod authn;
mod authz;
mod config;
mod discovery;
mod doc;
mod metrics;
mod openapi;
mod reload;
mod request_info;
mod selector;
mod server;
mod source;
mod status;
mod tls;
mod trust;
mod values;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

pub use app::{ApiState, PathRule, app};
pub use authz::{Authorizer, KubeReviewer, Review, Reviewer};
pub use config::{AuthorizationMode, MetricsApiConfig};
pub use metrics::{ApiMetrics, ResultLabels};
pub use source::{PoolSource, PoolView};
pub use tls::{provider as tls_provider, read_pair as read_tls_pair};

use reload::{Files, RequestHeaderFlags};
use trust::{Slots, TrustStore};

/// How long one SubjectAccessReview may take.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// What stops the API from starting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad flags or files.
    #[error("invalid configuration: metrics API: {0}")]
    Config(String),
    /// The listener could not be bound.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// A startup error of the API (bad flags or files).
fn cfg_err(e: String) -> Error {
    Error::Config(e)
}

/// Aborts a background task when dropped.
#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The running API: its address and its tasks (stopped when dropped).
#[derive(Debug)]
pub struct MetricsApi {
    pub addr: SocketAddr,
    pub state: ApiState,
    _tasks: Vec<AbortOnDrop>,
}

async fn kube_client(kubeconfig: Option<&Path>, what: &str) -> Result<Option<kube::Client>, Error> {
    let bad = |e: String| cfg_err(format!("{what}: {e}"));
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| bad(e.to_string()))?
        }
        None => match kube::Config::incluster() {
            Ok(c) => c,
            Err(_) => return Ok(None),
        },
    };
    kube::Client::try_from(config).map(Some).map_err(|e| bad(e.to_string()))
}

/// Start the API on `--metrics-api-listen` (`None` when unset): load the serving certificate
/// and the trust, connect the authorizer, bind, and serve `source`'s pools until dropped.
pub async fn spawn(
    cfg: &MetricsApiConfig,
    source: Arc<dyn PoolSource>,
    metrics: ApiMetrics,
) -> Result<Option<MetricsApi>, Error> {
    let Some(listen) = cfg.metrics_api_listen else { return Ok(None) };
    let provider = tls::provider();

    // Serving certificate.
    let cert = match (&cfg.tls_cert_file, &cfg.tls_private_key_file) {
        (Some(c), Some(k)) => tls::read_pair(c, k, &provider).map_err(cfg_err)?,
        _ => {
            let c = tls::self_signed(listen, &provider).map_err(cfg_err)?;
            tracing::warn!(
                sha256 = %tls::fingerprint(&c),
                "metrics API: no --tls-cert-file; serving a self-signed certificate made at start"
            );
            c
        }
    };
    tracing::info!(sha256 = %tls::fingerprint(&cert), "metrics API: serving certificate");
    let tls = Arc::new(tls::TlsState::new(Arc::new(cert), Vec::new()).map_err(cfg_err)?);

    // Trust: the flags' files, the ConfigMap for the rest.
    let store = Arc::new(TrustStore::new(Arc::clone(&tls)));
    let rh_flags = cfg.requestheader_client_ca_file.as_ref().map(|f| RequestHeaderFlags {
        ca_file: f.clone(),
        allowed_names: cfg.requestheader_allowed_names.iter().filter(|n| !n.is_empty()).cloned().collect(),
        username_headers: cfg.requestheader_username_headers.clone(),
        group_headers: cfg.requestheader_group_headers.clone(),
        extra_prefixes: cfg.requestheader_extra_headers_prefix.clone(),
    });
    if let Some(path) = &cfg.client_ca_file {
        let pem = std::fs::read(path).map_err(|e| cfg_err(format!("{}: {e}", path.display())))?;
        store.set_client_ca(Some(authn::CaSet::from_pem(&pem, &path.display().to_string()).map_err(cfg_err)?));
    }
    if let Some(flags) = &rh_flags {
        let pem = std::fs::read(&flags.ca_file).map_err(|e| cfg_err(format!("{}: {e}", flags.ca_file.display())))?;
        store.set_request_header(Some(flags.build(&pem).map_err(cfg_err)?));
    }
    let mut tasks = Vec::new();
    let slots = Slots { client_ca: cfg.client_ca_file.is_none(), request_header: rh_flags.is_none() };
    if slots.client_ca || slots.request_header {
        match kube_client(cfg.authentication_kubeconfig.as_deref(), "--authentication-kubeconfig").await? {
            Some(client) => {
                if let Err(e) = trust::load_once(&client, &store, slots).await {
                    tracing::warn!(
                        error = %e,
                        "metrics API: cannot read {}/{} yet; refusing certificates it would allow until it can",
                        trust::CONFIGMAP_NAMESPACE,
                        trust::CONFIGMAP_NAME
                    );
                }
                tasks.push(AbortOnDrop(trust::follow(client, Arc::clone(&store), slots)));
            }
            None => tracing::warn!(
                "metrics API: no --authentication-kubeconfig and not in a cluster: {} cannot be read, so \
                 {} will not authenticate anyone",
                trust::CONFIGMAP_NAME,
                match (slots.client_ca, slots.request_header) {
                    (true, true) => "client certificates and the front proxy",
                    (true, false) => "client certificates",
                    _ => "the front proxy",
                }
            ),
        }
    }

    // Authorization.
    let authorizer = match cfg.authorization_mode {
        AuthorizationMode::AlwaysAllow => {
            tracing::warn!(
                "metrics API: --authorization-mode=AlwaysAllow: EVERY AUTHENTICATED CLIENT MAY READ EVERY METRIC \
                 (no SubjectAccessReview). Meant for a machine without a cluster; use Webhook in one."
            );
            Authorizer::always_allow()
        }
        AuthorizationMode::Webhook => {
            let client = kube_client(cfg.authorization_kubeconfig.as_deref(), "--authorization-kubeconfig")
                .await?
                .ok_or_else(|| {
                    cfg_err(
                        "--authorization-mode=Webhook needs --authorization-kubeconfig or an in-cluster configuration \
                         (on a machine without a cluster, use --authorization-mode=AlwaysAllow)"
                            .to_owned(),
                    )
                })?;
            Authorizer::webhook(
                Arc::new(KubeReviewer { client, timeout: REVIEW_TIMEOUT }),
                cfg.authorization_webhook_cache_authorized_ttl,
                cfg.authorization_webhook_cache_unauthorized_ttl,
            )
        }
    };

    let files = Files {
        tls: cfg.tls_cert_file.clone().zip(cfg.tls_private_key_file.clone()),
        client_ca: cfg.client_ca_file.clone(),
        request_header: rh_flags,
    };
    tasks.push(AbortOnDrop(reload::spawn(files, Arc::clone(&tls), Arc::clone(&store), metrics.clone())));

    let always_allow =
        cfg.authorization_always_allow_paths.iter().filter(|p| !p.is_empty()).map(|p| PathRule::parse(p)).collect();
    let state = ApiState::new(source, store, Arc::new(authorizer), always_allow, metrics.clone());
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    tasks.push(AbortOnDrop(tokio::spawn(server::serve(listener, tls, app(state.clone()), metrics))));
    Ok(Some(MetricsApi { addr, state, _tasks: tasks }))
}
