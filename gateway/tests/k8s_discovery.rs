//! Kubernetes discovery against a mocked API server that speaks the list + watch protocol for
//! EndpointSlices: workers come and go, and requests keep succeeding.

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use common::{FakeWorker, TestGateway, client, config, post, wait_for};
use http::StatusCode;
use serde_json::{Value, json};
use std::collections::HashMap;
use tokio::sync::{Mutex, broadcast};

#[derive(Clone)]
struct Api {
    /// The slices returned by a list.
    listed: Arc<Mutex<Vec<Value>>>,
    /// Watch events, one JSON line each.
    events: broadcast::Sender<String>,
    watchers: Arc<std::sync::atomic::AtomicUsize>,
}

fn slice(name: &str, rv: &str, eps: &[(&FakeWorker, bool)]) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "ml", "resourceVersion": rv,
                     "labels": {"kubernetes.io/service-name": "workers"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": eps.first().map_or(80, |(w, _)| w.addr.port()), "protocol": "TCP"}],
        "endpoints": eps.iter().map(|(w, ready)| json!({
            "addresses": [w.addr.ip().to_string()], "conditions": {"ready": ready}
        })).collect::<Vec<_>>()
    })
}

async fn endpointslices(State(api): State<Api>, Query(q): Query<HashMap<String, String>>) -> Response {
    assert_eq!(q.get("labelSelector").map(String::as_str), Some("kubernetes.io/service-name=workers"));
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        let rx = api.events.subscribe();
        api.watchers.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            match rx.recv().await {
                Ok(line) => Some((Ok::<_, Infallible>(Bytes::from(line + "\n")), rx)),
                Err(_) => None,
            }
        });
        return Response::builder().header("content-type", "application/json").body(Body::from_stream(stream)).unwrap();
    }
    let items = api.listed.lock().await.clone();
    axum::Json(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList",
        "metadata": {"resourceVersion": "1"}, "items": items
    }))
    .into_response()
}

#[tokio::test]
async fn endpoint_slices_drive_the_pool_without_failing_requests() {
    // Each fake worker listens on its own port; one slice per worker keeps ports right.
    let a = FakeWorker::start("a").await;
    let b = FakeWorker::start("b").await;
    let (events, _) = broadcast::channel(16);
    let api = Api {
        listed: Arc::new(Mutex::new(vec![slice("workers-a", "1", &[(&a, true)])])),
        events: events.clone(),
        watchers: Arc::default(),
    };
    let router = Router::new()
        .route("/apis/discovery.k8s.io/v1/namespaces/ml/endpointslices", get(endpointslices))
        .fallback(|| async { StatusCode::NOT_FOUND })
        .with_state(api.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let kcfg = kube::Config::new(api_url.parse().unwrap());
    let kclient = kube::Client::try_from(kcfg).unwrap();
    let mut cfg = config(&[]);
    cfg.k8s_services = vec!["ml/workers:http".to_owned()];
    let gw = TestGateway::start_with_kube(cfg, kclient).await;

    // The listed slice: worker a.
    gw.wait_ready("default", 1).await;
    let c = client();
    let url = format!("{}/predict", gw.url);
    assert_eq!(post(&c, &url, "{}").await.body["intent"], "a");

    // Keep requests going while endpoints change.
    let load = {
        let (c, url) = (c.clone(), url.clone());
        tokio::spawn(async move {
            let mut failures = 0;
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..300 {
                let r = post(&c, &url, "{}").await;
                if r.status == StatusCode::OK {
                    seen.insert(r.body["intent"].as_str().unwrap_or("").to_owned());
                } else {
                    failures += 1;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (failures, seen)
        })
    };
    let watchers = Arc::clone(&api.watchers);
    wait_for(|| watchers.load(std::sync::atomic::Ordering::SeqCst) > 0, "watch started").await;
    // b appears (ready), then a's pod stops being ready, then a's slice is deleted.
    let ev = |t: &str, o: Value| json!({"type": t, "object": o}).to_string();
    events.send(ev("ADDED", slice("workers-b", "2", &[(&b, true)]))).unwrap();
    gw.wait_ready("default", 2).await;
    events.send(ev("MODIFIED", slice("workers-a", "3", &[(&a, false)]))).unwrap();
    let pool = gw.pool("default");
    wait_for(|| pool.workers().len() == 1 && pool.workers()[0].url == b.url, "a gone").await;
    events.send(ev("DELETED", slice("workers-a", "4", &[(&a, false)]))).unwrap();

    let (failures, seen) = load.await.unwrap();
    assert_eq!(failures, 0);
    assert!(seen.contains("b"), "{seen:?}");
    assert_eq!(pool.workers().len(), 1);
    assert_eq!(pool.meta.namespace, "ml", "a Service-fed pool takes the Service's namespace");
}
