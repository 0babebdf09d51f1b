//! At the default `info` level the request's span is made only when something is logged about the
//! request (`http::context`): an error line still carries its `x-request-id` and `traceparent`.
//! A test binary of its own: it installs a process-wide log subscriber at `info`.

use axum::body::Body;
use axum::http::Request;
use clap::Parser;
use tower::ServiceExt;
use worker::backend::FakeBackend;
use worker::model::ModelDir;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test]
async fn at_info_an_error_line_names_its_request() {
    let logs = testkit::Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt().with_env_filter("info").with_ansi(false).with_writer(move || writer.clone()).init();

    let dir = testkit::model_dir();
    let config = worker::Config::parse_from(["worker", "--model", dir.to_str().unwrap()]);
    let model = ModelDir::load(&config.model, None).unwrap();
    let fake = FakeBackend::new(7);
    let backend = fake.clone();
    let app = worker::build(&config, model, move |_| Ok(backend.clone())).await.unwrap().app();

    let ok = Request::get("/predict?query=play%20some%20jazz").header("x-request-id", "fine-1").body(Body::empty());
    let resp = app.clone().oneshot(ok.unwrap()).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-request-id"], "fine-1");

    fake.set_failing(true);
    let req = Request::get("/predict?query=play%20music")
        .header("x-request-id", "failing-8")
        .header("traceparent", TRACEPARENT)
        .body(Body::empty());
    let resp = app.clone().oneshot(req.unwrap()).await.unwrap();
    assert_eq!(resp.status(), 500);
    assert_eq!(resp.headers()["x-request-id"], "failing-8");
    let text = logs.text();
    let line =
        text.lines().find(|l| l.contains("internal error")).unwrap_or_else(|| panic!("the failure is logged:\n{text}"));
    assert!(line.contains("request_id=\"failing-8\"") && line.contains(TRACEPARENT), "it names the request: {line}");
    assert!(!text.contains("fine-1"), "nothing is logged about a request that went well:\n{text}");
}
