//! The backend's own OS thread: takes batches from the queue task, pads them, runs them, answers
//! each query with its logits. What it measures goes to an [`Observer`] (the core implements it),
//! so this module knows nothing of metrics or HTTP.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{BackendLoad, Entry, Handed, Pending, Unanswered};
use crate::backend::{Backend, InputBatch};

/// One batch, as run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchReport {
    /// Queries answered (cancelled ones excluded).
    pub rows: usize,
    /// Their real tokens (padding excluded).
    pub tokens: usize,
    /// Padded sequence length the backend ran.
    pub padded_len: usize,
    /// Backend time, padding included.
    pub elapsed: Duration,
    /// Sum of the rows' waits from admission to the batch's start.
    pub total_wait: Duration,
}

/// Told what the backend thread does. Calls come from the backend thread.
pub trait Observer: Send + Sync + 'static {
    /// `n` queries were dropped because their client had gone.
    fn cancelled(&self, n: u64);
    /// A batch of `rows` queries holding `tokens` real tokens starts.
    fn started(&self, rows: usize, tokens: usize);
    /// A query waited `wait` from admission to its batch's start.
    fn waited(&self, wait: Duration);
    /// The batch ran (called before its queries are answered, so figures are in place first).
    fn ran(&self, report: &BatchReport);
    /// The batch [started](Self::started) with these figures is answered.
    fn done(&self, rows: usize, tokens: usize);
}

/// Tells the queue a batch is finished on every way out of [`run_batch`].
struct Finished<'a>(&'a BackendLoad);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.finished();
    }
}

/// The queue of batches, shared by a lane's backend threads (one per session).
pub type Batches = Arc<Mutex<mpsc::Receiver<Arc<Handed<Entry>>>>>;

/// Runs `backend` on a new thread named `name` until `batches` is closed. `setup` runs first, on
/// that thread (to lower its priority, say) and makes the backend there: a backend whose
/// library starts threads of its own starts them from this one. Threads sharing `batches` take
/// turns waiting for the next batch, and run theirs at the same time.
pub fn spawn<B, F>(
    name: &str,
    setup: F,
    batches: Batches,
    backend_load: Arc<BackendLoad>,
    observer: Arc<dyn Observer>,
) -> std::io::Result<JoinHandle<()>>
where
    B: Backend,
    F: FnOnce() -> Option<B> + Send + 'static,
{
    std::thread::Builder::new().name(name.into()).spawn(move || {
        let Some(mut backend) = setup() else { return };
        loop {
            // The lock is held while this thread waits, and released before the batch runs.
            let batch = batches.lock().unwrap_or_else(|e| e.into_inner()).blocking_recv();
            let Some(batch) = batch else { break };
            run_batch(&mut backend, batch, &backend_load, &*observer);
        }
    })
}

fn run_batch<B: Backend>(backend: &mut B, batch: Arc<Handed<Entry>>, load: &BackendLoad, obs: &dyn Observer) {
    let _finished = Finished(load);
    let started = Instant::now();
    // Under the lock the queue task would take a row under (to time it out): the rows the input
    // is built from stay in place until they are answered, and their rows line up with its.
    let mut rows = batch.rows();
    let (mut gone, mut expired) = (0, Vec::new());
    rows.retain_mut(|row| match row.take() {
        Some(q) if q.item.is_cancelled() => {
            gone += 1;
            false
        }
        Some(q) if q.item.deadline <= started => {
            expired.push(q);
            false
        }
        kept => {
            *row = kept;
            row.is_some()
        }
    });
    if gone > 0 {
        obs.cancelled(gone);
    }
    let prepared = (!rows.is_empty()).then(|| {
        let live = || rows.iter().flatten();
        let tokens = live().map(|q| q.item.tokens()).sum::<usize>();
        obs.started(rows.len(), tokens);
        let mut total_wait = Duration::ZERO;
        for q in live() {
            let wait = started.saturating_duration_since(q.item.admitted_at);
            total_wait += wait;
            obs.waited(wait);
        }
        let input = InputBatch::pad_to(live().map(|q| (q.item.tokens.ids(), q.item.tokens.type_ids())), |r, s| {
            backend.padded_shape(r, s)
        });
        (input, rows.len(), tokens, total_wait)
    });
    drop(rows);
    expired.into_iter().for_each(|q| q.item.time_out());
    let Some((input, n, tokens, total_wait)) = prepared else { return };
    let span = tracing::debug_span!("batch", rows = n, padded_len = input.seq_len);
    let result = span.in_scope(|| backend.infer(&input));
    let elapsed = started.elapsed();
    obs.ran(&BatchReport { rows: n, tokens, padded_len: input.seq_len, elapsed, total_wait });
    // The rows still waiting: the queue task may have timed some out meanwhile.
    let live = std::mem::take(&mut *batch.rows());
    match result {
        Ok(logits) => {
            for (q, logits) in live.into_iter().zip(logits) {
                let Some(q) = q else { continue };
                q.item.span.in_scope(|| tracing::trace!(inference_ms = elapsed.as_secs_f64() * 1e3, "answered"));
                let _ = q.item.respond.send(Ok(logits));
            }
        }
        Err(e) => {
            tracing::error!(error = %e, rows = n, "batch failed");
            for q in live.into_iter().flatten() {
                let _ = q.item.respond.send(Err(Unanswered::Failed(e.clone())));
            }
        }
    }
    obs.done(n, tokens);
}
