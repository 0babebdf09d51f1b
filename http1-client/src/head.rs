//! The head of an answer: status, the headers a client acts on, how the body is delimited, and
//! whether the connection may be kept (RFC 9112, as hyper reads it: `src/upstream/vs_hyper.rs`
//! in the gateway checks it against hyper on generated answers).

use http::{HeaderValue, Method, StatusCode};

/// Most header lines accepted in an answer.
const MAX_HEADERS: usize = 64;
/// Largest answer head (status line and headers), and largest chunk-size or trailer line.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How the body of an answer is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

/// What a client keeps of an answer's head.
#[derive(Debug)]
pub struct Head {
    pub status: StatusCode,
    pub content_type: Option<HeaderValue>,
    pub retry_after: Option<HeaderValue>,
    pub framing: Framing,
    pub keep_alive: bool,
}

/// Parse an answer head at the start of `buf` (an error says what is wrong with it). `Ok(None)`: incomplete. `Ok(Some((len, None)))`:
/// an interim `1xx` answer of `len` bytes to skip.
pub fn parse_head(buf: &[u8], method: &Method) -> Result<Option<(usize, Option<Head>)>, String> {
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
pub fn content_length_value(value: &[u8]) -> Option<u64> {
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

#[cfg(test)]
mod tests {
    //! The load generator's cases (they were `loadtest/src/http1.rs`'s).
    use super::*;

    fn head(raw: &[u8]) -> Head {
        parse_head(raw, &Method::GET).ok().flatten().and_then(|(_, h)| h).expect("a final head")
    }

    /// What a reader keeps, for an answer read to its end with nothing after it.
    fn kept(h: &Head) -> bool {
        h.keep_alive && h.framing != Framing::UntilClose
    }

    #[test]
    fn framing_and_keep_alive_follow_the_answer_head() {
        let h = head(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n");
        assert!(matches!(h.framing, Framing::Length(5)) && kept(&h));
        let h = head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        assert!(matches!(h.framing, Framing::Chunked) && kept(&h));
        let h = head(b"HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-length: 1\r\n\r\n");
        assert!(!kept(&h));
        let h = head(b"HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n");
        assert!(!kept(&h));
        let h = head(b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 1\r\n\r\n");
        assert!(kept(&h));
        let h = head(b"HTTP/1.1 200 OK\r\n\r\n");
        assert!(matches!(h.framing, Framing::UntilClose) && !kept(&h));
        let h = head(b"HTTP/1.1 204 No Content\r\ncontent-length: 3\r\n\r\n");
        assert!(matches!(h.framing, Framing::Empty) && kept(&h));
        assert!(matches!(parse_head(b"HTTP/1.1 100 Continue\r\n\r\n", &Method::GET), Ok(Some((25, None)))));
        assert!(matches!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-le", &Method::GET), Ok(None)));
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n", &Method::GET).is_err()
        );
        assert!(parse_head(b"SMTP hello\r\n\r\n", &Method::GET).is_err());
    }

    #[test]
    fn content_lengths_are_digits_or_one_repeated_value() {
        assert_eq!(content_length_value(b"42"), Some(42));
        assert_eq!(content_length_value(b"42, 42"), Some(42));
        for bad in [&b""[..], b"+1", b"-1", b"4 2", b"1, 2", b"0x1"] {
            assert_eq!(content_length_value(bad), None);
        }
    }
}

#[cfg(test)]
mod proptests {
    //! The answer head parser on arbitrary bytes and on mutated valid answers: it never panics,
    //! never claims more bytes than it was given, and a valid answer round-trips. Cases:
    //! `PROPTEST_CASES` (default 2,000 per property).
    use proptest::prelude::*;

    use super::*;

    fn config() -> ProptestConfig {
        ProptestConfig::with_cases(std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(2_000))
    }

    /// A valid answer: its bytes, the length of its head, and what the parser must find.
    #[derive(Debug, Clone)]
    struct Valid {
        bytes: Vec<u8>,
        head_len: usize,
        status: u16,
        content_type: Option<String>,
        retry_after: Option<String>,
        body_len: usize,
        close: bool,
    }

    fn valid() -> impl Strategy<Value = Valid> {
        let status = prop_oneof![Just(200u16), Just(204), Just(400), Just(429), Just(500), Just(503), 200u16..600];
        let token = "[a-zA-Z0-9/+.;=_-]{1,40}";
        (
            status,
            proptest::option::of(token),
            proptest::option::of("[0-9]{1,6}"),
            proptest::collection::vec(any::<u8>(), 0..300),
            any::<bool>(),
            any::<bool>(),
            proptest::collection::vec(("x-[a-z]{1,10}", "[ -~]{0,30}"), 0..4),
        )
            .prop_map(|(status, content_type, retry_after, mut body, close, upper, extra)| {
                let mut head = format!("HTTP/1.1 {status} Whatever\r\n");
                let name = |n: &str| if upper { n.to_ascii_uppercase() } else { n.to_owned() };
                if let Some(ct) = &content_type {
                    head += &format!("{}: {ct}\r\n", name("content-type"));
                }
                for (k, v) in &extra {
                    head += &format!("{k}: {}\r\n", v.trim());
                }
                if let Some(ra) = &retry_after {
                    head += &format!("{}:{ra}\r\n", name("retry-after"));
                }
                if close {
                    head += "connection: close\r\n";
                }
                if status == 204 {
                    body.clear();
                }
                head += &format!("{}: {}\r\n\r\n", name("content-length"), body.len());
                let head_len = head.len();
                let mut bytes = head.into_bytes();
                bytes.extend_from_slice(&body);
                Valid { bytes, head_len, status, content_type, retry_after, body_len: body.len(), close }
            })
    }

    #[derive(Debug, Clone)]
    enum Mutation {
        Flip(usize, u8),
        Insert(usize, u8),
        Remove(usize),
        Truncate(usize),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        prop_oneof![
            (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
            (any::<usize>(), prop_oneof![any::<u8>(), Just(b'\r'), Just(b'\n'), Just(b':'), Just(b' ')])
                .prop_map(|(i, b)| Mutation::Insert(i, b)),
            any::<usize>().prop_map(Mutation::Remove),
            any::<usize>().prop_map(Mutation::Truncate),
        ]
    }

    fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
        let n = bytes.len().max(1);
        match *m {
            Mutation::Flip(i, b) if !bytes.is_empty() => bytes[i % n] ^= b | 1,
            Mutation::Insert(i, b) => bytes.insert(i % (bytes.len() + 1), b),
            Mutation::Remove(i) if !bytes.is_empty() => {
                bytes.remove(i % n);
            }
            Mutation::Truncate(i) => bytes.truncate(i % (bytes.len() + 1)),
            _ => {}
        }
    }

    /// Whatever `parse_head` says of `buf`, it must be consistent with it.
    fn check(buf: &[u8], method: &Method) -> Result<(), TestCaseError> {
        if let Ok(Some((len, head))) = parse_head(buf, method) {
            prop_assert!(len > 0 && len <= buf.len(), "claimed {len} of {} bytes", buf.len());
            if let Some(h) = head {
                prop_assert!(!h.status.is_informational());
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn arbitrary_bytes_never_panic(
            buf in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..600),
                "HTTP/1\\.[01] [0-9]{1,4} [ -~]{0,20}\r\n([ -~]{0,40}\r\n){0,6}(\r\n)?".prop_map(String::into_bytes),
            ],
            head in any::<bool>(),
        ) {
            check(&buf, if head { &Method::HEAD } else { &Method::POST })?;
        }

        #[test]
        fn a_valid_answer_round_trips(v in valid()) {
            let (len, head) = parse_head(&v.bytes, &Method::POST)
                .map_err(TestCaseError::fail)?
                .ok_or_else(|| TestCaseError::fail("a complete head reported incomplete"))?;
            let head = head.ok_or_else(|| TestCaseError::fail("not interim"))?;
            prop_assert_eq!(len, v.head_len);
            prop_assert_eq!(head.status.as_u16(), v.status);
            prop_assert_eq!(head.content_type.map(|c| c.to_str().unwrap().to_owned()), v.content_type.clone());
            prop_assert_eq!(head.retry_after.map(|c| c.to_str().unwrap().to_owned()), v.retry_after.clone());
            prop_assert_eq!(head.keep_alive, !v.close);
            match head.framing {
                Framing::Empty => prop_assert!(v.status == 204 || v.status == 304),
                Framing::Length(n) => prop_assert_eq!(n, v.body_len as u64),
                _ => prop_assert!(false, "framing"),
            }
            // Every proper prefix of the head is incomplete, never an error or an answer.
            for cut in [0, 1, v.head_len / 2, v.head_len - 1] {
                prop_assert!(matches!(parse_head(&v.bytes[..cut], &Method::POST), Ok(None)), "prefix {cut}");
            }
        }

        #[test]
        fn mutated_answers_never_panic(v in valid(), ms in proptest::collection::vec(mutation(), 1..6)) {
            let mut bytes = v.bytes.clone();
            for m in &ms {
                apply(&mut bytes, m);
            }
            check(&bytes, &Method::POST)?;
            check(&bytes, &Method::GET)?;
        }

        #[test]
        fn content_length_values_never_panic(value in "[0-9, ]{0,30}|[ -~]{0,30}") {
            if let Some(n) = content_length_value(value.as_bytes()) {
                prop_assert!(value.contains(&n.to_string()));
            }
        }
    }
}
