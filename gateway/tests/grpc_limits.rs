//! The gRPC listener against hostile HTTP/2 clients (the `h2` crate's client, and bare TCP), each
//! attack of issue 46 on a small scale, with a well-behaved tonic client served beside it:
//! bodies held within the budget of bodies held, a message too large refused at its prefix, a
//! trickling body refused at the body deadline, connections that send no preface closed at the
//! header deadline (and those past the per-address cap at once), a connection whose answers go
//! unread closed, and the bound on streams a connection advertised; and what held before
//! (Rapid Reset) still holds.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::TestGateway;
use h2::client::SendRequest;
use http::Request;
use oip::pb::ServerLiveRequest;
use oip::pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

const INFER: &str = "/inference.GRPCInferenceService/ModelInfer";
const LIVE: &str = "/inference.GRPCInferenceService/ServerLive";

/// A gateway (no workers) with its gRPC port, under short deadlines and a small budget.
async fn start(tune: impl FnOnce(&mut gateway::Config)) -> (TestGateway, SocketAddr) {
    let mut c = common::config(&[]);
    c.listener.header_read_timeout = Duration::from_millis(300);
    c.listener.body_read_timeout = Duration::from_millis(500);
    c.listener.idle_timeout = Duration::from_millis(400);
    c.listener.max_buffered_body_bytes = 1 << 20;
    tune(&mut c);
    let gw = TestGateway::start(c).await;
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let g = gw.gw.clone();
    tokio::spawn(async move { g.serve_grpc(tcp, std::future::pending()).await });
    (gw, addr)
}

/// A well-behaved client's call on a connection of its own.
async fn live(addr: SocketAddr) -> bool {
    let mut c = GrpcInferenceServiceClient::connect(format!("http://{addr}")).await.expect("connects");
    c.server_live(ServerLiveRequest {}).await.expect("served").into_inner().live
}

async fn h2(addr: SocketAddr, window: Option<u32>) -> SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut b = h2::client::Builder::new();
    if let Some(w) = window {
        b.initial_window_size(w);
    }
    let (send, conn) = b.handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send.ready().await.unwrap()
}

fn call(path: &str) -> Request<()> {
    Request::post(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

fn prefix(len: u32) -> Bytes {
    let mut p = vec![0u8];
    p.extend_from_slice(&len.to_be_bytes());
    Bytes::from(p)
}

/// Opens a call on `send` and sends `data` (ending the stream if `end`).
async fn open(send: &mut SendRequest<Bytes>, path: &str, data: Bytes, end: bool) -> h2::client::ResponseFuture {
    let mut ready = send.clone().ready().await.unwrap();
    let (resp, mut body) = ready.send_request(call(path), false).unwrap();
    body.send_data(data, end).unwrap();
    // The stream's sender is kept open (not reset) with the call unfinished.
    std::mem::forget(body);
    resp
}

/// The call's `grpc-status` (trailers-only, or after its message).
async fn code(resp: h2::client::ResponseFuture) -> i32 {
    let resp = resp.await.expect("an answer");
    let from = |h: &http::HeaderMap| h.get("grpc-status").map(|v| v.to_str().unwrap().parse::<i32>().unwrap());
    if let Some(c) = from(resp.headers()) {
        return c;
    }
    let mut body = resp.into_body();
    while let Some(d) = body.data().await {
        let d = d.unwrap();
        let _ = body.flow_control().release_capacity(d.len());
    }
    from(&body.trailers().await.unwrap().expect("trailers")).expect("a grpc-status")
}

fn gauge(metrics: &str, name: &str) -> i64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
}

const RESOURCE_EXHAUSTED: i32 = 8;
const DEADLINE_EXCEEDED: i32 = 4;

#[tokio::test]
async fn bodies_held_draw_from_the_budget_past_it_calls_are_refused_and_the_others_served() {
    let (gw, addr) = start(|c| c.listener.body_read_timeout = Duration::from_secs(2)).await;
    let mut send = h2(addr, None).await;
    // Six calls each sending 200 KiB of a 250 KiB message, never finished: 1.2 MiB, where large
    // bodies may hold three quarters of the 1 MiB budget.
    let mut held = Vec::new();
    for _ in 0..6 {
        let mut data = prefix(250 << 10).to_vec();
        data.resize(5 + (200 << 10), b'x');
        held.push(open(&mut send, INFER, Bytes::from(data), false).await);
    }
    let answered = futures::future::join_all(
        held.into_iter().map(|resp| tokio::time::timeout(Duration::from_millis(1000), code(resp))),
    )
    .await;
    let mut refused = 0;
    for c in answered.into_iter().flatten() {
        assert_eq!(c, RESOURCE_EXHAUSTED);
        refused += 1;
    }
    assert!((2..6).contains(&refused), "past the budget: refused ({refused})");
    let m = gw.metrics().await;
    assert!(gauge(&m, "gateway_request_body_buffered_bytes") <= 768 << 10, "{m}");
    // The same connection's other calls, and another client's, are served.
    let resp = open(&mut send, LIVE, prefix(0), true).await;
    assert_eq!(code(resp).await, 0);
    assert!(live(addr).await);
    // The bodies not finished are refused at the body deadline, and their bytes given back.
    let mut back = false;
    for _ in 0..100 {
        if gauge(&gw.metrics().await, "gateway_request_body_buffered_bytes") == 0 {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(back, "the budget is given back");
}

#[tokio::test]
async fn a_message_declared_too_large_is_refused_at_its_prefix_and_a_trickle_at_the_deadline() {
    let (gw, addr) = start(|_| {}).await;
    let mut send = h2(addr, None).await;
    // 4 GB declared, nothing after the prefix.
    let t = Instant::now();
    let resp = open(&mut send, INFER, prefix(u32::MAX), false).await;
    assert_eq!(code(resp).await, RESOURCE_EXHAUSTED);
    assert!(t.elapsed() < Duration::from_millis(300), "at the prefix, not at a deadline: {:?}", t.elapsed());
    // KEDA's calls too (tonic's codec answers the listener's status).
    let resp = open(&mut send, "/externalscaler.ExternalScaler/IsActive", prefix(u32::MAX), false).await;
    assert_eq!(code(resp).await, RESOURCE_EXHAUSTED);
    // 100 bytes declared, 10 sent, then nothing: refused at the body deadline.
    let t = Instant::now();
    let mut data = prefix(100).to_vec();
    data.extend_from_slice(&[0u8; 10]);
    let resp = open(&mut send, LIVE, Bytes::from(data), false).await;
    assert_eq!(code(resp).await, DEADLINE_EXCEEDED);
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(450) && took < Duration::from_secs(3), "{took:?}");
    assert!(live(addr).await);
    let m = gw.metrics().await;
    assert!(m.contains("gateway_request_body_errors_total{error_type=\"too_large\"} 2"), "{m}");
    assert!(m.contains("gateway_request_body_errors_total{error_type=\"timeout\"} 1"), "{m}");
}

#[tokio::test]
async fn connections_without_a_preface_close_at_the_header_deadline_and_past_the_address_cap_at_once() {
    // The per-address cap holds under pressure only (no more places free than one share): with
    // 20 places, an address's eleventh connection meets it, and 10 places stay for the others.
    let (gw, addr) = start(|c| {
        c.listener.max_connections = 20;
        c.listener.max_connections_per_address = Some(10);
    })
    .await;
    let from = |ip: [u8; 4]| async move {
        let s = TcpSocket::new_v4().unwrap();
        s.bind(SocketAddr::from((ip, 0))).unwrap();
        s.connect(addr).await.unwrap()
    };
    let t = Instant::now();
    let mut bare = Vec::new();
    for _ in 0..15 {
        let mut s = from([127, 0, 0, 2]).await;
        bare.push(tokio::spawn(async move {
            // The server's SETTINGS may come first; then the close.
            let mut rest = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
            assert!(read.is_ok(), "closed");
            t.elapsed()
        }));
    }
    // Another address is served meanwhile.
    assert!(live(addr).await);
    let mut closed_at = Vec::new();
    for s in bare {
        closed_at.push(s.await.unwrap());
    }
    closed_at.sort();
    // Five past the per-address cap at once, ten at the preface deadline.
    assert!(closed_at[4] < Duration::from_millis(250), "{closed_at:?}");
    assert!(closed_at[5] >= Duration::from_millis(250) && closed_at[14] < Duration::from_secs(2), "{closed_at:?}");
    let m = gw.metrics().await;
    assert!(m.contains("gateway_grpc_connections_refused_per_address_total 5"), "{m}");
    assert!(m.contains("gateway_grpc_connections_timed_out_total{timeout=\"header\"} 10"), "{m}");
    assert!(live(addr).await);
}

#[tokio::test]
async fn a_connection_whose_answers_go_unread_is_closed_and_streams_are_bounded() {
    let (gw, addr) = start(|_| {}).await;
    // A peer that opens no window: no answer's message can be sent.
    let mut send = h2(addr, Some(0)).await;
    let mut unread = Vec::new();
    for _ in 0..10 {
        unread.push(open(&mut send, LIVE, prefix(0), true).await);
    }
    let t = Instant::now();
    // The headers come; the messages wait; the connection is closed within two --idle-timeout.
    for resp in unread {
        let resp = tokio::time::timeout(Duration::from_secs(3), resp).await.expect("the headers came");
        if let Ok(resp) = resp {
            let mut body = resp.into_body();
            let data = tokio::time::timeout(Duration::from_secs(3), body.data()).await.expect("ended");
            assert!(!matches!(data, Some(Ok(_))), "no message was sent: {data:?}");
        }
    }
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let m = gw.metrics().await;
    assert!(m.contains("gateway_grpc_connections_timed_out_total{timeout=\"send\"} 1"), "{m}");
    assert!(live(addr).await);

    // The bound on streams a connection, as the server's first SETTINGS frame advertises it.
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").await.unwrap();
    let mut head = [0u8; 9];
    tcp.read_exact(&mut head).await.unwrap();
    assert_eq!(head[3], 4, "a SETTINGS frame first");
    let mut payload = vec![0u8; usize::from(head[2]) | usize::from(head[1]) << 8];
    tcp.read_exact(&mut payload).await.unwrap();
    let max_streams =
        payload.chunks(6).find(|s| s[..2] == [0, 3]).map(|s| u32::from_be_bytes([s[2], s[3], s[4], s[5]]));
    assert_eq!(max_streams, Some(listener::h2::MAX_CONCURRENT_STREAMS));
}

#[tokio::test]
async fn rapid_reset_still_closes_the_connection_and_others_are_served() {
    let (_gw, addr) = start(|_| {}).await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(conn);
    let mut send = send.ready().await.unwrap();
    // Calls opened and reset at once, written in one go: more than h2's 20 pending resets.
    let mut sent = 0;
    while let Ok((_resp, mut body)) = send.send_request(call(LIVE), false) {
        body.send_reset(h2::Reason::CANCEL);
        sent += 1;
        if sent == 200 {
            break;
        }
    }
    assert!(sent > 20, "{sent}");
    let ended = tokio::time::timeout(Duration::from_secs(5), conn).await.expect("closed").unwrap();
    let e = ended.expect_err("closed by the server");
    assert_eq!(e.reason(), Some(h2::Reason::ENHANCE_YOUR_CALM), "{e}");
    assert!(live(addr).await);
}
