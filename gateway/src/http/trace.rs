//! The identity of a client request as it crosses the gateway:
//!
//! * `x-request-id`: the client's, when it is usable (1 to 200 visible ASCII characters, as
//!   Heroku and most proxies accept), else a new one (32 random hex digits). Sent to the worker,
//!   echoed to the client on every answer to a predict route.
//! * `traceparent` (W3C Trace Context): passed to the worker as it came when it is well formed
//!   (`00-<32 hex>-<16 hex>-<2 hex>`); dropped otherwise, as the specification asks of a
//!   participant that cannot parse it.
//!
//! Both are recorded on the request's `request` log span, so every line the gateway logs about
//! the request carries them. The span is made where such a line is logged (`Ids::span`, called
//! by the predict entry and the proxy on their failure paths), not for every request.

use http::{HeaderMap, HeaderName, HeaderValue};
use rand::Rng;

pub(crate) static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub(crate) static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// Longest client `x-request-id` kept.
const MAX_REQUEST_ID_BYTES: usize = 200;

/// A request's identity (see the module documentation).
#[derive(Debug, Clone)]
pub(crate) struct Ids {
    pub(crate) request_id: HeaderValue,
    pub(crate) traceparent: Option<HeaderValue>,
}

impl Ids {
    /// The identity of a request with these headers.
    pub(crate) fn from_headers(headers: &HeaderMap) -> Self {
        // One pass over the few headers of a request instead of two hashed look-ups (this runs
        // for every request); the first of each name counts, as `HeaderMap::get` has it.
        let (mut request_id, mut traceparent) = (None, None);
        for (name, value) in headers {
            if request_id.is_none() && *name == X_REQUEST_ID {
                request_id = Some(value);
            } else if traceparent.is_none() && *name == TRACEPARENT {
                traceparent = Some(value);
            }
        }
        Self {
            request_id: request_id.filter(|v| usable_request_id(v)).cloned().unwrap_or_else(generate),
            traceparent: traceparent.filter(|v| well_formed_traceparent(v.as_bytes())).cloned(),
        }
    }

    /// The `request` span for the log: both ids, and the pool.
    pub(crate) fn span(&self, pool: &str) -> tracing::Span {
        use tracing::field::{Empty, display};
        let span = tracing::info_span!("request", request_id = Empty, traceparent = Empty, pool = %pool);
        if span.is_disabled() {
            return span;
        }
        // Both values are visible ASCII (checked above), so `to_str` cannot fail.
        if let Ok(id) = self.request_id.to_str() {
            span.record("request_id", display(id));
        }
        if let Some(tp) = self.traceparent.as_ref().and_then(|v| v.to_str().ok()) {
            span.record("traceparent", display(tp));
        }
        span
    }

    /// The headers the worker is sent.
    pub(crate) fn headers(&self) -> ([(&'static str, &HeaderValue); 2], usize) {
        let id = (X_REQUEST_ID.as_str(), &self.request_id);
        match &self.traceparent {
            Some(tp) => ([id, (TRACEPARENT.as_str(), tp)], 2),
            None => ([id, id], 1),
        }
    }
}

fn usable_request_id(v: &HeaderValue) -> bool {
    (1..=MAX_REQUEST_ID_BYTES).contains(&v.len()) && v.as_bytes().iter().all(u8::is_ascii_graphic)
}

/// `version-traceid-parentid-flags`, version `00` (the only one defined), lowercase hex, with a
/// trace id and parent id that are not all zeros.
fn well_formed_traceparent(v: &[u8]) -> bool {
    let hex = |s: &[u8]| s.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    let nonzero = |s: &[u8]| s.iter().any(|&b| b != b'0');
    v.len() == 55
        && v[2] == b'-'
        && v[35] == b'-'
        && v[52] == b'-'
        && &v[..2] == b"00"
        && hex(&v[3..35])
        && nonzero(&v[3..35])
        && hex(&v[36..52])
        && nonzero(&v[36..52])
        && hex(&v[53..])
}

/// 32 random hex digits.
fn generate() -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let n: u128 = rand::rng().random();
    let mut out = [0u8; 32];
    for (pair, byte) in out.chunks_exact_mut(2).zip(n.to_be_bytes()) {
        pair[0] = HEX[usize::from(byte >> 4)];
        pair[1] = HEX[usize::from(byte & 0xf)];
    }
    // Hex digits are always a valid header value.
    HeaderValue::from_bytes(&out).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn headers(pairs: &[(&HeaderName, &str)]) -> HeaderMap {
        pairs.iter().map(|(n, v)| ((*n).clone(), HeaderValue::from_str(v).unwrap())).collect()
    }

    #[test]
    fn a_usable_client_id_and_a_well_formed_traceparent_are_kept() {
        let ids = Ids::from_headers(&headers(&[(&X_REQUEST_ID, "abc-123"), (&TRACEPARENT, TP)]));
        assert_eq!(ids.request_id, "abc-123");
        assert_eq!(ids.traceparent.as_ref().unwrap(), TP);
        let (h, n) = ids.headers();
        assert_eq!(&h[..n], &[("x-request-id", &ids.request_id), ("traceparent", ids.traceparent.as_ref().unwrap())]);
    }

    #[test]
    fn a_missing_or_unusable_id_is_replaced_by_a_new_one() {
        let long = "x".repeat(201);
        for h in [headers(&[]), headers(&[(&X_REQUEST_ID, "")]), headers(&[(&X_REQUEST_ID, &long)])] {
            let id = Ids::from_headers(&h).request_id;
            assert_eq!(id.len(), 32, "{id:?}");
            assert!(id.as_bytes().iter().all(u8::is_ascii_hexdigit), "{id:?}");
        }
        let ids: std::collections::BTreeSet<_> = (0..1000).map(|_| generate()).collect();
        assert_eq!(ids.len(), 1000, "every id is new");
        assert!(!usable_request_id(&HeaderValue::from_static("has space")));
    }

    #[test]
    fn malformed_traceparents_are_dropped() {
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(!well_formed_traceparent(bad.as_bytes()), "{bad}");
        }
        let ids = Ids::from_headers(&headers(&[(&TRACEPARENT, "garbage")]));
        assert!(ids.traceparent.is_none());
        assert_eq!(ids.headers().1, 1);
    }

    /// A `MakeWriter` into a shared buffer.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_line_logged_in_the_request_span_carries_both_ids() {
        let out = Captured::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt().with_writer(move || sink.clone()).with_ansi(false).finish();
        let ids = Ids::from_headers(&headers(&[(&X_REQUEST_ID, "req-42"), (&TRACEPARENT, TP)]));
        tracing::subscriber::with_default(subscriber, || {
            let _entered = ids.span("big").entered();
            tracing::warn!("worker ejected");
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("request_id=req-42"), "{text}");
        assert!(text.contains(&format!("traceparent={TP}")), "{text}");
        assert!(text.contains("pool=big"), "{text}");
    }
}
