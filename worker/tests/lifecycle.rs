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
