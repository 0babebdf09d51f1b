//! What the outcome of one call to a worker means, for the request and for the worker's health:
//! the one place where the gateway decides it. The proxy classifies every `/predict` attempt with
//! [`classify`], the monitor every poll; [`Endpoint::apply`](super::Endpoint::apply) carries out
//! the health effect. How many attempts a request gets and on which workers is the retry budget's
//! business (`routing::retry`).
//!
//! | call | outcome | verdict | health effect |
//! |---|---|---|---|
//! | any | reused keep-alive connection ended before a byte of answer ([`Error::Stale`]) | sent again at once on a new connection to the same worker ([`send`]); not a retry | none |
//! | predict | connection failed, request not sent ([`Error::Connect`]) | retry `connect` | failure |
//! | predict | sent, no complete answer ([`Error::Exchange`]) | retry `dropped`: the worker may have started it, but `/predict` is pure | failure |
//! | predict | 503 | retry `unavailable`: by contract the worker did not start it | with `error_type` `unavailable`: draining (out of rotation at once); else none |
//! | predict | 429 | retry `overloaded` (on another worker, only if one is ready now; else the 429 goes to the client with its `Retry-After`) | refused: latency estimate raised (bounded), no failure counted |
//! | predict | other 5xx | answer | failure |
//! | predict | 2xx, 4xx | answer | success (failure count reset, latency sample unless the request is heavy) |
//! | predict | the attempt's own timeout passed (derived from the worker's latency estimate, before the request's deadline) | retry `slow`: `/predict` is pure | slow: latency sample of the time waited, **no failure** |
//! | predict | the request's deadline passed | timeout (504, not sent again) | slow: the same, **no failure** |
//! | probe (`/readyz`) | 200 | – | ready |
//! | probe, stats | other answer | – | responsive (the count of timed-out polls starts over) |
//! | probe, stats | timeout (`--stats-timeout`) | – | unresponsive: [`STALL_AFTER`] in a row take a ready worker out of rotation (stalled) until a probe answers 200 |
//! | probe, stats | connection failed or dropped | – | unreachable: counted as a failure while ready |
//!
//! Slow is not failed: a worker that answers, however slowly, is never ejected for it (its
//! latency estimate makes the balancer prefer the others). A worker that does not answer its
//! monitoring calls at all (stopped, or its process wedged) is stalled: out of rotation within
//! about a second, back as soon as it answers a probe. A failure raises the worker's latency
//! estimate (a failing worker must not look fast) and counts towards `--eject-after` consecutive
//! failures, which eject it; a success resets the count. The content of a stats document
//! (`draining`, `ready: false`) is the monitor's to read.

use std::time::Duration;

use http::StatusCode;
use wire::ErrorType;

use crate::upstream::{self, Answer, Conn, Outgoing, Upstream};

/// What kind of call was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// A client's request (`/predict`).
    Predict,
    /// The monitor's readiness probe (`/readyz`).
    Probe,
    /// The monitor's stats poll (`/v1/stats`).
    Stats,
}

/// How one call ended.
#[derive(Debug)]
pub(crate) enum Outcome<'a> {
    /// The worker answered: its status, the `error_type` of its error body (if any), and how
    /// long the answer took.
    Answered { status: StatusCode, error_type: Option<ErrorType>, rtt: Duration },
    /// The connection failed or broke (after the transport resend, if any).
    Failed(&'a upstream::Error),
    /// The call's timeout passed first, after `waited`; `whole_request`: it was the client
    /// request's deadline (nothing left for another attempt), not the attempt's own timeout.
    TimedOut { waited: Duration, whole_request: bool },
}

/// Monitoring calls timed out in a row that take a ready worker out of rotation: with the
/// monitor polling again at once after a timeout, about a second at the default
/// `--stats-interval` (500 ms) and `--stats-timeout` (250 ms).
pub(crate) const STALL_AFTER: u32 = 2;

/// What to do with the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Give the worker's answer to the client.
    Answer,
    /// Safe to send to another worker.
    Retry(RetryReason),
    /// The deadline passed: 504 `timeout`, not sent again.
    Timeout,
}

/// Why a request may be retried (the `reason` label of `gateway_retries_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryReason {
    Connect,
    Dropped,
    Unavailable,
    /// The worker answered 429: another may have room.
    Overloaded,
    /// The attempt's own timeout passed: the worker may be stalled.
    Slow,
}

impl RetryReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Dropped => "dropped",
            Self::Unavailable => "unavailable",
            Self::Overloaded => "overloaded",
            Self::Slow => "slow",
        }
    }
}

/// What the outcome does to the worker's health.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum HealthEffect {
    None,
    /// Consecutive failures start over; the latency estimate takes the sample, if any (a heavy
    /// request's time says nothing of the light ones').
    Success {
        rtt: Option<Duration>,
    },
    /// A fast refusal must not make the worker look fast: the latency estimate goes up.
    Refused,
    /// Latency estimate up, and one more consecutive failure (ejected at `--eject-after`).
    Failure,
    /// One more consecutive failure if the worker is ready (nothing listens, or the connection
    /// broke); the latency estimate is left alone.
    Unreachable,
    /// No answer in time: the latency estimate takes the time waited as a sample; not a
    /// failure (slow is not failed).
    Slow {
        waited: Duration,
    },
    /// A monitoring call answered: the count of timed-out polls starts over.
    Responsive,
    /// A monitoring call timed out: one more in a row ([`STALL_AFTER`] take it out).
    Unresponsive,
    /// Out of rotation at once (it refuses new work); re-probed.
    Draining,
    /// Back in rotation.
    Ready,
}

/// The verdict and the health effect of one outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Classified {
    pub(crate) verdict: Verdict,
    pub(crate) health: HealthEffect,
}

/// Classify one call's outcome (see the table in the module documentation).
pub(crate) fn classify(call: Call, outcome: &Outcome<'_>) -> Classified {
    let c = |verdict, health| Classified { verdict, health };
    match (call, outcome) {
        (Call::Predict, Outcome::TimedOut { waited, whole_request }) => {
            let verdict = if *whole_request { Verdict::Timeout } else { Verdict::Retry(RetryReason::Slow) };
            c(verdict, HealthEffect::Slow { waited: *waited })
        }
        (Call::Predict, Outcome::Failed(upstream::Error::Connect(_))) => {
            c(Verdict::Retry(RetryReason::Connect), HealthEffect::Failure)
        }
        (Call::Predict, Outcome::Failed(_)) => c(Verdict::Retry(RetryReason::Dropped), HealthEffect::Failure),
        (Call::Predict, Outcome::Answered { status, error_type, rtt }) => match *status {
            StatusCode::SERVICE_UNAVAILABLE => {
                let health = if *error_type == Some(ErrorType::Unavailable) {
                    HealthEffect::Draining
                } else {
                    HealthEffect::None
                };
                c(Verdict::Retry(RetryReason::Unavailable), health)
            }
            StatusCode::TOO_MANY_REQUESTS => c(Verdict::Retry(RetryReason::Overloaded), HealthEffect::Refused),
            s if s.is_server_error() => c(Verdict::Answer, HealthEffect::Failure),
            _ => c(Verdict::Answer, HealthEffect::Success { rtt: Some(*rtt) }),
        },
        (Call::Probe, Outcome::Answered { status: StatusCode::OK, .. }) => c(Verdict::Answer, HealthEffect::Ready),
        (Call::Probe | Call::Stats, Outcome::Answered { .. }) => c(Verdict::Answer, HealthEffect::Responsive),
        (Call::Probe | Call::Stats, Outcome::TimedOut { .. }) => c(Verdict::Answer, HealthEffect::Unresponsive),
        (Call::Probe | Call::Stats, Outcome::Failed(_)) => c(Verdict::Answer, HealthEffect::Unreachable),
    }
}

/// Send `out` to the worker behind `upstream`, with the transport resend: a request that a reused
/// keep-alive connection could not deliver (the worker closed it while idle: the keep-alive race;
/// it ended before a byte of answer, so the worker cannot have processed it) goes once more, on a
/// new connection to the same worker. Not a retry: the request's one retry on another worker is
/// still there for a real failure, and the worker's health is untouched.
pub(crate) async fn send(upstream: &Upstream, out: Outgoing<'_>, max_bytes: usize) -> Result<Answer, upstream::Error> {
    match upstream.request(out, max_bytes, Conn::Reuse).await {
        Err(upstream::Error::Stale(detail)) => {
            tracing::debug!(?upstream, detail, "idle connection was closed; sending on a new one");
            upstream.request(out, max_bytes, Conn::New).await
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(code: u16, error_type: Option<ErrorType>) -> Outcome<'static> {
        Outcome::Answered { status: StatusCode::from_u16(code).unwrap(), error_type, rtt: Duration::from_millis(7) }
    }

    fn slow(whole_request: bool) -> Outcome<'static> {
        Outcome::TimedOut { waited: Duration::from_secs(2), whole_request }
    }

    #[test]
    fn predict_outcomes() {
        let connect = upstream::Error::Connect("refused".into());
        let dropped = upstream::Error::Exchange("reset".into());
        let success = HealthEffect::Success { rtt: Some(Duration::from_millis(7)) };
        let retry = |r| Verdict::Retry(r);
        let cases = [
            (answered(200, None), Verdict::Answer, success),
            (answered(400, Some(ErrorType::InvalidRequest)), Verdict::Answer, success),
            (answered(429, Some(ErrorType::Overloaded)), retry(RetryReason::Overloaded), HealthEffect::Refused),
            (answered(500, Some(ErrorType::Internal)), Verdict::Answer, HealthEffect::Failure),
            (answered(502, None), Verdict::Answer, HealthEffect::Failure),
            (answered(503, Some(ErrorType::Unavailable)), retry(RetryReason::Unavailable), HealthEffect::Draining),
            (answered(503, None), retry(RetryReason::Unavailable), HealthEffect::None),
            (Outcome::Failed(&connect), retry(RetryReason::Connect), HealthEffect::Failure),
            (Outcome::Failed(&dropped), retry(RetryReason::Dropped), HealthEffect::Failure),
            (slow(false), retry(RetryReason::Slow), HealthEffect::Slow { waited: Duration::from_secs(2) }),
            (slow(true), Verdict::Timeout, HealthEffect::Slow { waited: Duration::from_secs(2) }),
        ];
        for (i, (outcome, verdict, health)) in cases.iter().enumerate() {
            assert_eq!(classify(Call::Predict, outcome), Classified { verdict: *verdict, health: *health }, "case {i}");
        }
    }

    #[test]
    fn monitor_outcomes() {
        let refused = upstream::Error::Connect("refused".into());
        assert_eq!(classify(Call::Probe, &answered(200, None)).health, HealthEffect::Ready);
        let busy = classify(Call::Probe, &answered(503, Some(ErrorType::Unavailable))).health;
        assert_eq!(busy, HealthEffect::Responsive);
        assert_eq!(classify(Call::Stats, &answered(200, None)).health, HealthEffect::Responsive);
        for call in [Call::Probe, Call::Stats] {
            assert_eq!(classify(call, &slow(false)).health, HealthEffect::Unresponsive, "{call:?}");
            assert_eq!(classify(call, &Outcome::Failed(&refused)).health, HealthEffect::Unreachable, "{call:?}");
        }
    }

    #[test]
    fn slow_is_never_a_failure() {
        for whole_request in [false, true] {
            let h = classify(Call::Predict, &slow(whole_request)).health;
            assert!(matches!(h, HealthEffect::Slow { .. }), "{h:?}");
        }
    }

    #[tokio::test]
    async fn a_request_a_stale_connection_could_not_deliver_is_sent_again_on_a_new_one() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        // Every connection answers one request and closes: the second request finds the kept
        // connection dead.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let acc = std::sync::Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                acc.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = [0u8; 1024];
                let _ = sock.read(&mut buf).await;
                let _ = sock.write_all(OK).await;
            }
        });
        let u = Upstream::new(addr.to_string().parse().unwrap(), 4, Duration::from_secs(2));
        for _ in 0..3 {
            let a = send(&u, Outgoing::get("/predict?query=hi"), 1024).await.unwrap();
            assert_eq!(a.status, StatusCode::OK);
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
    }
}
