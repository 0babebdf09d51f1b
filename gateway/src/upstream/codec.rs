//! Bytes on the wire: the request a worker is sent, and the head of its answer.

use std::io::Write as _;

use http::{HeaderValue, Method, StatusCode};

use super::Outgoing;

/// Most header lines accepted in an answer.
const MAX_HEADERS: usize = 64;
/// Largest answer head (status line and headers), and largest chunk-size or trailer line.
pub(super) const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How the body of an answer is delimited.
pub(super) enum Framing {
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

/// What the gateway keeps of an answer's head.
pub(super) struct Head {
    pub(super) status: StatusCode,
    pub(super) content_type: Option<HeaderValue>,
    pub(super) retry_after: Option<HeaderValue>,
    pub(super) framing: Framing,
    pub(super) keep_alive: bool,
}

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

/// Parse an answer head at the start of `buf` (an error says what is wrong with it). `Ok(None)`: incomplete. `Ok(Some((len, None)))`:
/// an interim `1xx` answer of `len` bytes to skip.
pub(super) fn parse_head(buf: &[u8], method: &Method) -> Result<Option<(usize, Option<Head>)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("invalid answer head: {e}")),
    };
    let code = resp.code.unwrap_or(0);
    let status = StatusCode::from_u16(code).map_err(|_| format!("invalid answer status {code}"))?;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err("the worker switched protocols".to_owned());
    }
    if status.is_informational() {
        return Ok(Some((len, None)));
    }
    let http11 = resp.version == Some(1);
    let (mut content_length, mut chunked, mut transfer_encoding) = (None::<u64>, false, false);
    let (mut close, mut keep_alive_token) = (false, false);
    let (mut content_type, mut retry_after) = (None, None);
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = content_length_value(h.value).ok_or_else(|| "invalid Content-Length in the answer".to_owned())?;
            if content_length.is_some_and(|c| c != n) {
                return Err("conflicting Content-Length headers in the answer".to_owned());
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            transfer_encoding = true;
            // Only the last coding counts: chunked must be the final one to delimit the body.
            chunked =
                h.value.rsplit(|&b| b == b',').next().is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in h.value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"content-type") {
            content_type = HeaderValue::from_bytes(h.value).ok();
        } else if name.eq_ignore_ascii_case(b"retry-after") {
            retry_after = HeaderValue::from_bytes(h.value).ok();
        }
    }
    let mut keep_alive = if http11 { !close } else { keep_alive_token && !close };
    let framing = if *method == Method::HEAD || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        Framing::Empty
    } else if transfer_encoding && !http11 {
        // HTTP/1.0 has no transfer codings: "faulty framing" (RFC 9112 6.1), as hyper has it.
        return Err("Transfer-Encoding in an HTTP/1.0 answer".to_owned());
    } else if transfer_encoding {
        // With both, Transfer-Encoding wins and the connection is not reused (RFC 9112 6.3).
        if content_length.is_some() {
            keep_alive = false;
        }
        if chunked { Framing::Chunked } else { Framing::UntilClose }
    } else if let Some(n) = content_length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    Ok(Some((len, Some(Head { status, content_type, retry_after, framing, keep_alive }))))
}

/// A `Content-Length` value: digits only (no sign), or a list of the same value repeated
/// (RFC 9110 8.6: `42, 42` is accepted, as hyper does).
pub(super) fn content_length_value(value: &[u8]) -> Option<u64> {
    let mut length = None;
    for item in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
        if item.is_empty() || !item.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = std::str::from_utf8(item).ok()?.parse::<u64>().ok()?;
        if length.is_some_and(|l| l != n) {
            return None;
        }
        length = Some(n);
    }
    length
}
