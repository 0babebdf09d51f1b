//! The gateway's own HTTP/1.1 client for workers (this module's parent) checked against hyper's
//! client on generated worker answers: valid and broken framing (length, chunked with extensions
//! and trailers, close-delimited, interim answers, bodiless statuses, conflicting, signed, listed
//! or malformed lengths, codings besides chunked, both a length and a coding, bad chunks,
//! cut-short bodies, obsolete line folding, not HTTP at all), odd header spelling and spacing,
//! `Connection` handling (including a worker that closes a connection it offered to keep),
//! HTTP/1.0, delivered in random pieces. For every answer both clients must agree: the same
//! status, `Content-Type`, `Retry-After` and body, or both an error; and each must open the same
//! number of connections (the same keep-alive decisions). hyper is driven with the gateway's
//! pooling rules (see `hypers`).
//!
//! The load generator's client (`loadtest::http1`, which reads heads with the same
//! `http1-client` codec and has its own body reading and resend) is held to the same answers:
//! the same status and body, or both an error, and the same number of connections (it has no
//! use for the headers, so they are not compared).
//!
//! Deterministic: case `i` is generated from seed `i`; a failure prints the case's bytes.
//! `UPSTREAM_CASE=N` runs case N alone; `UPSTREAM_CASES=N` runs N cases (20,000 ran clean).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{Outgoing, Upstream};

const CASES: u64 = 600;
/// Answers per case, asked for one after the other (on one connection where the answers allow).
const ANSWERS: usize = 3;
const MAX_BODY: usize = 1 << 20;

/// One generated worker answer.
#[derive(Clone)]
struct Scripted {
    bytes: Vec<u8>,
    /// Pieces the bytes are written in.
    cuts: Vec<usize>,
    /// The worker closes the connection after this answer (it is close-delimited, says
    /// `close`, or is broken).
    close_after: bool,
}

/// What a client made of an answer: `Err` when it reported an error.
type Outcome = Result<(u16, Option<Vec<u8>>, Option<Vec<u8>>, Bytes), ()>;

fn pick<T: Copy>(rng: &mut StdRng, items: &[T]) -> T {
    items[rng.random_range(0..items.len())]
}

fn generate(rng: &mut StdRng) -> Scripted {
    let mut close_after = false;
    let mut head = String::new();
    // Interim answers the client must skip.
    if rng.random_bool(0.1) {
        head.push_str(pick(rng, &["HTTP/1.1 100 Continue\r\n\r\n", "HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"]));
    }
    let http10 = rng.random_bool(0.1);
    let status = pick(rng, &[200u16, 200, 200, 201, 204, 304, 400, 404, 429, 500, 503]);
    let reason = pick(rng, &["OK", "", "Any Reason At All", "Too Many Requests"]);
    let _ = write!(head, "HTTP/1.{} {status} {reason}\r\n", if http10 { 0 } else { 1 });
    if http10 && rng.random_bool(0.5) {
        head.push_str("Connection: keep-alive\r\n");
    } else if http10 {
        close_after = true;
    }
    if rng.random_bool(0.7) {
        let name = pick(rng, &["content-type", "Content-Type", "CONTENT-TYPE"]);
        let value = pick(rng, &["application/json", " application/json ", "text/plain; charset=utf-8"]);
        let _ = write!(head, "{name}:{value}\r\n");
    }
    if rng.random_bool(0.3) {
        let _ = write!(head, "Retry-After: {}\r\n", pick(rng, &["1", "120", " 5"]));
    }
    for i in 0..rng.random_range(0..4) {
        let _ = write!(head, "x-extra-{i}: {}\r\n", "v".repeat(rng.random_range(0..40)));
    }
    if rng.random_bool(0.1) {
        head.push_str(pick(rng, &["Connection: close\r\n", "connection: Close\r\n", "Connection: upgrade, close\r\n"]));
        close_after = true;
    }
    if rng.random_bool(0.05) {
        // Said, and not always meant: a worker that closes a connection it offered to keep
        // (the keep-alive race, where the next request finds the connection closed).
        head.push_str("Connection: keep-alive\r\n");
    }

    let bodiless = status == 204 || status == 304;
    let len = if bodiless || rng.random_bool(0.2) { 0 } else { rng.random_range(1..3000) };
    let body: Vec<u8> = (0..len).map(|_| rng.random()).collect();
    let mut tail = Vec::new();
    if bodiless {
        if rng.random_bool(0.3) {
            head.push_str("content-length: 0\r\n");
        }
    } else {
        match rng.random_range(0..100) {
            // Length-delimited.
            0..45 => {
                let _ = write!(head, "{}: {len}\r\n", pick(rng, &["content-length", "Content-Length"]));
                if rng.random_bool(0.1) {
                    // The same length twice is allowed.
                    let _ = write!(head, "content-length: {len}\r\n");
                }
                tail.extend_from_slice(&body);
            }
            // Chunked, with extensions and trailers now and then.
            45..75 => {
                head.push_str(pick(rng, &["transfer-encoding: chunked\r\n", "Transfer-Encoding: Chunked\r\n"]));
                let mut rest = &body[..];
                while !rest.is_empty() {
                    let n = rng.random_range(1..=rest.len().min(700));
                    let size = if rng.random_bool(0.5) { format!("{n:x}") } else { format!("{n:X}") };
                    let ext = if rng.random_bool(0.2) { ";name=value" } else { "" };
                    tail.extend_from_slice(format!("{size}{ext}\r\n").as_bytes());
                    tail.extend_from_slice(&rest[..n]);
                    tail.extend_from_slice(b"\r\n");
                    rest = &rest[n..];
                }
                tail.extend_from_slice(b"0\r\n");
                if rng.random_bool(0.2) {
                    tail.extend_from_slice(b"x-trailer: 1\r\n");
                }
                tail.extend_from_slice(b"\r\n");
            }
            // Close-delimited.
            75..85 => {
                tail.extend_from_slice(&body);
                close_after = true;
            }
            // Broken: the client must not pass any of these on as a good answer.
            _ => {
                close_after = true;
                match rng.random_range(0..14) {
                    0 => {
                        // Cut short.
                        let _ = write!(head, "content-length: {}\r\n", len + 10);
                        tail.extend_from_slice(&body);
                    }
                    1 => {
                        let _ = write!(head, "content-length: {len}\r\ncontent-length: {}\r\n", len + 1);
                        tail.extend_from_slice(&body);
                    }
                    2 => {
                        let _ = write!(head, "content-length: {}\r\n", pick(rng, &["abc", "-1", "1 2", ""]));
                        tail.extend_from_slice(&body);
                    }
                    3 => {
                        head.push_str("transfer-encoding: chunked\r\n");
                        tail.extend_from_slice(b"zz\r\nhello\r\n0\r\n\r\n");
                    }
                    4 => {
                        head.push_str("transfer-encoding: chunked\r\n");
                        tail.extend_from_slice(b"5\r\nhelloXX0\r\n\r\n");
                    }
                    5 => {
                        // Chunked, cut short.
                        head.push_str("transfer-encoding: chunked\r\n");
                        tail.extend_from_slice(b"10\r\nonly some");
                    }
                    6 => {
                        // Not HTTP at all.
                        head = "SSH-2.0-OpenSSH_9.6\r\n".to_owned();
                    }
                    7 => {
                        let _ = write!(head, "content-length: +{len}\r\n");
                        tail.extend_from_slice(&body);
                    }
                    8 => {
                        // Chunked as the last coding: chunk framing, the content passed on as is.
                        head.push_str("transfer-encoding: gzip, chunked\r\n");
                        tail.extend_from_slice(&one_chunk(&body));
                    }
                    9 => {
                        // Chunked not last: delimited by the end of the connection.
                        head.push_str("transfer-encoding: chunked, gzip\r\n");
                        tail.extend_from_slice(&body);
                    }
                    10 => {
                        // Both: Transfer-Encoding wins.
                        let _ = write!(head, "content-length: {}\r\ntransfer-encoding: chunked\r\n", len + 3);
                        tail.extend_from_slice(&one_chunk(&body));
                    }
                    11 => {
                        // Obsolete line folding.
                        let _ = write!(head, "x-folded: a\r\n b\r\ncontent-length: {len}\r\n");
                        tail.extend_from_slice(&body);
                    }
                    12 => {
                        let _ = write!(head, "no colon here\r\ncontent-length: {len}\r\n");
                        tail.extend_from_slice(&body);
                    }
                    _ => {
                        // The same length listed twice in one field.
                        let _ = write!(head, "content-length: {len}, {len}\r\n");
                        tail.extend_from_slice(&body);
                    }
                }
            }
        }
    }
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(b"\r\n");
    bytes.extend_from_slice(&tail);
    let mut cuts: Vec<usize> = (0..rng.random_range(0..4)).map(|_| rng.random_range(0..=bytes.len())).collect();
    cuts.sort_unstable();
    Scripted { bytes, cuts, close_after }
}

/// `body` as one chunk and the last chunk.
fn one_chunk(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    if !body.is_empty() {
        out.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// A worker that answers the `n`-th request it reads, on whatever connection, with `script[n]`.
/// Returns its address, its count of accepted connections, and its task (stopped on drop).
async fn worker(script: Vec<Scripted>) -> (String, Arc<AtomicUsize>, Stop) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let next = Arc::new(AtomicUsize::new(0));
    let (script, acc) = (Arc::new(script), Arc::clone(&accepted));
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((mut sock, _)) = listener.accept().await {
            acc.fetch_add(1, Ordering::SeqCst);
            // Each piece leaves at once (no Nagle wait for the client's delayed ACK).
            let _ = sock.set_nodelay(true);
            let (script, next) = (Arc::clone(&script), Arc::clone(&next));
            conns.spawn(async move {
                let mut buf = BytesMut::new();
                while read_request(&mut sock, &mut buf).await {
                    let Some(answer) = script.get(next.fetch_add(1, Ordering::SeqCst)) else { return };
                    let mut from = 0;
                    for &cut in answer.cuts.iter().chain([&answer.bytes.len()]) {
                        if sock.write_all(&answer.bytes[from..cut]).await.is_err() {
                            return;
                        }
                        from = cut;
                        tokio::task::yield_now().await;
                    }
                    if answer.close_after {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted, Stop(task))
}

/// Stops a worker (its listener and connections) when dropped.
struct Stop(tokio::task::JoinHandle<()>);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Read one request (head and `Content-Length` body); `false` when the client closed.
async fn read_request(sock: &mut TcpStream, buf: &mut BytesMut) -> bool {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(head)) = req.parse(buf) {
            let len = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= head + len {
                let _ = buf.split_to(head + len);
                return true;
            }
        }
        match sock.read_buf(buf).await {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
    }
}

fn header(v: Option<&HeaderValue>) -> Option<Vec<u8>> {
    v.map(|v| v.as_bytes().to_vec())
}

async fn with_deadline<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f).await.expect("the client neither answered nor failed")
}

async fn ours(addr: &str, n: usize, post: bool) -> Vec<Outcome> {
    let upstream = Upstream::new(addr.parse().unwrap(), 4, Duration::from_secs(2), 1);
    let ct = HeaderValue::from_static("application/json");
    let mut outcomes = Vec::new();
    for _ in 0..n {
        let out = if post {
            Outgoing {
                method: &Method::POST,
                path_and_query: "/predict",
                content_type: Some(&ct),
                headers: &[],
                body: b"{}",
            }
        } else {
            Outgoing::get("/predict?query=hi")
        };
        // With the gateway's transport resend of a request a stale connection could not deliver.
        let r = with_deadline(crate::pool::outcome::send(&upstream, out, MAX_BODY)).await;
        outcomes.push(
            r.map(|a| (a.status.as_u16(), header(a.content_type.as_ref()), header(a.retry_after.as_ref()), a.body))
                .map_err(|_| ()),
        );
    }
    outcomes
}

/// The load generator's client, with its resend rule: a request a reused connection could not
/// deliver goes once more on a new connection (`loadtest/src/client.rs`).
async fn loadtests(addr: &str, n: usize, post: bool) -> Vec<Outcome> {
    use loadtest::http1::{Conn, Failure};
    let request = if post {
        format!(
            "POST /predict HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{{}}"
        )
    } else {
        format!("GET /predict?query=hi HTTP/1.1\r\nhost: {addr}\r\n\r\n")
    };
    let sock: std::net::SocketAddr = addr.parse().unwrap();
    let mut kept: Option<Conn> = None;
    let mut outcomes = Vec::new();
    for _ in 0..n {
        let (outcome, conn) = with_deadline(async {
            let mut conn = match kept.take() {
                Some(c) => c,
                None => Conn::connect(sock).await.unwrap(),
            };
            let mut r = conn.exchange(request.as_bytes(), false, true).await;
            if matches!(r, Err(Failure::Stale)) {
                conn = Conn::connect(sock).await.unwrap();
                r = conn.exchange(request.as_bytes(), false, true).await;
            }
            match r {
                Ok(a) => (Ok((a.status, None, None, a.body.unwrap_or_default())), a.keep_alive.then_some(conn)),
                Err(_) => (Err(()), None),
            }
        })
        .await;
        outcomes.push(outcome);
        kept = conn;
    }
    outcomes
}

/// An outcome without its headers (what the load generator reads).
fn without_headers(o: &Outcome) -> Outcome {
    o.clone().map(|(status, _, _, body)| (status, None, None, body))
}

async fn hyper_connect(addr: &str) -> SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    s
}

async fn hyper_exchange(s: &mut SendRequest<Full<Bytes>>, addr: &str, post: bool) -> Result<Outcome, hyper::Error> {
    let req = if post {
        Request::post("/predict")
            .header("host", addr)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(b"{}")))
    } else {
        Request::get("/predict?query=hi").header("host", addr).body(Full::new(Bytes::new()))
    }
    .unwrap();
    // An error before the answer's head is `Err` (the request may be resent); after it, the
    // answer is an error outcome.
    let resp = s.send_request(req).await?;
    let status = resp.status().as_u16();
    let ct = header(resp.headers().get("content-type"));
    let ra = header(resp.headers().get("retry-after"));
    Ok(match resp.into_body().collect().await {
        Ok(body) => Ok((status, ct, ra, body.to_bytes())),
        Err(_) => Err(()),
    })
}

/// The connection ended (closed, reset) before any answer: the stale keep-alive case.
fn no_answer(e: &hyper::Error) -> bool {
    e.is_canceled()
        || e.is_incomplete_message()
        || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// hyper's client with the gateway's pooling rules: a connection is reused while hyper keeps it
/// open, and a request on a reused connection that got no answer at all is sent once more on a
/// new connection (the keep-alive race; hyper-util's pool does the same for requests it had not
/// written yet).
async fn hypers(addr: &str, n: usize, post: bool) -> Vec<Outcome> {
    let mut kept: Option<SendRequest<Full<Bytes>>> = None;
    let mut outcomes = Vec::new();
    for _ in 0..n {
        let reused = match kept.take() {
            Some(mut s) => s.ready().await.ok().map(|()| s),
            None => None,
        };
        let outcome = with_deadline(async {
            if let Some(mut s) = reused {
                match hyper_exchange(&mut s, addr, post).await {
                    Ok(o) => return (o, Some(s)),
                    // Closed with no answer on a reused connection: once more on a new one.
                    Err(e) if no_answer(&e) => {}
                    Err(_) => return (Err(()), None),
                }
            }
            let mut s = hyper_connect(addr).await;
            match hyper_exchange(&mut s, addr, post).await {
                Ok(o) => (o, Some(s)),
                Err(_) => (Err(()), None),
            }
        })
        .await;
        outcomes.push(outcome.0);
        kept = outcome.1;
    }
    outcomes
}

fn show(o: &Outcome) -> String {
    match o {
        Ok((status, ct, ra, body)) => format!(
            "{status} content-type={:?} retry-after={:?} body={} bytes",
            ct.as_deref().map(String::from_utf8_lossy),
            ra.as_deref().map(String::from_utf8_lossy),
            body.len()
        ),
        Err(()) => "error".to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_client_reads_answers_as_hyper_does() {
    let mut mismatches = Vec::new();
    let mut tally = [0usize; 2];
    let only: Option<u64> = std::env::var("UPSTREAM_CASE").ok().and_then(|v| v.parse().ok());
    let cases = std::env::var("UPSTREAM_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(CASES);
    for seed in (0..cases).filter(|s| only.is_none_or(|o| o == *s)) {
        let mut rng = StdRng::seed_from_u64(seed);
        let script: Vec<Scripted> = (0..ANSWERS).map(|_| generate(&mut rng)).collect();
        let post = rng.random_bool(0.5);
        let (addr, ours_conns, _stop) = worker(script.clone()).await;
        let a = ours(&addr, ANSWERS, post).await;
        let (addr, hyper_conns, _stop) = worker(script.clone()).await;
        let b = hypers(&addr, ANSWERS, post).await;
        let (addr, loadtest_conns, _stop) = worker(script.clone()).await;
        let c = loadtests(&addr, ANSWERS, post).await;
        let (ours_conns, hyper_conns) = (ours_conns.load(Ordering::SeqCst), hyper_conns.load(Ordering::SeqCst));
        let loadtest_conns = loadtest_conns.load(Ordering::SeqCst);
        let b_bare: Vec<Outcome> = b.iter().map(without_headers).collect();
        if c != b_bare || loadtest_conns != hyper_conns {
            let mut m = format!("case {seed} ({}): connections loadtest {loadtest_conns}, hyper {hyper_conns}\n", {
                if post { "POST" } else { "GET" }
            });
            for (i, s) in script.iter().enumerate() {
                let _ = writeln!(
                    m,
                    "  answer {i}: loadtest {} | hyper {}\n    {:?}",
                    show(&c[i]),
                    show(&b_bare[i]),
                    String::from_utf8_lossy(&s.bytes[..s.bytes.len().min(300)])
                );
            }
            mismatches.push(m);
        }
        tally[usize::from(a.iter().all(Result::is_ok))] += 1;
        if a != b || ours_conns != hyper_conns {
            let mut m = format!("case {seed} ({}): connections ours {ours_conns}, hyper {hyper_conns}\n", {
                if post { "POST" } else { "GET" }
            });
            for (i, s) in script.iter().enumerate() {
                let _ = writeln!(
                    m,
                    "  answer {i}: ours {} | hyper {}\n    {:?}",
                    show(&a[i]),
                    show(&b[i]),
                    String::from_utf8_lossy(&s.bytes[..s.bytes.len().min(300)])
                );
            }
            mismatches.push(m);
        }
    }
    assert!(
        only.is_some() || tally[1] > 100 && tally[0] > 100,
        "the cases cover both good and broken answers: {tally:?}"
    );
    assert!(mismatches.is_empty(), "{} of {cases} cases differ:\n{}", mismatches.len(), mismatches.join("\n"));
}
