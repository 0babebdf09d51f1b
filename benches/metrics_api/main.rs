//! Benchmark of the gateway's external metrics API (run by `benches/metrics_api.sh`, which
//! builds everything and runs it three times; see `benches/RESULTS.md`).
//!
//! Starts a real CPU worker, the gateway binary with `--metrics-api-listen` (TLS, client CA,
//! SubjectAccessReviews to an in-process mocked kube-apiserver: the production configuration),
//! then measures:
//!
//! 1. **Step to moved value**: from the first request of a load step (`STEP_CLIENTS` closed-loop
//!    clients, either straight at the worker, so the gateway learns of it only from the worker's
//!    `/v1/stats`, or through the gateway) to the first API answer whose `gateway_pool_signal`
//!    is 0.25 replica above the idle value ("moved"), and to 90 % of the level it settles at.
//!    The API is read every `POLL_MS` over one keep-alive connection; every reading goes to
//!    `OUT/step-RUN.jsonl` (the values an HPA would have read during the step).
//! 2. **Latency under 100 clients**: `CLIENTS` keep-alive TLS connections, each with a client
//!    certificate, reading the signal for `DURATION_S` after a 2 s warm-up; latency per request
//!    at the client, authentication and authorization (cached SubjectAccessReview) included,
//!    TLS handshakes amortized over the connection. Twice: paced (each client every `PACE_MS`,
//!    latency counted from the scheduled send so that a stall counts for every request it
//!    delays) and closed-loop (each client back to back: the capacity, latency = queueing).
//!
//! Environment: `WORKER_BIN`, `ORT_DYLIB_PATH`, `WORKER_MODEL` (required); `RUN` (1), `OUT`
//! (benches/out/metrics_api), `STEP_CLIENTS` (64), `STEPS` (2 per target), `LOAD_S` (8),
//! `POLL_MS` (20), `CLIENTS` (100), `DURATION_S` (10), `PACE_MS` (100), `GATEWAY_CORE`, `WORKER_CORE` (taskset
//! lists; unset: no pinning), `WRAP` (a command the worker and the gateway run under, e.g.
//! `chrt -f 10`).

#[path = "../../metrics-api/tests/support/mod.rs"]
mod support;

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use support::{Ca, Conn, MockApi, TempDir, client_config, path_str};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const API: &str = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default";

fn env_or<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

/// `bin` under `taskset -c core` when a core is given, and under `WRAP` (e.g. `chrt -f 10`).
fn pinned(core: Option<String>, bin: &str) -> Command {
    let mut argv: Vec<String> =
        std::env::var("WRAP").unwrap_or_default().split_whitespace().map(str::to_owned).collect();
    if let Some(c) = core {
        argv.extend(["taskset".to_owned(), "-c".to_owned(), c]);
    }
    argv.push(bin.to_owned());
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    cmd
}

/// Start `cmd`, wait for a stdout line starting with `prefix`, return the rest of it.
async fn start(mut cmd: Command, prefix: &str) -> (Child, String) {
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let found = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if let Some(rest) = l.strip_prefix(prefix) {
                return rest.trim().to_owned();
            }
        }
        panic!("exited before printing {prefix:?}");
    })
    .await
    .expect("started within 120 s");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, found)
}

fn quantity(v: &serde_json::Value) -> Option<f64> {
    let q = v["items"][0]["value"].as_str()?;
    q.strip_suffix('m').map_or_else(|| q.parse().ok(), |m| m.parse::<f64>().ok().map(|x| x / 1000.0))
}

async fn read(c: &mut Conn, metric: &str) -> Option<f64> {
    quantity(&c.get(&format!("{API}/{metric}?labelSelector=pool%3Ddefault"), &[]).await.body)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let run: u32 = env_or("RUN", 1);
    let out = PathBuf::from(std::env::var("OUT").unwrap_or_else(|_| "benches/out/metrics_api".into()));
    std::fs::create_dir_all(&out).unwrap();
    let (step_clients, steps, load_s, poll_ms) =
        (env_or("STEP_CLIENTS", 64usize), env_or("STEPS", 2usize), env_or("LOAD_S", 8u64), env_or("POLL_MS", 20u64));
    let (clients, duration_s) = (env_or("CLIENTS", 100usize), env_or("DURATION_S", 10u64));
    let worker_bin = std::env::var("WORKER_BIN").expect("WORKER_BIN");
    let model = std::env::var("WORKER_MODEL").expect("WORKER_MODEL");

    let dir = TempDir::new("bench-metrics-api");
    let (server_ca, client_ca) = (Ca::new("serving-ca"), Ca::new("client-ca"));
    let serving = server_ca.server();
    let mock = MockApi::start(&dir, Default::default(), &["hpa"]).await;

    let mut w = pinned(std::env::var("WORKER_CORE").ok(), &worker_bin);
    w.args(["--listen", "127.0.0.1:0", "--model", &model, "--intra-op-threads", "1"]).env("RUST_LOG", "warn");
    let (_worker, worker_url) = start(w, "listening on ").await;

    let (admin_flag, admin_line) = admin_port();
    let mut g = pinned(std::env::var("GATEWAY_CORE").ok(), env!("CARGO_BIN_EXE_gateway"));
    g.args(["--listen", "127.0.0.1:0", "--worker", &worker_url, "--signal-fall", "2s", "--log", "warn"])
        .args([admin_flag, "127.0.0.1:0"])
        .args(["--metrics-api-listen", "127.0.0.1:0"])
        .args(["--tls-cert-file", &path_str(&dir.write("tls.crt", &serving.cert_pem))])
        .args(["--tls-private-key-file", &path_str(&dir.write("tls.key", &serving.key_pem))])
        .args(["--client-ca-file", &path_str(&dir.write("client-ca.pem", &client_ca.pem))])
        .args(["--authorization-kubeconfig", &path_str(&mock.kubeconfig)]);
    let mut gw = spawn_gateway(g, admin_line).await;
    let api_addr: std::net::SocketAddr = gw.api.parse().unwrap();
    let cfg = client_config(&server_ca, Some(&client_ca.client("hpa", &["system:serviceaccounts"])));
    let mut poll = Conn::open(api_addr, Arc::clone(&cfg)).await.unwrap();

    // 1. Step to moved value.
    let http: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let mut jsonl = std::fs::File::create(out.join(format!("step-{run}.jsonl"))).unwrap();
    let mut step_rows = Vec::new();
    for step in 0..steps * 2 {
        let target = if step % 2 == 0 { "worker" } else { "gateway" };
        let base_url = if target == "worker" { worker_url.clone() } else { gw.url.clone() };
        // Idle first: the signal back near zero.
        let idle_since = Instant::now();
        let baseline = loop {
            let v = read(&mut poll, "gateway_pool_signal").await.unwrap_or(f64::NAN);
            if v < 0.05 && idle_since.elapsed() > Duration::from_secs(2) {
                break v;
            }
            assert!(idle_since.elapsed() < Duration::from_secs(60), "the signal never fell back: {v}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let stop = Arc::new(AtomicBool::new(false));
        let t0 = Instant::now();
        let load: Vec<_> = (0..step_clients)
            .map(|i| {
                let (http, stop) = (http.clone(), Arc::clone(&stop));
                let url: http::Uri = format!("{base_url}/predict?query=play+some+jazz+{i}").parse().unwrap();
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let req = http::Request::get(url.clone()).body(Full::new(Bytes::new())).unwrap();
                        if let Ok(r) = http.request(req).await {
                            let _ = r.into_body().collect().await;
                            n += 1;
                        }
                    }
                    n
                })
            })
            .collect();
        let (mut moved, mut readings) = (None, Vec::new());
        let end = Duration::from_secs(load_s + 4);
        while t0.elapsed() < end {
            let t = t0.elapsed();
            if t >= Duration::from_secs(load_s) && !stop.load(Ordering::Relaxed) {
                stop.store(true, Ordering::Relaxed);
            }
            let signal = read(&mut poll, "gateway_pool_signal").await;
            let queue = read(&mut poll, "gateway_pool_signal_queue").await;
            let ready = read(&mut poll, "gateway_pool_ready_workers").await;
            let t_ms = t.as_secs_f64() * 1000.0;
            let phase = if t < Duration::from_secs(load_s) { "load" } else { "after" };
            writeln!(
                jsonl,
                "{}",
                json!({"run": run, "step": step, "target": target, "t_ms": t_ms.round(), "phase": phase,
                       "gateway_pool_signal": signal, "gateway_pool_signal_queue": queue,
                       "gateway_pool_ready_workers": ready})
            )
            .unwrap();
            if let Some(s) = signal {
                if moved.is_none() && s >= baseline + 0.25 {
                    moved = Some(t_ms);
                }
                readings.push((t_ms, s));
            }
            tokio::time::sleep(Duration::from_millis(poll_ms)).await;
        }
        let mut sent = 0;
        for l in load {
            sent += l.await.unwrap();
        }
        // The level it settled at: the mean over the last second of load.
        let last: Vec<f64> = readings
            .iter()
            .filter(|(t, _)| *t >= (load_s - 1) as f64 * 1000.0 && *t < load_s as f64 * 1000.0)
            .map(|(_, s)| *s)
            .collect();
        let level = last.iter().sum::<f64>() / last.len().max(1) as f64;
        let ninety = readings.iter().find(|(_, s)| *s >= baseline + 0.9 * (level - baseline)).map(|(t, _)| *t);
        let row = json!({"run": run, "step": step, "target": target, "baseline": baseline, "level": level,
                         "moved_ms": moved, "ninety_ms": ninety, "requests": sent});
        eprintln!("step {row}");
        step_rows.push(row);
    }

    // 2. Latency under CLIENTS concurrent authenticated clients: paced (each client every
    //    PACE_MS, latency from the scheduled send, so a stall counts for every request it
    //    delays), then closed-loop (as fast as they can: the capacity).
    let pace_ms: u64 = env_or("PACE_MS", 100);
    let probe = Probe { http: http.clone(), admin: gw.admin.clone(), pid: gw.child.id(), core: core(), mock };
    let paced = load(api_addr, &cfg, clients, duration_s, Some(Duration::from_millis(pace_ms)), run, &probe).await;
    let closed = load(api_addr, &cfg, clients, duration_s, None, run, &probe).await;
    let summary = json!({"steps": step_rows, "paced": paced, "closed": closed});
    std::fs::write(out.join(format!("summary-{run}.json")), serde_json::to_vec_pretty(&summary).unwrap()).unwrap();
    println!("{summary}");
    let _ = gw.child.kill().await;
}

/// `clients` keep-alive connections reading the signal for `duration_s` after a 2 s warm-up,
/// every `pace` (from a per-client offset) or back to back.
async fn load(
    addr: std::net::SocketAddr,
    cfg: &Arc<rustls::ClientConfig>,
    clients: usize,
    duration_s: u64,
    pace: Option<Duration>,
    run: u32,
    probe: &Probe,
) -> serde_json::Value {
    let mut conns = Vec::new();
    for _ in 0..clients {
        conns.push(Conn::open(addr, Arc::clone(cfg)).await.unwrap());
    }
    let path = format!("{API}/gateway_pool_signal?labelSelector=pool%3Ddefault");
    let warmup = Duration::from_secs(2);
    let window = Duration::from_secs(duration_s);
    let start_all = tokio::time::Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            let path = path.clone();
            tokio::spawn(async move {
                let (mut lat, mut lag, mut errors) = (Vec::new(), Vec::new(), 0u64);
                let mut next = start_all + pace.map_or(Duration::ZERO, |p| p * i as u32 / clients as u32);
                loop {
                    // Paced: timed from when the request should have been sent.
                    let t = match pace {
                        Some(p) => {
                            tokio::time::sleep_until(next).await;
                            lag.push(next.elapsed().as_secs_f64() * 1000.0);
                            next += p;
                            next - p
                        }
                        None => tokio::time::Instant::now(),
                    };
                    if t.duration_since(start_all) >= warmup + window {
                        break;
                    }
                    let ok = c.status(&path).await.is_ok_and(|s| s == http::StatusCode::OK);
                    if t.duration_since(start_all) >= warmup {
                        if ok {
                            lat.push(t.elapsed().as_secs_f64() * 1000.0);
                        } else {
                            errors += 1;
                        }
                    }
                }
                (lat, lag, errors)
            })
        })
        .collect();
    tokio::time::sleep_until(start_all + warmup).await;
    let (hist0, cpu0) = (probe.histogram().await, probe.cpu());
    tokio::time::sleep_until(start_all + warmup + window).await;
    let (hist1, cpu1) = (probe.histogram().await, probe.cpu());
    let (mut lat, mut lag, mut errors) = (Vec::new(), Vec::new(), 0);
    for t in tasks {
        let (l, g, e) = t.await.unwrap();
        lat.extend(l);
        lag.extend(g);
        errors += e;
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    lag.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let server = hist1.iter().zip(&hist0).map(|((le, a), (_, b))| (*le, a - b)).collect::<Vec<_>>();
    let (gateway_cpu, others_cpu) = match (cpu0, cpu1) {
        (Some((t0, c0, g0)), Some((t1, c1, g1))) if t1 > t0 => {
            let total = (t1 - t0) as f64;
            (
                ((g1 - g0) as f64 / total * 100.0).round(),
                (((c1 - c0) as f64 - (g1 - g0) as f64).max(0.0) / total * 100.0).round(),
            )
        }
        _ => (f64::NAN, f64::NAN),
    };
    let r = json!({"run": run, "clients": clients, "pace_ms": pace.map(|p| p.as_millis() as u64),
                   "seconds": duration_s, "requests": lat.len(), "errors": errors,
                   "req_per_s": (lat.len() as f64 / window.as_secs_f64()).round(),
                   "p50_ms": percentile(&lat, 0.50), "p90_ms": percentile(&lat, 0.90),
                   "p99_ms": percentile(&lat, 0.99), "p999_ms": percentile(&lat, 0.999),
                   "max_ms": lat.last().copied().unwrap_or(f64::NAN),
                   "client_wake_lag_p99_ms": percentile(&lag, 0.99),
                   "server_p50_le_ms": bucket_quantile(&server, 0.50), "server_p99_le_ms": bucket_quantile(&server, 0.99),
                   "gateway_core_gateway_pct": gateway_cpu, "gateway_core_others_pct": others_cpu,
                   "subject_access_reviews": probe.mock.reviews().len()});
    eprintln!("load {r}");
    r
}

struct Gw {
    child: Child,
    url: String,
    api: String,
    admin: String,
}

/// The flag and the printed line of the gateway's port serving `/metrics`: `--admin-listen`
/// where the gateway has it, else `--metrics-listen`.
fn admin_port() -> (&'static str, &'static str) {
    let help =
        std::process::Command::new(env!("CARGO_BIN_EXE_gateway")).arg("--help").output().expect("gateway --help");
    if String::from_utf8_lossy(&help.stdout).contains("--admin-listen") {
        ("--admin-listen", "admin listening on ")
    } else {
        ("--metrics-listen", "metrics listening on ")
    }
}

/// The core the gateway is pinned to (`GATEWAY_CORE` holding one number).
fn core() -> Option<usize> {
    std::env::var("GATEWAY_CORE").ok()?.trim().parse().ok()
}

/// What the gateway process and its core did during a window.
struct Probe {
    http: Client<HttpConnector, Full<Bytes>>,
    admin: String,
    pid: Option<u32>,
    core: Option<usize>,
    /// The mocked kube-apiserver (how many SubjectAccessReviews it answered).
    mock: MockApi,
}

impl Probe {
    /// Cumulative counts of `gateway_metrics_api_request_duration_seconds` by upper bound.
    async fn histogram(&self) -> Vec<(f64, f64)> {
        let req = http::Request::get(format!("{}/metrics", self.admin)).body(Full::new(Bytes::new())).unwrap();
        let Ok(resp) = self.http.request(req).await else { return Vec::new() };
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        String::from_utf8_lossy(&body)
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("gateway_metrics_api_request_duration_seconds_bucket{le=\"")?;
                let (le, count) = rest.split_once("\"} ")?;
                let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
                Some((le, count.trim().parse().ok()?))
            })
            .collect()
    }

    /// (core's total ticks, core's busy ticks, the gateway's ticks) from /proc.
    fn cpu(&self) -> Option<(u64, u64, u64)> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let prefix = format!("cpu{} ", self.core?);
        let line = stat.lines().find(|l| l.starts_with(&prefix))?;
        let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
        let busy = f[0] + f[1] + f[2] + f[5] + f[6] + f.get(7).copied().unwrap_or(0);
        let total = busy + f[3] + f[4];
        let p = std::fs::read_to_string(format!("/proc/{}/stat", self.pid?)).ok()?;
        let after = &p[p.rfind(')')? + 2..];
        let g: Vec<u64> = after.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        // Fields 14 and 15 (utime, stime) are the 12th and 13th after the state.
        Some((total, busy, g.get(10)? + g.get(11)?))
    }
}

/// The upper bound (ms) of the bucket holding quantile `q` of a cumulative histogram.
fn bucket_quantile(h: &[(f64, f64)], q: f64) -> f64 {
    let total = h.last().map_or(0.0, |(_, c)| *c);
    h.iter().find(|(_, c)| *c >= q * total && total > 0.0).map_or(f64::NAN, |(le, _)| le * 1000.0)
}

/// Start the gateway; read both listening lines.
async fn spawn_gateway(mut cmd: Command, admin_line: &str) -> Gw {
    {
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn the gateway");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut url, mut api, mut admin) = (None, None, None);
        tokio::time::timeout(Duration::from_secs(60), async {
            while url.is_none() || api.is_none() || admin.is_none() {
                let l = lines.next_line().await.unwrap().expect("the gateway exited");
                if let Some(a) = l.strip_prefix("metrics API listening on https://") {
                    api = Some(a.trim().to_owned());
                } else if let Some(a) = l.strip_prefix(admin_line) {
                    admin = Some(a.trim().to_owned());
                } else if let Some(u) = l.strip_prefix("listening on ") {
                    url = Some(u.trim().to_owned());
                }
            }
        })
        .await
        .expect("gateway listening within 60 s");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Gw { child, url: url.unwrap(), api: api.unwrap(), admin: admin.unwrap() }
    }
}
