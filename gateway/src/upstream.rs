//! The gateway's HTTP/1.1 client for its workers: a stack of idle keep-alive connections per
//! worker, and the request/answer exchange written on `httparse` (the parser hyper uses), as
//! pingora does for its upstream connections.
//!
//! Why not hyper's client: the gateway first used hyper-util's pooled `Client`, then a pool of
//! hyper `client::conn::http1` connections. Both cost user-space CPU per request that nginx
//! does not spend (see `benches/RESULTS.md`, "Gateway vs nginx"): the request is handed to a
//! dispatcher through a channel and the answer comes back through a oneshot; the request and
//! answer headers are built into and parsed out of `HeaderMap`s (hashing every name); the body
//! arrives through another channel. The gateway needs none of that for a worker exchange: it
//! sends a small buffered request and reads a small buffered answer, of which it keeps the
//! status, `Content-Type`, `Retry-After` and the body. Here one buffer is written, the answer
//! is parsed in place and the connection is read by the task that waits for the answer.
//!
//! What is implemented of HTTP/1.1 (RFC 9112) for answers: interim `1xx` answers are skipped;
//! the body is delimited by `Transfer-Encoding: chunked` (trailers are read and dropped), by
//! `Content-Length`, or by the end of the connection; `HEAD`, `204` and `304` answers have no
//! body; conflicting `Content-Length`s and malformed chunks are errors. A connection is reused
//! only when its answer was read to the end, was length-delimited, said nothing of
//! `Connection: close` (HTTP/1.1) or said `keep-alive` (HTTP/1.0), and no byte followed it.
//!
//! Pooling follows hyper-util's legacy client: the most recently used idle connection is taken
//! first (the least likely to have been closed by the worker's keep-alive timer), at most
//! `max_idle` are kept, and [`Upstream::prune`] closes those the worker has closed or that have
//! been idle too long. A request sent on a reused connection that ends before a single byte of
//! answer (the worker closed it while the request was on its way: the keep-alive race) is sent
//! again once on a new connection to the same worker; the worker cannot have answered it.
//!
//! Checked against hyper's client: `tests/upstream_vs_hyper.rs` generates worker answers (valid
//! and broken framing, odd spelling and spacing, interim answers, HTTP/1.0, pieces of random
//! size) and requires the same outcome and the same keep-alive decisions from both (600 cases in
//! the test suite; 20,000 clean with `UPSTREAM_CASES=20000`). One difference is by design: bytes
//! a worker sends after a complete answer, arriving after the answer was read, are found at the
//! next request on that connection (an exchange error, which the proxy retries on another
//! worker), where hyper finds them while the connection is idle; watching idle connections would
//! cost a syscall per request, for a worker that breaks the protocol.

use std::io::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::uri::Authority;
use http::{HeaderValue, Method, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Most header lines accepted in an answer.
const MAX_HEADERS: usize = 64;
/// Largest answer head (status line and headers), and largest chunk-size or trailer line.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Bodies up to this size are copied out of the read buffer, so that the buffer is reused.
const COPY_BODY_BYTES: usize = 16 * 1024;
/// An idle connection keeps buffers up to this capacity; larger ones (left by a large request or
/// answer) are freed when it goes back to the pool.
const KEEP_BUFFER_BYTES: usize = 64 * 1024;

/// How a request to a worker failed.
#[derive(Debug)]
pub enum Error {
    /// The request never reached the worker whole (no connection could be made, or it could not
    /// be written): always safe to send elsewhere.
    Connect(String),
    /// The request was sent and no complete, valid answer came back.
    Exchange(String),
}

impl Error {
    pub fn is_connect(&self) -> bool {
        matches!(self, Self::Connect(_))
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connect(e) | Self::Exchange(e) => f.write_str(e),
        }
    }
}

/// A request to a worker (buffered by the caller: it may be sent twice).
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    pub method: &'a Method,
    /// Origin-form target, e.g. `/predict?query=hi`.
    pub path_and_query: &'a str,
    pub content_type: Option<&'a HeaderValue>,
    pub body: &'a [u8],
}

impl<'a> Outgoing<'a> {
    pub fn get(path_and_query: &'a str) -> Self {
        Self { method: &Method::GET, path_and_query, content_type: None, body: &[] }
    }
}

/// A worker's answer, read to the end: what the gateway passes on.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub content_type: Option<HeaderValue>,
    pub retry_after: Option<HeaderValue>,
    pub body: Bytes,
}

/// The connections of the gateway to one worker.
pub struct Upstream {
    authority: Authority,
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
    connect_timeout: Duration,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("authority", &self.authority).field("idle", &self.idle_count()).finish()
    }
}

struct Idle {
    conn: Connection,
    since: Instant,
}

/// One connection to the worker and its buffers.
struct Connection {
    stream: TcpStream,
    /// Bytes read and not consumed yet.
    rbuf: BytesMut,
    wbuf: Vec<u8>,
    /// Whether an answer has been read on it before (a reused keep-alive connection).
    reused: bool,
}

/// Why an exchange on one connection failed.
enum Failed {
    /// A reused connection ended before any byte of the answer: the worker closed it (idle) and
    /// did not process the request.
    Stale(String),
    /// The request could not be written.
    NotSent(String),
    /// The request was written; the answer is missing, cut short or malformed.
    Sent(String),
}

/// How the body of an answer is delimited.
enum Framing {
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

/// What the gateway keeps of an answer's head.
struct Head {
    status: StatusCode,
    content_type: Option<HeaderValue>,
    retry_after: Option<HeaderValue>,
    framing: Framing,
    keep_alive: bool,
}

impl Connection {
    fn new(stream: TcpStream) -> Self {
        Self { stream, rbuf: BytesMut::with_capacity(8 * 1024), wbuf: Vec::with_capacity(512), reused: false }
    }

    async fn exchange(&mut self, out: &Outgoing<'_>, host: &str, max_bytes: usize) -> Result<(Answer, bool), Failed> {
        self.encode(out, host);
        if let Err(e) = self.stream.write_all(&self.wbuf).await {
            let detail = format!("sending the request: {e}");
            return Err(if self.reused { Failed::Stale(detail) } else { Failed::NotSent(detail) });
        }
        let head = self.read_head(out.method).await?;
        let (body, clean_end) = match head.framing {
            Framing::Empty => (Bytes::new(), true),
            Framing::Length(n) => (self.read_length(n, max_bytes).await?, true),
            Framing::Chunked => (self.read_chunked(max_bytes).await?, true),
            Framing::UntilClose => (self.read_to_end(max_bytes).await?, false),
        };
        // Bytes after the answer: the worker is not speaking HTTP/1.1 as expected.
        let keep_alive = head.keep_alive && clean_end && self.rbuf.is_empty();
        self.reused = true;
        let answer =
            Answer { status: head.status, content_type: head.content_type, retry_after: head.retry_after, body };
        Ok((answer, keep_alive))
    }

    fn encode(&mut self, out: &Outgoing<'_>, host: &str) {
        let w = &mut self.wbuf;
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
        // As hyper does: no length for a bodiless GET/HEAD, an explicit one otherwise.
        if !out.body.is_empty() || !matches!(*out.method, Method::GET | Method::HEAD) {
            // Writing to a Vec cannot fail.
            let _ = write!(w, "\r\ncontent-length: {}", out.body.len());
        }
        w.extend_from_slice(b"\r\n\r\n");
        w.extend_from_slice(out.body);
    }

    /// Read more bytes into `rbuf`; `Ok(0)` at the end of the connection.
    async fn fill(&mut self) -> std::io::Result<usize> {
        if self.rbuf.capacity() - self.rbuf.len() < 1024 {
            self.rbuf.reserve(8 * 1024);
        }
        self.stream.read_buf(&mut self.rbuf).await
    }

    async fn read_head(&mut self, method: &Method) -> Result<Head, Failed> {
        let mut interim = false;
        loop {
            // Nothing to parse before the first read (the usual case: the answer is not there yet).
            if !self.rbuf.is_empty() {
                match parse_head(&self.rbuf, method)? {
                    Some((len, head)) => {
                        self.rbuf.advance(len);
                        match head {
                            Some(head) => return Ok(head),
                            None => interim = true,
                        }
                        continue;
                    }
                    None if self.rbuf.len() > MAX_HEAD_BYTES => {
                        return Err(Failed::Sent(format!("answer head larger than {MAX_HEAD_BYTES} bytes")));
                    }
                    None => {}
                }
            }
            let nothing_yet = self.reused && !interim && self.rbuf.is_empty();
            if let Err(e) = self.read_more().await {
                return Err(if nothing_yet {
                    Failed::Stale("keep-alive connection closed by the worker".to_owned())
                } else {
                    e
                });
            }
        }
    }

    async fn read_more(&mut self) -> Result<(), Failed> {
        match self.fill().await {
            Ok(0) => Err(Failed::Sent("connection closed before the answer was complete".to_owned())),
            Ok(_) => Ok(()),
            Err(e) => Err(Failed::Sent(format!("reading the answer: {e}"))),
        }
    }

    async fn read_length(&mut self, n: u64, max_bytes: usize) -> Result<Bytes, Failed> {
        let n = usize::try_from(n).ok().filter(|&n| n <= max_bytes).ok_or_else(|| too_large(max_bytes))?;
        self.rbuf.reserve(n.saturating_sub(self.rbuf.len()));
        while self.rbuf.len() < n {
            self.read_more().await?;
        }
        Ok(self.take(n))
    }

    async fn read_to_end(&mut self, max_bytes: usize) -> Result<Bytes, Failed> {
        loop {
            if self.rbuf.len() > max_bytes {
                return Err(too_large(max_bytes));
            }
            match self.fill().await {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => return Err(Failed::Sent(format!("reading the answer: {e}"))),
            }
        }
        let n = self.rbuf.len();
        Ok(self.take(n))
    }

    async fn read_chunked(&mut self, max_bytes: usize) -> Result<Bytes, Failed> {
        let mut body = BytesMut::new();
        loop {
            let (line, size) = match httparse::parse_chunk_size(&self.rbuf) {
                Ok(httparse::Status::Complete(c)) => c,
                Ok(httparse::Status::Partial) if self.rbuf.len() > MAX_HEAD_BYTES => {
                    return Err(Failed::Sent("chunk-size line too long".to_owned()));
                }
                Ok(httparse::Status::Partial) => {
                    self.read_more().await?;
                    continue;
                }
                Err(_) => return Err(Failed::Sent("invalid chunk size in the answer".to_owned())),
            };
            if size == 0 {
                self.rbuf.advance(line);
                return self.skip_trailers().await.map(|()| body.freeze());
            }
            let size = usize::try_from(size)
                .ok()
                .filter(|s| body.len().saturating_add(*s) <= max_bytes)
                .ok_or_else(|| too_large(max_bytes))?;
            let need = line + size + 2;
            while self.rbuf.len() < need {
                self.read_more().await?;
            }
            if &self.rbuf[line + size..need] != b"\r\n" {
                return Err(Failed::Sent("chunk not followed by CRLF in the answer".to_owned()));
            }
            body.extend_from_slice(&self.rbuf[line..line + size]);
            self.rbuf.advance(need);
        }
    }

    /// Trailer lines after the last chunk, up to the empty line.
    async fn skip_trailers(&mut self) -> Result<(), Failed> {
        loop {
            match self.rbuf.windows(2).position(|w| w == b"\r\n") {
                Some(0) => {
                    self.rbuf.advance(2);
                    return Ok(());
                }
                Some(end) => self.rbuf.advance(end + 2),
                None if self.rbuf.len() > MAX_HEAD_BYTES => {
                    return Err(Failed::Sent("trailer line too long".to_owned()));
                }
                None => self.read_more().await?,
            }
        }
    }

    /// The first `n` bytes of `rbuf`, consumed.
    fn take(&mut self, n: usize) -> Bytes {
        if n <= COPY_BODY_BYTES {
            let b = Bytes::copy_from_slice(&self.rbuf[..n]);
            self.rbuf.advance(n);
            b
        } else {
            self.rbuf.split_to(n).freeze()
        }
    }

    /// Closed by the worker, or bytes arrived that no request asked for.
    fn closed_or_dirty(&self) -> bool {
        let mut probe = [0u8; 1];
        !matches!(self.stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

/// Parse an answer head at the start of `buf`. `Ok(None)`: incomplete. `Ok(Some((len, None)))`:
/// an interim `1xx` answer of `len` bytes to skip.
fn parse_head(buf: &[u8], method: &Method) -> Result<Option<(usize, Option<Head>)>, Failed> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(Failed::Sent(format!("invalid answer head: {e}"))),
    };
    let code = resp.code.unwrap_or(0);
    let status = StatusCode::from_u16(code).map_err(|_| Failed::Sent(format!("invalid answer status {code}")))?;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err(Failed::Sent("the worker switched protocols".to_owned()));
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
            let n = content_length_value(h.value)
                .ok_or_else(|| Failed::Sent("invalid Content-Length in the answer".to_owned()))?;
            if content_length.is_some_and(|c| c != n) {
                return Err(Failed::Sent("conflicting Content-Length headers in the answer".to_owned()));
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
        return Err(Failed::Sent("Transfer-Encoding in an HTTP/1.0 answer".to_owned()));
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
fn content_length_value(value: &[u8]) -> Option<u64> {
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

fn too_large(max_bytes: usize) -> Failed {
    Failed::Sent(format!("answer larger than {max_bytes} bytes"))
}

impl Upstream {
    pub fn new(authority: Authority, max_idle: usize, connect_timeout: Duration) -> Self {
        Self { authority, idle: Mutex::new(Vec::new()), max_idle, connect_timeout }
    }

    /// Send `out` and read the answer, at most `max_bytes` of body.
    pub async fn request(&self, out: Outgoing<'_>, max_bytes: usize) -> Result<Answer, Error> {
        let host = self.authority.as_str();
        let mut conn = match self.checkout() {
            Some(conn) => conn,
            None => self.connect().await?,
        };
        loop {
            match conn.exchange(&out, host, max_bytes).await {
                Ok((answer, keep_alive)) => {
                    self.checkin(conn, keep_alive);
                    return Ok(answer);
                }
                // Only a reused connection is stale, so this sends once more at most.
                Err(Failed::Stale(detail)) => {
                    tracing::debug!(worker = %self.authority, detail, "idle connection was closed; sending on a new one");
                    conn = self.connect().await?;
                }
                Err(Failed::NotSent(detail)) => return Err(Error::Connect(detail)),
                Err(Failed::Sent(detail)) => return Err(Error::Exchange(detail)),
            }
        }
    }

    /// The most recently used idle connection.
    fn checkout(&self) -> Option<Connection> {
        self.lock().pop().map(|i| i.conn)
    }

    fn checkin(&self, mut conn: Connection, keep_alive: bool) {
        if !keep_alive {
            return;
        }
        if conn.rbuf.capacity() > KEEP_BUFFER_BYTES {
            conn.rbuf = BytesMut::new();
        }
        if conn.wbuf.capacity() > KEEP_BUFFER_BYTES {
            conn.wbuf = Vec::new();
        }
        let mut idle = self.lock();
        if idle.len() < self.max_idle {
            idle.push(Idle { conn, since: Instant::now() });
        }
    }

    async fn connect(&self) -> Result<Connection, Error> {
        // `[::1]` in a URL is `::1` to the resolver.
        let host = self.authority.host().trim_start_matches('[').trim_end_matches(']');
        let port = self.authority.port_u16().unwrap_or(80);
        let stream = match tokio::time::timeout(self.connect_timeout, TcpStream::connect((host, port))).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(Error::Connect(format!("connecting to {}: {e}", self.authority))),
            Err(_) => return Err(Error::Connect(format!("connecting to {}: timed out", self.authority))),
        };
        // Small requests and answers: without it, Nagle and delayed ACKs add tens of ms.
        let _ = stream.set_nodelay(true);
        Ok(Connection::new(stream))
    }

    /// Close idle connections that the worker has closed or that have been idle for longer
    /// than `idle_timeout`.
    pub fn prune(&self, idle_timeout: Duration) {
        let now = Instant::now();
        self.lock().retain(|i| now.saturating_duration_since(i.since) < idle_timeout && !i.conn.closed_or_dirty());
    }

    pub fn idle_count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        match self.idle.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::net::TcpListener;

    use super::*;

    /// What a scripted worker saw.
    #[derive(Default)]
    struct Seen {
        connections: usize,
        requests: Vec<String>,
    }

    /// A worker speaking raw bytes: connection `i` answers its requests with `script[i]` in order
    /// (one answer per request read; an empty answer: hang up after reading the request), then
    /// closes. Connections beyond the script are closed at once.
    async fn scripted(script: Vec<Vec<&'static [u8]>>) -> (Authority, Arc<Mutex<Seen>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s = Arc::clone(&seen);
        tokio::spawn(async move {
            let mut script = script.into_iter();
            loop {
                let (mut sock, _) = listener.accept().await.unwrap();
                s.lock().unwrap().connections += 1;
                let answers = script.next().unwrap_or_default();
                let s = Arc::clone(&s);
                tokio::spawn(async move {
                    let mut buf = BytesMut::new();
                    for answer in answers {
                        let Some(req) = read_request(&mut sock, &mut buf).await else { return };
                        s.lock().unwrap().requests.push(req);
                        if sock.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (format!("127.0.0.1:{}", addr.port()).parse().unwrap(), seen)
    }

    async fn read_request(sock: &mut TcpStream, buf: &mut BytesMut) -> Option<String> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(head)) = req.parse(buf) {
                let len = req
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .map_or(0, |h| std::str::from_utf8(h.value).unwrap().parse::<usize>().unwrap());
                if buf.len() >= head + len {
                    let raw = buf.split_to(head + len);
                    return Some(String::from_utf8(raw.to_vec()).unwrap());
                }
            }
            if sock.read_buf(buf).await.ok()? == 0 {
                return None;
            }
        }
    }

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";

    fn upstream(authority: Authority) -> Upstream {
        Upstream::new(authority, 4, Duration::from_secs(2))
    }

    async fn get(u: &Upstream) -> Result<Answer, Error> {
        u.request(Outgoing::get("/predict?query=hi"), 1024).await
    }

    #[tokio::test]
    async fn length_delimited_answers_reuse_the_connection() {
        let (addr, seen) = scripted(vec![vec![OK, OK, OK]]).await;
        let u = upstream(addr.clone());
        for _ in 0..3 {
            let a = get(&u).await.unwrap();
            assert_eq!(a.status, StatusCode::OK);
            assert_eq!(a.content_type.unwrap(), "application/json");
            assert_eq!(&a.body[..], b"{}");
        }
        assert_eq!(u.idle_count(), 1);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.connections, 1);
        assert_eq!(seen.requests[0], format!("GET /predict?query=hi HTTP/1.1\r\nhost: {addr}\r\n\r\n"));
    }

    #[tokio::test]
    async fn a_post_carries_its_body_type_and_length() {
        let (addr, seen) = scripted(vec![vec![OK]]).await;
        let ct = HeaderValue::from_static("application/json");
        let out = Outgoing {
            method: &Method::POST,
            path_and_query: "/predict",
            content_type: Some(&ct),
            body: br#"{"query":"hi"}"#,
        };
        upstream(addr.clone()).request(out, 1024).await.unwrap();
        assert_eq!(
            seen.lock().unwrap().requests[0],
            format!(
                "POST /predict HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: 14\r\n\r\n{{\"query\":\"hi\"}}"
            )
        );
    }

    #[tokio::test]
    async fn chunked_answers_are_reassembled_and_trailers_dropped() {
        const CHUNKED: &[u8] =
            b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: gzip, chunked\r\nRetry-After: 2\r\n\r\n\
            4;ext=1\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\nx-trailer: y\r\n\r\n";
        let (addr, seen) = scripted(vec![vec![CHUNKED, OK]]).await;
        let u = upstream(addr);
        let a = get(&u).await.unwrap();
        assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(a.retry_after.unwrap(), "2");
        assert_eq!(&a.body[..], b"{\"a\":1}");
        assert_eq!(&get(&u).await.unwrap().body[..], b"{}", "the connection is reusable after the trailers");
        assert_eq!(seen.lock().unwrap().connections, 1);
    }

    #[tokio::test]
    async fn interim_answers_are_skipped_and_bodiless_statuses_have_no_body() {
        const CONTINUE_THEN_204: &[u8] =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\ncontent-length: 7\r\n\r\n";
        let (addr, seen) = scripted(vec![vec![CONTINUE_THEN_204, OK]]).await;
        let u = upstream(addr);
        let a = get(&u).await.unwrap();
        assert_eq!(a.status, StatusCode::NO_CONTENT);
        assert!(a.body.is_empty());
        assert_eq!(get(&u).await.unwrap().status, StatusCode::OK);
        assert_eq!(seen.lock().unwrap().connections, 1);
    }

    #[tokio::test]
    async fn close_delimited_and_connection_close_answers_are_not_reused() {
        const UNTIL_CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\n\r\nall of it";
        const CLOSE: &[u8] = b"HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-length: 2\r\n\r\nok";
        const HTTP10: &[u8] = b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let (addr, seen) = scripted(vec![vec![UNTIL_CLOSE], vec![CLOSE], vec![HTTP10], vec![OK]]).await;
        let u = upstream(addr);
        assert_eq!(&get(&u).await.unwrap().body[..], b"all of it");
        assert_eq!(&get(&u).await.unwrap().body[..], b"ok");
        assert_eq!(&get(&u).await.unwrap().body[..], b"ok");
        assert_eq!(u.idle_count(), 0);
        assert_eq!(&get(&u).await.unwrap().body[..], b"{}");
        assert_eq!(u.idle_count(), 1);
        assert_eq!(seen.lock().unwrap().connections, 4);
    }

    #[tokio::test]
    async fn a_keep_alive_connection_closed_by_the_worker_is_replaced_without_an_error() {
        // The first connection answers once and closes: the second request finds it dead.
        let (addr, seen) = scripted(vec![vec![OK], vec![OK]]).await;
        let u = upstream(addr);
        get(&u).await.unwrap();
        assert_eq!(u.idle_count(), 1);
        assert_eq!(get(&u).await.unwrap().status, StatusCode::OK);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.connections, 2);
        assert_eq!(seen.requests.len(), 2, "the request reached the worker once");
    }

    #[tokio::test]
    async fn broken_answers_are_exchange_errors() {
        const CUT: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc";
        const GARBAGE: &[u8] = b"SMTP ready\r\n\r\n";
        const CONFLICT: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nabc";
        const HUGE: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n";
        const BAD_CHUNK: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n";
        for answer in [CUT, GARBAGE, CONFLICT, HUGE, BAD_CHUNK] {
            let (addr, _) = scripted(vec![vec![answer]]).await;
            let u = upstream(addr);
            let e = get(&u).await.unwrap_err();
            assert!(!e.is_connect(), "{e}");
            assert_eq!(u.idle_count(), 0);
        }
    }

    #[test]
    fn content_lengths_are_digits_or_a_list_of_one_value() {
        assert_eq!(content_length_value(b"42"), Some(42));
        assert_eq!(content_length_value(b"007"), Some(7));
        assert_eq!(content_length_value(b"42, 42"), Some(42));
        for bad in [&b""[..], b"+42", b"-1", b"4 2", b"42, 43", b"42,", b"0x10", b"99999999999999999999999"] {
            assert_eq!(content_length_value(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[tokio::test]
    async fn a_worker_that_closes_before_answering_a_new_connection_is_an_exchange_error() {
        let (addr, seen) = scripted(vec![vec![b""]]).await;
        let e = get(&upstream(addr)).await.unwrap_err();
        assert!(!e.is_connect(), "the request was sent: {e}");
        assert_eq!(seen.lock().unwrap().requests.len(), 1);
    }

    #[tokio::test]
    async fn idle_connections_do_not_keep_large_buffers() {
        let mut big = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", 200_000).into_bytes();
        big.resize(big.len() + 200_000, b'x');
        let big: &'static [u8] = Box::leak(big.into_boxed_slice());
        let (addr, _) = scripted(vec![vec![big]]).await;
        let u = upstream(addr);
        let body = vec![b'y'; 300_000];
        let out = Outgoing { method: &Method::POST, path_and_query: "/predict", content_type: None, body: &body };
        assert_eq!(u.request(out, 1 << 20).await.unwrap().body.len(), 200_000);
        let idle = u.lock();
        assert_eq!(idle.len(), 1);
        assert!(idle[0].conn.rbuf.capacity() <= KEEP_BUFFER_BYTES);
        assert!(idle[0].conn.wbuf.capacity() <= KEEP_BUFFER_BYTES);
    }

    #[tokio::test]
    async fn ipv6_workers_are_reached() {
        // Where the machine has no IPv6 loopback there is nothing to test.
        let Ok(listener) = TcpListener::bind("[::1]:0").await else { return };
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = BytesMut::new();
            read_request(&mut sock, &mut buf).await.unwrap();
            sock.write_all(OK).await.unwrap();
        });
        let u = upstream(format!("[::1]:{port}").parse().unwrap());
        assert_eq!(get(&u).await.unwrap().status, StatusCode::OK);
    }

    #[tokio::test]
    async fn nothing_listening_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let e = get(&upstream(format!("127.0.0.1:{port}").parse().unwrap())).await.unwrap_err();
        assert!(e.is_connect(), "{e}");
    }

    #[tokio::test]
    async fn prune_drops_connections_the_worker_closed_and_old_ones() {
        let (addr, _) = scripted(vec![vec![OK], vec![OK, OK]]).await;
        let u = upstream(addr);
        get(&u).await.unwrap();
        // The worker closes the first connection after its answer; wait until the reactor has
        // seen the close (no timing guess: poll until pruned, bounded).
        tokio::time::timeout(Duration::from_secs(10), async {
            while u.idle_count() == 1 {
                u.prune(Duration::from_secs(60));
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the closed connection is pruned");
        get(&u).await.unwrap();
        assert_eq!(u.idle_count(), 1);
        u.prune(Duration::ZERO);
        assert_eq!(u.idle_count(), 0);
    }
}
