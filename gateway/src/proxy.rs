//! Forwarding one client request to a worker of a pool, with the retry rules:
//!
//! * at most one retry, always on another worker, within the same overall deadline;
//! * retried: a connection failure (the request never reached a worker), a 503 (a draining or
//!   unready worker refuses before starting the work, by contract), and a connection dropped
//!   before the whole answer arrived. The last one may repeat work a worker had started; that is
//!   safe here because `/predict` is a pure function of its input (no side effects);
//! * never retried: any other answer from a worker (2xx, 4xx, 429, 500: passed through as is)
//!   and the deadline (504 `timeout`);
//! * failures that survive the retry become 502 `upstream`, or 503 `unavailable` with
//!   `Retry-After` when every worker tried was draining.

use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{HeaderValue, Method, StatusCode, header};
use tokio::time::Instant;

use crate::endpoint::{Endpoint, Health};
use crate::error::GatewayError;
use crate::metrics::{RequestLabels, RetryLabels};
use crate::pool::Pool;
use crate::upstream::{Answer, Outgoing};

/// Largest worker answer the gateway buffers.
const MAX_RESPONSE_BYTES: usize = 8 << 20;

/// A client request, buffered so that it can be sent twice.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub method: Method,
    /// Path and query sent to the worker, e.g. `/predict?query=hi`.
    pub path_and_query: PathAndQuery,
    pub content_type: Option<HeaderValue>,
    pub body: Bytes,
}

/// How one attempt on one worker ended.
enum Attempt {
    /// The worker answered; the answer goes to the client.
    Answer(Response),
    /// Safe to try on another worker.
    Retryable { error: GatewayError, reason: &'static str },
    /// The deadline passed.
    Timeout,
}

/// Forward `req` to `pool`, retrying once on another worker where safe; records metrics.
pub async fn forward(pool: &Arc<Pool>, req: Incoming) -> Response {
    let start = Instant::now();
    let ctx = Arc::clone(pool.ctx());
    let cfg = &ctx.config;
    let deadline = start + cfg.request_timeout;
    let retry_after_s = cfg.retry_after_s;

    let (worker, result) = 'done: {
        let Some(first) = pool.acquire(None, cfg.no_worker_wait).await else {
            break 'done (None, Err(GatewayError::NoWorker { pool: pool.name.clone(), retry_after_s }));
        };
        let (error, reason) = match attempt(pool, &first, &req, deadline).await {
            Attempt::Answer(r) => break 'done (Some(first), Ok(r)),
            Attempt::Timeout => break 'done (Some(first), Err(GatewayError::Timeout)),
            Attempt::Retryable { error, reason } => (error, reason),
        };
        let wait = cfg.no_worker_wait.min(deadline.saturating_duration_since(Instant::now()));
        let Some(second) = pool.acquire(Some(&first), wait).await else {
            break 'done (Some(first), Err(error));
        };
        ctx.metrics.retries.get_or_create(&RetryLabels { pool: pool.name.clone(), reason: reason.to_owned() }).inc();
        tracing::debug!(pool = %pool.name, from = %first.url, to = %second.url, reason, "retrying");
        match attempt(pool, &second, &req, deadline).await {
            Attempt::Answer(r) => (Some(second), Ok(r)),
            Attempt::Timeout => (Some(second), Err(GatewayError::Timeout)),
            Attempt::Retryable { error, .. } => (Some(second), Err(error)),
        }
    };

    let elapsed = start.elapsed().as_secs_f64();
    match result {
        Ok(resp) if resp.status().is_success() => {
            if let Some(w) = &worker {
                w.ok_requests.inc();
                w.ok_latency.observe(elapsed);
            }
            resp
        }
        Ok(resp) => {
            let outcome = resp
                .extensions()
                .get::<wire::ErrorType>()
                .map_or_else(|| format!("status_{}", resp.status().as_u16()), |t| t.as_str().to_owned());
            record(pool, worker.as_deref(), &outcome, elapsed);
            resp
        }
        Err(e) => {
            record(pool, worker.as_deref(), e.error_type().as_str(), elapsed);
            e.into_response()
        }
    }
}

fn record(pool: &Pool, worker: Option<&Endpoint>, outcome: &str, elapsed: f64) {
    let labels = RequestLabels {
        pool: pool.name.clone(),
        worker: worker.map_or_else(|| "none".to_owned(), |w| w.url.clone()),
        outcome: outcome.to_owned(),
    };
    let m = &pool.ctx().metrics;
    m.requests.get_or_create(&labels).inc();
    m.latency.get_or_create(&labels).observe(elapsed);
}

async fn attempt(pool: &Pool, ep: &Arc<Endpoint>, req: &Incoming, deadline: Instant) -> Attempt {
    let ctx = pool.ctx();
    let cfg = &ctx.config;
    let _in_flight = ep.start();
    let out = Outgoing {
        method: &req.method,
        path_and_query: req.path_and_query.as_str(),
        content_type: req.content_type.as_ref(),
        body: &req.body,
    };
    let sent = Instant::now();
    let result = tokio::time::timeout_at(deadline, ep.upstream.request(out, MAX_RESPONSE_BYTES)).await;
    let failed = |reason: &str| {
        // A failure must not make the worker look fast: raise its latency estimate.
        ep.penalize();
        if ep.record_failure(cfg.eject_after) {
            tracing::warn!(pool = %ep.pool, worker = %ep.url, reason, "worker ejected after consecutive failures");
            ctx.metrics.ejections.get_or_create(&ep.labels).inc();
        }
    };
    match result {
        Err(_) => {
            failed("timeout");
            Attempt::Timeout
        }
        Ok(Err(e)) => {
            let detail = e.to_string();
            failed(&detail);
            let reason = if e.is_connect() { "connect" } else { "dropped" };
            Attempt::Retryable { error: GatewayError::Upstream(format!("{}: {detail}", ep.url)), reason }
        }
        Ok(Ok(Answer { status, content_type, retry_after, body })) => {
            let error_type = if status.is_success() {
                None
            } else {
                serde_json::from_slice::<wire::ErrorBody>(&body).ok().map(|b| b.error_type)
            };
            if status == StatusCode::SERVICE_UNAVAILABLE {
                if error_type == Some(wire::ErrorType::Unavailable) && ep.health() == Health::Ready {
                    tracing::info!(pool = %ep.pool, worker = %ep.url, "worker draining");
                    ep.set_health(Health::NotReady);
                }
                return Attempt::Retryable {
                    error: GatewayError::Draining { pool: ep.pool.clone(), retry_after_s: cfg.retry_after_s },
                    reason: "unavailable",
                };
            }
            if status == StatusCode::TOO_MANY_REQUESTS {
                ep.penalize();
            } else if status.is_server_error() {
                failed("server error");
            } else {
                ep.record_success(sent.elapsed());
            }
            let mut resp = Response::new(Body::from(body));
            *resp.status_mut() = status;
            if let Some(v) = content_type {
                resp.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            if let Some(v) = retry_after {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
            if let Some(t) = error_type {
                resp.extensions_mut().insert(t);
            }
            Attempt::Answer(resp)
        }
    }
}
