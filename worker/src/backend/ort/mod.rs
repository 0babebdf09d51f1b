//! ONNX Runtime through `ort`, loaded at run time from `libonnxruntime.so`: the backend, its
//! model's inputs and output, and plain runs. How a session is built from the worker's flags is
//! `options`; I/O binding and CUDA graph capture are `binding`.

mod binding;
mod options;

use std::borrow::Cow;
use std::path::Path;

use ort::session::{Session, SessionInputValue};
use ort::value::{TensorElementType, TensorRef, ValueType};

use super::{Backend, BackendError, Device, InputBatch, ShapeBuckets};
use binding::{Binding, Graphs, gpu_shared};
pub use options::{ArenaExtend, ConvAlgoSearch, CudaSync, SessionOptions};

/// The graph's input names, discovered from the model.
#[derive(Debug, Clone)]
struct InputNames {
    input_ids: String,
    attention_mask: Option<String>,
    token_type_ids: Option<String>,
}

impl InputNames {
    /// Each input's name if the model has it, in the order of [`InputBatch::columns`].
    fn each(&self) -> [Option<&str>; 3] {
        [Some(self.input_ids.as_str()), self.attention_mask.as_deref(), self.token_type_ids.as_deref()]
    }
}

pub struct OrtBackend {
    session: Guarded,
    inputs: InputNames,
    output: String,
    num_labels: usize,
    buckets: Option<ShapeBuckets>,
    /// With I/O binding: where its buffers are allocated, and the buffers of each shape met.
    binding: Option<Binding>,
    /// With CUDA graphs: their copy session, and how shapes without a graph run.
    graphs: Option<Graphs>,
    /// The shapes [`warm_up`](Backend::warm_up) runs (set with the buckets).
    warm: Vec<(usize, usize)>,
}

/// A session dropped under the GPU lock shared (`binding::GPU`): its release frees device
/// memory, a call CUDA refuses while another session captures a graph.
pub(super) struct Guarded(Option<Session>);

impl Guarded {
    fn new(session: Session) -> Self {
        Self(Some(session))
    }
}

impl std::ops::Deref for Guarded {
    type Target = Session;
    fn deref(&self) -> &Session {
        self.0.as_ref().expect("taken only when dropped")
    }
}

impl std::ops::DerefMut for Guarded {
    fn deref_mut(&mut self) -> &mut Session {
        self.0.as_mut().expect("taken only when dropped")
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        let _gpu = gpu_shared();
        drop(self.0.take());
    }
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
            "no ONNX Runtime library: set --ort-lib, WORKER_ORT_LIB or ORT_DYLIB_PATH (scripts/fetch-ort.sh fetches it)".into(),
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
    /// A session with ONNX Runtime's defaults on `device` and `threads` intra-op threads.
    pub fn load(
        env: &ort::environment::Environment,
        model: &Path,
        device: Device,
        threads: usize,
        num_labels: usize,
    ) -> Result<Self, BackendError> {
        Self::load_with(env, model, &SessionOptions::new(device, threads), num_labels)
    }

    pub fn load_with(
        env: &ort::environment::Environment,
        model: &Path,
        options: &SessionOptions,
        num_labels: usize,
    ) -> Result<Self, BackendError> {
        let load = |e: ort::Error| BackendError::Load(e.to_string());
        // Shared from here to the end of the load: setting CUDA's wait policy, the session's
        // allocations and its buffers must not meet another session's capture.
        let gpu = options.cuda_graph.then(gpu_shared);
        let mut builder = options::builder(env, options)?;
        if options.io_binding && !options.cuda_graph && matches!(options.device, Device::Cuda(_)) {
            // Measured on an H100 (benches/RESULTS.md): ONNX Runtime 1.31.1 fails the first bound
            // run with `GPUDataTransfer::CopyTensorAsync dst_data != src_data` when the inputs
            // live in page-locked host memory. Refuse at startup rather than at the first batch.
            return Err(BackendError::ExecutionProvider(
                "--io-binding is not supported with CUDA: ONNX Runtime 1.31.1 refuses the bound copy \
                 from page-locked host memory (CopyTensorAsync dst_data != src_data); run without it"
                    .into(),
            ));
        }
        let session = builder.commit_from_file(model).map_err(load)?;
        let mut backend = Self::from_session(session, num_labels)?;
        let attached = binding::attach(&mut backend, env, options);
        // A backend dropped on an error takes the lock itself (`Guarded`): not under ours.
        drop(gpu);
        attached.map(|()| backend)
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
        Ok(Self {
            session: Guarded::new(session),
            inputs: names,
            output,
            num_labels,
            buckets: None,
            binding: None,
            graphs: None,
            warm: Vec::new(),
        })
    }

    /// Pads batches to a few bucketed shapes (see [`ShapeBuckets`]), and with CUDA graphs makes
    /// every shape's buffers now. Nothing runs yet: [`warm_up`](Backend::warm_up) runs the shapes
    /// of full batches, what calibration and load run, and every other shape runs first (with
    /// graphs: is captured) at its first batch. A shape's first run costs ONNX Runtime's CUDA
    /// provider tens of milliseconds, so doing them all at start held the worker's start back by
    /// seconds per session for shapes a worker may never meet. Used on GPUs.
    pub fn with_shape_buckets(mut self, buckets: ShapeBuckets, max_tokens: usize) -> Result<Self, BackendError> {
        if self.graphs.is_some() {
            // Every shape's buffers before the first run. A graph replays its intermediates
            // wherever ONNX Runtime's arena put them at its capture, memory that the arena
            // hands out again after the run: a buffer made later could lie there and be
            // overwritten by that graph (it was: an H100 run read garbage token ids).
            let _gpu = gpu_shared();
            for shape in buckets.all(max_tokens) {
                self.bound(shape)?;
            }
        }
        // From here on, a shape not bound yet runs without a graph (`infer`).
        self.buckets = Some(buckets);
        self.warm = buckets.full(max_tokens);
        Ok(self)
    }
}

/// One vector of `num_labels` logits per row, after checking the output's shape.
fn split_logits(
    out_shape: &ort::value::Shape,
    logits: &[f32],
    rows: usize,
    num_labels: usize,
) -> Result<Vec<Vec<f32>>, BackendError> {
    let expected = [rows as i64, num_labels as i64];
    if out_shape[..] != expected[..] {
        return Err(BackendError::Inference(format!("output shape {out_shape:?}, expected {expected:?}")));
    }
    Ok(logits.chunks(num_labels).map(<[f32]>::to_vec).collect())
}

impl Backend for OrtBackend {
    /// Runs the shapes of full batches once each (with graphs: captures them), so that
    /// calibration and full load meet no first run.
    fn warm_up(&mut self) -> Result<(), BackendError> {
        let started = std::time::Instant::now();
        let shapes = std::mem::take(&mut self.warm);
        for &(rows, seq) in &shapes {
            let ids = vec![101i64; seq];
            let types = vec![0i64; seq];
            let batch = InputBatch::pad_to(std::iter::repeat_n((&ids[..], &types[..]), rows), |r, s| (r, s));
            self.infer(&batch)?;
        }
        if !shapes.is_empty() {
            tracing::info!(
                shapes = shapes.len(),
                graphs = self.graphs.is_some(),
                seconds = started.elapsed().as_secs_f64(),
                "warmed up the shapes of full batches"
            );
        }
        Ok(())
    }

    fn infer(&mut self, batch: &InputBatch) -> Result<Vec<Vec<f32>>, BackendError> {
        // With CUDA graphs, after the warm-up (buckets set), only the shapes bound by then.
        let bound = match (&self.binding, &self.graphs, &self.buckets) {
            (None, _, _) => false,
            (Some((_, shapes)), Some(_), Some(_)) => shapes.contains_key(&(batch.rows, batch.seq_len)),
            (Some(_), _, _) => true,
        };
        if bound {
            return self.infer_bound(batch);
        }
        let err = |e: ort::Error| BackendError::Inference(e.to_string());
        let shape = [batch.rows, batch.seq_len];
        // Views of the batch's own vectors: no copy on this side.
        fn view(shape: [usize; 2], data: &[i64]) -> Result<SessionInputValue<'_>, BackendError> {
            Ok(TensorRef::from_array_view((shape, data)).map_err(|e| BackendError::Inference(e.to_string()))?.into())
        }
        let mut inputs: Vec<(Cow<'_, str>, SessionInputValue<'_>)> = Vec::with_capacity(3);
        for (name, data) in self.inputs.each().into_iter().zip(batch.columns()) {
            if let Some(name) = name {
                inputs.push((Cow::from(name), view(shape, data)?));
            }
        }
        let outputs = match &self.graphs {
            Some(graphs) => {
                let _gpu = gpu_shared();
                self.session.run_with_options(inputs, &graphs.uncaptured)
            }
            None => self.session.run(inputs),
        }
        .map_err(err)?;
        let (out_shape, logits) = outputs[self.output.as_str()].try_extract_tensor::<f32>().map_err(err)?;
        split_logits(out_shape, logits, batch.rows, self.num_labels)
    }

    fn padded_shape(&self, rows: usize, seq: usize) -> (usize, usize) {
        self.buckets.map_or((rows, seq), |b| b.shape(rows, seq))
    }
}
