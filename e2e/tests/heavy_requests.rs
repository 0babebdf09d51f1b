//! Heavy requests beside light ones, against the real worker binary with the bundled model on
//! one ONNX Runtime thread: while clients post 64 maximum-length queries per request (seconds of
//! CPU each), a light client's queries are all answered, and quickly; heavy clients get answers
//! or 429 with Retry-After, never an error. (Before the token-aware admission and the lanes, the
//! light client waited ~26 s per query or got 429.) Throughput ratios are measured by
//! `benches/heavy_vs_light.sh`, not here.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use testkit::Server;
use testkit::http::{Answer, client, get};
use tokio::process::Command;

const HEAVY_CLIENTS: usize = 6;

fn heavy_body() -> String {
    let words = "play some jazz music by miles davis in the living room tonight please";
    let query: String = words.split(' ').cycle().take(400).collect::<Vec<_>>().join(" ").chars().take(2048).collect();
    serde_json::json!({ "queries": vec![query; 64] }).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn light_requests_are_answered_quickly_while_heavy_ones_run() {
    let mut cmd = Command::new(testkit::bin("worker"));
    cmd.args(["--listen", "127.0.0.1:0", "--intra-op-threads", "1"]).arg("--model").arg(testkit::model_dir());
    cmd.arg("--ort-lib").arg(testkit::ort_lib()).env("RUST_LOG", "warn");
    let w = Server::start(cmd).await;
    let c = client();

    let statuses = Arc::new(Mutex::new(Vec::new()));
    let body = Arc::new(heavy_body());
    let heavy: Vec<_> = (0..HEAVY_CLIENTS)
        .map(|_| {
            let (c, url, statuses, body) = (c.clone(), w.at("/predict"), statuses.clone(), body.clone());
            tokio::spawn(async move {
                loop {
                    let resp = c.post(&url).header("content-type", "application/json").body(body.to_string()).send();
                    let a = Answer::read(resp.await.expect("the worker answers")).await;
                    if a.status == 429 {
                        assert_eq!(a.headers["retry-after"], "1");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    statuses.lock().unwrap().push(a.status.as_u16());
                }
            })
        })
        .collect();
    testkit::wait_until(Duration::from_secs(30), "heavy requests are running", || async {
        get(&c, &w.at("/v1/stats")).await.body["queue"]["heavy_queries"].as_u64().unwrap_or(0) > 0
    })
    .await;

    let (mut latencies, started) = (Vec::new(), Instant::now());
    while started.elapsed() < Duration::from_secs(4) {
        let t = Instant::now();
        let a = get(&c, &w.at("/predict?query=play%20some%20jazz%20music")).await;
        assert_eq!(a.status, 200, "a light request beside heavy ones: {}", a.body);
        latencies.push(t.elapsed());
    }
    let heavy_running = get(&c, &w.at("/v1/stats")).await.body["queue"]["heavy_queries"].as_u64().unwrap_or(0);
    // Requests in flight are abandoned: the worker drops their queries.
    for h in heavy {
        h.abort();
    }
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    assert!(heavy_running > 0, "the heavy requests were still running at the end");
    assert!(latencies.len() >= 8, "only {} light requests answered in 4 s", latencies.len());
    assert!(median < Duration::from_millis(500), "median light latency {median:?} beside heavy requests");
    let statuses = statuses.lock().unwrap().clone();
    assert!(statuses.iter().all(|&s| s == 200 || s == 429), "heavy requests got {statuses:?}");
    eprintln!("{} light requests in 4 s, median {median:?}; heavy answers: {statuses:?}", latencies.len());
}
