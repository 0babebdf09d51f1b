//! An open-loop load for tests: requests sent on a schedule, never waiting for the last.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// What becomes of the requests still unanswered when the load's time is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unanswered {
    /// Dropped at once.
    Abandon,
    /// Awaited, so that the next phase's clock starts with none in flight.
    Await,
}

/// Sends `rate` single-query `POST`s a second to `url`, open loop (each on its own task), for
/// `d`; counts in `odd` the answers that were not 200 or 429.
pub async fn open_loop(
    c: &reqwest::Client,
    url: &str,
    rate: f64,
    d: Duration,
    odd: &Arc<AtomicU64>,
    unanswered: Unanswered,
) {
    let start = Instant::now();
    let mut sent = 0u64;
    let mut tasks = tokio::task::JoinSet::new();
    while start.elapsed() < d {
        let due = start + Duration::from_secs_f64(sent as f64 / rate);
        tokio::time::sleep_until(due).await;
        sent += 1;
        let (c, url, odd) = (c.clone(), url.to_owned(), odd.clone());
        tasks.spawn(async move {
            let body = format!(r#"{{"query":"play some jazz music by artist {sent}"}}"#);
            match c.post(&url).body(body).timeout(Duration::from_secs(20)).send().await {
                Ok(r) if r.status() == 200 || r.status() == 429 => {}
                _ => {
                    odd.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        while tasks.try_join_next().is_some() {}
    }
    match unanswered {
        Unanswered::Abandon => tasks.abort_all(),
        Unanswered::Await => while tasks.join_next().await.is_some() {},
    }
}
