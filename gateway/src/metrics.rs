//! Prometheus metrics: every family the gateway exports is declared here, with its labels; the
//! names and labels are documented in one table in `gateway/README.md`.

use listener::shard::{Counter, Histogram};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// `pool`, `worker`, `outcome` (`ok` or an `error_type`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub pool: String,
    pub worker: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkerLabels {
    pub pool: String,
    pub worker: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ComponentLabels {
    pub pool: String,
    pub component: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RetryLabels {
    pub pool: String,
    pub reason: String,
}

/// `kind`: where a panic happened (`file:line`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PanicLabels {
    pub kind: String,
}

type FGauge = Gauge<f64, AtomicU64>;
type HistogramCtor = fn() -> Histogram;

fn hold_histogram() -> Histogram {
    // 10 ms .. ~80 s: a worker already starting is ready within the first buckets, a cold start
    // (a model load, a calibration, a GPU's context) takes seconds, the hold ends at its bound.
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

fn latency_histogram() -> Histogram {
    // 0.25 ms .. ~16 s: the gateway's own overhead is sub-millisecond, inference is tens of ms,
    // timeouts are seconds.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 17))
}

/// All metric families, cheap to clone (every family is an `Arc` inside).
#[derive(Clone)]
pub struct Metrics {
    pub requests: Family<RequestLabels, Counter>,
    pub latency: Family<RequestLabels, Histogram, HistogramCtor>,
    pub retries: Family<RetryLabels, Counter>,
    pub coalesced_requests: Family<PoolLabels, Counter>,
    pub coalesced_exchanges: Family<PoolLabels, Counter>,
    pub ejections: Family<WorkerLabels, Counter>,
    pub admission_rejected: Counter,
    pub panics: Family<PanicLabels, Counter>,
    /// Sharded (written by every request on every core).
    pub outstanding: listener::shard::Gauge,
    pub outstanding_tokens: listener::shard::Gauge,
    pub admission_limit_requests: Gauge,
    pub admission_limit_tokens: Gauge,
    pub answer_buffered: Gauge,
    pub answer_buffered_limit: Gauge,
    pub worker_outstanding: Family<WorkerLabels, Gauge>,
    pub worker_queue: Family<WorkerLabels, FGauge>,
    pub worker_gpu: Family<WorkerLabels, FGauge>,
    pub worker_gpu_memory: Family<WorkerLabels, FGauge>,
    pub worker_pressure: Family<WorkerLabels, FGauge>,
    pub worker_capacity: Family<WorkerLabels, FGauge>,
    pub worker_telemetry_age: Family<WorkerLabels, FGauge>,
    pub worker_stale: Family<WorkerLabels, Gauge>,
    pub worker_ready: Family<WorkerLabels, Gauge>,
    pub pool_signal: Family<PoolLabels, FGauge>,
    pub pool_signal_raw: Family<PoolLabels, FGauge>,
    pub pool_signal_component: Family<ComponentLabels, FGauge>,
    pub pool_stale: Family<PoolLabels, Gauge>,
    pub pool_demand: Family<PoolLabels, FGauge>,
    pub pool_capacity: Family<PoolLabels, FGauge>,
    pub pool_workers: Family<PoolLabels, Gauge>,
    pub pool_ready_workers: Family<PoolLabels, Gauge>,
    pub pool_backlog: Family<PoolLabels, Gauge>,
    pub pool_hold: Family<PoolLabels, Histogram, HistogramCtor>,
    pub pool_gpu_memory: Family<PoolLabels, FGauge>,
    /// The external metrics API's families (`gateway_metrics_api_*`).
    pub api: metrics_api::ApiMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as HistogramCtor),
            retries: Family::default(),
            coalesced_requests: Family::default(),
            coalesced_exchanges: Family::default(),
            ejections: Family::default(),
            admission_rejected: Counter::default(),
            panics: Family::default(),
            outstanding: listener::shard::Gauge::default(),
            outstanding_tokens: listener::shard::Gauge::default(),
            admission_limit_requests: Gauge::default(),
            admission_limit_tokens: Gauge::default(),
            answer_buffered: Gauge::default(),
            answer_buffered_limit: Gauge::default(),
            worker_outstanding: Family::default(),
            worker_queue: Family::default(),
            worker_gpu: Family::default(),
            worker_gpu_memory: Family::default(),
            worker_pressure: Family::default(),
            worker_capacity: Family::default(),
            worker_telemetry_age: Family::default(),
            worker_stale: Family::default(),
            worker_ready: Family::default(),
            pool_signal: Family::default(),
            pool_signal_raw: Family::default(),
            pool_signal_component: Family::default(),
            pool_stale: Family::default(),
            pool_demand: Family::default(),
            pool_capacity: Family::default(),
            pool_workers: Family::default(),
            pool_ready_workers: Family::default(),
            pool_backlog: Family::default(),
            pool_hold: Family::new_with_constructor(hold_histogram as HistogramCtor),
            pool_gpu_memory: Family::default(),
            api: metrics_api::ApiMetrics::default(),
        }
    }
}

impl Metrics {
    /// A registry holding every family under the `gateway_` prefix.
    pub fn registry(&self) -> Registry {
        let mut r = Registry::with_prefix("gateway");
        r.register(
            "requests",
            "Client requests by pool, worker and outcome (pool \"\" and worker \"none\": answered before \
             reaching a pool: refused at admission, a wrong method, a body too large, late or malformed, an unknown \
             pool)",
            self.requests.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Client request latency at the gateway by pool, worker and outcome",
            self.latency.clone(),
        );
        r.register("retries", "Requests retried on another worker, by reason", self.retries.clone());
        r.register(
            "coalesced_requests",
            "Client requests sent to a worker inside a merged request ({\"queries\": [...]}), by pool",
            self.coalesced_requests.clone(),
        );
        r.register(
            "coalesced_exchanges",
            "Merged requests sent to workers (each carrying one or more client requests), by pool",
            self.coalesced_exchanges.clone(),
        );
        r.register("ejections", "Workers ejected after consecutive failures", self.ejections.clone());
        r.register(
            "admission_rejected",
            "Requests refused with 429 because the gateway held as many requests or tokens as it admits",
            self.admission_rejected.clone(),
        );
        r.register(
            "panics",
            "Panics caught in request handling (answered 500 internal, a gRPC call INTERNAL), by kind (source location)",
            self.panics.clone(),
        );
        r.register("outstanding", "Requests held by the gateway now", self.outstanding.clone());
        r.register(
            "outstanding_tokens",
            "Estimated tokens of the requests held by the gateway now",
            self.outstanding_tokens.clone(),
        );
        r.register(
            "admission_limit",
            "Most requests the gateway admits at once now: what the ready workers answer within --request-timeout, \
             at least --max-outstanding",
            self.admission_limit_requests.clone(),
        );
        r.register(
            "admission_limit_tokens",
            "Most estimated tokens the gateway admits at once now, at least --max-outstanding-tokens",
            self.admission_limit_tokens.clone(),
        );
        r.register(
            "answer_buffered_bytes",
            "Bytes of worker answers held in memory now (--max-buffered-answer-bytes)",
            self.answer_buffered.clone(),
        );
        r.register(
            "answer_buffered_limit_bytes",
            "Most bytes of worker answers held at once (--max-buffered-answer-bytes)",
            self.answer_buffered_limit.clone(),
        );
        r.register(
            "worker_outstanding",
            "Requests the gateway has sent to the worker and not finished",
            self.worker_outstanding.clone(),
        );
        r.register(
            "worker_queue",
            "Worker queue estimate: reported queued+in_flight of other clients plus our outstanding",
            self.worker_queue.clone(),
        );
        r.register(
            "worker_gpu_utilization_ratio",
            "GPU utilization the worker reported, 0..1 (process SM on a shared GPU, device otherwise)",
            self.worker_gpu.clone(),
        );
        r.register(
            "worker_gpu_memory_used_ratio",
            "Device memory used / total that the worker reported (absent without a GPU reading)",
            self.worker_gpu_memory.clone(),
        );
        r.register(
            "worker_pressure",
            "Replica units this worker's load needs against --target-queue and --target-gpu (the fallback signal)",
            self.worker_pressure.clone(),
        );
        r.register(
            "worker_capacity_per_second",
            "The worker's reported capacity: queries per second when saturated",
            self.worker_capacity.clone(),
        );
        r.register(
            "worker_telemetry_age_seconds",
            "Age of the worker's last /v1/stats snapshot",
            self.worker_telemetry_age.clone(),
        );
        r.register("worker_telemetry_stale", "1 when the worker's telemetry is stale", self.worker_stale.clone());
        r.register("worker_ready", "1 when the worker receives traffic", self.worker_ready.clone());
        r.register("pool_signal", "Smoothed scaling signal of the pool, in replicas", self.pool_signal.clone());
        r.register(
            "pool_signal_raw",
            "Unsmoothed scaling signal of the pool, in replicas",
            self.pool_signal_raw.clone(),
        );
        r.register(
            "pool_signal_component",
            "Parts of the raw signal: queue, gpu, held, backlog, blind_floor",
            self.pool_signal_component.clone(),
        );
        r.register("pool_signal_stale", "1 when some worker's telemetry is stale", self.pool_stale.clone());
        r.register(
            "pool_demand_per_second",
            "Queries offered to the pool per second (admitted or refused), over --demand-window",
            self.pool_demand.clone(),
        );
        r.register(
            "pool_capacity_per_second",
            "One replica's capacity in queries per second (mean of the workers' reports, or the last known)",
            self.pool_capacity.clone(),
        );
        r.register("pool_workers", "Workers discovered in the pool", self.pool_workers.clone());
        r.register("pool_ready_workers", "Workers receiving traffic in the pool", self.pool_ready_workers.clone());
        r.register("pool_backlog", "Requests waiting at the gateway for a ready worker", self.pool_backlog.clone());
        r.register(
            "pool_hold_seconds",
            "Time requests were held for a pool at zero until a worker was ready (or the hold ended), by pool",
            self.pool_hold.clone(),
        );
        r.register(
            "pool_gpu_memory_used_ratio",
            "Highest device memory used / total among the pool's workers with a fresh GPU reading",
            self.pool_gpu_memory.clone(),
        );
        self.api.register(&mut r);
        r
    }

    /// Drop every series that carries the `worker` label of a worker that left the pool:
    /// `outcomes` are those it was counted under in `gateway_requests_total` and
    /// `gateway_request_duration_seconds`.
    pub fn forget_worker<'a>(&self, l: &WorkerLabels, outcomes: impl IntoIterator<Item = &'a str>) {
        for outcome in outcomes {
            let r = RequestLabels { pool: l.pool.clone(), worker: l.worker.clone(), outcome: outcome.to_owned() };
            self.requests.remove(&r);
            self.latency.remove(&r);
        }
        self.ejections.remove(l);
        self.worker_outstanding.remove(l);
        self.worker_queue.remove(l);
        self.worker_gpu.remove(l);
        self.worker_gpu_memory.remove(l);
        self.worker_pressure.remove(l);
        self.worker_capacity.remove(l);
        self.worker_telemetry_age.remove(l);
        self.worker_stale.remove(l);
        self.worker_ready.remove(l);
    }
}

/// Render a registry in the Prometheus text format.
pub fn render(registry: &Registry) -> String {
    let mut out = String::with_capacity(16 * 1024);
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

pub(crate) use listener::exposition::negotiate;
