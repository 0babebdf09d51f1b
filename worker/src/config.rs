//! The worker's configuration: one struct, every field a flag and an environment variable.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Parser;

pub use crate::backend::Device;
pub use crate::backend::ort::{ArenaExtend, ConvAlgoSearch, CudaSync};

/// The `--help` headings, one per concern (the `listener` crate names its own: "Connections").
mod heading {
    pub const LISTENING: &str = "Listening";
    pub const MODEL: &str = "Model and device";
    pub const BACKEND: &str = "Backend (ONNX Runtime)";
    pub const CUDA: &str = "CUDA";
    pub const BATCHING: &str = "Batching";
    pub const ADMISSION: &str = "Admission";
    pub const TELEMETRY: &str = "Capacity and telemetry";
    pub const RUNTIME: &str = "Runtime";
    pub const LOGGING: &str = "Logging";
}

/// GPU inference worker: serves an ONNX sequence classifier over HTTP with dynamic batching.
#[derive(Debug, Clone, Parser)]
#[command(name = "worker", version, about)]
pub struct Config {
    /// Address to listen on; port 0 picks a free port (printed as `listening on http://ADDR`).
    #[arg(long, env = "WORKER_LISTEN", default_value = "127.0.0.1:8081", help_heading = heading::LISTENING)]
    pub listen: SocketAddr,

    /// Address of the Open Inference Protocol's gRPC service (`inference.GRPCInferenceService`);
    /// off unless given (the chart leaves it off: the gateway calls workers over REST); port 0
    /// picks a free port (printed as
    /// `grpc listening on http://ADDR`).
    #[arg(long, env = "WORKER_GRPC_LISTEN", help_heading = heading::LISTENING)]
    pub grpc_listen: Option<SocketAddr>,

    /// The model's name in the Open Inference Protocol (`/v2/models/{name}`) and in `/v1/stats`;
    /// by default the model directory's name (`snips-minilm-l6`).
    #[arg(long, env = "WORKER_MODEL_NAME", help_heading = heading::MODEL)]
    pub model_name: Option<String>,

    /// Model directory: an ONNX model file, `tokenizer.json` and a `config.json` with `id2label`.
    #[arg(long, env = "WORKER_MODEL", default_value = "models/snips-minilm-l6", help_heading = heading::MODEL)]
    pub model: PathBuf,

    /// ONNX file inside the model directory; by default `model.onnx`, else the only `*.onnx` file.
    #[arg(long, env = "WORKER_MODEL_FILE", help_heading = heading::MODEL)]
    pub model_file: Option<String>,

    /// Path of `libonnxruntime.so` (ONNX Runtime 1.31); `scripts/fetch-ort.sh` fetches it.
    /// `ORT_DYLIB_PATH` (the `ort` crate's variable) is read when neither the flag nor
    /// `WORKER_ORT_LIB` is set.
    #[arg(long, env = "WORKER_ORT_LIB", help_heading = heading::MODEL)]
    pub ort_lib: Option<PathBuf>,

    /// `cpu`, or `cuda:N` for the CUDA execution provider on CUDA device N (fails if unavailable).
    #[arg(long, env = "WORKER_DEVICE", default_value = "cpu", value_parser = parse_device, help_heading = heading::MODEL)]
    pub device: Device,

    /// ONNX Runtime intra-op threads per session; 0: ONNX Runtime's choice (one per physical
    /// core) on the CPU, 1 with CUDA (there the CPU runs only a few shape operators; a pool per
    /// lane of one thread per core only burns host cores). Not the async runtime's threads
    /// (`--runtime-threads`, as on the gateway). Was `--threads` (`WORKER_THREADS`, still read).
    #[arg(long = "intra-op-threads", alias = "threads", env = "WORKER_INTRA_OP_THREADS", default_value_t = 0, help_heading = heading::BACKEND)]
    pub threads: usize,

    /// Threads of the async runtime (HTTP, tokenizing, batching); 0: one per CPU this process may
    /// run on. Fewer leave cores to the backend, or to a load generator on the same machine.
    #[arg(long, env = "WORKER_RUNTIME_THREADS", default_value_t = 0, help_heading = heading::RUNTIME)]
    pub runtime_threads: usize,

    /// ONNX Runtime inter-op threads (used only by its parallel executor, which the worker does
    /// not turn on); 0 lets ONNX Runtime choose.
    #[arg(long, env = "WORKER_INTER_OP_THREADS", default_value_t = 0, help_heading = heading::BACKEND)]
    pub inter_op_threads: usize,

    /// Whether ONNX Runtime's pool threads spin before sleeping
    /// (`session.intra_op.allow_spinning`, `session.inter_op.allow_spinning`). `auto`: on the CPU
    /// yes (ONNX Runtime's default), with CUDA no (spinning burns host cores the HTTP side needs).
    #[arg(long, env = "WORKER_ORT_SPINNING", value_enum, default_value = "auto", help_heading = heading::BACKEND)]
    pub ort_spinning: Toggle,

    /// Run batches through ONNX Runtime's I/O binding: inputs and outputs in buffers allocated
    /// once per batch shape (page-locked host memory with CUDA, so copies to and from the GPU
    /// need no staging), instead of new tensors per batch.
    #[arg(long, env = "WORKER_IO_BINDING", help_heading = heading::BACKEND)]
    pub io_binding: bool,

    /// With CUDA, capture each batch shape's run as a CUDA graph (the shapes of full batches at
    /// start, every other one at its first batch) and replay it for every batch of that shape:
    /// one launch per batch instead of one per kernel, which takes most of the host's work per
    /// batch off the backend thread. Batches then run through device buffers kept per shape. `auto`: on with CUDA. Ignored on the CPU (nothing to capture).
    #[arg(long, env = "WORKER_CUDA_GRAPH", value_enum, default_value = "auto", help_heading = heading::CUDA)]
    pub cuda_graph: Toggle,

    /// CUDA provider `cudnn_conv_algo_search`: `exhaustive`, `heuristic` or `default` (cuDNN's
    /// default algorithm). Matters only to models with convolutions.
    #[arg(long, env = "WORKER_CUDA_CONV_ALGO_SEARCH", value_enum, default_value = "exhaustive", help_heading = heading::CUDA)]
    pub cuda_conv_algo_search: ConvAlgoSearch,

    /// CUDA provider `do_copy_in_default_stream`: copies between host and GPU on the compute
    /// stream (`true`, ONNX Runtime's default and recommendation) or on streams of their own.
    #[arg(long, env = "WORKER_CUDA_COPY_IN_DEFAULT_STREAM", default_value_t = true, action = clap::ArgAction::Set, help_heading = heading::CUDA)]
    pub cuda_copy_in_default_stream: bool,

    /// CUDA provider `arena_extend_strategy`: how the GPU memory arena grows.
    #[arg(long, env = "WORKER_CUDA_ARENA_EXTEND_STRATEGY", value_enum, default_value = "next-power-of-two", help_heading = heading::CUDA)]
    pub cuda_arena_extend_strategy: ArenaExtend,

    /// How the backend threads wait for the GPU to finish a batch (the scheduling flags of the
    /// device's primary context): `spin`, `yield` or `blocking` (sleep until the GPU is done: no
    /// core spent waiting, a wake-up per wait). `auto`: `blocking` when the light lane has two
    /// sessions or more (a GPU's default: one session's wake-up overlaps the other's run), else
    /// CUDA's choice (spin while there are fewer contexts than cores).
    #[arg(long, env = "WORKER_CUDA_SYNC", value_enum, default_value = "auto", help_heading = heading::CUDA)]
    pub cuda_sync: CudaSync,

    /// Backend sessions in the light lane, each on a thread of its own, running the lane's
    /// batches at the same time (the heavy lane keeps one). With CUDA, a second session prepares
    /// and launches its batch while the first's runs on the GPU, so a session's waits (and with
    /// `--cuda-sync blocking` its wake-ups) overlap the other's work. Each session holds its own
    /// copy of the model and, with graphs, its own captures. Default 1 on the CPU; 2 on a GPU,
    /// where with blocking waits it lowers the host CPU per request at the same throughput.
    #[arg(long, env = "WORKER_SESSIONS", help_heading = heading::BACKEND)]
    pub sessions: Option<usize>,

    /// CUDA provider `gpu_mem_limit`: most bytes of the GPU memory arena, per session; 0: no limit.
    #[arg(long, env = "WORKER_CUDA_MEM_LIMIT", default_value_t = 0, help_heading = heading::CUDA)]
    pub cuda_mem_limit: usize,

    /// Most queries in one batch. Default 32 on the CPU; 256 on a GPU, where batches that large
    /// alternate, one running while the next fills.
    #[arg(long, env = "WORKER_MAX_BATCH_ROWS", help_heading = heading::BATCHING)]
    pub max_batch_rows: Option<usize>,

    /// Token budget of one batch: padded sequence length times rows. Default 4096 on the CPU,
    /// 16384 on a GPU.
    #[arg(long, env = "WORKER_MAX_BATCH_TOKENS", help_heading = heading::BATCHING)]
    pub max_batch_tokens: Option<usize>,

    /// Longest a query waits for companions while the backend is idle (`0`, `1ms`, `500us`).
    /// It waits only when another query is expected within that time (from the recent gaps
    /// between arrivals): a lone client or a trickle is not delayed. While the backend is busy,
    /// queries gather anyway and leave together when it is free. Default 0 on the CPU, 1ms on a
    /// GPU.
    #[arg(long, env = "WORKER_MAX_QUEUE_DELAY", value_parser = humantime::parse_duration, help_heading = heading::BATCHING)]
    pub max_queue_delay: Option<Duration>,

    /// Least fraction of a batch's padded cells holding real tokens (0..1). Default 0.75 on the
    /// CPU, where padding costs arithmetic; 0 on a GPU, where it is nearly free.
    #[arg(long, env = "WORKER_MIN_BATCH_FILL", help_heading = heading::BATCHING)]
    pub min_batch_fill: Option<f64>,

    /// Least number of queries admitted at once (queued plus running, tokenizing included);
    /// beyond the admission's capacity requests get 429. Once the worker's capacity is known
    /// (calibrated, carried over or `--capacity`) the admission holds what it answers within
    /// `--request-timeout` at that rate, never less than this. Default 1024 on the CPU, 8192 on a
    /// GPU. Named as the gateway's limit of the same kind; was `--queue-capacity`
    /// (`WORKER_QUEUE_CAPACITY`, still read).
    #[arg(long = "max-outstanding", alias = "queue-capacity", env = "WORKER_MAX_OUTSTANDING", help_heading = heading::ADMISSION)]
    pub queue_capacity: Option<usize>,

    /// Least number of tokens admitted at once (queued plus running); a request whose tokens do
    /// not fit in the admission's token capacity gets 429. A query's tokens are its cost: a
    /// batch's time grows with them. Sized from the capacity as `--max-outstanding` is, never
    /// below this. Was `--queue-capacity-tokens` (`WORKER_QUEUE_CAPACITY_TOKENS`, still read).
    #[arg(
        long = "max-outstanding-tokens",
        alias = "queue-capacity-tokens",
        env = "WORKER_MAX_OUTSTANDING_TOKENS",
        default_value_t = 65536,
        help_heading = heading::ADMISSION
    )]
    pub queue_capacity_tokens: u64,

    /// A request of more tokens than this is heavy: it runs in a lane of its own, at a lower CPU
    /// priority, and heavy requests together may hold at most half of each queue capacity.
    #[arg(long, env = "WORKER_HEAVY_REQUEST_TOKENS", default_value_t = 256, help_heading = heading::ADMISSION)]
    pub heavy_request_tokens: u64,

    /// Most queries in one `POST /predict` body.
    #[arg(long, env = "WORKER_MAX_QUERIES", default_value_t = 64, help_heading = heading::ADMISSION)]
    pub max_queries: usize,

    /// Longest query accepted, in bytes of UTF-8.
    #[arg(long, env = "WORKER_MAX_QUERY_BYTES", default_value_t = 2048, help_heading = heading::ADMISSION)]
    pub max_query_bytes: usize,

    /// Largest request body accepted, in bytes (the gateway's `--max-body-bytes` has the same
    /// default: `wire::DEFAULT_MAX_BODY_BYTES`).
    #[arg(long, env = "WORKER_MAX_BODY_BYTES", default_value_t = wire::DEFAULT_MAX_BODY_BYTES, help_heading = heading::ADMISSION)]
    pub max_body_bytes: usize,

    /// Longest a request may take end to end before it is answered 504 (at least 1ms).
    #[arg(long, env = "WORKER_REQUEST_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration, help_heading = heading::ADMISSION)]
    pub request_timeout: Duration,

    /// After SIGTERM, how long queued and running requests may take before the worker closes its
    /// port; then as long again at most for answers still being written.
    #[arg(long, env = "WORKER_DRAIN_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration, help_heading = heading::RUNTIME)]
    pub drain_timeout: Duration,

    /// GPU telemetry sampling period (at least 10ms).
    #[arg(long, env = "WORKER_GPU_SAMPLE_INTERVAL", default_value = "250ms", value_parser = humantime::parse_duration, help_heading = heading::TELEMETRY)]
    pub gpu_sample_interval: Duration,

    /// Least time of the start-up calibration, which measures this worker's capacity (queries
    /// per second when saturated, the divisor of the gateway's scaling signal) with synthetic
    /// queries through its own pipeline before it listens; it runs until every session has run
    /// several full batches too, and at most ten times this. `0s`: no calibration (the capacity
    /// is then what busy batches show, once traffic comes). See `docs/signal.md`.
    #[arg(long, env = "WORKER_CALIBRATION_TIME", default_value = "1s", value_parser = humantime::parse_duration, help_heading = heading::TELEMETRY)]
    pub calibration_time: Duration,

    /// This worker's capacity in queries per second, instead of calibrating: for a capacity
    /// measured elsewhere (a load test at the latency target). Reported as is.
    #[arg(long, env = "WORKER_CAPACITY", help_heading = heading::TELEMETRY)]
    pub capacity: Option<f64>,

    /// Directory of the capacities carried over from one start to the next: after calibrating,
    /// the worker writes its capacity there under a key of the model file's hash, the device's
    /// name and the flags that change the capacity; a worker started with the same key reports
    /// that capacity (and sizes its admission from it) as soon as it serves, and recalibrates
    /// while serving, replacing it when done. Off unless given (tests and benchmarks start
    /// from nothing); e.g. `$XDG_CACHE_HOME/worker`, or a volume a pod keeps.
    #[arg(long, env = "WORKER_CAPACITY_CACHE", help_heading = heading::TELEMETRY)]
    pub capacity_cache: Option<PathBuf>,

    /// Window of the rates in `/v1/stats`, in whole seconds (at least 1s).
    #[arg(long, env = "WORKER_STATS_WINDOW", default_value = "10s", value_parser = humantime::parse_duration, help_heading = heading::TELEMETRY)]
    pub stats_window: Duration,

    /// Connection hygiene of the client port: header, body and idle timeouts, the connection
    /// cap and the budget of buffered body bytes (the `listener` crate, as on the gateway).
    #[command(flatten)]
    pub listener: listener::ListenerArgs<listener::WorkerEnv>,

    /// Log filter (`tracing` env-filter syntax), as the gateway's; `RUST_LOG` is read when neither
    /// the flag nor `WORKER_LOG` is set.
    #[arg(long, env = "WORKER_LOG", default_value = "info,ort=warn", help_heading = heading::LOGGING)]
    pub log: String,

    /// Log as JSON lines instead of text.
    #[arg(long, env = "WORKER_LOG_JSON", help_heading = heading::LOGGING)]
    pub log_json: bool,
}

/// Variables read below the flags' own (`cli::args_with_renamed_env`): old names of variables
/// renamed to match their flags (read until the next release, with a warning), and the
/// conventional `ORT_DYLIB_PATH` and `RUST_LOG`.
pub const RENAMED_ENV: &[cli::Renamed] = &[
    cli::Renamed::deprecated("WORKER_THREADS", "WORKER_INTRA_OP_THREADS", &["--intra-op-threads", "--threads"]),
    cli::Renamed::deprecated(
        "WORKER_QUEUE_CAPACITY",
        "WORKER_MAX_OUTSTANDING",
        &["--max-outstanding", "--queue-capacity"],
    ),
    cli::Renamed::deprecated(
        "WORKER_QUEUE_CAPACITY_TOKENS",
        "WORKER_MAX_OUTSTANDING_TOKENS",
        &["--max-outstanding-tokens", "--queue-capacity-tokens"],
    ),
    cli::Renamed::conventional("ORT_DYLIB_PATH", "WORKER_ORT_LIB", &["--ort-lib"]),
    cli::Renamed::conventional("RUST_LOG", "WORKER_LOG", &["--log"]),
];

impl Config {
    /// What the flag says, or the device's default (the doc comments above).
    fn per_device<T: Copy>(&self, set: Option<T>, cpu: T, gpu: T) -> T {
        set.unwrap_or(match self.device {
            Device::Cpu => cpu,
            Device::Cuda(_) => gpu,
        })
    }

    /// Backend sessions in the light lane (at least one).
    pub fn sessions(&self) -> usize {
        self.per_device(self.sessions, 1, 2).max(1)
    }

    pub fn max_batch_rows(&self) -> usize {
        self.per_device(self.max_batch_rows, 32, 256)
    }

    pub fn max_batch_tokens(&self) -> usize {
        self.per_device(self.max_batch_tokens, 4096, 16384)
    }

    pub fn max_queue_delay(&self) -> Duration {
        self.per_device(self.max_queue_delay, Duration::ZERO, Duration::from_millis(1))
    }

    pub fn queue_capacity(&self) -> usize {
        self.per_device(self.queue_capacity, 1024, 8192)
    }

    pub fn min_batch_fill(&self) -> f64 {
        self.per_device(self.min_batch_fill, 0.75, 0.0).clamp(0.0, 1.0)
    }
}

impl Config {
    /// The flags a calibrated capacity depends on, besides the model and the device (the key of
    /// `capacity_cache`): the backend's settings, the batching, the sessions, the runtime's
    /// threads and the admission floors (the calibration keeps at most half in flight).
    pub fn capacity_settings(&self) -> String {
        format!(
            "worker {}; {:?}; sessions {}; rows {}; tokens {}; delay {:?}; fill {}; runtime threads {}; \
             outstanding {}/{}; model file {:?}",
            env!("CARGO_PKG_VERSION"),
            self.session_options(),
            self.sessions(),
            self.max_batch_rows(),
            self.max_batch_tokens(),
            self.max_queue_delay(),
            self.min_batch_fill(),
            self.runtime_threads,
            self.queue_capacity(),
            self.queue_capacity_tokens,
            self.model_file,
        )
    }
}

/// `auto`, `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Toggle {
    Auto,
    On,
    Off,
}

impl Config {
    /// The ONNX Runtime session settings these flags make.
    pub fn session_options(&self) -> crate::backend::ort::SessionOptions {
        let cuda = matches!(self.device, Device::Cuda(_));
        crate::backend::ort::SessionOptions {
            device: self.device,
            intra_op_threads: match (self.threads, cuda) {
                (0, true) => 1,
                (n, _) => n,
            },
            inter_op_threads: self.inter_op_threads,
            spinning: match self.ort_spinning {
                Toggle::Auto => !cuda,
                Toggle::On => true,
                Toggle::Off => false,
            },
            io_binding: self.io_binding,
            cuda_graph: cuda && self.cuda_graph != Toggle::Off,
            conv_algo_search: self.cuda_conv_algo_search,
            copy_in_default_stream: self.cuda_copy_in_default_stream,
            arena_extend: self.cuda_arena_extend_strategy,
            mem_limit: self.cuda_mem_limit,
            cuda_sync: match self.cuda_sync {
                CudaSync::Auto if cuda && self.sessions() > 1 => CudaSync::Blocking,
                sync => sync,
            },
        }
    }
}

fn parse_device(s: &str) -> Result<Device, String> {
    match s {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::Cuda(0)),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(Device::Cuda)
            .ok_or_else(|| format!("expected `cpu` or `cuda:N`, got `{s}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workers_flags_keep_the_conventions() {
        use clap::CommandFactory;
        let rules = cli::check::Rules { prefix: "WORKER", no_env: &[], bare_seconds: &[], renamed: RENAMED_ENV };
        let violations = cli::check::violations(Config::command(), &rules);
        assert!(violations.is_empty(), "{}", violations.join("\n"));
    }

    #[test]
    fn devices_parse() {
        assert_eq!(parse_device("cpu"), Ok(Device::Cpu));
        assert_eq!(parse_device("cuda:3"), Ok(Device::Cuda(3)));
        assert_eq!(parse_device("cuda"), Ok(Device::Cuda(0)));
        assert!(parse_device("gpu").is_err());
        assert!(parse_device("cuda:x").is_err());
    }

    #[test]
    fn durations_are_written_with_their_unit() {
        let c = Config::parse_from([
            "worker",
            "--max-queue-delay",
            "1ms",
            "--request-timeout",
            "2m",
            "--drain-timeout",
            "1.5s",
            "--gpu-sample-interval",
            "500us",
            "--stats-window",
            "30s",
        ]);
        assert_eq!(c.max_queue_delay(), Duration::from_millis(1));
        assert_eq!(c.request_timeout, Duration::from_secs(120));
        assert_eq!(c.drain_timeout, Duration::from_millis(1500));
        assert_eq!(c.gpu_sample_interval, Duration::from_micros(500));
        assert_eq!(c.stats_window, Duration::from_secs(30));
        assert_eq!(Config::parse_from(["worker"]).max_queue_delay(), Duration::ZERO);
        // A bare number is ambiguous: refused, like the old `-ms`/`-s` flags.
        assert!(Config::try_parse_from(["worker", "--request-timeout", "30"]).is_err());
        assert!(Config::try_parse_from(["worker", "--max-queue-delay-ms", "1"]).is_err());
    }

    #[test]
    fn batching_defaults_follow_the_device_and_a_flag_wins() {
        let settings = |c: &Config| (c.max_batch_rows(), c.max_batch_tokens(), c.max_queue_delay(), c.queue_capacity());
        let cpu = Config::parse_from(["worker"]);
        assert_eq!(settings(&cpu), (32, 4096, Duration::ZERO, 1024));
        let gpu = Config::parse_from(["worker", "--device", "cuda:0"]);
        assert_eq!(settings(&gpu), (256, 16384, Duration::from_millis(1), 8192));
        let set =
            Config::parse_from(["worker", "--device", "cuda:0", "--max-batch-rows", "64", "--max-queue-delay", "0"]);
        assert_eq!(settings(&set), (64, 16384, Duration::ZERO, 8192));
    }

    #[test]
    fn a_gpu_runs_two_sessions_waiting_blocked_unless_told_otherwise() {
        let set = |args: &[&str]| {
            let c = Config::parse_from([&["worker"], args].concat());
            (c.sessions(), c.session_options().cuda_sync)
        };
        assert_eq!(set(&[]), (1, CudaSync::Auto));
        assert_eq!(set(&["--device", "cuda:0"]), (2, CudaSync::Blocking));
        assert_eq!(set(&["--device", "cuda:0", "--sessions", "1"]), (1, CudaSync::Auto));
        assert_eq!(set(&["--device", "cuda:0", "--cuda-sync", "spin"]), (2, CudaSync::Spin));
        assert_eq!(set(&["--sessions", "0"]), (1, CudaSync::Auto), "at least one");
        assert_eq!(set(&["--sessions", "3"]), (3, CudaSync::Auto), "no CUDA, nothing to set");
    }

    #[test]
    fn the_capacity_settings_change_with_the_flags_that_change_the_capacity_only() {
        let settings = |args: &[&str]| Config::parse_from([&["worker"], args].concat()).capacity_settings();
        let plain = settings(&[]);
        for changed in [
            &["--max-batch-rows", "64"][..],
            &["--sessions", "2"],
            &["--intra-op-threads", "3"],
            &["--device", "cuda:0"],
            &["--max-queue-delay", "2ms"],
            &["--runtime-threads", "4"],
            &["--max-outstanding", "100"],
        ] {
            assert_ne!(settings(changed), plain, "{changed:?}");
        }
        for same in [&["--calibration-time", "5s"][..], &["--listen", "127.0.0.1:0"], &["--request-timeout", "9s"]] {
            assert_eq!(settings(same), plain, "{same:?}");
        }
    }

    #[test]
    fn cuda_graphs_are_on_with_cuda_unless_turned_off() {
        let graphs = |args: &[&str]| Config::parse_from([&["worker"], args].concat()).session_options().cuda_graph;
        assert!(graphs(&["--device", "cuda:0"]));
        assert!(!graphs(&["--device", "cuda:0", "--cuda-graph", "off"]));
        assert!(!graphs(&[]));
        assert!(!graphs(&["--cuda-graph", "on"]));
    }

    /// Rows of the flag table in `docs/worker.md`: flag -> (env, default).
    fn documented_flags() -> std::collections::BTreeMap<String, (String, String)> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/worker.md");
        let doc = std::fs::read_to_string(&path).expect("docs/worker.md");
        let cell = |c: &str| c.trim().trim_matches('`').to_owned();
        // A renamed flag's cell reads "`--new` (was `--old`)": the first name is the flag's.
        let first = |c: &str| c.split('`').nth(1).map_or_else(|| cell(c), str::to_owned);
        doc.lines()
            .filter(|l| l.starts_with("| `--"))
            .map(|l| {
                let cols: Vec<&str> = l.split('|').collect();
                (first(cols[1]), (first(cols[2]), cell(cols[3])))
            })
            .collect()
    }

    #[test]
    fn every_flag_is_documented_with_its_env_and_default() {
        use clap::CommandFactory;
        let documented = documented_flags();
        let cmd = Config::command();
        let mut flags = Vec::new();
        for arg in cmd.get_arguments().filter(|a| a.get_long().is_some_and(|l| l != "help" && l != "version")) {
            let flag = format!("--{}", arg.get_long().unwrap());
            let (env, default) = documented.get(&flag).unwrap_or_else(|| panic!("{flag} is not in docs/worker.md"));
            let real_env = arg.get_env().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default();
            assert_eq!(env, &real_env, "{flag}: documented env");
            let real_default: Vec<String> =
                arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
            match real_default.as_slice() {
                [] => {}
                [d] if d == "false" => assert_eq!(default, "off", "{flag}: documented default"),
                [d] => assert!(
                    default == d || default.starts_with(&format!("{d} ")),
                    "{flag}: documented default {default:?}, real {d:?}"
                ),
                more => panic!("{flag}: several defaults {more:?}"),
            }
            flags.push(flag);
        }
        for flag in documented.keys() {
            assert!(flags.contains(flag), "docs/worker.md documents {flag}, which the worker does not have");
        }
    }
}
