//! The real gateway binary in front of three real worker processes under load: one worker is
//! killed with SIGKILL, another sent SIGTERM.
//!
//! Needs the model at `models/snips-minilm-l6` (or `WORKER_MODEL`), ONNX Runtime
//! (`ORT_DYLIB_PATH`, or `scripts/fetch-ort.sh`) and the built binaries (`cargo test --workspace`
//! builds them; see `testkit::bin`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use testkit::Server;
use testkit::http::{client, get, post};
use tokio::process::Command;

async fn start_worker() -> Server {
    let mut cmd = Command::new(testkit::bin("worker"));
    cmd.arg("--listen").arg("127.0.0.1:0").arg("--model").arg(testkit::model_dir());
    cmd.arg("--ort-lib").arg(testkit::ort_lib()).args(["--intra-op-threads", "1"]).env("RUST_LOG", "warn");
    Server::start(cmd).await
}

/// A gateway in front of `workers`, and the base URL of its operator endpoints (`/v1/pools`,
/// `/metrics`): its admin port, announced before its client port.
async fn start_gateway(workers: &[Server]) -> (Server, String) {
    let mut cmd = Command::new(testkit::bin("gateway"));
    cmd.args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]);
    cmd.args(["--stats-interval", "100ms", "--probe-backoff", "100ms"]);
    for w in workers {
        cmd.arg("--worker").arg(&w.url);
    }
    cmd.env("RUST_LOG", "warn");
    let gw = Server::start(cmd).await;
    let admin = gw.announced("admin", Duration::from_secs(2)).await.expect("the gateway announces its admin port");
    (gw, admin)
}

async fn wait_ready_workers(c: &reqwest::Client, admin: &str, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let v = get(c, &format!("{admin}/v1/pools")).await.body;
        let ready = v[0]["workers"].as_array().map_or(0, |ws| ws.iter().filter(|w| w["health"] == "ready").count());
        if ready == n {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{n} workers never ready: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    /// Failures that were not a clear JSON 5xx (must stay 0).
    unclear: AtomicU64,
}

/// Closed-loop clients posting queries until `stop`.
fn run_load(
    c: &reqwest::Client,
    url: String,
    clients: usize,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|i| {
            let (c, url, stop, tally) = (c.clone(), url.clone(), Arc::clone(&stop), Arc::clone(&tally));
            tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let body = format!(r#"{{"query":"play some jazz music number {i} {n}"}}"#);
                    let a = post(&c, &url, body).await;
                    if a.status.is_success() {
                        assert!(a.body["intent"].is_string(), "{}", a.body);
                        tally.ok.fetch_add(1, Ordering::SeqCst);
                    } else {
                        tally.failed.fetch_add(1, Ordering::SeqCst);
                        let clear = a.status.is_server_error() && a.body["error_type"].is_string();
                        if !clear {
                            tally.unclear.fetch_add(1, Ordering::SeqCst);
                        }
                        eprintln!("failed request: {} {}", a.status, a.body);
                    }
                }
            })
        })
        .collect()
}

async fn wait_ok(tally: &Tally, at_least: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tally.ok.load(Ordering::SeqCst) < at_least {
        assert!(tokio::time::Instant::now() < deadline, "load made no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_under_load_survive_sigkill_and_sigterm() {
    let mut workers = vec![start_worker().await, start_worker().await, start_worker().await];
    let (gw, admin) = start_gateway(&workers).await;
    let c = client();
    wait_ready_workers(&c, &admin, 3).await;
    let url = gw.at("/predict");

    // SIGKILL: requests inside the killed worker are retried on another; whatever could not be
    // is a clear JSON 5xx.
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let load = run_load(&c, url.clone(), 6, Arc::clone(&stop), Arc::clone(&tally));
    wait_ok(&tally, 50).await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(workers[0].pid()), nix::sys::signal::Signal::SIGKILL)
        .expect("kill");
    let before = tally.ok.load(Ordering::SeqCst);
    wait_ok(&tally, before + 100).await;
    stop.store(true, Ordering::SeqCst);
    for t in load {
        t.await.unwrap();
    }
    assert_eq!(tally.unclear.load(Ordering::SeqCst), 0, "every failure is a clear JSON 5xx");
    // At most the 6 requests that can have been inside the killed worker, and in practice none
    // (one retry on another worker is safe: classification has no side effects).
    assert!(tally.failed.load(Ordering::SeqCst) <= 6, "failed {}", tally.failed.load(Ordering::SeqCst));
    let _ = workers[0].child.wait().await;
    wait_ready_workers(&c, &admin, 2).await;

    // SIGTERM: the worker drains (503 to new requests, which the gateway retries elsewhere)
    // and finishes what it accepted: zero failed requests.
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let load = run_load(&c, url.clone(), 6, Arc::clone(&stop), Arc::clone(&tally));
    wait_ok(&tally, 50).await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(workers[1].pid()), nix::sys::signal::Signal::SIGTERM)
        .expect("term");
    let status = tokio::time::timeout(Duration::from_secs(60), workers[1].child.wait()).await.expect("exits").unwrap();
    assert!(status.success(), "worker drained and exited 0: {status:?}");
    let before = tally.ok.load(Ordering::SeqCst);
    wait_ok(&tally, before + 50).await;
    stop.store(true, Ordering::SeqCst);
    for t in load {
        t.await.unwrap();
    }
    assert_eq!(tally.failed.load(Ordering::SeqCst), 0, "SIGTERM costs no request");

    let text = get(&c, &format!("{admin}/metrics")).await.body.as_str().unwrap_or("").to_owned();
    assert!(text.contains("gateway_pool_signal{pool=\"default\"}"), "{text}");
}
