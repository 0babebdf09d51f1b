//! The balancer's latency estimate of one worker: bounded and saturating.
//!
//! Every value it holds or returns is finite and in `[0, cap]`, whatever it is fed (a sample of
//! `Duration::MAX`, a NaN from a caller's arithmetic, a million penalties in a row): the estimate
//! is multiplied into the balancer's load and into per-attempt timeouts, and an estimate that
//! grew without bound once turned overload into panics (`Duration::from_secs_f64` of 1e21 s).
//! `cap` is the request deadline (`--request-timeout`): no answer the gateway waits for can take
//! longer. A penalty (a refusal or a failure, which must not make a worker look fast) doubles the
//! estimate but never past [`PENALTY_CAP_S`] (or `cap`): a worker that refused for a while comes
//! back into play within seconds of the refusals stopping (see `Endpoint::record_success`).

use std::time::Duration;

use tokio::time::Instant;

/// Highest estimate a penalty can raise it to (seconds), below the cap: a latency sample may be
/// as slow as the deadline, a penalty is a guess.
pub(crate) const PENALTY_CAP_S: f64 = 1.0;

/// How long a penalty holds without another one: then the estimate starts over (see
/// [`PeakEwma::expire_penalty`]), so that a worker that stopped refusing gets traffic again
/// within seconds (a penalised estimate would take tens of seconds to decay, and a worker that
/// gets no traffic cannot show that it answers again).
pub(crate) const PENALTY_HOLD: Duration = Duration::from_secs(1);

/// Peak-EWMA latency estimate (tower's `load::PeakEwma`): jumps up to a slower sample at once,
/// moves towards faster ones with time constant `decay`, and without samples decays towards zero,
/// so that a worker nobody picks (new, or slow once) is tried again after a while instead of
/// being starved while the others are lightly loaded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeakEwma {
    estimate_s: f64,
    updated: Instant,
    cap_s: f64,
    /// When the last penalty was given, until the estimate starts over.
    penalized_at: Option<Instant>,
}

/// `s` as a finite number of seconds in `[0, cap]` (NaN counts as the cap: a broken sample must
/// not make a worker look fast).
fn bounded(s: f64, cap_s: f64) -> f64 {
    if s.is_nan() { cap_s } else { s.clamp(0.0, cap_s) }
}

/// A number of seconds as a `Duration`, never panicking (negative and NaN: zero; too large: the
/// largest `Duration`).
pub(crate) fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(if s.is_nan() { Duration::ZERO } else { Duration::MAX })
}

impl PeakEwma {
    /// An estimate starting at `initial`, never above `cap` (at least a microsecond).
    pub(crate) fn new(initial: Duration, cap: Duration, now: Instant) -> Self {
        let cap_s = bounded(cap.as_secs_f64(), f64::MAX).max(1e-6);
        Self { estimate_s: bounded(initial.as_secs_f64(), cap_s), updated: now, cap_s, penalized_at: None }
    }

    #[cfg(test)]
    fn cap_s(&self) -> f64 {
        self.cap_s
    }

    fn weight(&self, now: Instant, decay: Duration) -> f64 {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        // elapsed >= 0 and the divisor > 0: the weight is in [0, 1].
        (-elapsed / decay.as_secs_f64().max(1e-9)).exp()
    }

    /// The estimate at `now`: the last one, decayed towards zero since it was updated.
    pub(crate) fn at(&self, now: Instant, decay: Duration) -> f64 {
        bounded(self.estimate_s * self.weight(now, decay), self.cap_s)
    }

    /// Take a latency sample.
    pub(crate) fn observe(&mut self, rtt: Duration, now: Instant, decay: Duration) {
        let rtt = bounded(rtt.as_secs_f64(), self.cap_s);
        let w = self.weight(now, decay);
        let decayed = self.estimate_s * w;
        let next = if rtt > decayed { rtt } else { decayed + rtt * (1.0 - w) };
        self.estimate_s = bounded(next, self.cap_s);
        self.updated = now;
    }

    /// A refusal or a failure: the estimate doubles (at least `floor`), up to
    /// [`PENALTY_CAP_S`]; an estimate already above that (a real slow sample) stays.
    pub(crate) fn penalize(&mut self, floor: Duration, now: Instant, decay: Duration) {
        let current = self.at(now, decay);
        let ceiling = PENALTY_CAP_S.min(self.cap_s);
        let penalized = (current * 2.0).max(bounded(floor.as_secs_f64(), self.cap_s)).min(ceiling);
        self.estimate_s = bounded(current.max(penalized), self.cap_s);
        self.updated = now;
        self.penalized_at = Some(now);
    }

    /// Start over at `at` when the last penalty is older than [`PENALTY_HOLD`] (and no answer
    /// came since). Returns whether it did.
    pub(crate) fn expire_penalty(&mut self, at: Duration, now: Instant) -> bool {
        match self.penalized_at {
            Some(t) if now.saturating_duration_since(t) >= PENALTY_HOLD => {
                self.restart(at, now);
                true
            }
            _ => false,
        }
    }

    /// Start again at `at` (a worker ready again, or answering again after refusals): what was
    /// learnt before no longer says anything.
    pub(crate) fn restart(&mut self, at: Duration, now: Instant) {
        self.estimate_s = bounded(at.as_secs_f64(), self.cap_s);
        self.updated = now;
        self.penalized_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[tokio::test(start_paused = true)]
    async fn peak_ewma_jumps_up_and_decays_down() {
        let t0 = Instant::now();
        let mut e = PeakEwma::new(Duration::from_millis(10), Duration::from_secs(10), t0);
        e.observe(Duration::from_millis(100), t0, Duration::from_secs(10));
        assert_eq!(e.estimate_s, 0.100);
        tokio::time::advance(Duration::from_secs(10)).await;
        e.observe(Duration::from_millis(10), Instant::now(), Duration::from_secs(10));
        assert!(e.estimate_s < 0.100 && e.estimate_s > 0.010, "{}", e.estimate_s);
    }

    #[test]
    fn penalties_saturate_instead_of_overflowing() {
        let t0 = Instant::now();
        let decay = Duration::from_secs(10);
        let mut e = PeakEwma::new(Duration::from_millis(30), Duration::from_secs(10), t0);
        // The repro: ~69 doublings overflowed `Duration::from_secs_f64`.
        for _ in 0..10_000 {
            e.penalize(Duration::from_millis(30), t0, decay);
        }
        assert_eq!(e.at(t0, decay), PENALTY_CAP_S);
        e.observe(Duration::MAX, t0, decay);
        assert_eq!(e.at(t0, decay), 10.0, "a sample is bounded by the cap");
        for _ in 0..100 {
            e.penalize(Duration::MAX, t0, decay);
        }
        assert_eq!(e.at(t0, decay), 10.0);
        assert_eq!(secs(f64::INFINITY), Duration::MAX);
        assert_eq!(secs(f64::NAN), Duration::ZERO);
        assert_eq!(secs(-1.0), Duration::ZERO);
        assert_eq!(secs(1e300), Duration::MAX);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Sample(Duration),
        Penalty(Duration),
        Restart(Duration),
        Expire(Duration),
        Advance(Duration),
    }

    fn duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            (0u64..5_000_000).prop_map(Duration::from_micros),
            any::<u64>().prop_map(Duration::from_nanos),
            (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
            Just(Duration::MAX),
            Just(Duration::ZERO),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => duration().prop_map(Op::Sample),
            4 => duration().prop_map(Op::Penalty),
            1 => duration().prop_map(Op::Restart),
            1 => duration().prop_map(Op::Expire),
            2 => duration().prop_map(Op::Advance),
        ]
    }

    fn cases() -> u32 {
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(2_000)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        /// Any sequence of samples, penalties, restarts and elapsed time, with any cap and decay:
        /// the estimate stays finite and within `[0, cap]`, and converting it never panics.
        #[test]
        fn the_estimate_stays_finite_and_bounded(
            cap in duration(),
            decay in duration(),
            start in duration(),
            ops in prop::collection::vec(op(), 0..200),
        ) {
            let mut now = Instant::now();
            let mut e = PeakEwma::new(start, cap, now);
            let cap_s = e.cap_s();
            prop_assert!(cap_s.is_finite() && cap_s > 0.0);
            for op in ops {
                match op {
                    Op::Sample(d) => e.observe(d, now, decay),
                    Op::Penalty(d) => e.penalize(d, now, decay),
                    Op::Restart(d) => e.restart(d, now),
                    Op::Expire(d) => {
                        e.expire_penalty(d, now);
                    }
                    Op::Advance(d) => now = now.checked_add(d.min(Duration::from_secs(1 << 40))).unwrap_or(now),
                }
                let est = e.at(now, decay);
                prop_assert!(est.is_finite() && (0.0..=cap_s).contains(&est), "{est} (cap {cap_s})");
                prop_assert!(secs(est) <= secs(cap_s));
            }
        }
    }
}
