//! Prometheus metrics. Every name and label is listed in `docs/worker.md`. Counters and
//! histograms are sharded ([`listener::shard`]): every request writes several, from every
//! runtime thread.

use listener::shard::{Counter, Histogram};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use wire::{GpuTelemetry, QueueStats};

use crate::class::Class;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `ok`, or the response's `error_type`.
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabels {
    /// `light` or `heavy` (see `core::admission`).
    pub class: &'static str,
}

#[derive(Debug)]
pub struct Metrics {
    pub requests: Family<OutcomeLabels, Counter>,
    pub request_duration: Family<OutcomeLabels, Histogram>,
    pub queries: Family<OutcomeLabels, Counter>,
    pub batch_rows: Histogram,
    pub batch_padded_len: Histogram,
    pub queue_wait: Histogram,
    pub inference: Histogram,
    pub cancelled: Counter,
    pub admitted_requests: Family<ClassLabels, Counter>,
    pub admitted_tokens: Family<ClassLabels, Counter>,
    /// The series every request touches, looked up once: a family lookup takes a read lock
    /// shared by every runtime thread and hashes the labels.
    ok: Series,
    /// (requests, tokens) per class, indexed by `Class as usize` (`Class::ALL` is in declaration order).
    classes: [(Counter, Counter); 2],
}

/// One outcome's series.
#[derive(Debug)]
struct Series {
    requests: Counter,
    queries: Counter,
    duration: Histogram,
}

fn latency_histogram() -> Histogram {
    // 100 us .. ~26 s
    Histogram::new(exponential_buckets(1e-4, 2.0, 19))
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let requests = Family::default();
        let request_duration: Family<OutcomeLabels, Histogram> = Family::new_with_constructor(latency_histogram);
        let queries = Family::default();
        let admitted_requests = Family::default();
        let admitted_tokens = Family::default();
        let ok = OutcomeLabels { outcome: "ok" };
        let ok = Series {
            requests: requests.get_or_create_owned(&ok),
            queries: queries.get_or_create_owned(&ok),
            duration: request_duration.get_or_create_owned(&ok),
        };
        let classes = Class::ALL.map(|class| {
            let l = ClassLabels { class: class.as_str() };
            (admitted_requests.get_or_create_owned(&l), admitted_tokens.get_or_create_owned(&l))
        });
        let m = Self {
            requests,
            request_duration,
            queries,
            batch_rows: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
            batch_padded_len: Histogram::new(exponential_buckets(4.0, 2.0, 9)),
            queue_wait: latency_histogram(),
            inference: latency_histogram(),
            cancelled: Counter::default(),
            admitted_requests,
            admitted_tokens,
            ok,
            classes,
        };
        registry.register("worker_requests", "HTTP /predict requests by outcome", m.requests.clone());
        registry.register(
            "worker_request_duration_seconds",
            "Time from arrival to answer of /predict requests, by outcome",
            m.request_duration.clone(),
        );
        registry.register("worker_queries", "Queries (one request may carry several) by outcome", m.queries.clone());
        registry.register("worker_batch_rows", "Queries per batch run", m.batch_rows.clone());
        registry.register(
            "worker_batch_padded_length",
            "Padded sequence length of batches run",
            m.batch_padded_len.clone(),
        );
        registry.register(
            "worker_queue_wait_seconds",
            "Time a query waited from admission to its batch",
            m.queue_wait.clone(),
        );
        registry.register("worker_inference_seconds", "Backend time per batch", m.inference.clone());
        registry.register(
            "worker_cancelled_queries",
            "Queries dropped before inference because their client had gone",
            m.cancelled.clone(),
        );
        registry.register(
            "worker_admitted_requests",
            "Requests admitted (queries and tokens), by class: light, or heavy (over --heavy-request-tokens)",
            m.admitted_requests.clone(),
        );
        registry.register(
            "worker_admitted_tokens",
            "Tokens of the requests admitted, by class",
            m.admitted_tokens.clone(),
        );
        m
    }

    pub fn admitted(&self, class: Class, tokens: u64) {
        let (requests, toks) = &self.classes[class as usize];
        requests.inc();
        toks.inc_by(tokens);
    }

    pub fn observe_request(&self, outcome: &'static str, queries: u64, seconds: f64) {
        if outcome == "ok" {
            self.ok.requests.inc();
            self.ok.queries.inc_by(queries);
            self.ok.duration.observe(seconds);
            return;
        }
        let labels = OutcomeLabels { outcome };
        self.requests.get_or_create(&labels).inc();
        self.queries.get_or_create(&labels).inc_by(queries);
        self.request_duration.get_or_create(&labels).observe(seconds);
    }
}

/// Gauges read at scrape time: queue depth and the latest GPU sample. GPU gauges are only
/// written while telemetry is available: an absent series, not a zero, means "no reading".
pub struct LiveCollector {
    /// The queue as of now.
    pub queue: Box<dyn Fn() -> QueueStats + Send + Sync>,
    pub gpu: watch::Receiver<GpuTelemetry>,
}

impl std::fmt::Debug for LiveCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveCollector").finish_non_exhaustive()
    }
}

fn gauge<N: prometheus_client::encoding::EncodeGaugeValue + std::fmt::Debug>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> std::fmt::Result {
    let g = ConstGauge::new(value);
    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
}

impl Collector for LiveCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let q = (self.queue)();
        let e = &mut encoder;
        gauge(e, "worker_queue_depth", "Admitted queries waiting for a batch", q.queued as i64)?;
        gauge(e, "worker_in_flight", "Queries in the batch being run", q.in_flight as i64)?;
        gauge(e, "worker_queue_capacity", "Most queries admitted at once", q.capacity as i64)?;
        gauge(
            e,
            "worker_queue_depth_tokens",
            "Tokens of the admitted queries waiting for a batch",
            q.queued_tokens as i64,
        )?;
        gauge(
            e,
            "worker_in_flight_tokens",
            "Tokens of the queries in the batches being run",
            q.in_flight_tokens as i64,
        )?;
        gauge(e, "worker_queue_capacity_tokens", "Most tokens admitted at once", q.capacity_tokens as i64)?;
        gauge(
            e,
            "worker_heavy_queries",
            "Queries of heavy requests admitted (queued or running)",
            q.heavy_queries as i64,
        )?;
        let gpu = self.gpu.borrow().clone();
        match gpu {
            GpuTelemetry::Unavailable { .. } => {
                gauge(e, "worker_gpu_telemetry_available", "1 when NVML telemetry is being read", 0i64)?;
            }
            GpuTelemetry::Available(s) => {
                gauge(e, "worker_gpu_telemetry_available", "1 when NVML telemetry is being read", 1i64)?;
                let d = &s.device;
                gauge(
                    e,
                    "worker_gpu_utilization_ratio",
                    "Device utilization (kernel duty cycle), 0..1",
                    d.utilization_pct / 100.0,
                )?;
                gauge(
                    e,
                    "worker_gpu_memory_utilization_ratio",
                    "Device memory busy fraction, 0..1",
                    d.memory_utilization_pct / 100.0,
                )?;
                gauge(e, "worker_gpu_memory_used_bytes", "Device memory used", d.memory_used_bytes as f64)?;
                gauge(e, "worker_gpu_memory_total_bytes", "Device memory total", d.memory_total_bytes as f64)?;
                if let Some(w) = d.power_watts {
                    gauge(e, "worker_gpu_power_watts", "Device power draw", w)?;
                }
                if let Some(mhz) = d.sm_clock_mhz {
                    gauge(e, "worker_gpu_sm_clock_hertz", "SM clock", f64::from(mhz) * 1e6)?;
                }
                if let Some(p) = s.process.sm_utilization_pct {
                    gauge(
                        e,
                        "worker_gpu_process_sm_utilization_ratio",
                        "This process's SM utilization, 0..1",
                        p / 100.0,
                    )?;
                }
                if let Some(b) = s.process.memory_used_bytes {
                    gauge(e, "worker_gpu_process_memory_used_bytes", "Device memory held by this process", b as f64)?;
                }
                gauge(e, "worker_gpu_shared", "1 when other compute processes use the same GPU", i64::from(s.shared))?;
                gauge(e, "worker_gpu_sample_age_seconds", "Age of the GPU sample", s.age_ms as f64 / 1e3)?;
            }
        }
        Ok(())
    }
}

pub use listener::exposition::{OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, negotiate, openmetrics_to_text};
