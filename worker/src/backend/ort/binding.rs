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
use super::{InputNames, OrtBackend, split_logits};
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
    pub(super) copier: Session,
    /// `gpu_graph_id` -1: a shape first met after the warm-up runs without a graph (its buffers,
    /// made after the others' captures, could lie where their replays write; see
    /// [`OrtBackend::with_shape_buckets`]).
    pub(super) uncaptured: RunOptions<NoSelectedOutputs>,
}

/// One lane's warm-up captures at a time: CUDA forbids some calls of other threads while a
/// stream is captured (ONNX Runtime captures in CUDA's global mode).
pub(super) static CAPTURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
