//! Bytes on the wire: the request a worker is sent here; the head of its answer is read by the
//! workspace's one HTTP/1 answer codec, the `http1-client` crate (the load generator's too).

use std::io::Write as _;

use http::Method;

#[cfg(test)]
pub(super) use http1_client::content_length_value;
pub(super) use http1_client::{Framing, Head, MAX_HEAD_BYTES, parse_head};

use super::Outgoing;

/// Write `out` as an HTTP/1.1 request to `host` into `w` (cleared first).
pub(super) fn encode(w: &mut Vec<u8>, out: &Outgoing<'_>, host: &str) {
    w.clear();
    w.extend_from_slice(out.method.as_str().as_bytes());
    w.push(b' ');
    w.extend_from_slice(out.path_and_query.as_bytes());
    w.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    w.extend_from_slice(host.as_bytes());
    if let Some(ct) = out.content_type {
        w.extend_from_slice(b"\r\ncontent-type: ");
        w.extend_from_slice(ct.as_bytes());
    }
    for (name, value) in out.headers {
        w.extend_from_slice(b"\r\n");
        w.extend_from_slice(name.as_bytes());
        w.extend_from_slice(b": ");
        w.extend_from_slice(value.as_bytes());
    }
    // As hyper does: no length for a bodiless GET/HEAD, an explicit one otherwise.
    if !out.body.is_empty() || !matches!(*out.method, Method::GET | Method::HEAD) {
        // Writing to a Vec cannot fail.
        let _ = write!(w, "\r\ncontent-length: {}", out.body.len());
    }
    w.extend_from_slice(b"\r\n\r\n");
    w.extend_from_slice(out.body);
}
