//! What the monitor writes of a worker (see `Endpoint`'s documentation): its last telemetry
//! snapshot, the other clients' queries, its model and its held pressure; and the balancer's
//! part of the snapshot, published as two atomics so that a pick takes no lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{Endpoint, lock};
use crate::pool::stats::StatsView;

/// No snapshot published yet (`Endpoint::snapshot_at_us`).
const NO_SNAPSHOT: u64 = u64::MAX;

/// The part of a `/v1/stats` document the gateway keeps, with the time it arrived.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Snapshot {
    /// When the gateway received it.
    pub(crate) at: Instant,
    /// `queued + in_flight` as the worker reported it.
    pub(crate) reported_queue: u64,
    /// The same in tokens, when the worker reports it.
    pub(crate) reported_queue_tokens: Option<u64>,
    /// The gateway's outstanding requests to this worker when the snapshot arrived; the part of
    /// `reported_queue` beyond it belongs to other clients.
    pub(crate) outstanding_at_snapshot: u64,
    /// GPU utilization in percent (see `stats`): `None` when the worker has no GPU reading.
    pub(crate) gpu_pct: Option<f64>,
    /// Device memory used / total, when the worker has a GPU reading.
    pub(crate) gpu_memory_used_ratio: Option<f64>,
    /// The worker's capacity (queries per second when saturated) and the queries its full
    /// batches hold, when it reports them.
    pub(crate) capacity: Option<(f64, u64)>,
}

impl Snapshot {
    /// Load other clients put on the worker (never negative).
    pub(crate) fn foreign_queue(&self) -> u64 {
        self.reported_queue.saturating_sub(self.outstanding_at_snapshot)
    }
}

/// Other clients' queries at a worker: what it counted (admitted or refused) beyond what this
/// gateway sent it, from the difference at the first reading. Our queries in flight at a reading
/// are ours on one side only: the total never decreases, so they can count as theirs once (a
/// bounded, one-off error). A worker's restart (its count going back) starts a new baseline.
#[derive(Debug, Default)]
pub(super) struct Foreign {
    /// `worker_total - ours` at the first reading, and the worker's count then.
    pub(super) baseline: Option<(i128, u64)>,
    /// Their queries since: never decreasing.
    pub(super) total: u64,
}

impl Foreign {
    pub(super) fn observe(&mut self, worker_total: u64, ours: u64) {
        let diff = i128::from(worker_total) - i128::from(ours);
        match self.baseline {
            Some((base, last)) if worker_total >= last => {
                let theirs = u64::try_from((diff - base).max(0)).unwrap_or(u64::MAX);
                self.total = self.total.max(theirs);
                self.baseline = Some((base, worker_total));
            }
            // First reading, or the worker restarted: a new baseline; the total so far stays.
            _ => {
                self.baseline = Some((diff - i128::from(self.total), worker_total));
            }
        }
    }
}

/// What the monitor writes (and the signal reads).
pub(super) struct Telemetry {
    /// Queries other clients sent the worker (its admitted plus refused, less ours), since the
    /// first snapshot: other gateway replicas' share of the demand.
    foreign: Mutex<Foreign>,
    snapshot: Mutex<Option<Snapshot>>,
    /// The balancer's part of the snapshot: the other clients' queue, and when it arrived
    /// (microseconds after `born`; [`NO_SNAPSHOT`] before the first).
    foreign_queue: AtomicU64,
    snapshot_at_us: AtomicU64,
    born: Instant,
    /// The model the worker serves, by the name its Open Inference Protocol routes answer to
    /// (from its stats; `None` until they arrive).
    model: Mutex<Option<Arc<str>>>,
    /// Last pressure computed from fresh telemetry: held while telemetry is stale.
    held_pressure: Mutex<Option<f64>>,
}

impl Telemetry {
    pub(super) fn new(now: Instant) -> Self {
        Self {
            foreign: Mutex::new(Foreign::default()),
            snapshot: Mutex::new(None),
            foreign_queue: AtomicU64::new(0),
            snapshot_at_us: AtomicU64::new(NO_SNAPSHOT),
            born: now,
            model: Mutex::new(None),
            held_pressure: Mutex::new(None),
        }
    }

    /// The other clients' queue from the snapshot if it is younger than `stale_after` at `now`
    /// (0 when stale or none: it would be a guess).
    pub(super) fn foreign_queue(&self, now: Instant, stale_after: Duration) -> u64 {
        let at = self.snapshot_at_us.load(Ordering::Acquire);
        let fresh = at != NO_SNAPSHOT
            && now.saturating_duration_since(self.born).as_micros().saturating_sub(u128::from(at))
                <= stale_after.as_micros();
        if fresh { self.foreign_queue.load(Ordering::Relaxed) } else { 0 }
    }
}

impl Endpoint {
    /// Queries other clients have sent the worker since the gateway first read its stats.
    pub(crate) fn foreign_queries(&self) -> u64 {
        lock(&self.telemetry.foreign).total
    }

    pub(crate) fn store_snapshot(&self, stats: &StatsView) {
        if let (Some(worker_total), Ok(mut f)) = (stats.offered_total(), self.telemetry.foreign.lock()) {
            f.observe(worker_total, self.sent_queries());
        }
        let snap = Snapshot {
            at: Instant::now(),
            reported_queue: stats.reported_queue(),
            reported_queue_tokens: stats.reported_queue_tokens(),
            outstanding_at_snapshot: self.outstanding(),
            gpu_pct: stats.gpu_utilization_pct(),
            gpu_memory_used_ratio: stats.gpu_memory_used_ratio(),
            capacity: stats.capacity(),
        };
        let t = &self.telemetry;
        t.foreign_queue.store(snap.foreign_queue(), Ordering::Relaxed);
        let at_us = u64::try_from(snap.at.saturating_duration_since(t.born).as_micros()).unwrap_or(NO_SNAPSHOT - 1);
        t.snapshot_at_us.store(at_us, Ordering::Release);
        if let Ok(mut s) = t.snapshot.lock() {
            *s = Some(snap);
        }
        if let (Some(m), Ok(mut held)) = (&stats.model, t.model.lock())
            && held.as_deref() != Some(m.name.as_str())
        {
            *held = Some(Arc::from(m.name.as_str()));
        }
    }

    /// Whether the worker serves the model `name` (and `version`, if any) by its last stats:
    /// what its Open Inference Protocol routes would accept (`oip::check_model`).
    pub(crate) fn serves(&self, name: &str, version: Option<&str>) -> bool {
        self.telemetry
            .model
            .lock()
            .is_ok_and(|m| m.as_deref().is_some_and(|served| oip::check_model(served, name, version).is_ok()))
    }

    pub(crate) fn snapshot(&self) -> Option<Snapshot> {
        self.telemetry.snapshot.lock().ok().and_then(|s| s.clone())
    }

    /// The snapshot if it is younger than `stale_after`.
    pub(crate) fn fresh_snapshot(&self, stale_after: Duration) -> Option<Snapshot> {
        self.snapshot().filter(|s| s.at.elapsed() <= stale_after)
    }

    pub(crate) fn held_pressure(&self) -> Option<f64> {
        self.telemetry.held_pressure.lock().ok().and_then(|p| *p)
    }

    pub(crate) fn set_held_pressure(&self, p: f64) {
        if let Ok(mut h) = self.telemetry.held_pressure.lock() {
            *h = Some(p);
        }
    }
}
