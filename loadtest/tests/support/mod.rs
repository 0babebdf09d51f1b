//! In-test servers: a scripted HTTP/1.1 server on raw sockets (so it can also stall, reset and
//! answer in chunks), and an h2c server on hyper. Both bind `127.0.0.1:0`.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    /// The `query` parameter, decoded.
    pub fn query(&self) -> String {
        let q = self.target.split_once("query=").map_or("", |(_, q)| q);
        percent_encoding::percent_decode_str(q).decode_utf8_lossy().into_owned()
    }
}

/// What the server does with a request.
#[derive(Debug, Clone)]
pub enum Action {
    /// Write these bytes (a whole answer) at once.
    Answer(Bytes),
    /// Wait, then answer.
    Later(Duration, Bytes),
    /// Close the connection without answering.
    Close,
    /// Answer (as if keeping the connection), then close it: an idle keep-alive close.
    AnswerThenClose(Bytes),
}

pub const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 35\r\n\r\n{\"intent\":\"PlayMusic\",\"score\":0.98}";

/// A JSON error answer with `Content-Length`.
pub fn json_error(status: u16, error_type: &str) -> Bytes {
    let body = format!(r#"{{"error":"test","error_type":"{error_type}"}}"#);
    Bytes::from(format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ))
}

type Handler = dyn Fn(&Seen) -> Action + Send + Sync;

/// A running scripted server.
#[derive(Clone)]
pub struct Server {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicU64>,
    pub requests: Arc<AtomicU64>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Start a server answering each request as `handler` says; it keeps the first `keep`
    /// requests in `seen`.
    pub async fn start(keep: usize, handler: impl Fn(&Seen) -> Action + Send + Sync + 'static) -> Self {
        let (listener, server) = Self::bind().await;
        let handler: Arc<Handler> = Arc::new(handler);
        let s = server.clone();
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else { return };
                s.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve(sock, handler.clone(), s.clone(), keep));
            }
        });
        server
    }

    /// [`Server::start`] that holds at most `cap` connections open at once, as a per-address
    /// connection cap does: a connection past it is answered `refusal` and closed, whatever it
    /// sends. `refused` counts them.
    pub async fn capped(
        cap: u64,
        refusal: Bytes,
        handler: impl Fn(&Seen) -> Action + Send + Sync + 'static,
    ) -> (Self, Arc<AtomicU64>) {
        let (listener, server) = Self::bind().await;
        let refused = Arc::new(AtomicU64::new(0));
        let open = Arc::new(AtomicU64::new(0));
        let handler: Arc<Handler> = Arc::new(handler);
        let (s, r) = (server.clone(), refused.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else { return };
                if open.load(Ordering::Acquire) >= cap {
                    r.fetch_add(1, Ordering::Relaxed);
                    let refusal = refusal.clone();
                    tokio::spawn(async move {
                        let _ = sock.write_all(&refusal).await;
                        let _ = sock.shutdown().await;
                        // Read what the client sent, so that the close is not a reset.
                        let mut scratch = [0u8; 1024];
                        while matches!(sock.read(&mut scratch).await, Ok(n) if n > 0) {}
                    });
                    continue;
                }
                open.fetch_add(1, Ordering::AcqRel);
                s.connections.fetch_add(1, Ordering::Relaxed);
                let (handler, s, open) = (handler.clone(), s.clone(), open.clone());
                tokio::spawn(async move {
                    serve(sock, handler, s, 0).await;
                    open.fetch_sub(1, Ordering::AcqRel);
                });
            }
        });
        (server, refused)
    }

    /// A listener on `127.0.0.1:0` and the server's counters, nothing served yet.
    async fn bind() -> (TcpListener, Self) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = Self {
            addr: listener.local_addr().unwrap(),
            connections: Arc::default(),
            requests: Arc::default(),
            seen: Arc::default(),
        };
        (listener, server)
    }

    /// Answers 200 to everything.
    pub async fn ok() -> Self {
        Self::start(0, |_| Action::Answer(Bytes::from_static(OK))).await
    }
}

async fn serve(mut sock: TcpStream, handler: Arc<Handler>, server: Server, keep: usize) {
    let _ = sock.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        let seen = loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(len)) = req.parse(&buf) {
                let hs: Vec<(String, String)> = req
                    .headers
                    .iter()
                    .map(|h| (h.name.to_owned(), String::from_utf8_lossy(h.value).into_owned()))
                    .collect();
                let body_len: usize = hs
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.trim().parse().ok())
                    .unwrap_or(0);
                if buf.len() >= len + body_len {
                    let seen = Seen {
                        method: req.method.unwrap_or("").to_owned(),
                        target: req.path.unwrap_or("").to_owned(),
                        headers: hs,
                        body: Bytes::copy_from_slice(&buf[len..len + body_len]),
                    };
                    buf.advance(len + body_len);
                    break seen;
                }
            }
            match sock.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        server.requests.fetch_add(1, Ordering::Relaxed);
        {
            let mut s = server.seen.lock().unwrap();
            if s.len() < keep {
                s.push(seen.clone());
            }
        }
        match handler(&seen) {
            Action::Answer(b) => {
                if sock.write_all(&b).await.is_err() {
                    return;
                }
            }
            Action::Later(d, b) => {
                tokio::time::sleep(d).await;
                if sock.write_all(&b).await.is_err() {
                    return;
                }
            }
            Action::Close => return,
            Action::AnswerThenClose(b) => {
                let _ = sock.write_all(&b).await;
                return;
            }
        }
    }
}

/// Holds every request that arrives in `[first + after, first + after + length)` until that
/// window ends, where `first` is when the first request arrived: a server that stalls once for
/// a known time.
pub struct Stall {
    first: Mutex<Option<Instant>>,
    after: Duration,
    length: Duration,
    pub held: AtomicU64,
}

impl Stall {
    pub fn new(after: Duration, length: Duration) -> Arc<Self> {
        Arc::new(Self { first: Mutex::new(None), after, length, held: AtomicU64::new(0) })
    }

    /// How long a request arriving now waits.
    pub fn wait(&self) -> Duration {
        let now = Instant::now();
        let first = *self.first.lock().unwrap().get_or_insert(now);
        let (start, end) = (first + self.after, first + self.after + self.length);
        if now >= start && now < end {
            self.held.fetch_add(1, Ordering::Relaxed);
            end - now
        } else {
            Duration::ZERO
        }
    }
}

/// An h2c (HTTP/2 prior knowledge) server on hyper that answers 200 and counts connections
/// and HTTP/2 requests.
pub async fn h2c_server() -> (SocketAddr, Arc<AtomicU64>, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let conns = Arc::new(AtomicU64::new(0));
    let h2_requests = Arc::new(AtomicU64::new(0));
    let (c, r) = (conns.clone(), h2_requests.clone());
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else { return };
            c.fetch_add(1, Ordering::Relaxed);
            let r = r.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let r = r.clone();
                    async move {
                        let is_h2 = req.version() == http::Version::HTTP_2;
                        let post = req.method() == http::Method::POST;
                        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        if is_h2 && (!post || serde_json::from_slice::<serde_json::Value>(&body).is_ok()) {
                            r.fetch_add(1, Ordering::Relaxed);
                        }
                        let mut resp =
                            hyper::Response::new(Full::new(Bytes::from_static(b"{\"intent\":\"x\",\"score\":1.0}")));
                        if !is_h2 {
                            *resp.status_mut() = http::StatusCode::HTTP_VERSION_NOT_SUPPORTED;
                        }
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    (addr, conns, h2_requests)
}

/// An h2c gRPC server that counts calls and answers them in turn: a success (one message,
/// then `grpc-status: 0` in the trailers), then RESOURCE_EXHAUSTED as a trailers-only answer
/// (`grpc-status: 8` in the headers, no body), then UNAVAILABLE in the trailers after headers.
pub async fn grpc_server() -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else { return };
            let c = c.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let c = c.clone();
                    async move {
                        let grpc = req.headers().get("content-type").is_some_and(|v| v == "application/grpc");
                        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        // A gRPC message: a flag byte and a 4-byte length before the protobuf.
                        let framed = body.len() >= 5
                            && body.len() == 5 + u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
                        let n = c.fetch_add(1, Ordering::Relaxed);
                        // (body, grpc-status in the headers, grpc-status in the trailers)
                        let (data, head, tail): (&'static [u8], _, _) = match (grpc && framed, n % 3) {
                            (false, _) => (b"", None, Some("3")),
                            (true, 0) => (b"\0\0\0\0\0", None, Some("0")),
                            (true, 1) => (b"", Some("8"), None),
                            (true, _) => (b"", None, Some("14")),
                        };
                        let trailers = tail.map(|code| {
                            let mut t = http::HeaderMap::new();
                            t.insert("grpc-status", http::HeaderValue::from_static(code));
                            Ok::<_, Infallible>(t)
                        });
                        let mut resp = hyper::Response::new(
                            Full::new(Bytes::from_static(data)).with_trailers(std::future::ready(trailers)),
                        );
                        if let Some(code) = head {
                            resp.headers_mut().insert("grpc-status", http::HeaderValue::from_static(code));
                        }
                        resp.headers_mut().insert("content-type", http::HeaderValue::from_static("application/grpc"));
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    (addr, calls)
}

/// Run `loadtest` in-process with these arguments (after `--url URL`).
pub async fn run(url: &str, args: &[&str]) -> loadtest::summary::Summary {
    use clap::Parser as _;
    let mut argv = vec!["loadtest", "--url", url, "--progress", "never"];
    argv.extend_from_slice(args);
    let spec = loadtest::config::Config::try_parse_from(&argv).unwrap().spec(vec![]).unwrap();
    tokio::time::timeout(Duration::from_secs(120), loadtest::run::run(spec)).await.expect("the run ends").unwrap()
}
