//! One replica's capacity: the queries per second this worker serves when saturated, the divisor
//! of the gateway's scaling signal (`docs/signal.md`).
//!
//! Two figures; the calibration's is reported whenever there is one:
//!
//! - **Calibration**, at start, before the worker listens: a closed loop of synthetic queries (the
//!   load generator's SNIPS sample) through the real pipeline (admission, tokenizing, batching, every
//!   backend session), enough of them in flight to keep every session's batches full, until
//!   `--calibration-time` has passed and every session ran several full batches. Its rate, after a
//!   first full batch per session is let through unmeasured, is the worker's capacity with two
//!   full batches per session in flight: what a closed-loop load test at that depth measures, the
//!   latency design point. It is scaled down to the recent real tokens per query when
//!   those are longer, `(calibration + K) / (recent + K)` with `K` tokens of per-query overhead
//!   (at most 4x), so long (heavy) queries lower it. Shorter queries do not raise it: whether
//!   they are cheaper depends on the backend (a GPU pads to buckets, a launch-bound batch costs
//!   the same).
//! - **Observed**: over the stats window, `sessions x rows / backend time`, what the backend does
//!   while busy. Reported beside the calibration, and the capacity only without one
//!   (`--calibration-time 0s`). It does not raise the calibrated figure: under overload, with a
//!   deep queue keeping every batch full, it reads what the worker does with a second of queue
//!   (above both the calibration and a closed-loop measurement), not a capacity at any latency
//!   a user would accept; and on a GPU at low load it reads low (small batches are
//!   launch-bound).
//!
//! The worker never reports zeros in place of a figure: with neither (calibration off, no batch
//! yet) it reports no capacity, and the gateway falls back as `docs/signal.md` says.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use wire::{CapacitySource, CapacityStats};

use crate::core::{Core, CoreError, Queries};
use crate::stats::BackendWindow;

/// The calibration's queries: the load generator's sample of SNIPS queries, one a line.
const QUERIES: &str = include_str!("../../loadtest/queries.txt");

/// Per-query overhead, in tokens, of the length scaling (special tokens and per-row work).
const OVERHEAD_TOKENS: f64 = 4.0;
/// The length scaling lowers the calibration by at most this factor.
const MAX_LENGTH_SCALE: f64 = 4.0;
/// The observed figure needs at least this many batches in the window ...
const MIN_OBSERVED_BATCHES: u64 = 8;
/// ... and this much backend time.
const MIN_OBSERVED_BUSY: Duration = Duration::from_millis(50);
/// The calibration ends by this many times `--calibration-time` at the latest.
const MAX_CALIBRATION_FACTOR: u32 = 10;

/// A capacity known before traffic: measured at start, carried over from the last calibration
/// (`capacity_cache`), or set by the operator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibrated {
    pub per_s: f64,
    /// Real tokens per query of the calibration's queries (`None` when configured).
    pub tokens_per_query: Option<f64>,
    pub configured: bool,
    /// The last calibration's figure, until this start's own calibration replaces it.
    pub carried_over: bool,
}

/// What the calibration ran, for its log line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    pub result: Calibrated,
    pub measured_queries: u64,
    pub measured: Duration,
    pub in_flight: usize,
}

/// How hard and how long to calibrate.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Queries kept in flight: enough for every session's batch to be full with one more filling.
    pub in_flight: usize,
    /// Queries let through unmeasured first (a full batch per session).
    pub warmup_queries: u64,
    /// Least measured queries (several full batches per session).
    pub min_queries: u64,
    /// Least measuring time.
    pub min_time: Duration,
}

impl Plan {
    /// The plan for `sessions` backend sessions of batches of `max_rows`, within an admission
    /// capacity of `queue_capacity` queries.
    pub fn new(sessions: usize, max_rows: usize, queue_capacity: u64, min_time: Duration) -> Self {
        let full = (sessions.max(1) * max_rows.max(1)) as u64;
        let in_flight = (2 * full).min((queue_capacity / 2).max(1));
        Self {
            in_flight: usize::try_from(in_flight).unwrap_or(usize::MAX),
            warmup_queries: full,
            min_queries: 4 * full,
            min_time,
        }
    }
}

/// Runs the calibration through `core` (before the worker serves: its counts are then forgotten
/// by the caller). Fails with the first error a query met (the backend failing, say).
pub async fn calibrate(core: &Arc<Core>, plan: Plan) -> Result<Calibration, CoreError> {
    let queries: Vec<&'static str> = QUERIES.lines().map(str::trim).filter(|q| !q.is_empty()).collect();
    let tokens_per_query =
        queries.iter().map(|q| core.count_tokens(q) as f64).sum::<f64>() / queries.len().max(1) as f64;
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let cap = started + plan.min_time.max(Duration::from_millis(1)) * MAX_CALIBRATION_FACTOR;
    // Measuring starts once the warm-up queries are answered: (instant, answered then, clients'
    // queries answered by then). Clients' queries answered meanwhile count too: when the worker
    // already serves, they take the room the calibration's would have.
    let mark = Arc::new(std::sync::OnceLock::<(Instant, u64, u64)>::new());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..plan.in_flight {
        let (core, done, mark, stop, queries) =
            (core.clone(), done.clone(), mark.clone(), stop.clone(), queries.clone());
        tasks.spawn(async move {
            let mut k = i;
            while !stop.load(Ordering::Relaxed) && Instant::now() < cap {
                let q: Queries = smallvec::smallvec![queries[k % queries.len()].to_owned()];
                k += plan.in_flight;
                core.predict_synthetic(q).await?;
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if n >= plan.warmup_queries {
                    let _ = mark.set((Instant::now(), n, core.answered_total()));
                }
                if let Some(&(at, from, _)) = mark.get()
                    && n.saturating_sub(from) >= plan.min_queries
                    && at.elapsed() >= plan.min_time
                {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            Ok::<(), CoreError>(())
        });
    }
    let mut first_error = None;
    while let Some(joined) = tasks.join_next().await {
        if let Ok(Err(e)) = joined {
            stop.store(true, Ordering::Relaxed);
            first_error.get_or_insert(e);
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let (at, from, clients_from) = mark.get().copied().unwrap_or((started, 0, core.answered_total()));
    let measured = at.elapsed();
    let clients = core.answered_total().saturating_sub(clients_from);
    let measured_queries = done.load(Ordering::Relaxed).saturating_sub(from) + clients;
    let per_s = measured_queries as f64 / measured.as_secs_f64().max(1e-6);
    Ok(Calibration {
        result: Calibrated { per_s, tokens_per_query: Some(tokens_per_query), configured: false, carried_over: false },
        measured_queries,
        measured,
        in_flight: plan.in_flight,
    })
}

/// The capacity to report, from the start-up figure and the stats window's batches.
pub fn estimate(calibrated: Option<Calibrated>, w: BackendWindow, sessions: usize) -> Option<CapacityStats> {
    let tokens_per_query = (w.rows > 0).then(|| w.tokens as f64 / w.rows as f64);
    let observed = (w.batches >= MIN_OBSERVED_BATCHES && w.busy >= MIN_OBSERVED_BUSY)
        .then(|| sessions.max(1) as f64 * w.rows as f64 / w.busy.as_secs_f64());
    let scaled = calibrated.map(|c| match (c.tokens_per_query, tokens_per_query) {
        (Some(cal), Some(now)) if !c.configured => {
            let scale = (cal + OVERHEAD_TOKENS) / (now + OVERHEAD_TOKENS);
            c.per_s * scale.clamp(1.0 / MAX_LENGTH_SCALE, 1.0)
        }
        _ => c.per_s,
    });
    let (per_s, source) = match (calibrated, scaled, observed) {
        (Some(c), Some(s), _) if c.configured => (s, CapacitySource::Configured),
        (_, Some(s), _) => (s, CapacitySource::Calibration),
        (_, None, Some(o)) => (o, CapacitySource::Observed),
        (_, None, None) => return None,
    };
    Some(CapacityStats {
        per_s,
        source,
        calibrated_per_s: calibrated.map(|c| c.per_s),
        calibrated_tokens_per_query: calibrated.and_then(|c| c.tokens_per_query),
        observed_per_s: observed,
        tokens_per_query,
        sessions: sessions as u64,
        carried_over: calibrated.is_some_and(|c| c.carried_over),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAL: Calibrated =
        Calibrated { per_s: 1000.0, tokens_per_query: Some(12.0), configured: false, carried_over: false };

    fn window(batches: u64, rows: u64, tokens_per_row: u64, busy_ms: u64) -> BackendWindow {
        BackendWindow { batches, rows, tokens: rows * tokens_per_row, busy: Duration::from_millis(busy_ms) }
    }

    #[test]
    fn nothing_known_reports_nothing() {
        assert_eq!(estimate(None, BackendWindow::default(), 1), None);
        // Too few batches to tell, and no calibration: still nothing.
        assert_eq!(estimate(None, window(3, 3, 12, 900), 1), None);
    }

    #[test]
    fn an_idle_worker_reports_its_calibration() {
        let c = estimate(Some(CAL), BackendWindow::default(), 2).unwrap();
        assert_eq!((c.per_s, c.source, c.observed_per_s, c.sessions), (1000.0, CapacitySource::Calibration, None, 2));
        assert!(!c.carried_over);
        let carried = estimate(Some(Calibrated { carried_over: true, ..CAL }), BackendWindow::default(), 2).unwrap();
        assert_eq!((carried.per_s, carried.source, carried.carried_over), (1000.0, CapacitySource::Calibration, true));
    }

    #[test]
    fn small_launch_bound_batches_do_not_lower_the_calibration() {
        // 100 batches of one row, 2 ms each: 500 q/s while busy, below the calibration.
        let c = estimate(Some(CAL), window(100, 100, 12, 200), 1).unwrap();
        assert_eq!(c.source, CapacitySource::Calibration);
        assert!((c.per_s - 1000.0).abs() < 1e-9);
        assert!((c.observed_per_s.unwrap() - 500.0).abs() < 1e-9);
    }

    #[test]
    fn a_deep_queue_does_not_raise_the_calibration_and_without_one_is_the_figure() {
        // 2 sessions, 1200 rows in 1 s of backend time: 2400 q/s with every batch full.
        let c = estimate(Some(CAL), window(40, 1200, 12, 1000), 2).unwrap();
        assert_eq!(c.source, CapacitySource::Calibration);
        assert!((c.per_s - 1000.0).abs() < 1e-9);
        assert!((c.observed_per_s.unwrap() - 2400.0).abs() < 1e-9);
        let c = estimate(None, window(40, 1200, 12, 1000), 2).unwrap();
        assert_eq!(c.source, CapacitySource::Observed);
        assert!((c.per_s - 2400.0).abs() < 1e-9);
    }

    #[test]
    fn longer_queries_lower_the_calibrated_figure_and_shorter_leave_it() {
        let at = |tokens| estimate(Some(CAL), window(1, 1, tokens, 1), 1).unwrap().per_s;
        assert!((at(12) - 1000.0).abs() < 1e-9);
        assert!((at(28) - 500.0).abs() < 1e-9, "{}", at(28));
        assert!((at(4) - 1000.0).abs() < 1e-9, "{}", at(4));
        assert!((at(1000) - 250.0).abs() < 1e-9, "bounded: {}", at(1000));
    }

    #[test]
    fn a_configured_capacity_is_taken_as_is() {
        let set = Calibrated { per_s: 300.0, tokens_per_query: None, configured: true, carried_over: false };
        let c = estimate(Some(set), window(40, 1200, 40, 100), 1).unwrap();
        assert_eq!((c.per_s, c.source), (300.0, CapacitySource::Configured));
    }

    #[test]
    fn plans_fill_every_session_within_the_queue() {
        let p = Plan::new(2, 256, 8192, Duration::from_secs(1));
        assert_eq!((p.in_flight, p.warmup_queries, p.min_queries), (1024, 512, 2048));
        let small = Plan::new(1, 32, 40, Duration::from_secs(1));
        assert_eq!(small.in_flight, 20, "at most half the queue");
    }
}
