//! ONNX Runtime through `ort`, loaded at run time from `libonnxruntime.so`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::Path;

use ort::ep::{self, ArbitrarilyConfigurableExecutionProvider};
use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
use ort::session::{IoBinding, NoSelectedOutputs, RunOptions, Session, SessionInputValue};
use ort::value::{Tensor, TensorElementType, TensorRef, ValueType};

use super::{Backend, BackendError, Device, InputBatch, ShapeBuckets};

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

/// One `rows x seq` buffer per input the model has (`None` for those it lacks), from `allocator`.
fn buffers(
    names: &InputNames,
    allocator: &Allocator,
    (rows, seq): (usize, usize),
) -> ort::Result<[Option<Tensor<i64>>; 3]> {
    let mut buffers = [None, None, None];
    for (buffer, name) in buffers.iter_mut().zip(names.each()) {
        if name.is_some() {
            *buffer = Some(Tensor::<i64>::new(allocator, [rows, seq])?);
        }
    }
    Ok(buffers)
}

/// The CUDA provider's `cudnn_conv_algo_search`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ConvAlgoSearch {
    Exhaustive,
    Heuristic,
    Default,
}

/// `--cuda-sync`: how the backend thread waits for the GPU (`cuda_sched::CudaSync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CudaSync {
    Auto,
    Spin,
    Yield,
    Blocking,
}

/// The CUDA provider's `arena_extend_strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ArenaExtend {
    NextPowerOfTwo,
    SameAsRequested,
}

/// How a session is made: the worker's ONNX Runtime flags (`Config::session_options`), each
/// documented in `docs/worker.md`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionOptions {
    pub device: Device,
    /// 0: ONNX Runtime's choice.
    pub intra_op_threads: usize,
    /// 0: ONNX Runtime's choice.
    pub inter_op_threads: usize,
    /// `session.{intra,inter}_op.allow_spinning`.
    pub spinning: bool,
    /// Run through I/O binding with buffers kept per batch shape.
    pub io_binding: bool,
    /// Capture each batch shape's run as a CUDA graph (the provider's `enable_cuda_graph`) and
    /// replay it: one launch per batch instead of one per kernel. Batches then run through
    /// buffers on the device kept per shape, which the inputs are copied into. On the CPU the same
    /// buffers and copies, with nothing captured (what the tests check there).
    pub cuda_graph: bool,
    pub conv_algo_search: ConvAlgoSearch,
    pub copy_in_default_stream: bool,
    pub arena_extend: ArenaExtend,
    /// Bytes; 0: no limit.
    pub mem_limit: usize,
    /// How the backend thread waits for the GPU.
    pub cuda_sync: CudaSync,
}

impl SessionOptions {
    /// ONNX Runtime's own defaults on `device`, with `threads` intra-op threads (0: its choice).
    pub fn new(device: Device, threads: usize) -> Self {
        Self {
            device,
            intra_op_threads: threads,
            inter_op_threads: 0,
            spinning: true,
            io_binding: false,
            cuda_graph: false,
            conv_algo_search: ConvAlgoSearch::Exhaustive,
            copy_in_default_stream: true,
            arena_extend: ArenaExtend::NextPowerOfTwo,
            mem_limit: 0,
            cuda_sync: CudaSync::Auto,
        }
    }
}

/// The buffers of one batch shape under I/O binding: inputs written in place each batch (host
/// buffers), or copied in from host buffers (device buffers, for CUDA graphs); the output bound
/// once.
struct Bound {
    binding: IoBinding,
    /// By [`InputNames::each`].
    inputs: [Option<Tensor<i64>>; 3],
    graph: Option<Graph>,
}

/// What a shape's CUDA graph needs besides its device buffers: a graph reads and writes the
/// addresses it was captured with, so each batch is copied into the same buffers.
struct Graph {
    /// `gpu_graph_id`: one graph per shape.
    run_options: RunOptions<NoSelectedOutputs>,
    /// The copy session's binding of this shape: the host buffers below in, the device buffers
    /// the graph reads out. One run (one wait for the GPU) copies every input.
    copy: IoBinding,
    /// Host buffers of the inputs, by [`InputNames::each`].
    host_inputs: [Option<Tensor<i64>>; 3],
    /// The bound output (on the device) and its host copy. (Bound in page-locked host memory
    /// instead, the output made ONNX Runtime 1.31.1 fail the first run on an H100: `CopyTensorAsync
    /// dst_data != src_data`, as `--io-binding` did.)
    output: Tensor<f32>,
    host_output: Tensor<f32>,
}

/// I/O binding's allocator and the buffers of each `(rows, seq_len)` met.
type Binding = (Allocator, HashMap<(usize, usize), Bound>);

pub struct OrtBackend {
    session: Session,
    inputs: InputNames,
    output: String,
    num_labels: usize,
    buckets: Option<ShapeBuckets>,
    /// With I/O binding: where its buffers are allocated, and the buffers of each shape met.
    binding: Option<Binding>,
    /// With CUDA graphs: their copy session, and how shapes without a graph run.
    graphs: Option<Graphs>,
}

/// The CUDA graph path's own state beside the bound shapes.
struct Graphs {
    /// Copies a batch's inputs from host buffers into a shape's device buffers: one `Identity`
    /// per input, on the CPU provider, its outputs bound on the device.
    copier: Session,
    /// `gpu_graph_id` -1: a shape first met after the warm-up runs without a graph (its buffers,
    /// made after the others' captures, could lie where their replays write; see
    /// [`OrtBackend::with_shape_buckets`]).
    uncaptured: RunOptions<NoSelectedOutputs>,
}

/// One lane's warm-up captures at a time: CUDA forbids some calls of other threads while a
/// stream is captured (ONNX Runtime captures in CUDA's global mode).
static CAPTURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
        let built = |e: ort::Error<ort::session::builder::SessionBuilder>| load(e.into());
        let mut builder = Session::builder(env).map_err(load)?;
        if options.intra_op_threads > 0 {
            builder = builder.with_intra_threads(options.intra_op_threads).map_err(built)?;
        }
        if options.inter_op_threads > 0 {
            builder = builder.with_inter_threads(options.inter_op_threads).map_err(built)?;
        }
        builder = builder.with_intra_op_spinning(options.spinning).map_err(built)?;
        builder = builder.with_inter_op_spinning(options.spinning).map_err(built)?;
        if let Device::Cuda(n) = options.device {
            let sync = match options.cuda_sync {
                CudaSync::Auto => None,
                CudaSync::Spin => Some(cuda_sched::CudaSync::Spin),
                CudaSync::Yield => Some(cuda_sched::CudaSync::Yield),
                CudaSync::Blocking => Some(cuda_sched::CudaSync::Blocking),
            };
            if let Some(sync) = sync {
                match cuda_sched::set_sync(n, sync) {
                    Ok(()) => tracing::debug!(?sync, device = n, "CUDA wait policy set"),
                    Err(e) => tracing::warn!(
                        error = %e,
                        ?sync,
                        "could not set CUDA's wait policy; CUDA's default (auto) applies"
                    ),
                }
            }
            let cuda = ep::CUDA::default()
                .with_device_id(n as i32)
                .with_conv_algorithm_search(match options.conv_algo_search {
                    ConvAlgoSearch::Exhaustive => ep::cuda::ConvAlgorithmSearch::Exhaustive,
                    ConvAlgoSearch::Heuristic => ep::cuda::ConvAlgorithmSearch::Heuristic,
                    ConvAlgoSearch::Default => ep::cuda::ConvAlgorithmSearch::Default,
                })
                .with_arena_extend_strategy(match options.arena_extend {
                    ArenaExtend::NextPowerOfTwo => ep::ArenaExtendStrategy::NextPowerOfTwo,
                    ArenaExtend::SameAsRequested => ep::ArenaExtendStrategy::SameAsRequested,
                })
                .with_arbitrary_config("do_copy_in_default_stream", u8::from(options.copy_in_default_stream))
                .with_cuda_graph(options.cuda_graph);
            let cuda = if options.mem_limit > 0 { cuda.with_memory_limit(options.mem_limit) } else { cuda };
            builder = builder.with_execution_providers([cuda.build().error_on_failure()]).map_err(|e| {
                BackendError::ExecutionProvider(format!(
                    "CUDA execution provider on device {n} could not be registered: {e} \
                     (needs onnxruntime-gpu's libonnxruntime_providers_cuda.so beside the library, \
                     CUDA 13 and cuDNN 9 on LD_LIBRARY_PATH, and a visible GPU)"
                ))
            })?;
        }
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
        if options.cuda_graph {
            // The graphs' buffers live where the session computes: on the GPU with CUDA.
            let device = match options.device {
                Device::Cuda(n) => (AllocationDevice::CUDA, n as i32),
                Device::Cpu => (AllocationDevice::CPU, 0),
            };
            let info = MemoryInfo::new(device.0, device.1, AllocatorType::Device, MemoryType::Default).map_err(load)?;
            backend.binding = Some((Allocator::new(&backend.session, info).map_err(load)?, HashMap::new()));
            let mut uncaptured = RunOptions::new().map_err(load)?;
            uncaptured.set("gpu_graph_id", "-1").map_err(load)?;
            let copier = copier(env, &backend.inputs, options.device).map_err(load)?;
            backend.graphs = Some(Graphs { copier, uncaptured });
        } else if options.io_binding {
            // Page-locked host memory with CUDA: the copies to and from the GPU go straight from
            // and to it. On the CPU, the session's own allocator.
            let allocator = match options.device {
                Device::Cuda(n) => {
                    let info = MemoryInfo::new(
                        AllocationDevice::CUDA_PINNED,
                        n as i32,
                        AllocatorType::Device,
                        MemoryType::CPUInput,
                    )
                    .map_err(load)?;
                    Allocator::new(&backend.session, info).map_err(load)?
                }
                Device::Cpu => {
                    let info = MemoryInfo::new(AllocationDevice::CPU, 0, AllocatorType::Device, MemoryType::Default)
                        .map_err(load)?;
                    Allocator::new(&backend.session, info).map_err(load)?
                }
            };
            backend.binding = Some((allocator, HashMap::new()));
        }
        Ok(backend)
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
        Ok(Self { session, inputs: names, output, num_labels, buckets: None, binding: None, graphs: None })
    }

    /// Pads batches to a few bucketed shapes and runs each once now, so no request pays for a
    /// shape's first run (see [`ShapeBuckets`]). Used on GPUs.
    pub fn with_shape_buckets(mut self, buckets: ShapeBuckets, max_tokens: usize) -> Result<Self, BackendError> {
        let shapes = buckets.all(max_tokens);
        let started = std::time::Instant::now();
        let _capturing = self.graphs.is_some().then(|| CAPTURING.lock().unwrap_or_else(|e| e.into_inner()));
        if self.graphs.is_some() {
            // Every shape's buffers before the first run. A graph replays its intermediates
            // wherever ONNX Runtime's arena put them at its capture, memory that the arena
            // hands out again after the run: a buffer made later could lie there and be
            // overwritten by that graph (it was: an H100 run read garbage token ids).
            for &shape in &shapes {
                self.bound(shape)?;
            }
        }
        for &(rows, seq) in &shapes {
            let ids = vec![101i64; seq];
            let types = vec![0i64; seq];
            let batch = InputBatch::pad_to(std::iter::repeat_n((&ids[..], &types[..]), rows), |r, s| (r, s));
            self.infer(&batch)?;
        }
        tracing::info!(
            shapes = shapes.len(),
            graphs = self.graphs.is_some(),
            seconds = started.elapsed().as_secs_f64(),
            "warmed up batch shapes"
        );
        // From here on, a shape not bound yet runs without a graph (`infer`).
        self.buckets = Some(buckets);
        Ok(self)
    }
}

impl OrtBackend {
    /// The bound buffers of `shape`, made if new (with CUDA graphs, a graph id of its own).
    fn bound(&mut self, shape: (usize, usize)) -> Result<&mut Bound, BackendError> {
        let Self { session, inputs, output, num_labels, binding, graphs, .. } = self;
        let (allocator, shapes) = binding.as_mut().expect("I/O binding is on");
        let graph = graphs.as_ref().map(|g| (g, shapes.len()));
        Ok(match shapes.entry(shape) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(Bound::new(session, inputs, output, allocator, shape, *num_labels, graph)?),
        })
    }

    /// Runs `batch` through the I/O binding of its shape (made at its first batch).
    fn infer_bound(&mut self, batch: &InputBatch) -> Result<Vec<Vec<f32>>, BackendError> {
        let err = |e: ort::Error| BackendError::Inference(e.to_string());
        let shape = (batch.rows, batch.seq_len);
        self.bound(shape)?;
        let Self { session, inputs, output, num_labels, binding, graphs, .. } = self;
        let bound = binding.as_mut().and_then(|(_, shapes)| shapes.get_mut(&shape)).expect("bound above");
        let write = |t: &mut Tensor<i64>, data: &[i64]| t.extract_tensor_mut().1.copy_from_slice(data);
        let Some(graph) = &mut bound.graph else {
            // Host buffers: written in place and bound again (binding takes what they hold then).
            for ((name, t), data) in inputs.each().into_iter().zip(&mut bound.inputs).zip(batch.columns()) {
                if let (Some(name), Some(t)) = (name, t) {
                    write(t, data);
                    bound.binding.bind_input(name, t).map_err(err)?;
                }
            }
            let outputs = session.run_binding(&bound.binding).map_err(err)?;
            let (out_shape, logits) = outputs[output.as_str()].try_extract_tensor::<f32>().map_err(err)?;
            return split_logits(out_shape, logits, batch.rows, *num_labels);
        };
        // Device buffers, bound once: the batch is written to host buffers, copied into them by
        // one run of the copy session, the graph replayed, and the logits copied back.
        for ((name, host), data) in inputs.each().into_iter().zip(&mut graph.host_inputs).zip(batch.columns()) {
            if let (Some(name), Some(host)) = (name, host) {
                write(host, data);
                graph.copy.bind_input(name, host).map_err(err)?;
            }
        }
        let copier = &mut graphs.as_mut().expect("graphs on").copier;
        drop(copier.run_binding(&graph.copy).map_err(err)?);
        drop(session.run_binding_with_options(&bound.binding, &graph.run_options).map_err(err)?);
        graph.output.copy_into(&mut graph.host_output).map_err(err)?;
        let (out_shape, logits) = graph.host_output.extract_tensor();
        split_logits(out_shape, logits, batch.rows, *num_labels)
    }
}

/// The copy session of the CUDA graph path: for each model input, an `Identity` from a host
/// input of that name to an output `NAME.copy`, on the CPU provider; bound to a device buffer,
/// each output is copied there by ONNX Runtime.
fn copier(env: &ort::environment::Environment, inputs: &InputNames, device: Device) -> ort::Result<Session> {
    use ort::editor::{Graph, Model, Node, ONNX_DOMAIN, Opset};
    use ort::value::{Outlet, Shape, SymbolicDimensions};
    let names: Vec<&str> = inputs.each().into_iter().flatten().collect();
    let tensor = || ValueType::Tensor {
        ty: TensorElementType::Int64,
        shape: Shape::new([-1, -1]),
        dimension_symbols: SymbolicDimensions::new(["batch".to_owned(), "sequence".to_owned()]),
    };
    let mut graph = Graph::new()?;
    graph.set_inputs(names.iter().map(|n| Outlet::new(*n, tensor())))?;
    graph.set_outputs(names.iter().map(|n| Outlet::new(format!("{n}.copy"), tensor())))?;
    for n in &names {
        graph.add_node(Node::new("Identity", ONNX_DOMAIN, format!("copy {n}"), [*n], [format!("{n}.copy")], [])?)?;
    }
    let mut model = Model::new([Opset::new(ONNX_DOMAIN, 21)?])?;
    model.set_graph(graph)?;
    let built = |e: ort::Error<ort::session::builder::SessionBuilder>| -> ort::Error { e.into() };
    let mut builder = Session::builder(env)?.with_intra_threads(1).map_err(built)?;
    if let Device::Cuda(n) = device {
        let cpu = ep::CPU::default().build().error_on_failure();
        let cuda = ep::CUDA::default().with_device_id(n as i32).build().error_on_failure();
        builder = builder.with_execution_providers([cpu, cuda]).map_err(built)?;
    }
    model.into_session(&builder)
}

impl Bound {
    /// The buffers of `shape`, allocated by `allocator`; with `graph`, those of a CUDA graph with
    /// the given id (inputs bound now, to the model and to the copy session, and host buffers
    /// beside them).
    fn new(
        session: &Session,
        inputs: &InputNames,
        output: &str,
        allocator: &Allocator,
        (rows, seq): (usize, usize),
        num_labels: usize,
        graph: Option<(&Graphs, usize)>,
    ) -> Result<Self, BackendError> {
        let err = |e: ort::Error| BackendError::Inference(e.to_string());
        let mut bound = Bound {
            binding: session.create_binding().map_err(err)?,
            inputs: buffers(inputs, allocator, (rows, seq)).map_err(err)?,
            graph: None,
        };
        let Some((graphs, id)) = graph else {
            let out = Tensor::<f32>::new(allocator, [rows, num_labels]).map_err(err)?;
            bound.binding.bind_output(output, out).map_err(err)?;
            return Ok(bound);
        };
        let mut copy = graphs.copier.create_binding().map_err(err)?;
        for (name, t) in inputs.each().into_iter().zip(&mut bound.inputs) {
            if let (Some(name), Some(t)) = (name, t) {
                bound.binding.bind_input(name, t).map_err(err)?;
                copy.bind_output(format!("{name}.copy"), t).map_err(err)?;
            }
        }
        let mut out = Tensor::<f32>::new(allocator, [rows, num_labels]).map_err(err)?;
        bound.binding.bind_output(output, &mut out).map_err(err)?;
        let mut run_options = RunOptions::new().map_err(err)?;
        run_options.set("gpu_graph_id", id.to_string()).map_err(err)?;
        let host = Allocator::default();
        bound.graph = Some(Graph {
            run_options,
            copy,
            host_inputs: buffers(inputs, &host, (rows, seq)).map_err(err)?,
            output: out,
            host_output: Tensor::<f32>::new(&host, [rows, num_labels]).map_err(err)?,
        });
        Ok(bound)
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
            Some(graphs) => self.session.run_with_options(inputs, &graphs.uncaptured),
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
