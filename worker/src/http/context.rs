//! A request's identity for logs and traces: its `x-request-id` (the client's, or one made here)
//! and its W3C `traceparent`, recorded on the request's span. The span travels with the
//! request's queries into the batch (`batching::Entry::span`), so the backend thread's events for
//! them carry both too. The answer echoes `x-request-id`.
//!
//! The span is made only where something is logged about the request, as on the gateway: at the
//! default `info` level nothing is logged on a request's success path, and a span made for every
//! request (its fields formatted, its slot allocated, entered at every poll) cost more than a
//! microsecond of a request's few. The request's identity rides in a task-local instead, and
//! [`request_span`] makes the span from it when an error is logged. When the backend thread's
//! per-query `trace` line is enabled (`RUST_LOG=worker=trace`), the span is made up front as
//! before, so that line carries it too.
//!
//! While the worker drains, every answer also carries `Connection: close`: clients stop reusing
//! their keep-alive connections before the listener closes them, so no request of theirs races
//! with that close (as Envoy does while draining).

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use tracing::{Instrument, Level, Span};

/// Names made once: a header name made from a `&str` that is not a standard header copies it
/// into an allocation of its own at every insert.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// Longest client-given request id kept; a longer one (or one with other than visible ASCII) is
/// replaced by a new id, so a client cannot flood every log line.
const MAX_REQUEST_ID_LEN: usize = 128;

use super::AppState;

/// What names a request in its log lines.
#[derive(Debug, Clone)]
struct Identity {
    id: HeaderValue,
    traceparent: Option<HeaderValue>,
}

impl Identity {
    fn span(&self) -> Span {
        let traceparent = self.traceparent.as_ref().and_then(|t| t.to_str().ok()).unwrap_or_default();
        tracing::info_span!("request", request_id = self.id.to_str().unwrap_or_default(), traceparent)
    }
}

tokio::task_local! {
    /// The identity of the request this task serves, when its span is made lazily.
    static IDENTITY: Identity;
}

/// The current request's span, made now, for a line logged about it; `Span::none()` outside a
/// request, or when the request's span is already current (made up front).
pub fn request_span() -> Span {
    IDENTITY.try_with(Identity::span).unwrap_or_else(|_| Span::none())
}

pub async fn request_context(State(state): State<AppState>, req: Request, next: Next) -> Response {
    in_context(&state, req, |req| next.run(req)).await
}

/// What [`request_context`] does around a request, for any body type: the `/predict` fast path
/// (`super::Routes`) runs its handlers in it too.
pub async fn in_context<B, F, Fut>(state: &AppState, req: axum::http::Request<B>, run: F) -> Response
where
    F: FnOnce(axum::http::Request<B>) -> Fut,
    Fut: Future<Output = Response>,
{
    let id = match req.headers().get(&X_REQUEST_ID).filter(|v| is_printable(v, MAX_REQUEST_ID_LEN)) {
        Some(v) => v.clone(),
        None => new_request_id(),
    };
    let traceparent = req.headers().get(&TRACEPARENT).filter(|t| t.to_str().is_ok_and(is_traceparent)).cloned();
    let identity = Identity { id, traceparent };
    // The backend thread's per-query line (`batching::runner`) logs on the span it is handed.
    let mut resp = if tracing::enabled!(target: "worker::batching::runner", Level::TRACE) {
        run(req).instrument(identity.span()).await
    } else {
        IDENTITY.scope(identity.clone(), run(req)).await
    };
    resp.headers_mut().insert(&X_REQUEST_ID, identity.id);
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
/// then a counter. Unique within the process, unlikely to repeat across processes, and cheap: each
/// thread takes its counter values a block at a time, so threads do not contend for one counter
/// on every request (ids from one thread increase; across threads they are not ordered). The
/// value owns its digits in one allocation, and its clones share it (a value copied from a slice
/// would allocate again at its first clone).
fn new_request_id() -> HeaderValue {
    const BLOCK: u64 = 1024;
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        /// The next value of this thread's block, and its end.
        static NEXT: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
    }
    let prefix = *PREFIX.get_or_init(|| RandomState::new().hash_one(std::process::id()));
    let n = NEXT.with(|next| {
        let (mut n, mut end) = next.get();
        if n == end {
            n = COUNTER.fetch_add(BLOCK, Ordering::Relaxed);
            end = n + BLOCK;
        }
        next.set((n + 1, end));
        n
    });
    let mut hex = [0u8; 32];
    for (i, byte) in prefix.to_be_bytes().into_iter().chain(n.to_be_bytes()).enumerate() {
        hex[2 * i] = HEX[usize::from(byte >> 4)];
        hex[2 * i + 1] = HEX[usize::from(byte & 0xf)];
    }
    HeaderValue::from_maybe_shared(Bytes::from_owner(hex)).expect("hex digits")
}

const HEX: &[u8; 16] = b"0123456789abcdef";

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
        for id in [&a, &b] {
            assert_eq!(id.len(), 32);
            assert!(id.as_bytes().iter().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        }
        let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
        assert_eq!(a[..16], b[..16], "one prefix per process");
        let (x, y) = (u64::from_str_radix(&a[16..], 16).unwrap(), u64::from_str_radix(&b[16..], 16).unwrap());
        assert!(y > x, "then a counter: {a} {b}");
        // Threads take blocks of the counter: ids made on many threads at once never repeat.
        let ids: Vec<HeaderValue> = std::thread::scope(|s| {
            let threads: Vec<_> =
                (0..8).map(|_| s.spawn(|| (0..3000).map(|_| new_request_id()).collect::<Vec<_>>())).collect();
            threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
        });
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        assert!(!is_printable(&HeaderValue::from_static("has space"), 128));
        assert!(!is_printable(&HeaderValue::from_str(&"x".repeat(129)).unwrap(), 128));
        assert!(is_printable(&HeaderValue::from_static("abc-123"), 128));
    }
}
