//! The task that turns every pool's worker state into its scaling signal every
//! `--signal-interval`, publishes it on the pool's `watch` channel and sets the gauges. One task
//! for all pools, each with its own smoother.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::{FreshTelemetry, PoolSignal, Smoother, Targets, WorkerPressure, WorkerView};
use crate::ctx::Ctx;
use crate::metrics::{ComponentLabels, Metrics, PoolLabels, WorkerLabels};
use crate::pool::{Pool, Pools};

/// Compute and publish the signal of every pool of `pools` until they are gone.
pub(crate) fn spawn(pools: Weak<Pools>, ctx: Arc<Ctx>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let cfg = &ctx.config;
        let mut smoothers: HashMap<String, Smoother> = HashMap::new();
        let mut tick = tokio::time::interval(cfg.signal_interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(pools) = pools.upgrade() else { return };
            let now = Instant::now();
            for pool in pools.all() {
                let smoother = smoothers
                    .entry(pool.name.clone())
                    .or_insert_with(|| Smoother::new(cfg.signal_rise, cfg.signal_fall));
                let s = compute(&pool, &ctx, smoother, now);
                pool.publish_signal(s);
            }
        }
    })
}

/// One step of a pool's signal: read every worker, update held pressures and gauges.
fn compute(pool: &Pool, ctx: &Ctx, smoother: &mut Smoother, now: Instant) -> PoolSignal {
    let cfg = &ctx.config;
    let m = &ctx.metrics;
    let targets = Targets { queue: cfg.target_queue, gpu_pct: cfg.target_gpu };
    let endpoints = pool.endpoints();
    let mut pressures = Vec::with_capacity(endpoints.len());
    let mut ready = 0;
    let mut gpu_memory: Option<f64> = None;
    for ep in endpoints.iter() {
        let outstanding = ep.outstanding();
        let snap = ep.snapshot();
        let age = snap.as_ref().map(|s| now.saturating_duration_since(s.at));
        let fresh_snap = snap.filter(|_| age.is_some_and(|a| a <= cfg.stale_after));
        let memory = fresh_snap.as_ref().and_then(|s| s.gpu_memory_used_ratio);
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
    let raw = super::pool_raw(&pressures, pool.backlog(), targets);
    let smoothed = smoother.update(raw.raw, now);
    let (value, stale) = super::finish(smoothed, &raw);

    let pl = PoolLabels { pool: pool.name.clone() };
    m.pool_signal.get_or_create(&pl).set(value);
    m.pool_signal_raw.get_or_create(&pl).set(raw.raw);
    m.pool_stale.get_or_create(&pl).set(i64::from(stale));
    m.pool_workers.get_or_create(&pl).set(raw.workers as i64);
    m.pool_ready_workers.get_or_create(&pl).set(ready as i64);
    m.pool_backlog.get_or_create(&pl).set(pool.backlog() as i64);
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
        gpu_memory_used_ratio: gpu_memory,
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
