//! The gateway's whole configuration: one `clap` struct, every field settable by flag or env.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Parse a duration written as milliseconds (`250ms`), seconds (`10s`, `1.5s`) or a bare number
/// of milliseconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, scale) = if let Some(v) = s.strip_suffix("ms") {
        (v, 1e-3)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1.0)
    } else {
        (s, 1e-3)
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("not a duration: {s:?} (use 250ms or 10s)"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("not a duration: {s:?}"));
    }
    Ok(Duration::from_secs_f64(v * scale))
}

/// Runtime worker threads for `--threads`: the given number, or with 0 the CPUs this process may
/// run on (`available_parallelism` honours the affinity mask and cgroup quotas).
pub fn runtime_threads(threads: usize) -> usize {
    if threads > 0 {
        return threads;
    }
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// The gateway: p2c balancing over GPU workers, discovery, and the pool scaling signal.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "gateway", version, about)]
pub struct Config {
    /// Address to serve clients on (`/predict`, `/pools/{pool}/predict`, `/v1/signal`).
    #[arg(long, env = "GATEWAY_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Separate address for `/metrics`; when unset, `/metrics` is served on `--listen`.
    #[arg(long, env = "GATEWAY_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// Name of the pool `/predict` goes to.
    #[arg(long, env = "GATEWAY_DEFAULT_POOL", default_value = "default")]
    pub default_pool: String,

    /// A worker base URL of the default pool (repeatable), e.g. `http://10.0.0.5:8000`.
    #[arg(long = "worker", env = "GATEWAY_WORKERS", value_delimiter = ',')]
    pub workers: Vec<String>,

    /// A worker of a named pool, `POOL=URL` (repeatable).
    #[arg(long = "pool-worker", env = "GATEWAY_POOL_WORKERS", value_delimiter = ',')]
    pub pool_workers: Vec<String>,

    /// A file listing workers, one per line: `URL` (default pool) or `POOL URL`; `#` starts a
    /// comment. Re-read when it changes.
    #[arg(long, env = "GATEWAY_WORKER_FILE")]
    pub worker_file: Option<PathBuf>,

    /// Kubernetes namespace of the pools given by `--worker`, `--pool-worker` and the worker file
    /// (the external metrics API shows a pool only to requests for its namespace). Pools fed by
    /// `--k8s-service` belong to the Service's namespace.
    #[arg(long, env = "GATEWAY_POOL_NAMESPACE", default_value = "default")]
    pub pool_namespace: String,

    /// How often the worker file is checked for changes.
    #[arg(long, env = "GATEWAY_WORKER_FILE_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub worker_file_interval: Duration,

    /// A Kubernetes Service whose EndpointSlices feed a pool: `[POOL=]NAMESPACE/SERVICE[:PORT]`
    /// where PORT is a port name or number (default: the slice's first port). Repeatable.
    #[arg(long = "k8s-service", env = "GATEWAY_K8S_SERVICES", value_delimiter = ',')]
    pub k8s_services: Vec<String>,

    /// Whole-request deadline, including the one retry; beyond it the client gets 504 `timeout`.
    #[arg(long, env = "GATEWAY_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Most requests the gateway holds at once; beyond it 429 `overloaded` with `Retry-After`.
    #[arg(long, env = "GATEWAY_MAX_OUTSTANDING", default_value_t = 4096)]
    pub max_outstanding: usize,

    /// Largest request body accepted (bytes); beyond it 413 `too_large`.
    #[arg(long, env = "GATEWAY_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    pub max_body_bytes: usize,

    /// How long a request waits for a ready worker before 503 `unavailable`.
    #[arg(long, env = "GATEWAY_NO_WORKER_WAIT", default_value = "1s", value_parser = parse_duration)]
    pub no_worker_wait: Duration,

    /// Value of `Retry-After` (seconds) on the gateway's own 429/503 answers.
    #[arg(long, env = "GATEWAY_RETRY_AFTER_S", default_value_t = 1)]
    pub retry_after_s: u64,

    /// Consecutive failures (connection errors, dropped responses, timeouts) that eject a worker.
    #[arg(long, env = "GATEWAY_EJECT_AFTER", default_value_t = 5)]
    pub eject_after: u32,

    /// First re-probe delay of an ejected or unready worker; doubles up to `--probe-backoff-max`.
    #[arg(long, env = "GATEWAY_PROBE_BACKOFF", default_value = "500ms", value_parser = parse_duration)]
    pub probe_backoff: Duration,

    /// Longest delay between re-probes of an ejected or unready worker.
    #[arg(long, env = "GATEWAY_PROBE_BACKOFF_MAX", default_value = "10s", value_parser = parse_duration)]
    pub probe_backoff_max: Duration,

    /// Interval of `/v1/stats` polls per worker (jittered by +-20 %).
    #[arg(long, env = "GATEWAY_STATS_INTERVAL", default_value = "500ms", value_parser = parse_duration)]
    pub stats_interval: Duration,

    /// Timeout of one `/v1/stats` or `/readyz` call.
    #[arg(long, env = "GATEWAY_STATS_TIMEOUT", default_value = "250ms", value_parser = parse_duration)]
    pub stats_timeout: Duration,

    /// Telemetry older than this is stale: its last pressure holds and it blocks scale-down.
    #[arg(long, env = "GATEWAY_STALE_AFTER", default_value = "3s", value_parser = parse_duration)]
    pub stale_after: Duration,

    /// Queued plus in-flight queries one replica should carry (the signal's queue target).
    #[arg(long, env = "GATEWAY_TARGET_QUEUE", default_value_t = 32.0)]
    pub target_queue: f64,

    /// GPU utilization (percent) one replica should run at (the signal's GPU target).
    #[arg(long, env = "GATEWAY_TARGET_GPU", default_value_t = 70.0)]
    pub target_gpu: f64,

    /// Time constant of the signal's rise (0 = follow increases immediately).
    #[arg(long, env = "GATEWAY_SIGNAL_RISE", default_value = "1s", value_parser = parse_duration)]
    pub signal_rise: Duration,

    /// Time constant of the signal's fall.
    #[arg(long, env = "GATEWAY_SIGNAL_FALL", default_value = "60s", value_parser = parse_duration)]
    pub signal_fall: Duration,

    /// How often each pool's signal is recomputed.
    #[arg(long, env = "GATEWAY_SIGNAL_INTERVAL", default_value = "250ms", value_parser = parse_duration)]
    pub signal_interval: Duration,

    /// Latency assumed for a worker with no measurement yet (the RTT floor that keeps new
    /// workers from being flooded).
    #[arg(long, env = "GATEWAY_DEFAULT_RTT", default_value = "30ms", value_parser = parse_duration)]
    pub default_rtt: Duration,

    /// Decay time of the balancer's peak-EWMA latency estimate.
    #[arg(long, env = "GATEWAY_RTT_DECAY", default_value = "10s", value_parser = parse_duration)]
    pub rtt_decay: Duration,

    /// Idle keep-alive connections kept per worker. The default is `--max-outstanding`'s: a cap
    /// below the concurrency the gateway admits closes connections after every burst that the
    /// next burst must open again (measured: 512 clients with a cap of 256 opened ~800
    /// connections a second to one worker; with 4096, a twentieth of that).
    #[arg(long, env = "GATEWAY_POOL_MAX_IDLE", default_value_t = 4096)]
    pub pool_max_idle_per_host: usize,

    /// Runtime worker threads; 0 = the CPUs this process may run on (its affinity mask, e.g.
    /// under `taskset` or a cgroup cpuset). With one thread the gateway runs a single-threaded
    /// runtime: a work-stealing runtime gains nothing on one core and costs cross-thread wakeups.
    #[arg(long, env = "GATEWAY_THREADS", default_value_t = 0)]
    pub threads: usize,

    /// Log filter (`tracing` env-filter syntax).
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub log: String,

    /// Log as JSON lines.
    #[arg(long, env = "GATEWAY_LOG_JSON")]
    pub log_json: bool,

    #[command(flatten)]
    pub metrics_api: crate::metrics_api::MetricsApiConfig,
}

impl Config {
    /// A configuration with every default and no workers, for tests.
    pub fn for_tests() -> Self {
        use clap::Parser;
        Self::parse_from(["gateway", "--listen", "127.0.0.1:0"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_both_units() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("20").unwrap(), Duration::from_millis(20));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn defaults_match_the_documentation() {
        let c = Config::for_tests();
        assert_eq!(c.request_timeout, Duration::from_secs(10));
        assert_eq!(c.stats_interval, Duration::from_millis(500));
        assert_eq!(c.stale_after, Duration::from_secs(3));
        assert_eq!(c.eject_after, 5);
        assert_eq!(c.max_outstanding, 4096);
        assert_eq!(c.target_queue, 32.0);
        assert_eq!(c.target_gpu, 70.0);
    }
}
