//! The task that turns every pool's worker state into its scaling signal every
//! `--signal-interval`, publishes it on the pool's `watch` channel and sets the gauges. One task
//! for all pools, each with its own smoother.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::model::{self, Model, WorkerLoad};
use super::{
    DemandMeter, FreshTelemetry, PoolSignal, RawSignal, SignalMode, Smoother, Targets, WorkerPressure, WorkerView,
};
use crate::ctx::Ctx;
use crate::metrics::{ComponentLabels, Metrics, PoolLabels, WorkerLabels};
use crate::pool::{Pool, Pools};

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
                let s = compute(&pool, &ctx, state, now);
                pool.publish_signal(s);
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

/// One step of a pool's signal: read every worker, update held pressures and gauges.
fn compute(pool: &Pool, ctx: &Ctx, state: &mut PoolState, now: Instant) -> PoolSignal {
    let cfg = &ctx.config;
    let m = &ctx.metrics;
    let targets = Targets { queue: cfg.target_queue, gpu_pct: cfg.target_gpu };
    let the_model = Model {
        utilization: cfg.target_utilization,
        latency_s: cfg.latency_target.as_secs_f64(),
        drain_horizon_s: cfg.drain_horizon.as_secs_f64(),
        gpu_saturation_pct: cfg.gpu_saturation,
    };
    let endpoints = pool.endpoints();
    // Demand: what reached this gateway, and what other clients (other gateway replicas) sent
    // the workers, as the workers count it.
    let mut seen = HashMap::with_capacity(endpoints.len());
    for ep in endpoints.iter() {
        let theirs = ep.foreign_queries();
        let before = state.foreign_seen.get(&ep.url).copied().unwrap_or(0);
        state.foreign += theirs.saturating_sub(before);
        seen.insert(ep.url.clone(), theirs.max(before));
    }
    state.foreign_seen = seen;
    let demand_per_s = state.demand.update(pool.offered(), now) + state.foreign_demand.update(state.foreign, now);
    let mut pressures = Vec::with_capacity(endpoints.len());
    let mut loads = Vec::with_capacity(endpoints.len());
    let mut ready = 0;
    let mut gpu_memory: Option<f64> = None;
    for ep in endpoints.iter() {
        let outstanding = ep.outstanding();
        let snap = ep.snapshot();
        let age = snap.as_ref().map(|s| now.saturating_duration_since(s.at));
        let fresh_snap = snap.filter(|_| age.is_some_and(|a| a <= cfg.stale_after));
        let memory = fresh_snap.as_ref().and_then(|s| s.gpu_memory_used_ratio);
        if let Some(s) = fresh_snap.as_ref() {
            loads.push(WorkerLoad {
                queue: (outstanding + s.foreign_queue()) as f64,
                gpu_pct: s.gpu_pct,
                capacity: s.capacity,
            });
            match s.capacity {
                Some((c, _)) => {
                    m.worker_capacity.get_or_create(&ep.labels).set(c);
                }
                None => {
                    m.worker_capacity.remove(&ep.labels);
                }
            }
        }
        if let Some(r) = memory {
            gpu_memory = Some(gpu_memory.map_or(r, |m: f64| m.max(r)));
        }
        let fresh =
            fresh_snap.map(|s| FreshTelemetry { queue: (outstanding + s.foreign_queue()) as f64, gpu_pct: s.gpu_pct });
        let view = WorkerView { outstanding, fresh, held: ep.held_pressure() };
        let p = super::worker_pressure(&view, targets);
        if !p.stale {
            ep.set_held_pressure(p.pressure);
        }
        ready += usize::from(ep.is_ready());
        ep.with_series(m, |m| worker_gauges(m, &ep.labels, outstanding, fresh, memory, p, age));
        pressures.push(p);
    }
    let fallback = super::pool_raw(&pressures, pool.backlog(), targets);
    if let Some(c) = model::pool_capacity(&loads) {
        state.capacity = Some(c);
    }
    let (raw, mode) = match state.capacity {
        Some(c) => {
            let cal = model::calibrated(demand_per_s, c, &loads, pool.backlog(), the_model);
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
    // The fallback's value (at start: one replica per worker not yet seen) is not the calibrated
    // signal's: smoothing from one into the other would hold the start-up floor for minutes of
    // `--signal-fall`. The first calibrated value is taken as is; the blind floor still holds.
    if mode != state.mode {
        state.smoother = Smoother::new(cfg.signal_rise, cfg.signal_fall);
        state.mode = mode;
    }
    let smoothed = state.smoother.update(raw.raw, now);
    let (value, stale) = super::finish(smoothed, &raw);
    let value = super::with_active_floor(value, demand_per_s, pool.backlog());

    let pl = PoolLabels { pool: pool.name.clone() };
    m.pool_signal.get_or_create(&pl).set(value);
    m.pool_signal_raw.get_or_create(&pl).set(raw.raw);
    m.pool_stale.get_or_create(&pl).set(i64::from(stale));
    m.pool_workers.get_or_create(&pl).set(raw.workers as i64);
    m.pool_ready_workers.get_or_create(&pl).set(ready as i64);
    m.pool_backlog.get_or_create(&pl).set(pool.backlog() as i64);
    m.pool_demand.get_or_create(&pl).set(demand_per_s);
    match state.capacity {
        Some(c) => {
            m.pool_capacity.get_or_create(&pl).set(c);
        }
        None => {
            m.pool_capacity.remove(&pl);
        }
    }
    match gpu_memory {
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
            .get_or_create(&ComponentLabels { pool: pool.name.clone(), component: component.to_owned() })
            .set(v);
    }
    PoolSignal {
        pool: pool.name.clone(),
        namespace: pool.meta.namespace.clone(),
        signal: value,
        stale,
        components: raw,
        ready_workers: ready,
        held_requests: pool.backlog(),
        gpu_memory_used_ratio: gpu_memory,
        mode,
        demand_per_s,
        capacity_per_s: state.capacity,
        target_utilization: the_model.utilization,
        targets_queue: targets.queue,
        targets_gpu_pct: targets.gpu_pct,
        updated_unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
    }
}

/// The per-worker gauges of one step.
fn worker_gauges(
    m: &Metrics,
    l: &WorkerLabels,
    outstanding: u64,
    fresh: Option<FreshTelemetry>,
    memory: Option<f64>,
    p: WorkerPressure,
    age: Option<Duration>,
) {
    m.worker_outstanding.get_or_create(l).set(outstanding as i64);
    if let Some(f) = fresh {
        m.worker_queue.get_or_create(l).set(f.queue);
        match f.gpu_pct {
            Some(g) => {
                m.worker_gpu.get_or_create(l).set(g / 100.0);
            }
            None => {
                m.worker_gpu.remove(l);
            }
        }
        match memory {
            Some(r) => {
                m.worker_gpu_memory.get_or_create(l).set(r);
            }
            None => {
                m.worker_gpu_memory.remove(l);
            }
        }
    }
    m.worker_pressure.get_or_create(l).set(p.pressure);
    m.worker_telemetry_age.get_or_create(l).set(age.map_or(f64::INFINITY, |a| a.as_secs_f64()));
    m.worker_stale.get_or_create(l).set(i64::from(p.stale));
}
