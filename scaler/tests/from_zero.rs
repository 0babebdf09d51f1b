//! Scale to zero and back, end to end (issue 48): the real scaler at `--min 0` (kube's
//! algorithm, `ScaledToZero`) over the gateway's external metric, starting fake workers. The
//! pool starts empty; a burst of requests is held at the gateway while the scaler starts a
//! worker (its start and calibration are the cold start) and answered 200 in full; with no more
//! load the signal decays to zero and, after the scale-down window, the pool goes back to zero;
//! a second burst is answered in full the same way. Before, the gateway answered requests to an
//! empty pool 503 after `--no-worker-wait` (1 s), shorter than any worker's start.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use testkit::fault::metric_sum;
use tokio::time::Instant;

mod common;
use common::{Rig, Stopper};

/// The scaler's sync period.
const SYNC: &str = "1s";
/// Requests in each burst, sent at once.
const BURST: usize = 24;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_zero_a_burst_is_held_and_answered_then_back_to_zero_and_again() {
    let rig = Rig::new("scaler-zero");
    let dir = &rig.dir;
    // The demo's behavior with a short scale-down window, so that the test is short.
    let behavior = dir.join("behavior.yaml");
    std::fs::write(
        &behavior,
        "scaleUp:\n  stabilizationWindowSeconds: 0\n  policies:\n    - {type: Pods, value: 4, periodSeconds: 5}\n\
         scaleDown:\n  stabilizationWindowSeconds: 3\n  policies:\n    - {type: Percent, value: 100, periodSeconds: 5}\n",
    )
    .unwrap();

    // The signal falls to zero within seconds once the load stops (the default takes minutes).
    // The admission floor is below a burst: a pool at zero's requests are bounded by its hold,
    // not by admission (on a GPU, a demo from zero answered 429 at the floor before its worker
    // was ready).
    let floor = (BURST / 3).to_string();
    let (gateway, admin, api) = rig.start_gateway(&["--signal-fall", "1s", "--max-outstanding", &floor]).await;

    let series = dir.join("scaler.jsonl");
    let workers = [
        "--model".to_owned(),
        testkit::model_dir().display().to_string(),
        "--batch-base-time".to_owned(),
        "5ms".to_owned(),
    ];
    let mut scaler =
        rig.scaler(&api, &admin, &["--interval", SYNC, "--min", "0", "--max", "2"], &behavior, &series, &workers);
    let scaler = Stopper(scaler.spawn().expect("scaler run"));
    let c = testkit::http::client();
    let url = gateway.at("/predict");

    for round in 1..=2 {
        // The pool is empty: none running, and none left in the gateway's worker set.
        wait_for_replicas(&series, 0.0, Duration::from_secs(60)).await;
        testkit::wait_until(Duration::from_secs(10), "the gateway's pool is empty", || async {
            metric_sum(&metrics(&c, &admin).await, "gateway_pool_workers", &[]) == 0.0
        })
        .await;

        let sent = Instant::now();
        let mut burst = tokio::task::JoinSet::new();
        for i in 0..BURST {
            let (c, url) = (c.clone(), url.clone());
            burst.spawn(async move {
                let body = format!(r#"{{"query":"wake up and play some jazz {i}"}}"#);
                let r = c.post(&url).body(body).timeout(Duration::from_secs(60)).send().await;
                (r.map(|r| r.status().as_u16()).map_err(|e| e.to_string()), sent.elapsed())
            });
        }
        let mut first = Duration::MAX;
        let mut bad = Vec::new();
        while let Some(r) = burst.join_next().await {
            let (status, at) = r.unwrap();
            match status {
                Ok(200) => first = first.min(at),
                other => bad.push(other),
            }
        }
        eprintln!("round {round}: {BURST} requests held and answered; the first after {first:?}");
        assert!(bad.is_empty(), "round {round}: not answered 200: {bad:?}");
        let m = metrics(&c, &admin).await;
        let held = metric_sum(&m, "gateway_pool_hold_seconds_count", &[("pool", "default")]);
        assert!(held >= (round * BURST) as f64, "round {round}: {held} requests held in the histogram:\n{m}");
    }
    // And back to zero after the second burst.
    wait_for_replicas(&series, 0.0, Duration::from_secs(60)).await;
    scaler.stop().await;
    let path = replicas(&series);
    assert_eq!(path, [0.0, 1.0, 0.0, 1.0, 0.0], "replicas 0 -> 1 -> 0 -> 1 -> 0");
    std::fs::remove_dir_all(dir).unwrap();
}

async fn metrics(c: &reqwest::Client, admin: &str) -> String {
    testkit::http::get(c, &format!("{admin}/metrics")).await.body.as_str().unwrap_or_default().to_owned()
}

/// Waits until the scaler's last `replicas` point is `n`.
async fn wait_for_replicas(series: &Path, n: f64, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let r = if series.exists() { replicas(series) } else { Vec::new() };
        if r.last() == Some(&n) {
            return;
        }
        assert!(Instant::now() < deadline, "replicas never reached {n}: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The scaler's `replicas` series, each change once.
fn replicas(path: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out: Vec<f64> = Vec::new();
    for v in text.lines().filter(|l| !l.trim().is_empty()).filter_map(|l| serde_json::from_str::<Value>(l).ok()) {
        if v["series"] == "replicas"
            && let Some(x) = v["value"].as_f64()
            && out.last() != Some(&x)
        {
            out.push(x);
        }
    }
    out
}
