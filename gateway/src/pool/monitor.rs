//! One background task per worker: polls `/v1/stats` (jittered, with a timeout) and re-probes
//! `/readyz` with exponential backoff while the worker is not receiving traffic (new, unready,
//! draining or ejected). What a poll's outcome does to the worker's health is the outcome
//! policy's call (`outcome::classify`); the content of a stats document is read here.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::endpoint::{Change, Endpoint, Health, IDLE_CONNECTION_TIMEOUT};
use super::outcome::{self, Call, HealthEffect, Outcome};
use crate::ctx::Ctx;
use crate::upstream::Outgoing;

/// Largest `/v1/stats` document accepted.
const MAX_STATS_BYTES: usize = 256 * 1024;

pub(super) fn spawn(ep: Arc<Endpoint>, ctx: Arc<Ctx>) -> JoinHandle<()> {
    tokio::spawn(run(ep, ctx))
}

/// `interval` scaled by a random factor in `[0.8, 1.2)`, so that polls of many workers spread.
fn jittered(interval: Duration) -> Duration {
    interval.mul_f64(rand::rng().random_range(0.8..1.2))
}

async fn run(ep: Arc<Endpoint>, ctx: Arc<Ctx>) {
    let cfg = &ctx.config;
    let mut backoff = cfg.probe_backoff;
    let mut next_probe = Instant::now();
    let mut downs = ep.downs();
    loop {
        let now = Instant::now();
        let health = ep.health();
        if ep.downs() != downs {
            downs = ep.downs();
            // Just ejected or found draining: start the backoff schedule over.
            backoff = cfg.probe_backoff;
            next_probe = now + backoff;
        }
        if health != Health::Ready && now >= next_probe {
            let (outcome, _) = get(&ctx, &ep, Call::Probe, "/readyz").await;
            if ep.apply(outcome, &ctx, &"readiness probe") == Change::Recovered {
                tracing::info!(pool = %ep.pool, worker = %ep.url, from = ?health, "worker ready");
                backoff = cfg.probe_backoff;
            } else {
                next_probe = Instant::now() + backoff;
                backoff = (backoff * 2).min(cfg.probe_backoff_max);
            }
        }
        let (effect, body) = get(&ctx, &ep, Call::Stats, "/v1/stats").await;
        ep.apply(effect, &ctx, &"unreachable");
        if let Some(body) = body {
            read_stats(&ep, &ctx, &body);
        }
        ep.upstream.prune(IDLE_CONNECTION_TIMEOUT);
        let ready = ep.is_ready();
        ep.with_series(&ctx.metrics, |m| {
            m.worker_ready.get_or_create(&ep.labels).set(i64::from(ready));
        });
        let mut sleep = jittered(cfg.stats_interval);
        if !ready {
            sleep = sleep.min(next_probe.saturating_duration_since(Instant::now()));
        }
        tokio::time::sleep(sleep.max(Duration::from_millis(10))).await;
    }
}

/// Keep what a `/v1/stats` document says; take a draining or unready worker out of rotation.
fn read_stats(ep: &Endpoint, ctx: &Ctx, body: &[u8]) {
    let stats = match serde_json::from_slice::<wire::WorkerStats>(body) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(worker = %ep.url, error = %e, "bad /v1/stats document");
            return;
        }
    };
    ep.store_snapshot(&stats);
    if (stats.draining || !stats.ready)
        && ep.apply(HealthEffect::Draining, ctx, &"stats say draining") == Change::Drained
    {
        tracing::info!(pool = %ep.pool, worker = %ep.url, draining = stats.draining, "worker not ready");
    }
}

/// A GET with the stats timeout: the health effect of its outcome, and the body of a 200.
async fn get(ctx: &Ctx, ep: &Endpoint, call: Call, path: &'static str) -> (HealthEffect, Option<bytes::Bytes>) {
    let sent = Instant::now();
    let result = tokio::time::timeout(
        ctx.config.stats_timeout,
        outcome::send(&ep.upstream, Outgoing::get(path), MAX_STATS_BYTES),
    )
    .await;
    let (o, body) = match &result {
        Ok(Ok(a)) => (
            Outcome::Answered { status: a.status, error_type: None, rtt: sent.elapsed() },
            (a.status == http::StatusCode::OK).then(|| a.body.clone()),
        ),
        Ok(Err(e)) => (Outcome::Failed(e), None),
        Err(_) => (Outcome::TimedOut, None),
    };
    match &o {
        Outcome::Answered { status, .. } if !status.is_success() => {
            tracing::debug!(worker = %ep.url, path, %status, "monitoring call answered");
        }
        Outcome::TimedOut => tracing::debug!(worker = %ep.url, path, "monitoring call timed out"),
        _ => {}
    }
    (outcome::classify(call, &o).health, body)
}
