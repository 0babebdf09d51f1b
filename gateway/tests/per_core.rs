//! The per-core runtime (`--runtime per-core`), the binary in front of fake workers: one
//! single-threaded runtime per core, each on its own `SO_REUSEPORT` socket, serves HTTP/1 and
//! gRPC; the connection cap is the process's, not one per core; SIGTERM drains every core.

mod common;

use std::time::Duration;

use common::FakeWorker;
use oip::pb::ServerLiveRequest;
use oip::pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use testkit::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Command;

const CORES: &str = "2";

/// The gateway binary, per core, in front of `workers`, with `extra` flags.
async fn start(workers: &[&FakeWorker], extra: &[&str]) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gateway"));
    cmd.args(["--runtime", "per-core", "--runtime-threads", CORES])
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--stats-interval", "50ms", "--probe-backoff", "50ms", "--log", "warn"]);
    for w in workers {
        cmd.args(["--worker", &w.url]);
    }
    cmd.args(extra);
    Server::start(cmd).await
}

/// `host:port` of a `http://host:port` URL.
fn addr(url: &str) -> String {
    url.trim_start_matches("http://").trim_start_matches("https://").to_owned()
}

/// Reads one answer off `s` (the gateway's are length-delimited): its status and body.
async fn read_answer(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(u16, String)> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let len = head
                .lines()
                .find_map(|l| l.split_once(':').filter(|(n, _)| n.eq_ignore_ascii_case("content-length")))
                .map_or(0, |(_, v)| v.trim().parse::<usize>().unwrap());
            if buf.len() >= end + 4 + len {
                let status = head.split_whitespace().nth(1)?.parse().ok()?;
                let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
                buf.drain(..end + 4 + len);
                return Some((status, body));
            }
        }
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn predict(i: usize) -> Vec<u8> {
    format!("GET /predict?query=q{i} HTTP/1.1\r\nhost: gw\r\n\r\n").into_bytes()
}

/// The value of the series `name` (with its labels, if any) in `/metrics` of the admin port.
async fn metric(gw: &Server, name: &str) -> f64 {
    let admin = gw.announced("admin", Duration::from_secs(5)).await.expect("an admin port");
    let answer = testkit::http::get(&testkit::http::client(), &format!("{admin}/metrics")).await;
    let text = answer.body.as_str().expect("the exposition text");
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        .parse()
        .unwrap()
}

/// Waits until the default pool is ready (a worker probed and in rotation).
async fn wait_ready(gw: &Server) {
    let c = testkit::http::client();
    for _ in 0..1000 {
        if testkit::http::get(&c, &gw.at("/readyz")).await.status == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the gateway never became ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_over_many_connections_is_answered_on_both_protocols() {
    let (w1, w2) = (FakeWorker::start("w1").await, FakeWorker::start("w2").await);
    let gw = start(&[&w1, &w2], &["--grpc-listen", "127.0.0.1:0"]).await;
    wait_ready(&gw).await;
    let threads = std::fs::read_dir(format!("/proc/{}/task", gw.pid()))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("gateway-core-"))
        .count();
    assert_eq!(threads, 2, "one thread a core");

    // 40 connections, 10 keep-alive requests each, all at once.
    let accepted = metric(&gw, "gateway_connections_accepted_total").await;
    let at = addr(&gw.url);
    let clients: Vec<_> = (0..40)
        .map(|c| {
            let at = at.clone();
            tokio::spawn(async move {
                let mut s = TcpStream::connect(&at).await.unwrap();
                let mut buf = Vec::new();
                let mut statuses = Vec::new();
                for i in 0..10 {
                    s.write_all(&predict(c * 10 + i)).await.unwrap();
                    let (status, body) = read_answer(&mut s, &mut buf).await.expect("an answer");
                    assert!(status != 200 || body.contains("\"intent\""), "{body}");
                    statuses.push(status);
                }
                statuses
            })
        })
        .collect();
    let mut answered = 0;
    for c in clients {
        let statuses = c.await.unwrap();
        assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
        answered += statuses.len();
    }
    assert_eq!(answered, 400);
    assert_eq!(w1.queries() + w2.queries(), 400, "every query reached a worker once");
    assert_eq!(metric(&gw, "gateway_connections_accepted_total").await - accepted, 40.0);

    // gRPC, on the same cores: a call on each of a few connections of their own.
    let grpc = gw.announced("grpc", Duration::from_secs(5)).await.expect("a gRPC port");
    for _ in 0..8 {
        let mut c = GrpcInferenceServiceClient::connect(grpc.clone()).await.expect("connects");
        assert!(c.server_live(ServerLiveRequest {}).await.expect("served").into_inner().live);
    }
    assert_eq!(metric(&gw, "gateway_grpc_connections_accepted_total").await, 8.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_is_the_processs_not_one_per_core() {
    let (w1, w2) = (FakeWorker::start("w1").await, FakeWorker::start("w2").await);
    let cap = 6;
    let gw = start(
        &[&w1, &w2],
        &["--max-connections", "6", "--max-connections-per-address", "6", "--attempt-timeout-min", "5s"],
    )
    .await;
    wait_ready(&gw).await;
    assert_eq!(metric(&gw, "gateway_connections_limit").await, 6.0, "the cap once, not once per core");
    // Every place taken by a request in progress (none can be closed to make room).
    w1.set_delay(1500);
    w2.set_delay(1500);
    let at = addr(&gw.url);
    let mut busy = Vec::new();
    for i in 0..cap {
        let mut s = TcpStream::connect(&at).await.unwrap();
        s.write_all(&predict(i)).await.unwrap();
        busy.push(s);
    }
    let arrived = || w1.arrivals() + w2.arrivals();
    common::wait_for(|| arrived() == cap as u64, "every busy request at a worker").await;
    // Four more, spread by the kernel over both cores' sockets: with a cap per core, the core
    // holding fewer than six would take them.
    for i in 0..4 {
        let mut s = TcpStream::connect(&at).await.unwrap();
        let _ = s.write_all(&predict(100 + i)).await;
        let (status, body) = read_answer(&mut s, &mut Vec::new()).await.expect("answered, not just closed");
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("overloaded"), "{body}");
    }
    assert_eq!(metric(&gw, "gateway_connections_refused_total").await, 4.0);
    assert_eq!(metric(&gw, "gateway_connections_open").await, 6.0);
    for mut s in busy {
        let (status, body) = read_answer(&mut s, &mut Vec::new()).await.expect("the busy requests are answered");
        assert_eq!(status, 200, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cores_connections_time_out() {
    let w = FakeWorker::start("w").await;
    let gw = start(&[&w], &["--idle-timeout", "300ms"]).await;
    wait_ready(&gw).await;
    // Sixteen keep-alive connections, spread by the kernel over both cores' sockets: one sweeper
    // (the first core's) keeps the deadlines of all.
    let at = addr(&gw.url);
    let mut idle = Vec::new();
    for i in 0..16 {
        let mut s = TcpStream::connect(&at).await.unwrap();
        s.write_all(&predict(i)).await.unwrap();
        let mut buf = Vec::new();
        assert_eq!(read_answer(&mut s, &mut buf).await.expect("answered").0, 200);
        idle.push((s, buf));
    }
    for (mut s, mut buf) in idle {
        let closed = tokio::time::timeout(Duration::from_secs(5), read_answer(&mut s, &mut buf)).await;
        assert!(matches!(closed, Ok(None)), "an idle connection is closed at its timeout");
    }
    let idle_timeouts = metric(&gw, r#"gateway_connections_timed_out_total{timeout="idle"}"#).await;
    // The readiness poll's connection may have timed out too.
    assert!(idle_timeouts >= 16.0, "{idle_timeouts}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_every_core_and_the_process_exits() {
    let w = FakeWorker::start("w").await;
    // Each request its own exchange (not merged), so that the worker counts them all.
    let mut gw = start(&[&w], &["--no-coalesce"]).await;
    wait_ready(&gw).await;
    w.set_delay(800);
    let at = addr(&gw.url);
    let mut in_flight = Vec::new();
    for i in 0..20 {
        let mut s = TcpStream::connect(&at).await.unwrap();
        s.write_all(&predict(i)).await.unwrap();
        in_flight.push(s);
    }
    common::wait_for(|| w.arrivals() == 20, "every request at the worker").await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(gw.pid()), nix::sys::signal::Signal::SIGTERM).unwrap();
    for mut s in in_flight {
        let mut buf = Vec::new();
        let (status, body) = read_answer(&mut s, &mut buf).await.expect("a request in flight is answered");
        assert_eq!(status, 200, "{body}");
        // Answered with `Connection: close`: the connection ends after it.
        assert!(read_answer(&mut s, &mut buf).await.is_none(), "closed after its answer");
    }
    let exit = gw.wait_exit(Duration::from_secs(10)).await;
    assert!(exit.success(), "{exit:?}");
}
