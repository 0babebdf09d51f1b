//! Server and model metadata, REST and gRPC.

use crate::call::Output;
use crate::pb::{
    DataType, ModelConfigResponse, ModelInput, ModelMetadataResponse, ModelOutput, ServerMetadataResponse,
    model_metadata_response::TensorMetadata as PbTensor,
};
use crate::rest::{ConfigTensor, ModelConfig, ModelMetadata, ServerMetadata, TensorMetadata};
use crate::{INPUT, Model, VERSION};

/// The platform a model of ours runs on (Triton's name for ONNX models).
pub const PLATFORM: &str = "onnxruntime_onnx";

/// The protocol extensions both servers speak: Triton's model configuration (`.../config`).
pub const EXTENSIONS: &[&str] = &["model_configuration"];

/// `GET /v2` of server `name` (`worker`, `gateway`).
pub fn server(name: &str) -> ServerMetadata {
    ServerMetadata {
        name: name.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        extensions: EXTENSIONS.iter().map(|e| (*e).to_owned()).collect(),
    }
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

/// Triton's name of a protocol datatype (`BYTES` is its `TYPE_STRING`).
fn triton_type(datatype: &str) -> String {
    match datatype {
        "BYTES" => "TYPE_STRING".to_owned(),
        d => format!("TYPE_{d}"),
    }
}

/// `GET /v2/models/{model}/config` (Triton's model configuration extension): the metadata's
/// tensors as Triton writes a model that takes its batch as the tensors' own first dimension
/// (`max_batch_size` 0, `dims` the metadata's shapes: `text` `[-1]`). Triton's tools then send
/// `[N]`; perf_analyzer's N is its `--shape text:N`.
pub fn config(m: &Model) -> ModelConfig {
    let meta = model(m);
    let t = |t: TensorMetadata| ConfigTensor { name: t.name, data_type: triton_type(&t.datatype), dims: t.shape };
    ModelConfig {
        name: meta.name,
        platform: meta.platform,
        backend: BACKEND.to_owned(),
        max_batch_size: 0,
        input: meta.inputs.into_iter().map(t).collect(),
        output: meta.outputs.into_iter().map(t).collect(),
    }
}

pub fn config_pb(m: &Model) -> ModelConfigResponse {
    config_from_rest(config(m))
}

/// Triton's backend of the [`PLATFORM`].
pub const BACKEND: &str = "onnxruntime";

/// REST model configuration as gRPC's (the gateway's comes from a worker's REST route). A
/// `data_type` this server does not write is `TYPE_INVALID`.
pub fn config_from_rest(c: ModelConfig) -> ModelConfigResponse {
    let data_type = |t: &str| DataType::from_str_name(t).unwrap_or(DataType::TypeInvalid) as i32;
    let config = crate::pb::ModelConfig {
        name: c.name,
        platform: c.platform,
        backend: c.backend,
        max_batch_size: i32::try_from(c.max_batch_size).unwrap_or(i32::MAX),
        input: c
            .input
            .into_iter()
            .map(|t| ModelInput { data_type: data_type(&t.data_type), name: t.name, dims: t.dims })
            .collect(),
        output: c
            .output
            .into_iter()
            .map(|t| ModelOutput { data_type: data_type(&t.data_type), name: t.name, dims: t.dims })
            .collect(),
    };
    ModelConfigResponse { config: Some(config) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m() -> Model {
        Model { name: "snips".into(), labels: vec!["A".into(), "B".into(), "C".into()] }
    }

    #[test]
    fn the_config_is_the_metadata_in_tritons_words() {
        let c = config(&m());
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "name": "snips", "platform": "onnxruntime_onnx", "backend": "onnxruntime", "max_batch_size": 0,
                "input": [{"name": "text", "data_type": "TYPE_STRING", "dims": [-1]}],
                "output": [
                    {"name": "label", "data_type": "TYPE_STRING", "dims": [-1]},
                    {"name": "score", "data_type": "TYPE_FP32", "dims": [-1]},
                    {"name": "logits", "data_type": "TYPE_FP32", "dims": [-1, 3]},
                ],
            })
        );
        // No batch dimension of Triton's added: the dims are the metadata's shapes.
        let meta = model(&m());
        for (t, c) in meta.inputs.iter().chain(&meta.outputs).zip(c.input.iter().chain(&c.output)) {
            assert_eq!(t.shape, c.dims, "{}", t.name);
        }
    }

    #[test]
    fn the_grpc_config_carries_tritons_data_types() {
        let pb = config_from_rest(config(&m())).config.unwrap();
        assert_eq!((pb.name.as_str(), pb.max_batch_size), ("snips", 0));
        let types: Vec<_> = pb.input.iter().map(|t| t.data_type).chain(pb.output.iter().map(|t| t.data_type)).collect();
        let (s, f) = (DataType::TypeString as i32, DataType::TypeFp32 as i32);
        assert_eq!(types, [s, s, f, f]);
        assert_eq!((s, f), (13, 11), "Triton's numbers");
        assert_eq!(pb.output[2].dims, [-1, 3]);
        let mut odd = config(&m());
        odd.input[0].data_type = "TYPE_NONSENSE".into();
        assert_eq!(config_from_rest(odd).config.unwrap().input[0].data_type, DataType::TypeInvalid as i32);
    }

    #[test]
    fn both_servers_name_the_configuration_extension() {
        assert_eq!(server("x").extensions, ["model_configuration"]);
        assert_eq!(server_pb("x").extensions, ["model_configuration"]);
    }
}
