//! Admission: whether the gateway takes a client's request at all. The one entry point is
//! [`Admission::admit`], called by the predict entry (`predict::handle`) for every predict route
//! once the request's body has arrived (a client trickling a body holds no admission, only its
//! bytes within the listener's budget and body deadline).
//!
//! Policy, in requests and in tokens (what a request costs a worker, estimated by `cost`), as
//! the worker's own admission (`worker/src/core/admission.rs`):
//! - at most so many requests and estimated tokens inside the gateway at once: what the ready
//!   workers can answer within the request's deadline (Little's law: the sum of their reported
//!   capacities, queries per second, times `--request-timeout`; in tokens, times
//!   `--max-query-tokens`, the most a query is estimated at), never less than
//!   `--max-outstanding` and `--max-outstanding-tokens` (the floors, all there is while no
//!   worker reports a capacity). Recomputed every `--signal-interval` ([`follow_capacity`]), so
//!   a step up that the pool serves is not refused by a bound sized for a smaller pool, while
//!   demand beyond what the pool clears within the deadline is still refused at once;
//! - a request of more than `--heavy-request-tokens` tokens is heavy; heavy requests together may
//!   hold at most half of each bound, so light requests always find room however many heavy ones
//!   arrive (a heavy request alone larger than half the token bound is charged half of it);
//! - never a queue: beyond a bound, 429 `overloaded` with `Retry-After` at once, counted in
//!   `gateway_admission_rejected_total` and `gateway_requests_total{outcome="overloaded"}`.
//!
//! The request and token bounds are counted per core ([`PerCore`]): half of each bound is split
//! into equal shares, one a core, taken with an atomic on the core's own cache line; a core past
//! its share takes from the common other half, and past that from the other cores' shares (their
//! lines are written only then: near the bound). Each part stays within its own bound, so the
//! sum of what is taken never passes the bound, and one core alone can take all of it (the
//! kernel may put every connection on one core). Heavy requests are few: their bounds are one
//! count each.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use listener::shard::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::config::Config;
use crate::error::RequestError;
use crate::metrics::{Metrics, RequestLabels};
use crate::pool::Pools;
use crate::routing::Cost;
use crate::runtime::Slots;
use crate::task::AbortOnDrop;

/// A count with a bound, taken optimistically (add, and undo past the bound).
#[derive(Debug, Default)]
struct Bounded(AtomicU64);

impl Bounded {
    fn take(&self, n: u64, max: u64) -> bool {
        let before = self.0.fetch_add(n, Ordering::AcqRel);
        if before.saturating_add(n) > max {
            self.0.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        true
    }

    fn give(&self, n: u64) {
        self.0.fetch_sub(n, Ordering::AcqRel);
    }
}

/// A bounded count kept per core: a share of half the bound for each core, the rest common.
struct PerCore {
    shares: Slots<Bounded>,
    common: Bounded,
    /// The smallest share worth keeping: a take goes whole to one part, so shares much larger
    /// than a take lose little of the bound to what is left in each; below it, all is common.
    min_share: u64,
}

/// Where a take was counted: a core's share, or the common part.
#[derive(Debug, Clone, Copy)]
enum Taken {
    Share(usize),
    Common,
}

impl PerCore {
    fn new(slots: usize, min_share: u64) -> Self {
        Self { shares: Slots::new(slots, Bounded::default), common: Bounded::default(), min_share }
    }

    /// Each core's share of `max`, and what is left for the common part: the shares together
    /// are at most half, so the sum of everything taken is at most `max`.
    fn split(&self, max: u64) -> (u64, u64) {
        let slots = self.shares.len() as u64;
        let share = max / 2 / slots;
        let share = if share < self.min_share { 0 } else { share };
        (share, max - share * slots)
    }

    fn take(&self, n: u64, max: u64) -> Option<Taken> {
        let (share, common) = self.split(max);
        if share == 0 {
            return self.common.take(n, common).then_some(Taken::Common);
        }
        let mine = self.shares.mine();
        if self.shares.at(mine).take(n, share) {
            return Some(Taken::Share(mine));
        }
        if self.common.take(n, common) {
            return Some(Taken::Common);
        }
        let slots = self.shares.len();
        (1..slots).map(|k| (mine + k) % slots).find(|&i| self.shares.at(i).take(n, share)).map(Taken::Share)
    }

    fn give(&self, n: u64, taken: Taken) {
        match taken {
            Taken::Share(slot) => self.shares.at(slot).give(n),
            Taken::Common => self.common.give(n),
        }
    }

    #[cfg(test)]
    fn get(&self) -> u64 {
        self.shares.iter().map(|b| b.0.load(Ordering::Acquire)).sum::<u64>() + self.common.0.load(Ordering::Acquire)
    }
}

/// The admission bounds of the gateway.
pub(crate) struct Admission {
    /// The bounds now: the floors, or what the ready workers answer within the deadline.
    max_requests: AtomicU64,
    max_tokens: AtomicU64,
    floor_requests: u64,
    floor_tokens: u64,
    deadline_s: f64,
    max_query_tokens: u64,
    limit_requests: Gauge,
    limit_tokens: Gauge,
    requests: PerCore,
    tokens: PerCore,
    heavy_requests: Bounded,
    heavy_tokens: Bounded,
    retry_after_s: u64,
    outstanding: listener::shard::Gauge,
    outstanding_tokens: listener::shard::Gauge,
    rejected: Counter,
    requests_total: Family<RequestLabels, Counter>,
    rejected_labels: RequestLabels,
}

/// An admitted request: holds its share of the bounds and counts in `gateway_outstanding` and
/// `gateway_outstanding_tokens` while it lives, also when the client goes away.
#[derive(Debug)]
pub(crate) struct Admitted<'a> {
    admission: &'a Admission,
    tokens: u64,
    heavy: bool,
    /// Where the request and its tokens were counted.
    taken: (Taken, Taken),
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let a = self.admission;
        a.requests.give(1, self.taken.0);
        a.tokens.give(self.tokens, self.taken.1);
        if self.heavy {
            a.heavy_requests.give(1);
            a.heavy_tokens.give(self.tokens);
        }
        a.outstanding.dec();
        a.outstanding_tokens.dec_by(i64::try_from(self.tokens).unwrap_or(i64::MAX));
    }
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission").finish_non_exhaustive()
    }
}

impl Admission {
    pub(crate) fn new(cfg: &Config, metrics: &Metrics) -> Self {
        let rejected_labels = RequestLabels {
            pool: String::new(),
            worker: "none".to_owned(),
            outcome: wire::ErrorType::Overloaded.as_str().to_owned(),
        };
        let a = Self {
            max_requests: AtomicU64::new(0),
            max_tokens: AtomicU64::new(0),
            floor_requests: cfg.max_outstanding as u64,
            floor_tokens: cfg.max_outstanding_tokens,
            deadline_s: cfg.request_timeout.as_secs_f64(),
            max_query_tokens: cfg.max_query_tokens.max(1),
            limit_requests: metrics.admission_limit_requests.clone(),
            limit_tokens: metrics.admission_limit_tokens.clone(),
            // Sixteen of the largest light take: a request; a request of `--heavy-request-tokens`.
            requests: PerCore::new(cfg.core_slots(), 16),
            tokens: PerCore::new(cfg.core_slots(), 16 * cfg.heavy_request_tokens.max(1)),
            heavy_requests: Bounded::default(),
            heavy_tokens: Bounded::default(),
            retry_after_s: cfg.retry_after_s,
            outstanding: metrics.outstanding.clone(),
            outstanding_tokens: metrics.outstanding_tokens.clone(),
            rejected: metrics.admission_rejected.clone(),
            requests_total: metrics.requests.clone(),
            rejected_labels,
        };
        a.resize(0.0);
        a
    }

    /// Size the bounds for ready workers that together serve `capacity_per_s` queries a second:
    /// what they answer within the deadline, at least the floors.
    pub(crate) fn resize(&self, capacity_per_s: f64) {
        let held = if capacity_per_s.is_finite() { (capacity_per_s.max(0.0) * self.deadline_s).ceil() } else { 0.0 };
        // `as` saturates: an absurd report cannot wrap the bound.
        let requests = (held as u64).max(self.floor_requests);
        let tokens = (held as u64).saturating_mul(self.max_query_tokens).max(self.floor_tokens);
        self.max_requests.store(requests, Ordering::Release);
        self.max_tokens.store(tokens, Ordering::Release);
        self.limit_requests.set(i64::try_from(requests).unwrap_or(i64::MAX));
        self.limit_tokens.set(i64::try_from(tokens).unwrap_or(i64::MAX));
    }

    /// A predict request answered with `error` before it reached a worker (a wrong method; a body
    /// too large, late or malformed; an unknown pool): counted in `gateway_requests_total` as the
    /// refusals are, under no pool and no worker, its outcome the error's type. (Admission
    /// refusals count themselves, and the forward counts every request it answers.)
    pub(crate) fn answered_early(&self, error: &RequestError) {
        let labels = RequestLabels { outcome: error.error_type().as_str().to_owned(), ..self.rejected_labels.clone() };
        self.requests_total.get_or_create(&labels).inc();
    }

    /// Admit a request of estimated cost `cost`, or refuse it at once with 429 `overloaded`.
    pub(crate) fn admit(&self, cost: Cost) -> Result<Admitted<'_>, RequestError> {
        let max_requests = self.max_requests.load(Ordering::Acquire);
        let max_tokens = self.max_tokens.load(Ordering::Acquire);
        let heavy_max_tokens = max_tokens / 2;
        let tokens = if cost.heavy { cost.tokens.min(heavy_max_tokens.max(1)) } else { cost.tokens };
        let refuse = || {
            self.rejected.inc();
            self.requests_total.get_or_create(&self.rejected_labels).inc();
            Err(RequestError::Overloaded { retry_after_s: self.retry_after_s })
        };
        if cost.heavy {
            if !self.heavy_requests.take(1, (max_requests / 2).max(1)) {
                return refuse();
            }
            if !self.heavy_tokens.take(tokens, heavy_max_tokens.max(1)) {
                self.heavy_requests.give(1);
                return refuse();
            }
        }
        let undo_heavy = || {
            if cost.heavy {
                self.heavy_requests.give(1);
                self.heavy_tokens.give(tokens);
            }
        };
        let Some(taken_request) = self.requests.take(1, max_requests) else {
            undo_heavy();
            return refuse();
        };
        let Some(taken_tokens) = self.tokens.take(tokens, max_tokens) else {
            self.requests.give(1, taken_request);
            undo_heavy();
            return refuse();
        };
        self.outstanding.inc();
        self.outstanding_tokens.inc_by(i64::try_from(tokens).unwrap_or(i64::MAX));
        Ok(Admitted { admission: self, tokens, heavy: cost.heavy, taken: (taken_request, taken_tokens) })
    }
}

/// The summed capacity of the ready workers of every pool, queries per second, from their fresh
/// reports (a worker that reports none, or not lately, adds nothing: the floors hold for it).
fn ready_capacity(pools: &Pools, stale_after: Duration) -> f64 {
    let mut sum = 0.0;
    for pool in pools.all() {
        for ep in pool.endpoints().iter().filter(|e| e.is_ready()) {
            sum += ep.fresh_snapshot(stale_after).and_then(|s| s.capacity).map_or(0.0, |(c, _)| c);
        }
    }
    sum
}

/// Resize `admission` every `--signal-interval` from the ready workers' capacity.
pub(crate) fn follow_capacity(admission: Arc<Admission>, pools: Arc<Pools>) -> AbortOnDrop {
    let (interval, stale_after) = (pools.ctx().config.signal_interval, pools.ctx().config.stale_after);
    let pools = Arc::downgrade(&pools);
    AbortOnDrop(tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(pools) = pools.upgrade() else { return };
            admission.resize(ready_capacity(&pools, stale_after));
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(requests: usize, tokens: u64, m: &Metrics) -> Admission {
        let mut cfg = Config::for_tests();
        cfg.max_outstanding = requests;
        cfg.max_outstanding_tokens = tokens;
        cfg.retry_after_s = 3;
        Admission::new(&cfg, m)
    }

    const LIGHT: Cost = Cost { tokens: 10, heavy: false, scale: 1.0, queries: 1 };
    const HEAVY: Cost = Cost { tokens: 1000, heavy: true, scale: 4.0, queries: 8 };

    #[test]
    fn the_bound_refuses_at_once_and_frees_on_drop() {
        let m = Metrics::default();
        let a = admission(2, 1 << 20, &m);
        let one = a.admit(LIGHT).unwrap();
        let two = a.admit(LIGHT).unwrap();
        assert_eq!(m.outstanding.get(), 2);
        let refused = a.admit(LIGHT).unwrap_err();
        assert!(matches!(refused, RequestError::Overloaded { retry_after_s: 3 }), "{refused}");
        assert_eq!(m.admission_rejected.get(), 1);
        drop(one);
        assert_eq!(m.outstanding.get(), 1);
        let _three = a.admit(LIGHT).unwrap();
        drop(two);
    }

    #[test]
    fn every_core_takes_its_share_first_and_together_never_past_the_bound() {
        let m = Metrics::default();
        let mut cfg = Config::for_tests();
        cfg.runtime = crate::config::Runtime::PerCore;
        cfg.threads = 3;
        cfg.max_outstanding = 40;
        cfg.max_outstanding_tokens = 1 << 30;
        let a = Admission::new(&cfg, &m);
        // 4 slots (3 cores and the rest): shares of 40 / 2 / 4 = 5, the common part 20.
        let a = Admission { requests: PerCore::new(4, 1), ..a };
        assert_eq!(a.requests.split(40), (5, 20));
        assert_eq!(PerCore::new(4, 6).split(40), (0, 40), "shares too small to keep: all common");
        let on_core = |core: usize, n: usize| {
            std::thread::scope(|s| {
                s.spawn(|| {
                    crate::runtime::set_core(core);
                    let held: Vec<_> = (0..n).map_while(|_| a.admit(LIGHT).ok()).collect();
                    let taken: Vec<_> = held.iter().map(|h| h.taken.0).collect();
                    std::mem::forget(held);
                    taken
                })
                .join()
                .unwrap()
            })
        };
        let first = on_core(1, 5);
        assert!(first.iter().all(|t| matches!(t, Taken::Share(1))), "its own share first: {first:?}");
        let second = on_core(1, 25);
        assert_eq!(second.len(), 25, "past its share: the common part, then the others' shares");
        assert!(second[..20].iter().all(|t| matches!(t, Taken::Common)), "{second:?}");
        assert!(second[20..].iter().all(|t| matches!(t, Taken::Share(i) if *i != 1)), "{second:?}");
        assert_eq!(a.requests.get(), 30);
        let rest = on_core(0, 100);
        assert_eq!(rest.len(), 10, "one core alone reaches the whole bound, never past it");
        assert_eq!(a.requests.get(), 40);
        assert!(a.admit(LIGHT).is_err());
    }

    #[test]
    fn the_bounds_follow_the_ready_capacity_within_the_deadline_above_the_floors() {
        let m = Metrics::default();
        let a = admission(2, 100, &m);
        assert_eq!(m.admission_limit_requests.get(), 2, "no capacity yet: the floors");
        // 10 s deadline (the default) x 0.5 queries/s: 5 requests, each at most 128 tokens.
        a.resize(0.5);
        assert_eq!((m.admission_limit_requests.get(), m.admission_limit_tokens.get()), (5, 640));
        let held: Vec<_> = (0..5).map(|_| a.admit(LIGHT).unwrap()).collect();
        assert!(a.admit(LIGHT).is_err(), "beyond what the pool answers within the deadline");
        drop(held);
        a.resize(0.0);
        assert_eq!((m.admission_limit_requests.get(), m.admission_limit_tokens.get()), (2, 100), "back to the floors");
        for absurd in [f64::NAN, f64::INFINITY, -1.0] {
            a.resize(absurd);
            assert_eq!(m.admission_limit_requests.get(), 2, "{absurd}");
        }
        a.resize(1e30);
        assert_eq!(m.admission_limit_tokens.get(), i64::MAX, "saturates");
    }

    #[test]
    fn tokens_are_bounded_too() {
        let m = Metrics::default();
        let a = admission(100, 25, &m);
        let _a = a.admit(LIGHT).unwrap();
        let _b = a.admit(LIGHT).unwrap();
        assert!(a.admit(LIGHT).is_err(), "30 tokens > 25");
        assert_eq!(m.outstanding_tokens.get(), 20);
        assert!(a.admit(Cost { tokens: 5, ..LIGHT }).is_ok());
    }

    #[test]
    fn heavy_requests_hold_at_most_half_and_light_ones_keep_the_rest() {
        let m = Metrics::default();
        let a = admission(10, 4000, &m);
        let heavy: Vec<_> = (0..2).map(|_| a.admit(HEAVY).unwrap()).collect();
        assert!(a.admit(HEAVY).is_err(), "2000 tokens: half of the token bound");
        let light: Vec<_> = (0..8).map(|_| a.admit(LIGHT).unwrap()).collect();
        assert!(a.admit(LIGHT).is_err(), "the request bound");
        drop(light);
        drop(heavy);
        assert_eq!((m.outstanding.get(), m.outstanding_tokens.get()), (0, 0));
        // By requests: at most half of --max-outstanding.
        let a = admission(4, 1 << 30, &m);
        let _h: Vec<_> = (0..2).map(|_| a.admit(HEAVY).unwrap()).collect();
        assert!(a.admit(HEAVY).is_err());
        let _l: Vec<_> = (0..2).map(|_| a.admit(LIGHT).unwrap()).collect();
        // A heavy request larger than half the bound is still admitted when alone.
        let a = admission(4, 100, &m);
        assert!(a.admit(HEAVY).is_ok());
    }
}
