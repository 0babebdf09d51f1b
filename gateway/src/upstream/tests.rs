//! The worker client against scripted workers that speak raw bytes.

use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::codec::content_length_value;
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
    Upstream::new(authority, 4, Duration::from_secs(2), 1)
}

async fn get(u: &Upstream) -> Result<Answer, Error> {
    u.request(Outgoing::get("/predict?query=hi"), 1024, Conn::Reuse).await
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
        headers: &[],
        body: br#"{"query":"hi"}"#,
    };
    upstream(addr.clone()).request(out, 1024, Conn::Reuse).await.unwrap();
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
async fn a_keep_alive_connection_closed_by_the_worker_is_stale_and_a_new_one_is_opened_on_request() {
    // The first connection answers once and closes: the second request finds it dead.
    let (addr, seen) = scripted(vec![vec![OK], vec![OK]]).await;
    let u = upstream(addr);
    get(&u).await.unwrap();
    assert_eq!(u.idle_count(), 1);
    let e = get(&u).await.unwrap_err();
    assert!(matches!(e, Error::Stale(_)), "{e}");
    assert_eq!(seen.lock().unwrap().requests.len(), 1, "the worker never read the second request");
    let a = u.request(Outgoing::get("/predict?query=hi"), 1024, Conn::New).await.unwrap();
    assert_eq!(a.status, StatusCode::OK);
    let seen = seen.lock().unwrap();
    assert_eq!((seen.connections, seen.requests.len()), (2, 2));
}

#[tokio::test]
async fn broken_answers_are_exchange_errors() {
    const CUT: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc";
    const GARBAGE: &[u8] = b"SMTP ready\r\n\r\n";
    const CONFLICT: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nabc";
    const BAD_CHUNK: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n";
    for answer in [CUT, GARBAGE, CONFLICT, BAD_CHUNK] {
        let (addr, _) = scripted(vec![vec![answer]]).await;
        let u = upstream(addr);
        let e = get(&u).await.unwrap_err();
        assert!(matches!(e, Error::Exchange(_)), "{e}");
        assert_eq!(u.idle_count(), 0);
    }
}

#[tokio::test]
async fn answers_over_the_cap_or_the_budget_are_refused_and_the_budget_is_given_back() {
    const HUGE: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n";
    const HUGE_CHUNK: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1388\r\n";
    let mut until_close = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_vec();
    until_close.resize(until_close.len() + 5000, b'x');
    let until_close: &'static [u8] = Box::leak(until_close.into_boxed_slice());
    let budget = super::AnswerBudget::new(2048, prometheus_client::metrics::gauge::Gauge::default());
    let limit = |max_bytes| super::Limit { max_bytes, budget: Some(&budget) };
    for answer in [HUGE, HUGE_CHUNK, until_close] {
        let (addr, _) = scripted(vec![vec![answer]]).await;
        let e = upstream(addr).request(Outgoing::get("/predict?query=hi"), limit(1024), Conn::New).await.unwrap_err();
        assert!(matches!(e, Error::TooLarge(_)), "{e}");
        let (addr, _) = scripted(vec![vec![HUGE]]).await;
        let e = upstream(addr).request(Outgoing::get("/predict?query=hi"), limit(8192), Conn::New).await.unwrap_err();
        assert!(matches!(e, Error::Budget(_)), "{e}");
        assert_eq!(budget.used(), 0);
    }
    // A body within both is charged while its answer lives.
    let (addr, _) = scripted(vec![vec![OK]]).await;
    let a = upstream(addr).request(Outgoing::get("/predict?query=hi"), limit(1024), Conn::New).await.unwrap();
    assert_eq!(budget.used(), i64::try_from(a.body.len()).unwrap());
    drop(a);
    assert_eq!(budget.used(), 0);
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
    assert!(matches!(e, Error::Exchange(_)), "the request was sent: {e}");
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
    let out =
        Outgoing { method: &Method::POST, path_and_query: "/predict", content_type: None, headers: &[], body: &body };
    assert_eq!(u.request(out, 1 << 20, Conn::Reuse).await.unwrap().body.len(), 200_000);
    let idle = idle_buffer_capacities(&u);
    assert_eq!(idle.len(), 1);
    assert!(idle[0].0 <= KEEP_BUFFER_BYTES && idle[0].1 <= KEEP_BUFFER_BYTES, "{idle:?}");
}

#[test]
fn ipv6_hosts_lose_their_brackets_for_the_resolver() {
    let a: Authority = "[::1]:8080".parse().unwrap();
    assert_eq!(socket_host(&a), ("::1", 8080));
    let a: Authority = "10.0.0.5".parse().unwrap();
    assert_eq!(socket_host(&a), ("10.0.0.5", 80));
}

#[tokio::test]
async fn ipv6_workers_are_reached_where_the_machine_has_an_ipv6_loopback() {
    let Ok(listener) = TcpListener::bind("[::1]:0").await else {
        eprintln!("skipped: no IPv6 loopback on this machine");
        return;
    };
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
    assert!(matches!(e, Error::Connect(_)), "{e}");
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

/// A thread standing for a data-plane core (`core`: its index; `None`: the control plane or any
/// other thread), with its own single-threaded runtime for its whole life, as in the per-core
/// runtime: each job sends that many requests through `u`.
fn core_thread(
    core: Option<usize>,
    u: Arc<Upstream>,
) -> (std::sync::mpsc::Sender<usize>, std::sync::mpsc::Receiver<()>) {
    let (jobs, job) = std::sync::mpsc::channel::<usize>();
    let (finished, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if let Some(core) = core {
            crate::runtime::set_core(core);
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for n in job {
            rt.block_on(async {
                for _ in 0..n {
                    get(&u).await.unwrap();
                }
            });
            finished.send(()).unwrap();
        }
    });
    (jobs, done)
}

#[test]
fn each_core_reuses_only_the_connections_it_opened_and_prune_covers_every_slot() {
    // The worker on a runtime of its own, beside the cores'.
    let worker = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (addr, seen) = worker.block_on(scripted(vec![vec![OK; 4]; 4]));
    // Two cores and the slot of every other thread.
    let u = Arc::new(Upstream::new(addr, 4, Duration::from_secs(2), 3));
    let threads =
        [core_thread(Some(0), Arc::clone(&u)), core_thread(Some(1), Arc::clone(&u)), core_thread(None, Arc::clone(&u))];
    let run = |t: usize, n: usize| {
        threads[t].0.send(n).unwrap();
        threads[t].1.recv().unwrap();
    };
    let connections = || seen.lock().unwrap().connections;
    run(0, 2);
    assert_eq!((connections(), u.idle_count()), (1, 1), "core 0 reuses its own");
    run(1, 1);
    assert_eq!((connections(), u.idle_count()), (2, 2), "core 1 leaves core 0's alone");
    run(2, 1);
    assert_eq!((connections(), u.idle_count()), (3, 3), "so does any other thread");
    run(0, 1);
    run(1, 1);
    run(2, 1);
    assert_eq!((connections(), u.idle_count()), (3, 3), "each takes its own again");
    u.prune(Duration::ZERO);
    assert_eq!(u.idle_count(), 0, "prune empties every slot");
}
