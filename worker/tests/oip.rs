//! The Open Inference Protocol on the real worker binary with the bundled model, REST and gRPC
//! (Triton's own clients are run against it by `e2e/python`): the same intents as `/predict`,
//! the outputs asked for, and errors as the protocol answers them.

mod common;

use std::time::Duration;

use oip::pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use oip::pb::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use oip::pb::{ModelInferRequest, ModelMetadataRequest, ServerLiveRequest};
use serde_json::{Value, json};

const MODEL: &str = "snips-minilm-l6";

fn reference() -> Vec<(String, String)> {
    testkit::sanity().queries.iter().map(|q| (q.text.clone(), q.intent.clone())).collect()
}

#[tokio::test]
async fn rest_and_grpc_answer_the_reference_intents() {
    let w = common::start(&["--grpc-listen", "127.0.0.1:0"]).await;
    let grpc_url = w.announced("grpc", Duration::from_secs(5)).await.expect("grpc listening on");
    let c = testkit::http::client();
    let (texts, intents): (Vec<String>, Vec<String>) = reference().into_iter().unzip();
    let n = texts.len();

    // REST: health, metadata, an inference of [N, 1] with the logits named.
    assert_eq!(c.get(w.at("/v2/health/ready")).send().await.unwrap().status(), 200);
    let meta: Value = c.get(w.at(&format!("/v2/models/{MODEL}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(meta["inputs"][0], json!({"name": "text", "datatype": "BYTES", "shape": [-1]}));
    let body = json!({
        "id": "req-1",
        "inputs": [{"name": "text", "shape": [n, 1], "datatype": "BYTES", "data": texts}],
        "outputs": [{"name": "label"}, {"name": "logits"}],
    });
    let r = c.post(w.at(&format!("/v2/models/{MODEL}/versions/1/infer"))).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["id"], "req-1");
    assert_eq!(answer["outputs"][0]["shape"], json!([n, 1]));
    assert_eq!(answer["outputs"][0]["data"], json!(intents));
    let labels = testkit::sanity().labels.len();
    assert_eq!(answer["outputs"][1]["shape"], json!([n, labels]));

    // REST errors: `{"error", "error_type"}` with the status.
    let r = c.post(w.at("/v2/models/other/infer")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error_type"], "not_found");
    assert!(e["error"].as_str().unwrap().contains("unknown model"), "{e}");
    let bad = json!({"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["one"]}]});
    let r = c.post(w.at(&format!("/v2/models/{MODEL}/infer"))).json(&bad).send().await.unwrap();
    assert_eq!(r.status(), 400);

    // gRPC: the same intents, in raw contents; errors as codes.
    let mut g = GrpcInferenceServiceClient::connect(grpc_url).await.unwrap();
    assert!(g.server_live(ServerLiveRequest {}).await.unwrap().into_inner().live);
    let m = g.model_metadata(ModelMetadataRequest { name: MODEL.into(), version: String::new() }).await.unwrap();
    assert_eq!(m.into_inner().outputs.len(), 3);
    let req = |model: &str| ModelInferRequest {
        model_name: model.into(),
        id: "g1".into(),
        inputs: vec![InferInputTensor {
            name: "text".into(),
            datatype: "BYTES".into(),
            shape: vec![n as i64],
            parameters: Default::default(),
            contents: None,
        }],
        outputs: vec![InferRequestedOutputTensor { name: "label".into(), parameters: Default::default() }],
        raw_input_contents: vec![oip::call::encode_raw_bytes(texts.iter().map(String::as_str))],
        ..Default::default()
    };
    let a = g.model_infer(req(MODEL)).await.unwrap().into_inner();
    assert_eq!(a.id, "g1");
    assert_eq!(oip::call::decode_raw_bytes(&a.raw_output_contents[0]).unwrap(), intents);
    let e = g.model_infer(req("other")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e}");
    // A message past `--max-body-bytes` (256 KiB by default): RESOURCE_EXHAUSTED, as documented,
    // and the connection serves the next call.
    let mut big = req(MODEL);
    big.raw_input_contents = vec![vec![b'a'; 300 << 10]];
    let e = g.model_infer(big).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
    assert!(g.server_live(ServerLiveRequest {}).await.unwrap().into_inner().live);
}
