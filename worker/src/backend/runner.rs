//! The backend's own OS thread: takes batches from the queue task, runs them, answers each query.

use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Backend, InputBatch, softmax};
use crate::batching::{BackendLoad, Batch, Entry, Pending};
use crate::load::Load;
use crate::metrics::Metrics;
use crate::stats::Stats;

/// What the backend thread reports into.
#[derive(Debug, Clone)]
pub struct Observers {
    pub load: Arc<Load>,
    pub stats: Arc<Stats>,
    pub metrics: Arc<Metrics>,
    /// Told when each batch is finished, so the queue can cut the next one.
    pub backend: Arc<BackendLoad>,
}

/// Tells the queue a batch is finished on every way out of [`run_batch`].
struct Finished<'a>(&'a BackendLoad);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.finished();
    }
}

/// Runs `backend` on a new thread until `batches` is closed.
pub fn spawn<B: Backend>(
    mut backend: B,
    mut batches: mpsc::Receiver<Batch<Entry>>,
    obs: Observers,
) -> std::io::Result<JoinHandle<()>> {
    let thread = std::thread::Builder::new().name("backend".into()).spawn(move || {
        while let Some(batch) = batches.blocking_recv() {
            run_batch(&mut backend, batch, &obs);
        }
    })?;
    Ok(thread)
}

fn run_batch<B: Backend>(backend: &mut B, batch: Batch<Entry>, obs: &Observers) {
    let _finished = Finished(&obs.backend);
    let started = Instant::now();
    let (live, gone): (Vec<_>, Vec<_>) = batch.entries.into_iter().partition(|q| !q.item.is_cancelled());
    obs.metrics.cancelled.inc_by(gone.len() as u64);
    if live.is_empty() {
        return;
    }
    obs.load.set_in_flight(live.len() as u64);
    let mut total_wait = std::time::Duration::ZERO;
    for q in &live {
        let wait = started.saturating_duration_since(q.item.admitted_at);
        total_wait += wait;
        obs.metrics.queue_wait.observe(wait.as_secs_f64());
    }
    let input = InputBatch::pad_to(live.iter().map(|q| (&q.item.input_ids[..], &q.item.type_ids[..])), |r, s| {
        backend.padded_shape(r, s)
    });
    let span = tracing::debug_span!("batch", rows = input.rows, padded_len = input.seq_len);
    let result = span.in_scope(|| backend.infer(&input));
    let elapsed = started.elapsed();
    obs.metrics.inference.observe(elapsed.as_secs_f64());
    let rows = live.len();
    obs.metrics.batch_rows.observe(rows as f64);
    obs.metrics.batch_padded_len.observe(input.seq_len as f64);
    obs.stats.batch(Instant::now(), rows as u64, input.seq_len as u64, elapsed, total_wait);
    match result {
        Ok(rows) => {
            for (q, logits) in live.into_iter().zip(rows) {
                q.item.span.in_scope(|| tracing::trace!(inference_ms = elapsed.as_secs_f64() * 1e3, "answered"));
                let _ = q.item.respond.send(Ok(softmax(&logits)));
            }
        }
        Err(e) => {
            tracing::error!(error = %e, rows, "batch failed");
            for q in live {
                let _ = q.item.respond.send(Err(e.clone()));
            }
        }
    }
    obs.load.set_in_flight(0);
}
