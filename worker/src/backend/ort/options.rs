//! How a session is built: the options the worker's flags make (threads, spinning, the CUDA
//! provider's settings, CUDA's wait policy) and the session builder they give.

use ort::ep::{self, ArbitrarilyConfigurableExecutionProvider};
use ort::session::Session;
use ort::session::builder::SessionBuilder;

use super::super::{BackendError, Device};

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

/// A session builder with `options`' threads, spinning and, on a GPU, the CUDA provider (and
/// CUDA's wait policy for the device's primary context).
pub(super) fn builder(
    env: &ort::environment::Environment,
    options: &SessionOptions,
) -> Result<SessionBuilder, BackendError> {
    let load = |e: ort::Error| BackendError::Load(e.to_string());
    let built = |e: ort::Error<SessionBuilder>| load(e.into());
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
    Ok(builder)
}
