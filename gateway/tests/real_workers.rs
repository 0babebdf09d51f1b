//! The real gateway binary in front of three real worker processes under load: one worker is
//! killed with SIGKILL, another sent SIGTERM.
//!
//! Needs what the worker's own tests need: the model at `models/snips-minilm-l6` (or
//! `WORKER_MODEL`) and ONNX Runtime (`ORT_DYLIB_PATH`, or `scripts/fetch-ort.sh`). The worker
//! binary is built with `cargo build -p worker` when it is not next to this test's binary.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

mod common;
use common::{TestClient, client, get, post};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_owned()
}

fn model_dir() -> PathBuf {
    std::env::var_os("WORKER_MODEL").map_or_else(|| repo_root().join("models/snips-minilm-l6"), PathBuf::from)
}

fn ort_lib() -> PathBuf {
    let p = std::env::var_os("ORT_DYLIB_PATH")
        .map_or_else(|| repo_root().join(".cache/ort/cpu/libonnxruntime.so.1.31.1"), PathBuf::from);
    assert!(p.is_file(), "{} is missing: run scripts/fetch-ort.sh or set ORT_DYLIB_PATH", p.display());
    p
}

/// `target/<profile>/worker`, next to this test's `deps/` folder; built when missing.
fn worker_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target/<profile>");
    let bin = profile_dir.join("worker");
    if !bin.is_file() {
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-p", "worker", "--bin", "worker"])
            .current_dir(repo_root())
            .status()
            .expect("run cargo build -p worker");
        assert!(status.success(), "cargo build -p worker failed");
    }
    assert!(bin.is_file(), "{} missing: run `cargo build -p worker`", bin.display());
    bin
}

struct Proc {
    child: Child,
    base: String,
}

impl Proc {
    fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.child.id().expect("running") as i32)
    }
}

/// Spawn `cmd` and wait (60 s at most) for its `listening on http://ADDR` line.
async fn spawn_listening(mut cmd: Command) -> Proc {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit()).kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let base = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.expect("stdout") {
            if let Some(addr) = line.strip_prefix("listening on ") {
                return addr.trim().to_owned();
            }
        }
        panic!("process exited before listening");
    })
    .await
    .expect("listening within 60 s");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Proc { child, base }
}

async fn start_worker() -> Proc {
    let mut cmd = Command::new(worker_bin());
    cmd.arg("--listen").arg("127.0.0.1:0").arg("--model").arg(model_dir()).arg("--ort-lib").arg(ort_lib());
    cmd.args(["--threads", "1"]).env("RUST_LOG", "warn");
    spawn_listening(cmd).await
}

async fn start_gateway(workers: &[Proc]) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gateway"));
    cmd.args(["--listen", "127.0.0.1:0", "--stats-interval", "100ms", "--probe-backoff", "100ms"]);
    for w in workers {
        cmd.arg("--worker").arg(&w.base);
    }
    cmd.env("RUST_LOG", "warn");
    spawn_listening(cmd).await
}

async fn wait_ready_workers(c: &TestClient, gw: &Proc, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let v = get(c, &format!("{}/v1/pools", gw.base)).await.body;
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
    c: &TestClient,
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
                    let a = post(&c, &url, &body).await;
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
    let gw = start_gateway(&workers).await;
    let c = client();
    wait_ready_workers(&c, &gw, 3).await;
    let url = format!("{}/predict", gw.base);

    // SIGKILL: requests inside the killed worker are retried on another; whatever could not be
    // is a clear JSON 5xx.
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let load = run_load(&c, url.clone(), 6, Arc::clone(&stop), Arc::clone(&tally));
    wait_ok(&tally, 50).await;
    nix::sys::signal::kill(workers[0].pid(), nix::sys::signal::Signal::SIGKILL).expect("kill");
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
    wait_ready_workers(&c, &gw, 2).await;

    // SIGTERM: the worker drains (503 to new requests, which the gateway retries elsewhere)
    // and finishes what it accepted: zero failed requests.
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let load = run_load(&c, url.clone(), 6, Arc::clone(&stop), Arc::clone(&tally));
    wait_ok(&tally, 50).await;
    nix::sys::signal::kill(workers[1].pid(), nix::sys::signal::Signal::SIGTERM).expect("term");
    let status = tokio::time::timeout(Duration::from_secs(60), workers[1].child.wait()).await.expect("exits").unwrap();
    assert!(status.success(), "worker drained and exited 0: {status:?}");
    let before = tally.ok.load(Ordering::SeqCst);
    wait_ok(&tally, before + 50).await;
    stop.store(true, Ordering::SeqCst);
    for t in load {
        t.await.unwrap();
    }
    assert_eq!(tally.failed.load(Ordering::SeqCst), 0, "SIGTERM costs no request");

    let text = get(&c, &format!("{}/metrics", gw.base)).await.body.as_str().unwrap_or("").to_owned();
    assert!(text.contains("gateway_pool_signal{pool=\"default\"}"), "{text}");
}
