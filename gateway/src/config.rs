//! The gateway's whole configuration: one `clap` struct, every field settable by flag or env.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Parse a duration flag: `250ms`, `1.5s`, `2m`, `1h 30m`, `0` (`humantime`, the one duration syntax
/// of the project's binaries).
fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| format!("not a duration: {s:?} ({e}; write 250ms, 10s or 2m)"))
}

/// `Retry-After` as a duration, in whole seconds (rounded up: the header has no fraction); a bare
/// number is seconds, as `--retry-after-s` took it.
fn parse_retry_after(s: &str) -> Result<u64, String> {
    if let Ok(n) = s.trim().parse::<u64>() {
        return Ok(n);
    }
    let d = parse_duration(s)?;
    Ok(d.as_secs() + u64::from(d.subsec_nanos() > 0))
}

/// A positive, finite factor.
fn parse_factor(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(f),
        _ => Err(format!("not a positive number: {s:?}")),
    }
}

/// A utilization in (0, 1].
fn parse_utilization(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(u) if u > 0.0 && u <= 1.0 => Ok(u),
        _ => Err(format!("not a utilization in (0, 1]: {s:?} (0.7 is 70 %)")),
    }
}

/// The `--help` headings, one per concern (the `listener` and `metrics-api` crates name their
/// own: "Connections", "Metrics API").
mod heading {
    pub const LISTENING: &str = "Listening";
    pub const WORKERS: &str = "Workers and discovery";
    pub const ROUTING: &str = "Routing and retries";
    pub const ADMISSION: &str = "Admission";
    pub const UPSTREAM: &str = "Worker connections";
    pub const HEALTH: &str = "Worker health and telemetry";
    pub const SIGNAL: &str = "Signal";
    pub const RUNTIME: &str = "Runtime";
    pub const LOGGING: &str = "Logging";
}

/// How the gateway's tasks are run (`--runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Runtime {
    /// One multi-threaded (work-stealing) runtime of `--runtime-threads` threads for everything.
    Shared,
    /// `--runtime-threads` threads, each a single-threaded runtime serving the client and gRPC
    /// ports on a socket of its own (`SO_REUSEPORT`), and one more thread for the control plane.
    PerCore,
}

/// The gateway: p2c balancing over GPU workers, discovery, and the pool scaling signal.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "gateway", version, about)]
pub struct Config {
    /// Address to serve clients on: `/predict`, `/pools/{pool}/predict`, `/healthz`, `/readyz`.
    #[arg(long, env = "GATEWAY_LISTEN", default_value = "127.0.0.1:8080", help_heading = heading::LISTENING)]
    pub listen: SocketAddr,

    /// Address to serve operators on: `/metrics`, `/v1/pools`, `/v1/signal`,
    /// `/pools/{pool}/signal`, `/healthz`, `/readyz`. Loopback by default: it shows worker
    /// addresses and the signal, which are not the clients' business.
    #[arg(long, env = "GATEWAY_ADMIN_LISTEN", default_value = "127.0.0.1:9090", help_heading = heading::LISTENING)]
    pub admin_listen: SocketAddr,

    /// Address of the gRPC services: the Open Inference Protocol's `inference.GRPCInferenceService`
    /// and KEDA's `externalscaler.ExternalScaler`. Off unless given (the chart gives
    /// `0.0.0.0:9000`); port 0 picks a free port (printed as `grpc listening on http://ADDR`).
    #[arg(long, env = "GATEWAY_GRPC_LISTEN", help_heading = heading::LISTENING)]
    pub grpc_listen: Option<SocketAddr>,

    /// PEM certificate (chain) of the gRPC listener; with `--grpc-tls-key-file` the listener
    /// speaks TLS only (KEDA's `caCert` verifies it).
    #[arg(long, env = "GATEWAY_GRPC_TLS_CERT_FILE", requires = "grpc_tls_key_file", help_heading = heading::LISTENING)]
    pub grpc_tls_cert_file: Option<PathBuf>,

    /// PEM private key of `--grpc-tls-cert-file`.
    #[arg(long, env = "GATEWAY_GRPC_TLS_KEY_FILE", requires = "grpc_tls_cert_file", help_heading = heading::LISTENING)]
    pub grpc_tls_key_file: Option<PathBuf>,

    /// PEM CA bundle: with it, the gRPC listener accepts only clients presenting a certificate
    /// it signed (mutual TLS: KEDA's `tlsClientCert`).
    #[arg(long, env = "GATEWAY_GRPC_TLS_CLIENT_CA_FILE", requires = "grpc_tls_cert_file", help_heading = heading::LISTENING)]
    pub grpc_tls_client_ca_file: Option<PathBuf>,

    /// Run each gRPC call as a task of its own, spread over the runtime's threads, instead of in
    /// its connection's task (the default). The default spends less CPU a call and serves many
    /// connections best; this serves one or two very busy connections faster, where a
    /// connection's calls would otherwise share one thread.
    #[arg(long, env = "GATEWAY_GRPC_CALL_TASKS", help_heading = heading::LISTENING)]
    pub grpc_call_tasks: bool,

    /// Name of the pool `/predict` goes to.
    #[arg(long, env = "GATEWAY_DEFAULT_POOL", default_value = "default", help_heading = heading::WORKERS)]
    pub default_pool: String,

    /// A worker base URL of the default pool (repeatable; comma-separated in the variable), e.g.
    /// `http://10.0.0.5:8000`. (`GATEWAY_WORKERS`, its variable before it was named as the flag, is
    /// still read.)
    #[arg(long = "worker", env = "GATEWAY_WORKER", value_delimiter = ',', help_heading = heading::WORKERS)]
    pub workers: Vec<String>,

    /// A worker of a named pool, `POOL=URL` (repeatable). (`GATEWAY_POOL_WORKERS` is still read.)
    #[arg(long = "pool-worker", env = "GATEWAY_POOL_WORKER", value_delimiter = ',', help_heading = heading::WORKERS)]
    pub pool_workers: Vec<String>,

    /// A file listing workers, one per line: `URL` (default pool) or `POOL URL`; `#` starts a
    /// comment. Re-read when it changes.
    #[arg(long, env = "GATEWAY_WORKER_FILE", help_heading = heading::WORKERS)]
    pub worker_file: Option<PathBuf>,

    /// Kubernetes namespace of the pools given by `--worker`, `--pool-worker` and the worker file
    /// (the external metrics API shows a pool only to requests for its namespace). Pools fed by
    /// `--k8s-service` belong to the Service's namespace.
    #[arg(long, env = "GATEWAY_POOL_NAMESPACE", default_value = "default", help_heading = heading::WORKERS)]
    pub pool_namespace: String,

    /// How often the worker file is checked for changes.
    #[arg(long, env = "GATEWAY_WORKER_FILE_INTERVAL", default_value = "1s", value_parser = parse_duration, help_heading = heading::WORKERS)]
    pub worker_file_interval: Duration,

    /// A Kubernetes Service whose EndpointSlices feed a pool: `[POOL=]NAMESPACE/SERVICE[:PORT]`
    /// where PORT is a port name or number (default: the slice's first port). Repeatable.
    /// (`GATEWAY_K8S_SERVICES` is still read.)
    #[arg(long = "k8s-service", env = "GATEWAY_K8S_SERVICE", value_delimiter = ',', help_heading = heading::WORKERS)]
    pub k8s_services: Vec<String>,

    /// Whole-request deadline, including the one retry; beyond it the client gets 504 `timeout`.
    #[arg(long, env = "GATEWAY_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration, help_heading = heading::ROUTING)]
    pub request_timeout: Duration,

    /// While a retry is left, an attempt on one worker waits at most this many times the
    /// worker's latency estimate (a peak-EWMA: it jumps to slow answers) before the request is
    /// sent to another worker. At least `--attempt-timeout-min`; within the request's deadline.
    #[arg(long, env = "GATEWAY_ATTEMPT_TIMEOUT_FACTOR", default_value_t = 4.0, value_parser = parse_factor, help_heading = heading::ROUTING)]
    pub attempt_timeout_factor: f64,

    /// The shortest per-attempt timeout (scaled up for heavy requests by their estimated tokens
    /// over `--heavy-request-tokens`).
    #[arg(long, env = "GATEWAY_ATTEMPT_TIMEOUT_MIN", default_value = "1s", value_parser = parse_duration, help_heading = heading::ROUTING)]
    pub attempt_timeout_min: Duration,

    /// Floor of the admission bound in requests: the gateway holds at once (counted once their
    /// body has arrived) what its ready workers answer within `--request-timeout` (their summed
    /// capacity times the deadline), never fewer than this; beyond it 429 `overloaded` with
    /// `Retry-After`. Heavy requests together may hold at most half.
    #[arg(long, env = "GATEWAY_MAX_OUTSTANDING", default_value_t = 4096, help_heading = heading::ADMISSION)]
    pub max_outstanding: usize,

    /// Floor of the admission bound in estimated tokens (the bound follows the ready workers'
    /// capacity as the request bound does, a query counted at `--max-query-tokens`); beyond it
    /// 429 `overloaded`. Heavy requests together may hold at most half, so light ones keep the rest.
    #[arg(long, env = "GATEWAY_MAX_OUTSTANDING_TOKENS", default_value_t = 1 << 20, help_heading = heading::ADMISSION)]
    pub max_outstanding_tokens: u64,

    /// A request of more estimated tokens than this is heavy (the worker's own threshold,
    /// `--heavy-request-tokens`, has the same default).
    #[arg(long, env = "GATEWAY_HEAVY_REQUEST_TOKENS", default_value_t = 256, help_heading = heading::ADMISSION)]
    pub heavy_request_tokens: u64,

    /// Most tokens one query can cost (the model's sequence length: longer queries are cut).
    #[arg(long, env = "GATEWAY_MAX_QUERY_TOKENS", default_value_t = 128, help_heading = heading::ADMISSION)]
    pub max_query_tokens: u64,

    /// Largest request body accepted (bytes); beyond it 413 `too_large`. The default is the
    /// worker's (`--max-body-bytes` there): a body between the two would be buffered, forwarded
    /// and refused by the worker. Raise both together.
    #[arg(long, env = "GATEWAY_MAX_BODY_BYTES", default_value_t = wire::DEFAULT_MAX_BODY_BYTES, help_heading = heading::ADMISSION)]
    pub max_body_bytes: usize,

    /// Largest worker answer body accepted (bytes): the largest a worker can legitimately send,
    /// a batch of 64 queries (the worker's `--max-queries`) with `all_scores` over about 350
    /// labels of 30 characters. A larger answer is refused before it is read, the worker counted
    /// as failing, and the request retried on another worker (502 `upstream` if none is left).
    #[arg(long, env = "GATEWAY_MAX_ANSWER_BYTES", default_value_t = 1 << 20, help_heading = heading::UPSTREAM)]
    pub max_answer_bytes: usize,

    /// Most bytes of worker answers held in memory at once, over all requests in flight (from
    /// the first byte read until the client's copy is written). An answer that does not fit is
    /// refused: 502 `upstream`, the worker counted as failing. Answers over 64 KiB may use only
    /// three quarters of it, so large answers cannot starve small ones.
    #[arg(long, env = "GATEWAY_MAX_BUFFERED_ANSWER_BYTES", default_value_t = 64 << 20, help_heading = heading::UPSTREAM)]
    pub max_buffered_answer_bytes: usize,

    /// How long a request waits for a ready worker before 503 `unavailable`.
    #[arg(long, env = "GATEWAY_NO_WORKER_WAIT", default_value = "1s", value_parser = parse_duration, help_heading = heading::ROUTING)]
    pub no_worker_wait: Duration,

    /// How long a request to a pool at zero (no worker, or only workers still starting: none
    /// ready, ejected or stalled) is held for a worker to become ready, counted in the pool's
    /// backlog (the signal and KEDA's `IsActive` see it at once), before 503 `unavailable`.
    /// Sized to cover a worker's cold start (exec to ready, `benches/RESULTS.md`) plus a scaler's
    /// sync period; the request's own `--request-timeout` starts once a worker is found. 0: no
    /// hold (`--no-worker-wait` applies, as for a pool whose workers are all out of rotation).
    #[arg(long, env = "GATEWAY_COLD_START_HOLD", default_value = "30s", value_parser = parse_duration, help_heading = heading::ROUTING)]
    pub cold_start_hold: Duration,

    /// Most requests held at once per pool at zero (`--cold-start-hold`); beyond it 503
    /// `unavailable` with `Retry-After` at once.
    #[arg(long, env = "GATEWAY_COLD_START_HOLD_REQUESTS", default_value_t = 10_000, help_heading = heading::ROUTING)]
    pub cold_start_hold_requests: u64,

    /// Most body bytes held at once per pool at zero; beyond it 503 `unavailable` with
    /// `Retry-After` at once. The default is half of `--max-buffered-body-bytes`'s, so that one
    /// waking pool cannot take every buffered byte from the others.
    #[arg(long, env = "GATEWAY_COLD_START_HOLD_BYTES", default_value_t = 32 << 20, help_heading = heading::ROUTING)]
    pub cold_start_hold_bytes: u64,

    /// `Retry-After` on the gateway's own 429/503 answers (whole seconds, rounded up). Was
    /// `--retry-after-s` (a number of seconds, still accepted; `GATEWAY_RETRY_AFTER_S` still read).
    #[arg(long = "retry-after", alias = "retry-after-s", env = "GATEWAY_RETRY_AFTER", default_value = "1s", value_parser = parse_retry_after, help_heading = heading::ADMISSION)]
    pub retry_after_s: u64,

    /// Consecutive failures (connection errors, dropped responses, timeouts) that eject a worker.
    #[arg(long, env = "GATEWAY_EJECT_AFTER", default_value_t = 5, help_heading = heading::HEALTH)]
    pub eject_after: u32,

    /// First re-probe delay of an ejected or unready worker; doubles up to `--probe-backoff-max`.
    #[arg(long, env = "GATEWAY_PROBE_BACKOFF", default_value = "500ms", value_parser = parse_duration, help_heading = heading::HEALTH)]
    pub probe_backoff: Duration,

    /// Longest delay between re-probes of an ejected or unready worker.
    #[arg(long, env = "GATEWAY_PROBE_BACKOFF_MAX", default_value = "10s", value_parser = parse_duration, help_heading = heading::HEALTH)]
    pub probe_backoff_max: Duration,

    /// Interval of `/v1/stats` polls per worker (jittered by +-20 %).
    #[arg(long, env = "GATEWAY_STATS_INTERVAL", default_value = "500ms", value_parser = parse_duration, help_heading = heading::HEALTH)]
    pub stats_interval: Duration,

    /// Timeout of one `/v1/stats` or `/readyz` call.
    #[arg(long, env = "GATEWAY_STATS_TIMEOUT", default_value = "250ms", value_parser = parse_duration, help_heading = heading::HEALTH)]
    pub stats_timeout: Duration,

    /// Telemetry older than this is stale: its last pressure holds and it blocks scale-down.
    #[arg(long, env = "GATEWAY_STALE_AFTER", default_value = "3s", value_parser = parse_duration, help_heading = heading::HEALTH)]
    pub stale_after: Duration,

    /// Target utilization of a replica, in (0, 1]: the signal is the offered demand over what
    /// one replica serves at this share of its capacity, `lambda / (C x u)` (`docs/signal.md`).
    #[arg(long, env = "GATEWAY_TARGET_UTILIZATION", default_value_t = 0.7, value_parser = parse_utilization, help_heading = heading::SIGNAL)]
    pub target_utilization: f64,

    /// The demand's averaging window: queries offered to a pool per second over this long (or
    /// over the last second, when that reads more: increases are read at once).
    #[arg(long, env = "GATEWAY_DEMAND_WINDOW", default_value = "5s", value_parser = parse_duration, help_heading = heading::SIGNAL)]
    pub demand_window: Duration,

    /// Latency target: the queue a worker clears within it (and never less than two full
    /// batches) is normal; beyond it the worker is saturated and the rest is backlog.
    #[arg(long, env = "GATEWAY_LATENCY_TARGET", default_value = "20ms", value_parser = parse_duration, help_heading = heading::SIGNAL)]
    pub latency_target: Duration,

    /// The backlog beyond the latency target is to be cleared within this long: its replicas are
    /// the backlog over what a replica clears at target in this time.
    #[arg(long, env = "GATEWAY_DRAIN_HORIZON", default_value = "30s", value_parser = parse_duration, help_heading = heading::SIGNAL)]
    pub drain_horizon: Duration,

    /// GPU utilization (percent, the worker's own SM share on a shared GPU) from which a worker
    /// counts as saturated, whatever its queue: it then asks for at least itself at target.
    #[arg(long, env = "GATEWAY_GPU_SATURATION", default_value_t = 90.0, help_heading = heading::SIGNAL)]
    pub gpu_saturation: f64,

    /// Fallback only, until some worker of the pool reports its capacity (workers that predate
    /// it, or with calibration off and no traffic yet): queued plus in-flight queries one replica
    /// should carry.
    #[arg(long, env = "GATEWAY_TARGET_QUEUE", default_value_t = 32.0, help_heading = heading::SIGNAL)]
    pub target_queue: f64,

    /// Fallback only, as `--target-queue`: GPU utilization (percent) one replica should run at.
    #[arg(long, env = "GATEWAY_TARGET_GPU", default_value_t = 70.0, help_heading = heading::SIGNAL)]
    pub target_gpu: f64,

    /// Time constant of the signal's rise (0 = follow increases immediately).
    #[arg(long, env = "GATEWAY_SIGNAL_RISE", default_value = "1s", value_parser = parse_duration, help_heading = heading::SIGNAL)]
    pub signal_rise: Duration,

    /// Time constant of the signal's fall.
    #[arg(long, env = "GATEWAY_SIGNAL_FALL", default_value = "60s", value_parser = parse_duration, help_heading = heading::SIGNAL)]
    pub signal_fall: Duration,

    /// How often each pool's signal is recomputed.
    #[arg(long, env = "GATEWAY_SIGNAL_INTERVAL", default_value = "250ms", value_parser = parse_duration, help_heading = heading::SIGNAL)]
    pub signal_interval: Duration,

    /// Latency assumed for a worker with no measurement yet (the RTT floor that keeps new
    /// workers from being flooded).
    #[arg(long, env = "GATEWAY_DEFAULT_RTT", default_value = "30ms", value_parser = parse_duration, help_heading = heading::ROUTING)]
    pub default_rtt: Duration,

    /// Decay time of the balancer's peak-EWMA latency estimate.
    #[arg(long, env = "GATEWAY_RTT_DECAY", default_value = "10s", value_parser = parse_duration, help_heading = heading::ROUTING)]
    pub rtt_decay: Duration,

    /// Idle keep-alive connections kept per worker (`--runtime per-core`: per worker and
    /// thread, each thread keeping its own). The default is `--max-outstanding`'s: a cap
    /// below the concurrency the gateway admits closes connections after every burst that the
    /// next burst must open again, so a busy worker sees connections opened every second.
    /// (`GATEWAY_POOL_MAX_IDLE`, its variable before it was named as the flag, is still read.)
    #[arg(long, env = "GATEWAY_POOL_MAX_IDLE_PER_HOST", default_value_t = 4096, help_heading = heading::UPSTREAM)]
    pub pool_max_idle_per_host: usize,

    /// Do not merge concurrent single-query `/predict` requests bound for the same worker into
    /// one `POST /predict {"queries": [...]}` (coalescing is on by default; it merges only
    /// requests that are already waiting, see `--coalesce-after-in-flight`).
    #[arg(long, env = "GATEWAY_NO_COALESCE", help_heading = heading::UPSTREAM)]
    pub no_coalesce: bool,

    /// Most queries in one merged worker request (the CPU worker's full batch; at most the
    /// worker's `--max-queries`). A merge also stays within `--heavy-request-tokens` estimated
    /// tokens and `--max-body-bytes`. 1 turns coalescing off.
    #[arg(long, env = "GATEWAY_COALESCE_MAX_QUERIES", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=4096), help_heading = heading::UPSTREAM)]
    pub coalesce_max_queries: u64,

    /// Exchanges in flight to one worker from which single-query requests wait to be merged:
    /// below it every request goes alone at once; at or above it a request waits until one of
    /// the worker's exchanges ends (or a full merge forms) and goes with the others waiting then.
    /// Under `--runtime per-core` each core merges its own requests on its own connections, and
    /// this number is split among the cores (at least one exchange each), so that a worker sees
    /// about as many exchanges in flight, and as large merges, at any number of cores.
    #[arg(long, env = "GATEWAY_COALESCE_AFTER_IN_FLIGHT", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=65536), help_heading = heading::UPSTREAM)]
    pub coalesce_after_in_flight: u64,

    /// Runtime worker threads; 0 = the CPUs this process may run on (its affinity mask, e.g.
    /// under `taskset` or a cgroup cpuset). With one thread the gateway runs a single-threaded
    /// runtime: a work-stealing runtime gains nothing on one core and costs cross-thread wakeups.
    /// With `--runtime per-core`: the data-plane threads, each a single-threaded runtime.
    /// Named as the worker's `--runtime-threads`; was `--threads` (`GATEWAY_THREADS`, still read).
    #[arg(long = "runtime-threads", alias = "threads", env = "GATEWAY_RUNTIME_THREADS", default_value_t = 0, help_heading = heading::RUNTIME)]
    pub threads: usize,

    /// How the threads run: `shared`, one work-stealing runtime for everything; `per-core`,
    /// each of the `--runtime-threads` threads a single-threaded runtime with its own listening
    /// socket of the client and gRPC ports (`SO_REUSEPORT`: the kernel spreads connections over
    /// them), sharing no task with the others, as nginx's workers; discovery, the worker
    /// monitors, the signal, the admin port and the metrics API run on one more thread. A
    /// connection is served by one thread from its accept to its close. The connection caps and
    /// the body budget stay the process's. The default: at 4 and 8 threads it served more for
    /// less CPU a request than `shared` (benches/RESULTS.md, "The gateway's data plane against
    /// its cores"), level below.
    #[arg(long, env = "GATEWAY_RUNTIME", value_enum, default_value_t = Runtime::PerCore, help_heading = heading::RUNTIME)]
    pub runtime: Runtime,

    /// Log filter (`tracing` env-filter syntax); `RUST_LOG` is read when neither the flag nor
    /// `GATEWAY_LOG` is set.
    #[arg(long, env = "GATEWAY_LOG", default_value = "info", help_heading = heading::LOGGING)]
    pub log: String,

    /// Log as JSON lines.
    #[arg(long, env = "GATEWAY_LOG_JSON", help_heading = heading::LOGGING)]
    pub log_json: bool,

    /// Connection hygiene of both ports (the `listener` crate's flags, as the worker's):
    /// header, body and idle timeouts, the connection cap, the body byte budget.
    #[command(flatten)]
    pub listener: listener::ListenerArgs<listener::GatewayEnv>,

    #[command(flatten)]
    pub metrics_api: metrics_api::MetricsApiConfig,
}

impl Config {
    /// Runtime worker threads for `--runtime-threads`: the given number, or with 0 the CPUs this process
    /// may run on (`available_parallelism` honours the affinity mask and cgroup quotas).
    pub fn runtime_threads(&self) -> usize {
        if self.threads > 0 {
            return self.threads;
        }
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    }

    /// Slots of what is kept per core (`runtime::Slots`: each worker's idle connections,
    /// outstanding counts, latency estimates and merge queues; admission's shares): one for the
    /// shared runtime; one a data-plane core and one for every other thread in the per-core
    /// runtime.
    pub(crate) fn core_slots(&self) -> usize {
        match self.runtime {
            Runtime::Shared => 1,
            Runtime::PerCore => self.runtime_threads() + 1,
        }
    }

    /// The cores that serve requests each on their own: `--runtime-threads` under the per-core
    /// runtime; one shared whole under the shared runtime.
    pub(crate) fn data_plane_cores(&self) -> usize {
        self.core_slots().saturating_sub(1).max(1)
    }

    /// A configuration with every default and no workers, for tests.
    pub fn for_tests() -> Self {
        use clap::Parser;
        Self::parse_from(["gateway", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
    }
}

/// Variables read below the flags' own (`cli::args_with_renamed_env`): old names of variables
/// renamed to match their flags (read until the next release, with a warning), and `RUST_LOG`.
pub const RENAMED_ENV: &[cli::Renamed] = &[
    cli::Renamed::deprecated("GATEWAY_RETRY_AFTER_S", "GATEWAY_RETRY_AFTER", &["--retry-after", "--retry-after-s"]),
    cli::Renamed::deprecated("GATEWAY_POOL_MAX_IDLE", "GATEWAY_POOL_MAX_IDLE_PER_HOST", &["--pool-max-idle-per-host"]),
    cli::Renamed::deprecated("GATEWAY_WORKERS", "GATEWAY_WORKER", &["--worker"]),
    cli::Renamed::deprecated("GATEWAY_POOL_WORKERS", "GATEWAY_POOL_WORKER", &["--pool-worker"]),
    cli::Renamed::deprecated("GATEWAY_K8S_SERVICES", "GATEWAY_K8S_SERVICE", &["--k8s-service"]),
    cli::Renamed::deprecated("GATEWAY_THREADS", "GATEWAY_RUNTIME_THREADS", &["--runtime-threads", "--threads"]),
    cli::Renamed::conventional("RUST_LOG", "GATEWAY_LOG", &["--log"]),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_a_duration_in_whole_seconds_or_a_number_of_seconds() {
        assert_eq!(parse_retry_after("1s").unwrap(), 1);
        assert_eq!(parse_retry_after("2m").unwrap(), 120);
        assert_eq!(parse_retry_after("1500ms").unwrap(), 2, "rounded up");
        assert_eq!(parse_retry_after("3").unwrap(), 3, "as --retry-after-s took it");
        assert!(parse_retry_after("soon").is_err());
        use clap::Parser;
        let c = Config::parse_from(["gateway", "--retry-after-s", "5"]);
        assert_eq!(c.retry_after_s, 5);
        let c = Config::parse_from(["gateway", "--retry-after", "500ms"]);
        assert_eq!(c.retry_after_s, 1);
    }

    #[test]
    fn durations_are_humantime() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("1s 500ms").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        for bad in ["soon", "-1s", "20", ""] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    /// The options table of `gateway/README.md`, one row per flag: `| `--flag ...` | `ENV` |
    /// `default` or — | meaning |`.
    fn documented_options() -> std::collections::BTreeMap<String, (String, String)> {
        let readme = include_str!("../README.md");
        let section = readme.split("## Options").nth(1).expect("an Options section");
        let code = |cell: &str| cell.split('`').nth(1).unwrap_or("").to_owned();
        section
            .lines()
            .take_while(|l| !l.starts_with("## "))
            .filter(|l| l.starts_with("| `--"))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let flag = code(cells[1]);
                let flag = flag.split_whitespace().next().unwrap_or("").trim_start_matches("--").to_owned();
                (flag, (code(cells[2]), code(cells[3])))
            })
            .collect()
    }

    #[test]
    fn every_flag_is_in_the_readme_with_its_env_and_default() {
        use clap::CommandFactory;
        let mut documented = documented_options();
        let mut cmd = Config::command();
        cmd.build();
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if matches!(long, "help" | "version") {
                continue;
            }
            let (env, default) = documented
                .remove(long)
                .unwrap_or_else(|| panic!("--{long} has no row in the options table of gateway/README.md"));
            let actual_env = arg.get_env().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default();
            assert_eq!(actual_env, env, "--{long}: env");
            let defaults: Vec<String> =
                arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
            assert_eq!(defaults.join(","), default, "--{long}: default");
        }
        assert!(documented.is_empty(), "documented but not flags: {:?}", documented.keys());
    }
}
