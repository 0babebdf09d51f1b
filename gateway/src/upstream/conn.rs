//! One connection to a worker and its buffers: write one request, read one answer to its end.

use bytes::{Buf, Bytes, BytesMut};
use http::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::codec::{self, Framing, Head, MAX_HEAD_BYTES};
use super::{Answer, Charge, Limit, Outgoing};

/// Bodies up to this size are copied out of the read buffer, so that the buffer is reused.
const COPY_BODY_BYTES: usize = 16 * 1024;

/// One connection to the worker and its buffers.
pub(super) struct Connection {
    stream: TcpStream,
    /// Bytes read and not consumed yet.
    rbuf: BytesMut,
    wbuf: Vec<u8>,
    /// Whether an answer has been read on it before (a reused keep-alive connection).
    reused: bool,
}

/// Why an exchange on one connection failed.
pub(super) enum Failed {
    /// A reused connection ended before any byte of the answer: the worker closed it (idle) and
    /// did not process the request.
    Stale(String),
    /// The request could not be written.
    NotSent(String),
    /// The request was written; the answer is missing, cut short or malformed.
    Sent(String),
    /// The answer's body is over the limit of one answer.
    TooLarge(String),
    /// The answer's body does not fit in the budget of answers held at once.
    Budget(String),
}

/// The body's limits while it is read: its size, and its charge in the budget, if any.
struct Room {
    max_bytes: usize,
    charge: Option<Charge>,
}

impl Room {
    fn new(limit: Limit<'_>) -> Self {
        Self { max_bytes: limit.max_bytes, charge: limit.budget.map(Charge::new) }
    }

    /// Room for `total` bytes of body, or why not.
    fn fit(&mut self, total: usize) -> Result<(), Failed> {
        if total > self.max_bytes {
            return Err(Failed::TooLarge(format!("answer larger than {} bytes", self.max_bytes)));
        }
        if let Some(c) = &mut self.charge
            && !c.grow_to(total)
        {
            return Err(Failed::Budget(format!("no room for an answer of {total} bytes in the answer budget")));
        }
        Ok(())
    }
}

impl Connection {
    pub(super) fn new(stream: TcpStream) -> Self {
        Self { stream, rbuf: BytesMut::with_capacity(8 * 1024), wbuf: Vec::with_capacity(512), reused: false }
    }

    /// Send `out` and read its answer; `true` with it when the connection may be reused.
    pub(super) async fn exchange(
        &mut self,
        out: &Outgoing<'_>,
        host: &str,
        limit: Limit<'_>,
    ) -> Result<(Answer, bool), Failed> {
        let mut room = Room::new(limit);
        codec::encode(&mut self.wbuf, out, host);
        if let Err(e) = self.stream.write_all(&self.wbuf).await {
            let detail = format!("sending the request: {e}");
            return Err(if self.reused { Failed::Stale(detail) } else { Failed::NotSent(detail) });
        }
        let head = self.read_head(out.method).await?;
        let (body, clean_end) = match head.framing {
            Framing::Empty => (Bytes::new(), true),
            Framing::Length(n) => (self.read_length(n, &mut room).await?, true),
            Framing::Chunked => (self.read_chunked(&mut room).await?, true),
            Framing::UntilClose => (self.read_to_end(&mut room).await?, false),
        };
        let body_is_empty = body.is_empty();
        // Bytes after the answer: the worker is not speaking HTTP/1.1 as expected.
        let keep_alive = head.keep_alive && clean_end && self.rbuf.is_empty();
        self.reused = true;
        let answer = Answer {
            status: head.status,
            content_type: head.content_type,
            retry_after: head.retry_after,
            body,
            charge: room.charge.filter(|_| !body_is_empty),
        };
        Ok((answer, keep_alive))
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
                match codec::parse_head(&self.rbuf, method).map_err(Failed::Sent)? {
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

    async fn read_length(&mut self, n: u64, room: &mut Room) -> Result<Bytes, Failed> {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        // Refused before a byte of it is read or a buffer reserved.
        room.fit(n)?;
        self.rbuf.reserve(n.saturating_sub(self.rbuf.len()));
        while self.rbuf.len() < n {
            self.read_more().await?;
        }
        Ok(self.take(n))
    }

    async fn read_to_end(&mut self, room: &mut Room) -> Result<Bytes, Failed> {
        loop {
            room.fit(self.rbuf.len())?;
            match self.fill().await {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => return Err(Failed::Sent(format!("reading the answer: {e}"))),
            }
        }
        let n = self.rbuf.len();
        Ok(self.take(n))
    }

    async fn read_chunked(&mut self, room: &mut Room) -> Result<Bytes, Failed> {
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
            let size = usize::try_from(size).unwrap_or(usize::MAX);
            // Refused before the chunk is read.
            room.fit(body.len().saturating_add(size))?;
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

    /// Free buffers grown beyond `keep` bytes (by a large request or answer).
    pub(super) fn shrink_buffers(&mut self, keep: usize) {
        if self.rbuf.capacity() > keep {
            self.rbuf = BytesMut::new();
        }
        if self.wbuf.capacity() > keep {
            self.wbuf = Vec::new();
        }
    }

    #[cfg(test)]
    pub(super) fn buffer_capacities(&self) -> (usize, usize) {
        (self.rbuf.capacity(), self.wbuf.capacity())
    }

    /// Closed by the worker, or bytes arrived that no request asked for.
    pub(super) fn closed_or_dirty(&self) -> bool {
        let mut probe = [0u8; 1];
        !matches!(self.stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}
