//! Issue 9 against in-process fake workers: overload stays 429, stalled workers cost no request,
//! slow workers are not ejected, heavy requests do not take all of admission, and the client
//! port's connection hygiene (the listener crate) answers in JSON.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{FakeWorker, Mode, TestGateway, client, config, post, wait_for};
use gateway::Health;
use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn health(gw: &TestGateway, w: &FakeWorker) -> Health {
    gw.pool("default").workers().into_iter().find(|s| s.url == w.url).map(|s| s.health).unwrap()
}

/// Send `bytes` on a new connection and read until the server closes it (at most 10 s).
async fn raw(addr: &str, bytes: &[u8]) -> String {
    let mut sock = tokio::net::TcpStream::connect(addr.trim_start_matches("http://")).await.unwrap();
    sock.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn status_and_body(answer: &str) -> (u16, serde_json::Value) {
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(serde_json::Value::Null))
}

#[tokio::test]
async fn worker_429s_are_retried_elsewhere_then_passed_through_never_5xx() {
    let a = FakeWorker::start("a").await;
    let b = FakeWorker::start("b").await;
    let mut cfg = config(&[&a, &b]);
    cfg.eject_after = 1;
    let gw = TestGateway::start(cfg).await;
    gw.wait_ready("default", 2).await;
    let c = client();
    let url = format!("{}/predict", gw.url);
    a.set_mode(Mode::Overloaded);
    for _ in 0..30 {
        let r = post(&c, &url, "{}").await;
        assert_eq!(r.status, StatusCode::OK, "a 429 goes to the other worker: {}", r.body);
    }
    // Everyone saturated, for a long stretch: 429 with Retry-After, at once, every time.
    b.set_mode(Mode::Overloaded);
    for _ in 0..300 {
        let started = Instant::now();
        let r = post(&c, &url, "{}").await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.body);
        assert_eq!(r.body["error_type"], "overloaded");
        assert!(r.headers.contains_key("retry-after"));
        assert!(started.elapsed() < Duration::from_secs(1), "quickly");
    }
    assert_eq!(health(&gw, &a), Health::Ready, "a refusal is not a failure");
    assert_eq!(health(&gw, &b), Health::Ready);
    let text = gw.metrics().await;
    assert!(text.contains("reason=\"overloaded\""), "{text}");
    assert!(text.lines().any(|l| l.starts_with("gateway_requests_total") && l.contains("outcome=\"overloaded\"")));
    assert!(!text.contains("gateway_ejections_total{"), "{text}");
    assert!(!text.contains("gateway_panics_total{"), "{text}");
    // The refusals stop: traffic is back on both within seconds.
    a.set_mode(Mode::Ok);
    b.set_mode(Mode::Ok);
    let (pa, pb) = (a.predicts(), b.predicts());
    let back = Instant::now();
    // Eight clients at once (one alone would rightly stay on whichever is faster).
    while a.predicts() == pa || b.predicts() == pb {
        assert!(back.elapsed() < Duration::from_secs(3), "both get traffic again within seconds");
        let batch = (0..8).map(|_| post(&c, &url, "{}"));
        for r in futures::future::join_all(batch).await {
            assert_eq!(r.status, StatusCode::OK);
        }
    }
    for w in gw.pool("default").workers() {
        assert!(w.rtt_estimate_ms.is_finite() && w.rtt_estimate_ms <= 10_000.0, "{}", w.rtt_estimate_ms);
    }
}

#[tokio::test]
async fn a_stalled_worker_costs_no_request_is_taken_out_within_a_second_and_comes_back() {
    let ws = [FakeWorker::start("a").await, FakeWorker::start("b").await, FakeWorker::start("c").await];
    for w in &ws {
        w.set_delay(5);
    }
    let mut cfg = config(&[&ws[0], &ws[1], &ws[2]]);
    cfg.stats_interval = Duration::from_millis(500);
    cfg.stats_timeout = Duration::from_millis(250);
    cfg.attempt_timeout_min = Duration::from_millis(300);
    let gw = Arc::new(TestGateway::start(cfg).await);
    gw.wait_ready("default", 3).await;
    let c = client();
    let url = format!("{}/predict", gw.url);
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (c, url, stop) = (c.clone(), url.clone(), Arc::clone(&stop));
        tasks.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                statuses.push(post(&c, &url, "{}").await.status);
            }
            statuses
        }));
    }
    wait_for(|| ws[0].predicts() > 10, "load on a").await;
    // SIGSTOP, as far as the gateway can tell.
    ws[0].set_mode(Mode::Stall);
    let stalled_at = Instant::now();
    wait_for(|| health(&gw, &ws[0]) == Health::Stalled, "a out of rotation").await;
    let took = stalled_at.elapsed();
    assert!(took < Duration::from_millis(2_000), "out after {took:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // SIGCONT: back in rotation, and given traffic.
    ws[0].set_mode(Mode::Ok);
    wait_for(|| health(&gw, &ws[0]) == Health::Ready, "a back").await;
    let before = ws[0].predicts();
    wait_for(|| ws[0].predicts() > before + 10, "traffic on a again").await;
    stop.store(true, Ordering::SeqCst);
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.extend(t.await.unwrap());
    }
    assert!(statuses.len() > 50, "the load ran: {}", statuses.len());
    let failed: Vec<_> = statuses.iter().filter(|s| **s != StatusCode::OK).collect();
    assert!(failed.is_empty(), "{} of {} failed: {failed:?}", failed.len(), statuses.len());
    let text = gw.metrics().await;
    assert!(text.contains("reason=\"slow\""), "requests on the stalled worker went elsewhere: {text}");
    assert!(!text.contains("gateway_ejections_total{"), "{text}");
}

#[tokio::test]
async fn a_slow_worker_is_never_ejected() {
    let slow = FakeWorker::start("slow").await;
    let fast = FakeWorker::start("fast").await;
    slow.set_delay(400);
    let mut cfg = config(&[&slow, &fast]);
    cfg.eject_after = 1;
    cfg.attempt_timeout_min = Duration::from_millis(100);
    cfg.attempt_timeout_factor = 1.0;
    let gw = TestGateway::start(cfg).await;
    gw.wait_ready("default", 2).await;
    let c = client();
    for _ in 0..20 {
        let r = post(&c, &format!("{}/predict", gw.url), "{}").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    }
    // Alone, it answers at its pace: the last attempt waits for the deadline.
    fast.kill();
    wait_for(|| health(&gw, &fast) != Health::Ready, "fast gone").await;
    let r = post(&c, &format!("{}/predict", gw.url), "{}").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["intent"], "slow");
    assert_eq!(health(&gw, &slow), Health::Ready, "slow is not failed");
    let text = gw.metrics().await;
    assert!(!text.contains(&format!("gateway_ejections_total{{pool=\"default\",worker=\"{}\"", slow.url)), "{text}");
}

#[tokio::test]
async fn heavy_requests_hold_at_most_half_of_admission_and_light_ones_keep_flowing() {
    let w = FakeWorker::start("w").await;
    w.state.heavy_delay_ms.store(1_500, Ordering::SeqCst);
    let mut cfg = config(&[&w]);
    cfg.max_outstanding = 8;
    cfg.eject_after = 1;
    let gw = Arc::new(TestGateway::start(cfg).await);
    gw.wait_ready("default", 1).await;
    let c = client();
    let url = format!("{}/predict", gw.url);
    let heavy = serde_json::json!({ "queries": vec!["play some jazz music now"; 64] }).to_string();
    let mut held = Vec::new();
    for _ in 0..8 {
        let (c, url, heavy) = (c.clone(), url.clone(), heavy.clone());
        held.push(tokio::spawn(async move { post(&c, &url, &heavy).await.status }));
    }
    let p = gw.pool("default");
    wait_for(|| p.workers()[0].outstanding == 4, "four heavy requests in").await;
    let started = Instant::now();
    for _ in 0..20 {
        let r = post(&c, &url, r#"{"query":"play jazz"}"#).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    }
    assert!(started.elapsed() < Duration::from_millis(1_500), "light requests did not wait for heavy ones");
    let mut statuses: Vec<u16> = Vec::new();
    for h in held {
        statuses.push(h.await.unwrap().as_u16());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429, 429, 429], "heavy ones: half of --max-outstanding");
    let ws = p.workers();
    assert_eq!(ws[0].health, Health::Ready);
    assert!(ws[0].rtt_estimate_ms < 1_000.0, "heavy answers are not latency samples: {}", ws[0].rtt_estimate_ms);
}

#[tokio::test]
async fn slow_bodies_hold_no_admission_and_protocol_errors_are_json() {
    let w = FakeWorker::start("w").await;
    let mut cfg = config(&[&w]);
    cfg.max_outstanding = 1;
    cfg.listener.header_read_timeout = Duration::from_millis(300);
    cfg.listener.body_read_timeout = Duration::from_millis(800);
    let gw = TestGateway::start(cfg).await;
    gw.wait_ready("default", 1).await;
    // Bodies trickling in hold no admission permit: the one permit is free for a whole request.
    let addr = gw.url.trim_start_matches("http://").to_owned();
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(b"POST /predict HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{").await.unwrap();
        slow.push(s);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = post(&client(), &format!("{}/predict", gw.url), "{}").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // ... and get 408 at the body deadline.
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), slow[0].read_to_end(&mut out)).await;
    let (status, body) = status_and_body(&String::from_utf8_lossy(&out));
    assert_eq!((status, body["error_type"].as_str()), (408, Some("timeout")), "{body}");
    // A broken chunked body: 400 invalid_request, as the worker answers it.
    let answer =
        raw(&gw.url, b"POST /predict HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nabc\r\n").await;
    let (status, body) = status_and_body(&answer);
    assert_eq!((status, body["error_type"].as_str()), (400, Some("invalid_request")), "{answer}");
    // A head that is not HTTP: hyper's 400, with a JSON body.
    let answer = raw(&gw.url, b"NOT HTTP AT ALL\r\n\r\n").await;
    let (status, body) = status_and_body(&answer);
    assert_eq!(status, 400, "{answer}");
    assert!(body["error_type"].is_string(), "{answer}");
    // A head that never ends: 408 at the header timeout, JSON, on both ports.
    for base in [&gw.url, &gw.admin] {
        let started = Instant::now();
        let answer = raw(base, b"GET /metr").await;
        let (status, body) = status_and_body(&answer);
        assert_eq!((status, body["error_type"].as_str()), (408, Some("timeout")), "{base}: {answer}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }
    let text = gw.metrics().await;
    assert!(text.contains("gateway_connections_timed_out_total{timeout=\"header\"}"), "{text}");
    assert!(text.contains("gateway_admin_connections_open"), "{text}");
}
