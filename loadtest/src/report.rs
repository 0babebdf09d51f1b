//! Figures of one step: counts by outcome and a latency histogram of the successes.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::run::Mode;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Ok,
    /// A non-200 answer: status and `error_type` (or `non_json`).
    Status(u16, String),
    /// Connection refused, reset, or closed mid-answer.
    Transport(String),
    Timeout,
    /// Open loop only: not sent because `--max-in-flight` were outstanding.
    Dropped,
}

impl Outcome {
    fn label(&self) -> String {
        match self {
            Self::Ok => "200".into(),
            Self::Status(s, kind) => format!("{s} {kind}"),
            Self::Transport(e) => format!("transport: {e}"),
            Self::Timeout => "timeout".into(),
            Self::Dropped => "dropped".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Step {
    mode: Mode,
    ok_latency: Histogram<u64>,
    outcomes: BTreeMap<String, u64>,
    elapsed: Duration,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub concurrency: Option<usize>,
    pub rate: Option<f64>,
    pub seconds: f64,
    pub ok: u64,
    pub throughput_per_s: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub errors: BTreeMap<String, u64>,
}

impl Step {
    pub fn new(mode: Mode) -> Self {
        Self {
            mode,
            ok_latency: Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds"),
            outcomes: BTreeMap::new(),
            elapsed: Duration::ZERO,
        }
    }

    pub fn record(&mut self, outcome: Outcome, latency: Duration) {
        if outcome == Outcome::Ok {
            let us = (latency.as_micros() as u64).clamp(1, 600_000_000);
            let _ = self.ok_latency.record(us);
        }
        *self.outcomes.entry(outcome.label()).or_default() += 1;
    }

    pub fn merge(&mut self, other: &Step) {
        let _ = self.ok_latency.add(&other.ok_latency);
        for (k, v) in &other.outcomes {
            *self.outcomes.entry(k.clone()).or_default() += v;
        }
    }

    pub fn finish(&mut self, elapsed: Duration) {
        self.elapsed = elapsed;
    }

    pub fn summary(&self) -> Summary {
        let ms = |q: f64| self.ok_latency.value_at_quantile(q) as f64 / 1e3;
        let ok = self.ok_latency.len();
        let (concurrency, rate) = match self.mode {
            Mode::Clients(n) => (Some(n), None),
            Mode::Rate(r) => (None, Some(r)),
        };
        Summary {
            concurrency,
            rate,
            seconds: self.elapsed.as_secs_f64(),
            ok,
            throughput_per_s: ok as f64 / self.elapsed.as_secs_f64().max(1e-9),
            p50_ms: ms(0.5),
            p90_ms: ms(0.9),
            p99_ms: ms(0.99),
            max_ms: self.ok_latency.max() as f64 / 1e3,
            errors: self.outcomes.iter().filter(|(k, _)| k.as_str() != "200").map(|(k, v)| (k.clone(), *v)).collect(),
        }
    }

    pub fn header() -> String {
        format!(
            "{:>10} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9}  errors",
            "load", "ok", "req/s", "p50 ms", "p90 ms", "p99 ms", "max ms"
        )
    }

    pub fn row(&self) -> String {
        let s = self.summary();
        let load = match self.mode {
            Mode::Clients(n) => format!("c={n}"),
            Mode::Rate(r) => format!("{r}/s"),
        };
        let errors = if s.errors.is_empty() {
            "-".to_owned()
        } else {
            s.errors.iter().map(|(k, v)| format!("{v}x {k}")).collect::<Vec<_>>().join(", ")
        };
        format!(
            "{load:>10} {:>8} {:>10.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2}  {errors}",
            s.ok, s.throughput_per_s, s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_counted_by_status_and_kind_and_latency_only_for_successes() {
        let mut s = Step::new(Mode::Clients(2));
        s.record(Outcome::Ok, Duration::from_millis(10));
        s.record(Outcome::Ok, Duration::from_millis(30));
        s.record(Outcome::Status(429, "overloaded".into()), Duration::from_millis(1));
        s.record(Outcome::Status(429, "overloaded".into()), Duration::from_millis(1));
        s.record(Outcome::Timeout, Duration::from_secs(30));
        s.finish(Duration::from_secs(2));
        let sum = s.summary();
        assert_eq!(sum.ok, 2);
        assert!((sum.throughput_per_s - 1.0).abs() < 1e-9);
        assert_eq!(sum.errors["429 overloaded"], 2);
        assert_eq!(sum.errors["timeout"], 1);
        assert!(sum.max_ms < 31.0, "the timeout is not a latency sample");
        assert!(s.row().contains("2x 429 overloaded"));
    }
}
