//! The collector: every interval it empties the threads' shards into one timeline row and into
//! the per-phase totals.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use crate::engine::Shared;
use crate::profile::Profile;
use crate::stats::Acc;
use crate::summary::Tick;

#[derive(Debug)]
pub struct Collector {
    shared: Arc<Shared>,
    /// Open loop: the schedule, for the requests due per interval.
    profile: Option<Arc<Profile>>,
    last_t: f64,
    sent: u64,
    finished: u64,
    pub timeline: Vec<Tick>,
    /// Measured phases, by id.
    pub phases: Vec<Acc>,
    /// All measured phases.
    pub total: Acc,
    /// Warm-up included: what the run did overall.
    pub ok_all: u64,
    pub failed_all: u64,
}

impl Collector {
    pub fn new(shared: Arc<Shared>, profile: Option<Arc<Profile>>, phases: usize) -> Self {
        Self {
            shared,
            profile,
            last_t: 0.0,
            sent: 0,
            finished: 0,
            timeline: Vec::new(),
            phases: (0..phases).map(|_| Acc::default()).collect(),
            total: Acc::default(),
            ok_all: 0,
            failed_all: 0,
        }
    }

    /// Close the interval ending `now` into a timeline row.
    pub fn tick(&mut self, now: Instant) -> &Tick {
        let t = self.shared.seconds(now).max(self.last_t);
        let mut interval = Acc::default();
        let mut sent = 0;
        let mut connections = 0i64;
        for ts in &self.shared.threads {
            let taken = ts.shard.lock().unwrap_or_else(|e| e.into_inner()).take();
            sent += ts.sent.load(Ordering::Relaxed);
            connections += ts.counters.open.load(Ordering::Relaxed);
            for (phase, acc) in taken {
                interval.merge(&acc);
                if let Some(p) = phase {
                    let p = p as usize;
                    if self.phases.len() <= p {
                        self.phases.resize_with(p + 1, Acc::default);
                    }
                    self.phases[p].merge(&acc);
                    self.total.merge(&acc);
                }
            }
        }
        self.finished += interval.finished();
        self.ok_all += interval.ok;
        self.failed_all += interval.failed();
        let offered = self.profile.as_ref().map(|p| p.due_before(t) - p.due_before(self.last_t));
        let errors: BTreeMap<String, u64> = interval.errors.iter().map(|(k, v)| (k.label(), *v)).collect();
        self.timeline.push(Tick {
            t,
            dt: t - self.last_t,
            offered,
            sent: sent.saturating_sub(self.sent),
            ok: interval.ok,
            failed: interval.failed(),
            errors,
            latency: crate::stats::Percentiles::of(&interval.latency),
            in_flight: sent.saturating_sub(self.finished),
            connections: connections.max(0) as u64,
        });
        self.last_t = t;
        self.sent = sent;
        self.timeline.last().expect("just pushed")
    }

    /// Seconds from the start to `t`.
    pub fn seconds(&self, t: Instant) -> f64 {
        self.shared.seconds(t)
    }

    pub fn waited(&self) -> u64 {
        self.shared.threads.iter().map(|t| t.waited.load(Ordering::Relaxed)).sum()
    }

    pub fn connections_opened(&self) -> u64 {
        self.shared.threads.iter().map(|t| t.counters.opened.load(Ordering::Relaxed).max(0) as u64).sum()
    }

    pub fn resent(&self) -> u64 {
        self.shared.threads.iter().map(|t| t.counters.resent.load(Ordering::Relaxed).max(0) as u64).sum()
    }
}
