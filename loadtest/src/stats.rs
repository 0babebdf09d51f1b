//! Figures as they are recorded: HDR histograms of latency and counts by outcome, per phase, in
//! a shard per thread that the collector empties every interval. Nothing is kept per request:
//! memory depends on the number of phases and intervals, not on the number of requests.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::client::{Failed, Outcome};

/// Which phase a request belongs to; `None`: the unmeasured warm-up.
pub type PhaseId = Option<u32>;

/// Latencies are recorded in microseconds, from 1 µs to an hour, to 3 significant digits.
const LOWEST_US: u64 = 1;
const HIGHEST_US: u64 = 3_600_000_000;

pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(LOWEST_US, HIGHEST_US, 3).expect("valid histogram bounds")
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).clamp(LOWEST_US, HIGHEST_US)
}

/// The figures of a set of requests; mergeable.
#[derive(Debug, Clone)]
pub struct Acc {
    /// Successes, from each request's intended send time (what a user waits).
    pub latency: Histogram<u64>,
    /// Successes, from the moment the request was written (open loop only; in a closed loop it is
    /// the same as `latency`).
    pub service: Option<Histogram<u64>>,
    /// Every sent request: how late after its intended time it was sent (open loop only).
    pub lag: Option<Histogram<u64>>,
    pub ok: u64,
    pub errors: BTreeMap<Failed, u64>,
    /// When the last of these requests finished.
    pub last_done: Option<Instant>,
}

impl Default for Acc {
    fn default() -> Self {
        Self { latency: histogram(), service: None, lag: None, ok: 0, errors: BTreeMap::new(), last_done: None }
    }
}

impl Acc {
    /// Record one finished request. `service` and `lag` are given in an open loop only.
    pub fn record(&mut self, outcome: &Outcome, latency: Duration, service: Option<Duration>, lag: Option<Duration>) {
        if let Some(lag) = lag {
            self.lag.get_or_insert_with(histogram).saturating_record(us(lag));
        }
        match outcome {
            Ok(()) => {
                self.ok += 1;
                self.latency.saturating_record(us(latency));
                if let Some(s) = service {
                    self.service.get_or_insert_with(histogram).saturating_record(us(s));
                }
            }
            Err(e) => {
                // Look up before cloning: the usual case is a kind seen before.
                match self.errors.get_mut(e) {
                    Some(n) => *n += 1,
                    None => {
                        self.errors.insert(e.clone(), 1);
                    }
                }
            }
        }
    }

    pub fn merge(&mut self, other: &Acc) {
        // Same bounds everywhere: addition cannot fail.
        let _ = self.latency.add(&other.latency);
        for (mine, theirs) in [(&mut self.service, &other.service), (&mut self.lag, &other.lag)] {
            if let Some(h) = theirs {
                let _ = mine.get_or_insert_with(histogram).add(h);
            }
        }
        self.ok += other.ok;
        self.last_done = self.last_done.max(other.last_done);
        for (k, v) in &other.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
    }

    pub fn failed(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Finished requests (successes and failures).
    pub fn finished(&self) -> u64 {
        self.ok + self.failed()
    }
}

/// What one thread recorded since the collector last looked.
#[derive(Debug, Default)]
pub struct Shard {
    accs: Vec<(PhaseId, Acc)>,
}

impl Shard {
    /// Record a request that finished at `done`.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &mut self,
        phase: PhaseId,
        outcome: &Outcome,
        latency: Duration,
        service: Option<Duration>,
        lag: Option<Duration>,
        done: Instant,
    ) {
        // At most two phases meet in one interval: a linear search is the fastest lookup.
        let acc = match self.accs.iter_mut().position(|(p, _)| *p == phase) {
            Some(i) => &mut self.accs[i].1,
            None => {
                self.accs.push((phase, Acc::default()));
                &mut self.accs.last_mut().expect("just pushed").1
            }
        };
        acc.record(outcome, latency, service, lag);
        acc.last_done = Some(done);
    }

    /// Everything recorded since the last call.
    pub fn take(&mut self) -> Vec<(PhaseId, Acc)> {
        std::mem::take(&mut self.accs)
    }
}

/// Percentiles of a latency histogram, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

impl Percentiles {
    /// `None` for an empty histogram.
    pub fn of(h: &Histogram<u64>) -> Option<Self> {
        if h.is_empty() {
            return None;
        }
        let ms = |v: u64| v as f64 / 1e3;
        Some(Self {
            p50_ms: ms(h.value_at_quantile(0.5)),
            p90_ms: ms(h.value_at_quantile(0.9)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
            mean_ms: h.mean() / 1e3,
        })
    }
}

/// The latency distribution as (percentile, ms) points, for the report's percentile plot.
pub fn spectrum(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    // 0, 29, 50, 65, 75, ... (even steps on a "nines" axis) while a percentile still has a
    // sample beyond it, then the max.
    let last = 1.0 - 1.0 / h.len() as f64;
    for k in 0..=60 {
        let q = 1.0 - 0.5f64.powf(f64::from(k) / 2.0);
        if q > last {
            break;
        }
        out.push((q * 100.0, h.value_at_quantile(q) as f64 / 1e3));
    }
    out.push((100.0, h.max() as f64 / 1e3));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn merged_shards_equal_one_histogram_of_everything() {
        let mut whole = Acc::default();
        let mut parts = [Acc::default(), Acc::default(), Acc::default()];
        let overloaded = Err(Failed::Status { status: 429, error_type: "overloaded".into() });
        for i in 0..3000u64 {
            let outcome = if i % 10 == 0 { overloaded.clone() } else { Ok(()) };
            let lat = ms(1 + (i * 7919) % 500);
            whole.record(&outcome, lat, Some(lat / 2), Some(ms(i % 3)));
            parts[(i % 3) as usize].record(&outcome, lat, Some(lat / 2), Some(ms(i % 3)));
        }
        let mut merged = Acc::default();
        for p in &parts {
            merged.merge(p);
        }
        assert_eq!(merged.ok, whole.ok);
        assert_eq!(merged.errors, whole.errors);
        assert_eq!(merged.failed(), 300);
        assert_eq!(merged.latency, whole.latency);
        assert_eq!(merged.service, whole.service);
        assert_eq!(merged.lag, whole.lag);
        assert_eq!(Percentiles::of(&merged.latency), Percentiles::of(&whole.latency));
    }

    #[test]
    fn shards_keep_phases_apart_and_empty_on_take() {
        let mut s = Shard::default();
        let now = Instant::now();
        s.record(Some(0), &Ok(()), ms(10), None, None, now);
        s.record(Some(1), &Ok(()), ms(20), None, None, now);
        s.record(None, &Err(Failed::Timeout), ms(30), None, None, now);
        s.record(Some(1), &Ok(()), ms(40), None, None, now + ms(5));
        let taken = s.take();
        assert_eq!(taken.len(), 3);
        let one = &taken.iter().find(|(p, _)| *p == Some(1)).unwrap().1;
        assert_eq!(one.ok, 2);
        assert_eq!(one.latency.max(), one.latency.highest_equivalent(40_000));
        assert_eq!(one.last_done, Some(now + ms(5)));
        assert!(s.take().is_empty());
    }

    #[test]
    fn percentiles_are_in_milliseconds_and_failures_carry_no_latency() {
        let mut a = Acc::default();
        for v in 1..=1000 {
            a.record(&Ok(()), Duration::from_micros(v * 100), None, None);
        }
        a.record(&Err(Failed::Timeout), Duration::from_secs(30), None, None);
        let p = Percentiles::of(&a.latency).unwrap();
        assert!((p.p50_ms - 50.0).abs() < 0.1, "{p:?}");
        assert!((p.p99_ms - 99.0).abs() < 0.1, "{p:?}");
        assert!((p.max_ms - 100.0).abs() < 0.1, "{p:?}");
        assert_eq!(a.finished(), 1001);
        let spec = spectrum(&a.latency);
        assert_eq!(spec.first().unwrap().0, 0.0);
        assert_eq!(spec.last().unwrap().0, 100.0);
        assert!(spec.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
    }
}
