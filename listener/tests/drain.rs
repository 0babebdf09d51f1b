//! Graceful drain: every request whose bytes reached the server is answered (with
//! `Connection: close`), idle connections close at once, nothing new is accepted, and the drain
//! gives up at its timeout.

mod common;

use std::time::Duration;

use common::{Client, Closed, config, get, start};
use http::StatusCode;
use listener::Config;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn drain_answers_requests_in_progress_and_closes_idle_connections() {
    let mut srv = start(config()).await;
    let mut busy = Vec::new();
    for _ in 0..5 {
        let mut c = Client::connect(srv.addr).await;
        c.send(&get("/slow?ms=1000")).await;
        busy.push(c);
    }
    let mut idle = Vec::new();
    for _ in 0..5 {
        let mut c = Client::connect(srv.addr).await;
        c.send(&get("/")).await;
        assert_eq!(c.answer().await.status, StatusCode::OK);
        idle.push(c);
    }
    common::until("all open", Duration::from_secs(1), || srv.metrics.connections_open() == 10).await;

    let asked = Instant::now();
    srv.shutdown();
    // Idle connections close at once, without an answer.
    for c in &mut idle {
        assert_eq!(c.closed_within(Duration::from_millis(100)).await, Closed::Closed);
        assert!(c.pending().is_empty());
    }
    // Requests in progress are answered, with `Connection: close`, then closed (and the
    // clients close their side, as clients do after `Connection: close`).
    for mut c in busy {
        let a = c.answer_within(Duration::from_secs(5)).await.expect("answered during the drain");
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.header("connection"), Some("close"));
        assert_eq!(c.closed_within(Duration::from_secs(5)).await, Closed::Closed);
    }
    tokio::time::timeout(Duration::from_secs(5), &mut srv.task).await.expect("serve returned").unwrap();
    assert!(asked.elapsed() < Duration::from_millis(1100), "{:?}", asked.elapsed());
    // Nothing is accepted any more.
    assert!(tokio::net::TcpStream::connect(srv.addr).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn a_request_sent_on_an_idle_keep_alive_connection_as_the_drain_starts_is_answered() {
    let mut srv = start(config()).await;
    let mut conns = Vec::new();
    for _ in 0..20 {
        let mut c = Client::connect(srv.addr).await;
        c.send(&get("/")).await;
        assert_eq!(c.answer().await.status, StatusCode::OK);
        conns.push(c);
    }
    // The next requests are on the wire when the drain starts (no await point in between lets
    // the server read them first).
    for c in &mut conns {
        c.stream.try_write(&get("/slow?ms=10")).unwrap();
    }
    srv.shutdown();
    for c in &mut conns {
        let a = c.answer_within(Duration::from_secs(5)).await.expect("a request that reached the server is answered");
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.header("connection"), Some("close"));
        assert_eq!(c.closed_within(Duration::from_secs(5)).await, Closed::Closed);
    }
    tokio::time::timeout(Duration::from_secs(5), &mut srv.task).await.expect("serve returned").unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_connection_waiting_in_the_backlog_with_its_request_is_answered() {
    let mut srv = start(config()).await;
    // Connect and send before the server's accept loop runs again, then ask for the drain.
    let mut fresh = Vec::new();
    for _ in 0..10 {
        let std = std::net::TcpStream::connect(srv.addr).unwrap();
        std::io::Write::write_all(&mut &std, &get("/")).unwrap();
        std.set_nonblocking(true).unwrap();
        fresh.push(Client::from_stream(tokio::net::TcpStream::from_std(std).unwrap()));
    }
    srv.shutdown();
    for c in &mut fresh {
        let a = c.answer_within(Duration::from_secs(5)).await.expect("answered");
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.header("connection"), Some("close"));
    }
    tokio::time::timeout(Duration::from_secs(5), &mut srv.task).await.expect("serve returned").unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_drain_gives_up_at_its_timeout() {
    let mut srv = start(Config { drain_timeout: Duration::from_secs(2), ..config() }).await;
    let mut c = Client::connect(srv.addr).await;
    c.send(&get("/slow?ms=60000")).await;
    common::until("open", Duration::from_secs(1), || srv.metrics.connections_open() == 1).await;
    let asked = Instant::now();
    srv.shutdown();
    tokio::time::timeout(Duration::from_secs(10), &mut srv.task).await.expect("serve returned").unwrap();
    let took = asked.elapsed();
    assert!(took >= Duration::from_secs(2) && took < Duration::from_millis(2100), "{took:?}");
    assert_eq!(c.closed_within(Duration::from_secs(1)).await, Closed::Closed);
}
