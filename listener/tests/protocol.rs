//! Protocol-level errors get the project's JSON body: the listener's own 414, hyper's 400 and
//! 431 (rewritten), and the body errors of `BodyReader::collect`; an axum `Router` is served as
//! well as a hyper `service_fn`.

mod common;

use std::time::Duration;

use common::{Client, Closed, config, get, post, start};
use http::StatusCode;

async fn one(bytes: &[u8]) -> (common::Answer, Closed) {
    let srv = start(config()).await;
    let mut c = Client::connect(srv.addr).await;
    let _ = c.try_send(bytes).await;
    let a = c.answer_within(Duration::from_secs(10)).await.expect("an answer");
    let closed = c.closed_within(Duration::from_secs(10)).await;
    (a, closed)
}

#[tokio::test(start_paused = true)]
async fn an_over_long_target_is_414_json() {
    let path = format!("/?q={}", "a".repeat(listener::MAX_URI_BYTES));
    let (a, closed) = one(&get(&path)).await;
    assert_eq!(a.status, StatusCode::URI_TOO_LONG);
    assert_eq!(a.error_type(), "too_large");
    assert_eq!(closed, Closed::Closed);
}

#[tokio::test(start_paused = true)]
async fn an_over_long_head_is_431_json() {
    let head = format!("GET / HTTP/1.1\r\nhost: x\r\ncookie: {}\r\n\r\n", "c".repeat(listener::MAX_HEAD_BYTES));
    let (a, closed) = one(head.as_bytes()).await;
    assert_eq!(a.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert_eq!(a.error_type(), "too_large");
    assert_eq!(a.header("connection"), Some("close"));
    assert_eq!(closed, Closed::Closed);
}

#[tokio::test(start_paused = true)]
async fn too_many_header_lines_are_431_json() {
    let mut head = String::from("GET / HTTP/1.1\r\n");
    for i in 0..=listener::MAX_HEADERS {
        head.push_str(&format!("x-h{i}: v\r\n"));
    }
    head.push_str("\r\n");
    let (a, _) = one(head.as_bytes()).await;
    assert_eq!(a.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert_eq!(a.error_type(), "too_large");
}

#[tokio::test(start_paused = true)]
async fn a_malformed_head_is_400_json() {
    for bad in [&b"GET / HTTP/1.1\r\nbad header\r\n\r\n"[..], b"G\x01T / HTTP/1.1\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n"] {
        let (a, closed) = one(bad).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{:?}", String::from_utf8_lossy(bad));
        assert_eq!(a.error_type(), "invalid_request");
        assert_eq!(closed, Closed::Closed);
    }
}

#[tokio::test(start_paused = true)]
async fn a_malformed_head_after_a_good_request_on_the_same_connection_is_400_json() {
    let srv = start(config()).await;
    let mut c = Client::connect(srv.addr).await;
    c.send(&get("/")).await;
    assert_eq!(c.answer().await.status, StatusCode::OK);
    c.send(b"GET / HTTP/1.1\r\nbad header\r\n\r\n").await;
    let a = c.answer().await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.error_type(), "invalid_request");
}

#[tokio::test(start_paused = true)]
async fn a_malformed_chunked_body_is_400_invalid_request() {
    let (a, closed) =
        one(b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\nxx\r\n0\r\n\r\n")
            .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.error_type(), "invalid_request");
    assert_eq!(closed, Closed::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_well_formed_chunked_body_is_read() {
    let srv = start(config()).await;
    let mut c = Client::connect(srv.addr).await;
    c.send(
        b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    )
    .await;
    let a = c.answer().await;
    assert_eq!((a.status, &a.body[..]), (StatusCode::OK, &b"hello world"[..]));
    assert_eq!(srv.bodies.buffered_bytes(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_body_over_the_limit_is_413_json_declared_or_chunked() {
    let big = vec![b'x'; common::ECHO_LIMIT + 1];
    let (a, _) = one(&post("/echo", &big)).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(a.error_type(), "too_large");
    assert_eq!(a.header("connection"), Some("close"));

    let mut chunked = b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..=common::ECHO_LIMIT / 65536 {
        chunked.extend_from_slice(format!("{:x}\r\n", 65536).as_bytes());
        chunked.extend_from_slice(&[b'y'; 65536]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let (a, _) = one(&chunked).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(a.error_type(), "too_large");
}

#[tokio::test(start_paused = true)]
async fn an_axum_router_is_served_with_the_same_limits() {
    use axum::Router;
    use axum::body::Body;
    use axum::extract::State;
    use axum::response::{IntoResponse, Response};
    use axum::routing::post as axum_post;

    async fn echo(State(bodies): State<listener::BodyReader>, body: Body) -> Response {
        match bodies.collect(body, 16).await {
            Ok(b) => b.into_response(),
            Err(e) => e.response::<Body>(2),
        }
    }

    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let server = listener::Server::new(tcp, config(), listener::Metrics::default());
    let app = Router::new().route("/echo", axum_post(echo)).with_state(server.bodies());
    let service = hyper_util::service::TowerToHyperService::new(app);
    tokio::spawn(server.serve(service, std::future::pending()));

    let mut c = Client::connect(addr).await;
    c.send(&post("/echo", b"short")).await;
    let a = c.answer().await;
    assert_eq!((a.status, &a.body[..]), (StatusCode::OK, &b"short"[..]));
    c.send(&post("/echo", b"much longer than sixteen bytes")).await;
    let a = c.answer().await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(a.error_type(), "too_large");
    // The listener's own answers hold for the router too.
    let mut c = Client::connect(addr).await;
    c.send(b"GET / HTTP/1.1\r\nbad header\r\n\r\n").await;
    assert_eq!(c.answer().await.error_type(), "invalid_request");
}

#[tokio::test(start_paused = true)]
async fn pipelined_requests_are_all_answered_in_order() {
    let srv = start(config()).await;
    let mut c = Client::connect(srv.addr).await;
    let mut many = Vec::new();
    for i in 0..10 {
        many.extend_from_slice(&post("/echo", format!("body {i}").as_bytes()));
        many.extend_from_slice(&get("/"));
    }
    c.send(&many).await;
    for i in 0..10 {
        let a = c.answer().await;
        assert_eq!((a.status, &a.body[..]), (StatusCode::OK, format!("body {i}").as_bytes()));
        let a = c.answer().await;
        assert_eq!((a.status, &a.body[..]), (StatusCode::OK, &b"ok"[..]));
    }
    // Then the connection is idle, and closed at the idle timeout.
    let answered = tokio::time::Instant::now();
    assert_eq!(c.closed_within(Duration::from_secs(60)).await, Closed::Closed);
    assert!(answered.elapsed() >= srv.config.idle_timeout - Duration::from_millis(20));
}
