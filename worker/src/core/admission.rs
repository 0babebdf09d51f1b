//! Admission control and the instantaneous load: a semaphore of `capacity` query permits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wire::QueueStats;

use crate::batching::Limits;

#[derive(Debug)]
pub struct Admission {
    capacity: u32,
    permits: Arc<Semaphore>,
    in_flight: AtomicU64,
}

impl Admission {
    pub fn new(capacity: usize) -> Self {
        let capacity = u32::try_from(capacity).unwrap_or(u32::MAX).min(Semaphore::MAX_PERMITS as u32);
        Self { capacity, permits: Arc::new(Semaphore::new(capacity as usize)), in_flight: AtomicU64::new(0) }
    }

    /// Admits `n` queries, or refuses at once when fewer than `n` places are free.
    pub fn try_admit(&self, n: usize) -> Option<OwnedSemaphorePermit> {
        let n = u32::try_from(n).ok()?;
        self.permits.clone().try_acquire_many_owned(n).ok()
    }

    /// Queries admitted and not yet answered.
    pub fn outstanding(&self) -> u64 {
        u64::from(self.capacity) - self.permits.available_permits() as u64
    }

    /// Set by the backend thread to the size of the batch it is running (0 between batches).
    pub fn set_in_flight(&self, n: u64) {
        self.in_flight.store(n, Ordering::Relaxed);
    }

    pub fn stats(&self, limits: Limits) -> QueueStats {
        let outstanding = self.outstanding();
        let in_flight = self.in_flight.load(Ordering::Relaxed).min(outstanding);
        QueueStats {
            queued: outstanding - in_flight,
            in_flight,
            capacity: u64::from(self.capacity),
            max_batch_rows: limits.max_rows as u64,
            max_batch_tokens: limits.max_tokens as u64,
            max_queue_delay_ms: limits.max_delay.as_secs_f64() * 1e3,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn admission_is_bounded_and_counts_are_disjoint() {
        let load = Admission::new(4);
        let limits = Limits { max_rows: 2, max_tokens: 10, max_delay: Duration::ZERO, min_fill: 0.0 };
        let a = load.try_admit(3).expect("room for 3");
        assert!(load.try_admit(2).is_none(), "only one place left");
        let b = load.try_admit(1).expect("the last place");
        load.set_in_flight(2);
        let s = load.stats(limits);
        assert_eq!((s.queued, s.in_flight, s.capacity), (2, 2, 4));
        drop(a);
        drop(b);
        load.set_in_flight(0);
        assert_eq!(load.outstanding(), 0);
        assert!(load.try_admit(5).is_none(), "more than the capacity never fits");
    }
}
