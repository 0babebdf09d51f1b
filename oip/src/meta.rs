//! Server and model metadata, REST and gRPC.

use crate::call::Output;
use crate::pb::{ModelMetadataResponse, ServerMetadataResponse, model_metadata_response::TensorMetadata as PbTensor};
use crate::rest::{ModelMetadata, ServerMetadata, TensorMetadata};
use crate::{INPUT, Model, VERSION};

/// The platform a model of ours runs on (Triton's name for ONNX models).
pub const PLATFORM: &str = "onnxruntime_onnx";

/// `GET /v2` of server `name` (`worker`, `gateway`): no protocol extensions.
pub fn server(name: &str) -> ServerMetadata {
    ServerMetadata { name: name.to_owned(), version: env!("CARGO_PKG_VERSION").to_owned(), extensions: Vec::new() }
}

pub fn server_pb(name: &str) -> ServerMetadataResponse {
    let s = server(name);
    ServerMetadataResponse { name: s.name, version: s.version, extensions: s.extensions }
}

/// `GET /v2/models/{model}`: input `text` `[-1]` (`[N, 1]` is accepted too), outputs `label`
/// and `score` `[-1]`, `logits` `[-1, labels]`.
pub fn model(m: &Model) -> ModelMetadata {
    let t = |name: &str, datatype: &str, shape: Vec<i64>| TensorMetadata {
        name: name.to_owned(),
        datatype: datatype.to_owned(),
        shape,
    };
    let outputs = Output::ALL
        .iter()
        .map(|o| {
            let shape = if *o == Output::Logits { vec![-1, m.labels.len() as i64] } else { vec![-1] };
            t(o.name(), o.datatype(), shape)
        })
        .collect();
    ModelMetadata {
        name: m.name.clone(),
        versions: vec![VERSION.to_owned()],
        platform: PLATFORM.to_owned(),
        inputs: vec![t(INPUT, "BYTES", vec![-1])],
        outputs,
    }
}

pub fn model_pb(m: &Model) -> ModelMetadataResponse {
    from_rest(model(m))
}

/// REST model metadata as gRPC's (the gateway's gRPC metadata comes from a worker's REST route).
pub fn from_rest(m: ModelMetadata) -> ModelMetadataResponse {
    let t = |t: TensorMetadata| PbTensor { name: t.name, datatype: t.datatype, shape: t.shape };
    ModelMetadataResponse {
        name: m.name,
        versions: m.versions,
        platform: m.platform,
        inputs: m.inputs.into_iter().map(t).collect(),
        outputs: m.outputs.into_iter().map(t).collect(),
    }
}
