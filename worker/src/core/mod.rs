//! The worker's core, between HTTP and batching (the role text-embeddings-inference's
//! `core/infer.rs` plays): it validates a request's queries, admits them, tokenizes them, queues
//! them for the batcher, waits for their logits and turns those into predictions.
//!
//! The HTTP layer above only parses requests and maps [`CoreError`]s to answers; the batching
//! engine below knows nothing of requests, labels or HTTP.

pub mod admission;
mod error;
mod observer;
pub mod postprocess;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::try_join_all;
use tokenizers::{Encoding, Tokenizer};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use wire::{Prediction, QueueStats};

pub use admission::Admission;
pub use error::CoreError;

use crate::backend::Backend;
use crate::batching::{self, BackendLoad, Entry, Limits};
use crate::metrics::Metrics;
use crate::stats::Stats;

/// Requests with at most this many bytes of queries are tokenized on the runtime thread.
const INLINE_TOKENIZE_BYTES: usize = 512;

/// Per-request bounds.
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    pub max_queries: usize,
    pub max_query_bytes: usize,
    pub request_timeout: Duration,
}

/// What the core is made of; see [`Core::start`].
#[derive(Debug)]
pub struct Parts {
    pub tokenizer: Tokenizer,
    /// Class labels in the model's output order.
    pub labels: Vec<String>,
    pub limits: RequestLimits,
    pub batch_limits: Limits,
    /// Most queries admitted at once.
    pub queue_capacity: usize,
    pub stats: Arc<Stats>,
    pub metrics: Arc<Metrics>,
}

#[derive(Debug)]
pub struct Core {
    tokenizer: Arc<Tokenizer>,
    labels: Arc<[String]>,
    admission: Arc<Admission>,
    queue: mpsc::Sender<Entry>,
    limits: RequestLimits,
    batch_limits: Limits,
    stats: Arc<Stats>,
    draining: AtomicBool,
}

impl Core {
    /// Starts the batching task and the backend's thread; `setup` makes the backend on that
    /// thread (`None`: it could not, and has said why). Must be called within a tokio runtime.
    pub fn start<B, F>(parts: Parts, setup: F) -> std::io::Result<Self>
    where
        B: Backend,
        F: FnOnce() -> Option<B> + Send + 'static,
    {
        let Parts { tokenizer, labels, limits, batch_limits, queue_capacity, stats, metrics } = parts;
        let capacity = queue_capacity.max(1);
        let admission = Arc::new(Admission::new(capacity));
        let (queue_tx, queue_rx) = mpsc::channel(capacity);
        let (batch_tx, batch_rx) = mpsc::channel(1);
        let backend_load = Arc::new(BackendLoad::default());
        let cancelled = metrics.cancelled.clone();
        tokio::spawn(batching::task::run(batch_limits, queue_rx, batch_tx, backend_load.clone(), move |n| {
            cancelled.inc_by(n);
        }));
        let observer = Arc::new(observer::Telemetry { admission: admission.clone(), stats: stats.clone(), metrics });
        batching::runner::spawn("backend", setup, batch_rx, backend_load, observer)?;
        Ok(Self {
            tokenizer: Arc::new(tokenizer),
            labels: labels.into(),
            admission,
            queue: queue_tx,
            limits,
            batch_limits,
            stats,
            draining: AtomicBool::new(false),
        })
    }

    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// Readiness turns false and new work is refused; accepted work goes on.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Queries admitted and not yet answered.
    pub fn outstanding(&self) -> u64 {
        self.admission.outstanding()
    }

    pub fn queue_stats(&self) -> QueueStats {
        self.admission.stats(self.batch_limits)
    }

    /// Classifies `queries`, in order: validates, admits (or refuses at once with
    /// [`CoreError::Overloaded`]), tokenizes, queues, and waits for the batches, at most the
    /// request timeout.
    pub async fn predict(&self, queries: Vec<String>, all_scores: bool) -> Result<Vec<Prediction>, CoreError> {
        if self.is_draining() {
            return Err(CoreError::Draining);
        }
        self.validate(&queries)?;
        let n = queries.len();
        let Some(_permit) = self.admission.try_admit(n) else {
            self.stats.rejected(Instant::now(), n as u64);
            return Err(CoreError::Overloaded);
        };
        let admitted_at = Instant::now();
        self.stats.admitted(admitted_at, n as u64);
        let timeout = self.limits.request_timeout;
        let logits = tokio::time::timeout(timeout, self.run(queries, admitted_at))
            .await
            .map_err(|_| CoreError::Timeout(timeout))??;
        self.stats.completed(Instant::now(), n as u64);
        Ok(logits.into_iter().map(|row| postprocess::prediction(&self.labels, row, all_scores)).collect())
    }

    fn validate(&self, queries: &[String]) -> Result<(), CoreError> {
        let limits = &self.limits;
        if queries.is_empty() {
            return Err(CoreError::Invalid("`queries` is empty".into()));
        }
        if queries.len() > limits.max_queries {
            return Err(CoreError::Invalid(format!(
                "{} queries in one request; the limit is {}",
                queries.len(),
                limits.max_queries
            )));
        }
        for (index, q) in queries.iter().enumerate() {
            if q.trim().is_empty() {
                return Err(CoreError::Invalid(format!("query {index} is empty")));
            }
            if q.len() > limits.max_query_bytes {
                return Err(CoreError::QueryTooLong { index, len: q.len(), limit: limits.max_query_bytes });
            }
        }
        Ok(())
    }

    /// Tokenizes, queues every query, and waits for all logits.
    async fn run(&self, queries: Vec<String>, admitted_at: Instant) -> Result<Vec<Vec<f32>>, CoreError> {
        let encodings = self.tokenize(queries).await?;
        let span = tracing::Span::current();
        let mut receivers = Vec::with_capacity(encodings.len());
        for enc in encodings {
            let (respond, rx) = oneshot::channel();
            let entry = Entry {
                input_ids: enc.get_ids().iter().map(|&i| i64::from(i)).collect(),
                type_ids: enc.get_type_ids().iter().map(|&i| i64::from(i)).collect(),
                admitted_at,
                respond,
                span: span.clone(),
            };
            // The queue holds as many entries as there are admission permits, so this never waits.
            self.queue.try_send(entry).map_err(|e| CoreError::Internal(format!("queue: {e}")))?;
            receivers.push(rx);
        }
        let answers =
            try_join_all(receivers).await.map_err(|_| CoreError::Internal("the backend dropped a query".into()))?;
        answers.into_iter().map(|a| a.map_err(|e| CoreError::Internal(e.to_string()))).collect()
    }

    /// A short request tokenizes in tens of microseconds: inline is cheaper than a thread
    /// hand-off. Longer ones go to the blocking pool, in parallel across requests, so they never
    /// stall the runtime.
    async fn tokenize(&self, queries: Vec<String>) -> Result<Vec<Encoding>, CoreError> {
        let encode = |tokenizer: &Tokenizer, qs: &[String]| {
            qs.iter().map(|q| tokenizer.encode(q.as_str(), true)).collect::<Result<Vec<_>, _>>()
        };
        if queries.iter().map(String::len).sum::<usize>() <= INLINE_TOKENIZE_BYTES {
            encode(&self.tokenizer, &queries)
        } else {
            let tokenizer = self.tokenizer.clone();
            tokio::task::spawn_blocking(move || encode(&tokenizer, &queries))
                .await
                .map_err(|e| CoreError::Internal(format!("tokenizer task: {e}")))?
        }
        .map_err(|e| CoreError::Invalid(format!("could not tokenize: {e}")))
    }
}
