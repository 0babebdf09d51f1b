//! The calibrated signal: offered demand over what one replica serves at the target utilization,
//! plus the backlog, floored by saturated workers. Pure functions; `docs/signal.md` explains
//! each term.
//!
//! ```text
//! C          = mean over fresh workers of their reported capacity (queries/s when saturated);
//!              the last known C while none reports one
//! demand     = lambda / (C x u)                  lambda: queries offered to the pool per second,
//!                                                admitted or refused, measured at the gateway
//! backlog    = sum_i max(0, queue_i - drain_i) / (C x u x H)
//! waiting    = gateway_backlog / (C x u x H)
//!              drain_i = max(C_i x L, 2 x rows per full batch_i): what the worker clears within
//!              the latency target L; H: the drain horizon
//! saturation = sum over saturated workers of max(1, gpu_i / 100) / u
//!              saturated: queue_i beyond drain_i, or its GPU at or above the saturation mark
//! raw        = max(demand, saturation) + backlog + waiting
//! ```
//!
//! Without any capacity ever known (workers that predate it, calibration off and no traffic
//! yet) the pool falls back to the queue-and-GPU pressure of [`super::worker_pressure`].

use serde::Serialize;

/// What the calibrated signal is computed against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Model {
    /// Target utilization `u` of a replica, in (0, 1].
    pub utilization: f64,
    /// Latency target `L`, seconds: the queue a worker clears within it is not backlog.
    pub latency_s: f64,
    /// Drain horizon `H`, seconds: the backlog is to be cleared within it.
    pub drain_horizon_s: f64,
    /// GPU utilization (percent) from which a worker counts as saturated.
    pub gpu_saturation_pct: f64,
}

/// One worker's fresh figures, as the capacity model reads them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WorkerLoad {
    /// Queries in the worker now: queued plus in flight (with the gateway's outstanding).
    pub queue: f64,
    pub gpu_pct: Option<f64>,
    /// Reported capacity, queries per second, and the queries its full batches hold.
    pub capacity: Option<(f64, u64)>,
}

/// What the model makes of one worker.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct WorkerAssessment {
    /// Queries beyond what it clears within the latency target.
    pub backlog: f64,
    /// Saturated: its queue beyond what it clears, or its GPU at the saturation mark.
    pub saturated: bool,
    /// Replicas its saturation alone asks for (0 when not saturated).
    pub floor: f64,
}

/// The worker's assessment against `capacity` (its own, or the pool's when it reports none).
pub fn assess(w: &WorkerLoad, capacity: f64, m: Model) -> WorkerAssessment {
    // A worker that reports no capacity is taken to be like the pool's, with a CPU worker's
    // default batch of 32 rows.
    let (c, full) = w.capacity.unwrap_or((capacity, 32));
    let drains = (c * m.latency_s).max(2.0 * full as f64);
    let backlog = (w.queue - drains).max(0.0);
    let gpu = w.gpu_pct.unwrap_or(0.0);
    // A busy GPU is this worker's saturation only while it holds work of its own (a full batch
    // or more): NVML's figure is an average over its last sample period (high for a while after
    // the start-up calibration), and on a shared GPU the work may be another process's.
    let gpu_saturated = w.gpu_pct.is_some_and(|g| g >= m.gpu_saturation_pct) && w.queue >= full as f64;
    let saturated = backlog > 0.0 || gpu_saturated;
    let floor = if saturated { (gpu / 100.0).max(1.0) / m.utilization } else { 0.0 };
    WorkerAssessment { backlog, saturated, floor }
}

/// The mean reported capacity of the workers that report one.
pub fn pool_capacity(workers: &[WorkerLoad]) -> Option<f64> {
    let (sum, n) = workers.iter().filter_map(|w| w.capacity).fold((0.0, 0u32), |(s, n), (c, _)| (s + c, n + 1));
    (n > 0).then(|| sum / f64::from(n))
}

/// The calibrated signal's parts, in replicas.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Calibrated {
    /// `lambda / (C x u)`.
    pub demand: f64,
    /// The workers' backlog, in replicas.
    pub backlog: f64,
    /// The requests waiting at the gateway for a worker, in replicas (drained like the backlog).
    pub waiting: f64,
    /// What saturated workers ask for at least.
    pub saturation: f64,
    /// `sum gpu_i / 100 / u` over fresh workers with a reading: the GPUs' own view (shown, and
    /// part of the floor only for saturated workers).
    pub gpu: f64,
    /// `max(demand, saturation) + backlog + waiting`.
    pub raw: f64,
    pub saturated_workers: usize,
}

/// The pool's calibrated signal from its offered rate, capacity and fresh workers, and the
/// requests waiting at the gateway for a worker.
pub fn calibrated(lambda: f64, capacity: f64, workers: &[WorkerLoad], gateway_backlog: u64, m: Model) -> Calibrated {
    let per_replica = capacity * m.utilization;
    let mut out = Calibrated { demand: lambda.max(0.0) / per_replica, ..Default::default() };
    let mut backlog = 0.0;
    for w in workers {
        let a = assess(w, capacity, m);
        backlog += a.backlog;
        out.saturation += a.floor;
        out.saturated_workers += usize::from(a.saturated);
        out.gpu += w.gpu_pct.map_or(0.0, |g| g.max(0.0) / 100.0 / m.utilization);
    }
    let drain = per_replica * m.drain_horizon_s.max(1e-3);
    out.backlog = backlog / drain;
    out.waiting = gateway_backlog as f64 / drain;
    out.raw = out.demand.max(out.saturation) + out.backlog + out.waiting;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: Model = Model { utilization: 0.7, latency_s: 0.02, drain_horizon_s: 30.0, gpu_saturation_pct: 90.0 };

    fn worker(queue: f64, gpu: Option<f64>, capacity: f64) -> WorkerLoad {
        WorkerLoad { queue, gpu_pct: gpu, capacity: Some((capacity, 32)) }
    }

    /// `R = lambda / (C u)` for every load from 5 % to 300 % of C, whatever the replicas serving.
    #[test]
    fn demand_is_the_offered_rate_over_a_replica_at_target() {
        for replicas in [1usize, 2, 4] {
            for fraction in [0.05, 0.25, 0.5, 0.9, 1.5, 3.0] {
                let c = 200.0;
                let lambda = fraction * c;
                // Unsaturated workers with a modest queue each.
                let ws: Vec<_> = (0..replicas).map(|_| worker(10.0, None, c)).collect();
                let s = calibrated(lambda, c, &ws, 0, M);
                let r = lambda / (c * 0.7);
                assert!((s.raw - r).abs() < 1e-9, "{replicas} x {fraction}: {s:?}");
            }
        }
    }

    #[test]
    fn a_saturated_worker_asks_for_at_least_itself_at_target() {
        // Demand says 0.5, but the worker's queue is far beyond what it drains: it is full.
        let ws = [worker(500.0, None, 200.0)];
        let s = calibrated(70.0, 200.0, &ws, 0, M);
        assert!((s.demand - 0.5).abs() < 1e-9);
        assert_eq!(s.saturated_workers, 1);
        assert!((s.saturation - 1.0 / 0.7).abs() < 1e-9);
        // 436 queries beyond the 64 two full batches hold, to clear in 30 s at 140 q/s.
        assert!((s.backlog - 436.0 / (140.0 * 30.0)).abs() < 1e-9, "{s:?}");
        assert!((s.raw - (1.0 / 0.7 + s.backlog)).abs() < 1e-9);
    }

    #[test]
    fn overload_reads_the_demand_not_the_queue() {
        // Three times capacity offered to one worker holding its whole queue (1024): the
        // demand rules; the queue adds a fraction of a replica.
        let ws = [worker(1024.0, None, 200.0)];
        let s = calibrated(600.0, 200.0, &ws, 0, M);
        let r = 600.0 / 140.0;
        assert!(s.raw >= r && s.raw < r * 1.1, "{s:?}");
    }

    #[test]
    fn a_busy_gpu_is_a_floor_only_when_saturated() {
        // Launch-bound at a quarter load, NVML reads 50 %: no floor, the demand rules.
        let quarter = calibrated(50_000.0, 190_000.0, &[worker(100.0, Some(50.0), 190_000.0)], 0, M);
        assert_eq!(quarter.saturation, 0.0);
        assert!((quarter.raw - 50_000.0 / (190_000.0 * 0.7)).abs() < 1e-9);
        assert!((quarter.gpu - 0.5 / 0.7).abs() < 1e-9);
        // At 97 % with a full batch of its own waiting, the GPU is full whatever the capacity
        // figure says ...
        let full = calibrated(100_000.0, 400_000.0, &[worker(100.0, Some(97.0), 400_000.0)], 0, M);
        assert!((full.saturation - 1.0 / 0.7).abs() < 1e-9, "{full:?}");
        assert!((full.raw - 1.0 / 0.7).abs() < 1e-9);
        // ... but not with an empty queue: the reading is another process's work, or the
        // calibration's, still in NVML's average just after start.
        let idle = calibrated(1_000.0, 190_000.0, &[worker(2.0, Some(99.0), 190_000.0)], 0, M);
        assert_eq!(idle.saturation, 0.0, "{idle:?}");
    }

    #[test]
    fn the_drain_allows_two_full_batches_or_the_latency_target() {
        let m = M;
        // 200 q/s: 4 queries within 20 ms, but two batches of 32 are normal.
        assert_eq!(assess(&worker(64.0, None, 200.0), 200.0, m).backlog, 0.0);
        assert_eq!(assess(&worker(65.0, None, 200.0), 200.0, m).backlog, 1.0);
        // 190k q/s: 3,800 within 20 ms.
        let gpu = WorkerLoad { queue: 3000.0, gpu_pct: Some(60.0), capacity: Some((190_000.0, 512)) };
        assert!(!assess(&gpu, 190_000.0, m).saturated);
    }

    #[test]
    fn the_pool_capacity_is_the_mean_of_those_reported() {
        let ws = [worker(0.0, None, 100.0), WorkerLoad::default(), worker(0.0, None, 300.0)];
        assert_eq!(pool_capacity(&ws), Some(200.0));
        assert_eq!(pool_capacity(&[WorkerLoad::default()]), None);
    }

    #[test]
    fn requests_waiting_at_the_gateway_are_backlog() {
        let s = calibrated(0.0, 100.0, &[], 2100, M);
        assert!((s.waiting - 2100.0 / (70.0 * 30.0)).abs() < 1e-9);
        assert!((s.raw - s.waiting).abs() < 1e-9);
    }
}
