//! Fault injection against the real binaries (issue 9): workers that refuse everything, slow and
//! idle clients, a stopped worker, heavy requests beside light ones, SIGTERM with requests in
//! flight. Every process is the built `worker` (the bundled CPU model on ONNX Runtime) or
//! `gateway`, on `127.0.0.1:0`, killed when its [`Server`] is dropped.
//!
//! Each case is bounded in seconds (short timeouts are passed as flags) and the cases run one at
//! a time ([`SERIAL`]): several of them load both cores of a small machine, and the others'
//! timing bounds would then measure the neighbour.
//!
//! Needs the model at `models/snips-minilm-l6` (or `WORKER_MODEL`), ONNX Runtime
//! (`ORT_DYLIB_PATH`, or `scripts/fetch-ort.sh`) and the built binaries (`cargo test --workspace`
//! builds them; alone: `cargo build -p worker -p gateway && cargo test -p e2e --test faults`).
//!
//! The families, one module each: `overload` (overload stays 429), `slow_clients` (slow and idle
//! clients cost nothing), `stalled` (a stopped worker), `heavy` (heavy requests beside light
//! ones), `drain` (SIGTERM with requests in flight). This file holds what they share.

mod drain;
mod heavy;
mod overload;
mod slow_clients;
mod stalled;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::Server;
use testkit::fault::{
    Closed, Signal, connect, gateway_cmd, hold_until_closed, metric_sum, read_answer, rss_bytes, scratch_dir, signal,
    worker_cmd, worker_cmd_on, write_worker_file,
};
use testkit::http::{Answer, client, get};
use tokio::io::AsyncWriteExt;

/// One case at a time (see the module's documentation).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const LIGHT_QUERY: &str = "/predict?query=play%20some%20jazz%20music";

/// A gateway started with `extra` flags, and its admin URL.
async fn start_gateway(extra: &[&str]) -> (Server, String) {
    let gw = Server::start(gateway_cmd(extra)).await;
    let admin = gw.announced("admin", Duration::from_secs(2)).await.expect("the gateway announces its admin port");
    (gw, admin)
}

/// The default pool's workers as `/v1/pools` shows them, by URL.
async fn workers_view(c: &reqwest::Client, admin: &str) -> BTreeMap<String, Value> {
    let v = get(c, &format!("{admin}/v1/pools")).await.body;
    let pool = v.as_array().and_then(|ps| ps.iter().find(|p| p["pool"] == "default")).cloned().unwrap_or_default();
    pool["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| (w["url"].as_str().unwrap_or_default().to_owned(), w.clone()))
        .collect()
}

async fn health(c: &reqwest::Client, admin: &str, worker: &str) -> String {
    workers_view(c, admin).await.get(worker).map(|w| w["health"].as_str().unwrap_or("?").to_owned()).unwrap_or_default()
}

async fn wait_health(c: &reqwest::Client, admin: &str, worker: &str, ready: bool, limit: Duration) {
    let what = format!("{worker} is {}ready at the gateway", if ready { "" } else { "not " });
    testkit::wait_until(limit, &what, || async { (health(c, admin, worker).await == "ready") == ready }).await;
}

async fn metrics(c: &reqwest::Client, admin: &str) -> String {
    get(c, &format!("{admin}/metrics")).await.body.as_str().unwrap_or_default().to_owned()
}

/// Answers `ok` counted for `worker` in `gateway_requests_total`.
async fn ok_count(c: &reqwest::Client, admin: &str, worker: &str) -> f64 {
    metric_sum(&metrics(c, admin).await, "gateway_requests_total", &[("worker", worker), ("outcome", "ok")])
}

/// One request; a transport error is an `Err` (a closed connection, a client timeout).
async fn try_get(c: &reqwest::Client, url: &str) -> Result<Answer, String> {
    match c.get(url).send().await {
        Ok(resp) => Ok(Answer::read(resp).await),
        Err(e) => Err(e.to_string()),
    }
}

/// What closed-loop clients got: status (0: transport error) -> count, and the first few
/// answers that were not 200.
#[derive(Debug, Default)]
struct Tally {
    ok: AtomicU64,
    statuses: Mutex<BTreeMap<u16, u64>>,
    bad: Mutex<Vec<String>>,
}

impl Tally {
    fn record(&self, r: &Result<Answer, String>) {
        let status = r.as_ref().map_or(0, |a| a.status.as_u16());
        *self.statuses.lock().unwrap().entry(status).or_default() += 1;
        if status == 200 {
            self.ok.fetch_add(1, Ordering::SeqCst);
            return;
        }
        let mut bad = self.bad.lock().unwrap();
        if bad.len() < 10 {
            bad.push(match r {
                Ok(a) => format!("{} retry-after={:?} {}", a.status, a.headers.get("retry-after"), a.body),
                Err(e) => format!("transport: {e}"),
            });
        }
    }

    fn statuses(&self) -> BTreeMap<u16, u64> {
        self.statuses.lock().unwrap().clone()
    }

    fn not_ok(&self) -> u64 {
        self.statuses().iter().filter(|(s, _)| **s != 200).map(|(_, n)| n).sum()
    }
}

/// `clients` closed-loop clients sending GET `url` until `stop`, each answer checked by `check`
/// (which panics on a violation, failing the case when the task is joined).
fn closed_loop(
    c: &reqwest::Client,
    url: &str,
    clients: usize,
    stop: &Arc<AtomicBool>,
    tally: &Arc<Tally>,
    check: fn(&Result<Answer, String>),
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|i| {
            let (c, stop, tally) = (c.clone(), stop.clone(), tally.clone());
            let url = format!("{url}%20{i}");
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let r = try_get(&c, &url).await;
                    check(&r);
                    tally.record(&r);
                }
            })
        })
        .collect()
}

async fn join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for t in tasks {
        t.await.expect("a client task failed (see its panic above)");
    }
}

/// An overload answer: 429 `overloaded`, JSON, with `Retry-After`.
fn assert_429(a: &Answer) {
    assert_eq!(a.status, 429, "{}", a.body);
    assert_eq!(a.error_type(), Some("overloaded"), "{}", a.body);
    let retry_after = a.headers.get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    assert!(retry_after.is_some_and(|s| s >= 1), "429 without a usable Retry-After: {:?}", a.headers);
}
