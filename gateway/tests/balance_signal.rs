//! The balancer prefers idle workers; the signal follows worker telemetry and holds when blind.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{FakeWorker, TestClient, TestGateway, client, config, get, post, wait_for};
use http::StatusCode;

async fn load(c: &TestClient, url: &str, clients: usize, each: usize) {
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (c, url) = (c.clone(), url.to_owned());
        tasks.push(tokio::spawn(async move {
            for _ in 0..each {
                assert_eq!(post(&c, &url, "{}").await.status, StatusCode::OK);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn a_slow_worker_receives_less_traffic() {
    let fast = FakeWorker::start("fast").await;
    let slow = FakeWorker::start("slow").await;
    fast.set_delay(2);
    slow.set_delay(40);
    let gw = TestGateway::start(config(&[&fast, &slow])).await;
    gw.wait_ready("default", 2).await;
    load(&client(), &format!("{}/predict", gw.url), 8, 30).await;
    let (f, s) = (fast.predicts(), slow.predicts());
    assert_eq!(f + s, 240);
    assert!(f > 3 * s, "fast {f} slow {s}");
}

#[tokio::test]
async fn a_worker_reporting_a_deep_queue_receives_less_traffic() {
    let idle = FakeWorker::start("idle").await;
    let busy = FakeWorker::start("busy").await;
    idle.set_delay(3);
    busy.set_delay(3);
    // Other gateways keep `busy` loaded: its /v1/stats says 200 queued + in flight.
    busy.state.reported_queue.store(200, Ordering::SeqCst);
    let gw = TestGateway::start(config(&[&idle, &busy])).await;
    gw.wait_ready("default", 2).await;
    let p = gw.pool("default");
    wait_for(
        || p.workers().iter().all(|w| w.telemetry_age_ms.is_some_and(|age| age < 3000)),
        "telemetry from both workers",
    )
    .await;
    load(&client(), &format!("{}/predict", gw.url), 4, 40).await;
    let (i, b) = (idle.predicts(), busy.predicts());
    assert!(i > 5 * b.max(1), "idle {i} busy {b}");
}

fn signal_of(v: &serde_json::Value, pool: &str) -> serde_json::Value {
    v.as_array().unwrap().iter().find(|s| s["pool"] == pool).cloned().unwrap()
}

#[tokio::test]
async fn the_signal_follows_queue_and_gpu_in_replica_units() {
    let a = FakeWorker::start("a").await;
    let b = FakeWorker::start("b").await;
    a.state.reported_queue.store(64, Ordering::SeqCst); // 2 replicas by queue
    a.state.gpu_pct.store(35, Ordering::SeqCst); // 0.5 by GPU
    b.state.reported_queue.store(0, Ordering::SeqCst);
    b.state.gpu_pct.store(105, Ordering::SeqCst); // 1.5 by GPU
    let gw = TestGateway::start(config(&[&a, &b])).await;
    let c = client();
    let url = format!("{}/v1/signal", gw.admin);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = signal_of(&get(&c, &url).await.body, "default");
        if (s["signal"].as_f64().unwrap() - 3.5).abs() < 1e-6 && s["stale"] == false {
            assert_eq!(s["components"]["blind"], 0);
            assert!((s["components"]["queue"].as_f64().unwrap() - 2.0).abs() < 1e-6);
            assert_eq!(s["namespace"], "default");
            assert_eq!(s["ready_workers"], 2);
            // Device memory: a at 35 %, b at 100 %; the pool reports the fuller one.
            assert!((s["gpu_memory_used_ratio"].as_f64().unwrap() - 1.0).abs() < 1e-9, "{s}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "signal never reached 3.5: {s}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = gw.metrics().await;
    assert!(text.contains("gateway_pool_signal{pool=\"default\"} 3.5"), "{text}");
    let gpu = format!("gateway_worker_gpu_utilization_ratio{{pool=\"default\",worker=\"{}\"}} 0.35", a.url);
    assert!(text.contains(&gpu), "{text}");
    assert!(text.contains("gateway_pool_gpu_memory_used_ratio{pool=\"default\"} 1.0"), "{text}");
}

#[tokio::test]
async fn cpu_workers_have_no_gpu_memory_reading_and_pools_take_the_configured_namespace() {
    let a = FakeWorker::start("a").await; // gpu unavailable
    let mut cfg = config(&[&a]);
    cfg.pool_namespace = "ml".to_owned();
    let gw = TestGateway::start(cfg).await;
    gw.wait_ready("default", 1).await;
    let pool = gw.pool("default");
    assert_eq!(pool.meta.namespace, "ml");
    assert_eq!(pool.meta.labels.get("pool").map(String::as_str), Some("default"));
    let mut rx = pool.signal();
    wait_for(|| rx.borrow_and_update().ready_workers == 1 && !rx.borrow().stale, "fresh signal").await;
    let s = rx.borrow().clone();
    assert_eq!(s.namespace, "ml");
    assert_eq!(s.gpu_memory_used_ratio, None, "no reading is not a zero: {s:?}");
    let text = gw.metrics().await;
    assert!(!text.contains("gateway_pool_gpu_memory_used_ratio{"), "{text}");
}

#[tokio::test]
async fn without_telemetry_routing_works_and_the_signal_is_fail_static() {
    let a = FakeWorker::start("a").await;
    a.state.reported_queue.store(u64::MAX, Ordering::SeqCst); // no /v1/stats at all
    let gw = TestGateway::start(config(&[&a])).await;
    gw.wait_ready("default", 1).await;
    let c = client();
    assert_eq!(post(&c, &format!("{}/predict", gw.url), "{}").await.status, StatusCode::OK);
    let mut rx = gw.pool("default").signal();
    wait_for(|| rx.borrow_and_update().components.workers == 1, "first signal with the worker").await;
    let s = get(&c, &format!("{}/pools/default/signal", gw.admin)).await.body;
    assert!(s["signal"].as_f64().unwrap() >= 1.0, "a blind worker counts as a replica: {s}");
    assert_eq!(s["stale"], true);
}

#[tokio::test]
async fn stale_telemetry_holds_the_last_pressure() {
    let a = FakeWorker::start("a").await;
    a.state.reported_queue.store(128, Ordering::SeqCst); // pressure 4
    let mut cfg = config(&[&a]);
    cfg.stale_after = Duration::from_millis(300);
    let gw = TestGateway::start(cfg).await;
    let pool = gw.pool("default");
    let mut rx = pool.signal();
    wait_for(|| (rx.borrow_and_update().signal - 4.0).abs() < 1e-6, "signal 4").await;
    // The worker stops reporting: after stale_after the signal is stale but still 4.
    a.state.reported_queue.store(u64::MAX, Ordering::SeqCst);
    wait_for(|| rx.borrow_and_update().stale, "stale flag").await;
    let s = rx.borrow().clone();
    assert!((s.signal - 4.0).abs() < 1e-6, "{s:?}");
    assert_eq!(s.components.blind, 1);
    // Telemetry comes back with an idle worker: the signal falls (slowly), no longer stale.
    a.state.reported_queue.store(0, Ordering::SeqCst);
    wait_for(|| !rx.borrow_and_update().stale, "fresh again").await;
    assert!(rx.borrow().signal <= 4.0);
}

#[tokio::test]
async fn a_worker_of_another_stats_schema_still_feeds_the_signal_and_its_token_queue_is_read() {
    let a = FakeWorker::start("a").await;
    a.state.schema_version.store(2, Ordering::SeqCst);
    a.state.reported_queue.store(64, Ordering::SeqCst); // 2 replicas by queue
    let gw = TestGateway::start(config(&[&a])).await;
    let pool = gw.pool("default");
    let mut rx = pool.signal();
    wait_for(|| (rx.borrow_and_update().signal - 2.0).abs() < 1e-6 && !rx.borrow().stale, "signal 2 from v2 stats")
        .await;
    let w = &pool.workers()[0];
    assert_eq!(w.reported_queue, Some(64));
    assert_eq!(w.reported_queue_tokens, Some(64 * 10 + 5));
}

#[tokio::test]
async fn a_pool_at_zero_that_never_saw_a_capacity_asks_for_one_replica_however_many_it_holds() {
    // No worker yet: requests are held for a cold start. Read as queue they would ask for
    // 100 / 32 (the queue target) = 3.1 replicas; one worker is what a wake-up needs first.
    let mut cfg = config(&[]);
    cfg.cold_start_hold = Duration::from_secs(60);
    let gw = TestGateway::start(cfg).await;
    let (c, url) = (client(), format!("{}/predict", gw.url));
    let held: Vec<_> = (0..100)
        .map(|_| {
            let (c, url) = (c.clone(), url.clone());
            tokio::spawn(async move { post(&c, &url, "{}").await.status })
        })
        .collect();
    let pool = gw.pool("default");
    let mut rx = pool.signal();
    wait_for(|| rx.borrow_and_update().held_requests == 100, "100 requests held").await;
    // A few signal intervals with all of them held.
    for _ in 0..5 {
        rx.changed().await.unwrap();
        let s = rx.borrow_and_update().clone();
        assert!(s.signal > 0.0 && s.signal <= 1.0, "{s:?}");
    }
    assert_eq!(rx.borrow().held_requests, 100);
    for h in held {
        h.abort();
    }
}
