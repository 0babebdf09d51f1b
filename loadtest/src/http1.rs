//! A lean HTTP/1.1 client connection: the request is one prepared buffer, the answer is parsed in
//! place with `httparse` (the parser hyper uses) and its body skipped unless it is an error's.
//!
//! Why not hyper's client: per request it hands the request to a dispatcher task through a
//! channel, builds and parses `HeaderMap`s and streams the body through another channel; that is
//! what kept the previous `loadtest` at about half of `wrk`'s requests per second on one core
//! (the gateway hit the same wall: `gateway/src/upstream.rs`, whose framing rules this follows).
//! A load generator needs the status, the framing, keep-alive, and the body of an error.
//!
//! Framing (RFC 9112): interim `1xx` answers are skipped; the body is delimited by
//! `Transfer-Encoding: chunked` (trailers dropped), by `Content-Length`, or by the end of the
//! connection; `HEAD`, `204` and `304` answers have none. The connection is kept when the answer
//! was length-delimited and read to the end, did not say `Connection: close` (HTTP/1.1) or said
//! `keep-alive` (HTTP/1.0), and nothing followed it.

use std::io;
use std::net::SocketAddr;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MAX_HEADERS: usize = 64;
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Error bodies are kept up to this size (enough for `{"error", "error_type"}`).
const MAX_KEPT_BODY: usize = 64 * 1024;

/// How an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A reused connection ended before a byte of the answer: the server closed it while idle
    /// and never saw the request; safe to send again on a new connection.
    Stale,
    /// An I/O error (reset, broken pipe, ...).
    Io(io::ErrorKind),
    /// The connection closed before the answer was complete.
    Closed,
    /// Not a valid HTTP/1.1 answer.
    Protocol(&'static str),
}

/// An answer read to its end.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// The body of an answer that is not a success (`2xx`, to read its `error_type`), or of any
    /// answer when asked for.
    pub body: Option<Bytes>,
    pub keep_alive: bool,
}

/// One keep-alive connection.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    rbuf: BytesMut,
    reused: bool,
}

enum Framing {
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

struct Head {
    status: u16,
    framing: Framing,
    keep_alive: bool,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> io::Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Self { stream, rbuf: BytesMut::with_capacity(8 * 1024), reused: false })
    }

    /// Send `request` (a whole request) and read the answer. `head`: the request was a `HEAD`;
    /// `want_body`: keep the body of a success too.
    pub async fn exchange(&mut self, request: &[u8], head: bool, want_body: bool) -> Result<Answer, Failure> {
        if let Err(e) = self.stream.write_all(request).await {
            return Err(if self.reused { Failure::Stale } else { Failure::Io(e.kind()) });
        }
        let h = self.read_head(head).await?;
        let keep_body = want_body || !(200..300).contains(&h.status);
        let (body, clean) = match h.framing {
            Framing::Empty => (Bytes::new(), true),
            Framing::Length(n) => (self.read_length(n, keep_body).await?, true),
            Framing::Chunked => (self.read_chunked(keep_body).await?, true),
            Framing::UntilClose => (self.read_to_end(keep_body).await?, false),
        };
        self.reused = true;
        Ok(Answer {
            status: h.status,
            body: keep_body.then_some(body),
            keep_alive: h.keep_alive && clean && self.rbuf.is_empty(),
        })
    }

    async fn fill(&mut self) -> Result<usize, Failure> {
        if self.rbuf.capacity() - self.rbuf.len() < 1024 {
            self.rbuf.reserve(8 * 1024);
        }
        self.stream.read_buf(&mut self.rbuf).await.map_err(|e| Failure::Io(e.kind()))
    }

    async fn read_more(&mut self) -> Result<(), Failure> {
        match self.fill().await? {
            0 => Err(Failure::Closed),
            _ => Ok(()),
        }
    }

    async fn read_head(&mut self, head_request: bool) -> Result<Head, Failure> {
        let mut interim = false;
        loop {
            if !self.rbuf.is_empty() {
                match parse_head(&self.rbuf, head_request)? {
                    Some((len, parsed)) => {
                        self.rbuf.advance(len);
                        match parsed {
                            Some(h) => return Ok(h),
                            None => interim = true,
                        }
                        continue;
                    }
                    None if self.rbuf.len() > MAX_HEAD_BYTES => return Err(Failure::Protocol("answer head too large")),
                    None => {}
                }
            }
            let nothing_yet = self.reused && !interim && self.rbuf.is_empty();
            match self.read_more().await {
                Ok(()) => {}
                Err(Failure::Closed | Failure::Io(io::ErrorKind::ConnectionReset)) if nothing_yet => {
                    return Err(Failure::Stale);
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn read_length(&mut self, n: u64, keep: bool) -> Result<Bytes, Failure> {
        if keep {
            let n = usize::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_KEPT_BODY)
                .ok_or(Failure::Protocol("error body too large"))?;
            while self.rbuf.len() < n {
                self.read_more().await?;
            }
            return Ok(self.rbuf.split_to(n).freeze());
        }
        // Skip without keeping: consume what has arrived, read the rest.
        let mut left = n;
        loop {
            let take = left.min(self.rbuf.len() as u64) as usize;
            self.rbuf.advance(take);
            left -= take as u64;
            if left == 0 {
                return Ok(Bytes::new());
            }
            self.read_more().await?;
        }
    }

    async fn read_to_end(&mut self, keep: bool) -> Result<Bytes, Failure> {
        loop {
            if keep && self.rbuf.len() > MAX_KEPT_BODY {
                return Err(Failure::Protocol("error body too large"));
            }
            if !keep {
                self.rbuf.clear();
            }
            if self.fill().await? == 0 {
                return Ok(if keep { self.rbuf.split().freeze() } else { Bytes::new() });
            }
        }
    }

    async fn read_chunked(&mut self, keep: bool) -> Result<Bytes, Failure> {
        let mut body = BytesMut::new();
        loop {
            let (line, size) = match httparse::parse_chunk_size(&self.rbuf) {
                Ok(httparse::Status::Complete(c)) => c,
                Ok(httparse::Status::Partial) if self.rbuf.len() > MAX_HEAD_BYTES => {
                    return Err(Failure::Protocol("chunk-size line too long"));
                }
                Ok(httparse::Status::Partial) => {
                    self.read_more().await?;
                    continue;
                }
                Err(_) => return Err(Failure::Protocol("invalid chunk size")),
            };
            if size == 0 {
                self.rbuf.advance(line);
                self.skip_trailers().await?;
                return Ok(body.freeze());
            }
            if keep && body.len() as u64 + size > MAX_KEPT_BODY as u64 {
                return Err(Failure::Protocol("error body too large"));
            }
            self.rbuf.advance(line);
            // The chunk's data, then CRLF.
            let mut left = size;
            while left > 0 {
                if self.rbuf.is_empty() {
                    self.read_more().await?;
                }
                let take = left.min(self.rbuf.len() as u64) as usize;
                if keep {
                    body.extend_from_slice(&self.rbuf[..take]);
                }
                self.rbuf.advance(take);
                left -= take as u64;
            }
            while self.rbuf.len() < 2 {
                self.read_more().await?;
            }
            if &self.rbuf[..2] != b"\r\n" {
                return Err(Failure::Protocol("chunk not followed by CRLF"));
            }
            self.rbuf.advance(2);
        }
    }

    async fn skip_trailers(&mut self) -> Result<(), Failure> {
        loop {
            match self.rbuf.windows(2).position(|w| w == b"\r\n") {
                Some(0) => {
                    self.rbuf.advance(2);
                    return Ok(());
                }
                Some(end) => self.rbuf.advance(end + 2),
                None if self.rbuf.len() > MAX_HEAD_BYTES => return Err(Failure::Protocol("trailer too long")),
                None => self.read_more().await?,
            }
        }
    }
}

/// Parse an answer head at the start of `buf`: `None` when incomplete; `Some((len, None))` for an
/// interim `1xx` answer of `len` bytes.
fn parse_head(buf: &[u8], head_request: bool) -> Result<Option<(usize, Option<Head>)>, Failure> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Failure::Protocol("invalid answer head")),
    };
    let status = resp.code.unwrap_or(0);
    if (100..200).contains(&status) && status != 101 {
        return Ok(Some((len, None)));
    }
    let http10 = resp.version == Some(0);
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut close = http10;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = content_length(h.value).ok_or(Failure::Protocol("invalid content-length"))?;
            if length.is_some_and(|l| l != v) {
                return Err(Failure::Protocol("conflicting content-length"));
            }
            length = Some(v);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if http10 {
                return Err(Failure::Protocol("transfer-encoding in an HTTP/1.0 answer"));
            }
            chunked = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.rsplit(',').next())
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
            if !chunked {
                close = true;
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in std::str::from_utf8(h.value).unwrap_or("").split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") && http10 {
                    close = false;
                }
            }
        }
    }
    let framing = if head_request || status == 204 || status == 304 {
        Framing::Empty
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    let keep_alive = !close && !matches!(framing, Framing::UntilClose);
    Ok(Some((len, Some(Head { status, framing, keep_alive }))))
}

/// `Content-Length`: digits, or a list of one repeated value.
fn content_length(v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?;
    let mut value = None;
    for part in s.split(',').map(str::trim) {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u64 = part.parse().ok()?;
        if value.is_some_and(|v| v != n) {
            return None;
        }
        value = Some(n);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &[u8]) -> Head {
        parse_head(raw, false).ok().flatten().and_then(|(_, h)| h).expect("a final head")
    }

    #[test]
    fn framing_and_keep_alive_follow_the_answer_head() {
        let h = head(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n");
        assert!(matches!(h.framing, Framing::Length(5)) && h.keep_alive);
        let h = head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        assert!(matches!(h.framing, Framing::Chunked) && h.keep_alive);
        let h = head(b"HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-length: 1\r\n\r\n");
        assert!(!h.keep_alive);
        let h = head(b"HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n");
        assert!(!h.keep_alive);
        let h = head(b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 1\r\n\r\n");
        assert!(h.keep_alive);
        let h = head(b"HTTP/1.1 200 OK\r\n\r\n");
        assert!(matches!(h.framing, Framing::UntilClose) && !h.keep_alive);
        let h = head(b"HTTP/1.1 204 No Content\r\ncontent-length: 3\r\n\r\n");
        assert!(matches!(h.framing, Framing::Empty) && h.keep_alive);
        assert!(matches!(parse_head(b"HTTP/1.1 100 Continue\r\n\r\n", false), Ok(Some((25, None)))));
        assert!(matches!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-le", false), Ok(None)));
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n", false).is_err());
        assert!(parse_head(b"SMTP hello\r\n\r\n", false).is_err());
    }

    #[test]
    fn content_lengths_are_digits_or_one_repeated_value() {
        assert_eq!(content_length(b"42"), Some(42));
        assert_eq!(content_length(b"42, 42"), Some(42));
        for bad in [&b""[..], b"+1", b"-1", b"4 2", b"1, 2", b"0x1"] {
            assert_eq!(content_length(bad), None);
        }
    }
}
