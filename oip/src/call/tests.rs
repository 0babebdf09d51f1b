//! Requests of both flavours read into calls, and each refusal's words.

use super::*;
use crate::pb::InferTensorContents;
use crate::pb::model_infer_request::InferRequestedOutputTensor;

fn rest(body: serde_json::Value) -> Result<InferCall, OipError> {
    InferCall::from_json(body.to_string().as_bytes())
}

#[test]
fn rest_requests_of_both_shapes() {
    let call = rest(serde_json::json!({
        "id": "r1", "parameters": {"anything": 1},
        "inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["play jazz", "book a table"]}]
    }))
    .unwrap();
    assert_eq!(call.texts, ["play jazz", "book a table"]);
    assert_eq!((call.id.as_deref(), call.column), (Some("r1"), false));
    assert_eq!(call.outputs, Output::DEFAULT);
    let call = rest(serde_json::json!({
        "inputs": [{"name": "text", "shape": [2, 1], "datatype": "BYTES", "data": [["a"], ["b"]]}],
        "outputs": [{"name": "logits"}, {"name": "label", "parameters": {"binary_data": false}}]
    }))
    .unwrap();
    assert_eq!((call.texts.len(), call.column, call.shape()), (2, true, vec![2, 1]));
    assert_eq!(call.outputs, [Output::Logits, Output::Label]);
    // Back to REST (the gateway's gRPC path) and parsed again: the same call.
    assert_eq!(InferCall::from_rest(call.to_rest()).unwrap(), call);
}

/// Triton's binary tensor data extension: the JSON, then the raw bytes.
fn binary(header: serde_json::Value, raw: &[u8]) -> (Vec<u8>, usize) {
    let mut body = header.to_string().into_bytes();
    let len = body.len();
    body.extend_from_slice(raw);
    (body, len)
}

#[test]
fn binary_tensor_data_reads_as_its_json_would() {
    let raw = encode_raw_bytes(["play jazz", "book a table"]);
    let header = |size: usize| {
        serde_json::json!({
            "id": "b1",
            "inputs": [{"name": "text", "shape": [2, 1], "datatype": "BYTES", "parameters": {"binary_data_size": size}}],
            "outputs": [{"name": "label", "parameters": {"binary_data": true}}]
        })
    };
    let (body, len) = binary(header(raw.len()), &raw);
    let call = InferCall::from_binary(&body, len).unwrap();
    assert_eq!(call.texts, ["play jazz", "book a table"]);
    assert_eq!(
        (call.id.as_deref(), call.column, call.outputs.as_slice()),
        (Some("b1"), true, [Output::Label].as_slice())
    );

    // An input in the JSON, no bytes after it: the usual request.
    let json = serde_json::json!({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hi"]}]});
    let (body, len) = binary(json, b"");
    assert_eq!(InferCall::from_binary(&body, len).unwrap().texts, ["hi"]);

    let refused = |body: &[u8], len: usize| InferCall::from_binary(body, len).unwrap_err().message;
    let (body, len) = binary(header(raw.len()), &raw);
    assert!(refused(&body, body.len() + 1).contains("Inference-Header-Content-Length is"), "longer than the body");
    assert!(refused(&body, len - 1).starts_with("not an inference request"), "cut inside the JSON");
    let (short, len) = binary(header(raw.len() + 3), &raw);
    assert!(refused(&short, len).contains("binary_data_size is 32 but 29 bytes follow"), "{}", refused(&short, len));
    let (extra, len) = binary(header(raw.len()), &[raw.as_slice(), b"xy"].concat());
    assert!(refused(&extra, len).contains("2 bytes follow the JSON that no input"));
    let (body, len) = binary(header(raw.len() - 1), &raw[..raw.len() - 1]);
    assert_eq!(refused(&body, len), "raw BYTES contents: an element cut short");
    let mut h = header(raw.len());
    h["inputs"][0]["parameters"]["binary_data_size"] = serde_json::json!(-1);
    let (body, len) = binary(h, &raw);
    assert_eq!(refused(&body, len), "input \"text\": binary_data_size is not a size");
    let mut h = header(raw.len());
    h["inputs"][0]["shape"] = serde_json::json!([3]);
    let (body, len) = binary(h, &raw);
    assert_eq!(refused(&body, len), "input \"text\" has shape [3] but 2 elements");
}

#[test]
fn refusals_say_what_is_wrong() {
    let input = |name: &str, shape: serde_json::Value, dt: &str, data: serde_json::Value| serde_json::json!({"inputs": [{"name": name, "shape": shape, "datatype": dt, "data": data}]});
    let cases = [
        (input("text", [2].into(), "BYTES", serde_json::json!(["a"])), "but 1 elements"),
        (input("text", [1].into(), "FP32", serde_json::json!([1.0])), "BYTES, not FP32"),
        (input("txt", [1].into(), "BYTES", serde_json::json!(["a"])), "unknown input"),
        (input("text", [1, 2].into(), "BYTES", serde_json::json!(["a", "b"])), "shape [N] or [N, 1]"),
        (input("text", [1].into(), "BYTES", serde_json::json!([3])), "holds strings"),
        (input("text", [0].into(), "BYTES", serde_json::json!([])), "empty"),
        (serde_json::json!({"inputs": []}), "expected one input"),
        (serde_json::json!({"input": []}), "not an inference request"),
        (serde_json::json!({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES"}]}), "has no data"),
    ];
    for (body, expected) in cases {
        let e = rest(body.clone()).unwrap_err();
        assert_eq!(e.error_type, wire::ErrorType::InvalidRequest);
        assert!(e.message.contains(expected), "{body}: {e}");
    }
    let mut body = input("text", [1].into(), "BYTES", serde_json::json!(["a"]));
    body["outputs"] = serde_json::json!([{"name": "probabilities"}]);
    assert!(rest(body).unwrap_err().message.contains("unknown output"));
}

#[test]
fn grpc_requests_raw_or_typed() {
    let tensor = |contents| InferInputTensor {
        name: "text".into(),
        datatype: "BYTES".into(),
        shape: vec![2, 1],
        parameters: Default::default(),
        contents,
    };
    let raw = encode_raw_bytes(["play jazz", "ÉTÉ à Zürich"]);
    assert_eq!(decode_raw_bytes(&raw).unwrap(), ["play jazz", "ÉTÉ à Zürich"]);
    let req = ModelInferRequest {
        id: "x".into(),
        inputs: vec![tensor(None)],
        raw_input_contents: vec![raw],
        outputs: vec![InferRequestedOutputTensor { name: "score".into(), parameters: Default::default() }],
        ..Default::default()
    };
    let call = InferCall::from_pb(req).unwrap();
    assert_eq!((call.texts.len(), call.column, call.outputs.as_slice()), (2, true, &[Output::Score][..]));
    let typed = InferTensorContents { bytes_contents: vec![b"a".to_vec(), b"b".to_vec()], ..Default::default() };
    let req = ModelInferRequest { inputs: vec![tensor(Some(typed))], ..Default::default() };
    let call = InferCall::from_pb(req).unwrap();
    assert_eq!((call.texts, call.id), (vec!["a".to_owned(), "b".to_owned()], None));
    // Cut short, not UTF-8, no contents.
    assert!(decode_raw_bytes(&[5, 0, 0, 0, b'a']).is_err());
    assert!(decode_raw_bytes(&[1, 0]).is_err());
    assert!(decode_raw_bytes(&[1, 0, 0, 0, 0xff]).is_err());
    let req = ModelInferRequest { inputs: vec![tensor(None)], ..Default::default() };
    assert!(InferCall::from_pb(req).unwrap_err().message.contains("no contents"));
}
