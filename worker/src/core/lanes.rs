//! The lanes: one per request class, each a queue, a batching task and backend threads of its
//! own, one per session (`Admission` decides the class). A light request's queries never wait behind a heavy
//! request's batch; when both lanes have work the operating system shares the CPU between their
//! backend threads, and the heavy lane's thread runs at a lower priority (`nice` +5 on Linux, a
//! CFS weight of 335 against 1024: about a quarter of a contended core), so cheap requests keep
//! most of their throughput while heavy ones still make progress. On a GPU the two lanes' batches
//! interleave on the device.

use std::sync::{Arc, Mutex};

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
    /// Room in each lane's queue: the most the admission's query capacity is ever sized to
    /// (`admission::MAX_QUERIES`), so a send never waits.
    pub queue_capacity: usize,
    pub admission: Arc<Admission>,
    pub stats: Arc<Stats>,
    pub metrics: Arc<Metrics>,
    /// Sessions in each lane, by [`Class`]: backends, each on a thread of its own, running the
    /// lane's batches at the same time.
    pub sessions: [usize; 2],
    /// Makes one of the lane's backends, on that backend's thread.
    pub make_backend: Arc<F>,
}

/// Starts `class`'s lane; returns the sender of its queue and its backend threads, which end
/// (dropping their backends) once every sender is gone. Must be called within a runtime.
pub(super) fn start<B, F>(
    class: Class,
    shared: &Shared<F>,
) -> std::io::Result<(mpsc::Sender<Entry>, Vec<std::thread::JoinHandle<()>>)>
where
    B: Backend,
    F: Fn(Class) -> Option<B> + Send + Sync + 'static,
{
    let (queue_tx, queue_rx) = mpsc::channel(shared.queue_capacity.max(1));
    let (batch_tx, batch_rx) = mpsc::channel(1);
    let sessions = shared.sessions[class as usize].max(1);
    // Sessions are counted as they join, made and warmed up.
    let backend_load = Arc::new(BackendLoad::joining());
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
    let batches = Arc::new(Mutex::new(batch_rx));
    let name = format!("backend-{}", class.as_str());
    let threads = (0..sessions)
        .map(|_| {
            let (make, load) = (shared.make_backend.clone(), backend_load.clone());
            let setup = move || {
                if class == Class::Heavy {
                    lower_priority();
                }
                let backend = make(class);
                if backend.is_some() {
                    load.joined();
                }
                backend
            };
            batching::runner::spawn(&name, setup, batches.clone(), backend_load.clone(), observer.clone())
        })
        .collect::<std::io::Result<_>>()?;
    Ok((queue_tx, threads))
}

/// Lowers the calling thread's priority (on Linux `nice` is per thread; threads it starts, such as
/// ONNX Runtime's pool made while loading, inherit it).
fn lower_priority() {
    if let Err(e) = rustix::process::nice(HEAVY_LANE_NICE) {
        tracing::warn!(error = %e, "could not lower the heavy lane's priority; it shares the CPU equally");
    }
}
