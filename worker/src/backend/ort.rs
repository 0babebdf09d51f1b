//! ONNX Runtime through `ort`, loaded at run time from `libonnxruntime.so`.

use std::borrow::Cow;
use std::path::Path;

use ort::ep;
use ort::session::{Session, SessionInputValue};
use ort::value::{Tensor, TensorElementType, ValueType};

use super::{Backend, BackendError, Device, InputBatch, ShapeBuckets};

/// The graph's input names, discovered from the model.
#[derive(Debug, Clone)]
struct InputNames {
    input_ids: String,
    attention_mask: Option<String>,
    token_type_ids: Option<String>,
}

pub struct OrtBackend {
    session: Session,
    inputs: InputNames,
    output: String,
    num_labels: usize,
    buckets: Option<ShapeBuckets>,
}

impl std::fmt::Debug for OrtBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtBackend").field("inputs", &self.inputs).field("output", &self.output).finish()
    }
}

/// Loads `libonnxruntime` once per process. A missing file or a version older than 1.31 is an
/// error, never a panic.
pub fn load_library(path: Option<&Path>) -> Result<ort::environment::Environment, BackendError> {
    let path = path.ok_or_else(|| {
        BackendError::Library(
            "no ONNX Runtime library: set ORT_DYLIB_PATH or --ort-lib (scripts/fetch-ort.sh fetches it)".into(),
        )
    })?;
    if !path.is_file() {
        return Err(BackendError::Library(format!(
            "{} does not exist (scripts/fetch-ort.sh fetches it)",
            path.display()
        )));
    }
    let builder = ort::init_from(path).map_err(|e| BackendError::Library(e.to_string()))?;
    builder.with_name("worker").build().map_err(|e| BackendError::Library(e.to_string()))
}

impl OrtBackend {
    pub fn load(
        env: &ort::environment::Environment,
        model: &Path,
        device: Device,
        threads: usize,
        num_labels: usize,
    ) -> Result<Self, BackendError> {
        let load = |e: ort::Error| BackendError::Load(e.to_string());
        let mut builder = Session::builder(env).map_err(load)?;
        match device {
            Device::Cpu => {
                if threads > 0 {
                    builder = builder.with_intra_threads(threads).map_err(|e| load(e.into()))?;
                }
            }
            Device::Cuda(n) => {
                let cuda = ep::CUDA::default().with_device_id(n as i32).build().error_on_failure();
                builder = builder.with_execution_providers([cuda]).map_err(|e| {
                    BackendError::ExecutionProvider(format!(
                        "CUDA execution provider on device {n} could not be registered: {e} \
                         (needs onnxruntime-gpu's libonnxruntime_providers_cuda.so beside the library, \
                         CUDA 13 and cuDNN 9 on LD_LIBRARY_PATH, and a visible GPU)"
                    ))
                })?;
            }
        }
        let session = builder.commit_from_file(model).map_err(load)?;
        Self::from_session(session, num_labels)
    }

    fn from_session(session: Session, num_labels: usize) -> Result<Self, BackendError> {
        let mut names = InputNames { input_ids: String::new(), attention_mask: None, token_type_ids: None };
        for input in session.inputs() {
            if !matches!(input.dtype(), ValueType::Tensor { ty: TensorElementType::Int64, .. }) {
                return Err(BackendError::Load(format!(
                    "input `{}` is {:?}; only int64 token inputs are supported",
                    input.name(),
                    input.dtype()
                )));
            }
            match input.name() {
                "input_ids" => names.input_ids = input.name().to_owned(),
                "attention_mask" => names.attention_mask = Some(input.name().to_owned()),
                "token_type_ids" => names.token_type_ids = Some(input.name().to_owned()),
                other => {
                    return Err(BackendError::Load(format!("unexpected model input `{other}`")));
                }
            }
        }
        if names.input_ids.is_empty() {
            return Err(BackendError::Load("the model has no `input_ids` input".into()));
        }
        let output = session
            .outputs()
            .iter()
            .find(|o| o.name() == "logits")
            .or_else(|| session.outputs().first())
            .ok_or_else(|| BackendError::Load("the model has no output".into()))?;
        match output.dtype() {
            ValueType::Tensor { ty: TensorElementType::Float32, shape, .. } => {
                let width = shape.last().copied().unwrap_or(-1);
                if width >= 0 && width as usize != num_labels {
                    return Err(BackendError::Load(format!(
                        "output `{}` has {width} classes but config.json names {num_labels}",
                        output.name()
                    )));
                }
            }
            other => {
                return Err(BackendError::Load(format!(
                    "output `{}` is {other:?}; expected float32 logits (export fp16 models with keep_io_types)",
                    output.name()
                )));
            }
        }
        let output = output.name().to_owned();
        Ok(Self { session, inputs: names, output, num_labels, buckets: None })
    }

    /// Pads batches to a few bucketed shapes and runs each once now, so no request pays for a
    /// shape's first run (see [`ShapeBuckets`]). Used on GPUs.
    pub fn with_shape_buckets(mut self, buckets: ShapeBuckets, max_tokens: usize) -> Result<Self, BackendError> {
        let shapes = buckets.all(max_tokens);
        let started = std::time::Instant::now();
        for &(rows, seq) in &shapes {
            let ids = vec![101i64; seq];
            let types = vec![0i64; seq];
            let batch = InputBatch::pad_to(std::iter::repeat_n((&ids[..], &types[..]), rows), |r, s| (r, s));
            self.infer(&batch)?;
        }
        tracing::info!(shapes = shapes.len(), seconds = started.elapsed().as_secs_f64(), "warmed up batch shapes");
        self.buckets = Some(buckets);
        Ok(self)
    }
}

impl Backend for OrtBackend {
    fn infer(&mut self, batch: &InputBatch) -> Result<Vec<Vec<f32>>, BackendError> {
        let err = |e: ort::Error| BackendError::Inference(e.to_string());
        let shape = [batch.rows, batch.seq_len];
        let tensor = |data: &Vec<i64>| -> Result<SessionInputValue<'static>, BackendError> {
            Ok(Tensor::from_array((shape, data.clone())).map_err(err)?.into())
        };
        let mut inputs: Vec<(Cow<'_, str>, SessionInputValue<'_>)> =
            vec![(Cow::from(self.inputs.input_ids.as_str()), tensor(&batch.input_ids)?)];
        if let Some(name) = &self.inputs.attention_mask {
            inputs.push((Cow::from(name.as_str()), tensor(&batch.attention_mask)?));
        }
        if let Some(name) = &self.inputs.token_type_ids {
            inputs.push((Cow::from(name.as_str()), tensor(&batch.token_type_ids)?));
        }
        let outputs = self.session.run(inputs).map_err(err)?;
        let (out_shape, logits) = outputs[self.output.as_str()].try_extract_tensor::<f32>().map_err(err)?;
        let expected = [batch.rows as i64, self.num_labels as i64];
        if out_shape[..] != expected[..] {
            return Err(BackendError::Inference(format!("output shape {out_shape:?}, expected {expected:?}")));
        }
        Ok(logits.chunks(self.num_labels).map(<[f32]>::to_vec).collect())
    }

    fn padded_shape(&self, rows: usize, seq: usize) -> (usize, usize) {
        self.buckets.map_or((rows, seq), |b| b.shape(rows, seq))
    }
}
