//! Header, body, idle and unread-answer timeouts, on real sockets and tokio's paused clock: each
//! fires at its documented instant, and other clients keep being served meanwhile.

mod common;

use std::time::Duration;

use common::{Client, Closed, config, get, get_ok, post, start};
use http::StatusCode;
use listener::TimeoutKind;
use tokio::time::Instant;

const HEADER: Duration = Duration::from_secs(2);
const BODY: Duration = Duration::from_secs(3);
const IDLE: Duration = Duration::from_secs(5);
/// The listener's clock resolution with these timeouts (a hundredth of the shorter one): the
/// header and idle timeouts fire within it of their nominal time. The paused clock makes the
/// rest exact.
const RES: Duration = Duration::from_millis(20);

fn within(elapsed: Duration, expected: Duration) -> bool {
    elapsed + RES >= expected && elapsed <= expected + RES * 2
}

#[tokio::test(start_paused = true)]
async fn slow_heads_are_answered_408_and_closed_at_the_header_timeout_while_others_get_200() {
    let srv = start(config()).await;
    let start = Instant::now();
    // 50 slowloris connections: a head that never ends, one byte every 500 ms.
    let mut slow = Vec::new();
    for _ in 0..50 {
        let mut c = Client::connect(srv.addr).await;
        c.send(b"POST /echo HTTP/1.1\r\nhost: x\r\n").await;
        slow.push(c);
    }
    let trickle = tokio::spawn(async move {
        let mut ended = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        tick.tick().await;
        for _ in 0..20 {
            tick.tick().await;
            for c in &mut slow {
                let _ = c.try_send(b"x").await;
            }
        }
        // Then read what each got.
        for mut c in slow {
            let answer = c.answer_within(Duration::from_secs(1)).await;
            let closed = c.closed_within(Duration::from_secs(1)).await;
            ended.push((answer, closed));
        }
        ended
    });
    // Meanwhile, ordinary clients are served.
    while start.elapsed() < HEADER + Duration::from_millis(500) {
        assert_eq!(get_ok(srv.addr).await, StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ended = trickle.await.unwrap();
    for (answer, closed) in ended {
        let answer = answer.expect("a slow head gets an answer");
        assert_eq!(answer.status, StatusCode::REQUEST_TIMEOUT);
        assert_eq!(answer.error_type(), "timeout");
        assert_eq!(answer.header("connection"), Some("close"));
        assert_eq!(closed, Closed::Closed);
    }
    assert_eq!(srv.metrics.timed_out(TimeoutKind::Header), 50);
    assert_eq!(srv.metrics.connections_open(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_slow_head_is_closed_exactly_at_the_header_timeout() {
    let srv = start(config()).await;
    let mut c = Client::connect(srv.addr).await;
    // The first request's head counts from the connection's opening; sending part of it does
    // not extend the deadline.
    let opened = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    c.send(b"GET / HTTP/1.1\r\n").await;
    assert_eq!(c.closed_within(Duration::from_secs(10)).await, Closed::Closed);
    assert!(within(opened.elapsed(), HEADER), "closed after {:?}", opened.elapsed());

    // On a keep-alive connection the deadline counts from the next head's first byte.
    let mut c = Client::connect(srv.addr).await;
    c.send(&get("/")).await;
    assert_eq!(c.answer().await.status, StatusCode::OK);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let first_byte = Instant::now();
    c.send(b"GET / HT").await;
    let answer = c.answer_within(Duration::from_secs(10)).await.expect("408");
    assert_eq!(answer.status, StatusCode::REQUEST_TIMEOUT);
    assert!(within(first_byte.elapsed(), HEADER), "answered after {:?}", first_byte.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_sends_nothing_is_closed_at_the_header_timeout() {
    let srv = start(config()).await;
    let mut c = Client::connect(srv.addr).await;
    let opened = Instant::now();
    assert_eq!(c.closed_within(Duration::from_secs(10)).await, Closed::Closed);
    assert!(within(opened.elapsed(), HEADER), "closed after {:?}", opened.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_slow_body_is_answered_408_json_and_closed_at_the_body_deadline() {
    let srv = start(config()).await;
    let mut c = Client::connect(srv.addr).await;
    c.send(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n0123456789").await;
    let sent = Instant::now();
    // Trickling does not extend a deadline.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        c.send(b"x").await;
    }
    let answer = c.answer_within(Duration::from_secs(10)).await.expect("408");
    // The body deadline is a timer of its own: exact.
    assert!(sent.elapsed() >= BODY && sent.elapsed() <= BODY + RES, "answered after {:?}", sent.elapsed());
    assert_eq!(answer.status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(answer.error_type(), "timeout");
    assert_eq!(answer.header("connection"), Some("close"));
    assert_eq!(c.closed_within(Duration::from_secs(5)).await, Closed::Closed);
    assert_eq!(srv.metrics.timed_out(TimeoutKind::Body), 1);
    assert_eq!(srv.bodies.buffered_bytes(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout_without_an_answer() {
    let srv = start(config()).await;
    let mut c = Client::connect(srv.addr).await;
    c.send(&get("/")).await;
    assert_eq!(c.answer().await.status, StatusCode::OK);
    let answered = Instant::now();
    assert_eq!(c.closed_within(Duration::from_secs(60)).await, Closed::Closed);
    assert!(within(answered.elapsed(), IDLE), "closed after {:?}", answered.elapsed());
    assert!(c.pending().is_empty(), "idle close sends nothing");
    assert_eq!(srv.metrics.timed_out(TimeoutKind::Idle), 1);
}

#[tokio::test(start_paused = true)]
async fn a_busy_keep_alive_connection_is_never_closed() {
    let srv = start(config()).await;
    let mut c = Client::connect(srv.addr).await;
    // 60 s of requests, each after 1.9 s idle (just under the header timeout, well under the
    // idle one): the connection's one timer fires many times and must never close it.
    for _ in 0..30 {
        c.send(&get("/")).await;
        assert_eq!(c.answer().await.status, StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(1900)).await;
    }
    // A slow handler (longer than every timeout) is not the listener's business.
    c.send(&get("/slow?ms=20000")).await;
    assert_eq!(c.answer_within(Duration::from_secs(30)).await.map(|a| a.status), Some(StatusCode::OK));
    assert_eq!(srv.metrics.connections_accepted(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_client_that_does_not_read_its_answers_is_closed_at_the_idle_timeout() {
    let srv = start(config()).await;
    let mut c = Client::connect(srv.addr).await;
    // Pipelined requests for 1 MiB answers, never read: the socket buffers fill and hyper
    // cannot finish writing.
    let mut many = Vec::new();
    for _ in 0..64 {
        many.extend_from_slice(&get("/big?kib=1024"));
    }
    let _ = c.try_send(&many).await;
    let sent = Instant::now();
    common::until("the connection is open", Duration::from_secs(1), || srv.metrics.connections_open() == 1).await;
    common::until("the connection closed", Duration::from_secs(60), || srv.metrics.connections_open() == 0).await;
    assert!(within(sent.elapsed(), IDLE), "closed after {:?}", sent.elapsed());
    assert_eq!(srv.metrics.timed_out(TimeoutKind::Send), 1);
}

#[tokio::test(start_paused = true)]
async fn a_body_sent_in_time_is_echoed() {
    let srv = start(config()).await;
    let mut c = Client::connect(srv.addr).await;
    c.send(&post("/echo", b"hello")).await;
    let a = c.answer().await;
    assert_eq!((a.status, &a.body[..]), (StatusCode::OK, &b"hello"[..]));
    assert_eq!(srv.bodies.buffered_bytes(), 0);
}
