//! Admission sized from the pool's capacity (issue 48): the gateway admits what its ready
//! workers answer within the request's deadline (their calibrated capacity times
//! `--request-timeout`, Little's law), with `--max-outstanding` only a floor. Two GPU-like fake
//! workers of known capacity behind the real gateway, whose floor is set far below what a step
//! to 90 % of their capacity holds in flight: before, that floor answered such a step 429
//! `overloaded` (as the default floor did on GPUs, issue 48); now not one request is refused.
//! Alone:
//! `cargo build -p worker -p gateway --example fake_worker && cargo test -p e2e --test pool_admission`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use testkit::Server;
use testkit::fault::metric_sum;
use testkit::http::{client, get};
use tokio::process::Command;
use tokio::time::Instant;

/// The fake workers' batch: 150 ms + 2 ms a row, 32 rows: 32 / 0.214 s, about 150 queries/s
/// each, and a request's answer takes hundreds of milliseconds.
const BASE_MS: u64 = 150;
const ROW_MS: u64 = 2;
const ROWS: u64 = 32;
/// The gateway's admission floor: far below what a step to 90 % of two workers holds in flight.
const FLOOR: u64 = 16;

async fn fake_worker() -> Server {
    Server::fake_worker(&testkit::fake_batch_flags(BASE_MS, ROW_MS, ROWS)).await
}

/// Counts of an open-loop run: answers by status, and the most requests in flight at once.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    overloaded: AtomicU64,
    other: AtomicU64,
    in_flight: AtomicU64,
    most_in_flight: AtomicU64,
}

/// `rate` single-query requests a second to `url` for `d`, open loop; waits for every answer.
async fn open_loop(c: &reqwest::Client, url: &str, rate: f64, d: Duration, tally: &Arc<Tally>) {
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut sent = 0u64;
    while start.elapsed() < d {
        tokio::time::sleep_until(start + Duration::from_secs_f64(sent as f64 / rate)).await;
        sent += 1;
        let (c, url, tally) = (c.clone(), url.to_owned(), Arc::clone(tally));
        tasks.spawn(async move {
            let now = tally.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            tally.most_in_flight.fetch_max(now, Ordering::SeqCst);
            let body = format!(r#"{{"query":"play some jazz music by artist {sent}"}}"#);
            let status = c.post(&url).body(body).timeout(Duration::from_secs(20)).send().await.map(|r| r.status());
            tally.in_flight.fetch_sub(1, Ordering::SeqCst);
            match status.map(|s| s.as_u16()) {
                Ok(200) => tally.ok.fetch_add(1, Ordering::SeqCst),
                Ok(429) => tally.overloaded.fetch_add(1, Ordering::SeqCst),
                _ => tally.other.fetch_add(1, Ordering::SeqCst),
            };
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_to_90_percent_of_the_ready_workers_capacity_are_never_answered_429() {
    let workers = [fake_worker().await, fake_worker().await];
    let mut cmd = Command::new(testkit::bin("gateway"));
    cmd.args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]);
    cmd.args(["--stats-interval", "100ms", "--signal-interval", "100ms"]);
    cmd.args(["--max-outstanding", &FLOOR.to_string()]);
    for w in &workers {
        cmd.arg("--worker").arg(&w.url);
    }
    cmd.env("RUST_LOG", "warn");
    let gw = Server::start(cmd).await;
    let admin = gw.announced("admin", Duration::from_secs(2)).await.expect("the admin port");
    let c = client();

    // Both workers calibrated and ready: the bound follows their capacity, not the floor.
    let deadline = Instant::now() + Duration::from_secs(30);
    let capacity = loop {
        let m = get(&c, &format!("{admin}/metrics")).await.body.as_str().unwrap_or_default().to_owned();
        let capacity = metric_sum(&m, "gateway_worker_capacity_per_second", &[]);
        let ready = metric_sum(&m, "gateway_worker_ready", &[]);
        let limit = metric_sum(&m, "gateway_admission_limit", &[]);
        if ready == 2.0 && capacity > 0.0 && limit >= (capacity * 10.0).floor() {
            break capacity;
        }
        assert!(Instant::now() < deadline, "the bound never followed the workers' capacity:\n{m}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let expected = ROWS as f64 / ((BASE_MS + ROW_MS * ROWS) as f64 / 1000.0);
    assert!(capacity > expected, "the two workers' capacity {capacity:.0}/s, each about {expected:.0}/s");

    // Steps up: 45 % then 90 % of the ready workers' capacity.
    let tally = Arc::new(Tally::default());
    let url = gw.at("/predict");
    open_loop(&c, &url, 0.45 * capacity, Duration::from_millis(1500), &tally).await;
    open_loop(&c, &url, 0.9 * capacity, Duration::from_secs(3), &tally).await;

    let (ok, overloaded, other) =
        (tally.ok.load(Ordering::SeqCst), tally.overloaded.load(Ordering::SeqCst), tally.other.load(Ordering::SeqCst));
    let most = tally.most_in_flight.load(Ordering::SeqCst);
    let m = get(&c, &format!("{admin}/metrics")).await.body.as_str().unwrap_or_default().to_owned();
    eprintln!("{ok} answered 200, {overloaded} 429, {other} other; at most {most} in flight (floor {FLOOR})");
    assert!(most > FLOOR, "the step never held more than the floor ({most}): the test proves nothing");
    assert_eq!(overloaded, 0, "429s at 90 % of the ready workers' capacity");
    assert_eq!(other, 0, "every request answered 200");
    assert_eq!(metric_sum(&m, "gateway_admission_rejected_total", &[]), 0.0);
    assert!(ok as f64 > 0.9 * capacity * 3.0, "{ok} answered");
}
