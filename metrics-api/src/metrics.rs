//! The API's Prometheus families (`gateway_metrics_api_*`), registered into the gateway's
//! registry by [`ApiMetrics::register`].

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// `code` (HTTP status) and `reason`: `ok`, a Kubernetes `Status` reason (`Forbidden`,
/// `NotFound`, `BadRequest`, ...), or for 401 which check refused (`no_client_certificate`,
/// `untrusted_certificate`, `proxy_name_not_allowed`, `proxy_without_user`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub code: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

/// Cheap to clone (every family is an `Arc` inside).
#[derive(Clone, Debug)]
pub struct ApiMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub duration: Histogram,
    /// SubjectAccessReviews sent: `allowed`, `denied`, `error`.
    pub reviews: Family<ResultLabels, Counter>,
    /// Authorization decisions taken from the cache (`hit`) or asked for (`miss`).
    pub review_cache: Family<ResultLabels, Counter>,
    /// Serving certificate and CA reloads: `ok`, `error` (the previous one stays in use).
    pub reloads: Family<ResultLabels, Counter>,
    /// TLS handshakes that failed or timed out.
    pub handshake_failures: Counter,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            // 50 us .. ~1.6 s: an answer from the published signal is well under a millisecond;
            // a SubjectAccessReview round trip is milliseconds.
            duration: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
            reviews: Family::default(),
            review_cache: Family::default(),
            reloads: Family::default(),
            handshake_failures: Counter::default(),
        }
    }
}

impl ApiMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "metrics_api_requests",
            "External metrics API answers by HTTP code and reason (refusals included)",
            self.requests.clone(),
        );
        r.register(
            "metrics_api_request_duration_seconds",
            "External metrics API time from request to answer, authentication and authorization included",
            self.duration.clone(),
        );
        r.register(
            "metrics_api_authorization_reviews",
            "SubjectAccessReviews sent, by result (allowed, denied, error)",
            self.reviews.clone(),
        );
        r.register(
            "metrics_api_authorization_cache",
            "Authorization decisions served from the cache (hit) or asked of the API server (miss)",
            self.review_cache.clone(),
        );
        r.register(
            "metrics_api_reloads",
            "Reloads of the serving certificate and CA bundles (ok, error: the previous one stays)",
            self.reloads.clone(),
        );
        r.register(
            "metrics_api_tls_handshake_failures",
            "TLS handshakes on the external metrics API that failed or timed out",
            self.handshake_failures.clone(),
        );
    }

    pub fn count(&self, code: u16, reason: &str) {
        self.requests.get_or_create(&RequestLabels { code: code.to_string(), reason: reason.to_owned() }).inc();
    }

    pub fn result(family: &Family<ResultLabels, Counter>, result: &str) {
        family.get_or_create(&ResultLabels { result: result.to_owned() }).inc();
    }

    /// The count of answers with this code and reason (for tests and logs).
    pub fn requests_with(&self, code: u16, reason: &str) -> u64 {
        self.requests.get_or_create(&RequestLabels { code: code.to_string(), reason: reason.to_owned() }).get()
    }
}
