//! The retry budget of one client request: every way a request may be sent more than once.
//!
//! * **Transport resend** (below this budget): a request that a reused keep-alive connection
//!   could not deliver (the worker closed the connection while idle; not a byte of answer came
//!   back) goes once more on a new connection to the same worker (`pool::outcome::send`). The
//!   worker cannot have seen it; it is not a retry and costs nothing from this budget.
//! * **Retry on another worker**: at most one, always on a worker other than the first, within
//!   the same overall deadline (`--request-timeout`). Which outcomes may be retried, and what
//!   they do to the worker's health, is the outcome policy's call (`pool::outcome::classify`):
//!   a connection failure (the request never reached a worker), a 503 (a draining or unready
//!   worker refuses before starting the work, by contract), a connection dropped before the whole
//!   answer arrived (the worker may have started it: safe because `/predict` is a pure function
//!   of its input). Never retried: any other answer (passed through), the deadline (504).
//! * Failures that survive the retry become 502 `upstream`, or 503 `unavailable` with
//!   `Retry-After` when every worker tried was draining.

use std::time::Duration;

use tokio::time::Instant;

/// How many more attempts one request may make, and by when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    deadline: Instant,
    retries_left: u32,
}

impl Budget {
    /// The budget of a request that arrived at `start`.
    pub(crate) fn new(start: Instant, request_timeout: Duration) -> Self {
        Self { deadline: start + request_timeout, retries_left: 1 }
    }

    /// When the next attempt must have its answer: the request's deadline.
    pub(crate) fn attempt_deadline(&self) -> Instant {
        self.deadline
    }

    /// Take a retry on another worker; `false` when none is left.
    pub(crate) fn take_retry(&mut self) -> bool {
        if self.retries_left == 0 {
            return false;
        }
        self.retries_left -= 1;
        true
    }

    /// How long to wait at `now` for a ready worker: `no_worker_wait`, within the deadline.
    pub(crate) fn worker_wait(&self, now: Instant, no_worker_wait: Duration) -> Duration {
        no_worker_wait.min(self.deadline.saturating_duration_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_retry_and_the_request_deadline_for_every_attempt() {
        let t0 = Instant::now();
        let mut b = Budget::new(t0, Duration::from_secs(10));
        assert_eq!(b.attempt_deadline(), t0 + Duration::from_secs(10));
        assert!(b.take_retry());
        assert!(!b.take_retry(), "only one");
    }

    #[test]
    fn the_wait_for_a_worker_ends_at_the_deadline() {
        let t0 = Instant::now();
        let b = Budget::new(t0, Duration::from_secs(10));
        let wait = Duration::from_secs(1);
        assert_eq!(b.worker_wait(t0, wait), wait);
        assert_eq!(b.worker_wait(t0 + Duration::from_millis(9_700), wait), Duration::from_millis(300));
        assert_eq!(b.worker_wait(t0 + Duration::from_secs(11), wait), Duration::ZERO);
    }
}
