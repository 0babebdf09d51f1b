//! Test helpers: in-process fake workers (hyper servers on 127.0.0.1:0 whose behaviour a test
//! switches at run time), an in-process gateway, and a small HTTP client.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// What a fake worker does with `/predict`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    Ok = 0,
    /// 503 `unavailable` on /predict and /readyz, `draining` in stats.
    Draining = 1,
    /// 429 `overloaded` with Retry-After.
    Overloaded = 2,
    /// Close the connection without answering.
    Drop = 3,
    /// Answer nothing (predict, readiness, stats) until the mode changes, as a stopped process
    /// (SIGSTOP): connections are accepted, requests read, no byte comes back.
    Stall = 4,
}

pub struct FakeWorker {
    pub addr: SocketAddr,
    pub url: String,
    pub name: String,
    pub state: Arc<FakeState>,
    server: JoinHandle<()>,
}

pub struct FakeState {
    pub name: String,
    mode: AtomicU8,
    pub delay_ms: AtomicU64,
    /// Added to the delay of a `/predict` whose body is over 1 KiB (a heavy request).
    pub heavy_delay_ms: AtomicU64,
    /// `queued + in_flight` reported in /v1/stats; `u64::MAX` = no /v1/stats (404).
    pub reported_queue: AtomicU64,
    /// GPU utilization reported (percent); `u64::MAX` = unavailable.
    pub gpu_pct: AtomicU64,
    /// `schema_version` of its /v1/stats; other than 1: a document of a future worker (fields
    /// the gateway does not read removed, new ones added, tokens in the queue).
    pub schema_version: AtomicU64,
    pub predicts: AtomicU64,
    /// Queries answered (a merged `{"queries": [...]}` request counts its queries).
    pub queries: AtomicU64,
    /// `/predict` requests received, whatever became of them.
    pub arrivals: AtomicU64,
    /// `/predict` requests refused (draining or overloaded).
    pub refusals: AtomicU64,
    /// `x-request-id` and `traceparent` of every `/predict` request received.
    pub ids: std::sync::Mutex<Vec<(Option<String>, Option<String>)>>,
}

impl FakeState {
    pub fn mode(&self) -> Mode {
        match self.mode.load(Ordering::SeqCst) {
            1 => Mode::Draining,
            2 => Mode::Overloaded,
            3 => Mode::Drop,
            4 => Mode::Stall,
            _ => Mode::Ok,
        }
    }
}

impl FakeWorker {
    pub async fn start(name: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(FakeState {
            name: name.to_owned(),
            mode: AtomicU8::new(0),
            delay_ms: AtomicU64::new(0),
            heavy_delay_ms: AtomicU64::new(0),
            reported_queue: AtomicU64::new(0),
            gpu_pct: AtomicU64::new(u64::MAX),
            schema_version: AtomicU64::new(1),
            predicts: AtomicU64::new(0),
            queries: AtomicU64::new(0),
            arrivals: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
            ids: std::sync::Mutex::default(),
        });
        let st = Arc::clone(&state);
        // Connections live in a JoinSet owned by the accept task: aborting it closes every
        // socket at once, like SIGKILL.
        let server = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                let st = Arc::clone(&st);
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(Arc::clone(&st), req));
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(sock), svc).await;
                });
            }
        });
        Self { addr, url: format!("http://{addr}"), name: name.to_owned(), state, server }
    }

    pub fn set_mode(&self, m: Mode) {
        self.state.mode.store(m as u8, Ordering::SeqCst);
    }

    pub fn set_delay(&self, ms: u64) {
        self.state.delay_ms.store(ms, Ordering::SeqCst);
    }

    pub fn predicts(&self) -> u64 {
        self.state.predicts.load(Ordering::SeqCst)
    }

    /// Queries answered (a merged request counts its queries).
    pub fn queries(&self) -> u64 {
        self.state.queries.load(Ordering::SeqCst)
    }

    pub fn arrivals(&self) -> u64 {
        self.state.arrivals.load(Ordering::SeqCst)
    }

    /// Close the listener and every connection at once.
    pub fn kill(&self) {
        self.server.abort();
    }
}

impl Drop for FakeWorker {
    fn drop(&mut self) {
        self.server.abort();
    }
}

#[derive(Debug)]
struct Dropped;
impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dropped")
    }
}
impl std::error::Error for Dropped {}

fn json(status: StatusCode, v: serde_json::Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("retry-after", "1")
        .body(Full::new(Bytes::from(v.to_string())))
        .unwrap()
}

async fn handle(st: Arc<FakeState>, req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Dropped> {
    let path = req.uri().path().to_owned();
    if path == "/predict" {
        st.arrivals.fetch_add(1, Ordering::SeqCst);
    }
    while st.mode() == Mode::Stall {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mode = st.mode();
    match path.as_str() {
        "/readyz" if mode == Mode::Draining => Ok(json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"error":"draining","error_type":"unavailable"}),
        )),
        "/readyz" => Ok(json(StatusCode::OK, serde_json::json!({"status":"ready"}))),
        "/v1/stats" => {
            let q = st.reported_queue.load(Ordering::SeqCst);
            if q == u64::MAX {
                return Ok(json(StatusCode::NOT_FOUND, serde_json::json!({"error":"no","error_type":"not_found"})));
            }
            let mut doc = stats(&st.name, q, st.gpu_pct.load(Ordering::SeqCst), mode == Mode::Draining);
            let schema = st.schema_version.load(Ordering::SeqCst);
            if schema != 1 {
                let d = doc.as_object_mut().unwrap();
                d.insert("schema_version".into(), schema.into());
                d.remove("rates");
                d.remove("batches");
                d.insert("scheduler".into(), serde_json::json!({"policy": "fair"}));
                d["queue"]["queued_tokens"] = (q * 10).into();
                d["queue"]["in_flight_tokens"] = 5.into();
            }
            Ok(json(StatusCode::OK, doc))
        }
        "/predict" => {
            let header = |name: &str| req.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
            st.ids.lock().unwrap().push((header("x-request-id"), header("traceparent")));
            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let mut delay = st.delay_ms.load(Ordering::SeqCst);
            if body.len() > 1024 {
                delay += st.heavy_delay_ms.load(Ordering::SeqCst);
            }
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            match st.mode() {
                Mode::Ok | Mode::Stall => {
                    st.predicts.fetch_add(1, Ordering::SeqCst);
                    // A list (a merge of the gateway's): one prediction per query, in order, each
                    // echoing the body its query would have come in alone, as the worker answers.
                    let list = serde_json::from_slice::<wire::PredictRequest>(&body).ok().and_then(|r| r.queries);
                    if let Some(queries) = list {
                        st.queries.fetch_add(queries.len() as u64, Ordering::SeqCst);
                        let predictions: Vec<_> = queries
                            .iter()
                            .map(|q| {
                                let echo = serde_json::json!({ "query": q }).to_string();
                                serde_json::json!({"intent": st.name, "score": 1.0, "echo": echo})
                            })
                            .collect();
                        return Ok(json(StatusCode::OK, serde_json::json!({ "predictions": predictions })));
                    }
                    st.queries.fetch_add(1, Ordering::SeqCst);
                    let echo = String::from_utf8_lossy(&body).into_owned();
                    Ok(json(StatusCode::OK, serde_json::json!({"intent": st.name, "score": 1.0, "echo": echo})))
                }
                Mode::Draining => {
                    st.refusals.fetch_add(1, Ordering::SeqCst);
                    Ok(json(
                        StatusCode::SERVICE_UNAVAILABLE,
                        serde_json::json!({"error":"draining","error_type":"unavailable"}),
                    ))
                }
                Mode::Overloaded => Ok(json(
                    StatusCode::TOO_MANY_REQUESTS,
                    serde_json::json!({"error":"full","error_type":"overloaded"}),
                )),
                Mode::Drop => Err(Dropped),
            }
        }
        _ => Ok(json(StatusCode::NOT_FOUND, serde_json::json!({"error":"no","error_type":"not_found"}))),
    }
}

/// A worker's `/v1/stats`; with a GPU reading, device memory used is `min(gpu, 100)` % of total.
pub fn stats(name: &str, queue: u64, gpu: u64, draining: bool) -> serde_json::Value {
    let gpu = if gpu == u64::MAX {
        serde_json::json!({"status": "unavailable", "reason": "worker runs on cpu"})
    } else {
        serde_json::json!({
            "status": "available", "source": "nvml", "sampled_at_unix_ms": 1, "age_ms": 0, "shared": false,
            "device": {"index": 0, "uuid": "GPU-x", "name": "fake", "utilization_pct": gpu as f64,
                       "memory_utilization_pct": 0.0, "memory_used_bytes": gpu.min(100), "memory_total_bytes": 100},
            "process": {"pid": 1}
        })
    };
    serde_json::json!({
        "schema_version": 1, "worker_id": name, "timestamp_unix_ms": 1, "uptime_s": 1.0,
        "ready": !draining, "draining": draining,
        "model": {"name": "fake", "device": "cpu", "labels": ["a"]},
        "queue": {"queued": queue / 2, "in_flight": queue - queue / 2, "capacity": 1024, "max_batch_rows": 32,
                  "max_batch_tokens": 4096, "max_queue_delay_ms": 2.0},
        "rates": {"window_s": 10.0, "arrival_per_s": 0.0, "completion_per_s": 0.0, "rejected_per_s": 0.0,
                  "admitted_total": 0, "completed_total": 0, "rejected_total": 0},
        "batches": {"count": 0, "mean_rows": 0.0, "mean_padded_len": 0.0, "mean_inference_ms": 0.0,
                    "mean_queue_wait_ms": 0.0, "busy_fraction": 0.0, "total": 0},
        "gpu": gpu
    })
}

/// A config for tests: fast polling so conditions settle quickly.
pub fn config(workers: &[&FakeWorker]) -> gateway::Config {
    let mut c = gateway::Config::for_tests();
    c.workers = workers.iter().map(|w| w.url.clone()).collect();
    c.stats_interval = Duration::from_millis(50);
    c.stats_timeout = Duration::from_millis(500);
    c.probe_backoff = Duration::from_millis(50);
    c.probe_backoff_max = Duration::from_millis(200);
    c.signal_interval = Duration::from_millis(50);
    c.signal_rise = Duration::ZERO;
    c
}

/// A gateway served in-process on 127.0.0.1:0 (clients) and 127.0.0.1:0 (operators), by the
/// same listeners as the binary (`Gateway::serve`, `Gateway::serve_admin`).
pub struct TestGateway {
    /// The client port.
    pub url: String,
    /// The admin port (`/metrics`, `/v1/pools`, `/v1/signal`, `/pools/{pool}/signal`).
    pub admin: String,
    pub gw: gateway::Gateway,
    servers: [JoinHandle<()>; 2],
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        for s in &self.servers {
            s.abort();
        }
    }
}

impl TestGateway {
    pub async fn start(config: gateway::Config) -> Self {
        Self::serve(gateway::build(config).await.unwrap()).await
    }

    /// With EndpointSlices watched through `kube` (a client of a test API server).
    pub async fn start_with_kube(config: gateway::Config, kube: kube::Client) -> Self {
        Self::serve(gateway::build_with_kube_client(config, Some(kube)).await.unwrap()).await
    }

    async fn serve(gw: gateway::Gateway) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = format!("http://{}", admin_listener.local_addr().unwrap());
        let g = gw.clone();
        let client = tokio::spawn(async move {
            let _ = g.serve(listener, std::future::pending()).await;
        });
        let g = gw.clone();
        let operators = tokio::spawn(async move {
            let _ = g.serve_admin(admin_listener, std::future::pending()).await;
        });
        Self { url, admin, gw, servers: [client, operators] }
    }

    /// `/metrics` of the admin port.
    pub async fn metrics(&self) -> String {
        get(&client(), &format!("{}/metrics", self.admin)).await.body.as_str().unwrap_or_default().to_owned()
    }

    pub fn pool(&self, name: &str) -> Arc<gateway::Pool> {
        self.gw.pools().get(name).unwrap_or_else(|| panic!("no pool {name}"))
    }

    /// Wait until `n` workers of `pool` are ready.
    pub async fn wait_ready(&self, pool: &str, n: usize) {
        let p = self.pool(pool);
        wait_for(|| p.workers().iter().filter(|w| w.health == gateway::Health::Ready).count() == n, "workers ready")
            .await;
    }
}

/// Poll `cond` every 10 ms for up to 10 s.
pub async fn wait_for(mut cond: impl FnMut() -> bool, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub type TestClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: serde_json::Value,
}

pub async fn send(c: &TestClient, method: &str, url: &str, body: Option<&str>) -> Answer {
    send_with(c, method, url, body, &[]).await
}

/// `send` with extra request headers.
pub async fn send_with(
    c: &TestClient,
    method: &str,
    url: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> Answer {
    let mut req = Request::builder().method(method).uri(url).header("content-type", "application/json");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req.body(Full::new(Bytes::from(body.unwrap_or("").to_owned()))).unwrap();
    let resp = c.request(req).await.expect("gateway answers");
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let body =
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::String(String::from_utf8_lossy(&bytes).into()));
    Answer { status, headers, body }
}

pub async fn get(c: &TestClient, url: &str) -> Answer {
    send(c, "GET", url, None).await
}

pub async fn post(c: &TestClient, url: &str, body: &str) -> Answer {
    send(c, "POST", url, Some(body)).await
}
