//! How much of a worker's answer the gateway holds in memory: a cap per answer and a budget of
//! bytes over every answer held at once, as Envoy's per-request buffer limit and its overload
//! manager's heap bound do for a proxy that buffers.
//!
//! - **Per answer** ([`Limit::max_bytes`], `--max-answer-bytes`): a body declared or grown past
//!   it is refused before more is read ([`Error::TooLarge`](super::Error::TooLarge)).
//! - **Over all answers** ([`AnswerBudget`], `--max-buffered-answer-bytes`): every `/predict`
//!   answer's body is charged for its bytes as they are read (a `Content-Length` body at once,
//!   before its buffer is reserved; a chunked or close-delimited one as it grows) and the charge
//!   travels with the answer ([`Charge`]) until the client's copy of it is dropped (written to
//!   the client, or the request abandoned). An answer that does not fit is refused
//!   ([`Error::Budget`](super::Error::Budget)); bodies over [`LARGE_ANSWER_BYTES`] may use
//!   only three quarters of the budget, so a worker sending large answers leaves room for the
//!   ordinary small ones of the others (the listener's request-body budget has the same rule).
//!
//! The charge is one atomic update per answer (two with its release), on one counter shared by
//! every request: the `gateway_answer_buffered_bytes` gauge.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use prometheus_client::metrics::gauge::Gauge;

/// Answers larger than this may use only three quarters of the budget.
pub(crate) const LARGE_ANSWER_BYTES: usize = 64 << 10;

/// The budget of answer bytes held at once; its count is a gauge.
#[derive(Debug)]
pub struct AnswerBudget {
    max: i64,
    used: Gauge,
}

impl AnswerBudget {
    /// A budget of `max` bytes whose use is kept in `used`.
    pub fn new(max: usize, used: Gauge) -> Arc<Self> {
        Arc::new(Self { max: i64::try_from(max).unwrap_or(i64::MAX), used })
    }

    fn limit_for(&self, total: usize) -> i64 {
        if total > LARGE_ANSWER_BYTES { self.max / 4 * 3 } else { self.max }
    }

    fn try_take(&self, n: usize, total: usize) -> bool {
        let Ok(n) = i64::try_from(n) else { return false };
        let limit = self.limit_for(total);
        self.used
            .inner()
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| (u.saturating_add(n) <= limit).then_some(u + n))
            .is_ok()
    }

    /// Bytes held now.
    #[cfg(test)]
    pub fn used(&self) -> i64 {
        self.used.get()
    }
}

/// Bytes of one answer taken from the budget, given back when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<AnswerBudget>,
    bytes: usize,
}

impl Charge {
    pub(crate) fn new(budget: &Arc<AnswerBudget>) -> Self {
        Self { budget: Arc::clone(budget), bytes: 0 }
    }

    /// Grow the charge to `total` bytes; `false` (and unchanged) when they do not fit.
    pub(crate) fn grow_to(&mut self, total: usize) -> bool {
        let more = total.saturating_sub(self.bytes);
        if more == 0 {
            return true;
        }
        if !self.budget.try_take(more, total) {
            return false;
        }
        self.bytes = total;
        true
    }

    /// Move `n` bytes of this charge (at most all of it) into a charge of their own: the parts of
    /// one answer split among several clients (a merged exchange's answer), each given back when
    /// its part is dropped. Nothing is taken from or given back to the budget.
    pub(crate) fn split_off(&mut self, n: usize) -> Charge {
        let n = n.min(self.bytes);
        self.bytes -= n;
        Charge { budget: Arc::clone(&self.budget), bytes: n }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.used.dec_by(i64::try_from(self.bytes).unwrap_or(i64::MAX));
        }
    }
}

/// What one answer may hold: at most `max_bytes` of body, charged to `budget` if there is one
/// (`/predict`; the monitor's small polls have none).
#[derive(Debug, Clone, Copy)]
pub struct Limit<'a> {
    pub max_bytes: usize,
    pub budget: Option<&'a Arc<AnswerBudget>>,
}

impl From<usize> for Limit<'_> {
    fn from(max_bytes: usize) -> Self {
        Self { max_bytes, budget: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_add_up_and_are_given_back_when_dropped() {
        let b = AnswerBudget::new(100 << 10, Gauge::default());
        let mut small = Charge::new(&b);
        assert!(small.grow_to(10 << 10));
        assert!(small.grow_to(5), "shrinking asks nothing");
        let mut large = Charge::new(&b);
        assert!(large.grow_to(65 << 10), "65 KiB of the 75 a large answer may use");
        assert_eq!(b.used(), 75 << 10);
        assert!(!large.grow_to(70 << 10), "a large answer stops at three quarters");
        assert_eq!(b.used(), 75 << 10, "a refused growth takes nothing");
        let mut more_small = Charge::new(&b);
        assert!(more_small.grow_to(20 << 10), "small answers may use the rest");
        assert!(!Charge::new(&b).grow_to(10 << 10), "the whole budget is spent");
        drop((small, large, more_small));
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn a_split_charge_is_given_back_part_by_part() {
        let b = AnswerBudget::new(100 << 10, Gauge::default());
        let mut whole = Charge::new(&b);
        assert!(whole.grow_to(300));
        let first = whole.split_off(100);
        let second = whole.split_off(500);
        assert_eq!(b.used(), 300, "splitting takes nothing more");
        assert_eq!(second.bytes, 200, "at most what is left");
        drop(first);
        assert_eq!(b.used(), 200);
        drop((whole, second));
        assert_eq!(b.used(), 0);
    }
}
