//! The gateway's narrow view of a worker's `/v1/stats` document (`wire::WorkerStats`): only the
//! fields it uses, every other field ignored, so that a worker may add fields (or change ones the
//! gateway does not read) without turning blind to the gateway. `schema_version` is read and
//! compared with [`wire::STATS_SCHEMA_VERSION`]; the monitor warns (once per worker) when they
//! differ and still uses what it could read.
//!
//! The GPU figure the signal uses is chosen here, not in `wire`: on a GPU shared with other
//! processes the worker's own SM utilization (the device figure would count their work too), the
//! device's otherwise; none when the worker has no reading.

use serde::Deserialize;

/// The fields of `/v1/stats` the gateway reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct StatsView {
    pub(crate) schema_version: u32,
    pub(crate) ready: bool,
    pub(crate) draining: bool,
    pub(crate) queue: QueueView,
    pub(crate) gpu: GpuView,
    /// Request rates and totals, where the worker reports them (read leniently: only two
    /// totals are used, and a change of its shape must not blind the gateway).
    #[serde(default)]
    pub(crate) rates: serde_json::Value,
    /// The worker's capacity, where it reports one (an additive field of schema version 1).
    #[serde(default)]
    pub(crate) capacity: Option<CapacityView>,
    /// The served model, for the name the Open Inference Protocol's routes answer to.
    #[serde(default)]
    pub(crate) model: Option<ModelView>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct ModelView {
    pub(crate) name: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct CapacityView {
    /// Queries per second when saturated.
    pub(crate) per_s: f64,
    /// Backend sessions running batches side by side.
    #[serde(default)]
    pub(crate) sessions: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct QueueView {
    pub(crate) queued: u64,
    pub(crate) in_flight: u64,
    /// Most rows in one batch.
    #[serde(default)]
    pub(crate) max_batch_rows: Option<u64>,
    /// Tokens of the queued queries, where the worker reports them (an additive field).
    #[serde(default)]
    pub(crate) queued_tokens: Option<u64>,
    /// Tokens of the queries in flight, where the worker reports them.
    #[serde(default)]
    pub(crate) in_flight_tokens: Option<u64>,
}

/// `gpu`: a reading, or none (`unavailable`, or a status this gateway does not know).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum GpuView {
    Available(GpuReading),
    #[serde(other)]
    Unavailable,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct GpuReading {
    pub(crate) device: GpuDeviceView,
    #[serde(default)]
    pub(crate) process: Option<GpuProcessView>,
    #[serde(default)]
    pub(crate) shared: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct GpuDeviceView {
    pub(crate) utilization_pct: f64,
    pub(crate) memory_used_bytes: u64,
    pub(crate) memory_total_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct GpuProcessView {
    #[serde(default)]
    pub(crate) sm_utilization_pct: Option<f64>,
}

impl StatsView {
    /// Parse a `/v1/stats` body.
    pub(crate) fn parse(body: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(body)
    }

    /// Whether the document is of the schema this gateway was built for.
    pub(crate) fn schema_matches(&self) -> bool {
        self.schema_version == wire::STATS_SCHEMA_VERSION
    }

    /// `queued + in_flight`: the worker's load in queries.
    pub(crate) fn reported_queue(&self) -> u64 {
        self.queue.queued + self.queue.in_flight
    }

    /// The same in tokens, when the worker reports it.
    pub(crate) fn reported_queue_tokens(&self) -> Option<u64> {
        match (self.queue.queued_tokens, self.queue.in_flight_tokens) {
            (None, None) => None,
            (q, f) => Some(q.unwrap_or(0) + f.unwrap_or(0)),
        }
    }

    /// Queries the worker has counted since it started, admitted or refused.
    pub(crate) fn offered_total(&self) -> Option<u64> {
        let admitted = self.rates.get("admitted_total")?.as_u64()?;
        Some(admitted.saturating_add(self.rates.get("rejected_total").and_then(|v| v.as_u64()).unwrap_or(0)))
    }

    /// The worker's capacity in queries per second and the queries its full batches hold (rows
    /// per batch times sessions), when it reports a usable capacity.
    pub(crate) fn capacity(&self) -> Option<(f64, u64)> {
        let c = self.capacity.as_ref().filter(|c| c.per_s.is_finite() && c.per_s > 0.0)?;
        let full = self.queue.max_batch_rows.unwrap_or(1).max(1) * c.sessions.unwrap_or(1).max(1);
        Some((c.per_s, full))
    }

    /// The GPU utilization the scaling signal uses, in percent (see the module documentation).
    pub(crate) fn gpu_utilization_pct(&self) -> Option<f64> {
        match &self.gpu {
            GpuView::Available(g) => {
                let own = g.process.as_ref().and_then(|p| p.sm_utilization_pct).filter(|_| g.shared);
                Some(own.unwrap_or(g.device.utilization_pct))
            }
            GpuView::Unavailable => None,
        }
    }

    /// Device memory used / total, when there is a reading.
    pub(crate) fn gpu_memory_used_ratio(&self) -> Option<f64> {
        match &self.gpu {
            GpuView::Available(g) if g.device.memory_total_bytes > 0 => {
                Some(g.device.memory_used_bytes as f64 / g.device.memory_total_bytes as f64)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document as the worker writes it, from the shared wire type.
    fn full(gpu: wire::GpuTelemetry) -> serde_json::Value {
        let stats = wire::WorkerStats {
            schema_version: wire::STATS_SCHEMA_VERSION,
            worker_id: "w/1".into(),
            timestamp_unix_ms: 1,
            uptime_s: 1.0,
            ready: true,
            draining: false,
            model: wire::ModelInfo { name: "m".into(), device: "cuda:0".into(), labels: vec!["a".into()] },
            queue: wire::QueueStats {
                queued: 3,
                in_flight: 4,
                capacity: 1024,
                max_batch_rows: 32,
                max_batch_tokens: 4096,
                max_queue_delay_ms: 2.0,
                queued_tokens: 30,
                in_flight_tokens: 40,
                capacity_tokens: 65_536,
                heavy_queries: 0,
                heavy_tokens: 0,
                heavy_request_tokens: 256,
            },
            rates: wire::RateStats {
                window_s: 10.0,
                arrival_per_s: 0.0,
                completion_per_s: 0.0,
                rejected_per_s: 0.0,
                admitted_total: 0,
                completed_total: 0,
                rejected_total: 0,
            },
            batches: wire::BatchStats {
                count: 0,
                mean_rows: 0.0,
                mean_padded_len: 0.0,
                mean_inference_ms: 0.0,
                mean_queue_wait_ms: 0.0,
                busy_fraction: 0.0,
                total: 0,
            },
            gpu,
            capacity: Some(wire::CapacityStats {
                per_s: 1500.0,
                source: wire::CapacitySource::Calibration,
                calibrated_per_s: Some(1500.0),
                calibrated_tokens_per_query: Some(12.0),
                observed_per_s: None,
                tokens_per_query: None,
                sessions: 2,
                carried_over: false,
            }),
        };
        serde_json::to_value(stats).unwrap()
    }

    fn gpu(shared: bool, process: Option<f64>) -> wire::GpuTelemetry {
        wire::GpuTelemetry::Available(wire::GpuSample {
            source: "nvml".into(),
            sampled_at_unix_ms: 1,
            age_ms: 0,
            device: wire::GpuDevice {
                index: 0,
                uuid: "GPU-x".into(),
                name: "H100".into(),
                utilization_pct: 80.0,
                memory_utilization_pct: 10.0,
                memory_used_bytes: 1,
                memory_total_bytes: 4,
                power_watts: None,
                power_limit_watts: None,
                sm_clock_mhz: None,
            },
            process: wire::GpuProcess { pid: 1, sm_utilization_pct: process, memory_used_bytes: None },
            shared,
        })
    }

    fn view(v: &serde_json::Value) -> StatsView {
        StatsView::parse(v.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn reads_the_capacity_and_the_queries_of_full_batches() {
        let mut doc = full(gpu(false, None));
        assert_eq!(view(&doc).capacity(), Some((1500.0, 64)), "32 rows x 2 sessions");
        doc.as_object_mut().unwrap().remove("capacity");
        assert_eq!(view(&doc).capacity(), None, "a worker that predates it");
        doc["capacity"] = serde_json::json!({"per_s": 0.0, "source": "observed", "sessions": 1});
        assert_eq!(view(&doc).capacity(), None, "no zero in place of a figure");
    }

    #[test]
    fn reads_what_the_worker_writes() {
        let v = view(&full(gpu(false, Some(20.0))));
        assert!(v.schema_matches());
        assert!(v.ready && !v.draining);
        assert_eq!(v.reported_queue(), 7);
        assert_eq!(v.reported_queue_tokens(), Some(70));
        assert_eq!(v.gpu_utilization_pct(), Some(80.0));
        assert_eq!(v.gpu_memory_used_ratio(), Some(0.25));
    }

    #[test]
    fn a_worker_without_token_figures_has_no_token_queue_not_a_zero() {
        let mut v = full(gpu(false, None));
        let queue = v["queue"].as_object_mut().unwrap();
        queue.remove("queued_tokens");
        queue.remove("in_flight_tokens");
        assert_eq!(view(&v).reported_queue_tokens(), None);
        assert_eq!(view(&v).reported_queue(), 7);
    }

    #[test]
    fn a_shared_gpu_counts_the_workers_own_utilization() {
        assert_eq!(view(&full(gpu(true, Some(20.0)))).gpu_utilization_pct(), Some(20.0));
        assert_eq!(view(&full(gpu(true, None))).gpu_utilization_pct(), Some(80.0), "no process figure");
        let cpu = full(wire::GpuTelemetry::Unavailable { reason: "worker runs on cpu".into() });
        assert_eq!(view(&cpu).gpu_utilization_pct(), None);
        assert_eq!(view(&cpu).gpu_memory_used_ratio(), None);
    }

    #[test]
    fn unknown_fields_and_statuses_are_ignored_and_a_new_schema_is_told() {
        let mut v = full(gpu(false, None));
        v["schema_version"] = 2.into();
        v["rates"] = serde_json::json!("a field that changed shape");
        v["something_new"] = serde_json::json!({"x": 1});
        v["queue"]["queued_tokens"] = 300.into();
        v["queue"]["in_flight_tokens"] = 200.into();
        let parsed = view(&v);
        assert!(!parsed.schema_matches());
        assert_eq!(parsed.reported_queue(), 7);
        assert_eq!(parsed.reported_queue_tokens(), Some(500));
        v["gpu"] = serde_json::json!({"status": "throttled", "reason": "a status from the future"});
        assert_eq!(view(&v).gpu_utilization_pct(), None);
    }

    #[test]
    fn a_document_without_the_queue_is_rejected() {
        let mut v = full(gpu(false, None));
        v.as_object_mut().unwrap().remove("queue");
        assert!(StatsView::parse(v.to_string().as_bytes()).is_err());
    }
}
