//! A deterministic backend without ONNX Runtime, for tests of everything above the backend
//! (admission, 429, draining, batching, lanes) through HTTP.
//!
//! Row `r`'s class is [`FakeBackend::class_of`] its token ids: the sum of the ids modulo the
//! number of labels, with logit 4 (softmax score ~0.9 over seven labels) and 0 elsewhere. A batch
//! can be made to take a fixed time ([`FakeBackend::with_delay`]), to wait at a gate until the test
//! lets it go ([`FakeBackend::hold`] / [`FakeBackend::release`]), or to fail. Clones share the
//! gate and the log of batches run, so a test keeps one clone and hands another to the worker.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{Backend, BackendError, InputBatch};

/// Logit of the chosen class; every other class gets 0.
const CHOSEN_LOGIT: f32 = 4.0;

#[derive(Debug, Clone)]
pub struct FakeBackend {
    num_labels: usize,
    delay: Duration,
    /// Time each row holding a query adds to a batch (a GPU-like cost: `delay + per_row x rows`).
    per_row: Duration,
    shared: Arc<Shared>,
}

/// One batch as the backend saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunBatch {
    /// Rows holding a query (padding rows excluded).
    pub rows: usize,
    pub seq_len: usize,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    held: bool,
    failing: bool,
    /// Batches waiting at the gate now.
    waiting: usize,
    log: Vec<RunBatch>,
}

impl FakeBackend {
    pub fn new(num_labels: usize) -> Self {
        assert!(num_labels > 0, "at least one label");
        Self { num_labels, delay: Duration::ZERO, per_row: Duration::ZERO, shared: Arc::default() }
    }

    /// Every batch takes `delay` (on the backend's thread, like real inference).
    #[must_use]
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Every batch takes `base + per_row x rows` (rows holding a query): a backend of known
    /// capacity, `max_rows / (base + per_row x max_rows)` queries per second per session when its
    /// batches are full, and launch-bound like a GPU when they are small.
    #[must_use]
    pub fn with_cost(mut self, base: Duration, per_row: Duration) -> Self {
        self.delay = base;
        self.per_row = per_row;
        self
    }

    /// The class the fake gives a query with these token ids.
    pub fn class_of(ids: &[i64], num_labels: usize) -> usize {
        let sum = ids.iter().fold(0u64, |acc, &id| acc.wrapping_add(id.unsigned_abs()));
        (sum % num_labels as u64) as usize
    }

    /// Batches wait at the gate until [`release`](Self::release).
    pub fn hold(&self) {
        self.lock().held = true;
    }

    pub fn release(&self) {
        self.lock().held = false;
        self.shared.changed.notify_all();
    }

    /// Batches fail with an inference error while set.
    pub fn set_failing(&self, failing: bool) {
        self.lock().failing = failing;
    }

    /// Batches waiting at the gate now.
    pub fn waiting(&self) -> usize {
        self.lock().waiting
    }

    /// Every batch run so far, in order.
    pub fn batches(&self) -> Vec<RunBatch> {
        self.lock().log.clone()
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.shared.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Backend for FakeBackend {
    fn infer(&mut self, batch: &InputBatch) -> Result<Vec<Vec<f32>>, BackendError> {
        let mut state = self.lock();
        state.waiting += 1;
        while state.held {
            state = self.shared.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        state.waiting -= 1;
        let failing = state.failing;
        drop(state);
        let seq = batch.seq_len;
        let busy_rows = (0..batch.rows).filter(|r| batch.attention_mask[r * seq..(r + 1) * seq].contains(&1)).count();
        let cost = self.delay + self.per_row * u32::try_from(busy_rows).unwrap_or(u32::MAX);
        if !cost.is_zero() {
            std::thread::sleep(cost);
        }
        if failing {
            return Err(BackendError::Inference("the fake backend was told to fail".into()));
        }
        let mut rows = 0;
        let logits = (0..batch.rows)
            .map(|r| {
                let ids = &batch.input_ids[r * seq..(r + 1) * seq];
                let mask = &batch.attention_mask[r * seq..(r + 1) * seq];
                let real: Vec<i64> = ids.iter().zip(mask).filter(|(_, m)| **m == 1).map(|(id, _)| *id).collect();
                rows += usize::from(!real.is_empty());
                let mut out = vec![0.0; self.num_labels];
                out[Self::class_of(&real, self.num_labels)] = CHOSEN_LOGIT;
                out
            })
            .collect();
        self.lock().log.push(RunBatch { rows, seq_len: seq });
        Ok(logits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_ids_and_padding_is_ignored() {
        let mut b = FakeBackend::new(7);
        let (a, t) = ([101, 7, 102], [0, 0, 0]);
        let (c, u) = ([101, 102], [0, 0]);
        let out = b.infer(&InputBatch::pad_to([(&a[..], &t[..]), (&c[..], &u[..])], |_, s| (4, s))).unwrap();
        assert_eq!(out.len(), 4);
        assert_eq!(out[0][FakeBackend::class_of(&a, 7)], CHOSEN_LOGIT);
        assert_eq!(out[1][FakeBackend::class_of(&c, 7)], CHOSEN_LOGIT);
        assert_eq!(b.batches(), [RunBatch { rows: 2, seq_len: 3 }]);
    }

    #[test]
    fn a_batch_costs_its_base_and_its_busy_rows() {
        let ms = Duration::from_millis;
        let mut b = FakeBackend::new(3).with_cost(ms(20), ms(10));
        let (a, t) = ([101i64, 7, 102], [0i64, 0, 0]);
        let rows = [(&a[..], &t[..]), (&a[..], &t[..])];
        let started = std::time::Instant::now();
        b.infer(&InputBatch::pad_to(rows, |_, s| (4, s))).unwrap();
        let took = started.elapsed();
        // Two busy rows (the two padding rows cost nothing): 20 + 2 x 10 ms.
        assert!(took >= ms(40) && took < ms(40) * 10, "{took:?}");
    }

    #[test]
    fn a_held_gate_blocks_until_released_and_failures_are_errors() {
        let b = FakeBackend::new(3);
        b.hold();
        let mut runner = b.clone();
        let t = std::thread::spawn(move || runner.infer(&InputBatch::pad([(&[1i64][..], &[0i64][..])])));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while b.waiting() == 0 {
            assert!(std::time::Instant::now() < deadline, "the batch never reached the gate");
            std::thread::yield_now();
        }
        assert!(b.batches().is_empty(), "nothing ran while held");
        b.release();
        assert!(t.join().unwrap().is_ok());
        b.set_failing(true);
        assert!(b.clone().infer(&InputBatch::pad([(&[1i64][..], &[0i64][..])])).is_err());
    }
}
