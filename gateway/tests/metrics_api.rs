//! The gateway's provider for the external metrics API (`gateway/src/provider.rs`) over real
//! pools: fail-static values when telemetry goes stale, and two gateways over the same workers
//! agreeing. The API itself is tested in `metrics-api/tests`; `kubectl` against the gateway
//! binary is in `metrics_api_kubectl.rs`.

mod common;
#[path = "../../metrics-api/tests/support/mod.rs"]
mod metrics_api_support;

use std::time::Duration;

use common::{FakeWorker, config, wait_for};
use metrics_api_support::*;

/// The API's view of real pools (common::config: stats every 50 ms, no rise smoothing).
async fn api_over(gw: &gateway::Gateway, pki: &Pki) -> metrics_api::MetricsApi {
    let mut a = pki.serving_args();
    a.extend([
        "--client-ca-file".into(),
        path_str(&pki.dir.write("client-ca.pem", &pki.client_ca.pem)),
        "--authorization-mode".into(),
        "AlwaysAllow".into(),
    ]);
    start_api(&args(&a), gw.pools().clone()).await.0
}

async fn signal(c: &mut Conn) -> Answer {
    c.get(&format!("{V}/namespaces/default/gateway_pool_signal?labelSelector=pool%3Ddefault"), &[]).await
}

fn value(a: &Answer) -> f64 {
    let list = decode(a);
    assert_eq!(list.items.len(), 1, "{:?}", a.body);
    let q = &list.items[0].value.0;
    q.strip_suffix('m').map_or_else(|| q.parse().unwrap(), |m| m.parse::<f64>().unwrap() / 1000.0)
}

#[tokio::test]
async fn stale_telemetry_keeps_the_fail_static_value() {
    let (w1, w2) = (FakeWorker::start("w1").await, FakeWorker::start("w2").await);
    for w in [&w1, &w2] {
        w.state.reported_queue.store(64, std::sync::atomic::Ordering::SeqCst);
    }
    let mut cfg = config(&[&w1, &w2]);
    cfg.stale_after = Duration::from_millis(300);
    let gw = gateway::build(cfg).await.unwrap();
    let pki = Pki::new("stale");
    let api = api_over(&gw, &pki).await;
    let mut c = Conn::open(api.addr, pki.client("hpa", &[])).await.unwrap();
    let mut v = 0.0;
    for _ in 0..500 {
        v = value(&signal(&mut c).await);
        if (v - 4.0).abs() < 1e-9 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(v, 4.0, "two workers at 64 queued, 32 per replica");

    // w1's telemetry stops (its /v1/stats fails), then w2 disappears altogether: both go stale,
    // and the API keeps answering 200 with the value they last justified.
    w1.state.reported_queue.store(u64::MAX, std::sync::atomic::Ordering::SeqCst);
    w2.kill();
    let pool = gw.pools().get("default").unwrap();
    wait_for(|| pool.signal().borrow().components.blind == 2, "both workers blind").await;
    for _ in 0..20 {
        let a = signal(&mut c).await;
        assert_eq!(value(&a), 4.0, "fail-static, never an error: {:?}", a.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(pool.signal().borrow().stale);
}

#[tokio::test]
async fn two_gateways_over_the_same_workers_agree() {
    let (a, b) = (FakeWorker::start("a").await, FakeWorker::start("b").await);
    let set = |qa: u64, qb: u64| {
        a.state.reported_queue.store(qa, std::sync::atomic::Ordering::SeqCst);
        b.state.reported_queue.store(qb, std::sync::atomic::Ordering::SeqCst);
    };
    set(48, 16);
    let gw1 = gateway::build(config(&[&a, &b])).await.unwrap();
    let gw2 = gateway::build(config(&[&a, &b])).await.unwrap();
    let pki = Pki::new("replicas");
    let (api1, api2) = (api_over(&gw1, &pki).await, api_over(&gw2, &pki).await);
    let (mut c1, mut c2) = (
        Conn::open(api1.addr, pki.client("hpa", &[])).await.unwrap(),
        Conn::open(api2.addr, pki.client("hpa", &[])).await.unwrap(),
    );
    for (qa, qb, want) in [(48, 16, 2.0), (96, 80, 5.5)] {
        set(qa, qb);
        let started = std::time::Instant::now();
        loop {
            let (v1, v2) = (value(&signal(&mut c1).await), value(&signal(&mut c2).await));
            if v1 == want && v2 == want {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(10), "replicas at {v1} and {v2}, want {want}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // Once settled they answer the same, request after request.
    for _ in 0..20 {
        assert_eq!(value(&signal(&mut c1).await), value(&signal(&mut c2).await));
    }
}
