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
//!   of its input), a 429 (only on a worker ready now: when all are saturated the client gets
//!   the 429 at once; and never for a heavy request, see below), a 5xx other than 503 or an
//!   answer that is not a well-formed one (the worker is broken; `/predict` is pure), the
//!   attempt's own timeout (below). Never retried: any other answer (passed through), an
//!   answer refused at the budget of answer bytes (502), the request's deadline (504).
//! * **A heavy request's 429 is not retried** ([`may_retry`]): a worker that refuses a heavy
//!   request is short of room for heavy work, and under a flood of heavy requests a retry would
//!   double what each costs the pool (every refusal sent to a second worker). The client gets
//!   the worker's 429 with its `Retry-After`.
//! * **Per-attempt timeout** ([`Budget::attempt_deadline`]): while a retry is left, an attempt
//!   waits at most `max(--attempt-timeout-factor × the worker's latency estimate,
//!   --attempt-timeout-min)`, scaled up for a heavy request by its estimated tokens over
//!   `--heavy-request-tokens`, and never past the request's deadline. A stalled worker then
//!   costs the request that timeout, not the whole deadline. The estimate is a peak-EWMA
//!   (it jumps to slow answers at once), bounded by the deadline. The last attempt waits until
//!   the deadline.
//! * Failures that survive the retry become 502 `upstream`, or 503 `unavailable` with
//!   `Retry-After` when every worker tried was draining, or the last worker's 429.

use std::time::Duration;

use tokio::time::Instant;

use crate::pool::outcome::RetryReason;

/// Whether an attempt that ended for `reason` may go to another worker at all (the budget then
/// decides whether one is left): not a heavy request's 429.
pub(crate) fn may_retry(reason: RetryReason, heavy: bool) -> bool {
    !(heavy && reason == RetryReason::Overloaded)
}

/// The per-attempt timeout's settings (`--attempt-timeout-factor`, `--attempt-timeout-min`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AttemptTimeout {
    pub(crate) factor: f64,
    pub(crate) min: Duration,
}

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

    /// When the next attempt, starting at `now` on a worker of latency estimate `estimate_s`,
    /// must have its answer, and whether that is the request's deadline (then a timeout is the
    /// request's: 504, not retried). `scale` (at least 1) is the request's cost over a light one's.
    /// Without `another_ready` worker to retry on, the attempt waits until the deadline: a slow
    /// worker's answer is better than none.
    pub(crate) fn attempt_deadline(
        &self,
        now: Instant,
        estimate_s: f64,
        policy: AttemptTimeout,
        scale: f64,
        another_ready: bool,
    ) -> (Instant, bool) {
        if self.retries_left == 0 || !another_ready {
            return (self.deadline, true);
        }
        let by_estimate = policy.factor * estimate_s;
        let scale = if scale.is_finite() { scale.max(1.0) } else { f64::MAX };
        let timeout = crate::pool::secs(by_estimate.max(policy.min.as_secs_f64()) * scale);
        match now.checked_add(timeout) {
            Some(at) if at < self.deadline => (at, false),
            _ => (self.deadline, true),
        }
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
    fn a_heavy_requests_429_is_not_retried_and_everything_else_is() {
        assert!(!may_retry(RetryReason::Overloaded, true));
        assert!(may_retry(RetryReason::Overloaded, false));
        for r in [RetryReason::Connect, RetryReason::ServerError, RetryReason::Malformed, RetryReason::Slow] {
            assert!(may_retry(r, true), "{r:?}");
        }
    }

    const POLICY: AttemptTimeout = AttemptTimeout { factor: 4.0, min: Duration::from_secs(1) };

    #[test]
    fn one_retry_and_the_last_attempt_gets_the_request_deadline() {
        let t0 = Instant::now();
        let mut b = Budget::new(t0, Duration::from_secs(10));
        assert_eq!(b.attempt_deadline(t0, 0.01, POLICY, 1.0, true), (t0 + Duration::from_secs(1), false));
        assert_eq!(b.attempt_deadline(t0, 0.01, POLICY, 1.0, false), (t0 + Duration::from_secs(10), true), "alone");
        assert!(b.take_retry());
        assert_eq!(b.attempt_deadline(t0, 0.01, POLICY, 1.0, true), (t0 + Duration::from_secs(10), true));
        assert!(!b.take_retry(), "only one");
    }

    #[test]
    fn the_attempt_timeout_follows_the_estimate_and_the_cost_within_the_deadline() {
        let t0 = Instant::now();
        let b = Budget::new(t0, Duration::from_secs(10));
        let at = |now, est, scale| b.attempt_deadline(now, est, POLICY, scale, true);
        assert_eq!(at(t0, 0.5, 1.0), (t0 + Duration::from_secs(2), false), "4 x 500 ms");
        assert_eq!(at(t0, 0.0, 1.0), (t0 + Duration::from_secs(1), false), "the floor");
        assert_eq!(at(t0, 0.0, 3.0), (t0 + Duration::from_secs(3), false), "a heavy request waits longer");
        assert_eq!(at(t0, 0.0, 0.1), (t0 + Duration::from_secs(1), false), "never below the floor");
        let late = t0 + Duration::from_millis(9_500);
        assert_eq!(at(late, 0.01, 1.0), (t0 + Duration::from_secs(10), true), "capped by the deadline");
        for (est, scale) in [(f64::MAX, 1.0), (f64::INFINITY, 1.0), (1.0, f64::INFINITY), (1.0, f64::NAN)] {
            assert_eq!(at(t0, est, scale), (t0 + Duration::from_secs(10), true), "{est} {scale}");
        }
        assert_eq!(at(t0, f64::NAN, 1.0), (t0 + Duration::from_secs(1), false), "no estimate: the floor");
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
