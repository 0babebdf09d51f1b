//! The lanes: one per request class, each a queue, a batching task and a backend thread of its
//! own (`Admission` decides the class). A light request's queries never wait behind a heavy
//! request's batch; when both lanes have work the operating system shares the CPU between their
//! backend threads, and the heavy lane's thread runs at a lower priority (`nice` +5 on Linux, a
//! CFS weight of 335 against 1024: about a quarter of a contended core), so cheap requests keep
//! most of their throughput while heavy ones still make progress. On a GPU the two lanes' batches
//! interleave on the device.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::admission::{Admission, Class};
use super::observer::Telemetry;
use crate::backend::Backend;
use crate::batching::{self, BackendLoad, Entry, Limits};
use crate::metrics::Metrics;
use crate::stats::Stats;

/// Added to the heavy lane thread's nice value.
const HEAVY_LANE_NICE: i32 = 5;

/// What every lane shares.
pub(super) struct Shared<F> {
    pub batch_limits: Limits,
    /// Room in each lane's queue: the admission's query capacity, so a send never waits.
    pub queue_capacity: usize,
    pub admission: Arc<Admission>,
    pub stats: Arc<Stats>,
    pub metrics: Arc<Metrics>,
    /// Makes the lane's backend, on the lane's thread.
    pub make_backend: Arc<F>,
}

/// Starts `class`'s lane; returns the sender of its queue and its backend thread, which ends
/// (dropping its backend) once every sender is gone. Must be called within a runtime.
pub(super) fn start<B, F>(
    class: Class,
    shared: &Shared<F>,
) -> std::io::Result<(mpsc::Sender<Entry>, std::thread::JoinHandle<()>)>
where
    B: Backend,
    F: Fn(Class) -> Option<B> + Send + Sync + 'static,
{
    let (queue_tx, queue_rx) = mpsc::channel(shared.queue_capacity.max(1));
    let (batch_tx, batch_rx) = mpsc::channel(1);
    let backend_load = Arc::new(BackendLoad::default());
    let cancelled = shared.metrics.cancelled.clone();
    tokio::spawn(batching::task::run(shared.batch_limits, queue_rx, batch_tx, backend_load.clone(), move |n| {
        cancelled.inc_by(n);
    }));
    let observer = Arc::new(Telemetry {
        lane: class,
        admission: shared.admission.clone(),
        stats: shared.stats.clone(),
        metrics: shared.metrics.clone(),
    });
    let make = shared.make_backend.clone();
    let setup = move || {
        if class == Class::Heavy {
            lower_priority();
        }
        make(class)
    };
    let thread =
        batching::runner::spawn(&format!("backend-{}", class.as_str()), setup, batch_rx, backend_load, observer)?;
    Ok((queue_tx, thread))
}

/// Lowers the calling thread's priority (on Linux `nice` is per thread; threads it starts, such as
/// ONNX Runtime's pool made while loading, inherit it).
fn lower_priority() {
    if let Err(e) = rustix::process::nice(HEAVY_LANE_NICE) {
        tracing::warn!(error = %e, "could not lower the heavy lane's priority; it shares the CPU equally");
    }
}
