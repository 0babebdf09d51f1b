//! Forwarding one client request to a worker of a pool: pick a worker (`balance`), attempt it
//! there (alone, `attempt`, or in a merge, `coalesce`; either classifies the outcome by
//! `pool::outcome`), and retry on another worker while the budget allows (`retry`); every request
//! is counted in `gateway_requests_total` and its latency observed.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, StatusCode};
use tokio::time::Instant;

use super::attempt::{Attempt, Fallback, alone};
use super::balance;
use super::coalesce;
use super::request::ClientRequest;
use super::retry::{self, AttemptTimeout, Budget};
use crate::error::RequestError;
use crate::metrics::{RequestLabels, RetryLabels};
use crate::pool::outcome;
use crate::pool::{Endpoint, Pool};
use crate::upstream::Answer;

/// Forward `req` to a worker of `pool`, retrying on another one where the outcome policy and the
/// budget allow; records the request's metrics.
pub(crate) async fn forward(pool: &Pool, req: &ClientRequest<'_>) -> Result<Answer, RequestError> {
    let start = Instant::now();
    let ctx = Arc::clone(pool.ctx());
    let cfg = &ctx.config;
    let mut budget = Budget::new(start, cfg.request_timeout);
    let policy = AttemptTimeout { factor: cfg.attempt_timeout_factor, min: cfg.attempt_timeout_min };
    let mut wait = cfg.no_worker_wait;
    let mut tried: Option<(Arc<Endpoint>, Fallback, outcome::RetryReason)> = None;
    let no_worker = || RequestError::NoWorker { pool: pool.name.clone(), retry_after_s: cfg.retry_after_s };
    // A pool at zero: the request is held for a worker to start (`--cold-start-hold`), within
    // the pool's hold bounds, and its deadline starts once a worker is found.
    let mut held = None;
    if pool.holds() {
        held = pool.hold(req.body.len() as u64);
        wait = if held.is_some() { cfg.cold_start_hold } else { Duration::ZERO };
    }

    let (worker, result) = loop {
        let exclude = tried.as_ref().map(|(ep, ..)| ep);
        let found = balance::acquire(pool, exclude, wait).await;
        if held.take().is_some() {
            budget = Budget::new(Instant::now(), cfg.request_timeout);
        }
        let Some(ep) = found else {
            break match tried {
                Some((ep, fallback, _)) => (Some(ep), fallback),
                None => (None, Err(no_worker())),
            };
        };
        if let Some((first, _, reason)) = &tried {
            ctx.metrics
                .retries
                .get_or_create(&RetryLabels { pool: pool.name.clone(), reason: reason.as_str().to_owned() })
                .inc();
            if tracing::enabled!(tracing::Level::DEBUG) {
                let _span = (req.span)().entered();
                tracing::debug!(pool = %pool.name, from = %first.url, to = %ep.url, reason = reason.as_str(), "retrying");
            }
        }
        let another_ready = pool.endpoints().iter().any(|e| e.is_ready() && !Arc::ptr_eq(e, &ep));
        let deadline =
            budget.attempt_deadline(Instant::now(), ep.rtt_estimate_s(), policy, req.cost.scale, another_ready);
        match attempt(pool, &ep, req, deadline).await {
            Attempt::Answer(a, error_type) => break (Some(ep), Ok((a, error_type))),
            Attempt::Timeout => break (Some(ep), Err(RequestError::Timeout)),
            Attempt::Fail(e) => break (Some(ep), Err(e)),
            Attempt::Retry { fallback, reason } => {
                if !retry::may_retry(reason, req.cost.heavy) || !budget.take_retry() {
                    break (Some(ep), fallback);
                }
                wait = match reason {
                    // All saturated: the client hears it at once, not after a wait.
                    outcome::RetryReason::Overloaded => Duration::ZERO,
                    _ => budget.worker_wait(Instant::now(), cfg.no_worker_wait),
                };
                tried = Some((ep, fallback, reason));
            }
        }
    };

    let elapsed = start.elapsed().as_secs_f64();
    let outcome: Cow<'static, str> = match &result {
        Ok((a, _)) if a.status.is_success() => Cow::Borrowed("ok"),
        Ok((a, error_type)) => error_type
            .map_or_else(|| Cow::Owned(format!("status_{}", a.status.as_u16())), |t| Cow::Borrowed(t.as_str())),
        Err(e) => Cow::Borrowed(e.error_type().as_str()),
    };
    match &worker {
        Some(w) => w.count_request(&ctx.metrics, &outcome, elapsed),
        None => {
            let labels =
                RequestLabels { pool: pool.name.clone(), worker: "none".to_owned(), outcome: outcome.into_owned() };
            ctx.metrics.requests.get_or_create(&labels).inc();
            ctx.metrics.latency.get_or_create(&labels).observe(elapsed);
        }
    }
    result.map(|(mut a, _)| {
        // Overload is always answered with a Retry-After, the worker's or the gateway's.
        let refused = matches!(a.status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE);
        if refused && a.retry_after.is_none() {
            a.retry_after = Some(HeaderValue::from(cfg.retry_after_s));
        }
        a
    })
}

/// One attempt on one worker until `deadline` (`.1`: the request's own): in a merge with other
/// requests bound for the worker when the request may be merged and coalescing is on (see
/// `coalesce`), else alone.
async fn attempt(pool: &Pool, ep: &Arc<Endpoint>, req: &ClientRequest<'_>, deadline: (Instant, bool)) -> Attempt {
    let _in_flight = ep.start();
    ep.sent(req.cost.queries);
    match (&req.single, pool.coalesce()) {
        (Some(single), Some(policy)) if single.may_merge_on(ep) => {
            coalesce::attempt(pool, ep, req, single, deadline, &policy).await
        }
        _ => alone(pool, ep, req, deadline).await,
    }
}
