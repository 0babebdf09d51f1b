//! The scaling signal against the analytic replica count: GPU-like fake workers of known
//! capacity (`fake_worker --batch-base-time T --batch-row-time R`: every batch sleeps `T + R x
//! rows`, so full batches of `B` rows serve `B / (T + R B)` queries a second) behind the real
//! gateway, an open-loop load at fractions of one worker's capacity, and the gateway's
//! `/v1/signal` read against `R = lambda / (C u)` with the gateway's default `u`.
//!
//! Nothing is tuned per worker: the workers calibrate themselves at start and the gateway runs
//! with its default targets (only its windows are shortened, to keep the test short).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use testkit::Server;
use testkit::http::{client, get};
use testkit::load::{Unanswered, open_loop};
use tokio::process::Command;
use tokio::time::Instant;

/// The fake workers' batch: 40 ms + 2 ms a row, 32 rows: 32 / 0.104 s = 307.7 queries/s.
const BASE_MS: u64 = 40;
const ROW_MS: u64 = 2;
const ROWS: u64 = 32;
/// The gateway's default target utilization.
const U: f64 = 0.7;

fn capacity() -> f64 {
    ROWS as f64 / ((BASE_MS + ROW_MS * ROWS) as f64 / 1000.0)
}

async fn start_worker() -> Server {
    // Full batches whatever the queries' lengths (a GPU's default), so that B is exact.
    Server::fake_worker(&testkit::fake_batch_flags(BASE_MS, ROW_MS, ROWS)).await
}

async fn start_gateway(workers: &[Server]) -> (Server, String) {
    let mut cmd = Command::new(testkit::bin("gateway"));
    cmd.args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]);
    cmd.args(["--stats-interval", "100ms", "--signal-interval", "100ms", "--signal-rise", "0s"]);
    cmd.args(["--demand-window", "2s"]);
    for w in workers {
        cmd.arg("--worker").arg(&w.url);
    }
    cmd.env("RUST_LOG", "warn");
    let gw = Server::start(cmd).await;
    let admin = gw.announced("admin", Duration::from_secs(2)).await.expect("the gateway announces its admin port");
    (gw, admin)
}

/// Waits until the pool reads in capacity mode with `n` ready workers; returns its capacity.
async fn wait_calibrated(c: &reqwest::Client, admin: &str, n: usize) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = get(c, &format!("{admin}/v1/signal")).await.body;
        let pool = &s[0];
        if pool["mode"] == "capacity" && pool["ready_workers"] == n {
            return pool["capacity_per_s"].as_f64().expect("a capacity");
        }
        assert!(Instant::now() < deadline, "never calibrated with {n} workers: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The median of the pool's signal read every 100 ms for `d`, with the demand of the last read.
async fn signal_median(c: &reqwest::Client, admin: &str, d: Duration) -> (f64, f64) {
    let start = Instant::now();
    let (mut values, mut demand) = (Vec::new(), 0.0);
    while start.elapsed() < d {
        let s = get(c, &format!("{admin}/v1/signal")).await.body;
        values.push(s[0]["signal"].as_f64().unwrap());
        demand = s[0]["demand_per_s"].as_f64().unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    values.sort_by(f64::total_cmp);
    (values[values.len() / 2], demand)
}

async fn sweep(replicas: usize, fractions: &[f64]) {
    let workers: Vec<Server> = futures_join(replicas).await;
    let (gw, admin) = start_gateway(&workers).await;
    let c = client();
    let calibrated = wait_calibrated(&c, &admin, replicas).await;
    let cap = capacity();
    assert!((calibrated - cap).abs() / cap < 0.15, "calibrated {calibrated:.0} q/s against the analytic {cap:.0}");
    let url = gw.at("/predict");
    let odd = Arc::new(AtomicU64::new(0));
    for &f in fractions {
        let rate = f * cap;
        let load = {
            let (c, url, odd) = (c.clone(), url.clone(), odd.clone());
            tokio::spawn(
                async move { open_loop(&c, &url, rate, Duration::from_secs(5), &odd, Unanswered::Abandon).await },
            )
        };
        // The demand window (2 s) fills, then the signal is read for 2 s.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let (signal, demand) = signal_median(&c, &admin, Duration::from_secs(2)).await;
        load.await.unwrap();
        let r = rate / (cap * U);
        let ok = if r < 1.5 { (signal - r).abs() <= 0.25 } else { (signal - r).abs() / r <= 0.15 };
        eprintln!("{replicas} workers, {:.0} % of C: signal {signal:.2}, R {r:.2}, demand {demand:.0}/s", f * 100.0);
        assert!(
            ok,
            "{replicas} workers at {:.0} % of C ({rate:.0} q/s, measured {demand:.0}): signal {signal:.2}, R {r:.2}",
            f * 100.0
        );
    }
    assert_eq!(odd.load(Ordering::Relaxed), 0, "every answer was a 200 or a 429");
}

/// Starts `n` workers at once (each calibrates for about a second).
async fn futures_join(n: usize) -> Vec<Server> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        set.spawn(start_worker());
    }
    let mut out = Vec::new();
    while let Some(w) = set.join_next().await {
        out.push(w.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_reads_its_load_from_a_trickle_to_overload() {
    sweep(1, &[0.1, 0.5, 1.5]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_read_the_same_load_as_one() {
    sweep(3, &[0.1, 0.5, 1.5]).await;
}

/// Two gateway replicas over the same workers, each taking half the load: each reads the whole
/// pool's demand (its own, plus what the workers counted from the other), as the HPA may read
/// either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateway_replicas_each_read_the_whole_demand() {
    let workers = futures_join(2).await;
    let (gw1, admin1) = start_gateway(&workers).await;
    let (gw2, admin2) = start_gateway(&workers).await;
    let c = client();
    wait_calibrated(&c, &admin1, 2).await;
    wait_calibrated(&c, &admin2, 2).await;
    let cap = capacity();
    let rate = 0.8 * cap;
    let odd = Arc::new(AtomicU64::new(0));
    let mut loads = Vec::new();
    for gw in [&gw1, &gw2] {
        let (c, url, odd) = (c.clone(), gw.at("/predict"), odd.clone());
        loads.push(tokio::spawn(async move {
            open_loop(&c, &url, rate / 2.0, Duration::from_secs(6), &odd, Unanswered::Abandon).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let ((s1, d1), (s2, d2)) = tokio::join!(
        signal_median(&c, &admin1, Duration::from_secs(2)),
        signal_median(&c, &admin2, Duration::from_secs(2))
    );
    for l in loads {
        l.await.unwrap();
    }
    let r = rate / (cap * U);
    eprintln!("two gateways at {rate:.0} q/s: signals {s1:.2} and {s2:.2} (demand {d1:.0}, {d2:.0}), R {r:.2}");
    for (s, d) in [(s1, d1), (s2, d2)] {
        assert!(
            (s - r).abs() <= 0.25,
            "signal {s:.2} (demand {d:.0}/s) against R {r:.2}: one gateway saw only its half"
        );
        assert!((d - rate).abs() / rate < 0.15, "demand {d:.0}/s against {rate:.0}");
    }
    assert_eq!(odd.load(Ordering::Relaxed), 0);
}
