//! The worker's HTTP routes in-process (`app(state)` and `oneshot`) around the fake backend: no
//! ONNX Runtime, the real tokenizer and labels of the bundled model. Admission, 429, draining,
//! batching, timeouts and input errors, each through HTTP; and the routes as served
//! (`http::routes`, `/predict` past the router), which must answer as the router does.
//!
//! The backend runs on its own OS thread, so these tests use the real clock (a paused one would
//! jump to the request timeout whenever the runtime waits for that thread) and wait on
//! conditions with a bounded timeout.

use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{HeaderMap, Request, StatusCode};
use clap::Parser;
use serde_json::{Value, json};
use testkit::model_dir;
use tower::ServiceExt;
use worker::backend::FakeBackend;
use worker::backend::fake::RunBatch;
use worker::core::Class;
use worker::model::ModelDir;
use worker::{Config, Worker};

async fn start(args: &[&str], fake: &FakeBackend) -> Worker {
    let dir = model_dir();
    let mut argv = vec!["worker", "--model", dir.to_str().unwrap()];
    argv.extend_from_slice(args);
    let config = Config::parse_from(argv);
    let model = ModelDir::load(&config.model, None).expect("bundled model directory");
    let backend = fake.clone();
    worker::build(&config, model, move |_| Ok(backend.clone())).await.expect("worker builds")
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

async fn send(app: &Router, req: Request<Body>) -> Answer {
    let resp = app.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    Answer { status, headers, body }
}

async fn get(app: &Router, uri: &str) -> Answer {
    send(app, Request::get(uri).body(Body::empty()).unwrap()).await
}

async fn post(app: &Router, body: impl Into<Body>) -> Answer {
    send(app, Request::post("/predict").header("content-type", "application/json").body(body.into()).unwrap()).await
}

fn predict_uri(query: &str) -> String {
    format!("/predict?query={}", percent_encoding::utf8_percent_encode(query, percent_encoding::NON_ALPHANUMERIC))
}

/// What the fake backend answers for `query`: its class from the real tokenizer's ids.
fn model() -> &'static ModelDir {
    static MODEL: std::sync::OnceLock<ModelDir> = std::sync::OnceLock::new();
    MODEL.get_or_init(|| ModelDir::load(&model_dir(), None).unwrap())
}

/// `tokenizers` itself, as the reference the worker's own encoder must agree with.
fn reference_tokenizer() -> &'static tokenizers::Tokenizer {
    static TOKENIZER: std::sync::OnceLock<tokenizers::Tokenizer> = std::sync::OnceLock::new();
    TOKENIZER.get_or_init(|| tokenizers::Tokenizer::from_file(model_dir().join("tokenizer.json")).unwrap())
}

fn expected_intent(query: &str) -> String {
    let model = model();
    let ids: Vec<i64> =
        reference_tokenizer().encode(query, true).unwrap().get_ids().iter().map(|&i| i64::from(i)).collect();
    model.labels[FakeBackend::class_of(&ids, model.labels.len())].clone()
}

/// Polls `check` every 5 ms, failing after 10 s.
async fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn expect_error(a: &Answer, status: u16, error_type: &str) {
    assert_eq!(a.status.as_u16(), status, "{}", a.body);
    assert_eq!(a.headers.get("content-type").unwrap(), "application/json");
    assert_eq!(a.body["error_type"], error_type, "{}", a.body);
    assert!(a.body["error"].as_str().is_some_and(|e| !e.is_empty()), "{}", a.body);
}

#[tokio::test]
async fn answers_are_the_backends_classes_through_the_core_in_order() {
    let fake = FakeBackend::new(7);
    let w = start(&[], &fake).await;
    let app = w.app();
    let queries = ["play some jazz music", "book a table for two", "what's the weather like in paris tomorrow"];

    let a = get(&app, &predict_uri(queries[0])).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["intent"], expected_intent(queries[0]));
    // Softmax of one logit of 4 among seven classes.
    let score = 4f64.exp() / (4f64.exp() + 6.0);
    assert!((a.body["score"].as_f64().unwrap() - score).abs() < 1e-6, "{}", a.body);
    assert!(a.body.get("scores").is_none());

    let a = post(&app, json!({"queries": queries, "all_scores": true}).to_string()).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let predictions = a.body["predictions"].as_array().unwrap();
    let intents: Vec<&str> = predictions.iter().map(|p| p["intent"].as_str().unwrap()).collect();
    let expected: Vec<String> = queries.iter().map(|q| expected_intent(q)).collect();
    assert_eq!(intents, expected);
    let scores = predictions[0]["scores"].as_object().unwrap();
    assert_eq!(scores.len(), 7);
    assert!((scores.values().map(|v| v.as_f64().unwrap()).sum::<f64>() - 1.0).abs() < 1e-5);
}

#[tokio::test]
async fn a_full_queue_answers_429_with_retry_after_at_once_and_loses_nothing() {
    let fake = FakeBackend::new(7);
    let w = start(&["--queue-capacity", "2"], &fake).await;
    let app = w.app();
    fake.hold();
    let held = tokio::spawn({
        let app = app.clone();
        async move { post(&app, json!({"queries": ["play jazz", "play rock"]}).to_string()).await }
    });
    wait_until("the two queries are at the backend", || fake.waiting() == 1).await;

    let a = get(&app, &predict_uri("play music")).await;
    expect_error(&a, 429, "overloaded");
    assert_eq!(a.headers.get("retry-after").unwrap(), "1");
    let stats = get(&app, "/v1/stats").await.body;
    assert_eq!(stats["queue"]["in_flight"], 2);
    assert_eq!(stats["rates"]["rejected_total"], 1);

    fake.release();
    let a = held.await.unwrap();
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["predictions"].as_array().unwrap().len(), 2);
    assert_eq!(get(&app, &predict_uri("play music")).await.status, 200, "room again once answered");
}

#[tokio::test]
async fn draining_refuses_new_work_with_503_and_answers_accepted_work() {
    let fake = FakeBackend::new(7);
    let w = start(&[], &fake).await;
    let app = w.app();
    fake.hold();
    let accepted = tokio::spawn({
        let app = app.clone();
        async move { get(&app, &predict_uri("play some jazz music")).await }
    });
    wait_until("the query is at the backend", || fake.waiting() == 1).await;

    w.state().core.start_draining();
    expect_error(&get(&app, "/readyz").await, 503, "unavailable");
    let refused = get(&app, &predict_uri("play music")).await;
    expect_error(&refused, 503, "unavailable");
    assert_eq!(refused.headers.get("retry-after").unwrap(), "1");
    assert_eq!(refused.headers.get("connection").unwrap(), "close", "clients stop reusing connections");
    let stats = get(&app, "/v1/stats").await.body;
    assert_eq!((stats["ready"].clone(), stats["draining"].clone()), (json!(false), json!(true)));

    fake.release();
    let a = accepted.await.unwrap();
    assert_eq!(a.status, 200, "accepted work is answered while draining: {}", a.body);
    assert_eq!(w.state().core.outstanding(), 0);
}

#[tokio::test]
async fn queries_arriving_while_the_backend_is_busy_leave_in_one_batch() {
    let fake = FakeBackend::new(7);
    let w = start(&["--max-batch-rows", "32"], &fake).await;
    let app = w.app();
    fake.hold();
    let first = tokio::spawn({
        let app = app.clone();
        async move { get(&app, &predict_uri("play some jazz music")).await }
    });
    wait_until("the first query is at the backend", || fake.waiting() == 1).await;
    let rest: Vec<_> = (0..10)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { get(&app, &predict_uri("play some rock music")).await })
        })
        .collect();
    let core = w.state().core.clone();
    wait_until("ten queries are queued", || core.queue_stats().queued == 10).await;
    fake.release();
    assert_eq!(first.await.unwrap().status, 200);
    for r in rest {
        assert_eq!(r.await.unwrap().status, 200);
    }
    let batches = fake.batches();
    assert_eq!(batches.len(), 2, "{batches:?}");
    assert_eq!(batches[1], RunBatch { rows: 10, seq_len: batches[1].seq_len }, "the ten ran together");
}

#[tokio::test]
async fn with_two_sessions_a_second_batch_runs_while_the_first_is_held() {
    let fake = FakeBackend::new(7);
    let w = start(&["--sessions", "2"], &fake).await;
    let app = w.app();
    fake.hold();
    let ask = |query: &'static str| {
        let app = app.clone();
        tokio::spawn(async move { get(&app, &predict_uri(query)).await })
    };
    let first = ask("play some jazz music");
    wait_until("the first query is at a session", || fake.waiting() == 1).await;
    let second = ask("book a table for two tonight");
    wait_until("the second query is at the other session", || fake.waiting() == 2).await;
    let queue = &get(&app, "/v1/stats").await.body["queue"];
    assert_eq!((queue["in_flight"].as_u64(), queue["queued"].as_u64()), (Some(2), Some(0)), "{queue}");
    fake.release();
    for (answer, query) in [(first, "play some jazz music"), (second, "book a table for two tonight")] {
        let a = answer.await.unwrap();
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.body["intent"], expected_intent(query), "{}", a.body);
    }
    assert_eq!(fake.batches().iter().map(|b| b.rows).collect::<Vec<_>>(), [1, 1]);
    let queue = &get(&app, "/v1/stats").await.body["queue"];
    assert_eq!(queue["in_flight"].as_u64(), Some(0), "{queue}");
}

#[tokio::test]
async fn a_request_past_its_timeout_gets_504_and_a_failed_batch_a_json_500() {
    let fake = FakeBackend::new(7);
    let w = start(&["--request-timeout", "200ms"], &fake).await;
    let app = w.app();
    fake.hold();
    let started = std::time::Instant::now();
    expect_error(&get(&app, &predict_uri("play music")).await, 504, "timeout");
    assert!(started.elapsed() < Duration::from_secs(5));
    fake.set_failing(true);
    fake.release();
    let a = get(&app, &predict_uri("play music")).await;
    expect_error(&a, 500, "internal");
    assert_eq!(a.body["error"], "internal error", "no internal detail reaches the client");
}

/// A request has no timer of its own: the lane times its queries out wherever they wait. With the
/// backend hung, one query runs (held at the gate), a full batch waits in the backend's slot, the
/// rest wait in the queue, and a request of several queries waits too: each gets its 504 at its
/// deadline, and holds nothing once answered.
#[tokio::test]
async fn with_the_backend_hung_every_request_gets_504_at_its_deadline_wherever_it_waits() {
    let fake = FakeBackend::new(7);
    let w = start(&["--request-timeout", "300ms", "--sessions", "1", "--max-batch-rows", "2"], &fake).await;
    let app = w.app();
    fake.hold();
    let started = std::time::Instant::now();
    let mut calls = Vec::new();
    for i in 0..7 {
        let app = app.clone();
        calls.push(tokio::spawn(async move { get(&app, &predict_uri(&format!("play song number {i}"))).await }));
    }
    let several = app.clone();
    calls.push(tokio::spawn(async move { post(&several, json!({"queries": ["a", "b", "c"]}).to_string()).await }));
    for call in calls {
        let a = tokio::time::timeout(Duration::from_secs(10), call).await.expect("answered by its deadline").unwrap();
        expect_error(&a, 504, "timeout");
    }
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(5), "{waited:?}");
    let queue = &get(&app, "/v1/stats").await.body["queue"];
    assert_eq!((queue["queued"].as_u64(), queue["in_flight"].as_u64()), (Some(0), Some(0)), "{queue}");
    fake.release();
    let a = get(&app, &predict_uri("play music")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["intent"], expected_intent("play music"));
}

#[tokio::test]
async fn bad_input_gets_a_clear_json_error_and_nothing_is_lost() {
    let fake = FakeBackend::new(7);
    let w = start(&["--max-queries", "4", "--max-query-bytes", "100", "--max-body-bytes", "4096"], &fake).await;
    let app = w.app();

    for (query_string, status, kind) in [
        ("query=", 400, "invalid_request"),
        ("query=%20%20%09", 400, "invalid_request"),
        ("", 400, "invalid_request"),
        ("query=%FF%FE", 400, "invalid_request"),
        ("all_scores=maybe&query=a", 400, "invalid_request"),
    ] {
        expect_error(&get(&app, &format!("/predict?{query_string}")).await, status, kind);
    }
    let long = format!("/predict?query={}", "a".repeat(101));
    expect_error(&get(&app, &long).await, 400, "too_large");

    let five = json!({"queries": ["a", "b", "c", "d", "e"]}).to_string();
    let big = json!({"query": "x".repeat(8000)}).to_string();
    for (body, status, kind) in [
        (b"{not json".to_vec(), 400, "invalid_request"),
        (b"{\"query\": \"\xff\xfe\"}".to_vec(), 400, "invalid_request"),
        (br#"{"query": 42}"#.to_vec(), 400, "invalid_request"),
        (br#"{"queries": "play music"}"#.to_vec(), 400, "invalid_request"),
        (br#"{"queries": []}"#.to_vec(), 400, "invalid_request"),
        (br#"{"queries": ["ok", " "]}"#.to_vec(), 400, "invalid_request"),
        (br#"{"query": "a", "queries": ["b"]}"#.to_vec(), 400, "invalid_request"),
        (br#"{"qurey": "typo"}"#.to_vec(), 400, "invalid_request"),
        (br#"{}"#.to_vec(), 400, "invalid_request"),
        (five.into_bytes(), 400, "invalid_request"),
        (big.into_bytes(), 413, "too_large"),
    ] {
        let shown = String::from_utf8_lossy(&body).chars().take(60).collect::<String>();
        let a = post(&app, body).await;
        assert_eq!(a.status.as_u16(), status, "{shown}: {}", a.body);
        expect_error(&a, status, kind);
    }
    expect_error(&get(&app, "/nope").await, 404, "not_found");
    let delete = send(&app, Request::delete("/predict").body(Body::empty()).unwrap()).await;
    expect_error(&delete, 405, "method_not_allowed");

    assert_eq!(get(&app, &predict_uri("play some jazz music")).await.status, 200, "the worker still answers");
    let metrics = get(&app, "/metrics").await.body;
    let text = metrics.as_str().unwrap();
    assert!(text.contains("worker_requests_total{outcome=\"invalid_request\"} 15"), "{text}");
    assert!(text.contains("worker_requests_total{outcome=\"too_large\"} 2"), "{text}");
}

/// Tokens the bundled tokenizer makes of `query` ([CLS] and [SEP] included).
fn tokens_of(query: &str) -> u64 {
    reference_tokenizer().encode(query, true).unwrap().len() as u64
}

/// A worker whose light and heavy lanes have fakes of their own, so each can be held apart.
async fn start_with_lanes(args: &[&str], light: &FakeBackend, heavy: &FakeBackend) -> Worker {
    let dir = model_dir();
    let mut argv = vec!["worker", "--model", dir.to_str().unwrap()];
    argv.extend_from_slice(args);
    let config = Config::parse_from(argv);
    let model = ModelDir::load(&config.model, None).unwrap();
    let (light, heavy) = (light.clone(), heavy.clone());
    worker::build(&config, model, move |lane| Ok(if lane == Class::Heavy { heavy.clone() } else { light.clone() }))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_heavy_request_runs_in_its_own_lane_and_light_ones_pass_it() {
    let (light, heavy) = (FakeBackend::new(7), FakeBackend::new(7));
    let w = start_with_lanes(&["--heavy-request-tokens", "16"], &light, &heavy).await;
    let app = w.app();
    let queries = ["play some jazz music", "book a table for two tonight", "what is the weather in paris"];
    assert!(queries.iter().map(|q| tokens_of(q)).sum::<u64>() > 16, "the request is heavy");
    heavy.hold();
    let slow = tokio::spawn({
        let app = app.clone();
        async move { post(&app, json!({"queries": queries}).to_string()).await }
    });
    wait_until("the heavy request is at its backend", || heavy.waiting() == 1).await;
    let stats = get(&app, "/v1/stats").await.body;
    assert_eq!(stats["queue"]["heavy_queries"], 3, "{stats}");

    // A light request is answered while the heavy one is still held.
    let a = get(&app, &predict_uri("play music")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(!slow.is_finished());
    assert_eq!(light.batches(), [RunBatch { rows: 1, seq_len: tokens_of("play music") as usize }]);

    heavy.release();
    let a = slow.await.unwrap();
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(heavy.batches().iter().map(|b| b.rows).sum::<usize>(), 3, "the heavy queries ran in the heavy lane");
    let metrics = get(&app, "/metrics").await.body;
    let text = metrics.as_str().unwrap();
    assert!(text.contains("worker_admitted_requests_total{class=\"heavy\"} 1"), "{text}");
    assert!(text.contains("worker_admitted_requests_total{class=\"light\"} 1"), "{text}");
}

#[tokio::test]
async fn tokens_are_admitted_up_to_the_capacity_and_heavy_requests_up_to_half() {
    let (light, heavy) = (FakeBackend::new(7), FakeBackend::new(7));
    let args = ["--queue-capacity-tokens", "100", "--heavy-request-tokens", "20"];
    let w = start_with_lanes(&args, &light, &heavy).await;
    let app = w.app();
    // Four copies of a 10-token query: 40 tokens, heavy; two such requests would hold 80 > 50.
    let query = "book a table for two at noon";
    let request = json!({"queries": [query, query, query, query]}).to_string();
    let tokens = 4 * tokens_of(query);
    assert!(tokens > 25 && tokens <= 50, "{tokens} tokens");
    heavy.hold();
    let held = tokio::spawn({
        let (app, request) = (app.clone(), request.clone());
        async move { post(&app, request).await }
    });
    wait_until("the first heavy request is at its backend", || heavy.waiting() == 1).await;

    let refused = post(&app, request.clone()).await;
    expect_error(&refused, 429, "overloaded");
    assert_eq!(refused.headers.get("retry-after").unwrap(), "1");
    // Light requests still find room, in queries and in tokens.
    assert_eq!(get(&app, &predict_uri("play music")).await.status, 200);
    let q = get(&app, "/v1/stats").await.body["queue"].clone();
    assert_eq!(q["capacity_tokens"], 100);
    assert_eq!(q["heavy_tokens"], tokens);
    assert_eq!(q["in_flight_tokens"].as_u64().unwrap() + q["queued_tokens"].as_u64().unwrap(), tokens);

    heavy.release();
    assert_eq!(held.await.unwrap().status, 200);
    assert_eq!(post(&app, request).await.status, 200, "room again once the first is answered");
}

/// Sends `raw` on a new connection to `addr`, half-closes, and reads the answer's status line and
/// body.
async fn raw_exchange(addr: std::net::SocketAddr, raw: &[u8]) -> (String, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.write_all(raw).await.unwrap();
    sock.shutdown().await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut answer)).await.expect("answered").unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.lines().next().unwrap_or_default().to_owned();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.into())))
}

#[tokio::test]
async fn a_broken_body_gets_400_invalid_request_from_the_server() {
    let fake = FakeBackend::new(7);
    let w = start(&[], &fake).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(w.serve(listener, std::future::pending()));

    let head = "POST /predict HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\n";
    for (what, raw) in [
        ("malformed chunk size", format!("{head}transfer-encoding: chunked\r\n\r\nzz\r\n{{}}\r\n0\r\n\r\n")),
        ("chunked body cut short", format!("{head}transfer-encoding: chunked\r\n\r\n10\r\n{{\"query\"")),
        ("body shorter than its length", format!("{head}content-length: 100\r\n\r\n{{\"query\": \"play\"}}")),
    ] {
        let (status, body) = raw_exchange(addr, raw.as_bytes()).await;
        assert!(status.starts_with("HTTP/1.1 400"), "{what}: {status} {body}");
        assert_eq!(body["error_type"], "invalid_request", "{what}: {body}");
    }
    server.abort();
}

const FAST_PATH_TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Requests for the fast path's comparison with the router: answers, refusals, other methods.
fn fast_path_requests() -> Vec<(&'static str, Request<Body>)> {
    let get_req = |uri: &str| Request::get(uri).body(Body::empty()).unwrap();
    let post_req = |body: &str| {
        Request::post("/predict").header("content-type", "application/json").body(Body::from(body.to_owned())).unwrap()
    };
    let with_id = Request::get("/predict?query=play%20some%20jazz")
        .header("x-request-id", "client-7")
        .header("traceparent", FAST_PATH_TRACEPARENT)
        .body(Body::empty())
        .unwrap();
    vec![
        ("get", get_req("/predict?query=play%20some%20jazz")),
        ("get, all scores", get_req("/predict?query=book%20a%20table&all_scores=true")),
        ("get, no query", get_req("/predict")),
        ("get, empty query", get_req("/predict?query=")),
        ("get, invalid utf-8", get_req("/predict?query=%FF")),
        ("get, long query", get_req(&format!("/predict?query={}", "a".repeat(3000)))),
        ("get, client's id", with_id),
        ("post one", post_req(r#"{"query": "rate this book"}"#)),
        ("post many", post_req(r#"{"queries": ["rate this book", "will it rain"], "all_scores": true}"#)),
        ("post, not json", post_req("query=jazz")),
        ("post, an array", post_req(r#"["jazz"]"#)),
        ("post, both", post_req(r#"{"query": "a", "queries": ["b"]}"#)),
        ("post, too many", post_req(&format!(r#"{{"queries": [{}]}}"#, vec![r#""q""#; 65].join(",")))),
        ("put", Request::put("/predict").body(Body::empty()).unwrap()),
        ("head", Request::head("/predict?query=jazz").body(Body::empty()).unwrap()),
    ]
}

async fn answer_parts(resp: axum::http::Response<Body>) -> (u16, Vec<(String, String)>, String, bool) {
    let status = resp.status().as_u16();
    let mut headers: Vec<(String, String)> = ["content-type", "retry-after", "connection", "allow"]
        .iter()
        .filter_map(|h| resp.headers().get(*h).map(|v| (h.to_string(), v.to_str().unwrap().to_owned())))
        .collect();
    let id = resp.headers().get("x-request-id").map(|v| v.to_str().unwrap().to_owned());
    let generated = id.as_ref().is_some_and(|id| id.len() == 32 && id.bytes().all(|c| c.is_ascii_hexdigit()));
    if let Some(id) = id.filter(|_| !generated) {
        headers.push(("x-request-id".into(), id));
    }
    let body = String::from_utf8(to_bytes(resp.into_body(), usize::MAX).await.unwrap().to_vec()).unwrap();
    (status, headers, body, generated)
}

/// The served routes (`http::routes`: `GET` and `POST /predict` straight to their handlers)
/// answer exactly as the router (`http::app`) does: status, the headers a client relies on and
/// the body, for answers, refusals and a failing backend, and both echo the request's id.
#[tokio::test]
async fn the_fast_path_answers_as_the_router_does() {
    let fake = FakeBackend::new(7);
    let worker = start(&[], &fake).await;
    let (app, routes) = (worker.app(), worker::http::routes(worker.state()));

    for failing in [false, true] {
        fake.set_failing(failing);
        for ((name, a), (_, b)) in fast_path_requests().into_iter().zip(fast_path_requests()) {
            let by_router = answer_parts(app.clone().oneshot(a).await.unwrap()).await;
            let by_routes = answer_parts(routes.clone().oneshot(b).await.unwrap()).await;
            assert_eq!(by_routes, by_router, "{name} (backend failing: {failing})");
            let (status, _, body, _) = &by_routes;
            if *status != 200 && !body.is_empty() {
                let v: serde_json::Value = serde_json::from_str(body).unwrap();
                assert!(v["error_type"].is_string(), "{name}: {v}");
            }
        }
    }
    // While draining, both say so and ask the client to close.
    worker.state().core.start_draining();
    for ((name, a), (_, b)) in fast_path_requests().into_iter().zip(fast_path_requests()).take(2) {
        let by_router = answer_parts(app.clone().oneshot(a).await.unwrap()).await;
        let by_routes = answer_parts(routes.clone().oneshot(b).await.unwrap()).await;
        assert_eq!(by_routes, by_router, "{name} (draining)");
        assert_eq!(by_routes.0, 503, "{name}");
        assert!(by_routes.1.contains(&("connection".into(), "close".into())), "{name}: {:?}", by_routes.1);
    }
}
