//! `--max-connections`: idle keep-alive connections make room for new ones; when none is idle a
//! new connection is answered 503 JSON with `Retry-After`; service resumes as connections go.
//! `--max-connections-per-address`: one address at its cap is answered 503 under pressure (no
//! more places free than the share), others are served; with room, one address may hold more.

mod common;

use std::time::Duration;

use common::{Client, Closed, config, get, start, until};
use http::StatusCode;
use listener::Config;

const CAP: usize = 8;

fn capped() -> Config {
    Config { max_connections: CAP, ..config() }
}

#[tokio::test(start_paused = true)]
async fn at_the_cap_the_longest_idle_connections_make_room() {
    let srv = start(capped()).await;
    let mut idle = Vec::new();
    for _ in 0..CAP {
        let mut c = Client::connect(srv.addr).await;
        c.send(&get("/")).await;
        assert_eq!(c.answer().await.status, StatusCode::OK);
        idle.push(c);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(srv.metrics.connections_open(), CAP as i64);
    // Nine more clients: each is served; idle connections (the oldest first) are closed.
    for _ in 0..3 {
        let mut c = Client::connect(srv.addr).await;
        c.send(&get("/")).await;
        assert_eq!(c.answer().await.status, StatusCode::OK);
    }
    assert!(srv.metrics.connections_evicted() >= 1);
    assert_eq!(srv.metrics.connections_refused(), 0);
    // The oldest idle connection was among those closed, without an answer.
    assert_eq!(idle[0].closed_within(Duration::from_millis(100)).await, Closed::Closed);
    assert!(idle[0].pending().is_empty());
    assert!(srv.metrics.connections_open() <= CAP as i64);
}

#[tokio::test(start_paused = true)]
async fn at_the_cap_with_no_idle_connection_a_new_one_gets_503_json_then_service_resumes() {
    let srv = start(capped()).await;
    // Fill the cap with requests in progress (slow handler).
    let mut busy = Vec::new();
    for _ in 0..CAP {
        let mut c = Client::connect(srv.addr).await;
        c.send(&get("/slow?ms=1000")).await;
        busy.push(c);
    }
    until("all connections open", Duration::from_secs(1), || srv.metrics.connections_open() == CAP as i64).await;

    let mut c = Client::connect(srv.addr).await;
    c.send(&get("/")).await;
    let a = c.answer_within(Duration::from_secs(5)).await.expect("503");
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(a.error_type(), "overloaded");
    assert_eq!(a.header("retry-after"), Some("1"));
    assert_eq!(a.header("connection"), Some("close"));
    assert_eq!(c.closed_within(Duration::from_secs(5)).await, Closed::Closed);
    assert_eq!(srv.metrics.connections_refused(), 1);

    // The busy ones are answered, then leave; new clients are served again.
    for mut b in busy {
        assert_eq!(b.answer().await.status, StatusCode::OK);
    }
    let mut c = Client::connect(srv.addr).await;
    c.send(&get("/")).await;
    assert_eq!(c.answer().await.status, StatusCode::OK);
    assert_eq!(srv.metrics.connections_refused(), 1);
}

#[tokio::test(start_paused = true)]
async fn slow_heads_at_the_cap_are_refused_until_the_header_timeout_frees_them() {
    let srv = start(capped()).await;
    let mut slow = Vec::new();
    for _ in 0..CAP {
        let mut c = Client::connect(srv.addr).await;
        c.send(b"GET / HTTP/1.1\r\n").await;
        slow.push(c);
    }
    until("all connections open", Duration::from_secs(1), || srv.metrics.connections_open() == CAP as i64).await;
    let mut c = Client::connect(srv.addr).await;
    c.send(&get("/")).await;
    assert_eq!(c.answer().await.status, StatusCode::SERVICE_UNAVAILABLE);
    // The header timeout (2 s) ends them; then there is room.
    tokio::time::sleep(srv.config.header_read_timeout).await;
    until("slow heads closed", Duration::from_secs(1), || srv.metrics.connections_open() == 0).await;
    let mut c = Client::connect(srv.addr).await;
    c.send(&get("/")).await;
    assert_eq!(c.answer().await.status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn one_address_beyond_its_share_is_served_while_the_listener_has_room() {
    // One host holding many keep-alive connections (a load generator, a NAT): every one of
    // them is served, far beyond its share, while more places are free than the share.
    let srv = start(Config { max_connections_per_address: 2, ..capped() }).await;
    let mut kept = Vec::new();
    for _ in 0..CAP - 2 {
        let mut c = Client::connect(srv.addr).await;
        c.send(&get("/")).await;
        assert_eq!(c.answer().await.status, StatusCode::OK);
        kept.push(c);
    }
    for c in &mut kept {
        c.send(&get("/")).await;
        assert_eq!(c.answer().await.status, StatusCode::OK, "kept alive and served again");
    }
    assert_eq!(srv.metrics.connections_refused_per_address(), 0);
    // Now two places are free, the share: the address gets no more, another address does.
    let mut more = Client::connect(srv.addr).await;
    more.send(&get("/")).await;
    assert_eq!(more.answer_within(Duration::from_secs(5)).await.expect("503").status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(srv.metrics.connections_refused_per_address(), 1);
    let mut other = connect_from([127, 0, 0, 2], srv.addr).await;
    other.send(&get("/")).await;
    assert_eq!(other.answer().await.status, StatusCode::OK);
}

/// A connection to `addr` from another loopback address.
async fn connect_from(from: [u8; 4], addr: std::net::SocketAddr) -> Client {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind((std::net::Ipv4Addr::from(from), 0).into()).unwrap();
    Client::from_stream(s.connect(addr).await.unwrap())
}

#[tokio::test(start_paused = true)]
async fn one_address_at_its_cap_is_refused_under_pressure_while_another_is_served() {
    let srv = start(Config { max_connections_per_address: 3, ..capped() }).await;
    // While more places are free than the share (3 of 8), the address may hold more than it.
    let mut flood = Vec::new();
    for n in 1..=CAP - 3 {
        let mut c = connect_from([127, 0, 0, 2], srv.addr).await;
        c.send(b"GET / HTTP/1.1\r\n").await;
        flood.push(c);
        until("the flood's connection opens", Duration::from_secs(1), || srv.metrics.connections_open() == n as i64)
            .await;
    }
    let mut more = connect_from([127, 0, 0, 2], srv.addr).await;
    more.send(&get("/")).await;
    let a = more.answer_within(Duration::from_secs(5)).await.expect("503");
    assert_eq!((a.status, a.error_type()), (StatusCode::SERVICE_UNAVAILABLE, "overloaded".to_owned()));
    assert_eq!(a.header("retry-after"), Some("1"));
    assert_eq!(srv.metrics.connections_refused_per_address(), 1);
    // Another address is served meanwhile, several connections of it.
    for _ in 0..4 {
        let mut c = Client::connect(srv.addr).await;
        c.send(&get("/")).await;
        assert_eq!(c.answer().await.status, StatusCode::OK);
    }
    assert_eq!(srv.metrics.connections_refused(), 0);
}

#[tokio::test(start_paused = true)]
async fn room_made_at_the_cap_closes_bare_and_trickling_connections_and_answers_a_request_already_sent() {
    let srv = start(capped()).await;
    // One address holds the whole cap: bare connections, a head trickling in, and one that
    // sends its request only now, as a newcomer from another address needs room.
    let mut bare = Vec::new();
    for _ in 0..CAP - 2 {
        bare.push(connect_from([127, 0, 0, 2], srv.addr).await);
    }
    let mut trickling = connect_from([127, 0, 0, 2], srv.addr).await;
    trickling.send(b"GET / HTTP/1.1\r\n").await;
    let mut late = connect_from([127, 0, 0, 2], srv.addr).await;
    until("the cap is full", Duration::from_secs(1), || srv.metrics.connections_open() == CAP as i64).await;
    late.send(&get("/")).await;
    let mut newcomer = connect_from([127, 0, 0, 3], srv.addr).await;
    newcomer.send(&get("/")).await;

    assert_eq!(newcomer.answer().await.status, StatusCode::OK, "the newcomer gets a place");
    // Whether its request was read before room was made or after, it is answered: a close with
    // it unread would be a reset.
    assert_eq!(late.answer().await.status, StatusCode::OK, "a request already sent is answered");
    // The header timeout is 2 s: room was made well before it.
    assert_eq!(trickling.closed_within(Duration::from_millis(500)).await, Closed::Closed);
    for b in &mut bare {
        assert_eq!(b.closed_within(Duration::from_millis(500)).await, Closed::Closed);
    }
    assert!(srv.metrics.connections_evicted() >= CAP as u64 - 1);
    assert_eq!(srv.metrics.connections_refused(), 0);
}
