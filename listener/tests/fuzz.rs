//! Property: whatever bytes a client sends (arbitrary, or requests mutated byte by byte, sent in
//! pieces with pauses, then half-closed or not), the listener does not panic, everything it
//! writes back is a sequence of well-formed HTTP/1.1 answers (JSON `{"error", "error_type"}`
//! on every error), and it closes the connection within its timeouts.
//!
//! Cases: `LISTENER_FUZZ_CASES` (default 2000); a long run is a benchmark, e.g.
//! `LISTENER_FUZZ_CASES=10000000 cargo test --release -p listener --test fuzz`. Runs on tokio's
//! paused clock: timeouts cost no real time.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use listener::{BodyReader, Config, Server};
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

static PANICS: AtomicUsize = AtomicUsize::new(0);

const HEADER: Duration = Duration::from_secs(2);
const BODY: Duration = Duration::from_secs(3);
const IDLE: Duration = Duration::from_secs(5);

fn config() -> Config {
    Config {
        header_read_timeout: HEADER,
        body_read_timeout: BODY,
        idle_timeout: IDLE,
        max_connections: 64,
        max_connections_per_address: 64,
        max_buffered_body_bytes: 1 << 20,
        drain_timeout: Duration::from_secs(5),
        retry_after_s: 1,
    }
}

/// `POST|PUT /echo` echoes the body (at most 4 KiB); `CONNECT` is 405 (as in both binaries: a
/// 2xx answer to it would open a tunnel); everything else is 200 `ok`.
async fn handle(bodies: BodyReader, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() == Method::CONNECT {
        let body = Bytes::from_static(br#"{"error":"method not allowed","error_type":"method_not_allowed"}"#);
        let mut resp = Response::new(Full::new(body));
        *resp.status_mut() = http::StatusCode::METHOD_NOT_ALLOWED;
        return resp;
    }
    if matches!(*req.method(), Method::POST | Method::PUT) && req.uri().path() == "/echo" {
        return match bodies.collect(req.into_body(), 4096).await {
            Ok(b) => Response::new(Full::new(b)),
            Err(e) => e.response(1),
        };
    }
    Response::new(Full::new(Bytes::from_static(b"ok")))
}

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Mutation {
    Set(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Duplicate(usize, usize),
    Truncate(usize),
}

#[derive(Debug, Clone)]
struct Case {
    bytes: Vec<u8>,
    /// Where the bytes are cut into writes, and the pause before each write.
    cuts: Vec<(usize, u64)>,
    half_close: bool,
}

fn special_byte() -> impl Strategy<Value = u8> {
    prop_oneof![Just(b'\r'), Just(b'\n'), Just(b' '), Just(b':'), Just(0u8), Just(b'\t'), Just(b'0'), any::<u8>()]
}

fn request() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        Just("GET"),
        Just("POST"),
        Just("PUT"),
        Just("DELETE"),
        Just("OPTIONS"),
        Just("BREW"),
        Just("CONNECT")
    ];
    let target = prop_oneof![
        Just("/".to_owned()),
        Just("/echo".to_owned()),
        Just("*".to_owned()),
        Just("http://example.com/echo".to_owned()),
        "/[a-z0-9%?=&./]{0,40}",
    ];
    let version = prop_oneof![4 => Just("HTTP/1.1"), 1 => Just("HTTP/1.0")];
    let extra = proptest::collection::vec(("[a-zA-Z-]{1,12}", "[ -~]{0,24}"), 0..4);
    let framing = prop_oneof![
        Just(0u8), // content-length, right
        Just(1),   // content-length, wrong
        Just(2),   // chunked
        Just(3),   // none
    ];
    let body = proptest::collection::vec(any::<u8>(), 0..300);
    let connection = prop_oneof![Just(""), Just("connection: close\r\n"), Just("connection: keep-alive\r\n")];
    let expect = prop_oneof![4 => Just(""), 1 => Just("expect: 100-continue\r\n")];
    (method, target, version, extra, framing, body, connection, expect, 1usize..64).prop_map(
        |(method, target, version, extra, framing, body, connection, expect, chunk)| {
            let mut r = format!("{method} {target} {version}\r\nhost: fuzz\r\n{connection}{expect}").into_bytes();
            for (k, v) in extra {
                r.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
            }
            match framing {
                0 => r.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes()),
                1 => r.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len() * 2 + 1).as_bytes()),
                2 => r.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n"),
                _ => r.extend_from_slice(b"\r\n"),
            }
            if framing == 2 {
                for piece in body.chunks(chunk) {
                    r.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                    r.extend_from_slice(piece);
                    r.extend_from_slice(b"\r\n");
                }
                r.extend_from_slice(b"0\r\n\r\n");
            } else {
                r.extend_from_slice(&body);
            }
            r
        },
    )
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), special_byte()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<usize>(), proptest::collection::vec(special_byte(), 1..8)).prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), 1usize..16).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<usize>(), 1usize..64).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn apply(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        if bytes.is_empty() {
            break;
        }
        let at = |i: usize| i % bytes.len();
        match m {
            Mutation::Set(i, b) => {
                let i = at(*i);
                bytes[i] = *b;
            }
            Mutation::Insert(i, b) => {
                let i = at(*i);
                bytes.splice(i..i, b.iter().copied());
            }
            Mutation::Delete(i, n) => {
                let i = at(*i);
                let end = (i + n).min(bytes.len());
                bytes.drain(i..end);
            }
            Mutation::Duplicate(i, n) => {
                let i = at(*i);
                let end = (i + n).min(bytes.len());
                let copy = bytes[i..end].to_vec();
                bytes.splice(end..end, copy);
            }
            Mutation::Truncate(i) => {
                let i = at(*i);
                bytes.truncate(i);
            }
        }
    }
    bytes
}

fn case() -> impl Strategy<Value = Case> {
    let bytes = prop_oneof![
        1 => proptest::collection::vec(any::<u8>(), 0..400),
        4 => (proptest::collection::vec(request(), 1..4), proptest::collection::vec(mutation(), 0..4))
            .prop_map(|(reqs, muts)| apply(reqs.concat(), &muts)),
    ];
    // Pauses mostly short, sometimes past a timeout.
    let pause = prop_oneof![6 => 0u64..50, 1 => 1000u64..7000];
    (bytes, proptest::collection::vec((any::<usize>(), pause), 0..4), any::<bool>()).prop_map(
        |(bytes, cuts, half_close)| {
            let mut cuts: Vec<(usize, u64)> =
                cuts.into_iter().map(|(i, p)| (if bytes.is_empty() { 0 } else { i % bytes.len() }, p)).collect();
            cuts.sort_unstable();
            Case { bytes, cuts, half_close }
        },
    )
}

// ---------------------------------------------------------------------------------------------
// The check
// ---------------------------------------------------------------------------------------------

/// Splits what the server wrote into answers; an error if anything is not a whole, well-formed
/// answer (1xx interim answers are skipped), or an error answer without a JSON error body.
fn check_answers(mut buf: &[u8]) -> Result<usize, String> {
    let mut n = 0;
    while !buf.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        let head = match resp.parse(buf) {
            Ok(httparse::Status::Complete(h)) => h,
            Ok(httparse::Status::Partial) => return Err(format!("cut answer: {:?}", String::from_utf8_lossy(buf))),
            Err(e) => return Err(format!("malformed answer ({e}): {:?}", String::from_utf8_lossy(buf))),
        };
        let code = resp.code.unwrap_or(0);
        if (100..200).contains(&code) {
            buf = &buf[head..];
            continue;
        }
        let len = resp
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok())
            .ok_or_else(|| format!("answer {code} without content-length"))?;
        let body = buf.get(head..head + len).ok_or_else(|| format!("answer {code} cut in its body"))?;
        if code >= 400 {
            serde_json::from_slice::<wire::ErrorBody>(body).map_err(|e| {
                format!("answer {code} without a JSON error body ({e}): {:?}", String::from_utf8_lossy(body))
            })?;
        }
        buf = &buf[head + len..];
        n += 1;
    }
    Ok(n)
}

async fn run_case(addr: SocketAddr, case: &Case) -> Result<(), TestCaseError> {
    let stream = TcpStream::connect(addr).await.map_err(|e| TestCaseError::fail(format!("connect: {e}")))?;
    let (mut rd, mut wr) = stream.into_split();
    // The server closes within its timeouts of the last byte sent: a head or body in progress
    // ends at most BODY after (or HEADER), the answer is written, then IDLE, then 2 s of
    // lingering close. Pauses add to it.
    let pauses: u64 = case.cuts.iter().map(|c| c.1).sum();
    let bound = Duration::from_millis(pauses) + HEADER + BODY + IDLE + listener::LINGER_TIME + Duration::from_secs(1);
    let started = Instant::now();
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        let closed = tokio::time::timeout(bound, async {
            let mut chunk = [0u8; 4096];
            loop {
                match rd.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await
        .is_ok();
        (got, closed)
    });
    let mut from = 0;
    for &(cut, pause) in case.cuts.iter().chain(std::iter::once(&(case.bytes.len(), 0))) {
        if wr.write_all(&case.bytes[from..cut]).await.is_err() {
            break;
        }
        from = cut;
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    if case.half_close {
        let _ = wr.shutdown().await;
    }
    let (got, closed) = reader.await.map_err(|e| TestCaseError::fail(format!("reader: {e}")))?;
    drop(wr);
    prop_assert!(closed, "still open {:?} after the start (bound {bound:?})", started.elapsed());
    check_answers(&got).map_err(TestCaseError::fail)?;
    Ok(())
}

#[test]
fn arbitrary_and_mutated_requests_get_well_formed_answers_or_a_close_within_the_timeouts() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));
    let cases = std::env::var("LISTENER_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    let addr = rt.block_on(async {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let server = Server::new(tcp, config(), listener::Metrics::default());
        let bodies = server.bodies();
        let service = hyper::service::service_fn(move |req| {
            let bodies = bodies.clone();
            async move { Ok::<_, Infallible>(handle(bodies, req).await) }
        });
        tokio::spawn(server.serve(service, std::future::pending()));
        addr
    });
    let mut runner = TestRunner::new(RunnerConfig { cases, failure_persistence: None, ..RunnerConfig::default() });
    let result = runner.run(&case(), |case| {
        rt.block_on(async {
            run_case(addr, &case).await?;
            // Still serving, and nothing panicked.
            let mut s = TcpStream::connect(addr).await.map_err(|e| TestCaseError::fail(e.to_string()))?;
            s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
            let mut got = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
            prop_assert!(
                got.starts_with(b"HTTP/1.1 200 OK\r\n"),
                "control request: {:?}",
                String::from_utf8_lossy(&got)
            );
            prop_assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a panic");
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
