//! The provider: the API's only view of its server (the gateway), per pool its Kubernetes place
//! and the latest published signal. Reading it must never wait on the pools nor recompute
//! anything (the gateway's signal task publishes on a `watch` channel and its provider reads
//! the last value).

use std::collections::BTreeMap;

/// One pool as the API serves it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PoolView {
    pub name: String,
    pub namespace: String,
    /// Matched by `labelSelector`; always holds `pool`.
    pub labels: BTreeMap<String, String>,
    /// Replicas the pool needs at target (the fail-static signal: stale workers hold their last
    /// pressure and floor it).
    pub signal: f64,
    /// The signal's queue term, in replicas.
    pub queue: f64,
    /// The signal's GPU term, in replicas.
    pub gpu: f64,
    pub ready_workers: usize,
    /// Highest device memory used / total among workers with a fresh reading; `None` without one.
    pub gpu_memory_used_ratio: Option<f64>,
    /// Some worker's telemetry is stale.
    pub stale: bool,
    /// When the signal was computed (Unix ms); 0 = never yet.
    pub updated_unix_ms: u64,
}

/// Where the API reads pools from: the provider. Implemented for the gateway's pools (in the
/// gateway), and by tests.
pub trait PoolSource: Send + Sync + 'static {
    /// Every pool of `namespace`, in a stable order.
    fn pools(&self, namespace: &str) -> Vec<PoolView>;
}
