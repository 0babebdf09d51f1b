//! The loop around the signal: the real scaler (kube's algorithm, the demo's behavior) over the
//! gateway's external metric, starting GPU-like fake workers of known capacity, on step loads at
//! R = 0.6, 1.6 and 2.6 replicas (R = lambda / (C u), the gateway's default u). After each step
//! up it settles at ceil(R) within two sync periods and changes at most once in the step.
//!
//! The workers calibrate themselves; nothing is tuned to them. The gateway's windows are the
//! demo's (the test is short), its targets the defaults.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use testkit::load::{Unanswered, open_loop};
use tokio::time::Instant;

mod common;
use common::{Rig, Stopper};

/// The fake workers' batch: 40 ms + 2 ms a row, 32 rows: 32 / 0.104 s = 307.7 queries/s.
const BASE_MS: u64 = 40;
const ROW_MS: u64 = 2;
const ROWS: u64 = 32;
/// The gateway's default target utilization.
const U: f64 = 0.7;
/// The scaler's sync period.
const SYNC: Duration = Duration::from_secs(3);
/// Each step's length.
const STEP: Duration = Duration::from_secs(15);
/// Replicas the steps need: ceil is 1, 2 and 3, each well inside the HPA's 10 % tolerance.
const STEPS: [f64; 3] = [0.6, 1.6, 2.6];

fn capacity() -> f64 {
    ROWS as f64 / ((BASE_MS + ROW_MS * ROWS) as f64 / 1000.0)
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scaler_settles_at_ceil_r_within_two_sync_periods_of_each_step_up() {
    let rig = Rig::new("scaler-steps");
    let dir = &rig.dir;
    let (gateway, admin, api) = rig.start_gateway(&[]).await;

    let series = dir.join("scaler.jsonl");
    let mut workers = vec!["--model".to_owned(), testkit::model_dir().display().to_string()];
    workers.extend(testkit::fake_batch_flags(BASE_MS, ROW_MS, ROWS));
    let interval = format!("{}s", SYNC.as_secs());
    let behavior = testkit::repo_root().join("scripts/demo-behavior.yaml");
    let mut scaler = rig.scaler(&api, &admin, &["--interval", &interval, "--max", "5"], &behavior, &series, &workers);
    let scaler = Stopper(scaler.spawn().expect("scaler run"));

    let c = testkit::http::client();
    // One calibrated worker ready before the first step.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = testkit::http::get(&c, &format!("{admin}/v1/signal")).await.body;
        if s[0]["mode"] == "capacity" && s[0]["ready_workers"] == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the scaler's first worker never became ready: {s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let url = gateway.at("/predict");
    let odd = Arc::new(AtomicU64::new(0));
    let mut starts = Vec::new();
    for r in STEPS {
        let rate = r * capacity() * U;
        starts.push(unix_now());
        open_loop(&c, &url, rate, STEP, &odd, Unanswered::Await).await;
    }
    let end = unix_now();
    scaler.stop().await;

    let desired = points(&series, "replicas_desired");
    let replicas = points(&series, "replicas");
    for (i, r) in STEPS.iter().enumerate() {
        let want = r.ceil();
        let (from, to) = (starts[i], starts.get(i + 1).copied().unwrap_or(end));
        let in_step: Vec<(f64, f64)> = desired.iter().copied().filter(|(t, _)| *t >= from && *t < to).collect();
        let settled = in_step
            .iter()
            .position(|(_, v)| *v == want)
            .filter(|&k| in_step[k..].iter().all(|(_, v)| *v == want))
            .map(|k| in_step[k].0 - from);
        // Changes of the decision within the step, counting one from the step before.
        let before = desired.iter().rev().find(|(t, _)| *t < from).map(|(_, v)| *v);
        let changes = before.into_iter().chain(in_step.iter().map(|(_, v)| *v)).collect::<Vec<_>>();
        let changes = changes.windows(2).filter(|w| w[0] != w[1]).count();
        eprintln!("step R {r}: decisions {in_step:?}; settled after {settled:?} s");
        let settled = settled.unwrap_or_else(|| panic!("R {r}: never settled at {want}: {in_step:?}"));
        assert!(
            settled <= (2 * SYNC).as_secs_f64() + 0.5,
            "R {r}: settled at {want} only {settled:.1} s after the step (two sync periods: {:?}): {in_step:?}",
            2 * SYNC
        );
        assert!(changes <= 1, "R {r}: {changes} changes in one step: {in_step:?}");
        // The replicas at the step's end (the series has a point per change).
        let at_end = replicas.iter().rev().find(|(t, _)| *t < to).map(|(_, v)| *v);
        assert_eq!(at_end, Some(want), "R {r}: the replicas at the step's end: {replicas:?}");
    }
    assert_eq!(odd.load(Ordering::Relaxed), 0, "every answer was a 200 or a 429");
    std::fs::remove_dir_all(dir).unwrap();
}

/// `(t, value)` of a series of the scaler's JSON lines, in order.
fn points(path: &Path, name: &str) -> Vec<(f64, f64)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["series"] == name)
        .map(|v| (v["t"].as_f64().unwrap(), v["value"].as_f64().unwrap()))
        .collect()
}
