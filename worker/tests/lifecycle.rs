//! Start-up failures and SIGTERM draining of the real worker binary.

mod common;

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use wire::{ErrorBody, ErrorType, PredictBatchResponse, WorkerStats};

async fn startup_failure(extra: &[&str], ort: Option<&str>) -> (i32, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_worker"));
    cmd.args(["--listen", "127.0.0.1:0"]).args(extra);
    if !extra.contains(&"--model") {
        cmd.arg("--model").arg(testkit::model_dir());
    }
    match ort {
        Some(p) => cmd.args(["--ort-lib", p]),
        None => cmd.env_remove("ORT_DYLIB_PATH"),
    };
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "a start-up error is not a panic:\n{stderr}");
    (out.status.code().unwrap_or(-1), stderr)
}

#[tokio::test]
async fn a_missing_or_wrong_onnx_runtime_is_a_clear_error() {
    let (code, err) = startup_failure(&[], Some("/nonexistent/libonnxruntime.so")).await;
    assert_ne!(code, 0);
    assert!(err.contains("does not exist") && err.contains("fetch-ort.sh"), "{err}");

    let not_a_library = testkit::model_dir().join("config.json");
    let (code, err) = startup_failure(&[], Some(not_a_library.to_str().unwrap())).await;
    assert_ne!(code, 0);
    assert!(err.contains("ONNX Runtime library"), "{err}");

    let (code, err) = startup_failure(&[], None).await;
    assert_ne!(code, 0);
    assert!(err.contains("ORT_DYLIB_PATH"), "{err}");
}

#[tokio::test]
async fn cuda_without_a_gpu_fails_loudly_instead_of_falling_back() {
    let ort = testkit::ort_lib();
    let (code, err) = startup_failure(&["--device", "cuda:0"], Some(ort.to_str().unwrap())).await;
    assert_ne!(code, 0, "must not silently run on the CPU");
    assert!(err.contains("CUDA execution provider"), "{err}");
}

#[tokio::test]
async fn a_bad_model_directory_is_a_clear_error() {
    let ort = testkit::ort_lib();
    let (code, err) = startup_failure(&["--model", "/nonexistent-model-dir"], Some(ort.to_str().unwrap())).await;
    assert_ne!(code, 0);
    assert!(err.contains("/nonexistent-model-dir"), "{err}");
}

#[tokio::test]
async fn sigterm_answers_every_accepted_request_then_exits_zero() {
    // Queries wait 400 ms for companions, so SIGTERM arrives with all of them still queued.
    let mut w = common::start(&["--max-queue-delay", "400ms", "--max-batch-rows", "256"]).await;
    let c = testkit::http::client();
    let accepted: Vec<_> = (0..24)
        .map(|i| {
            let body = json!({"queries": ["play some jazz music", format!("book a table for {i} people tonight")]});
            tokio::spawn(c.post(w.at("/predict")).json(&body).send())
        })
        .collect();
    testkit::wait_until(Duration::from_secs(10), "all 48 queries are admitted", || async {
        let s: WorkerStats = c.get(w.at("/v1/stats")).send().await.unwrap().json().await.unwrap();
        s.queue.queued + s.queue.in_flight == 48
    })
    .await;

    kill(Pid::from_raw(w.pid()), Signal::SIGTERM).unwrap();

    // Readiness turns false and new work is refused with a retryable 503.
    testkit::wait_until(Duration::from_secs(5), "readiness turns 503", || async {
        c.get(w.at("/readyz")).send().await.is_ok_and(|r| r.status() == 503)
    })
    .await;
    let r = c.get(w.at("/predict")).query(&[("query", "play music")]).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(r.json::<ErrorBody>().await.unwrap().error_type, ErrorType::Unavailable);

    // Every accepted request is answered in full.
    for handle in accepted {
        let r = handle.await.unwrap().expect("accepted request answered, not dropped");
        assert_eq!(r.status(), 200);
        let batch: PredictBatchResponse = r.json().await.unwrap();
        assert_eq!(batch.predictions[0].intent, "PlayMusic");
        assert_eq!(batch.predictions[1].intent, "BookRestaurant");
    }
    let status = w.wait_exit(Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(0));
}

/// The statuses of every complete answer in `raw` (answers carry `content-length`).
fn statuses(raw: &[u8]) -> Vec<u16> {
    let mut out = Vec::new();
    let mut rest = raw;
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        let Ok(httparse::Status::Complete(head)) = resp.parse(rest) else { return out };
        let len = resp
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok())
            .unwrap_or(0);
        if rest.len() < head + len {
            return out;
        }
        out.push(resp.code.unwrap_or(0));
        rest = &rest[head + len..];
    }
}

#[tokio::test]
async fn sigterm_answers_queued_requests_with_connection_close_and_closes_idle_connections() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut w = common::start(&["--max-queue-delay", "400ms", "--max-batch-rows", "256"]).await;
    let addr = w.url.trim_start_matches("http://").to_owned();
    let c = testkit::http::client();
    let request = |q: &str| format!("GET /predict?query={q} HTTP/1.1\r\nhost: worker\r\n\r\n");

    // Idle keep-alive connections, one request answered on each.
    let mut idle = Vec::new();
    for _ in 0..4 {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(request("play").as_bytes()).await.unwrap();
        let mut buf = vec![0; 4096];
        let n = s.read(&mut buf).await.unwrap();
        assert_eq!(statuses(&buf[..n]), [200]);
        idle.push(s);
    }
    // Connections with two requests pipelined: the first waits 400 ms in the queue, the second
    // waits behind it on the connection. Answered while draining, the first says
    // `Connection: close`: per HTTP/1.1 the client retries the second unless it was answered too.
    let mut busy = Vec::new();
    for i in 0..8 {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(format!("{}{}", request(&format!("play%20jazz%20{i}")), request("play%20rock")).as_bytes())
            .await
            .unwrap();
        busy.push(s);
    }
    testkit::wait_until(Duration::from_secs(10), "the first eight requests are admitted", || async {
        let s: WorkerStats = c.get(w.at("/v1/stats")).send().await.unwrap().json().await.unwrap();
        s.queue.queued + s.queue.in_flight == 8
    })
    .await;

    kill(Pid::from_raw(w.pid()), Signal::SIGTERM).unwrap();

    for (i, mut s) in busy.into_iter().enumerate() {
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut raw)).await.expect("closed in time").unwrap();
        let got = statuses(&raw);
        assert_eq!(got.first(), Some(&200), "connection {i}: the accepted request is answered in full: {got:?}");
        let text = String::from_utf8_lossy(&raw).to_ascii_lowercase();
        assert!(text.contains("connection: close"), "connection {i}: the answer says the connection closes");
        assert!(got[1..].iter().all(|&s| s == 200 || s == 503), "connection {i}: {got:?}");
    }
    for mut s in idle {
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut raw)).await.expect("closed in time").unwrap();
        assert!(raw.is_empty(), "an idle connection is closed without an answer");
    }
    assert_eq!(w.wait_exit(Duration::from_secs(20)).await.code(), Some(0));
}

/// One closed-loop keep-alive client: sends a request, reads its answer, again, until an answer
/// says `Connection: close` (Ok(answers)) or the connection ends after a request was sent with
/// no answer to it (Err: a lost request).
async fn keep_alive_client(addr: String) -> Result<u32, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(&addr).await.map_err(|e| e.to_string())?;
    let request = b"GET /predict?query=play%20some%20jazz HTTP/1.1\r\nhost: worker\r\n\r\n";
    let mut answers = 0;
    loop {
        s.write_all(request).await.map_err(|e| format!("send: {e}"))?;
        let mut raw = Vec::new();
        let close = loop {
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).await.map_err(|e| format!("after {answers} answers: {e}"))?;
            if n == 0 {
                return Err(format!("closed after {answers} answers with a request unanswered"));
            }
            raw.extend_from_slice(&buf[..n]);
            if statuses(&raw).len() == 1 {
                break String::from_utf8_lossy(&raw).to_ascii_lowercase().contains("connection: close");
            }
        };
        answers += 1;
        if close {
            return Ok(answers);
        }
    }
}

#[tokio::test]
async fn sigterm_loses_no_request_of_closed_loop_keep_alive_clients() {
    let mut w = common::start(&["--max-queue-delay", "50ms"]).await;
    let addr = w.url.trim_start_matches("http://").to_owned();
    let clients: Vec<_> = (0..16).map(|_| tokio::spawn(keep_alive_client(addr.clone()))).collect();
    let c = testkit::http::client();
    testkit::wait_until(Duration::from_secs(10), "the clients have work in the worker", || async {
        let s: WorkerStats = c.get(w.at("/v1/stats")).send().await.unwrap().json().await.unwrap();
        s.rates.completed_total >= 32 && s.queue.queued + s.queue.in_flight > 0
    })
    .await;
    kill(Pid::from_raw(w.pid()), Signal::SIGTERM).unwrap();
    for (i, client) in clients.into_iter().enumerate() {
        let answered = tokio::time::timeout(Duration::from_secs(20), client).await.expect("client ends").unwrap();
        let answers = answered.unwrap_or_else(|e| panic!("client {i}: {e}"));
        assert!(answers > 0);
    }
    assert_eq!(w.wait_exit(Duration::from_secs(20)).await.code(), Some(0));
}
