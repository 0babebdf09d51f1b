//! Dynamic batching: the queue's policy ([`state`]) and the task that runs it ([`task`]).

pub mod state;
pub mod task;

use tokio::sync::oneshot;
use tokio::time::Instant;

pub use state::{Batch, Limits, Pending, Queued, State};

use crate::backend::BackendError;

/// The answer for one query: its class probabilities.
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
