//! What the outcome of one call to a worker means, for the request and for the worker's health:
//! the one place where the gateway decides it. The proxy classifies every `/predict` attempt with
//! [`classify`], the monitor every poll; [`Endpoint::apply`](super::Endpoint::apply) carries out
//! the health effect. How many attempts a request gets and on which workers is the retry budget's
//! business (`routing::retry`).
//!
//! | call | outcome | verdict | health effect |
//! |---|---|---|---|
//! | any | reused keep-alive connection ended before a byte of answer ([`Error::Stale`](upstream::Error::Stale)) | sent again at once on a new connection to the same worker ([`send`]); not a retry | none |
//! | predict | connection failed, request not sent ([`Error::Connect`](upstream::Error::Connect)) | retry `connect` | failure |
//! | predict | sent, no complete answer ([`Error::Exchange`](upstream::Error::Exchange)) | retry `dropped`: the worker may have started it, but `/predict` is pure | failure |
//! | predict | answer over `--max-answer-bytes` ([`Error::TooLarge`](upstream::Error::TooLarge)), refused before more is read | retry `malformed`: no worker may send it | failure |
//! | predict | answer that does not fit the budget of answers held (`--max-buffered-answer-bytes`, [`Error::Budget`](upstream::Error::Budget)) | 502 `upstream`, not retried (it would take more of the budget) | failure |
//! | predict | 503 | retry `unavailable`: by contract the worker did not start it | with `error_type` `unavailable`: draining (out of rotation at once); else none |
//! | predict | 429 with a JSON error body | retry `overloaded` (on another worker, only if one is ready now and the request is not heavy; else the 429 goes to the client with its `Retry-After`) | refused: latency estimate raised (bounded), no failure counted |
//! | predict | other 5xx | retry `server_error`: `/predict` is pure; if none is left, 502 `upstream` (the worker's text is not passed on) | failure |
//! | predict | not a well-formed answer ([`Outcome::Malformed`]: not JSON, a body of the wrong shape, a 1xx or 3xx) | retry `malformed`; if none is left, 502 `upstream` | failure |
//! | predict | 2xx with a prediction, 4xx with a JSON error body | answer | success (failure count reset, latency sample unless the request is heavy) |
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

use crate::upstream::{self, Answer, Conn, Limit, Outgoing, Upstream};

/// What kind of call was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallKind {
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
    /// The worker answered, but not as a worker answers `/predict` (see [`well_formed`]).
    Malformed,
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
    /// 502 `upstream`, not sent again.
    Fail,
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
    /// The worker answered 5xx (other than 503).
    ServerError,
    /// The worker's answer was not a well-formed one (or larger than any legitimate answer).
    Malformed,
}

impl RetryReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Dropped => "dropped",
            Self::Unavailable => "unavailable",
            Self::Overloaded => "overloaded",
            Self::Slow => "slow",
            Self::ServerError => "server_error",
            Self::Malformed => "malformed",
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
pub(crate) fn classify(call: CallKind, outcome: &Outcome<'_>) -> Classified {
    let c = |verdict, health| Classified { verdict, health };
    match (call, outcome) {
        (CallKind::Predict, Outcome::TimedOut { waited, whole_request }) => {
            let verdict = if *whole_request { Verdict::Timeout } else { Verdict::Retry(RetryReason::Slow) };
            c(verdict, HealthEffect::Slow { waited: *waited })
        }
        (CallKind::Predict, Outcome::Failed(upstream::Error::Connect(_))) => {
            c(Verdict::Retry(RetryReason::Connect), HealthEffect::Failure)
        }
        (CallKind::Predict, Outcome::Failed(upstream::Error::TooLarge(_)) | Outcome::Malformed) => {
            c(Verdict::Retry(RetryReason::Malformed), HealthEffect::Failure)
        }
        (CallKind::Predict, Outcome::Failed(upstream::Error::Budget(_))) => c(Verdict::Fail, HealthEffect::Failure),
        (CallKind::Predict, Outcome::Failed(_)) => c(Verdict::Retry(RetryReason::Dropped), HealthEffect::Failure),
        (CallKind::Predict, Outcome::Answered { status, error_type, rtt }) => match *status {
            StatusCode::SERVICE_UNAVAILABLE => {
                let health = if *error_type == Some(ErrorType::Unavailable) {
                    HealthEffect::Draining
                } else {
                    HealthEffect::None
                };
                c(Verdict::Retry(RetryReason::Unavailable), health)
            }
            StatusCode::TOO_MANY_REQUESTS => c(Verdict::Retry(RetryReason::Overloaded), HealthEffect::Refused),
            s if s.is_server_error() => c(Verdict::Retry(RetryReason::ServerError), HealthEffect::Failure),
            _ => c(Verdict::Answer, HealthEffect::Success { rtt: Some(*rtt) }),
        },
        (CallKind::Probe, Outcome::Answered { status: StatusCode::OK, .. }) => c(Verdict::Answer, HealthEffect::Ready),
        (CallKind::Probe | CallKind::Stats, Outcome::Answered { .. } | Outcome::Malformed) => {
            c(Verdict::Answer, HealthEffect::Responsive)
        }
        (CallKind::Probe | CallKind::Stats, Outcome::TimedOut { .. }) => c(Verdict::Answer, HealthEffect::Unresponsive),
        (CallKind::Probe | CallKind::Stats, Outcome::Failed(_)) => c(Verdict::Answer, HealthEffect::Unreachable),
    }
}

/// Send `out` to the worker behind `upstream`, with the transport resend: a request that a reused
/// keep-alive connection could not deliver (the worker closed it while idle: the keep-alive race;
/// it ended before a byte of answer, so the worker cannot have processed it) goes once more, on a
/// new connection to the same worker. Not a retry: the request's one retry on another worker is
/// still there for a real failure, and the worker's health is untouched.
pub(crate) async fn send<'l>(
    upstream: &Upstream,
    out: Outgoing<'_>,
    limit: impl Into<Limit<'l>>,
) -> Result<Answer, upstream::Error> {
    let limit = limit.into();
    match upstream.request(out, limit, Conn::Reuse).await {
        Err(upstream::Error::Stale(detail)) => {
            tracing::debug!(?upstream, detail, "idle connection was closed; sending on a new one");
            upstream.request(out, limit, Conn::New).await
        }
        other => other,
    }
}

/// Whether `a` is an answer a worker may give to a `/predict` request (`head`: a `HEAD`
/// request, whose answer has no body), and the `error_type` of its error body: a 2xx with a JSON
/// prediction (`{"intent", "score", ...}` or `{"predictions": [...]}`, or the Open Inference
/// Protocol's `{"outputs": [...]}` or `{"name", ...}`), or a 4xx or 5xx with a
/// JSON `{error, error_type}`; JSON said by `Content-Type`. Anything else (HTML, text, another
/// shape, a 1xx or 3xx) is [`Outcome::Malformed`] and never reaches a client. The check parses
/// the body without keeping anything of it.
pub(crate) fn well_formed(a: &Answer, head: bool) -> Result<Option<ErrorType>, ()> {
    let json = a.content_type.as_ref().is_some_and(|v| {
        let essence = v.as_bytes().split(|&b| b == b';').next().unwrap_or_default().trim_ascii();
        essence.eq_ignore_ascii_case(b"application/json")
    });
    if a.status.is_success() {
        if head {
            return Ok(None);
        }
        if !json {
            return Err(());
        }
        return match serde_json::from_slice::<PredictShape>(&a.body) {
            Ok(
                PredictShape { intent: Some(_), score: Some(_), .. }
                | PredictShape { predictions: Some(_), .. }
                | PredictShape { outputs: Some(_), .. }
                | PredictShape { name: Some(_), .. },
            ) => Ok(None),
            _ => Err(()),
        };
    }
    if !(a.status.is_client_error() || a.status.is_server_error()) {
        return Err(());
    }
    match serde_json::from_slice::<wire::ErrorBody>(&a.body) {
        Ok(e) if json => Ok(Some(e.error_type)),
        _ => Err(()),
    }
}

/// What a worker's answer must have, read without keeping it: a prediction (`intent` and
/// `score`), a batch of them (`predictions`), an Open Inference Protocol inference (`outputs`),
/// or its model metadata or readiness (`name`).
#[derive(serde::Deserialize)]
struct PredictShape {
    intent: Option<serde::de::IgnoredAny>,
    score: Option<f64>,
    predictions: Option<Vec<serde::de::IgnoredAny>>,
    outputs: Option<Vec<serde::de::IgnoredAny>>,
    name: Option<String>,
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
        let too_large = upstream::Error::TooLarge("8 MB".into());
        let budget = upstream::Error::Budget("full".into());
        let success = HealthEffect::Success { rtt: Some(Duration::from_millis(7)) };
        let retry = |r| Verdict::Retry(r);
        let cases = [
            (answered(200, None), Verdict::Answer, success),
            (answered(400, Some(ErrorType::InvalidRequest)), Verdict::Answer, success),
            (answered(429, Some(ErrorType::Overloaded)), retry(RetryReason::Overloaded), HealthEffect::Refused),
            (answered(500, Some(ErrorType::Internal)), retry(RetryReason::ServerError), HealthEffect::Failure),
            (answered(502, None), retry(RetryReason::ServerError), HealthEffect::Failure),
            (Outcome::Malformed, retry(RetryReason::Malformed), HealthEffect::Failure),
            (Outcome::Failed(&too_large), retry(RetryReason::Malformed), HealthEffect::Failure),
            (Outcome::Failed(&budget), Verdict::Fail, HealthEffect::Failure),
            (answered(503, Some(ErrorType::Unavailable)), retry(RetryReason::Unavailable), HealthEffect::Draining),
            (answered(503, None), retry(RetryReason::Unavailable), HealthEffect::None),
            (Outcome::Failed(&connect), retry(RetryReason::Connect), HealthEffect::Failure),
            (Outcome::Failed(&dropped), retry(RetryReason::Dropped), HealthEffect::Failure),
            (slow(false), retry(RetryReason::Slow), HealthEffect::Slow { waited: Duration::from_secs(2) }),
            (slow(true), Verdict::Timeout, HealthEffect::Slow { waited: Duration::from_secs(2) }),
        ];
        for (i, (outcome, verdict, health)) in cases.iter().enumerate() {
            assert_eq!(
                classify(CallKind::Predict, outcome),
                Classified { verdict: *verdict, health: *health },
                "case {i}"
            );
        }
    }

    #[test]
    fn monitor_outcomes() {
        let refused = upstream::Error::Connect("refused".into());
        assert_eq!(classify(CallKind::Probe, &answered(200, None)).health, HealthEffect::Ready);
        let busy = classify(CallKind::Probe, &answered(503, Some(ErrorType::Unavailable))).health;
        assert_eq!(busy, HealthEffect::Responsive);
        assert_eq!(classify(CallKind::Stats, &answered(200, None)).health, HealthEffect::Responsive);
        for call in [CallKind::Probe, CallKind::Stats] {
            assert_eq!(classify(call, &slow(false)).health, HealthEffect::Unresponsive, "{call:?}");
            assert_eq!(classify(call, &Outcome::Failed(&refused)).health, HealthEffect::Unreachable, "{call:?}");
        }
    }

    fn answer(status: u16, content_type: Option<&'static str>, body: &'static str) -> Answer {
        Answer {
            status: StatusCode::from_u16(status).unwrap(),
            content_type: content_type.map(http::HeaderValue::from_static),
            retry_after: None,
            body: bytes::Bytes::from_static(body.as_bytes()),
            charge: None,
        }
    }

    #[test]
    fn only_a_json_prediction_or_a_json_error_is_well_formed() {
        let json = Some("application/json");
        let error = r#"{"error":"busy","error_type":"overloaded"}"#;
        let ok = [
            (answer(200, json, r#"{"intent":"PlayMusic","score":0.9}"#), None),
            (answer(200, Some("Application/JSON; charset=utf-8"), r#"{"predictions":[]}"#), None),
            (answer(200, json, r#"{"intent":"x","score":1,"scores":{"x":1},"new_field":[1]}"#), None),
            (answer(429, json, error), Some(ErrorType::Overloaded)),
            (answer(400, json, r#"{"error":"bad","error_type":"invalid_request"}"#), Some(ErrorType::InvalidRequest)),
            (answer(500, json, r#"{"error":"boom","error_type":"internal"}"#), Some(ErrorType::Internal)),
        ];
        for (i, (a, et)) in ok.iter().enumerate() {
            assert_eq!(well_formed(a, false), Ok(*et), "case {i}");
        }
        let html = Some("text/html");
        let bad = [
            answer(200, html, r#"{"intent":"PlayMusic","score":0.9}"#),
            answer(200, None, r#"{"intent":"PlayMusic","score":0.9}"#),
            answer(200, json, "<html>Traceback: /srv/app.py line 3</html>"),
            answer(200, json, r#"{"intent":"PlayMusic"}"#),
            answer(200, json, r#"{"predictions":{}}"#),
            answer(200, json, r#"[1,2]"#),
            answer(200, json, ""),
            answer(500, html, "<h1>Internal Server Error</h1> at /srv/worker.py:42"),
            answer(429, Some("text/plain"), error),
            answer(404, json, r#"{"detail":"not here"}"#),
            answer(302, json, error),
        ];
        for (i, a) in bad.iter().enumerate() {
            assert_eq!(well_formed(a, false), Err(()), "case {i}");
        }
        assert_eq!(well_formed(&answer(200, json, ""), true), Ok(None), "a HEAD answer has no body");
    }

    #[test]
    fn slow_is_never_a_failure() {
        for whole_request in [false, true] {
            let h = classify(CallKind::Predict, &slow(whole_request)).health;
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
        let u = Upstream::new(addr.to_string().parse().unwrap(), 4, Duration::from_secs(2), 1);
        for _ in 0..3 {
            let a = send(&u, Outgoing::get("/predict?query=hi"), 1024).await.unwrap();
            assert_eq!(a.status, StatusCode::OK);
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
    }
}
