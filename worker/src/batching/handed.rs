//! A batch once it leaves the queue: shared by the queue task, which answers its queries at their
//! deadline, and the backend thread that runs it. A request has no timer of its own (one per
//! request cost a few percent of the worker's CPU under load): its queries are timed out by the
//! lane wherever they wait, here included, so a backend that hangs still leaves every request
//! answered at its deadline.

use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;

use super::{Batch, Pending, Queued};

/// A batch handed to the backend: each row's query, until it is answered. A row is emptied, not
/// removed, when its query times out while the batch runs, so the backend's rows still line up.
#[derive(Debug)]
pub struct Handed<T> {
    rows: Mutex<Vec<Option<Queued<T>>>>,
}

impl<T: Pending> Handed<T> {
    pub fn new(batch: Batch<T>) -> Self {
        Self { rows: Mutex::new(batch.entries.into_iter().map(Some).collect()) }
    }

    /// The rows, locked (the backend thread builds its input under the lock, and takes them back
    /// to answer).
    pub fn rows(&self) -> MutexGuard<'_, Vec<Option<Queued<T>>>> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queries not yet answered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.rows().iter().flatten().count()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Times out the queries whose deadline is at or before `now`; returns the earliest deadline
    /// left.
    pub fn expire(&self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for row in self.rows().iter_mut() {
            match row.as_ref().and_then(|q| q.item.deadline()) {
                Some(d) if d <= now => row.take().expect("a row with a deadline holds a query").item.time_out(),
                Some(d) => next = Some(next.map_or(d, |n| n.min(d))),
                None => {}
            }
        }
        next
    }
}
