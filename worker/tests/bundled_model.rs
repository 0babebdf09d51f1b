//! The committed model files are present and consistent: the label map matches the model's output
//! width, the tokenizer loads without padding and truncates at 128 tokens.

use clap::Parser;
use worker::backend::{Backend, InputBatch, OrtBackend, ort::load_library};
use worker::config::Device;
use worker::model::ModelDir;

/// ONNX Runtime, loaded once for the tests of this binary.
fn env() -> &'static ort::environment::Environment {
    static ENV: std::sync::OnceLock<ort::environment::Environment> = std::sync::OnceLock::new();
    ENV.get_or_init(|| load_library(Some(&testkit::ort_lib())).expect("ONNX Runtime loads"))
}

#[test]
fn committed_model_files_are_present_and_consistent() {
    let dir = testkit::model_dir();
    for f in ["model.onnx", "tokenizer.json", "config.json", "README.md"] {
        assert!(dir.join(f).is_file(), "{f} missing from {}", dir.display());
    }
    let raw: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("tokenizer.json")).unwrap()).unwrap();
    assert!(raw["padding"].is_null(), "the committed tokenizer must not pad");
    assert_eq!(raw["truncation"]["max_length"], 128);

    let model = ModelDir::load(&dir, None).expect("model directory loads");
    assert_eq!(model.labels, testkit::sanity().labels);
    assert_eq!(model.max_tokens, 128);
    assert!(
        model.encoder.is_fast(),
        "the bundled tokenizer takes the wordpiece encoder: {:?}",
        model.encoder.fallback_reason()
    );
    let (ids, _) = model.encoder.encode("play some jazz music").unwrap();
    assert_eq!(ids.first(), Some(&101), "[CLS] first");
    assert_eq!(ids.last(), Some(&102), "[SEP] last");
    let long = "music ".repeat(400);
    assert_eq!(model.encoder.encode(long.as_str()).unwrap().0.len(), 128);

    // The loader checks the output width against config.json; a run confirms the shape.
    let mut backend = OrtBackend::load(env(), &model.model_path, Device::Cpu, 1, model.labels.len())
        .expect("output width matches the label map");
    let types = vec![0; ids.len()];
    let logits = backend.infer(&InputBatch::pad([(&ids[..], &types[..])])).unwrap();
    assert_eq!(logits.len(), 1);
    assert_eq!(logits[0].len(), model.labels.len());
}

/// The worker's answers to the reference queries (`models/sanity.json`) through HTTP, every
/// class score, are exactly what the ONNX Runtime session gives for the ids `tokenizers` makes:
/// the worker's own tokenizer changes nothing in what it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_those_of_tokenizers_ids() {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    let dir = testkit::model_dir();
    let config = worker::Config::parse_from(["worker", "--model", dir.to_str().unwrap(), "--intra-op-threads", "1"]);
    let model = ModelDir::load(&dir, None).unwrap();
    let (path, labels) = (model.model_path.clone(), model.labels.clone());
    let worker_path = path.clone();
    let w =
        worker::build(&config, model, move |_| OrtBackend::load(env(), &worker_path, Device::Cpu, 1, 7)).await.unwrap();
    let app = w.app();

    let reference = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    let mut session = OrtBackend::load(env(), &path, Device::Cpu, 1, labels.len()).unwrap();
    for q in &testkit::sanity().queries {
        let enc = reference.encode(q.text.as_str(), true).unwrap();
        let ids: Vec<i64> = enc.get_ids().iter().map(|&i| i64::from(i)).collect();
        let types: Vec<i64> = enc.get_type_ids().iter().map(|&i| i64::from(i)).collect();
        let mut logits = session.infer(&InputBatch::pad([(&ids[..], &types[..])])).unwrap().remove(0);
        worker::core::postprocess::softmax(&mut logits);

        let body = serde_json::json!({"query": q.text, "all_scores": true}).to_string();
        let req = Request::post("/predict").header("content-type", "application/json").body(Body::from(body)).unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), 200, "{}", q.text);
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
        let p: wire::Prediction = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(p.intent, q.intent, "{}", q.text);
        let scores = p.scores.expect("all scores");
        for (label, want) in labels.iter().zip(&logits) {
            assert_eq!(scores[label], *want, "{}: {label}", q.text);
        }
    }
}

/// `--io-binding` (buffers kept per batch shape, filled in place) and the CUDA graph path's
/// buffers (kept per shape, the batch copied into them, the logits copied out) give exactly the
/// logits of the plain path, for new shapes, repeated shapes with other rows, padded rows, and
/// token types that change between batches of one shape. On the CPU here, where the graph path
/// captures nothing; with CUDA only the buffers' memory differs.
#[test]
fn bound_buffers_give_the_same_logits() {
    use worker::backend::ort::SessionOptions;

    let dir = testkit::model_dir();
    let model = ModelDir::load(&dir, None).unwrap();
    let n = model.labels.len();
    let plain = SessionOptions::new(Device::Cpu, 1);
    let mut a = OrtBackend::load_with(env(), &model.model_path, &plain, n).unwrap();
    let bound = [SessionOptions { io_binding: true, ..plain }, SessionOptions { cuda_graph: true, ..plain }];
    let mut bound = bound.map(|o| OrtBackend::load_with(env(), &model.model_path, &o, n).unwrap());
    let rows: Vec<(Vec<i64>, Vec<i64>)> =
        testkit::sanity().queries.iter().map(|q| model.encoder.encode(&q.text).unwrap()).collect();
    let batch = |range: std::ops::Range<usize>, shape: (usize, usize)| {
        InputBatch::pad_to(rows[range].iter().map(|(i, t)| (&i[..], &t[..])), |r, s| (r.max(shape.0), s.max(shape.1)))
    };
    let typed = |mut b: InputBatch| {
        for (t, m) in b.token_type_ids.iter_mut().zip(&b.attention_mask) {
            *t = *m;
        }
        b
    };
    let inputs = [
        batch(0..3, (0, 0)),
        batch(3..6, (0, 0)),
        batch(0..8, (8, 16)),
        batch(2..5, (8, 16)),
        batch(5..6, (1, 0)),
        typed(batch(2..5, (8, 16))),
        batch(1..4, (8, 16)),
    ];
    for input in inputs {
        let want = a.infer(&input).unwrap();
        for b in &mut bound {
            assert_eq!(want, b.infer(&input).unwrap(), "{}x{}", input.rows, input.seq_len);
        }
    }
    // The typed batch is not answered as the untyped one (so the check above covers the types).
    let (plain_rows, typed_rows) = (batch(2..5, (8, 16)), typed(batch(2..5, (8, 16))));
    assert_ne!(a.infer(&plain_rows).unwrap(), a.infer(&typed_rows).unwrap());
}

/// The GPU's path with buckets, on the CPU: every shape's buffers made at once, the shapes of
/// full batches run by the warm-up, every other shape first run (with CUDA: captured) at its
/// first batch; a shape met either way answers as the plain path does, at its first batch and
/// after.
#[test]
fn shapes_warmed_at_start_or_at_their_first_batch_give_the_same_logits() {
    use worker::backend::ShapeBuckets;
    use worker::backend::ort::SessionOptions;

    let model = ModelDir::load(&testkit::model_dir(), None).unwrap();
    let n = model.labels.len();
    let plain = SessionOptions::new(Device::Cpu, 1);
    let mut a = OrtBackend::load_with(env(), &model.model_path, &plain, n).unwrap();
    let buckets = ShapeBuckets { max_rows: 4, max_seq: 32 };
    let graphs = SessionOptions { cuda_graph: true, ..plain };
    let mut b =
        OrtBackend::load_with(env(), &model.model_path, &graphs, n).unwrap().with_shape_buckets(buckets, 64).unwrap();
    b.warm_up().unwrap();
    let rows: Vec<(Vec<i64>, Vec<i64>)> =
        testkit::sanity().queries.iter().map(|q| model.encoder.encode(&q.text).unwrap()).collect();
    // The warm-up ran (4, 16) and (2, 32); the other shapes are first met here, some twice.
    for range in [0..4, 0..1, 4..6, 1..2, 2..4, 3..7] {
        let input =
            InputBatch::pad_to(rows[range.clone()].iter().map(|(i, t)| (&i[..], &t[..])), |r, s| b.padded_shape(r, s));
        assert_eq!(a.infer(&input).unwrap(), b.infer(&input).unwrap(), "{range:?}: {}x{}", input.rows, input.seq_len);
    }
}
