//! I/O binding and CUDA graph capture: the buffers of each batch shape (host buffers written in
//! place, or device buffers a captured graph reads), the copy session that fills device buffers,
//! and running a batch through them.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use ort::ep;
use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
use ort::session::{IoBinding, NoSelectedOutputs, RunOptions, Session};
use ort::value::{Tensor, TensorElementType, ValueType};

use super::options::SessionOptions;
use super::{Guarded, InputNames, OrtBackend, split_logits};
use crate::backend::{BackendError, Device, InputBatch};

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

/// The buffers of one batch shape under I/O binding: inputs written in place each batch (host
/// buffers), or copied in from host buffers (device buffers, for CUDA graphs); the output bound
/// once.
pub(super) struct Bound {
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
    /// Its graph is captured: the shape's first run (ONNX Runtime runs it, captures it and
    /// replays it in one call) is behind it.
    captured: bool,
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
pub(super) type Binding = (Allocator, HashMap<(usize, usize), Bound>);

/// The CUDA graph path's own state beside the bound shapes.
pub(super) struct Graphs {
    /// Copies a batch's inputs from host buffers into a shape's device buffers: one `Identity`
    /// per input, on the CPU provider, its outputs bound on the device.
    pub(super) copier: Guarded,
    /// `gpu_graph_id` -1: a shape without buffers of its own runs without a graph (buffers made
    /// after a capture could lie where its replays write; see
    /// [`OrtBackend::with_shape_buckets`]).
    pub(super) uncaptured: RunOptions<NoSelectedOutputs>,
}

/// The process's CUDA work, as ONNX Runtime's sessions do it: taken shared by every load, batch
/// and drop of a session with CUDA graphs, and alone by a run that captures a graph. ONNX
/// Runtime captures in CUDA's global mode, in which CUDA refuses some calls of any other thread
/// (an allocation, a synchronous copy) while a stream is captured, and such a call would also
/// spoil the capture; captures now happen while other sessions serve (a shape is captured at its
/// first batch), so none of their work may run meanwhile.
pub(super) static GPU: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// [`GPU`] shared, for work that captures nothing.
pub(super) fn gpu_shared() -> std::sync::RwLockReadGuard<'static, ()> {
    GPU.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// [`GPU`] alone, for a run that captures a graph.
pub(super) fn gpu_alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    GPU.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// With CUDA graphs or I/O binding in `options`, the allocator of the bound buffers (and, for
/// graphs, the copy session) on `backend`.
pub(super) fn attach(
    backend: &mut OrtBackend,
    env: &ort::environment::Environment,
    options: &SessionOptions,
) -> Result<(), BackendError> {
    let load = |e: ort::Error| BackendError::Load(e.to_string());
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
        let copier = Guarded::new(copier(env, &backend.inputs, options.device).map_err(load)?);
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
    Ok(())
}

impl OrtBackend {
    /// The bound buffers of `shape`, made if new (with CUDA graphs, a graph id of its own).
    pub(super) fn bound(&mut self, shape: (usize, usize)) -> Result<&mut Bound, BackendError> {
        let Self { session, inputs, output, num_labels, binding, graphs, .. } = self;
        let (allocator, shapes) = binding.as_mut().expect("I/O binding is on");
        let graph = graphs.as_ref().map(|g| (g, shapes.len()));
        Ok(match shapes.entry(shape) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(Bound::new(session, inputs, output, allocator, shape, *num_labels, graph)?),
        })
    }

    /// Runs `batch` through the I/O binding of its shape (made at its first batch).
    pub(super) fn infer_bound(&mut self, batch: &InputBatch) -> Result<Vec<Vec<f32>>, BackendError> {
        let err = |e: ort::Error| BackendError::Inference(e.to_string());
        let shape = (batch.rows, batch.seq_len);
        let captures = self.bound(shape)?.graph.as_ref().is_some_and(|g| !g.captured);
        // Alone while this run captures the shape's graph, shared otherwise (see `GPU`).
        let (_alone, _shared) = match (captures, self.graphs.is_some()) {
            (true, _) => (Some(gpu_alone()), None),
            (false, true) => (None, Some(gpu_shared())),
            (false, false) => (None, None),
        };
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
        graph.captured = true;
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
            captured: false,
            copy,
            host_inputs: buffers(inputs, &host, (rows, seq)).map_err(err)?,
            output: out,
            host_output: Tensor::<f32>::new(&host, [rows, num_labels]).map_err(err)?,
        });
        Ok(bound)
    }
}
