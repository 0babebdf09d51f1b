//! Cold start with a capacity carried over (`--capacity-cache`): the real worker binary on the
//! bundled model, started twice on one cache directory.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use testkit::Server;
use wire::{CapacityStats, WorkerStats};

/// A directory of its own under the temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("worker-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Self(dir)
    }

    fn files(&self) -> usize {
        std::fs::read_dir(&self.0).map_or(0, Iterator::count)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn start(cache: &TempDir, calibration: &str) -> Server {
    let dir = cache.0.to_str().expect("a UTF-8 path");
    common::start(&["--capacity-cache", dir, "--calibration-time", calibration]).await
}

async fn capacity(w: &Server) -> CapacityStats {
    let c = testkit::http::client();
    let s: WorkerStats = c.get(w.at("/v1/stats")).send().await.unwrap().json().await.unwrap();
    s.capacity.expect("a capacity is reported")
}

#[tokio::test]
async fn a_carried_over_capacity_is_served_at_once_and_replaced_by_the_recalibration() {
    let cache = TempDir::new("capacity-cache");
    let c = testkit::http::client();

    // First start: nothing to carry over; it calibrates before it listens, then writes the cache.
    let first = start(&cache, "200ms").await;
    let calibrated = capacity(&first).await;
    assert!(!calibrated.carried_over, "{calibrated:?}");
    let per_s = calibrated.calibrated_per_s.expect("calibrated");
    assert_eq!(cache.files(), 1, "the capacity is written before the port opens");
    drop(first);

    // Second start, whose calibration lasts a minute at least: it listens, is ready, answers and
    // reports the carried-over figure long before that calibration could end.
    let second = start(&cache, "60s").await;
    assert_eq!(c.get(second.at("/readyz")).send().await.unwrap().status(), 200);
    let answer = c.get(second.at("/predict")).query(&[("query", "play some jazz")]).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    let carried = capacity(&second).await;
    assert!(carried.carried_over, "{carried:?}");
    assert_eq!(carried.calibrated_per_s, Some(per_s));
    let s: WorkerStats = c.get(second.at("/v1/stats")).send().await.unwrap().json().await.unwrap();
    assert_eq!(s.queue.capacity, ((per_s * 30.0).ceil() as u64).max(1024), "admission sized from it at once");
    assert_eq!(s.rates.completed_total, 1, "the calibration's queries are not counted as traffic");
    drop(second);

    // Third start, with a short calibration: it serves the carried figure, then its own
    // calibration, run while it serves, replaces it.
    let third = start(&cache, "200ms").await;
    testkit::wait_until(Duration::from_secs(30), "the recalibration replaces the carried capacity", || async {
        !capacity(&third).await.carried_over
    })
    .await;
    let answer = c.get(third.at("/predict")).query(&[("query", "book a table")]).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(cache.files(), 1, "one file per key, replaced");
}

#[tokio::test]
async fn other_settings_carry_nothing_over_and_a_corrupt_cache_is_ignored() {
    let cache = TempDir::new("capacity-cache-keys");
    let first = start(&cache, "100ms").await;
    assert!(!capacity(&first).await.carried_over);
    drop(first);
    // Another batch size: another key, so it calibrates first (with a minute's calibration, no
    // capacity could be reported if it did not: it would not even listen yet).
    let dir = cache.0.to_str().unwrap();
    let other =
        common::start(&["--capacity-cache", dir, "--calibration-time", "100ms", "--max-batch-rows", "16"]).await;
    assert!(!capacity(&other).await.carried_over, "a key that differs carries nothing over");
    drop(other);
    assert_eq!(cache.files(), 2, "a file per key");

    // Every file corrupt: ignored (with a warning), the worker calibrates and rewrites it.
    for entry in std::fs::read_dir(&cache.0).unwrap() {
        std::fs::write(entry.unwrap().path(), "{ not json").unwrap();
    }
    let again = start(&cache, "100ms").await;
    assert!(!capacity(&again).await.carried_over);
    drop(again);
    let rewritten = start(&cache, "60s").await;
    assert!(capacity(&rewritten).await.carried_over, "the rewritten file is read");
}
