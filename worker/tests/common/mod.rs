//! Starts the real worker binary on 127.0.0.1:0 and reads back its address.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_owned()
}

pub fn model_dir() -> PathBuf {
    repo_root().join("models/snips-minilm-l6")
}

/// `ORT_DYLIB_PATH`, or what `scripts/fetch-ort.sh` fetched.
pub fn ort_lib() -> PathBuf {
    let path = std::env::var_os("ORT_DYLIB_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cache/ort/cpu/libonnxruntime.so.1.31.1"));
    assert!(path.is_file(), "{} is missing: run scripts/fetch-ort.sh (scripts/test.sh does)", path.display());
    path
}

pub struct Worker {
    pub child: Child,
    pub base: String,
}

impl Worker {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("running") as i32
    }

    /// Waits for the process to exit, at most `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        tokio::time::timeout(limit, self.child.wait()).await.expect("worker exits in time").expect("wait")
    }
}

pub fn command(extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_worker"));
    cmd.arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--model")
        .arg(model_dir())
        .arg("--ort-lib")
        .arg(ort_lib())
        .arg("--threads")
        .arg("1")
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    cmd
}

/// Starts a worker and waits (at most 60 s) until it prints its address.
pub async fn start(extra: &[&str]) -> Worker {
    let mut child = command(extra).spawn().expect("spawn worker");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let base = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            if let Some(addr) = line.strip_prefix("listening on ") {
                return addr.trim().to_owned();
            }
        }
        panic!("worker exited before listening");
    })
    .await
    .expect("worker listens within 60 s");
    // Keep draining stdout so the worker never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Worker { child, base }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("client")
}

/// Polls `check` every 10 ms until it returns true, failing after `limit`.
pub async fn wait_until<F, Fut>(limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "condition not met within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
