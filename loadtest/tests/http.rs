//! The load generator against real in-process servers: HTTP/1.1 keep-alive, GET and POST
//! (single and batched), HTTP/2 (h2c), and every failure counted by status and `error_type`.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use support::{Action, OK, Server, json_error, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_http1_keeps_one_connection_per_client() {
    let server = Server::ok().await;
    let s = run(&server.url(), &["-c", "4", "-n", "400", "--warmup", "0s", "--threads", "2"]).await;
    assert_eq!(s.mode, "closed");
    assert_eq!(s.total.ok, 400);
    assert_eq!(s.total.requests, 400);
    assert_eq!(server.requests.load(Ordering::Relaxed), 400, "exactly -n requests");
    assert_eq!(server.connections.load(Ordering::Relaxed), 4, "keep-alive: one connection per client");
    assert_eq!(s.connections_opened, 4);
    assert!(s.total.p50_ms > 0.0 && s.total.max_ms >= s.total.p99_ms);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_sends_each_query_of_the_mix_url_encoded() {
    let server = Server::start(1000, |_| Action::Answer(Bytes::from_static(OK))).await;
    let dir = tempdir("queries");
    let file = dir.join("q.txt");
    std::fs::write(&file, "play jazz & blues\n\nweather in Paris?\n").unwrap();
    let s = run(&server.url(), &["-c", "1", "-n", "4", "--warmup", "0s", "--queries", file.to_str().unwrap()]).await;
    assert_eq!(s.total.ok, 4);
    let seen = server.seen.lock().unwrap().clone();
    let queries: Vec<String> = seen.iter().map(|r| r.query()).collect();
    assert_eq!(queries, ["play jazz & blues", "weather in Paris?", "play jazz & blues", "weather in Paris?"]);
    assert!(seen.iter().all(|r| r.method == "GET" && r.target.starts_with("/predict?query=")));
    assert_eq!(seen[0].header("host"), Some(server.addr.to_string().as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_sends_single_and_batched_json_bodies() {
    let server = Server::start(1000, |_| Action::Answer(Bytes::from_static(OK))).await;
    let s = run(&server.url(), &["-c", "2", "-n", "10", "--warmup", "0s", "--method", "post"]).await;
    assert_eq!(s.total.ok, 10);
    let s = run(&server.url(), &["-c", "2", "-n", "10", "--warmup", "0s", "--method", "post", "--batch", "3"]).await;
    assert_eq!(s.total.ok, 10);
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 20);
    for (i, r) in seen.iter().enumerate() {
        assert_eq!(r.method, "POST");
        assert_eq!(r.target, "/predict");
        assert_eq!(r.header("content-type"), Some("application/json"));
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        if i < 10 {
            assert!(v["query"].as_str().is_some_and(|q| !q.is_empty()), "{v}");
        } else {
            let qs = v["queries"].as_array().unwrap();
            assert_eq!(qs.len(), 3, "{v}");
            assert!(qs.iter().all(|q| q.as_str().is_some()));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_multiplexes_requests_over_one_connection_per_thread() {
    let (addr, conns, h2_requests) = support::h2c_server().await;
    let url = format!("http://{addr}");
    let s = run(&url, &["--http", "2", "-c", "8", "-n", "200", "--warmup", "0s", "--threads", "1"]).await;
    assert_eq!(s.total.ok, 200, "{:?}", s.total.errors);
    assert_eq!(h2_requests.load(Ordering::Relaxed), 200, "every request arrived as HTTP/2");
    assert_eq!(conns.load(Ordering::Relaxed), 1, "eight streams, one connection");
    // Open loop and POST bodies over HTTP/2 as well.
    let s = run(
        &url,
        &["--http", "2", "--rate", "const(200, 500ms)", "--warmup", "0s", "--method", "post", "--batch", "2"],
    )
    .await;
    assert_eq!(s.total.ok, 100, "{:?}", s.total.errors);
    assert_eq!(h2_requests.load(Ordering::Relaxed), 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_outcomes_are_read_from_the_grpc_status_in_trailers_or_headers() {
    let (addr, calls) = support::grpc_server().await;
    let url = format!("http://{addr}");
    let s = run(&url, &["--protocol", "grpc", "-c", "1", "-n", "90", "--warmup", "0s", "--threads", "1"]).await;
    let t = &s.total;
    assert_eq!(calls.load(Ordering::Relaxed), 90, "every call reached the server as a framed gRPC message");
    assert_eq!(t.requests, 90);
    assert_eq!(t.ok, 30, "grpc-status 0 in the trailers: {:?}", t.errors);
    assert_eq!(t.errors["429 non_json"], 30, "RESOURCE_EXHAUSTED, trailers-only: {:?}", t.errors);
    assert_eq!(t.errors["503 non_json"], 30, "UNAVAILABLE in the trailers: {:?}", t.errors);
    assert_eq!(s.connections_opened, 1, "one HTTP/2 connection carried every call");
    // Many calls at once on one connection (streams), in open loop too.
    let s = run(&url, &["--protocol", "grpc", "--rate", "const(300, 1s)", "--warmup", "0s", "--threads", "1"]).await;
    assert_eq!(s.total.requests, 300, "{:?}", s.total.errors);
    assert_eq!(s.total.ok, 100, "{:?}", s.total.errors);
    assert_eq!(s.connections_opened, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_counted_by_status_error_type_and_transport_kind() {
    // The query says what the server does.
    let server = Server::start(0, |r| match r.query().as_str() {
        "ok" => Action::Answer(Bytes::from_static(OK)),
        "overloaded" => Action::Answer(json_error(429, "overloaded")),
        // A chunked error body.
        "unavailable" => Action::Answer(Bytes::from_static(
            b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ntransfer-encoding: chunked\r\n\r\n\
              11\r\n{\"error\":\"drain\",\r\n1b\r\n\"error_type\":\"unavailable\"}\r\n0\r\n\r\n",
        )),
        "html" => Action::Answer(Bytes::from_static(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 9\r\n\r\n<b>no</b>")),
        "close" => Action::Close,
        _ => Action::Later(Duration::from_secs(5), Bytes::from_static(OK)),
    })
    .await;
    let dir = tempdir("errors");
    let file = dir.join("q.txt");
    std::fs::write(&file, "ok\noverloaded\nunavailable\nhtml\nclose\nslow\n").unwrap();
    let args =
        ["-c", "1", "-n", "60", "--warmup", "0s", "--request-timeout", "100ms", "--queries", file.to_str().unwrap()];
    let s = run(&server.url(), &args).await;
    let t = &s.total;
    assert_eq!(t.requests, 60);
    assert_eq!(t.ok, 10);
    assert_eq!(t.errors["429 overloaded"], 10, "{:?}", t.errors);
    assert_eq!(t.errors["503 unavailable"], 10, "{:?}", t.errors);
    assert_eq!(t.errors["502 non_json"], 10, "{:?}", t.errors);
    assert_eq!(t.errors["transport: closed before the answer"], 10, "{:?}", t.errors);
    assert_eq!(t.errors["timeout"], 10, "{:?}", t.errors);
    assert_eq!(t.errors.len(), 5);
    let statuses: Vec<(u16, &str)> = t
        .errors_by_kind
        .iter()
        .filter_map(|e| match &e.failed {
            loadtest::client::Failed::Status { status, error_type } => Some((*status, error_type.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(statuses, [(429, "overloaded"), (502, "non_json"), (503, "unavailable")]);
    // A failure has no latency sample: the successes were fast.
    assert!(t.max_ms < 100.0, "{}", t.max_ms);
    // The per-interval timeline adds up to the same failures.
    let failed: u64 = s.timeline.iter().map(|r| r.failed).sum();
    assert_eq!(failed, 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_down_is_a_connect_error_for_every_request() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let s = run(&url, &["-c", "2", "-n", "6", "--warmup", "0s"]).await;
    assert_eq!(s.total.ok, 0);
    assert_eq!(s.total.errors["connect: connection refused"], 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_connection_the_server_closed_is_replaced_without_an_error() {
    // Each connection serves one request and is then closed by the server while idle: the
    // next request finds it closed before a byte of answer, and is sent again on a new one.
    let idle_close = Server::start(0, |_| Action::AnswerThenClose(Bytes::from_static(OK))).await;
    let s = run(&idle_close.url(), &["-c", "1", "-n", "20", "--warmup", "0s"]).await;
    assert_eq!(s.total.ok, 20, "{:?}", s.total.errors);
    assert_eq!(idle_close.requests.load(Ordering::Relaxed), 20, "each request reached the server once");
    assert!(s.resent >= 1, "the resends are counted: {}", s.resent);
    // `Connection: close` answers are no error either: a new connection each time.
    let closing = Server::start(0, |_| {
        Action::Answer(Bytes::from_static(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"))
    })
    .await;
    let s = run(&closing.url(), &["-c", "1", "-n", "20", "--warmup", "0s"]).await;
    assert_eq!(s.total.ok, 20, "{:?}", s.total.errors);
    assert_eq!(closing.connections.load(Ordering::Relaxed), 20);
    assert_eq!(s.resent, 0);
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("loadtest-{name}-{}-{:?}", std::process::id(), std::thread::current().id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_that_ends_at_rate_zero_still_runs_its_whole_length() {
    let server = Server::ok().await;
    let s = run(&server.url(), &["--rate", "const(50, 500ms), const(0, 1s)", "--warmup", "0s", "--interval", "250ms"])
        .await;
    assert_eq!(s.total.ok, 25);
    assert!(s.seconds >= 1.45, "the pause is part of the run: {}", s.seconds);
    assert_eq!(s.phases[1].requests, 0);
}
