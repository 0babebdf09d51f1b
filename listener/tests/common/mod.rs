//! A listener on 127.0.0.1:0 serving a small test service, and a raw HTTP/1 client that reads
//! answers byte by byte as a client would see them.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use listener::{BodyReader, Config, Metrics, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Largest body `POST /echo` accepts.
pub const ECHO_LIMIT: usize = 1 << 20;

/// A running listener.
pub struct Running {
    pub addr: SocketAddr,
    pub bodies: BodyReader,
    pub metrics: Metrics,
    pub config: Config,
    stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<()>,
}

impl Running {
    /// Asks for the drain; `task` ends when it is over.
    pub fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// Timeouts short enough for tests (they run on tokio's paused clock where they can).
pub fn config() -> Config {
    Config {
        header_read_timeout: Duration::from_secs(2),
        body_read_timeout: Duration::from_secs(3),
        idle_timeout: Duration::from_secs(5),
        max_connections: 1000,
        max_connections_per_address: 1000,
        max_buffered_body_bytes: 64 << 20,
        drain_timeout: Duration::from_secs(10),
        retry_after_s: 1,
    }
}

/// The test service:
/// - `GET /` -> 200 `ok`;
/// - `POST /echo` -> the body read through [`BodyReader::collect`] (limit [`ECHO_LIMIT`]), or
///   its JSON error;
/// - `GET /slow?ms=N` -> 200 after N ms;
/// - `GET /big?kib=N` -> 200 with N KiB.
async fn handle(bodies: BodyReader, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let query = req.uri().query().unwrap_or("").to_owned();
    let num = |name: &str| {
        query.split('&').find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('='))?.parse::<u64>().ok())
    };
    match (req.method().clone(), req.uri().path()) {
        (Method::POST, "/echo") => match bodies.collect(req.into_body(), ECHO_LIMIT).await {
            Ok(body) => Response::new(Full::new(body)),
            Err(e) => e.response(1),
        },
        (Method::GET, "/slow") => {
            tokio::time::sleep(Duration::from_millis(num("ms").unwrap_or(100))).await;
            Response::new(Full::new(Bytes::from_static(b"slow")))
        }
        (Method::GET, "/big") => {
            Response::new(Full::new(Bytes::from(vec![b'x'; num("kib").unwrap_or(1) as usize * 1024])))
        }
        _ => Response::new(Full::new(Bytes::from_static(b"ok"))),
    }
}

pub async fn start(config: Config) -> Running {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let metrics = Metrics::default();
    let server = Server::new(tcp, config, metrics.clone());
    let config = server.config().clone();
    let bodies = server.bodies();
    let b = bodies.clone();
    let service = hyper::service::service_fn(move |req| {
        let b = b.clone();
        async move { Ok::<_, Infallible>(handle(b, req).await) }
    });
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(service, async {
        let _ = rx.await;
    }));
    Running { addr, bodies, metrics, config, stop: Some(tx), task }
}

/// One answer as the client read it.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The JSON error body's `error_type`; panics if it is not one.
    pub fn error_type(&self) -> String {
        let e: wire::ErrorBody = serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not a JSON error body ({e}): {:?}", String::from_utf8_lossy(&self.body)));
        e.error_type.as_str().to_owned()
    }
}

/// Parses one complete answer at the start of `buf`: the answer and its length, `Ok(None)` if
/// more bytes are needed, `Err` if the bytes are not an HTTP/1.1 answer with a length.
pub fn parse_answer(buf: &[u8]) -> Result<Option<(Answer, usize)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let head = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("malformed answer head: {e}: {:?}", String::from_utf8_lossy(buf))),
    };
    let status = StatusCode::from_u16(resp.code.ok_or("no status")?).map_err(|e| e.to_string())?;
    let headers: Vec<(String, String)> =
        resp.headers.iter().map(|h| (h.name.to_owned(), String::from_utf8_lossy(h.value).into_owned())).collect();
    let len = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .ok_or_else(|| format!("answer without content-length: {headers:?}"))?
        .1
        .parse::<usize>()
        .map_err(|e| e.to_string())?;
    if buf.len() < head + len {
        return Ok(None);
    }
    let body = Bytes::copy_from_slice(&buf[head..head + len]);
    Ok(Some((Answer { status, headers, body }, head + len)))
}

/// A raw client connection.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

/// How reading ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Closed {
    /// The server closed (end of stream or reset).
    Closed,
    /// Still open after the wait.
    Open,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Self {
        Self::from_stream(TcpStream::connect(addr).await.unwrap())
    }

    pub fn from_stream(stream: TcpStream) -> Self {
        Self { stream, buf: Vec::new() }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Sends, ignoring a connection the server has closed.
    pub async fn try_send(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).await.is_ok()
    }

    /// The next answer, waiting at most `wait`; `None` if the connection closed (or the wait
    /// ran out) before a whole answer.
    pub async fn answer_within(&mut self, wait: Duration) -> Option<Answer> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some((a, n)) = parse_answer(&self.buf).unwrap() {
                self.buf.drain(..n);
                return Some(a);
            }
            let mut chunk = [0u8; 8192];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    pub async fn answer(&mut self) -> Answer {
        self.answer_within(Duration::from_secs(30)).await.expect("no answer")
    }

    /// Waits up to `wait` for the server to close; bytes read meanwhile are kept.
    pub async fn closed_within(&mut self, wait: Duration) -> Closed {
        let deadline = Instant::now() + wait;
        loop {
            let mut chunk = [0u8; 8192];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return Closed::Closed,
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
                Err(_) => return Closed::Open,
            }
        }
    }

    /// Bytes read but not yet taken as an answer.
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }

    /// Takes a complete answer from the bytes already read.
    pub fn take_answer(&mut self) -> Option<Answer> {
        let (a, n) = parse_answer(&self.buf).unwrap()?;
        self.buf.drain(..n);
        Some(a)
    }
}

pub fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n").into_bytes()
}

pub fn post(path: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!("POST {path} HTTP/1.1\r\nhost: test\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
    r.extend_from_slice(body);
    r
}

/// One `GET /` on a new connection: the status.
pub async fn get_ok(addr: SocketAddr) -> StatusCode {
    let mut c = Client::connect(addr).await;
    c.send(&get("/")).await;
    c.answer().await.status
}

/// Waits (bounded) until `cond` holds, polling every 10 ms of the clock in use.
pub async fn until(what: &str, wait: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + wait;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
