//! A request's identity for logs and traces: its `x-request-id` (the client's, or one made here)
//! and its W3C `traceparent`, recorded on the request's span. The span travels with the
//! request's queries into the batch (`batching::Entry::span`), so the backend thread's events for
//! them carry both too. The answer echoes `x-request-id`.
//!
//! While the worker drains, every answer also carries `Connection: close`: clients stop reusing
//! their keep-alive connections before the listener closes them, so no request of theirs races
//! with that close (as Envoy does while draining).

use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

pub const X_REQUEST_ID: &str = "x-request-id";
const TRACEPARENT: &str = "traceparent";

/// Longest client-given request id kept; a longer one (or one with other than visible ASCII) is
/// replaced by a new id, so a client cannot flood every log line.
const MAX_REQUEST_ID_LEN: usize = 128;

use super::AppState;

pub async fn request_context(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let id = match req.headers().get(X_REQUEST_ID).filter(|v| is_printable(v, MAX_REQUEST_ID_LEN)) {
        Some(v) => v.clone(),
        None => {
            let v = HeaderValue::from_str(&new_request_id()).expect("hex digits");
            req.headers_mut().insert(X_REQUEST_ID, v.clone());
            v
        }
    };
    let traceparent = req.headers().get(TRACEPARENT).and_then(|v| v.to_str().ok()).filter(|t| is_traceparent(t));
    let span = tracing::info_span!(
        "request",
        request_id = id.to_str().unwrap_or_default(),
        traceparent = traceparent.unwrap_or_default(),
    );
    let mut resp = next.run(req).instrument(span).await;
    resp.headers_mut().insert(X_REQUEST_ID, id);
    if state.core.is_draining() {
        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

fn is_printable(v: &HeaderValue, max_len: usize) -> bool {
    let b = v.as_bytes();
    !b.is_empty() && b.len() <= max_len && b.iter().all(|c| c.is_ascii_graphic())
}

/// `version-traceid-parentid-flags`, lowercase hex of 2, 32, 16 and 2 digits (W3C Trace Context).
/// Anything else is ignored rather than logged.
fn is_traceparent(t: &str) -> bool {
    let parts: Vec<&str> = t.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
    parts.len() >= 4
        && hex(parts[0], 2)
        && parts[0] != "ff"
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
}

/// 32 hex digits, like nginx's `$request_id`: a random 64-bit prefix drawn once per process,
/// then a counter. Unique within the process, unlikely to repeat across processes, and cheap.
fn new_request_id() -> String {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| RandomState::new().hash_one(std::process::id()));
    format!("{prefix:016x}{:016x}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_are_checked_for_shape() {
        assert!(is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        // A later version may append fields.
        assert!(is_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"));
        assert!(!is_traceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        assert!(!is_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"));
        assert!(!is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"));
        assert!(!is_traceparent("not a traceparent"));
    }

    #[test]
    fn request_ids_are_32_hex_digits_and_differ() {
        let (a, b) = (new_request_id(), new_request_id());
        assert_ne!(a, b);
        for id in [a, b] {
            assert_eq!(id.len(), 32);
            assert!(id.bytes().all(|c| c.is_ascii_hexdigit()));
        }
        assert!(!is_printable(&HeaderValue::from_static("has space"), 128));
        assert!(!is_printable(&HeaderValue::from_str(&"x".repeat(129)).unwrap(), 128));
        assert!(is_printable(&HeaderValue::from_static("abc-123"), 128));
    }
}
