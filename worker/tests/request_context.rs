//! `x-request-id` and `traceparent`: echoed (or made) by the worker, and on every log line of the
//! request, including the backend thread's line for its query. A test binary of its own: it
//! installs a process-wide log subscriber that captures what the worker logs.

use axum::body::Body;
use axum::http::Request;
use clap::Parser;
use tower::ServiceExt;
use worker::backend::FakeBackend;
use worker::model::ModelDir;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test]
async fn request_ids_are_echoed_or_made_and_land_on_the_requests_log_lines() {
    let logs = testkit::Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_env_filter("worker=trace")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let dir = testkit::model_dir();
    let config = worker::Config::parse_from(["worker", "--model", dir.to_str().unwrap()]);
    let model = ModelDir::load(&config.model, None).unwrap();
    let fake = FakeBackend::new(7);
    let backend = fake.clone();
    let w = worker::build(&config, model, move |_| Ok(backend.clone())).await.unwrap();
    let app = w.app();
    let call = |req: Request<Body>| {
        let app = app.clone();
        async move { app.oneshot(req).await.unwrap() }
    };

    // The client's id is echoed, and its traceparent kept, on the answer and on the log lines.
    let req = Request::get("/predict?query=play%20some%20jazz")
        .header("x-request-id", "client-id-42")
        .header("traceparent", TRACEPARENT)
        .body(Body::empty())
        .unwrap();
    let resp = call(req).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-request-id"], "client-id-42");
    let lines = logs.lines();
    let answered = lines
        .iter()
        .find(|l| l.contains("answered") && l.contains("request_id=\"client-id-42\""))
        .unwrap_or_else(|| panic!("the backend thread's line for the query carries the request id:\n{lines:#?}"));
    assert!(answered.contains(TRACEPARENT), "and the traceparent: {answered}");

    // Without one (or with one that is not a printable token), the worker makes one.
    let mut made = Vec::new();
    for given in [None, Some("has spaces in it")] {
        let mut req = Request::get("/predict?query=play%20music");
        if let Some(id) = given {
            req = req.header("x-request-id", id);
        }
        let resp = call(req.body(Body::empty()).unwrap()).await;
        let id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
        assert_eq!(id.len(), 32, "{id}");
        made.push(id);
    }
    assert_ne!(made[0], made[1]);

    // Errors carry it too: an inference failure logs its detail on the request's span.
    fake.set_failing(true);
    let req = Request::get("/predict?query=play%20music").header("x-request-id", "failing-7").body(Body::empty());
    let resp = call(req.unwrap()).await;
    assert_eq!(resp.status(), 500);
    assert_eq!(resp.headers()["x-request-id"], "failing-7");
    let lines = logs.lines();
    assert!(
        lines.iter().any(|l| l.contains("internal error") && l.contains("request_id=\"failing-7\"")),
        "the error line names the request:\n{lines:#?}"
    );
}
