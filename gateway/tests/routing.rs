//! Routing, errors, admission, retries and ejection against in-process fake workers.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{FakeWorker, Mode, TestGateway, client, config, get, post, send, wait_for};
use gateway::Health;
use http::StatusCode;

#[tokio::test]
async fn predict_round_trips_get_and_post() {
    let w = FakeWorker::start("w1").await;
    let gw = TestGateway::start(config(&[&w])).await;
    gw.wait_ready("default", 1).await;
    let c = client();
    let a = post(&c, &format!("{}/predict", gw.url), r#"{"query":"play music"}"#).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body["intent"], "w1");
    assert_eq!(a.body["echo"], r#"{"query":"play music"}"#);
    let a = get(&c, &format!("{}/predict?query=hello%20there", gw.url)).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(w.predicts(), 2);
}

#[tokio::test]
async fn unknown_routes_methods_and_pools_are_json_errors() {
    let w = FakeWorker::start("w1").await;
    let gw = TestGateway::start(config(&[&w])).await;
    let c = client();
    let a = get(&c, &format!("{}/nope", gw.url)).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(a.body["error_type"], "not_found");
    let a = common::send(&c, "DELETE", &format!("{}/predict", gw.url), None).await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(a.body["error_type"], "method_not_allowed");
    let a = post(&c, &format!("{}/pools/ghost/predict", gw.url), r#"{"query":"x"}"#).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(a.body["error_type"], "not_found");
}

#[tokio::test]
async fn named_pools_route_to_their_own_workers() {
    let small = FakeWorker::start("small").await;
    let big = FakeWorker::start("big").await;
    let mut cfg = config(&[&small]);
    cfg.pool_workers = vec![format!("big={}", big.url)];
    let gw = TestGateway::start(cfg).await;
    gw.wait_ready("default", 1).await;
    gw.wait_ready("big", 1).await;
    let c = client();
    for _ in 0..5 {
        assert_eq!(post(&c, &format!("{}/pools/big/predict", gw.url), "{}").await.body["intent"], "big");
        assert_eq!(post(&c, &format!("{}/predict", gw.url), "{}").await.body["intent"], "small");
    }
}

#[tokio::test]
async fn no_ready_worker_fails_fast_with_503_and_retry_after() {
    let mut cfg = config(&[]);
    // A pool with no worker is at zero: its requests are held for a cold start, here briefly.
    cfg.no_worker_wait = Duration::from_millis(100);
    cfg.cold_start_hold = Duration::from_millis(100);
    let gw = TestGateway::start(cfg).await;
    let c = client();
    let started = std::time::Instant::now();
    let a = post(&c, &format!("{}/predict", gw.url), "{}").await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(a.body["error_type"], "unavailable");
    assert!(a.headers.contains_key("retry-after"));
    assert!(started.elapsed() < Duration::from_secs(5));
    let a = get(&c, &format!("{}/readyz", gw.url)).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn admission_is_bounded_with_429_and_retry_after() {
    let w = FakeWorker::start("slow").await;
    w.set_delay(500);
    let mut cfg = config(&[&w]);
    cfg.max_outstanding = 2;
    let gw = TestGateway::start(cfg).await;
    gw.wait_ready("default", 1).await;
    let c = client();
    let url = format!("{}/predict", gw.url);
    let hold: Vec<_> = (0..2)
        .map(|_| {
            let (c, url) = (c.clone(), url.clone());
            tokio::spawn(async move { post(&c, &url, "{}").await.status })
        })
        .collect();
    let p = gw.pool("default");
    wait_for(|| p.workers()[0].outstanding == 2, "two requests in flight").await;
    let a = post(&c, &url, "{}").await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(a.body["error_type"], "overloaded");
    assert_eq!(a.headers["retry-after"], "1");
    for h in hold {
        assert_eq!(h.await.unwrap(), StatusCode::OK);
    }
}

#[tokio::test]
async fn oversized_body_is_413_too_large() {
    let w = FakeWorker::start("w").await;
    let mut cfg = config(&[&w]);
    cfg.max_body_bytes = 16;
    let gw = TestGateway::start(cfg).await;
    let a = post(&client(), &format!("{}/predict", gw.url), &"x".repeat(100)).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(a.body["error_type"], "too_large");
    // Answered before any worker, and counted all the same, as are a wrong method and an
    // unknown pool.
    let c = client();
    let r = send(&c, "DELETE", &format!("{}/predict", gw.url), None).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    let r = get(&c, &format!("{}/pools/nope/predict?query=hi", gw.url)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let text = gw.metrics().await;
    for outcome in ["too_large", "method_not_allowed", "not_found"] {
        let line = format!("gateway_requests_total{{pool=\"\",worker=\"none\",outcome=\"{outcome}\"}} 1");
        assert!(text.lines().any(|l| l == line), "no `{line}` in {text}");
    }
}

#[tokio::test]
async fn draining_worker_503_is_retried_elsewhere_and_taken_out() {
    let a = FakeWorker::start("a").await;
    let b = FakeWorker::start("b").await;
    // Only the proxy's handling of the 503 may take `a` out here: without /v1/stats the monitor
    // cannot learn of the draining first (a race the test would otherwise depend on).
    a.state.reported_queue.store(u64::MAX, Ordering::SeqCst);
    // `b` answers slower than the RTT assumed for a new worker (30 ms), so once `b` has answered
    // the balancer prefers `a`: `a` gets one of the first two requests.
    b.set_delay(60);
    let gw = TestGateway::start(config(&[&a, &b])).await;
    gw.wait_ready("default", 2).await;
    a.set_mode(Mode::Draining);
    let c = client();
    for _ in 0..5 {
        let r = post(&c, &format!("{}/predict", gw.url), "{}").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(r.body["intent"], "b");
    }
    assert_eq!(a.state.refusals.load(Ordering::SeqCst), 1, "a refused once, then was out of rotation");
    let p = gw.pool("default");
    assert!(p.workers().iter().any(|w| w.url == a.url && w.health != Health::Ready));
    // Draining ends (the worker is back): the re-probe puts it back in rotation.
    b.set_delay(0);
    a.set_mode(Mode::Ok);
    gw.wait_ready("default", 2).await;
}

#[tokio::test]
async fn last_draining_worker_gives_503_unavailable() {
    let a = FakeWorker::start("a").await;
    let mut cfg = config(&[&a]);
    cfg.no_worker_wait = Duration::from_millis(50);
    let gw = TestGateway::start(cfg).await;
    gw.wait_ready("default", 1).await;
    a.set_mode(Mode::Draining);
    let r = post(&client(), &format!("{}/predict", gw.url), "{}").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.body["error_type"], "unavailable");
    assert!(r.headers.contains_key("retry-after"));
}

#[tokio::test]
async fn worker_overload_429_passes_through_with_retry_after() {
    let a = FakeWorker::start("a").await;
    let gw = TestGateway::start(config(&[&a])).await;
    gw.wait_ready("default", 1).await;
    a.set_mode(Mode::Overloaded);
    let r = post(&client(), &format!("{}/predict", gw.url), "{}").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.body["error_type"], "overloaded");
    assert_eq!(r.headers["retry-after"], "1");
}

#[tokio::test]
async fn dropped_connections_are_retried_on_another_worker() {
    let bad = FakeWorker::start("bad").await;
    let good = FakeWorker::start("good").await;
    // The bad worker looks faster at first, so the balancer tries it until its failures
    // raise its latency estimate.
    good.set_delay(5);
    let mut cfg = config(&[&bad, &good]);
    cfg.default_rtt = Duration::from_millis(1);
    let gw = TestGateway::start(cfg).await;
    gw.wait_ready("default", 2).await;
    bad.set_mode(Mode::Drop);
    let c = client();
    for _ in 0..50 {
        let r = post(&c, &format!("{}/predict", gw.url), "{}").await;
        assert_eq!(r.status, StatusCode::OK, "every request survives by its one retry");
        assert_eq!(r.body["intent"], "good");
    }
    let text = gw.metrics().await;
    assert!(text.contains("gateway_retries_total{pool=\"default\",reason=\"dropped\"}"), "{text}");
}

#[tokio::test]
async fn consecutive_failures_eject_and_reprobing_restores() {
    let bad = FakeWorker::start("bad").await;
    let mut cfg = config(&[&bad]);
    cfg.no_worker_wait = Duration::from_millis(20);
    cfg.probe_backoff = Duration::from_secs(30);
    cfg.probe_backoff_max = Duration::from_secs(30);
    let gw = TestGateway::start(cfg).await;
    gw.wait_ready("default", 1).await;
    bad.set_mode(Mode::Drop);
    let c = client();
    let p = gw.pool("default");
    for _ in 0..5 {
        let r = post(&c, &format!("{}/predict", gw.url), "{}").await;
        assert_eq!(r.status, StatusCode::BAD_GATEWAY);
        assert_eq!(r.body["error_type"], "upstream");
    }
    assert_eq!(p.workers()[0].health, Health::Ejected);
    let r = post(&c, &format!("{}/predict", gw.url), "{}").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "ejected: no ready worker");
    let text = gw.metrics().await;
    assert!(text.contains("gateway_ejections_total{pool=\"default\""), "{text}");
}

#[tokio::test]
async fn ejected_worker_is_reprobed_with_backoff() {
    let bad = FakeWorker::start("bad").await;
    let mut cfg = config(&[&bad]);
    cfg.no_worker_wait = Duration::from_millis(20);
    let gw = TestGateway::start(cfg).await;
    gw.wait_ready("default", 1).await;
    bad.set_mode(Mode::Drop);
    let c = client();
    let p = gw.pool("default");
    for _ in 0..5 {
        post(&c, &format!("{}/predict", gw.url), "{}").await;
    }
    // /readyz still answers 200, so the re-probe brings it back.
    bad.set_mode(Mode::Ok);
    wait_for(|| p.workers()[0].health == Health::Ready, "re-probed worker back").await;
    assert_eq!(post(&c, &format!("{}/predict", gw.url), "{}").await.status, StatusCode::OK);
}

#[tokio::test]
async fn killed_worker_costs_no_request() {
    let ws = [FakeWorker::start("a").await, FakeWorker::start("b").await, FakeWorker::start("c").await];
    for w in &ws {
        w.set_delay(20);
    }
    let gw = Arc::new(TestGateway::start(config(&[&ws[0], &ws[1], &ws[2]])).await);
    gw.wait_ready("default", 3).await;
    let c = client();
    let url = format!("{}/predict", gw.url);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (c, url) = (c.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            for _ in 0..40 {
                statuses.push(post(&c, &url, "{}").await.status);
            }
            statuses
        }));
    }
    let p = gw.pool("default");
    wait_for(|| ws[0].predicts() > 10 && p.workers().iter().any(|w| w.outstanding > 0), "load").await;
    ws[0].kill();
    let mut failed = 0;
    for t in tasks {
        failed += t.await.unwrap().iter().filter(|s| !s.is_success()).count();
    }
    assert_eq!(failed, 0, "requests inside the killed worker were retried on another");
}

#[tokio::test]
async fn the_deadline_answers_504_and_is_not_retried() {
    let a = FakeWorker::start("a").await;
    let b = FakeWorker::start("b").await;
    let mut cfg = config(&[&a, &b]);
    cfg.request_timeout = Duration::from_millis(300);
    let gw = TestGateway::start(cfg).await;
    gw.wait_ready("default", 2).await;
    // Both workers take far longer than the deadline.
    a.set_delay(20_000);
    b.set_delay(20_000);
    let started = std::time::Instant::now();
    let r = post(&client(), &format!("{}/predict", gw.url), "{}").await;
    assert_eq!(r.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(r.body["error_type"], "timeout");
    assert!(started.elapsed() < Duration::from_secs(10), "answered at the deadline, not the worker's pace");
    assert_eq!(a.arrivals() + b.arrivals(), 1, "a request a worker started is not sent again");
    let text = gw.metrics().await;
    assert!(text.contains("outcome=\"timeout\""), "{text}");
}

#[tokio::test]
async fn operator_routes_are_on_the_admin_port_only_and_predict_on_the_client_port_only() {
    let w = FakeWorker::start("w1").await;
    let gw = TestGateway::start(config(&[&w])).await;
    gw.wait_ready("default", 1).await;
    let c = client();
    for path in ["/metrics", "/v1/pools", "/v1/signal", "/pools/default/signal"] {
        let a = get(&c, &format!("{}{path}", gw.url)).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "client port {path}: {}", a.body);
        assert_eq!(a.body["error_type"], "not_found");
        assert_eq!(get(&c, &format!("{}{path}", gw.admin)).await.status, StatusCode::OK, "admin port {path}");
    }
    for path in ["/predict?query=hi", "/pools/default/predict?query=hi"] {
        assert_eq!(get(&c, &format!("{}{path}", gw.url)).await.status, StatusCode::OK, "client port {path}");
        let a = get(&c, &format!("{}{path}", gw.admin)).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "admin port {path}: {}", a.body);
    }
    for base in [&gw.url, &gw.admin] {
        assert_eq!(get(&c, &format!("{base}/healthz")).await.status, StatusCode::OK);
        assert_eq!(get(&c, &format!("{base}/readyz")).await.status, StatusCode::OK);
    }
    let pools = get(&c, &format!("{}/v1/pools", gw.admin)).await.body;
    assert_eq!(pools[0]["workers"][0]["url"], w.url.as_str(), "{pools}");
}

#[tokio::test]
async fn request_ids_and_traceparent_travel_to_the_worker_and_the_id_back_to_the_client() {
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let w = FakeWorker::start("w1").await;
    let gw = TestGateway::start(config(&[&w])).await;
    gw.wait_ready("default", 1).await;
    let c = client();
    let url = format!("{}/pools/default/predict", gw.url);
    let a = common::send_with(&c, "POST", &url, Some("{}"), &[("x-request-id", "client-7"), ("traceparent", TP)]).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.headers["x-request-id"], "client-7");
    // None given: the gateway makes one, sends it on and gives it back; errors carry it too.
    let a = post(&c, &format!("{}/predict", gw.url), "{}").await;
    let made = a.headers["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(made.len(), 32, "{made}");
    let a = post(&c, &format!("{}/pools/ghost/predict", gw.url), "{}").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert!(a.headers.contains_key("x-request-id"));
    let seen = w.state.ids.lock().unwrap().clone();
    assert_eq!(
        seen,
        [(Some("client-7".to_owned()), Some(TP.to_owned())), (Some(made), None)],
        "what the worker received"
    );
}

/// A `MakeWriter` into a shared buffer, for the log.
#[derive(Clone, Default)]
struct Log(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// One thread: the gateway's tasks run where the test's log subscriber is the default.
#[tokio::test(flavor = "current_thread")]
async fn the_log_lines_of_a_failing_request_carry_its_ids() {
    let log = Log::default();
    let sink = log.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || sink.clone()).with_ansi(false).finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let bad = FakeWorker::start("bad").await;
    let mut cfg = config(&[&bad]);
    cfg.eject_after = 1;
    cfg.no_worker_wait = Duration::from_millis(20);
    let gw = TestGateway::start(cfg).await;
    gw.wait_ready("default", 1).await;
    bad.set_mode(Mode::Drop);
    let url = format!("{}/predict", gw.url);
    let a = common::send_with(&client(), "POST", &url, Some("{}"), &[("x-request-id", "fail-1")]).await;
    assert_eq!(a.status, StatusCode::BAD_GATEWAY);
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    for what in ["worker ejected", "request failed"] {
        let line = text.lines().find(|l| l.contains(what)).unwrap_or_else(|| panic!("no {what:?} line: {text}"));
        assert!(line.contains("request_id=fail-1"), "{line}");
    }
}
