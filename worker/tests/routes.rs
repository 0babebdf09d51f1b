//! The served routes (`http::routes`: `GET` and `POST /predict` straight to their handlers) answer
//! exactly as the router (`http::app`) does: status, the headers a client relies on and the body,
//! for answers, refusals and a failing backend, and both echo the request's id.

use axum::body::{Body, to_bytes};
use axum::http::{Request, Response};
use clap::Parser;
use tower::ServiceExt;
use worker::backend::FakeBackend;
use worker::model::ModelDir;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn requests() -> Vec<(&'static str, Request<Body>)> {
    let get = |uri: &str| Request::get(uri).body(Body::empty()).unwrap();
    let post = |body: &'static str| {
        Request::post("/predict").header("content-type", "application/json").body(Body::from(body)).unwrap()
    };
    let with_id = Request::get("/predict?query=play%20some%20jazz")
        .header("x-request-id", "client-7")
        .header("traceparent", TRACEPARENT)
        .body(Body::empty())
        .unwrap();
    vec![
        ("get", get("/predict?query=play%20some%20jazz")),
        ("get, all scores", get("/predict?query=book%20a%20table&all_scores=true")),
        ("get, no query", get("/predict")),
        ("get, empty query", get("/predict?query=")),
        ("get, invalid utf-8", get("/predict?query=%FF")),
        ("get, long query", get(&format!("/predict?query={}", "a".repeat(3000)))),
        ("get, client's id", with_id),
        ("post one", post(r#"{"query": "rate this book"}"#)),
        ("post many", post(r#"{"queries": ["rate this book", "will it rain"], "all_scores": true}"#)),
        ("post, not json", post("query=jazz")),
        ("post, an array", post(r#"["jazz"]"#)),
        ("post, both", post(r#"{"query": "a", "queries": ["b"]}"#)),
        (
            "post, too many",
            post(Box::leak(format!(r#"{{"queries": [{}]}}"#, vec![r#""q""#; 65].join(",")).into_boxed_str())),
        ),
        ("put", Request::put("/predict").body(Body::empty()).unwrap()),
        ("head", Request::head("/predict?query=jazz").body(Body::empty()).unwrap()),
    ]
}

async fn parts(resp: Response<Body>) -> (u16, Vec<(String, String)>, String, bool) {
    let status = resp.status().as_u16();
    let mut headers: Vec<(String, String)> = ["content-type", "retry-after", "connection", "allow"]
        .iter()
        .filter_map(|h| resp.headers().get(*h).map(|v| (h.to_string(), v.to_str().unwrap().to_owned())))
        .collect();
    let id = resp.headers().get("x-request-id").map(|v| v.to_str().unwrap().to_owned());
    let generated = id.as_ref().is_some_and(|id| id.len() == 32 && id.bytes().all(|c| c.is_ascii_hexdigit()));
    if let Some(id) = id.filter(|_| !generated) {
        headers.push(("x-request-id".into(), id));
    }
    let body = String::from_utf8(to_bytes(resp.into_body(), usize::MAX).await.unwrap().to_vec()).unwrap();
    (status, headers, body, generated)
}

#[tokio::test]
async fn the_fast_path_answers_as_the_router_does() {
    let dir = testkit::model_dir();
    let config = worker::Config::parse_from(["worker", "--model", dir.to_str().unwrap()]);
    let model = ModelDir::load(&config.model, None).unwrap();
    let fake = FakeBackend::new(7);
    let backend = fake.clone();
    let worker = worker::build(&config, model, move |_| Ok(backend.clone())).await.unwrap();
    let (app, routes) = (worker.app(), worker::http::routes(worker.state()));

    for failing in [false, true] {
        fake.set_failing(failing);
        for ((name, a), (_, b)) in requests().into_iter().zip(requests()) {
            let by_router = parts(app.clone().oneshot(a).await.unwrap()).await;
            let by_routes = parts(routes.clone().oneshot(b).await.unwrap()).await;
            assert_eq!(by_routes, by_router, "{name} (backend failing: {failing})");
            let (status, _, body, _) = &by_routes;
            if *status != 200 && !body.is_empty() {
                let v: serde_json::Value = serde_json::from_str(body).unwrap();
                assert!(v["error_type"].is_string(), "{name}: {v}");
            }
        }
    }
    // While draining, both say so and ask the client to close.
    worker.state().core.start_draining();
    for ((name, a), (_, b)) in requests().into_iter().zip(requests()).take(2) {
        let by_router = parts(app.clone().oneshot(a).await.unwrap()).await;
        let by_routes = parts(routes.clone().oneshot(b).await.unwrap()).await;
        assert_eq!(by_routes, by_router, "{name} (draining)");
        assert_eq!(by_routes.0, 503, "{name}");
        assert!(by_routes.1.contains(&("connection".into(), "close".into())), "{name}: {:?}", by_routes.1);
    }
}
