//! The protocol's JSON shapes (KServe `required_api.md`, "HTTP/REST").

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST /v2/models/{model}[/versions/{v}]/infer`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InferRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Accepted and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Map<String, Value>>,
    pub inputs: Vec<InputTensor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Vec<RequestedOutput>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputTensor {
    pub name: String,
    pub shape: Vec<i64>,
    pub datatype: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Map<String, Value>>,
    /// Row-major, flat or nested; absent (null) when the tensor's bytes follow the JSON
    /// (Triton's binary tensor data extension: `parameters.binary_data_size`).
    #[serde(default)]
    pub data: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestedOutput {
    pub name: String,
    /// Accepted and ignored (`binary_data` included: outputs are always JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Map<String, Value>>,
}

/// The answer to an inference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InferResponse {
    pub model_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Map<String, Value>>,
    pub outputs: Vec<OutputTensor>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputTensor {
    pub name: String,
    pub shape: Vec<i64>,
    pub datatype: String,
    /// Flat, row-major.
    pub data: TensorData,
}

/// An output tensor's elements: written without an intermediate JSON value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TensorData {
    /// `BYTES`.
    Strings(Vec<String>),
    /// `FP32`.
    Numbers(Vec<f32>),
}

/// `GET /v2`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerMetadata {
    pub name: String,
    pub version: String,
    pub extensions: Vec<String>,
}

/// `GET /v2/models/{model}[/versions/{v}]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
}

/// `GET /v2/models/{model}[/versions/{v}]/config`: Triton's model configuration extension, the
/// fields this server fills, named as Triton writes them (`max_batch_size`, `data_type`
/// `TYPE_STRING`, `dims`), which its tools read (perf_analyzer, `get_model_config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    pub name: String,
    pub platform: String,
    pub backend: String,
    /// 0: the batch is the tensors' own first dimension (Triton adds none before `dims`).
    pub max_batch_size: u32,
    pub input: Vec<ConfigTensor>,
    pub output: Vec<ConfigTensor>,
}

/// An input or output of [`ModelConfig`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigTensor {
    pub name: String,
    pub data_type: String,
    pub dims: Vec<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorMetadata {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}
