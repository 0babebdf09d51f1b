//! The gateway's provider for the external metrics API (the `metrics-api` crate): per pool, its
//! Kubernetes place and the latest published signal. Reading it never waits on the pools and
//! recomputes nothing: the signal task publishes on a `watch` channel and this reads the last
//! value.

use metrics_api::{PoolSource, PoolView};

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
