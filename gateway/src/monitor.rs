//! One background task per worker: polls `/v1/stats` (jittered, with a timeout) and re-probes
//! `/readyz` with exponential backoff while the worker is not receiving traffic (new, unready,
//! draining or ejected).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use rand::Rng;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::endpoint::{Endpoint, Health};
use crate::pool::Ctx;
use crate::upstream::Outgoing;

/// Largest `/v1/stats` document accepted.
const MAX_STATS_BYTES: usize = 256 * 1024;

pub fn spawn(ep: Arc<Endpoint>, ctx: Arc<Ctx>) -> JoinHandle<()> {
    tokio::spawn(run(ep, ctx))
}

/// `interval` scaled by a random factor in `[0.8, 1.2)`, so that polls of many workers spread.
pub fn jittered(interval: Duration) -> Duration {
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
            if matches!(get(&ctx, &ep, "/readyz").await, Poll::Answer(StatusCode::OK, _)) {
                tracing::info!(pool = %ep.pool, worker = %ep.url, from = ?health, "worker ready");
                ep.set_health(Health::Ready);
                backoff = cfg.probe_backoff;
            } else {
                next_probe = Instant::now() + backoff;
                backoff = (backoff * 2).min(cfg.probe_backoff_max);
            }
        }
        match get(&ctx, &ep, "/v1/stats").await {
            Poll::Answer(StatusCode::OK, body) => match serde_json::from_slice::<wire::WorkerStats>(&body) {
                Ok(stats) => {
                    ep.store_snapshot(&stats);
                    if (stats.draining || !stats.ready) && ep.health() == Health::Ready {
                        tracing::info!(pool = %ep.pool, worker = %ep.url, draining = stats.draining, "worker not ready");
                        ep.set_health(Health::NotReady);
                    }
                }
                Err(e) => {
                    tracing::debug!(worker = %ep.url, error = %e, "bad /v1/stats document")
                }
            },
            Poll::Answer(status, _) => tracing::debug!(worker = %ep.url, %status, "no /v1/stats"),
            Poll::TimedOut => tracing::debug!(worker = %ep.url, "/v1/stats timed out"),
            Poll::Unreachable => {
                // Nothing listens (or the connection broke): the same evidence as a failed
                // request. A slow answer (timeout) is not: a busy worker is still a worker.
                if ep.health() == Health::Ready && ep.record_failure(cfg.eject_after) {
                    tracing::warn!(pool = %ep.pool, worker = %ep.url, "worker ejected: unreachable");
                    ctx.metrics.ejections.get_or_create(&ep.labels).inc();
                }
            }
        }
        ep.upstream.prune(crate::endpoint::IDLE_CONNECTION_TIMEOUT);
        let ready = ep.health() == Health::Ready;
        ctx.metrics.worker_ready.get_or_create(&ep.labels).set(i64::from(ready));
        let mut sleep = jittered(cfg.stats_interval);
        if !ready {
            sleep = sleep.min(next_probe.saturating_duration_since(Instant::now()));
        }
        tokio::time::sleep(sleep.max(Duration::from_millis(10))).await;
    }
}

/// How a monitoring GET ended.
enum Poll {
    Answer(StatusCode, Bytes),
    TimedOut,
    Unreachable,
}

/// A GET with the stats timeout.
async fn get(ctx: &Ctx, ep: &Endpoint, path: &'static str) -> Poll {
    let out = Outgoing::get(path);
    match tokio::time::timeout(ctx.config.stats_timeout, ep.upstream.request(out, MAX_STATS_BYTES)).await {
        Ok(Ok(answer)) => Poll::Answer(answer.status, answer.body),
        Ok(Err(_)) => Poll::Unreachable,
        Err(_) => Poll::TimedOut,
    }
}
