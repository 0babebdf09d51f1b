//! The JSON error answers the listener writes itself: as `http::Response`s through hyper (414,
//! body errors), and as raw bytes straight on the socket where hyper is not involved (503 at the
//! connection cap, 408 at the header timeout) or where hyper's own answer is replaced (its empty
//! 400/414/431 for heads it cannot parse).

use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use wire::{ErrorBody, ErrorType};

use crate::args::{MAX_HEAD_BYTES, MAX_HEADERS, MAX_URI_BYTES};

fn json(error_type: ErrorType, message: &str) -> Vec<u8> {
    let body = ErrorBody { error: message.to_owned(), error_type };
    // Serializing two strings cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

/// `status` with a JSON `{"error", "error_type"}` body.
pub(crate) fn json_response<B: From<Bytes>>(status: StatusCode, error_type: ErrorType, message: &str) -> Response<B> {
    let mut resp = Response::new(B::from(Bytes::from(json(error_type, message))));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// 414 for a request target over [`MAX_URI_BYTES`].
pub(crate) fn uri_too_long<B: From<Bytes>>() -> Response<B> {
    let mut resp = json_response(
        StatusCode::URI_TOO_LONG,
        ErrorType::TooLarge,
        &format!("request target longer than {MAX_URI_BYTES} bytes"),
    );
    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// A whole HTTP/1.1 answer with `Connection: close`, as bytes for the socket.
fn raw(status: StatusCode, error_type: ErrorType, message: &str, retry_after_s: Option<u64>) -> Bytes {
    let body = json(error_type, message);
    let mut out = Vec::with_capacity(body.len() + 200);
    let reason = status.canonical_reason().unwrap_or("Error");
    out.extend_from_slice(format!("HTTP/1.1 {} {reason}\r\n", status.as_str()).as_bytes());
    out.extend_from_slice(b"content-type: application/json\r\n");
    out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    if let Some(s) = retry_after_s {
        out.extend_from_slice(format!("retry-after: {s}\r\n").as_bytes());
    }
    out.extend_from_slice(b"connection: close\r\n");
    out.extend_from_slice(format!("date: {}\r\n\r\n", httpdate::fmt_http_date(SystemTime::now())).as_bytes());
    out.extend_from_slice(&body);
    Bytes::from(out)
}

/// 503 `overloaded` for a connection refused at `--max-connections`.
pub(crate) fn at_connection_cap(retry_after_s: u64) -> Bytes {
    raw(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorType::Overloaded,
        "the server has too many open connections; retry later",
        Some(retry_after_s),
    )
}

/// 408 `timeout` for a head not received within `--header-read-timeout`.
pub(crate) fn header_timeout() -> Bytes {
    raw(StatusCode::REQUEST_TIMEOUT, ErrorType::Timeout, "request head not received in time", None)
}

/// The JSON version of one of hyper's own answers to a head it could not parse.
pub(crate) fn replacing_hyper(status: StatusCode) -> Bytes {
    let (error_type, message) = match status {
        StatusCode::URI_TOO_LONG => (ErrorType::TooLarge, format!("request target longer than {MAX_URI_BYTES} bytes")),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => (
            ErrorType::TooLarge,
            format!("request head larger than {MAX_HEAD_BYTES} bytes or with more than {MAX_HEADERS} header lines"),
        ),
        _ => (ErrorType::InvalidRequest, "malformed request head".to_owned()),
    };
    raw(status, error_type, &message, None)
}

/// The status of an answer hyper is about to write, if `bytes` start one (`HTTP/1.1 431 `).
pub(crate) fn status_line(bytes: &[u8]) -> Option<StatusCode> {
    let rest = bytes.strip_prefix(b"HTTP/1.1 ").or_else(|| bytes.strip_prefix(b"HTTP/1.0 "))?;
    let code = rest.get(..3)?;
    if rest.get(3) != Some(&b' ') {
        return None;
    }
    StatusCode::from_bytes(code).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_answers_are_complete_http_with_json() {
        let bytes = at_connection_cap(3);
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut resp = httparse::Response::new(&mut headers);
        let httparse::Status::Complete(n) = resp.parse(&bytes).unwrap() else { panic!("partial") };
        assert_eq!(resp.code, Some(503));
        let get = |name: &str| resp.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value);
        assert_eq!(get("retry-after"), Some(&b"3"[..]));
        assert_eq!(get("connection"), Some(&b"close"[..]));
        let len: usize = std::str::from_utf8(get("content-length").unwrap()).unwrap().parse().unwrap();
        assert_eq!(bytes.len() - n, len);
        let body: ErrorBody = serde_json::from_slice(&bytes[n..]).unwrap();
        assert_eq!(body.error_type, ErrorType::Overloaded);
    }

    #[test]
    fn status_lines_are_recognised_only_at_the_start() {
        assert_eq!(
            status_line(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            Some(StatusCode::from_u16(431).unwrap())
        );
        assert_eq!(status_line(b"HTTP/1.1 400 "), Some(StatusCode::BAD_REQUEST));
        assert_eq!(status_line(b"HTTP/1.1 40"), None);
        assert_eq!(status_line(b"xHTTP/1.1 400 "), None);
        assert_eq!(status_line(b"{\"a\":1}"), None);
    }
}
