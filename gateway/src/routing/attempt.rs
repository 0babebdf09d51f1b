//! One attempt of a client request on one worker, and what it means for the request: the
//! request sent by itself ([`alone`]), a health effect carried out on the worker ([`apply`]), and
//! the outcome policy's verdict turned into the request's next step ([`conclude`] to an
//! [`Attempt`]). Both ways of sending, alone and in a merge (`coalesce`), end here.

use std::sync::Arc;

use http::{Method, StatusCode};
use tokio::time::Instant;
use wire::ErrorType;

use super::request::ClientRequest;
use crate::ctx::Ctx;
use crate::error::RequestError;
use crate::pool::outcome::{self, CallKind, HealthEffect, Outcome, RetryReason, Verdict};
use crate::pool::{Change, Endpoint, Pool};
use crate::upstream::{Answer, Limit, Outgoing};

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
