//! The listener's counters, registered under the binary's prefix (`gateway_`, `worker_`):
//!
//! | series | type | meaning |
//! |---|---|---|
//! | `{p}_connections_open` | gauge | client connections open now |
//! | `{p}_connections_limit` | gauge | the effective `--max-connections` |
//! | `{p}_connections_accepted_total` | counter | connections accepted and served |
//! | `{p}_connections_limit_per_address` | gauge | the effective `--max-connections-per-address` |
//! | `{p}_connections_refused_total` | counter | connections answered 503 (or closed) at the cap |
//! | `{p}_connections_refused_per_address_total` | counter | connections answered 503 (or closed) because their address held `--max-connections-per-address` |
//! | `{p}_connections_evicted_total` | counter | connections without a request in progress (idle, or waiting for a head) closed to make room at the cap |
//! | `{p}_connections_timed_out_total{timeout}` | counter | requests or connections ended by a timeout: `header`, `body`, `idle`, `send` |
//! | `{p}_accept_errors_total` | counter | failed `accept` calls (e.g. out of file descriptors) |
//! | `{p}_request_body_buffered_bytes` | gauge | bytes of request bodies held now |
//! | `{p}_request_body_buffered_limit_bytes` | gauge | the effective `--max-buffered-body-bytes` |
//! | `{p}_request_body_errors_total{error_type}` | counter | bodies refused: `too_large`, `timeout`, `invalid_request`, `overloaded` |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::phase::TimeoutKind;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TimeoutLabels {
    timeout: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    error_type: &'static str,
}

/// The listener's metric families. Cheap to clone (each is an `Arc` inside); a default one is
/// registered nowhere (tests).
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pub(crate) open: Gauge,
    pub(crate) limit: Gauge,
    pub(crate) limit_per_address: Gauge,
    pub(crate) accepted: Counter,
    pub(crate) refused: Counter,
    pub(crate) refused_per_address: Counter,
    pub(crate) evicted: Counter,
    pub(crate) accept_errors: Counter,
    timeouts: Family<TimeoutLabels, Counter>,
    pub(crate) body_buffered: Gauge,
    pub(crate) body_limit: Gauge,
    body_errors: Family<ErrorLabels, Counter>,
}

impl Metrics {
    /// Registers every family in `registry` as `{prefix}_...` (e.g. `worker` into a registry
    /// without a prefix). Into a registry that has a prefix of its own, the names get both:
    /// `gateway_admin_connections_open` is `register(Registry::with_prefix("gateway"), "admin")`.
    pub fn register(registry: &mut Registry, prefix: &str) -> Self {
        Self::register_in(registry.sub_registry_with_prefix(prefix))
    }

    /// Registers every family in `registry` under its own prefix only: a registry made
    /// `with_prefix("gateway")` gets `gateway_connections_open`, not `gateway_gateway_...`.
    pub fn register_in(r: &mut Registry) -> Self {
        let m = Self::default();
        r.register("connections_open", "Client connections open now", m.open.clone());
        r.register("connections_limit", "Most client connections open at once (--max-connections)", m.limit.clone());
        r.register("connections_accepted", "Client connections accepted and served", m.accepted.clone());
        r.register(
            "connections_refused",
            "Client connections refused at --max-connections (answered 503 or closed)",
            m.refused.clone(),
        );
        r.register(
            "connections_limit_per_address",
            "Most client connections open at once from one address (--max-connections-per-address)",
            m.limit_per_address.clone(),
        );
        r.register(
            "connections_refused_per_address",
            "Client connections refused because their address held --max-connections-per-address",
            m.refused_per_address.clone(),
        );
        r.register(
            "connections_evicted",
            "Connections without a request in progress closed to make room at --max-connections",
            m.evicted.clone(),
        );
        r.register(
            "connections_timed_out",
            "Requests or connections ended by a timeout (header, body, idle, send)",
            m.timeouts.clone(),
        );
        r.register("accept_errors", "Failed accept calls (e.g. out of file descriptors)", m.accept_errors.clone());
        r.register(
            "request_body_buffered_bytes",
            "Bytes of request bodies held in memory now",
            m.body_buffered.clone(),
        );
        r.register(
            "request_body_buffered_limit_bytes",
            "Most bytes of request bodies held at once (--max-buffered-body-bytes)",
            m.body_limit.clone(),
        );
        r.register("request_body_errors", "Request bodies refused, by error_type", m.body_errors.clone());
        m
    }

    pub(crate) fn timeout(&self, kind: TimeoutKind) -> Counter {
        self.timeouts.get_or_create(&TimeoutLabels { timeout: kind.as_str() }).clone()
    }

    pub(crate) fn body_error(&self, error_type: wire::ErrorType) -> Counter {
        self.body_errors.get_or_create(&ErrorLabels { error_type: error_type.as_str() }).clone()
    }

    pub fn connections_open(&self) -> i64 {
        self.open.get()
    }

    pub fn connections_accepted(&self) -> u64 {
        self.accepted.get()
    }

    pub fn connections_refused(&self) -> u64 {
        self.refused.get()
    }

    pub fn connections_refused_per_address(&self) -> u64 {
        self.refused_per_address.get()
    }

    pub fn accept_errors(&self) -> u64 {
        self.accept_errors.get()
    }

    pub fn connections_evicted(&self) -> u64 {
        self.evicted.get()
    }

    pub fn timed_out(&self, kind: TimeoutKind) -> u64 {
        self.timeout(kind).get()
    }

    /// Bodies refused with `error_type`.
    pub fn body_errors(&self, error_type: wire::ErrorType) -> u64 {
        self.body_error(error_type).get()
    }

    pub fn body_buffered_bytes(&self) -> i64 {
        self.body_buffered.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_a_prefixed_registry_the_prefix_is_not_doubled() {
        let mut registry = Registry::with_prefix("gateway");
        Metrics::register_in(&mut registry).accepted.inc();
        Metrics::register(&mut registry, "admin").accepted.inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("\ngateway_connections_accepted_total 1"), "{text}");
        assert!(text.contains("\ngateway_admin_connections_accepted_total 1"), "{text}");
        assert!(!text.contains("gateway_gateway"), "{text}");
    }

    #[test]
    fn families_are_named_under_the_callers_prefix() {
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry, "gateway");
        m.accepted.inc();
        m.timeout(TimeoutKind::Header).inc();
        m.body_error(wire::ErrorType::TooLarge).inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for series in [
            "gateway_connections_open ",
            "gateway_connections_limit ",
            "gateway_connections_accepted_total 1",
            "gateway_connections_refused_total ",
            "gateway_connections_evicted_total ",
            "gateway_connections_timed_out_total{timeout=\"header\"} 1",
            "gateway_accept_errors_total ",
            "gateway_request_body_buffered_bytes ",
            "gateway_request_body_buffered_limit_bytes ",
            "gateway_request_body_errors_total{error_type=\"too_large\"} 1",
        ] {
            assert!(text.contains(series), "{series} missing from\n{text}");
        }
    }
}
