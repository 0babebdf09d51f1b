//! Workers listed in a file (`--worker-file`): the gateway follows edits to the file, per pool,
//! without failing requests while workers come and go.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{FakeWorker, Mode, TestGateway, client, config, post, wait_for};
use http::StatusCode;

/// A worker file in the temp directory, removed on drop.
struct WorkerFile(PathBuf);

impl WorkerFile {
    fn new(name: &str) -> Self {
        Self(std::env::temp_dir().join(format!("gateway-test-{}-{name}.txt", std::process::id())))
    }

    /// Replace the content the way an editor or a ConfigMap update does: write aside, rename.
    fn write(&self, text: &str) {
        let aside = self.0.with_extension("new");
        std::fs::write(&aside, text).unwrap();
        std::fs::rename(&aside, &self.0).unwrap();
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for WorkerFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn urls(gw: &TestGateway, pool: &str) -> Vec<String> {
    gw.gw.pools().get(pool).map(|p| p.workers().into_iter().map(|w| w.url).collect()).unwrap_or_default()
}

#[tokio::test]
async fn the_gateway_follows_edits_to_the_worker_file() {
    let a = FakeWorker::start("a").await;
    let b = FakeWorker::start("b").await;
    let c = FakeWorker::start("c").await;
    let file = WorkerFile::new("follows");
    file.write(&format!("# the default pool\n{}\n", a.url));
    let mut cfg = config(&[]);
    cfg.worker_file = Some(file.path().to_owned());
    cfg.worker_file_interval = Duration::from_millis(20);
    // A worker added beside a fast one starts at the default latency estimate and gets traffic
    // once that has decayed below the fast one's; a short decay keeps the test short.
    cfg.rtt_decay = Duration::from_millis(200);
    let gw = Arc::new(TestGateway::start(cfg).await);
    gw.wait_ready("default", 1).await;
    let http = client();
    assert_eq!(post(&http, &format!("{}/predict", gw.url), "{}").await.body["intent"], "a");

    // Load runs through every edit below; not one request may fail.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (gw, stop, http) = (Arc::clone(&gw), Arc::clone(&stop), http.clone());
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                statuses.push(post(&http, &format!("{}/predict", gw.url), "{}").await.status);
            }
            statuses
        })
    };

    // a is replaced by b, and a named pool appears with c.
    file.write(&format!("{}   # replaces a\nbig {}\n", b.url, c.url));
    wait_for(|| urls(&gw, "default") == [b.url.clone()], "default pool = [b]").await;
    gw.wait_ready("default", 1).await;
    gw.wait_ready("big", 1).await;
    assert_eq!(post(&http, &format!("{}/predict", gw.url), "{}").await.body["intent"], "b");
    assert_eq!(post(&http, &format!("{}/pools/big/predict", gw.url), "{}").await.body["intent"], "c");

    // A file that cannot be read keeps the last good set.
    std::fs::remove_file(file.path()).unwrap();
    let before = b.predicts();
    wait_for(|| b.predicts() > before + 20, "traffic to b after the file went away").await;
    assert_eq!(urls(&gw, "default"), std::slice::from_ref(&b.url));

    // Both workers in the default pool; the named pool emptied.
    file.write(&format!("{}\n{}\n", a.url, b.url));
    wait_for(|| urls(&gw, "default").len() == 2, "default pool = [a, b]").await;
    gw.wait_ready("default", 2).await;
    wait_for(|| urls(&gw, "big").is_empty(), "big pool emptied").await;
    let before = a.predicts();
    wait_for(|| a.predicts() > before, "traffic back on a").await;

    stop.store(true, Ordering::SeqCst);
    let statuses = load.await.unwrap();
    assert!(statuses.len() > 20, "the load ran");
    assert!(statuses.iter().all(|s| *s == StatusCode::OK), "no request failed: {statuses:?}");
}

#[tokio::test]
async fn a_worker_that_leaves_takes_every_series_with_its_label() {
    let stays = FakeWorker::start("stays").await;
    let leaves = FakeWorker::start("leaves").await;
    let file = WorkerFile::new("series");
    file.write(&format!("{}\n{}\n", stays.url, leaves.url));
    let mut cfg = config(&[]);
    cfg.worker_file = Some(file.path().to_owned());
    cfg.worker_file_interval = Duration::from_millis(20);
    let gw = TestGateway::start(cfg).await;
    gw.wait_ready("default", 2).await;
    // Requests land on both, with more than one outcome on the one that leaves.
    let http = client();
    while leaves.predicts() == 0 {
        post(&http, &format!("{}/predict", gw.url), "{}").await;
    }
    // Both refuse (a 429 is retried once on the other worker): some requests end on `leaves`
    // with outcome `overloaded`.
    leaves.set_mode(Mode::Overloaded);
    stays.set_mode(Mode::Overloaded);
    let label = format!("worker=\"{}\"", leaves.url);
    let overloaded_on_leaves = |text: &str| {
        text.lines().any(|l| l.starts_with("gateway_requests_total") && l.contains(&label) && l.contains("overloaded"))
    };
    let mut text = gw.metrics().await;
    for _ in 0..200 {
        if overloaded_on_leaves(&text) {
            break;
        }
        post(&http, &format!("{}/predict", gw.url), "{}").await;
        text = gw.metrics().await;
    }
    stays.set_mode(Mode::Ok);
    for family in ["gateway_requests_total", "gateway_request_duration_seconds_bucket", "gateway_worker_ready"] {
        assert!(text.lines().any(|l| l.starts_with(family) && l.contains(&label)), "{family}: {text}");
    }
    assert!(text.contains("outcome=\"overloaded\""), "{text}");

    file.write(&format!("{}\n", stays.url));
    wait_for(|| urls(&gw, "default") == [stays.url.clone()], "the worker left").await;
    // A full round of the signal task after the change (it sets per-worker gauges): none of its
    // series may come back.
    let mut rx = gw.pool("default").signal();
    wait_for(|| rx.borrow_and_update().components.workers == 1, "a signal without the worker").await;
    tokio::time::timeout(Duration::from_secs(10), rx.changed()).await.unwrap().unwrap();
    let text = gw.metrics().await;
    assert!(!text.contains(&label), "series of the departed worker: {text}");
    assert!(text.contains(&format!("worker=\"{}\"", stays.url)), "{text}");
}
