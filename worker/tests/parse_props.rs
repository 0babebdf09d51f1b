//! Property tests of `/predict` through the routes, around the fake backend: any query string and
//! any body (and any Open Inference Protocol body in Triton's binary tensor data extension, with
//! any JSON length) gets either a correct prediction or a JSON error with a stable `error_type`
//! (`invalid_request`, or `too_large` for a long query or body), never a panic, a 5xx or a hang.
//! A prediction is correct when its intent is the fake backend's class of the query's token ids.
//! `PROPTEST_CASES` sets the number of cases per property (1,000 by default).

use std::sync::OnceLock;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use clap::Parser;
use proptest::prelude::*;
use serde_json::{Value, json};
use tower::ServiceExt;
use worker::backend::FakeBackend;
use worker::model::ModelDir;

const MAX_QUERY_BYTES: usize = 200;
const MAX_BODY_BYTES: usize = 4096;

struct Fixture {
    rt: tokio::runtime::Runtime,
    app: Router,
    model: ModelDir,
    /// `tokenizers` on the same `tokenizer.json`.
    reference: tokenizers::Tokenizer,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let dir = testkit::model_dir();
        let args = ["--max-queries", "8", "--max-query-bytes", "200", "--max-body-bytes", "4096"];
        let mut argv = vec!["worker", "--model", dir.to_str().unwrap()];
        argv.extend_from_slice(&args);
        let config = worker::Config::parse_from(argv);
        let model = ModelDir::load(&config.model, None).unwrap();
        let fake = FakeBackend::new(model.labels.len());
        let w = rt.block_on(worker::build(&config, model, move |_| Ok(fake.clone()))).unwrap();
        let reference = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
        Fixture { rt, app: w.app(), model: ModelDir::load(&dir, None).unwrap(), reference }
    })
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(1000)
}

/// Sends `req`; returns the status and the body, which must be JSON.
fn call(req: Request<Body>) -> (u16, Value) {
    let f = fixture();
    f.rt.block_on(async {
        let resp = tokio::time::timeout(Duration::from_secs(10), f.app.clone().oneshot(req))
            .await
            .expect("answered within 10 s")
            .unwrap();
        let status = resp.status().as_u16();
        let json_type = resp.headers().get("content-type").is_some_and(|v| v == "application/json");
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
        assert!(json_type, "{status} answer is not JSON: {}", String::from_utf8_lossy(&bytes));
        (status, serde_json::from_slice(&bytes).expect("the body is JSON"))
    })
}

fn intent_of(query: &str) -> String {
    let m = fixture();
    // `tokenizers` itself: the worker's own encoder must give the same ids.
    let ids: Vec<i64> = m.reference.encode(query, true).unwrap().get_ids().iter().map(|&i| i64::from(i)).collect();
    m.model.labels[FakeBackend::class_of(&ids, m.model.labels.len())].clone()
}

/// An error is JSON with a stable kind; a prediction is the fake backend's for each query.
fn check(status: u16, body: &Value, queries: Option<&[String]>) -> Result<(), TestCaseError> {
    match status {
        200 => {
            let predictions = match body.get("predictions") {
                Some(ps) => ps.as_array().unwrap().clone(),
                None => vec![body.clone()],
            };
            let labels = &fixture().model.labels;
            for (i, p) in predictions.iter().enumerate() {
                let intent = p["intent"].as_str().unwrap();
                prop_assert!(labels.iter().any(|l| l == intent), "{intent}");
                let score = p["score"].as_f64().unwrap();
                prop_assert!((0.0..=1.0).contains(&score), "{score}");
                if let Some(qs) = queries {
                    prop_assert_eq!(intent, intent_of(&qs[i]), "query {:?}", qs[i]);
                }
            }
            if let Some(qs) = queries {
                prop_assert_eq!(predictions.len(), qs.len());
            }
        }
        400 | 413 => {
            let kind = body["error_type"].as_str().unwrap_or_default();
            prop_assert!(kind == "invalid_request" || kind == "too_large", "{status}: {body}");
            prop_assert_eq!(status == 413, kind == "too_large" && body["error"].as_str().unwrap().contains("body"));
            prop_assert!(!body["error"].as_str().unwrap_or_default().is_empty());
        }
        other => prop_assert!(false, "status {other}: {body}"),
    }
    Ok(())
}

/// An Open Inference Protocol answer to `queries` is the fake backend's intent for each; an error
/// is as [`check`]'s.
fn check_oip(status: u16, body: &Value, queries: Option<&[String]>) -> Result<(), TestCaseError> {
    if status != 200 {
        return check(status, body, None);
    }
    let labels = body["outputs"].as_array().unwrap().iter().find(|o| o["name"] == "label").unwrap();
    let got: Vec<&str> = labels["data"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    if let Some(qs) = queries {
        let want: Vec<String> = qs.iter().map(|q| intent_of(q)).collect();
        prop_assert_eq!(got, want);
    }
    Ok(())
}

fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("%{b:02X}")).collect()
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[ a-zA-Z']{0,60}",
        "[ \t\n]{0,5}",
        Just("play some jazz music".to_owned()),
        "[a-z ]{190,220}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_query_string_gets_a_prediction_or_a_json_error(
        q in text(),
        junk in prop::collection::vec(any::<u8>(), 0..30),
        form in 0..4u8,
    ) {
        let raw = match form {
            0 => format!("query={}", encode(q.as_bytes())),
            1 => format!("query={}&all_scores=true", encode(q.as_bytes())),
            2 => format!("query={}", encode(&junk)),
            _ => format!("{}={}", encode(q.as_bytes()), encode(&junk)),
        };
        let (status, body) = call(Request::get(format!("/predict?{raw}")).body(Body::empty()).unwrap());
        let query = [q];
        check(status, &body, (form < 2).then_some(&query[..]))?;
        if form < 2 {
            let valid = !query[0].trim().is_empty() && query[0].len() <= MAX_QUERY_BYTES;
            prop_assert_eq!(status == 200, valid, "{}", body);
        }
    }

    #[test]
    fn any_body_gets_predictions_or_a_json_error(
        qs in prop::collection::vec(text(), 0..10),
        junk in prop::collection::vec(any::<u8>(), 0..300),
        form in 0..4u8,
    ) {
        let bytes = match form {
            0 => json!({"queries": qs, "all_scores": true}).to_string().into_bytes(),
            1 => json!({"query": qs.first().cloned().unwrap_or_default()}).to_string().into_bytes(),
            2 => junk,
            _ => {
                let mut b = json!({"queries": qs}).to_string().into_bytes();
                let cut = b.len() / 2;
                b.truncate(cut);
                b
            }
        };
        let len = bytes.len();
        let req = Request::post("/predict").header("content-type", "application/json").body(Body::from(bytes)).unwrap();
        let (status, body) = call(req);
        let queries = match form {
            0 => Some(qs.clone()),
            1 => Some(vec![qs.first().cloned().unwrap_or_default()]),
            _ => None,
        };
        check(status, &body, queries.as_deref())?;
        if len > MAX_BODY_BYTES {
            prop_assert_eq!(status, 413);
        } else if let Some(queries) = queries.filter(|_| form == 0) {
            let valid = !queries.is_empty()
                && queries.len() <= 8
                && queries.iter().all(|q| !q.trim().is_empty() && q.len() <= MAX_QUERY_BYTES);
            prop_assert_eq!(status == 200, valid, "{}", body);
        }
    }

    #[test]
    fn any_binary_tensor_body_gets_predictions_or_a_json_error(
        qs in prop::collection::vec(text(), 0..10),
        junk in prop::collection::vec(any::<u8>(), 0..300),
        cut in any::<prop::sample::Index>(),
        form in 0..4u8,
    ) {
        let raw: Vec<u8> = qs.iter().flat_map(|q| [&(q.len() as u32).to_le_bytes()[..], q.as_bytes()].concat()).collect();
        let header = json!({
            "inputs": [{"name": "text", "shape": [qs.len()], "datatype": "BYTES",
                        "parameters": {"binary_data_size": raw.len()}}],
            "outputs": [{"name": "label", "parameters": {"binary_data": true}}],
        })
        .to_string()
        .into_bytes();
        let (bytes, header_len) = match form {
            // As Triton's client sends it.
            0 => ([&header[..], &raw[..]].concat(), header.len()),
            // The same bytes, a JSON length anywhere up to past the body's end.
            1 => ([&header[..], &raw[..]].concat(), cut.index(header.len() + raw.len() + 8)),
            // The tensor's bytes cut or with junk after them.
            2 => ([&header[..], &raw[..raw.len() / 2], &junk[..]].concat(), header.len()),
            _ => (junk.clone(), cut.index(junk.len() + 8)),
        };
        let len = bytes.len();
        let req = Request::post("/v2/models/snips-minilm-l6/infer")
            .header("content-type", "application/json")
            .header("inference-header-content-length", header_len.to_string())
            .body(Body::from(bytes))
            .unwrap();
        let (status, body) = call(req);
        check_oip(status, &body, (form == 0).then_some(&qs[..]))?;
        if len > MAX_BODY_BYTES {
            prop_assert_eq!(status, 413);
        } else if form == 0 {
            let valid = !qs.is_empty()
                && qs.len() <= 8
                && qs.iter().all(|q| !q.trim().is_empty() && q.len() <= MAX_QUERY_BYTES);
            prop_assert_eq!(status == 200, valid, "{}", body);
        }
    }
}
