//! One background task per worker: polls `/v1/stats` (jittered, with a timeout) and re-probes
//! `/readyz` with exponential backoff while the worker is not receiving traffic (new, unready,
//! draining or ejected), or at every poll while it is stalled (its calls timed out: it is back
//! as soon as it answers). After a call that timed out the next poll goes at once, so that a
//! stopped worker is out of rotation within about a second (`outcome::STALL_AFTER`). What a poll's outcome does to the worker's health is the outcome
//! policy's call (`outcome::classify`); the content of a stats document is read here.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::endpoint::{Change, Endpoint, Health, IDLE_CONNECTION_TIMEOUT};
use super::outcome::{self, CallKind, HealthEffect, Outcome};
use super::stats::StatsView;
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

/// What has been said in the log about one worker's stats documents, so that a problem is
/// logged once, not at every poll.
#[derive(Debug, Default)]
struct Told {
    schema_version: Option<u32>,
    unreadable: bool,
}

impl Told {
    /// Whether to warn about a document of another schema `version`: once per version.
    fn other_schema(&mut self, version: u32) -> bool {
        let new = self.schema_version != Some(version);
        self.schema_version = Some(version);
        new
    }

    /// Whether to warn about an unreadable document: once, until one is read again.
    fn unreadable(&mut self, unreadable: bool) -> bool {
        let new = unreadable && !self.unreadable;
        self.unreadable = unreadable;
        new
    }
}

async fn run(ep: Arc<Endpoint>, ctx: Arc<Ctx>) {
    let cfg = &ctx.config;
    let mut backoff = cfg.probe_backoff;
    let mut next_probe = Instant::now();
    let mut downs = ep.downs();
    let mut told = Told::default();
    loop {
        let now = Instant::now();
        let health = ep.health();
        if ep.downs() != downs {
            downs = ep.downs();
            // Just ejected or found draining: start the backoff schedule over.
            backoff = cfg.probe_backoff;
            next_probe = now + backoff;
        }
        let mut timed_out = false;
        if health != Health::Ready && (now >= next_probe || health == Health::Stalled) {
            let (outcome, _) = get(&ctx, &ep, CallKind::Probe, "/readyz").await;
            timed_out |= outcome == HealthEffect::Unresponsive;
            if ep.apply(outcome, &ctx, &"readiness probe") == Change::Recovered {
                tracing::info!(pool = %ep.pool, worker = %ep.url, from = ?health, "worker ready");
                backoff = cfg.probe_backoff;
            } else {
                next_probe = Instant::now() + backoff;
                backoff = (backoff * 2).min(cfg.probe_backoff_max);
            }
        }
        let (effect, body) = get(&ctx, &ep, CallKind::Stats, "/v1/stats").await;
        timed_out |= effect == HealthEffect::Unresponsive;
        ep.apply(effect, &ctx, &"unreachable");
        if let Some(body) = body {
            read_stats(&ep, &ctx, &body, &mut told);
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
        if timed_out {
            // The call already waited `--stats-timeout`: ask again at once.
            sleep = Duration::ZERO;
        }
        tokio::time::sleep(sleep.max(Duration::from_millis(10))).await;
    }
}

/// Keep what a `/v1/stats` document says; take a draining or unready worker out of rotation.
fn read_stats(ep: &Endpoint, ctx: &Ctx, body: &[u8], told: &mut Told) {
    let stats = match StatsView::parse(body) {
        Ok(s) => s,
        Err(e) => {
            if told.unreadable(true) {
                tracing::warn!(pool = %ep.pool, worker = %ep.url, error = %e,
                    "cannot read the worker's /v1/stats: its telemetry is blind to the gateway");
            }
            return;
        }
    };
    told.unreadable(false);
    if !stats.schema_matches() && told.other_schema(stats.schema_version) {
        tracing::warn!(pool = %ep.pool, worker = %ep.url, worker_schema = stats.schema_version,
            gateway_schema = wire::STATS_SCHEMA_VERSION,
            "the worker's /v1/stats has another schema version; using the fields this gateway knows");
    }
    ep.store_snapshot(&stats);
    if (stats.draining || !stats.ready)
        && ep.apply(HealthEffect::Draining, ctx, &"stats say draining") == Change::Drained
    {
        tracing::info!(pool = %ep.pool, worker = %ep.url, draining = stats.draining, "worker not ready");
    }
}

/// A GET with the stats timeout: the health effect of its outcome, and the body of a 200.
async fn get(ctx: &Ctx, ep: &Endpoint, call: CallKind, path: &'static str) -> (HealthEffect, Option<bytes::Bytes>) {
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
        Err(_) => (Outcome::TimedOut { waited: sent.elapsed(), whole_request: true }, None),
    };
    match &o {
        Outcome::Answered { status, .. } if !status.is_success() => {
            tracing::debug!(worker = %ep.url, path, %status, "monitoring call answered");
        }
        Outcome::TimedOut { .. } => tracing::debug!(worker = %ep.url, path, "monitoring call timed out"),
        _ => {}
    }
    (outcome::classify(call, &o).health, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stats_problem_is_told_once_per_worker_not_per_poll() {
        let mut told = Told::default();
        assert!(told.other_schema(2));
        assert!(!told.other_schema(2), "the same version again: already told");
        assert!(told.other_schema(3), "another version: told again");
        assert!(told.unreadable(true));
        assert!(!told.unreadable(true));
        assert!(!told.unreadable(false));
        assert!(told.unreadable(true), "unreadable again after a good document");
    }
}
