//! Dynamic batching: the queue's policy ([`state`]), the task that runs it ([`task`]) and the
//! thread that drives the backend with the batches it cuts ([`runner`]).

pub mod runner;
pub mod state;
pub mod task;

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

pub use state::{Batch, Limits, Pending, Queued, State};

use crate::backend::BackendError;

/// The answer for one query: its class scores (logits), or why inference failed.
pub type Answer = Result<Vec<f32>, BackendError>;

/// One tokenized query waiting for a batch.
#[derive(Debug)]
pub struct Entry {
    pub input_ids: Vec<i64>,
    pub type_ids: Vec<i64>,
    /// When the request was admitted (queue wait is measured from here).
    pub admitted_at: Instant,
    pub respond: oneshot::Sender<Answer>,
    /// The request's span, so queue and inference time land on its trace.
    pub span: tracing::Span,
}

impl Pending for Entry {
    fn tokens(&self) -> usize {
        self.input_ids.len()
    }
    fn is_cancelled(&self) -> bool {
        self.respond.is_closed()
    }
}

/// Batches handed to the backend and not yet finished, shared by the queue task and the backend
/// thread. The queue cuts a partial batch only when this is zero.
#[derive(Debug, Default)]
pub struct BackendLoad {
    pending: AtomicUsize,
    finished: Notify,
}

impl BackendLoad {
    /// The queue task hands a batch over.
    pub fn handed(&self) {
        self.pending.fetch_add(1, Ordering::SeqCst);
    }

    /// The backend finished a batch.
    pub fn finished(&self) {
        self.pending.fetch_sub(1, Ordering::SeqCst);
        self.finished.notify_one();
    }

    pub fn is_idle(&self) -> bool {
        self.pending.load(Ordering::SeqCst) == 0
    }

    /// Resolves after the next [`finished`](Self::finished) (or at once if one was missed).
    pub async fn wait_finished(&self) {
        self.finished.notified().await;
    }
}
