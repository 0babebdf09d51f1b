//! A lean HTTP/1.1 client connection: the request is one prepared buffer, the answer's head is
//! parsed in place by the workspace's HTTP/1 codec (the `http1-client` crate, on `httparse`, the
//! parser hyper uses; the gateway's upstream reads its workers' answers with the same one) and
//! its body skipped unless it is an error's.
//!
//! Why not hyper's client: per request it hands the request to a dispatcher task through a
//! channel, builds and parses `HeaderMap`s and streams the body through another channel; that is
//! what kept the previous `loadtest` at about half of `wrk`'s requests per second on one core
//! (the gateway hit the same wall: `gateway/src/upstream`, whose framing rules are the codec's).
//! A load generator needs the status, the framing, keep-alive, and the body of an error.
//!
//! Framing and keep-alive are the codec's (see `http1_client`): the connection is kept when the
//! head allows it and the body was delimited and read to the end with nothing after it.

use std::io;
use std::net::SocketAddr;

use bytes::{Buf, Bytes, BytesMut};
use http::Method;
use http1_client::{Framing, Head, MAX_HEAD_BYTES, parse_head};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
        let status = h.status.as_u16();
        let keep_body = want_body || !(200..300).contains(&status);
        let (body, clean) = match h.framing {
            Framing::Empty => (Bytes::new(), true),
            Framing::Length(n) => (self.read_length(n, keep_body).await?, true),
            Framing::Chunked => (self.read_chunked(keep_body).await?, true),
            Framing::UntilClose => (self.read_to_end(keep_body).await?, false),
        };
        self.reused = true;
        Ok(Answer {
            status,
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
                let method = if head_request { &Method::HEAD } else { &Method::GET };
                match parse_head(&self.rbuf, method).map_err(|_| Failure::Protocol("invalid answer head"))? {
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
