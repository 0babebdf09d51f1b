//! The real worker binary on CPU with the bundled model: answers, batching, stats. Errors,
//! overload and draining are tested in-process (`in_process.rs`).

mod common;

use serde_json::{Value, json};
use wire::{PredictBatchResponse, Prediction, WorkerStats};

fn reference() -> Vec<(&'static str, &'static str)> {
    testkit::sanity().queries.iter().map(|q| (q.text.as_str(), q.intent.as_str())).collect()
}

#[tokio::test]
async fn classifies_the_reference_queries_by_get_and_post() {
    let w = common::start(&[]).await;
    let c = testkit::http::client();
    let reference = reference();
    for &(query, intent) in &reference {
        let r = c.get(w.at("/predict")).query(&[("query", query)]).send().await.unwrap();
        assert_eq!(r.status(), 200, "{query}");
        let p: Prediction = r.json().await.unwrap();
        assert_eq!(p.intent, intent, "GET {query}");
        assert!(p.score > 0.5 && p.score <= 1.0, "{query}: {}", p.score);
        assert!(p.scores.is_none());

        let r = c.post(w.at("/predict")).json(&json!({"query": query})).send().await.unwrap();
        let p: Prediction = r.json().await.unwrap();
        assert_eq!(p.intent, intent, "POST {query}");
    }

    // Several queries in one body come back in order; all class scores on request.
    let queries: Vec<&str> = reference.iter().map(|(q, _)| *q).collect();
    let r = c.post(w.at("/predict")).json(&json!({"queries": queries, "all_scores": true})).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let batch: PredictBatchResponse = r.json().await.unwrap();
    let intents: Vec<&str> = batch.predictions.iter().map(|p| p.intent.as_str()).collect();
    let expected: Vec<&str> = reference.iter().map(|(_, i)| *i).collect();
    assert_eq!(intents, expected);
    let scores = batch.predictions[0].scores.as_ref().expect("all scores");
    assert_eq!(scores.len(), testkit::sanity().labels.len());
    assert!((scores.values().sum::<f32>() - 1.0).abs() < 1e-3);
}

#[tokio::test]
async fn concurrent_queries_are_batched_and_all_answered() {
    let w = common::start(&["--max-queue-delay", "20ms"]).await;
    let c = testkit::http::client();
    let reference = reference();
    let calls = (0..64).map(|i| {
        let (q, intent) = reference[i % reference.len()];
        let req = c.get(w.at("/predict")).query(&[("query", q)]).send();
        async move { (req.await.unwrap().json::<Prediction>().await.unwrap().intent, intent) }
    });
    for (got, want) in futures::future::join_all(calls).await {
        assert_eq!(got, want);
    }
    let stats: WorkerStats = c.get(w.at("/v1/stats")).send().await.unwrap().json().await.unwrap();
    assert_eq!(stats.rates.completed_total, 64);
    assert!(stats.batches.total < 64, "64 concurrent queries ran in fewer batches: {}", stats.batches.total);
    assert!(stats.batches.mean_rows > 1.0);
}

#[tokio::test]
async fn stats_metrics_and_probes_describe_the_worker() {
    let w = common::start(&[]).await;
    let c = testkit::http::client();
    assert_eq!(c.get(w.at("/healthz")).send().await.unwrap().status(), 200);
    assert_eq!(c.get(w.at("/readyz")).send().await.unwrap().status(), 200);
    c.get(w.at("/predict")).query(&[("query", "play jazz")]).send().await.unwrap();

    let v: Value = c.get(w.at("/v1/stats")).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["gpu"]["status"], "unavailable", "a CPU worker has no GPU telemetry");
    assert!(v["gpu"]["reason"].as_str().unwrap().contains("CPU"));
    assert!(v["gpu"].get("device").is_none(), "no zeros in place of a reading");
    let s: WorkerStats = serde_json::from_value(v).unwrap();
    assert_eq!(s.model.labels, testkit::sanity().labels);
    assert_eq!(s.model.device, "cpu");
    // Sized from the calibrated capacity for the 30 s request timeout, the flag's 1024 a floor.
    let per_s = s.capacity.as_ref().and_then(|c| c.calibrated_per_s).expect("calibrated");
    assert_eq!(s.queue.capacity, ((per_s * 30.0).ceil() as u64).max(1024), "{per_s} queries/s");
    assert_eq!(s.rates.completed_total, 1);
    assert!(s.ready && !s.draining);

    let m = c.get(w.at("/metrics")).send().await.unwrap().text().await.unwrap();
    for name in [
        "worker_requests_total{outcome=\"ok\"} 1",
        "worker_request_duration_seconds_bucket",
        "worker_queue_depth",
        "worker_batch_rows_bucket",
        "worker_inference_seconds_bucket",
        "worker_queue_wait_seconds_bucket",
        "worker_gpu_telemetry_available 0",
    ] {
        assert!(m.contains(name), "metrics lack {name}:\n{m}");
    }
    assert!(!m.contains("worker_gpu_utilization_ratio"), "no GPU gauges without a reading");
}
