//! The Open Inference Protocol through the real gateway in front of a real worker, REST and
//! gRPC: the worker's answers pass through, gRPC calls go through the same admission (overload
//! is RESOURCE_EXHAUSTED with retry info), errors keep their kind. Triton's own Python clients
//! and KEDA's generated one run against the same binaries in `e2e/python`.

use std::time::Duration;

use oip::pb::grpc_inference_service_client::GrpcInferenceServiceClient;
use oip::pb::model_infer_request::InferInputTensor;
use oip::pb::{ModelInferRequest, ModelMetadataRequest, ModelReadyRequest, ServerReadyRequest};
use serde_json::{Value, json};
use testkit::Server;
use tokio::process::Command;
use tonic_types::StatusExt;

const MODEL: &str = "snips-minilm-l6";

async fn start_worker() -> Server {
    let mut cmd = Command::new(testkit::bin("worker"));
    cmd.arg("--listen").arg("127.0.0.1:0").arg("--model").arg(testkit::model_dir());
    cmd.arg("--ort-lib").arg(testkit::ort_lib()).args(["--intra-op-threads", "1"]).env("RUST_LOG", "warn");
    Server::start(cmd).await
}

/// A gateway in front of `worker` with `extra` flags, and its gRPC address.
async fn start_gateway(worker: &Server, extra: &[&str]) -> (Server, String) {
    let mut cmd = Command::new(testkit::bin("gateway"));
    cmd.args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"]);
    cmd.args(["--stats-interval", "100ms", "--probe-backoff", "100ms"]).arg("--worker").arg(&worker.url);
    cmd.args(extra).env("RUST_LOG", "warn");
    let gw = Server::start(cmd).await;
    let grpc = gw.announced("grpc", Duration::from_secs(2)).await.expect("the gateway announces its gRPC port");
    // Its worker ready first: until then the pool is at zero and holds calls for a cold start
    // (no admission: the hold bounds them), which the overload test must not meet.
    let (c, ready) = (testkit::http::client(), gw.at("/readyz"));
    testkit::wait_until(Duration::from_secs(10), "the gateway has a ready worker", || {
        let (c, ready) = (c.clone(), ready.clone());
        async move { c.get(&ready).send().await.is_ok_and(|r| r.status().is_success()) }
    })
    .await;
    (gw, grpc)
}

fn infer_request(model: &str, texts: &[String]) -> ModelInferRequest {
    ModelInferRequest {
        model_name: model.into(),
        id: "e2e".into(),
        inputs: vec![InferInputTensor {
            name: "text".into(),
            datatype: "BYTES".into(),
            shape: vec![texts.len() as i64],
            parameters: Default::default(),
            contents: None,
        }],
        raw_input_contents: vec![oip::call::encode_raw_bytes(texts.iter().map(String::as_str))],
        ..Default::default()
    }
}

#[tokio::test]
async fn rest_and_grpc_through_the_gateway() {
    let worker = start_worker().await;
    let (gw, grpc) = start_gateway(&worker, &[]).await;
    let c = testkit::http::client();
    let (texts, intents): (Vec<String>, Vec<String>) =
        testkit::sanity().queries.iter().map(|q| (q.text.clone(), q.intent.clone())).unzip();
    testkit::wait_until(Duration::from_secs(30), "the gateway is ready", || async {
        c.get(gw.at("/v2/health/ready")).send().await.is_ok_and(|r| r.status() == 200)
    })
    .await;

    // REST: the gateway's own server routes, the worker's model routes through it.
    let meta: Value = c.get(gw.at("/v2")).send().await.unwrap().json().await.unwrap();
    assert_eq!(meta["name"], "inference-gateway");
    let r = c.get(gw.at(&format!("/v2/models/{MODEL}"))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let body =
        json!({"id": "r", "inputs": [{"name": "text", "shape": [texts.len()], "datatype": "BYTES", "data": texts}]});
    for path in [format!("/v2/models/{MODEL}/infer"), format!("/pools/default/v2/models/{MODEL}/infer")] {
        let r = c.post(gw.at(&path)).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert!(r.headers().contains_key("x-request-id"));
        let a: Value = r.json().await.unwrap();
        assert_eq!((&a["id"], &a["outputs"][0]["data"]), (&json!("r"), &json!(intents)), "{path}");
    }
    let r = c.post(gw.at("/v2/models/nope/infer")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error_type"], "not_found", "{e}");
    let r = c.post(gw.at("/pools/ghost/v2/models/m/infer")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 404, "an unknown pool");

    // gRPC: health, metadata and inference through the same entry.
    let mut g = GrpcInferenceServiceClient::connect(grpc.clone()).await.unwrap();
    assert!(g.server_ready(ServerReadyRequest {}).await.unwrap().into_inner().ready);
    let ready = g.model_ready(ModelReadyRequest { name: MODEL.into(), version: "1".into() }).await.unwrap();
    assert!(ready.into_inner().ready);
    let m = g.model_metadata(ModelMetadataRequest { name: MODEL.into(), version: String::new() }).await.unwrap();
    assert_eq!(m.into_inner().inputs[0].name, "text");
    let mut req = tonic::Request::new(infer_request(MODEL, &texts));
    req.metadata_mut().insert("x-request-id", "grpc-e2e-1".parse().unwrap());
    let a = g.model_infer(req).await.unwrap();
    assert_eq!(a.metadata().get("x-request-id").unwrap(), "grpc-e2e-1", "the client's request id comes back");
    let a = a.into_inner();
    assert_eq!((a.id.as_str(), a.outputs.len()), ("e2e", 2));
    assert_eq!(oip::call::decode_raw_bytes(&a.raw_output_contents[0]).unwrap(), intents);
    let e = g.model_infer(infer_request("nope", &texts)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e}");
    assert!(e.metadata().get("x-request-id").is_some(), "an error carries the gateway's request id: {e:?}");
    // The gateway's own refusal (no such pool), not the worker's, carries it too.
    let mut req = tonic::Request::new(infer_request(MODEL, &texts));
    req.metadata_mut().insert("pool", "nope".parse().unwrap());
    req.metadata_mut().insert("x-request-id", "grpc-e2e-2".parse().unwrap());
    let e = g.model_infer(req).await.unwrap_err();
    assert_eq!((e.code(), e.message()), (tonic::Code::NotFound, "no pool named \"nope\""), "{e}");
    assert_eq!(e.metadata().get("x-request-id").unwrap(), "grpc-e2e-2");
    let e = g.model_metadata(ModelMetadataRequest { name: "nope".into(), version: String::new() }).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e}");
    // A client's deadline too short for any answer.
    let mut req = tonic::Request::new(infer_request(MODEL, &texts));
    req.set_timeout(Duration::from_micros(1));
    let e = g.model_infer(req).await.unwrap_err();
    assert!(matches!(e.code(), tonic::Code::DeadlineExceeded | tonic::Code::Cancelled), "{e}");
}

#[tokio::test]
async fn grpc_overload_is_resource_exhausted_with_retry_info() {
    let worker = start_worker().await;
    let (_gw, grpc) = start_gateway(&worker, &["--max-outstanding", "0", "--retry-after-s", "3"]).await;
    let mut g = GrpcInferenceServiceClient::connect(grpc).await.unwrap();
    let e = g.model_infer(infer_request(MODEL, &["play jazz".to_owned()])).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
    assert_eq!(e.get_details_retry_info().and_then(|r| r.retry_delay), Some(Duration::from_secs(3)));
    assert_eq!(e.metadata().get("retry-after").unwrap(), "3");
}

/// One gRPC call on a raw HTTP/2 stream: the body's bytes as given (prefix included) and extra
/// request headers; the answer's `grpc-status` (from the trailers, or a trailers-only answer's
/// headers), its `content-type` and its data.
async fn raw_call(
    h2: &h2::client::SendRequest<bytes::Bytes>,
    grpc: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (String, Option<String>, bytes::Bytes) {
    let mut req = http::Request::post(format!("{grpc}/inference.GRPCInferenceService/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut h2 = h2.clone().ready().await.unwrap();
    let (answer, mut send) = h2.send_request(req.body(()).unwrap(), false).unwrap();
    send.send_data(body.into(), true).unwrap();
    let (parts, mut body) = answer.await.unwrap().into_parts();
    let text = |v: &http::HeaderValue| v.to_str().unwrap().to_owned();
    let content_type = parts.headers.get("content-type").map(text);
    let mut data = bytes::BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.unwrap().unwrap_or_default();
    let status = trailers.get("grpc-status").or(parts.headers.get("grpc-status")).map(text).expect("a grpc-status");
    (status, content_type, data.freeze())
}

/// `msg` as a gRPC message: not compressed, its length, its bytes.
fn framed(msg: &[u8], compressed: bool) -> Vec<u8> {
    let mut out = vec![u8::from(compressed)];
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(msg);
    out
}

#[tokio::test]
async fn grpc_model_infer_holds_to_the_wire_format_and_its_limits() {
    use prost::Message;
    let worker = start_worker().await;
    let (_gw, grpc) = start_gateway(&worker, &["--max-body-bytes", "4096"]).await;
    let mut g = GrpcInferenceServiceClient::connect(grpc.clone()).await.unwrap();
    testkit::wait_until(Duration::from_secs(30), "the gateway is ready", || {
        let mut g = g.clone();
        async move { g.server_ready(ServerReadyRequest {}).await.is_ok_and(|r| r.into_inner().ready) }
    })
    .await;
    let tcp = tokio::net::TcpStream::connect(grpc.trim_start_matches("http://")).await.unwrap();
    let (h2, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let texts = vec!["play some jazz".to_owned(), "will it rain tomorrow".to_owned()];
    let msg = infer_request(MODEL, &texts).encode_to_vec();

    // A call as a client sends it: one data frame and grpc-status 0 in the trailers.
    let (status, content_type, data) = raw_call(&h2, &grpc, "ModelInfer", &[], framed(&msg, false)).await;
    assert_eq!((status.as_str(), content_type.as_deref()), ("0", Some("application/grpc")));
    assert_eq!(&data[..5], &[&[0u8][..], &(data.len() as u32 - 5).to_be_bytes()].concat()[..], "the prefix");
    let a = oip::pb::ModelInferResponse::decode(&data[5..]).unwrap();
    let want = g.model_infer(infer_request(MODEL, &texts)).await.unwrap().into_inner();
    assert_eq!(a, want, "the raw call's answer is the generated client's");

    // What the gateway does not take: each its own status, the connection serving on.
    const GZIP: &[(&str, &str)] = &[("grpc-encoding", "gzip")];
    let cases = [
        ("a compressed message", &[][..], framed(&msg, true), "12"),
        ("a compression it does not speak", GZIP, framed(&msg, false), "12"),
        ("a message past --max-body-bytes", &[], framed(&vec![b'x'; 5000], false), "8"),
        ("a prefix longer than the body", &[], framed(&msg, false)[..20].to_vec(), "13"),
        ("no message", &[], Vec::new(), "13"),
        ("a message that does not decode", &[], framed(&[0xff; 8], false), "13"),
    ];
    for (what, headers, body, want) in cases {
        let (status, ..) = raw_call(&h2, &grpc, "ModelInfer", headers, body).await;
        assert_eq!(status, want, "{what}");
    }
    let (status, ..) = raw_call(&h2, &grpc, "NoSuchMethod", &[], framed(&[], false)).await;
    assert_eq!(status, "12", "a method the service does not have");
    let (status, ..) = raw_call(&h2, &grpc, "ServerLive", &[], framed(&[], false)).await;
    assert_eq!(status, "0", "the other methods, on the same connection");
}
