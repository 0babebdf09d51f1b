//! A server process of the workspace, started and waited for until it listens.

use std::collections::HashMap;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Notify;

/// How long a server may take to print `listening on`.
const START_LIMIT: Duration = Duration::from_secs(60);

/// The fake worker's flags for batches of known timing: `base_ms + row_ms x rows` a batch of
/// `rows` (at most `max_rows`), every batch full whatever the queries' lengths (`--min-batch-fill
/// 0`, a GPU worker's default), so that its capacity is exact.
pub fn fake_batch_flags(base_ms: u64, row_ms: u64, max_rows: u64) -> Vec<String> {
    let flags = ["--batch-base-time", "--batch-row-time", "--max-batch-rows", "--min-batch-fill"];
    let values = [format!("{base_ms}ms"), format!("{row_ms}ms"), max_rows.to_string(), "0".to_owned()];
    flags.into_iter().zip(values).flat_map(|(f, v)| [f.to_owned(), v]).collect()
}

/// A running server, killed when dropped.
#[derive(Debug)]
pub struct Server {
    pub child: Child,
    /// `http://ADDR` of its `listening on http://ADDR` line.
    pub url: String,
    announced: Arc<Announcements>,
}

/// Every `NAME listening on URL` line seen on stdout, by NAME (`""` for the plain one).
#[derive(Debug, Default)]
struct Announcements {
    urls: Mutex<HashMap<String, String>>,
    closed: Mutex<bool>,
    changed: Notify,
}

impl Server {
    /// The fake worker (the worker's whole host side, no inference: `worker/examples/fake_worker.rs`)
    /// on `127.0.0.1:0` with the bundled model, quiet, with `args` added.
    pub async fn fake_worker<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Self {
        let mut cmd = Command::new(crate::bin("examples/fake_worker"));
        cmd.arg("--listen").arg("127.0.0.1:0").arg("--model").arg(crate::model_dir());
        cmd.args(args).env("RUST_LOG", "warn");
        Self::start(cmd).await
    }

    /// Starts `cmd` (stdin closed, stdout read here, stderr inherited, killed on drop) and waits
    /// until it prints `listening on http://ADDR`.
    pub async fn start(mut cmd: Command) -> Self {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit()).kill_on_drop(true);
        let shown = format!("{cmd:?}");
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawning {shown}: {e}"));
        let announced = Arc::new(Announcements::default());
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let reader = announced.clone();
        // Keeps reading until the process closes stdout, so it never blocks on a full pipe.
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some((name, url)) = line.split_once("listening on ") {
                    reader.urls.lock().unwrap().insert(name.trim().to_owned(), url.trim().to_owned());
                    reader.changed.notify_waiters();
                }
            }
            *reader.closed.lock().unwrap() = true;
            reader.changed.notify_waiters();
        });
        let url = match announced.wait("", START_LIMIT).await {
            Some(url) => url,
            None => {
                let status = child.try_wait().ok().flatten();
                panic!("{shown} did not print `listening on` within {START_LIMIT:?} (exit status {status:?})");
            }
        };
        Self { child, url, announced }
    }

    /// The URL of its `NAME listening on URL` line (`admin`, say), waiting at most `limit`;
    /// `None` if the process does not print one.
    pub async fn announced(&self, name: &str, limit: Duration) -> Option<String> {
        self.announced.wait(name, limit).await
    }

    /// `self.url` followed by `path`.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("still running") as i32
    }

    /// Waits for the process to exit, failing after `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        tokio::time::timeout(limit, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the process did not exit within {limit:?}"))
            .expect("waiting for the process")
    }
}

impl Announcements {
    async fn wait(&self, name: &str, limit: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let changed = self.changed.notified();
            if let Some(url) = self.urls.lock().unwrap().get(name) {
                return Some(url.clone());
            }
            if *self.closed.lock().unwrap() {
                return None;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return None;
            }
        }
    }
}
