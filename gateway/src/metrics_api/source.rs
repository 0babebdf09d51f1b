//! The API's only view of the gateway: per pool, its Kubernetes place and the latest published
//! signal. Reading it never waits on the pools and recomputes nothing: the signal task publishes
//! on a `watch` channel and this reads the last value.

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

/// Where the API reads pools from. Implemented for the gateway's pools below, and by tests.
pub trait PoolSource: Send + Sync + 'static {
    /// Every pool of `namespace`, in a stable order.
    fn pools(&self, namespace: &str) -> Vec<PoolView>;
}

/// The adapter from the gateway's pool registry.
impl PoolSource for crate::pool::Pools {
    fn pools(&self, namespace: &str) -> Vec<PoolView> {
        self.all()
            .iter()
            .filter(|p| p.meta.namespace == namespace)
            .map(|p| {
                let rx = p.signal();
                let s = rx.borrow();
                PoolView {
                    name: p.name.clone(),
                    namespace: p.meta.namespace.clone(),
                    labels: p.meta.labels.clone(),
                    signal: s.signal,
                    queue: s.components.queue,
                    gpu: s.components.gpu,
                    ready_workers: s.ready_workers,
                    gpu_memory_used_ratio: s.gpu_memory_used_ratio,
                    stale: s.stale,
                    updated_unix_ms: s.updated_unix_ms,
                }
            })
            .collect()
    }
}
