//! The Open Inference Protocol v2 (KServe's "V2 inference protocol", which Triton speaks) for the
//! project's text classifier, over REST and gRPC. One model, one input and three outputs:
//!
//! | tensor | datatype | shape | |
//! |---|---|---|---|
//! | `text` (input) | `BYTES` | `[N]` or `[N, 1]` | the queries, UTF-8 |
//! | `label` | `BYTES` | as the input's | each query's most likely intent |
//! | `score` | `FP32` | as the input's | its probability |
//! | `logits` | `FP32` | `[N, labels]` | the model's raw outputs; only when asked for by name |
//!
//! This crate holds what the worker and the gateway share: the code generated from
//! `proto/grpc_predict_v2.proto` ([`pb`]), the JSON shapes ([`rest`]), the one translation of a
//! request of either flavour into an [`InferCall`] and of predictions into either answer
//! ([`call`], [`answer`]), the metadata ([`meta`]), and the mapping of errors to gRPC statuses
//! ([`status`]). Errors are [`OipError`]s: a stable [`wire::ErrorType`] and a message, answered on
//! REST as `{"error": "...", "error_type": "..."}` (OIP's `{"error"}` with the project's stable kind
//! beside it).
#![forbid(unsafe_code)]

pub mod answer;
pub mod call;
pub mod meta;
pub mod rest;
pub mod status;

/// The code generated from the protocol's `.proto` (messages, `GRPCInferenceService` server
/// and client).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("inference");
}

pub use call::{InferCall, Output};
use wire::ErrorType;

/// The input tensor's name.
pub const INPUT: &str = "text";
/// The only version of the model a server has.
pub const VERSION: &str = "1";

/// A request the protocol refuses, or a failure to answer it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct OipError {
    pub error_type: ErrorType,
    pub message: String,
}

impl OipError {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self { error_type: ErrorType::InvalidRequest, message: message.into() }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self { error_type: ErrorType::NotFound, message: message.into() }
    }

    /// An unknown model or version, with the words Triton uses.
    pub fn unknown_model(name: &str, version: Option<&str>) -> Self {
        match version {
            Some(v) => Self::not_found(format!("unknown version {v:?} of model {name:?} (it has {VERSION:?})")),
            None => Self::not_found(format!("unknown model {name:?}")),
        }
    }
}

/// The model a server serves: its name and its labels (in the model's output order).
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub name: String,
    pub labels: Vec<String>,
}

/// `Ok` when `name` and `version` (if any; empty is the server's choice) are those of the model
/// served as `served`.
pub fn check_model(served: &str, name: &str, version: Option<&str>) -> Result<(), OipError> {
    if name != served {
        return Err(OipError::unknown_model(name, None));
    }
    match version {
        Some(v) if !v.is_empty() && v != VERSION => Err(OipError::unknown_model(name, Some(v))),
        _ => Ok(()),
    }
}
