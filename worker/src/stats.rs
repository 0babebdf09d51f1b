//! Sliding-window rates and batch figures for `/v1/stats`, in one-second buckets.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use wire::{BatchStats, RateStats};

#[derive(Debug, Default, Clone, Copy)]
struct Bucket {
    second: u64,
    admitted: u64,
    completed: u64,
    rejected: u64,
    batches: u64,
    rows: u64,
    padded_len_sum: u64,
    inference: Duration,
    queue_wait: Duration,
    waits: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    admitted: u64,
    completed: u64,
    rejected: u64,
    batches: u64,
}

#[derive(Debug)]
pub struct Stats {
    started: Instant,
    window_s: u64,
    inner: Mutex<(VecDeque<Bucket>, Totals)>,
}

impl Stats {
    pub fn new(window: Duration) -> Self {
        Self::starting_at(Instant::now(), window)
    }

    pub fn starting_at(started: Instant, window: Duration) -> Self {
        Self { started, window_s: window.as_secs().max(1), inner: Mutex::default() }
    }

    pub fn uptime(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.started)
    }

    fn with_bucket(&self, now: Instant, f: impl FnOnce(&mut Bucket, &mut Totals)) {
        let second = self.uptime(now).as_secs();
        let mut guard = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (buckets, totals) = &mut *guard;
        if buckets.back().is_none_or(|b| b.second != second) {
            buckets.push_back(Bucket { second, ..Bucket::default() });
        }
        while buckets.front().is_some_and(|b| b.second + self.window_s < second) {
            buckets.pop_front();
        }
        let bucket = buckets.back_mut().expect("just pushed");
        f(bucket, totals);
    }

    pub fn admitted(&self, now: Instant, n: u64) {
        self.with_bucket(now, |b, t| {
            b.admitted += n;
            t.admitted += n;
        });
    }

    pub fn completed(&self, now: Instant, n: u64) {
        self.with_bucket(now, |b, t| {
            b.completed += n;
            t.completed += n;
        });
    }

    pub fn rejected(&self, now: Instant, n: u64) {
        self.with_bucket(now, |b, t| {
            b.rejected += n;
            t.rejected += n;
        });
    }

    /// A batch of `rows` padded to `padded_len` ran for `inference`; its rows waited `queue_wait` in all.
    pub fn batch(&self, now: Instant, rows: u64, padded_len: u64, inference: Duration, queue_wait: Duration) {
        self.with_bucket(now, |b, t| {
            b.batches += 1;
            b.rows += rows;
            b.padded_len_sum += padded_len;
            b.inference += inference;
            b.queue_wait += queue_wait;
            b.waits += rows;
            t.batches += 1;
        });
    }

    /// Rates and batch figures over the last `window` seconds (or the uptime, if shorter).
    pub fn snapshot(&self, now: Instant) -> (RateStats, BatchStats) {
        let uptime = self.uptime(now);
        let current = uptime.as_secs();
        let guard = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (buckets, totals) = &*guard;
        // The window ends now and starts `window_s` seconds back; the oldest bucket may be partial.
        let span = uptime.min(Duration::from_secs(self.window_s)).as_secs_f64().max(1e-3);
        let mut sum = Bucket::default();
        for b in buckets.iter().filter(|b| b.second + self.window_s > current) {
            sum.admitted += b.admitted;
            sum.completed += b.completed;
            sum.rejected += b.rejected;
            sum.batches += b.batches;
            sum.rows += b.rows;
            sum.padded_len_sum += b.padded_len_sum;
            sum.inference += b.inference;
            sum.queue_wait += b.queue_wait;
            sum.waits += b.waits;
        }
        let per = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
        let rates = RateStats {
            window_s: span,
            arrival_per_s: sum.admitted as f64 / span,
            completion_per_s: sum.completed as f64 / span,
            rejected_per_s: sum.rejected as f64 / span,
            admitted_total: totals.admitted,
            completed_total: totals.completed,
            rejected_total: totals.rejected,
        };
        let batches = BatchStats {
            count: sum.batches,
            mean_rows: per(sum.rows, sum.batches),
            mean_padded_len: per(sum.padded_len_sum, sum.batches),
            mean_inference_ms: if sum.batches == 0 {
                0.0
            } else {
                sum.inference.as_secs_f64() * 1e3 / sum.batches as f64
            },
            mean_queue_wait_ms: if sum.waits == 0 {
                0.0
            } else {
                sum.queue_wait.as_secs_f64() * 1e3 / sum.waits as f64
            },
            busy_fraction: (sum.inference.as_secs_f64() / span).min(1.0),
            total: totals.batches,
        };
        (rates, batches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn rates_cover_the_window_and_forget_older_events() {
        let t0 = Instant::now();
        let stats = Stats::starting_at(t0, Duration::from_secs(10));
        for s in 0..20u64 {
            stats.admitted(t0 + Duration::from_secs(s), 10);
            stats.completed(t0 + Duration::from_secs(s), 10);
        }
        let (rates, _) = stats.snapshot(t0 + Duration::from_secs(20));
        // Seconds 11..=19 are inside the window ending at 20 s: 9 x 10 over 10 s.
        assert!((rates.arrival_per_s - 9.0).abs() < 1e-9, "{rates:?}");
        assert_eq!(rates.admitted_total, 200);
        let (rates, _) = stats.snapshot(t0 + Duration::from_secs(60));
        assert_eq!(rates.arrival_per_s, 0.0);
        assert_eq!(rates.completed_total, 200);
    }

    #[tokio::test(start_paused = true)]
    async fn young_workers_average_over_their_uptime() {
        let t0 = Instant::now();
        let stats = Stats::starting_at(t0, Duration::from_secs(10));
        stats.admitted(t0, 4);
        let (rates, _) = stats.snapshot(t0 + Duration::from_secs(2));
        assert!((rates.arrival_per_s - 2.0).abs() < 1e-9);
    }

    #[tokio::test(start_paused = true)]
    async fn batch_figures_are_means_and_busy_is_a_fraction() {
        let t0 = Instant::now();
        let stats = Stats::starting_at(t0, Duration::from_secs(10));
        let ms = Duration::from_millis;
        stats.batch(t0, 4, 10, ms(500), ms(40));
        stats.batch(t0 + Duration::from_secs(1), 8, 20, ms(1500), ms(80));
        let (_, b) = stats.snapshot(t0 + Duration::from_secs(4));
        assert_eq!(b.count, 2);
        assert!((b.mean_rows - 6.0).abs() < 1e-9);
        assert!((b.mean_padded_len - 15.0).abs() < 1e-9);
        assert!((b.mean_inference_ms - 1000.0).abs() < 1e-6);
        assert!((b.mean_queue_wait_ms - 10.0).abs() < 1e-6);
        assert!((b.busy_fraction - 0.5).abs() < 1e-9);
    }
}
