//! The scaling signal of a pool, in replica units: how many replicas the current load needs at
//! target. Pure functions and a smoother with no I/O; the task that feeds them lives in
//! [`task`].
//!
//! The signal is the calibrated one of [`model`] (offered demand over what a replica serves at
//! the target utilization) whenever the pool's capacity is known; `docs/signal.md` says how.
//! Until some worker has reported a capacity, it is the queue-and-GPU pressure below, against
//! `--target-queue` and `--target-gpu` (the fallback, also what `worker_pressure` shows):
//!
//! ```text
//! queue_i    = outstanding_i + max(0, reported_queued_i + reported_in_flight_i - outstanding_at_snapshot_i)
//! pressure_i = max(queue_i / target_queue, gpu_i / target_gpu)     (gpu term left out when unavailable)
//! raw        = sum_i pressure_i + backlog / target_queue
//! signal     = max(smooth(raw), blind_workers)
//! ```
//!
//! A worker with stale telemetry keeps its last fresh pressure (at least its outstanding requests
//! over target_queue; one whole replica if it never reported) and counts as blind: the signal
//! never falls below the number of blind workers, so losing sight of workers never scales down.

pub mod model;
pub(crate) mod task;

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;
pub use wire::{PoolSignal, RawSignal, SignalMode};

/// What one worker contributes, as read from its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WorkerView {
    /// Requests the gateway has outstanding to it now.
    pub outstanding: u64,
    /// Fresh telemetry: the queue estimate (with our outstanding) and the GPU utilization.
    pub fresh: Option<FreshTelemetry>,
    /// The last pressure computed from fresh telemetry, if any.
    pub held: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FreshTelemetry {
    pub queue: f64,
    pub gpu_pct: Option<f64>,
}

/// Targets one replica should run at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Targets {
    pub queue: f64,
    pub gpu_pct: f64,
}

/// One worker's pressure and how it was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WorkerPressure {
    pub pressure: f64,
    /// `queue_i / target_queue` (0 when stale).
    pub queue_term: f64,
    /// `gpu_i / target_gpu`, `None` when unavailable or stale.
    pub gpu_term: Option<f64>,
    /// Telemetry was stale: `pressure` is the held value.
    pub stale: bool,
    /// Fresh telemetry without a GPU reading: the GPU term was left out.
    pub gpu_missing: bool,
}

pub fn worker_pressure(v: &WorkerView, t: Targets) -> WorkerPressure {
    match v.fresh {
        Some(f) => {
            let queue_term = f.queue.max(0.0) / t.queue;
            let gpu_term = f.gpu_pct.map(|g| g.max(0.0) / t.gpu_pct);
            WorkerPressure {
                pressure: queue_term.max(gpu_term.unwrap_or(0.0)),
                queue_term,
                gpu_term,
                stale: false,
                gpu_missing: gpu_term.is_none(),
            }
        }
        None => {
            let own = v.outstanding as f64 / t.queue;
            WorkerPressure {
                pressure: v.held.unwrap_or(1.0).max(own),
                queue_term: 0.0,
                gpu_term: None,
                stale: true,
                gpu_missing: false,
            }
        }
    }
}

pub fn pool_raw(workers: &[WorkerPressure], backlog: u64, t: Targets) -> RawSignal {
    let mut s = RawSignal { workers: workers.len(), backlog: backlog as f64 / t.queue, ..Default::default() };
    for w in workers {
        s.raw += w.pressure;
        if w.stale {
            s.blind += 1;
            s.held += w.pressure;
        } else {
            s.queue += w.queue_term;
            s.gpu += w.gpu_term.unwrap_or(0.0);
        }
        s.gpu_missing += usize::from(w.gpu_missing);
    }
    s.raw += s.backlog;
    s
}

/// The offered rate of a pool: a running total of queries (admitted or refused) read every
/// signal step, and its rate over the last `window`, or over the last `rise` when that is higher:
/// a step up in load is read within `rise`, a step down over the whole window.
#[derive(Debug, Clone)]
pub struct DemandMeter {
    window: Duration,
    rise: Duration,
    samples: VecDeque<(Instant, u64)>,
}

/// The short window of [`DemandMeter::new`]: a step up in load reaches the signal within it.
pub const DEMAND_RISE: Duration = Duration::from_secs(1);

impl DemandMeter {
    /// A meter over `window` that reads increases over [`DEMAND_RISE`] (or the window, if shorter).
    pub fn new(window: Duration) -> Self {
        Self::with_rise(window, DEMAND_RISE)
    }

    /// A meter over `window` that reads increases over `rise` (`rise >= window`: no fast rise).
    pub fn with_rise(window: Duration, rise: Duration) -> Self {
        let window = window.max(Duration::from_millis(1));
        Self { window, rise: rise.clamp(Duration::from_millis(1), window), samples: VecDeque::new() }
    }

    /// Feed the running total at `now`; returns queries per second: the larger of the rates over
    /// the window and over the rise window (over what has been seen, while younger than either;
    /// 0 from a single reading).
    pub fn update(&mut self, total: u64, now: Instant) -> f64 {
        self.samples.push_back((now, total));
        // Keep the newest reading at or before the window's start, to span the whole window.
        while self.samples.len() > 2 && self.samples[1].0 + self.window <= now {
            self.samples.pop_front();
        }
        let rate = |(at, from): (Instant, u64)| {
            let span = now.saturating_duration_since(at).as_secs_f64();
            if span <= 0.0 { 0.0 } else { total.saturating_sub(from) as f64 / span }
        };
        let long = rate(self.samples[0]);
        // The newest reading at or before the rise window's start (the oldest one if none is).
        let short_from = self.samples.iter().rev().find(|(at, _)| *at + self.rise <= now).copied();
        let short = short_from.map_or(long, rate);
        long.max(short)
    }
}

/// Exponential smoothing with separate rise and fall time constants.
#[derive(Debug, Clone, Copy)]
pub struct Smoother {
    rise: Duration,
    fall: Duration,
    state: Option<(f64, Instant)>,
}

impl Smoother {
    pub fn new(rise: Duration, fall: Duration) -> Self {
        Self { rise, fall, state: None }
    }

    /// Feed a raw value at `now`; returns the smoothed value. The first value is taken as is.
    pub fn update(&mut self, raw: f64, now: Instant) -> f64 {
        let next = match self.state {
            None => raw,
            Some((prev, at)) => {
                let dt = now.saturating_duration_since(at).as_secs_f64();
                let tau = if raw > prev { self.rise } else { self.fall }.as_secs_f64();
                let alpha = if tau <= 0.0 { 1.0 } else { 1.0 - (-dt / tau).exp() };
                prev + alpha * (raw - prev)
            }
        };
        self.state = Some((next, now));
        next
    }
}

/// The least signal of a pool with demand now (queries offered within the demand window, or
/// requests held for a worker): however small that demand against a replica's capacity, it reads
/// above zero in milli-units, so the HPA's `ceil` keeps (or brings) one replica. A trickle then
/// holds a pool at one replica instead of reading zero between requests and sending it to zero,
/// to be woken by the next request.
pub const ACTIVE_FLOOR: f64 = 0.001;

/// `value`, at least [`ACTIVE_FLOOR`] while the pool has demand.
pub fn with_active_floor(value: f64, demand_per_s: f64, held: u64) -> f64 {
    if demand_per_s > 0.0 || held > 0 { value.max(ACTIVE_FLOOR) } else { value }
}

/// The pool signal from the smoothed raw value and the blind floor.
pub fn finish(smoothed: f64, raw: &RawSignal) -> (f64, bool) {
    (smoothed.max(raw.blind as f64), raw.blind > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Targets = Targets { queue: 32.0, gpu_pct: 70.0 };

    fn fresh(queue: f64, gpu: Option<f64>) -> WorkerView {
        WorkerView { outstanding: 0, fresh: Some(FreshTelemetry { queue, gpu_pct: gpu }), held: None }
    }

    #[test]
    fn any_demand_reads_above_zero_and_none_leaves_the_value() {
        // A trickle against a large capacity: its share of a replica rounds to zero milli-units.
        assert_eq!(with_active_floor(0.00007, 1.0, 0), ACTIVE_FLOOR);
        assert_eq!(with_active_floor(0.0, 0.0, 1), ACTIVE_FLOOR, "a held request");
        assert_eq!(with_active_floor(2.5, 1.0, 0), 2.5);
        assert_eq!(with_active_floor(0.0003, 0.0, 0), 0.0003, "no demand: it decays to zero");
    }

    #[test]
    fn pressure_table() {
        // (view, expected pressure, stale, gpu_missing)
        let cases = [
            (fresh(0.0, Some(0.0)), 0.0, false, false),
            (fresh(32.0, Some(0.0)), 1.0, false, false),
            (fresh(16.0, Some(70.0)), 1.0, false, false),
            (fresh(64.0, Some(35.0)), 2.0, false, false),
            (fresh(0.0, Some(140.0)), 2.0, false, false),
            (fresh(48.0, None), 1.5, false, true),
            (WorkerView { outstanding: 0, fresh: None, held: Some(2.5) }, 2.5, true, false),
            (WorkerView { outstanding: 128, fresh: None, held: Some(2.5) }, 4.0, true, false),
            (WorkerView { outstanding: 0, fresh: None, held: None }, 1.0, true, false),
        ];
        for (i, (v, want, stale, missing)) in cases.into_iter().enumerate() {
            let p = worker_pressure(&v, T);
            assert!((p.pressure - want).abs() < 1e-9, "case {i}: {p:?}");
            assert_eq!(p.stale, stale, "case {i}");
            assert_eq!(p.gpu_missing, missing, "case {i}");
        }
    }

    #[test]
    fn monotonic_in_queue_and_in_gpu() {
        for gpu in [None, Some(0.0), Some(50.0), Some(100.0)] {
            let mut last = -1.0;
            for q in 0..200 {
                let p = worker_pressure(&fresh(q as f64, gpu), T).pressure;
                assert!(p >= last, "queue {q} gpu {gpu:?}");
                last = p;
            }
        }
        for q in [0.0, 10.0, 100.0] {
            let mut last = -1.0;
            for g in 0..=100 {
                let p = worker_pressure(&fresh(q, Some(g as f64)), T).pressure;
                assert!(p >= last, "queue {q} gpu {g}");
                last = p;
            }
        }
        // ... and so is the pool sum.
        let lo = pool_raw(&[worker_pressure(&fresh(10.0, Some(20.0)), T)], 0, T).raw;
        let hi = pool_raw(&[worker_pressure(&fresh(20.0, Some(20.0)), T)], 0, T).raw;
        assert!(hi > lo);
        assert!(pool_raw(&[], 64, T).raw == 2.0);
    }

    #[test]
    fn launch_bound_worker_is_seen_through_its_queue() {
        // GPU duty cycle saturates (or stays low when launch-bound); the queue still tells.
        let p = worker_pressure(&fresh(96.0, Some(40.0)), T);
        assert!((p.pressure - 3.0).abs() < 1e-9);
    }

    #[test]
    fn stale_workers_hold_and_floor_the_signal() {
        let ws = [
            worker_pressure(&fresh(0.0, Some(0.0)), T),
            worker_pressure(&WorkerView { outstanding: 0, fresh: None, held: Some(0.2) }, T),
            worker_pressure(&WorkerView { outstanding: 0, fresh: None, held: Some(0.1) }, T),
        ];
        let raw = pool_raw(&ws, 0, T);
        assert_eq!(raw.blind, 2);
        assert!((raw.raw - 0.3).abs() < 1e-9);
        let (signal, stale) = finish(raw.raw, &raw);
        assert_eq!(signal, 2.0, "never below the workers we cannot see");
        assert!(stale);
        let fresh_only = pool_raw(&ws[..1], 0, T);
        assert_eq!(finish(fresh_only.raw, &fresh_only), (0.0, false));
    }

    #[tokio::test(start_paused = true)]
    async fn smoothing_rises_fast_and_falls_slowly() {
        let mut s = Smoother::new(Duration::from_secs(1), Duration::from_secs(60));
        let step = Duration::from_millis(250);
        assert_eq!(s.update(1.0, Instant::now()), 1.0);
        // Rise to 10: within ~5 rise constants it is nearly there.
        let mut v = 0.0;
        for _ in 0..20 {
            tokio::time::advance(step).await;
            v = s.update(10.0, Instant::now());
        }
        assert!(v > 9.9, "{v}");
        // Fall to 1: after 5 s it has barely moved; after 5 minutes it is nearly there.
        for _ in 0..20 {
            tokio::time::advance(step).await;
            v = s.update(1.0, Instant::now());
        }
        assert!(v > 9.0, "{v}");
        for _ in 0..(4 * 300) {
            tokio::time::advance(step).await;
            v = s.update(1.0, Instant::now());
        }
        assert!(v < 1.1, "{v}");
    }

    #[tokio::test(start_paused = true)]
    async fn demand_is_the_rate_over_the_window() {
        let mut m = DemandMeter::with_rise(Duration::from_secs(5), Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(m.update(0, t0), 0.0);
        // 100 queries a second for 10 s, read every 250 ms.
        let mut rate = 0.0;
        for i in 1..=40u64 {
            tokio::time::advance(Duration::from_millis(250)).await;
            rate = m.update(i * 25, Instant::now());
        }
        assert!((rate - 100.0).abs() < 1e-9, "{rate}");
        // A step to 400/s: after one window the meter reads it whole.
        let mut total = 1000;
        for i in 1..=20u64 {
            tokio::time::advance(Duration::from_millis(250)).await;
            total += 100;
            rate = m.update(total, Instant::now());
            if i == 4 {
                assert!(rate > 100.0 && rate < 400.0, "partway: {rate}");
            }
        }
        assert!((rate - 400.0).abs() < 1e-9, "{rate}");
        assert!(m.samples.len() <= 22, "old readings are dropped: {}", m.samples.len());
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_up_is_read_within_the_rise_window_and_a_step_down_over_the_window() {
        let mut m = DemandMeter::new(Duration::from_secs(5));
        let mut total = 0;
        let mut rate = 0.0;
        // 100/s for 10 s, read every 250 ms.
        for _ in 0..40 {
            tokio::time::advance(Duration::from_millis(250)).await;
            total += 25;
            rate = m.update(total, Instant::now());
        }
        assert!((rate - 100.0).abs() < 1e-9, "{rate}");
        // A step to 400/s: one second later the meter reads it whole, though the window is 5 s.
        for _ in 0..4 {
            tokio::time::advance(Duration::from_millis(250)).await;
            total += 100;
            rate = m.update(total, Instant::now());
        }
        assert!((rate - 400.0).abs() < 1e-9, "{rate}");
        // Back to 100/s: the window still holds the burst, so the meter falls over it.
        for i in 1..=20 {
            tokio::time::advance(Duration::from_millis(250)).await;
            total += 25;
            rate = m.update(total, Instant::now());
            if i == 8 {
                assert!(rate > 150.0, "two seconds after the step down: {rate}");
            }
        }
        assert!((rate - 100.0).abs() < 1e-9, "{rate}");
    }

    #[tokio::test(start_paused = true)]
    async fn zero_rise_follows_increases_at_once() {
        let mut s = Smoother::new(Duration::ZERO, Duration::from_secs(60));
        s.update(1.0, Instant::now());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(s.update(7.0, Instant::now()), 7.0);
    }
}
