//! Dynamic batching: the queue's policy ([`state`]), the task that runs it ([`task`]) and the
//! thread that drives the backend with the batches it cuts ([`runner`]).

pub mod handed;
pub mod runner;
pub mod state;
pub mod task;

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::futures::Notified;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

pub use handed::Handed;
pub use state::{Batch, Limits, Pending, Queued, State};

use crate::backend::BackendError;

/// The answer for one query: its class scores (logits), or why it has none.
pub type Answer = Result<Vec<f32>, Unanswered>;

/// Why a query got no logits.
#[derive(Debug, Clone)]
pub enum Unanswered {
    /// Its batch failed.
    Failed(BackendError),
    /// Its request's deadline passed while it waited in the queue, in a batch handed to the
    /// backend, or in a batch the backend was running.
    TimedOut,
}

/// A query's token ids and token type ids, in one allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    /// The ids, then as many type ids.
    cells: Box<[i64]>,
}

impl Tokens {
    /// `ids` and `type_ids` must be as long as each other.
    pub fn new(ids: &[i64], type_ids: &[i64]) -> Self {
        assert_eq!(ids.len(), type_ids.len(), "one type id per token");
        let mut cells = Vec::with_capacity(ids.len() * 2);
        cells.extend_from_slice(ids);
        cells.extend_from_slice(type_ids);
        Self { cells: cells.into_boxed_slice() }
    }

    /// Tokens in the query.
    pub fn len(&self) -> usize {
        self.cells.len() / 2
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    pub fn ids(&self) -> &[i64] {
        &self.cells[..self.len()]
    }

    pub fn type_ids(&self) -> &[i64] {
        &self.cells[self.len()..]
    }
}

/// One tokenized query waiting for a batch.
#[derive(Debug)]
pub struct Entry {
    pub tokens: Tokens,
    /// When the request was admitted (queue wait is measured from here).
    pub admitted_at: Instant,
    /// When the request times out: the lane answers [`Unanswered::TimedOut`] then, wherever the
    /// query is (so a request needs no timer of its own).
    pub deadline: Instant,
    pub respond: oneshot::Sender<Answer>,
    /// The request's span, so queue and inference time land on its trace.
    pub span: tracing::Span,
}

impl Pending for Entry {
    fn tokens(&self) -> usize {
        self.tokens.len()
    }
    fn is_cancelled(&self) -> bool {
        self.respond.is_closed()
    }
    fn deadline(&self) -> Option<Instant> {
        Some(self.deadline)
    }
    fn time_out(self) {
        let _ = self.respond.send(Err(Unanswered::TimedOut));
    }
}

/// Batches handed to the backend and not yet finished, shared by the queue task and the backend
/// threads. The queue cuts a partial batch only while fewer than `sessions` are (a session is
/// free to run it at once).
#[derive(Debug)]
pub struct BackendLoad {
    pending: AtomicUsize,
    /// How many batches the backend runs at once: the lane's sessions taking batches, each on
    /// its own thread.
    sessions: AtomicUsize,
    finished: Notify,
}

impl Default for BackendLoad {
    fn default() -> Self {
        Self::new(1)
    }
}

impl BackendLoad {
    /// A backend of `sessions` sessions (at least one).
    pub fn new(sessions: usize) -> Self {
        Self { pending: AtomicUsize::new(0), sessions: AtomicUsize::new(sessions.max(1)), finished: Notify::new() }
    }

    /// A backend whose sessions are still coming up: none counts until it has
    /// [`joined`](Self::joined), so that no partial batch is cut for a session not there.
    pub fn joining() -> Self {
        Self { pending: AtomicUsize::new(0), sessions: AtomicUsize::new(0), finished: Notify::new() }
    }

    /// A session takes batches from now on.
    pub fn joined(&self) {
        self.sessions.fetch_add(1, Ordering::SeqCst);
        // The queue looks again: a partial batch may leave now.
        self.finished.notify_one();
    }

    /// The queue task hands a batch over.
    pub fn handed(&self) {
        self.pending.fetch_add(1, Ordering::SeqCst);
    }

    /// The backend finished a batch.
    pub fn finished(&self) {
        self.pending.fetch_sub(1, Ordering::SeqCst);
        self.finished.notify_one();
    }

    /// A session is free: a batch handed now runs at once.
    pub fn has_room(&self) -> bool {
        self.pending.load(Ordering::SeqCst) < self.sessions.load(Ordering::SeqCst)
    }

    /// Resolves after the next [`finished`](Self::finished) (or at once if one was missed). Kept
    /// across the batcher's loop, so that a wait is not registered and unregistered (two locks)
    /// at every query; a finish it saw while not polled only costs one spare turn of the loop.
    pub fn on_finish(&self) -> Notified<'_> {
        self.finished.notified()
    }
}
