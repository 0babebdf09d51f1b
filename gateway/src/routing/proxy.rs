//! Forwarding one client request to a worker of a pool: pick a worker (`balance`), send, classify
//! the outcome (`pool::outcome`), and retry on another worker while the budget allows (`retry`);
//! every request is counted in `gateway_requests_total` and its latency observed.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::uri::PathAndQuery;
use std::time::Duration;

use http::{HeaderValue, Method, StatusCode};
use tokio::time::Instant;
use wire::ErrorType;

use super::balance;
use super::coalesce::{self, Single};
use super::retry::{self, AttemptTimeout, Budget};
use crate::ctx::Ctx;
use crate::error::RequestError;
use crate::metrics::{RequestLabels, RetryLabels};
use crate::pool::outcome::{self, CallKind, HealthEffect, Outcome, RetryReason, Verdict};
use crate::pool::{Change, Endpoint, Pool};
use crate::upstream::{Answer, Limit, Outgoing};

/// A client request, buffered so that it can be sent twice.
pub(crate) struct ClientRequest<'a> {
    pub(crate) method: Method,
    /// Path and query sent to the worker, e.g. `/predict?query=hi`.
    pub(crate) path_and_query: PathAndQuery,
    pub(crate) content_type: Option<HeaderValue>,
    /// Passed to the worker as they are (`x-request-id`, `traceparent`).
    pub(crate) headers: &'a [(&'static str, &'a HeaderValue)],
    /// Makes the request's log span (its ids), to enter where something is logged about it.
    pub(crate) span: &'a (dyn Fn() -> tracing::Span + Sync),
    pub(crate) body: Bytes,
    /// What it costs, as estimated at admission.
    pub(crate) cost: Cost,
    /// Its one query, when it may go to the worker in a merge with others (`coalesce`).
    pub(crate) single: Option<Single>,
}

/// A request's estimated cost: tokens, and whether that makes it heavy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cost {
    pub(crate) tokens: u64,
    pub(crate) heavy: bool,
    /// Its per-attempt timeout's scale: tokens over `--heavy-request-tokens`, at least 1.
    pub(crate) scale: f64,
    /// Its queries (the signal's unit of demand).
    pub(crate) queries: u64,
}

/// What the client gets if the request is not retried.
pub(super) type Fallback = Result<(Answer, Option<ErrorType>), RequestError>;

/// How one attempt ended, for the request.
pub(super) enum Attempt {
    /// The worker's answer goes to the client; `error_type` from its error body, if any.
    Answer(Answer, Option<ErrorType>),
    /// May go to another worker; `fallback` is the client's answer if it cannot.
    Retry {
        fallback: Fallback,
        reason: outcome::RetryReason,
    },
    Timeout,
    /// Not sent again; the client gets this error.
    Fail(RequestError),
}

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
    if !cfg.cold_start_hold.is_zero() && pool.at_zero() {
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
    match (&req.single, coalesce::policy(&pool.ctx().config)) {
        (Some(single), Some(policy)) if single.may_merge_on(ep) => {
            coalesce::attempt(pool, ep, req, single, deadline, &policy).await
        }
        _ => alone(pool, ep, req, deadline).await,
    }
}

/// The request sent by itself, classified by the outcome policy, its health effect applied.
pub(super) async fn alone(
    pool: &Pool,
    ep: &Arc<Endpoint>,
    req: &ClientRequest<'_>,
    deadline: (Instant, bool),
) -> Attempt {
    let ctx = pool.ctx();
    let out = Outgoing {
        method: &req.method,
        path_and_query: req.path_and_query.as_str(),
        content_type: req.content_type.as_ref(),
        headers: req.headers,
        body: &req.body,
    };
    let sent = Instant::now();
    let limit = Limit { max_bytes: ctx.config.max_answer_bytes, budget: Some(&ctx.answers) };
    let result = tokio::time::timeout_at(deadline.0, outcome::send(&ep.upstream, out, limit)).await;
    // Only a well-formed answer may reach the client; a 503 never does (its body is not read
    // beyond its `error_type`).
    let checked = match &result {
        Ok(Ok(a)) if a.status == StatusCode::SERVICE_UNAVAILABLE => {
            Ok(serde_json::from_slice::<wire::ErrorBody>(&a.body).ok().map(|b| b.error_type))
        }
        Ok(Ok(a)) => outcome::well_formed(a, req.method == Method::HEAD),
        _ => Ok(None),
    };
    let error_type = checked.unwrap_or(None);
    let o = match &result {
        Ok(Ok(_)) if checked.is_err() => Outcome::Malformed,
        Ok(Ok(a)) => Outcome::Answered { status: a.status, error_type, rtt: sent.elapsed() },
        Ok(Err(e)) => Outcome::Failed(e),
        Err(_) => Outcome::TimedOut { waited: sent.elapsed(), whole_request: deadline.1 },
    };
    let classified = outcome::classify(CallKind::Predict, &o);
    let why: &dyn std::fmt::Display = match &o {
        Outcome::Failed(e) => e,
        Outcome::TimedOut { .. } => &"timeout",
        Outcome::Answered { .. } => &"server error",
        Outcome::Malformed => &"malformed answer",
    };
    // A heavy request's time says nothing of how fast the worker answers light ones (it runs
    // them in a lane of their own): it is not a latency sample.
    let health = match classified.health {
        HealthEffect::Success { .. } if req.cost.heavy => HealthEffect::Success { rtt: None },
        HealthEffect::Slow { .. } if req.cost.heavy => HealthEffect::None,
        h => h,
    };
    apply(ep, health, ctx, why, Some(req.span));
    let sent = match result {
        Ok(Ok(a)) => Sent::Answer(a, error_type),
        Ok(Err(e)) => Sent::Failed(format!("{}: {e}", ep.url)),
        Err(_) => Sent::TimedOut,
    };
    conclude(ep, ctx, classified.verdict, sent)
}

/// Carry out a health effect on `ep`; what may be logged (an ejection, a draining worker) is
/// logged in the request's span when there is one request (`span`).
pub(super) fn apply(
    ep: &Endpoint,
    health: HealthEffect,
    ctx: &Ctx,
    why: &dyn std::fmt::Display,
    span: Option<&(dyn Fn() -> tracing::Span + Sync)>,
) {
    let logs = matches!(health, HealthEffect::Failure | HealthEffect::Draining);
    let entered = span.filter(|_| logs).map(|s| s().entered());
    if ep.apply(health, ctx, why) == Change::Drained {
        tracing::info!(pool = %ep.pool, worker = %ep.url, "worker draining");
    }
    drop(entered);
}

/// What came back from one attempt, for [`conclude`].
pub(super) enum Sent {
    /// An answer, with its `error_type` if it is an error.
    Answer(Answer, Option<ErrorType>),
    /// No usable answer: why (naming the worker).
    Failed(String),
    /// The attempt's deadline passed.
    TimedOut,
}

/// The attempt's end for the request, from the outcome policy's verdict and what came back.
pub(super) fn conclude(ep: &Endpoint, ctx: &Ctx, verdict: Verdict, sent: Sent) -> Attempt {
    match (verdict, sent) {
        (Verdict::Answer, Sent::Answer(a, error_type)) => Attempt::Answer(a, error_type),
        (Verdict::Fail, Sent::Failed(detail)) => Attempt::Fail(RequestError::Upstream(detail)),
        (Verdict::Retry(reason), Sent::Failed(detail)) => {
            Attempt::Retry { fallback: Err(RequestError::Upstream(detail)), reason }
        }
        // A 429: passed through if it cannot go elsewhere.
        (Verdict::Retry(reason @ RetryReason::Overloaded), Sent::Answer(a, error_type)) => {
            Attempt::Retry { fallback: Ok((a, error_type)), reason }
        }
        // A 5xx or a malformed answer: the client gets the gateway's 502, never the worker's text.
        (Verdict::Retry(reason @ (RetryReason::ServerError | RetryReason::Malformed)), Sent::Answer(a, _)) => {
            let detail = format!("{}: {} answer {}", ep.url, reason.as_str(), a.status.as_u16());
            Attempt::Retry { fallback: Err(RequestError::Upstream(detail)), reason }
        }
        (Verdict::Retry(reason @ RetryReason::Slow), _) => {
            Attempt::Retry { fallback: Err(RequestError::Timeout), reason }
        }
        (Verdict::Retry(reason), _) => Attempt::Retry {
            fallback: Err(RequestError::Draining { pool: ep.pool.clone(), retry_after_s: ctx.config.retry_after_s }),
            reason,
        },
        // `Answer` and `Fail` come with an answer or an error; what is left is the deadline.
        (Verdict::Timeout | Verdict::Answer | Verdict::Fail, _) => Attempt::Timeout,
    }
}
