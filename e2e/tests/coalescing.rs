//! Coalescing in the gateway's worker hop (issue 29), against the built binaries: concurrent
//! single-query requests bound for one worker (`/predict`'s GET and POST, and the Open Inference
//! Protocol's inferences of one text) reach it as fewer, merged `{"queries": [...]}` requests,
//! and each client gets exactly the answer the worker gives that request alone (the same bytes,
//! status and `Content-Type`, its own `x-request-id`); when a worker fails a merge mid-way
//! (the request read, the connection dropped), every client request in it is retried on another
//! worker and answered once.
//!
//! The worker is the built `fake_worker` (the worker's whole host side, the fake backend), each
//! of its batches made to take 20 ms so that requests are in flight together; the failing worker
//! is a small HTTP/1.1 server in this process. Alone:
//! `cargo build -p worker -p gateway --example fake_worker && cargo test -p e2e --test coalescing`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use testkit::Server;
use testkit::fault::metric_sum;
use testkit::http::client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::process::Command;

/// One case at a time: each loads both cores of a small machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn fake_worker() -> Server {
    Server::fake_worker(&["--batch-base-time", "20ms", "--calibration-time", "0s"]).await
}

/// A gateway in front of `workers`, merging from `after` exchanges in flight per worker.
async fn gateway(workers: &[&str], after: u32) -> (Server, String) {
    let mut cmd = Command::new(testkit::bin("gateway"));
    cmd.args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--stats-interval", "100ms"]);
    cmd.args(["--coalesce-after-in-flight", &after.to_string()]);
    for w in workers {
        cmd.arg("--worker").arg(w);
    }
    cmd.env("RUST_LOG", "warn");
    let gw = Server::start(cmd).await;
    let admin = gw.announced("admin", Duration::from_secs(2)).await.expect("the gateway announces its admin port");
    (gw, admin)
}

async fn metrics(c: &reqwest::Client, url: &str) -> String {
    c.get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap()
}

/// Waits until the gateway (admin URL `admin`) holds a worker's stats: its telemetry's age is
/// +Inf until the first snapshot.
async fn stats_arrived(c: &reqwest::Client, admin: &str) {
    testkit::wait_until(Duration::from_secs(10), "the worker's stats reached the gateway", || async {
        metrics(c, admin)
            .await
            .lines()
            .filter(|l| l.starts_with("gateway_worker_telemetry_age_seconds{"))
            .any(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).is_some_and(f64::is_finite))
    })
    .await;
}

/// What a client got: status, `Content-Type`, `x-request-id`, body.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Got {
    status: u16,
    content_type: Option<String>,
    request_id: Option<String>,
    body: String,
}

/// How a query is asked.
#[derive(Debug, Clone, Copy)]
enum Form {
    /// `GET /predict?query=...`
    Get,
    /// `POST /predict {"query": ...}`
    Post,
    /// `POST /v2/models/snips-minilm-l6/infer`, one text (varied: an id, shape `[1, 1]`, one
    /// output named).
    Oip,
}

/// Query `i` in form `form`, with request id `id`.
async fn ask(c: &reqwest::Client, base: &str, i: usize, form: Form, id: &str) -> Got {
    let query = format!("play some jazz number {i}");
    let req = match form {
        Form::Get => c.get(format!("{base}/predict")).query(&[("query", &query)]),
        Form::Post => c.post(format!("{base}/predict")).json(&serde_json::json!({ "query": query })),
        Form::Oip => {
            let (shape, data) = if i.is_multiple_of(2) {
                (serde_json::json!([1]), serde_json::json!([query]))
            } else {
                (serde_json::json!([1, 1]), serde_json::json!([[query]]))
            };
            let mut body = serde_json::json!({
                "inputs": [{"name": "text", "shape": shape, "datatype": "BYTES", "data": data}],
            });
            if i.is_multiple_of(3) {
                body["id"] = serde_json::json!(format!("oip-{i}"));
            }
            if i % 4 == 1 {
                body["outputs"] = serde_json::json!([{"name": "score"}]);
            }
            c.post(format!("{base}/v2/models/snips-minilm-l6/infer")).json(&body)
        }
    };
    let resp = req.header("x-request-id", id).send().await.expect("an answer");
    let header = |name: &str| resp.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
    let (content_type, request_id) = (header("content-type"), header("x-request-id"));
    Got { status: resp.status().as_u16(), content_type, request_id, body: resp.text().await.unwrap() }
}

#[tokio::test]
async fn concurrent_single_queries_reach_the_worker_merged_and_come_back_as_the_worker_answers_each() {
    let _serial = SERIAL.lock().await;
    let worker = fake_worker().await;
    let (gw, admin) = gateway(&[&worker.url], 2).await;
    let (gw, admin) = (&gw, admin.as_str());
    let client = client();
    let c = &client;
    testkit::wait_until(Duration::from_secs(10), "the gateway is ready", || async {
        c.get(gw.at("/readyz")).send().await.is_ok_and(|r| r.status() == 200)
    })
    .await;

    // The gateway merges an Open Inference Protocol request only to a worker whose stats named
    // the model: wait for them.
    stats_arrived(c, admin).await;

    // What the worker answers each query alone, asked directly, in each form.
    const QUERIES: usize = 64;
    let forms = [Form::Get, Form::Post, Form::Oip];
    let mut alone = BTreeMap::new();
    for i in 0..QUERIES {
        for (f, form) in forms.iter().enumerate() {
            alone.insert((i, f), ask(c, &worker.url, i, *form, "direct").await);
        }
    }
    assert!(alone[&(0, 2)].body.contains(r#""id":"oip-0""#), "{:?}", alone[&(0, 2)]);

    // The same queries through the gateway, all at once: 3 rounds of the forms mixed (query i
    // in form i + round), then a round of the protocol's requests alone.
    let rounds: Vec<Box<dyn Fn(usize) -> usize>> =
        vec![Box::new(|i| i % 3), Box::new(|i| (i + 1) % 3), Box::new(|i| (i + 2) % 3), Box::new(|_| 2)];
    let mut oip_round = (0.0, 0.0);
    for (round, form_of) in rounds.iter().enumerate() {
        let before = metrics(c, &worker.url).await;
        let tasks: Vec<_> = (0..QUERIES)
            .map(|i| {
                let (c, base, form) = (c.clone(), gw.url.clone(), forms[form_of(i)]);
                tokio::spawn(async move { ask(&c, &base, i, form, &format!("r{round}-q{i}")).await })
            })
            .collect();
        for (i, t) in tasks.into_iter().enumerate() {
            let got = t.await.unwrap();
            let want = Got { request_id: Some(format!("r{round}-q{i}")), ..alone[&(i, form_of(i))].clone() };
            assert_eq!(got, want, "query {i}, round {round}, {:?}", forms[form_of(i)]);
        }
        let after = metrics(c, &worker.url).await;
        let delta = |name: &str| {
            metric_sum(&after, name, &[("outcome", "ok")]) - metric_sum(&before, name, &[("outcome", "ok")])
        };
        oip_round = (delta("worker_requests_total"), delta("worker_queries_total"));
    }

    let worker_after = metrics(c, &worker.url).await;
    let (requests, queries) = (
        metric_sum(&worker_after, "worker_requests_total", &[("outcome", "ok")]),
        metric_sum(&worker_after, "worker_queries_total", &[("outcome", "ok")]),
    );
    let direct = (QUERIES * forms.len()) as f64;
    let (requests, queries) = (requests - direct, queries - direct);
    let sent = (QUERIES * rounds.len()) as f64;
    eprintln!("{requests} worker requests carried {queries} queries of {sent} client requests");
    eprintln!("the protocol's round: {} worker requests carried {} queries", oip_round.0, oip_round.1);
    assert_eq!(queries, sent, "every query reached the worker once");
    assert!(requests < sent / 2.0, "{requests} worker requests for {sent} client requests: not merged");
    assert_eq!(oip_round.1, QUERIES as f64);
    assert!(
        oip_round.0 < QUERIES as f64 / 2.0,
        "the protocol's requests: {} worker requests for {QUERIES}",
        oip_round.0
    );
    let gateway = metrics(c, admin).await;
    let coalesced = metric_sum(&gateway, "gateway_coalesced_requests_total", &[]);
    let exchanges = metric_sum(&gateway, "gateway_coalesced_exchanges_total", &[]);
    assert!(coalesced > 0.0 && exchanges < coalesced, "{coalesced} requests in {exchanges} merges");
    assert_eq!(metric_sum(&gateway, "gateway_requests_total", &[("outcome", "ok")]), sent);
    assert_eq!(metric_sum(&gateway, "gateway_retries_total", &[]), 0.0);
}

#[tokio::test]
async fn an_inference_of_one_text_going_alone_goes_in_the_list_form_and_a_refusal_is_the_workers_own() {
    let _serial = SERIAL.lock().await;
    let worker = fake_worker().await;
    let (gw, admin) = gateway(&[&worker.url], 2).await;
    let c = &client();
    testkit::wait_until(Duration::from_secs(10), "the gateway is ready", || async {
        c.get(gw.at("/readyz")).send().await.is_ok_and(|r| r.status() == 200)
    })
    .await;
    stats_arrived(c, &admin).await;
    let infer = |base: String, text: String| async move {
        let body = serde_json::json!({
            "id": "one",
            "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [text]}],
        });
        let resp = c.post(format!("{base}/v2/models/snips-minilm-l6/infer")).json(&body).send().await.unwrap();
        let content_type = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
        (resp.status().as_u16(), content_type, resp.text().await.unwrap())
    };
    // One at a time, nothing else in flight: each goes alone. A text over the worker's
    // 2,048-byte limit is light by the gateway's estimate, so it goes the same way.
    let texts = ["play some jazz".to_owned(), "x".repeat(3000)];
    for text in &texts {
        let direct = infer(worker.url.clone(), text.clone()).await;
        let through = infer(gw.url.clone(), text.clone()).await;
        assert_eq!(through, direct, "through the gateway as the worker answers it (text of {} bytes)", text.len());
    }
    let gateway = metrics(c, &admin).await;
    // Both went to the worker's `/predict` as a list of one; the worker refused the second as a
    // list, and it went again as it came, for the worker's own refusal of it (checked above).
    assert_eq!(metric_sum(&gateway, "gateway_coalesced_exchanges_total", &[]), 2.0, "{gateway}");
    assert_eq!(metric_sum(&gateway, "gateway_coalesced_requests_total", &[]), 2.0);
    assert_eq!(metric_sum(&gateway, "gateway_requests_total", &[("outcome", "ok")]), 1.0);
    assert_eq!(metric_sum(&gateway, "gateway_retries_total", &[]), 0.0);
}

#[tokio::test]
async fn concurrent_grpc_calls_of_one_text_are_merged_and_answered_as_the_worker_answers_each() {
    use oip::pb::ModelInferRequest;
    use oip::pb::grpc_inference_service_client::GrpcInferenceServiceClient;
    use oip::pb::model_infer_request::InferInputTensor;

    let _serial = SERIAL.lock().await;
    let worker = fake_worker().await;
    let mut cmd = Command::new(testkit::bin("gateway"));
    cmd.args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"]);
    cmd.args(["--stats-interval", "100ms", "--coalesce-after-in-flight", "2", "--worker", &worker.url]);
    cmd.env("RUST_LOG", "warn");
    let gw = Server::start(cmd).await;
    let grpc = gw.announced("grpc", Duration::from_secs(2)).await.expect("the gateway announces its gRPC port");
    let admin = gw.announced("admin", Duration::from_secs(2)).await.expect("the admin port");
    let c = &client();
    stats_arrived(c, &admin).await;

    const CALLS: usize = 64;
    let request = |i: usize| {
        let text = format!("play some jazz number {i}");
        ModelInferRequest {
            model_name: "snips-minilm-l6".into(),
            id: format!("g{i}"),
            inputs: vec![InferInputTensor {
                name: "text".into(),
                datatype: "BYTES".into(),
                shape: vec![1],
                parameters: Default::default(),
                contents: None,
            }],
            raw_input_contents: vec![oip::call::encode_raw_bytes([text.as_str()])],
            ..Default::default()
        }
    };
    // What the worker answers each call alone, asked directly over REST, as the gateway's gRPC
    // service answers it (`oip::answer::pb_from_rest`).
    let mut want = Vec::new();
    for i in 0..CALLS {
        let call = oip::InferCall::from_pb(request(i)).unwrap();
        let r = c.post(format!("{}/v2/models/snips-minilm-l6/infer", worker.url)).json(&call.to_rest()).send().await;
        let rest: oip::rest::InferResponse = r.unwrap().json().await.unwrap();
        want.push(oip::answer::pb_from_rest(rest).unwrap());
    }
    let before = metrics(c, &worker.url).await;
    let g = GrpcInferenceServiceClient::connect(grpc).await.unwrap();
    let tasks: Vec<_> = (0..CALLS)
        .map(|i| {
            let mut g = g.clone();
            let req = request(i);
            tokio::spawn(async move { g.model_infer(req).await.map(tonic::Response::into_inner) })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap().unwrap(), want[i], "call {i}");
    }
    let after = metrics(c, &worker.url).await;
    let delta =
        |name: &str| metric_sum(&after, name, &[("outcome", "ok")]) - metric_sum(&before, name, &[("outcome", "ok")]);
    let (requests, queries) = (delta("worker_requests_total"), delta("worker_queries_total"));
    eprintln!("{requests} worker requests carried {queries} queries of {CALLS} gRPC calls");
    assert_eq!(queries, CALLS as f64, "every call reached the worker once");
    assert!(requests < CALLS as f64 / 2.0, "{requests} worker requests for {CALLS} calls: not merged");
}

/// A worker that answers a request of one query (after `hold`, so that others queue behind it
/// and merge) and drops every merged request once it has read it whole; counts both.
struct Failing {
    url: String,
    singles: Arc<AtomicU64>,
    merges: Arc<AtomicU64>,
}

async fn failing_worker(hold: Duration) -> Failing {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (singles, merges) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (s, m) = (Arc::clone(&singles), Arc::clone(&merges));
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (s, m) = (Arc::clone(&s), Arc::clone(&m));
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    let Some((end, len)) = head(&buf) else {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    if buf.len() < end + len {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    }
                    let request: Vec<u8> = buf.drain(..end + len).collect();
                    let text = String::from_utf8_lossy(&request).into_owned();
                    let body = if text.starts_with("GET /readyz") {
                        r#"{"status":"ready"}"#.to_owned()
                    } else if text.starts_with("GET /v1/stats") {
                        // No stats: a worker the gateway routes to, simply blind.
                        let body = r#"{"error":"no stats","error_type":"not_found"}"#;
                        let out = format!(
                            "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if sock.write_all(out.as_bytes()).await.is_err() {
                            return;
                        }
                        continue;
                    } else if text.contains("\"queries\"") {
                        // A merge, read whole: dropped without a byte of answer.
                        m.fetch_add(1, Ordering::SeqCst);
                        return;
                    } else {
                        s.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(hold).await;
                        r#"{"intent":"FromTheFailingWorker","score":0.5}"#.to_owned()
                    };
                    let out = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if sock.write_all(out.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Failing { url, singles, merges }
}

/// The end of a request head in `buf` and its body's length, once the head is there.
fn head(buf: &[u8]) -> Option<(usize, usize)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let len = text.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok());
    Some((end, len.unwrap_or(0)))
}

#[tokio::test]
async fn a_merge_dropped_mid_way_has_every_request_in_it_retried_elsewhere_and_answered_once() {
    let _serial = SERIAL.lock().await;
    let worker = fake_worker().await;
    let failing = failing_worker(Duration::from_millis(300)).await;
    let (gw, admin) = gateway(&[&worker.url, &failing.url], 1).await;
    let (gw, admin) = (&gw, admin.as_str());
    let client = client();
    let c = &client;
    testkit::wait_until(Duration::from_secs(10), "both workers are ready", || async {
        let v: serde_json::Value =
            c.get(format!("{admin}/v1/pools")).send().await.unwrap().json().await.unwrap_or_default();
        let workers = v[0]["workers"].as_array().cloned().unwrap_or_default();
        workers.len() == 2 && workers.iter().all(|w| w["health"] == "ready")
    })
    .await;
    let worker_before = metric_sum(&metrics(c, &worker.url).await, "worker_queries_total", &[("outcome", "ok")]);

    // Bursts of concurrent requests until the failing worker has dropped a few merges.
    let mut answers: BTreeMap<String, u64> = BTreeMap::new();
    let mut sent = 0u64;
    for round in 0..50 {
        if failing.merges.load(Ordering::SeqCst) >= 3 {
            break;
        }
        let tasks: Vec<_> = (0..32)
            .map(|i: usize| {
                let (c, base) = (c.clone(), gw.url.clone());
                let form = if i.is_multiple_of(2) { Form::Get } else { Form::Post };
                tokio::spawn(async move { ask(&c, &base, i, form, &format!("r{round}-q{i}")).await })
            })
            .collect();
        for (i, t) in tasks.into_iter().enumerate() {
            let got = t.await.unwrap();
            sent += 1;
            assert_eq!(got.status, 200, "{got:?}");
            assert_eq!(got.request_id.as_deref(), Some(format!("r{round}-q{i}").as_str()));
            let intent = serde_json::from_str::<serde_json::Value>(&got.body).unwrap()["intent"].to_string();
            let from = if intent.contains("FromTheFailingWorker") { "failing" } else { "worker" };
            *answers.entry(from.to_owned()).or_default() += 1;
        }
    }
    let merges = failing.merges.load(Ordering::SeqCst);
    eprintln!("{sent} requests, answers {answers:?}, {merges} merges dropped by the failing worker");
    assert!(merges >= 1, "the failing worker never got a merge");

    // Every request answered once: the failing worker answered its singles, the real worker
    // every other query, each exactly once (retried members included, none twice).
    let from_failing = answers.get("failing").copied().unwrap_or(0);
    assert_eq!(from_failing, failing.singles.load(Ordering::SeqCst), "{answers:?}");
    let worker_queries =
        metric_sum(&metrics(c, &worker.url).await, "worker_queries_total", &[("outcome", "ok")]) - worker_before;
    assert_eq!(worker_queries as u64, sent - from_failing, "{answers:?}");
    let gateway = metrics(c, admin).await;
    assert_eq!(metric_sum(&gateway, "gateway_requests_total", &[("outcome", "ok")]) as u64, sent);
    assert!(metric_sum(&gateway, "gateway_retries_total", &[("reason", "dropped")]) >= 1.0, "{gateway}");
}
