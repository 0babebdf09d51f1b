//! Sliding-window rates and batch figures for `/v1/stats`, in one-second buckets.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use tokio::time::Instant;
use wire::{BatchStats, RateStats};

/// One second's batch figures (written once per batch, under the lock).
#[derive(Debug, Default, Clone, Copy)]
struct Bucket {
    second: u64,
    batches: u64,
    rows: u64,
    /// Real tokens of the rows (padding excluded).
    tokens: u64,
    padded_len_sum: u64,
    inference: Duration,
    queue_wait: Duration,
    waits: u64,
}

/// Per-second counts of one kind, written by every request without a lock or a shared cache
/// line: a [`Ring`] per shard ([`listener::shard`]), each thread adding to its own.
#[derive(Debug)]
struct Counts {
    shards: Box<[Ring]>,
}

impl Counts {
    fn new(seconds: u64) -> Self {
        Self { shards: (0..listener::shard::SHARDS).map(|_| Ring::new(seconds)).collect() }
    }

    fn add(&self, second: u64, n: u64) {
        self.shards[listener::shard::index()].add(second, n);
    }

    /// The counts of seconds `from..=to` (at most the ring's length back).
    fn sum(&self, from: u64, to: u64) -> u64 {
        self.shards.iter().map(|r| r.sum(from, to)).sum()
    }

    fn total(&self) -> u64 {
        self.shards.iter().map(|r| r.total.load(Ordering::Relaxed)).sum()
    }

    fn forget(&self) {
        for ring in &self.shards {
            ring.total.store(0, Ordering::Relaxed);
            for slot in &ring.slots {
                slot.store(u64::MAX, Ordering::Relaxed);
            }
        }
    }
}

/// One shard's per-second counts: a ring of atomics, each holding the second it counts (high 32
/// bits) and its count (low 32 bits). A slot found holding an older second is restarted at the
/// new one. Each on a cache line of its own, so that shards never share one.
#[derive(Debug)]
struct Ring {
    slots: Box<[CachePadded<AtomicU64>]>,
    total: CachePadded<AtomicU64>,
}

impl Ring {
    fn new(seconds: u64) -> Self {
        let slots = (0..seconds).map(|_| CachePadded::new(AtomicU64::new(u64::MAX))).collect();
        Self { slots, total: CachePadded::new(AtomicU64::new(0)) }
    }

    fn add(&self, second: u64, n: u64) {
        self.total.fetch_add(n, Ordering::Relaxed);
        let tag = second & 0xffff_ffff;
        let slot = &self.slots[(second % self.slots.len() as u64) as usize];
        let _ = slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            let count = match v >> 32 {
                held if held == tag => v & 0xffff_ffff,
                // A late writer (preempted for a whole ring of seconds) leaves the newer second
                // alone: its count is in the total only.
                held if v != u64::MAX && held > tag => return None,
                _ => 0,
            };
            Some((tag << 32) | count.saturating_add(n).min(0xffff_ffff))
        });
    }

    /// The counts of seconds `from..=to` (at most the ring's length back).
    fn sum(&self, from: u64, to: u64) -> u64 {
        let len = self.slots.len() as u64;
        (from.max(to.saturating_sub(len - 1))..=to)
            .map(|second| {
                let v = self.slots[(second % len) as usize].load(Ordering::Relaxed);
                if v >> 32 == second & 0xffff_ffff { v & 0xffff_ffff } else { 0 }
            })
            .sum()
    }
}

/// One batch's figures, for [`Stats::batch`].
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchFigures {
    pub rows: u64,
    /// Real tokens of the rows (padding excluded).
    pub tokens: u64,
    pub padded_len: u64,
    pub inference: Duration,
    /// The rows' waits from admission to the batch's start, added up.
    pub queue_wait: Duration,
}

/// The batches of the stats window, added up (see [`Stats::backend_window`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BackendWindow {
    pub batches: u64,
    pub rows: u64,
    pub tokens: u64,
    /// Backend time, added over the batches (sessions running at once add up).
    pub busy: Duration,
}

#[derive(Debug)]
pub struct Stats {
    started: Instant,
    window_s: u64,
    admitted: Counts,
    completed: Counts,
    rejected: Counts,
    /// Batch figures per second, and the count of batches ever run.
    batches: Mutex<(VecDeque<Bucket>, u64)>,
}

impl Stats {
    pub fn new(window: Duration) -> Self {
        Self::starting_at(Instant::now(), window)
    }

    pub fn starting_at(started: Instant, window: Duration) -> Self {
        let window_s = window.as_secs().max(1);
        // One slot more than the window: the second being written never overwrites one still read.
        let ring = || Counts::new(window_s + 2);
        Self { started, window_s, admitted: ring(), completed: ring(), rejected: ring(), batches: Mutex::default() }
    }

    pub fn uptime(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.started)
    }

    fn second(&self, now: Instant) -> u64 {
        self.uptime(now).as_secs()
    }

    pub fn admitted(&self, now: Instant, n: u64) {
        self.admitted.add(self.second(now), n);
    }

    pub fn completed(&self, now: Instant, n: u64) {
        self.completed.add(self.second(now), n);
    }

    /// Queries answered since the start (or the last [`forget`](Self::forget)).
    pub fn completed_total(&self) -> u64 {
        self.completed.total()
    }

    pub fn rejected(&self, now: Instant, n: u64) {
        self.rejected.add(self.second(now), n);
    }

    /// A batch of `rows` holding `tokens` real tokens, padded to `padded_len`, ran for
    /// `inference`; its rows waited `queue_wait` in all.
    pub fn batch(&self, now: Instant, b: BatchFigures) {
        let BatchFigures { rows, tokens, padded_len, inference, queue_wait } = b;
        let second = self.second(now);
        let mut guard = self.batches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (buckets, total) = &mut *guard;
        if buckets.back().is_none_or(|b| b.second != second) {
            buckets.push_back(Bucket { second, ..Bucket::default() });
        }
        while buckets.front().is_some_and(|b| b.second + self.window_s < second) {
            buckets.pop_front();
        }
        let b = buckets.back_mut().expect("just pushed");
        b.batches += 1;
        b.rows += rows;
        b.tokens += tokens;
        b.padded_len_sum += padded_len;
        b.inference += inference;
        b.queue_wait += queue_wait;
        b.waits += rows;
        *total += 1;
    }

    /// Forgets every count and batch so far (after the start-up calibration, so that its
    /// synthetic load is not reported as traffic). Only while nothing else counts: before the
    /// worker serves.
    pub fn forget(&self) {
        for counts in [&self.admitted, &self.completed, &self.rejected] {
            counts.forget();
        }
        let mut guard = self.batches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *guard = (VecDeque::new(), 0);
    }

    /// The batch figures of the window ending at second `current`, and the count ever run.
    fn window_batches(&self, current: u64) -> (Bucket, u64) {
        let guard = self.batches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (buckets, total_batches) = &*guard;
        let mut sum = Bucket::default();
        for b in buckets.iter().filter(|b| b.second + self.window_s > current) {
            sum.batches += b.batches;
            sum.rows += b.rows;
            sum.tokens += b.tokens;
            sum.padded_len_sum += b.padded_len_sum;
            sum.inference += b.inference;
            sum.queue_wait += b.queue_wait;
            sum.waits += b.waits;
        }
        (sum, *total_batches)
    }

    /// What the window's batches say of the backend's speed: rows, real tokens and backend time.
    pub fn backend_window(&self, now: Instant) -> BackendWindow {
        let (sum, _) = self.window_batches(self.uptime(now).as_secs());
        BackendWindow { batches: sum.batches, rows: sum.rows, tokens: sum.tokens, busy: sum.inference }
    }

    /// Rates and batch figures over the last `window` seconds (or the uptime, if shorter).
    pub fn snapshot(&self, now: Instant) -> (RateStats, BatchStats) {
        let uptime = self.uptime(now);
        let current = uptime.as_secs();
        // The window ends now and starts `window_s` seconds back; the oldest second may be partial.
        let first = (current + 1).saturating_sub(self.window_s);
        let span = uptime.min(Duration::from_secs(self.window_s)).as_secs_f64().max(1e-3);
        let (sum, total_batches) = self.window_batches(current);
        let per = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
        let rates = RateStats {
            window_s: span,
            arrival_per_s: self.admitted.sum(first, current) as f64 / span,
            completion_per_s: self.completed.sum(first, current) as f64 / span,
            rejected_per_s: self.rejected.sum(first, current) as f64 / span,
            admitted_total: self.admitted.total(),
            completed_total: self.completed.total(),
            rejected_total: self.rejected.total(),
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
            total: total_batches,
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

    #[test]
    fn counts_from_many_threads_are_exact_and_old_seconds_are_forgotten() {
        let ring = std::sync::Arc::new(Ring::new(4));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let ring = ring.clone();
                std::thread::spawn(move || {
                    for second in 0..10u64 {
                        for _ in 0..1000 {
                            ring.add(second, 1);
                        }
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(ring.total.load(Ordering::Relaxed), 80_000);
        assert_eq!(ring.sum(9, 9), 8000);
        assert_eq!(ring.sum(6, 9), 32_000, "no late writer overwrote a newer second");
        // Seconds 0..=5 were overwritten by 4..=9 in a ring of four: only the last four count.
        assert_eq!(ring.sum(0, 9), 32_000);
        assert_eq!(ring.sum(10, 12), 0, "seconds not yet written read zero");
    }

    #[test]
    fn shards_add_up_to_every_threads_counts() {
        let counts = std::sync::Arc::new(Counts::new(4));
        std::thread::scope(|s| {
            for t in 0..20u64 {
                let counts = counts.clone();
                s.spawn(move || {
                    for second in 0..3 {
                        counts.add(second, t + 1);
                    }
                });
            }
        });
        assert_eq!(counts.total(), 3 * 210);
        assert_eq!(counts.sum(0, 2), 3 * 210);
        assert_eq!(counts.sum(1, 1), 210);
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
        let b = |rows, padded_len, inference, queue_wait| BatchFigures {
            rows,
            tokens: rows * 3,
            padded_len,
            inference,
            queue_wait,
        };
        stats.batch(t0, b(4, 10, ms(500), ms(40)));
        stats.batch(t0 + Duration::from_secs(1), b(8, 20, ms(1500), ms(80)));
        let (_, b) = stats.snapshot(t0 + Duration::from_secs(4));
        assert_eq!(b.count, 2);
        assert!((b.mean_rows - 6.0).abs() < 1e-9);
        assert!((b.mean_padded_len - 15.0).abs() < 1e-9);
        assert!((b.mean_inference_ms - 1000.0).abs() < 1e-6);
        assert!((b.mean_queue_wait_ms - 10.0).abs() < 1e-6);
        assert!((b.busy_fraction - 0.5).abs() < 1e-9);
        let w = stats.backend_window(t0 + Duration::from_secs(4));
        assert_eq!(w, BackendWindow { batches: 2, rows: 12, tokens: 36, busy: ms(2000) });
        assert_eq!(stats.backend_window(t0 + Duration::from_secs(60)), BackendWindow::default());
    }
}
