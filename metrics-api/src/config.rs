//! The API's flags, flattened into the gateway's command line. Names, meanings and defaults are
//! those of kube-apiserver and generic API servers (`k8s.io/apiserver/pkg/server/options`), so
//! an operator who deployed metrics-server or prometheus-adapter recognises them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How requests are authorized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthorizationMode {
    /// SubjectAccessReview to the API server for every decision not in the cache.
    #[value(name = "Webhook")]
    Webhook,
    /// Every authenticated client may read every metric: for a machine without a cluster.
    #[value(name = "AlwaysAllow")]
    AlwaysAllow,
}

/// External metrics API (`external.metrics.k8s.io/v1beta1`) for the HPA.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Metrics API")]
pub struct MetricsApiConfig {
    /// HTTPS address of the external metrics API (`external.metrics.k8s.io/v1beta1`, for an
    /// APIService), e.g. `0.0.0.0:6443`; off when unset.
    #[arg(long, env = "GATEWAY_METRICS_API_LISTEN")]
    pub metrics_api_listen: Option<SocketAddr>,

    /// Serving certificate (PEM; the chain after the leaf), re-read when it changes (Secret
    /// rotation). Unset: a self-signed certificate is made at start and its SHA-256 logged.
    #[arg(long, env = "GATEWAY_TLS_CERT_FILE", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// Private key of `--tls-cert-file` (PEM), re-read with it.
    #[arg(long, env = "GATEWAY_TLS_PRIVATE_KEY_FILE", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,

    /// CA bundle: a client certificate it signed authenticates as its CN (user) and O (groups).
    /// Unset: `client-ca-file` of the `kube-system/extension-apiserver-authentication` ConfigMap.
    #[arg(long, env = "GATEWAY_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,

    /// CA bundle of the front proxy (kube-apiserver's aggregator): a client certificate it
    /// signed may assert the user in the request-header headers. Unset: the
    /// `extension-apiserver-authentication` ConfigMap's `requestheader-*` keys (all of them).
    #[arg(long, env = "GATEWAY_REQUESTHEADER_CLIENT_CA_FILE")]
    pub requestheader_client_ca_file: Option<PathBuf>,

    /// Client certificate CNs allowed to assert users in headers (comma-separated); empty: any
    /// certificate signed by `--requestheader-client-ca-file`.
    #[arg(long, env = "GATEWAY_REQUESTHEADER_ALLOWED_NAMES", value_delimiter = ',')]
    pub requestheader_allowed_names: Vec<String>,

    /// Request headers holding the user name (first non-empty wins).
    #[arg(
        long,
        env = "GATEWAY_REQUESTHEADER_USERNAME_HEADERS",
        value_delimiter = ',',
        default_value = "X-Remote-User"
    )]
    pub requestheader_username_headers: Vec<String>,

    /// Request headers holding the groups (every value is one group).
    #[arg(long, env = "GATEWAY_REQUESTHEADER_GROUP_HEADERS", value_delimiter = ',', default_value = "X-Remote-Group")]
    pub requestheader_group_headers: Vec<String>,

    /// Prefixes of request headers holding extra user attributes.
    #[arg(
        long,
        env = "GATEWAY_REQUESTHEADER_EXTRA_HEADERS_PREFIX",
        value_delimiter = ',',
        default_value = "X-Remote-Extra-"
    )]
    pub requestheader_extra_headers_prefix: Vec<String>,

    /// Kubeconfig to read the `extension-apiserver-authentication` ConfigMap with. Unset: the
    /// in-cluster configuration, if any.
    #[arg(long, env = "GATEWAY_AUTHENTICATION_KUBECONFIG")]
    pub authentication_kubeconfig: Option<PathBuf>,

    /// Kubeconfig to create SubjectAccessReviews with. Unset: the in-cluster configuration.
    #[arg(long, env = "GATEWAY_AUTHORIZATION_KUBECONFIG")]
    pub authorization_kubeconfig: Option<PathBuf>,

    /// `Webhook` (SubjectAccessReview, cached) or `AlwaysAllow` (any authenticated client; for a
    /// machine without a cluster, logged as a warning). Authentication is on in both.
    #[arg(long, env = "GATEWAY_AUTHORIZATION_MODE", value_enum, default_value = "Webhook")]
    pub authorization_mode: AuthorizationMode,

    /// Paths served without authentication or authorization (comma-separated; a trailing `*`
    /// matches a prefix). They reveal nothing about pools.
    #[arg(
        long,
        env = "GATEWAY_AUTHORIZATION_ALWAYS_ALLOW_PATHS",
        value_delimiter = ',',
        default_value = "/healthz,/readyz,/livez"
    )]
    pub authorization_always_allow_paths: Vec<String>,

    /// How long an "allowed" SubjectAccessReview answer is reused.
    #[arg(long, env = "GATEWAY_AUTHORIZATION_WEBHOOK_CACHE_AUTHORIZED_TTL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub authorization_webhook_cache_authorized_ttl: Duration,

    /// How long a "denied" SubjectAccessReview answer is reused.
    #[arg(long, env = "GATEWAY_AUTHORIZATION_WEBHOOK_CACHE_UNAUTHORIZED_TTL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,
}
