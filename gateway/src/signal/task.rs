//! The task that turns every pool's worker state into its scaling signal every
//! `--signal-interval`, publishes it on the pool's `watch` channel and sets the gauges. One task
//! for all pools, each with its own smoother. A step is computed ([`PoolState::step`], the value
//! and the state it carries) and then shown ([`gauges`], which only writes the metrics).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::model::{self, Model, WorkerLoad};
use super::{
    DemandMeter, FreshTelemetry, PoolSignal, RawSignal, SignalMode, Smoother, Targets, WorkerPressure, WorkerView,
};
use crate::config::Config;
use crate::ctx::Ctx;
use crate::metrics::{ComponentLabels, Metrics, PoolLabels, WorkerLabels};
use crate::pool::{Endpoint, Pool, Pools};

/// Compute and publish the signal of every pool of `pools` until they are gone.
pub(crate) fn spawn(pools: Weak<Pools>, ctx: Arc<Ctx>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let cfg = &ctx.config;
        let mut states: HashMap<String, PoolState> = HashMap::new();
        let mut tick = tokio::time::interval(cfg.signal_interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(pools) = pools.upgrade() else { return };
            let now = Instant::now();
            for pool in pools.all() {
                let state = states.entry(pool.name.clone()).or_insert_with(|| PoolState {
                    smoother: Smoother::new(cfg.signal_rise, cfg.signal_fall),
                    demand: DemandMeter::new(cfg.demand_window),
                    // Other replicas' demand arrives with the workers' stats, in chunks of a stats
                    // interval: read over the whole window, never the short one.
                    foreign_demand: DemandMeter::with_rise(cfg.demand_window, cfg.demand_window),
                    capacity: None,
                    foreign_seen: HashMap::new(),
                    foreign: 0,
                    mode: SignalMode::Queue,
                });
                let step = state.step(&pool, cfg, now);
                gauges(&ctx.metrics, &step);
                pool.publish_signal(step.signal);
            }
        }
    })
}

/// What the task keeps per pool between steps.
struct PoolState {
    smoother: Smoother,
    /// The queries offered at this gateway ...
    demand: DemandMeter,
    /// ... and those other clients sent the pool's workers.
    foreign_demand: DemandMeter,
    /// The last capacity the pool's fresh workers reported: held while none reports one.
    capacity: Option<f64>,
    /// Each worker's count of other clients' queries at the last step ...
    foreign_seen: HashMap<String, u64>,
    /// ... and their sum over the pool's life (it only grows, as workers come and go).
    foreign: u64,
    /// The mode of the last step: the smoother starts afresh when it changes.
    mode: SignalMode,
}

/// One worker as a step read it: its part of the signal and what its gauges show.
struct WorkerStep {
    ep: Arc<Endpoint>,
    outstanding: u64,
    /// Its fresh telemetry (queue, GPU, capacity), as the calibrated signal reads it; `None`
    /// when stale.
    load: Option<WorkerLoad>,
    memory: Option<f64>,
    age: Option<Duration>,
    pressure: WorkerPressure,
}

/// One step of a pool: the signal to publish, and what the gauges show beside it.
struct Step {
    signal: PoolSignal,
    workers: Vec<WorkerStep>,
    backlog: u64,
}

impl PoolState {
    /// One step of a pool's signal: read every worker, update the held pressures and this
    /// state's meters and smoother. Writes no gauge: [`gauges`] does, from the step.
    fn step(&mut self, pool: &Pool, cfg: &Config, now: Instant) -> Step {
        let targets = Targets { queue: cfg.target_queue, gpu_pct: cfg.target_gpu };
        let the_model = Model {
            utilization: cfg.target_utilization,
            latency_s: cfg.latency_target.as_secs_f64(),
            drain_horizon_s: cfg.drain_horizon.as_secs_f64(),
            gpu_saturation_pct: cfg.gpu_saturation,
        };
        let endpoints = pool.endpoints();
        let backlog = pool.backlog();
        let demand_per_s = self.demand_per_s(pool, &endpoints, now);
        let workers: Vec<WorkerStep> =
            endpoints.iter().map(|ep| read_worker(ep, cfg.stale_after, targets, now)).collect();
        let loads: Vec<WorkerLoad> = workers.iter().filter_map(|w| w.load).collect();
        let pressures: Vec<WorkerPressure> = workers.iter().map(|w| w.pressure).collect();
        let fallback = super::pool_raw(&pressures, backlog, targets);
        if let Some(c) = model::pool_capacity(&loads) {
            self.capacity = Some(c);
        }
        let (raw, mode) = match self.capacity {
            Some(c) => {
                let cal = model::calibrated(demand_per_s, c, &loads, backlog, the_model);
                let raw = RawSignal {
                    raw: cal.raw,
                    queue: cal.backlog,
                    gpu: cal.gpu,
                    held: 0.0,
                    backlog: cal.waiting,
                    demand: cal.demand,
                    saturation: cal.saturation,
                    ..fallback
                };
                (raw, SignalMode::Capacity)
            }
            None => (fallback, SignalMode::Queue),
        };
        // The fallback's value (at start: one replica per worker not yet seen) is not the
        // calibrated signal's: smoothing from one into the other would hold the start-up floor
        // for minutes of `--signal-fall`. The first calibrated value is taken as is; the blind
        // floor still holds.
        if mode != self.mode {
            self.smoother = Smoother::new(cfg.signal_rise, cfg.signal_fall);
            self.mode = mode;
        }
        // A pool at zero that has never had a worker report its capacity asks for one replica,
        // however many requests it holds: the fallback would read them as queue (held / the
        // queue target: 128 replicas for 4,096 requests), where one GPU worker may clear them in
        // tens of milliseconds. Once the first worker reports its capacity, the calibrated
        // signal sizes the pool (KEDA's activation, then the HPA, work the same way). Capped
        // before smoothing too, so that no smoothed queue reading outlives the wake-up.
        // (Never below the workers already starting: those the scaler asked for stay.)
        let wake = (self.capacity.is_none() && pool.at_zero()).then_some((raw.blind as f64).max(1.0));
        let smoothed = self.smoother.update(wake.map_or(raw.raw, |w| raw.raw.min(w)), now);
        let (value, stale) = super::finish(smoothed, &raw);
        let value = super::with_active_floor(value, demand_per_s, backlog);
        let value = wake.map_or(value, |w| value.min(w));
        let gpu_memory = workers.iter().filter_map(|w| w.memory).reduce(f64::max);
        let signal = PoolSignal {
            pool: pool.name.clone(),
            namespace: pool.meta.namespace.clone(),
            signal: value,
            stale,
            components: raw,
            ready_workers: endpoints.iter().filter(|ep| ep.is_ready()).count(),
            held_requests: backlog,
            gpu_memory_used_ratio: gpu_memory,
            mode,
            demand_per_s,
            capacity_per_s: self.capacity,
            target_utilization: the_model.utilization,
            targets_queue: targets.queue,
            targets_gpu_pct: targets.gpu_pct,
            updated_unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
        };
        Step { signal, workers, backlog }
    }

    /// Queries per second offered to the pool: what reached this gateway, and what other clients
    /// (other gateway replicas) sent its workers, as the workers count it.
    fn demand_per_s(&mut self, pool: &Pool, endpoints: &[Arc<Endpoint>], now: Instant) -> f64 {
        let mut seen = HashMap::with_capacity(endpoints.len());
        for ep in endpoints {
            let theirs = ep.foreign_queries();
            let before = self.foreign_seen.get(&ep.url).copied().unwrap_or(0);
            self.foreign += theirs.saturating_sub(before);
            seen.insert(ep.url.clone(), theirs.max(before));
        }
        self.foreign_seen = seen;
        self.demand.update(pool.offered(), now) + self.foreign_demand.update(self.foreign, now)
    }
}

/// One worker's part of a step: its fresh telemetry, if any, and its pressure (held on the
/// endpoint while the telemetry is fresh, for the steps when it is not).
fn read_worker(ep: &Arc<Endpoint>, stale_after: Duration, targets: Targets, now: Instant) -> WorkerStep {
    let outstanding = ep.outstanding();
    let snap = ep.snapshot();
    let age = snap.as_ref().map(|s| now.saturating_duration_since(s.at));
    let fresh_snap = snap.filter(|_| age.is_some_and(|a| a <= stale_after));
    let load = fresh_snap.as_ref().map(|s| WorkerLoad {
        queue: (outstanding + s.foreign_queue()) as f64,
        gpu_pct: s.gpu_pct,
        capacity: s.capacity,
    });
    let fresh = load.as_ref().map(|l| FreshTelemetry { queue: l.queue, gpu_pct: l.gpu_pct });
    let view = WorkerView { outstanding, fresh, held: ep.held_pressure() };
    let pressure = super::worker_pressure(&view, targets);
    if !pressure.stale {
        ep.set_held_pressure(pressure.pressure);
    }
    WorkerStep {
        ep: ep.clone(),
        outstanding,
        load,
        memory: fresh_snap.as_ref().and_then(|s| s.gpu_memory_used_ratio),
        age,
        pressure,
    }
}

/// The gauges of one pool's step: each worker's, then the pool's.
fn gauges(m: &Metrics, step: &Step) {
    for w in &step.workers {
        if let Some(load) = w.load {
            match load.capacity {
                Some((c, _)) => {
                    m.worker_capacity.get_or_create(&w.ep.labels).set(c);
                }
                None => {
                    m.worker_capacity.remove(&w.ep.labels);
                }
            }
        }
        w.ep.with_series(m, |m| worker_gauges(m, &w.ep.labels, w));
    }
    let s = &step.signal;
    let raw = &s.components;
    let pl = PoolLabels { pool: s.pool.clone() };
    m.pool_signal.get_or_create(&pl).set(s.signal);
    m.pool_signal_raw.get_or_create(&pl).set(raw.raw);
    m.pool_stale.get_or_create(&pl).set(i64::from(s.stale));
    m.pool_workers.get_or_create(&pl).set(raw.workers as i64);
    m.pool_ready_workers.get_or_create(&pl).set(s.ready_workers as i64);
    m.pool_backlog.get_or_create(&pl).set(step.backlog as i64);
    m.pool_demand.get_or_create(&pl).set(s.demand_per_s);
    match s.capacity_per_s {
        Some(c) => {
            m.pool_capacity.get_or_create(&pl).set(c);
        }
        None => {
            m.pool_capacity.remove(&pl);
        }
    }
    match s.gpu_memory_used_ratio {
        Some(r) => {
            m.pool_gpu_memory.get_or_create(&pl).set(r);
        }
        None => {
            m.pool_gpu_memory.remove(&pl);
        }
    }
    for (component, v) in [
        ("queue", raw.queue),
        ("gpu", raw.gpu),
        ("held", raw.held),
        ("backlog", raw.backlog),
        ("demand", raw.demand),
        ("saturation", raw.saturation),
        ("blind_floor", raw.blind as f64),
        ("gpu_missing_workers", raw.gpu_missing as f64),
    ] {
        m.pool_signal_component
            .get_or_create(&ComponentLabels { pool: s.pool.clone(), component: component.to_owned() })
            .set(v);
    }
}

/// The per-worker gauges of one step.
fn worker_gauges(m: &Metrics, l: &WorkerLabels, w: &WorkerStep) {
    m.worker_outstanding.get_or_create(l).set(w.outstanding as i64);
    if let Some(f) = w.load {
        m.worker_queue.get_or_create(l).set(f.queue);
        match f.gpu_pct {
            Some(g) => {
                m.worker_gpu.get_or_create(l).set(g / 100.0);
            }
            None => {
                m.worker_gpu.remove(l);
            }
        }
        match w.memory {
            Some(r) => {
                m.worker_gpu_memory.get_or_create(l).set(r);
            }
            None => {
                m.worker_gpu_memory.remove(l);
            }
        }
    }
    m.worker_pressure.get_or_create(l).set(w.pressure.pressure);
    m.worker_telemetry_age.get_or_create(l).set(w.age.map_or(f64::INFINITY, |a| a.as_secs_f64()));
    m.worker_stale.get_or_create(l).set(i64::from(w.pressure.stale));
}
