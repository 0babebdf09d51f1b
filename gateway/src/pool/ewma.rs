//! The balancer's latency estimate of one worker.

use std::time::Duration;

use tokio::time::Instant;

/// Peak-EWMA latency estimate (tower's `load::PeakEwma`): jumps up to a slower sample at once,
/// moves towards faster ones with time constant `decay`, and without samples decays towards zero,
/// so that a worker nobody picks (new, or slow once) is tried again after a while instead of
/// being starved while the others are lightly loaded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeakEwma {
    pub(crate) estimate_s: f64,
    pub(crate) updated: Instant,
}

impl PeakEwma {
    fn weight(&self, now: Instant, decay: Duration) -> f64 {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        (-elapsed / decay.as_secs_f64().max(1e-9)).exp()
    }

    /// The estimate at `now`: the last one, decayed towards zero since it was updated.
    pub(crate) fn at(&self, now: Instant, decay: Duration) -> f64 {
        self.estimate_s * self.weight(now, decay)
    }

    pub(crate) fn observe(&mut self, rtt: Duration, now: Instant, decay: Duration) {
        let rtt = rtt.as_secs_f64();
        let w = self.weight(now, decay);
        self.estimate_s = if rtt > self.estimate_s * w { rtt } else { self.estimate_s * w + rtt * (1.0 - w) };
        self.updated = now;
    }

    /// Start again from at least `floor` (a worker that becomes ready).
    pub(crate) fn restart(&mut self, floor: Duration, now: Instant, decay: Duration) {
        self.estimate_s = self.at(now, decay).max(floor.as_secs_f64());
        self.updated = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn peak_ewma_jumps_up_and_decays_down() {
        let t0 = Instant::now();
        let mut e = PeakEwma { estimate_s: 0.010, updated: t0 };
        e.observe(Duration::from_millis(100), t0, Duration::from_secs(10));
        assert_eq!(e.estimate_s, 0.100);
        tokio::time::advance(Duration::from_secs(10)).await;
        e.observe(Duration::from_millis(10), Instant::now(), Duration::from_secs(10));
        assert!(e.estimate_s < 0.100 && e.estimate_s > 0.010, "{}", e.estimate_s);
    }
}
