//! The committed model files are present and consistent: the label map matches the model's output
//! width, the tokenizer loads without padding and truncates at 128 tokens.

use worker::backend::{Backend, InputBatch, OrtBackend, ort::load_library};
use worker::config::Device;
use worker::model::ModelDir;

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
    let enc = model.tokenizer.encode("play some jazz music", true).unwrap();
    assert_eq!(enc.get_ids().first(), Some(&101), "[CLS] first");
    assert_eq!(enc.get_ids().last(), Some(&102), "[SEP] last");
    let long = "music ".repeat(400);
    assert_eq!(model.tokenizer.encode(long.as_str(), true).unwrap().len(), 128);

    // The loader checks the output width against config.json; a run confirms the shape.
    let env = load_library(Some(&testkit::ort_lib())).expect("ONNX Runtime loads");
    let mut backend = OrtBackend::load(&env, &model.model_path, Device::Cpu, 1, model.labels.len())
        .expect("output width matches the label map");
    let ids: Vec<i64> = enc.get_ids().iter().map(|&i| i64::from(i)).collect();
    let types = vec![0; ids.len()];
    let logits = backend.infer(&InputBatch::pad([(&ids[..], &types[..])])).unwrap();
    assert_eq!(logits.len(), 1);
    assert_eq!(logits[0].len(), model.labels.len());
}
