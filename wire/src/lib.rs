//! JSON wire types crossing processes: `/predict`, error bodies and `/v1/stats` (the worker
//! writes them, the gateway reads them), `/v1/signal` (the gateway writes it, the load generator
//! reads it).
//!
//! Everything here is plain data with `serde` derives, so every party decodes the same bytes the
//! same way. The schemas are documented in `docs/API.md`; a change that removes or renames a field
//! bumps [`STATS_SCHEMA_VERSION`].
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of the [`WorkerStats`] document served at `GET /v1/stats`.
pub const STATS_SCHEMA_VERSION: u32 = 1;

// ---------------------------------------------------------------------------------------------
// /predict
// ---------------------------------------------------------------------------------------------

/// Largest `POST /predict` body accepted by default, by the worker (`--max-body-bytes`) and so by
/// the gateway in front of it (the same flag): one limit end to end, so that the gateway never
/// buffers and forwards a body the worker refuses.
pub const DEFAULT_MAX_BODY_BYTES: usize = 256 << 10;

/// Body of `POST /predict`: exactly one of `query` or `queries`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredictRequest {
    /// One query; the answer is a single [`Prediction`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Several queries; the answer is [`PredictBatchResponse`], in the same order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queries: Option<Vec<String>>,
    /// Also return the score of every class.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_scores: bool,
}

/// The value of a query string that is `query=VALUE` and nothing else, decoded in one pass as
/// the form decoder decodes it (`+` is a space, `%` and two hex digits a byte, any other `%`
/// itself); `None` for any other shape, or a value that is not UTF-8 once decoded. The worker's
/// fast path for `GET /predict?query=...` and the gateway's test of what it may merge, so both
/// read a query string the same way.
pub fn decode_lone_query(raw: &str) -> Option<String> {
    let value = raw.strip_prefix("query=")?.as_bytes();
    if value.contains(&b'&') {
        return None;
    }
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut decoded = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        let byte = match value[i] {
            b'+' => b' ',
            b'%' => match (value.get(i + 1).and_then(|&b| hex(b)), value.get(i + 2).and_then(|&b| hex(b))) {
                (Some(high), Some(low)) => {
                    i += 2;
                    (high * 16 + low) as u8
                }
                _ => b'%',
            },
            other => other,
        };
        decoded.push(byte);
        i += 1;
    }
    String::from_utf8(decoded).ok()
}

/// Query string of `GET /predict?query=...&all_scores=true`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictParams {
    pub query: Option<String>,
    #[serde(default)]
    pub all_scores: bool,
}

/// The classification of one query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The most likely label, e.g. `PlayMusic`.
    pub intent: String,
    /// Its softmax probability, in `[0, 1]`.
    pub score: f32,
    /// Every label's probability, when asked for with `all_scores`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scores: Option<BTreeMap<String, f32>>,
    /// The model's raw outputs, in label order: only in the Open Inference Protocol's answers
    /// that ask for its `logits` output (never in `/predict`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logits: Option<Vec<f32>>,
}

/// Answer to `POST /predict` with `queries`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictBatchResponse {
    pub predictions: Vec<Prediction>,
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Every error body, from worker and gateway alike: `{"error": "...", "error_type": "..."}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Human-readable explanation; wording may change between releases.
    pub error: String,
    /// Stable machine-readable kind; also the `error_type` label of the error metrics.
    pub error_type: ErrorType,
}

/// The stable error kinds. Serialized in `snake_case`; never renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    /// The request is malformed: bad JSON, wrong types, empty query, too many queries (400).
    InvalidRequest,
    /// A query is longer than the limit (400), or the body is too large (413).
    TooLarge,
    /// The server is at capacity; retry after `Retry-After` seconds (429 or 503).
    Overloaded,
    /// The server is shutting down or not ready yet; retry elsewhere (503).
    Unavailable,
    /// No answer in time (504).
    Timeout,
    /// An upstream worker failed or could not be reached (502).
    Upstream,
    /// No such route or pool (404).
    NotFound,
    /// The method is not allowed on this route (405).
    MethodNotAllowed,
    /// A bug or an inference failure; details are in the server's log (500).
    Internal,
}

impl ErrorType {
    /// The `snake_case` name, as serialized and used as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::TooLarge => "too_large",
            Self::Overloaded => "overloaded",
            Self::Unavailable => "unavailable",
            Self::Timeout => "timeout",
            Self::Upstream => "upstream",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::Internal => "internal",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// /v1/stats
// ---------------------------------------------------------------------------------------------

/// `GET /v1/stats`: a worker's load and GPU telemetry, polled by the gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerStats {
    /// [`STATS_SCHEMA_VERSION`] of the worker that wrote this.
    pub schema_version: u32,
    /// Unique per worker process (`hostname/pid`), so a restart is visible.
    pub worker_id: String,
    /// Wall-clock time this snapshot was taken, milliseconds since the Unix epoch.
    pub timestamp_unix_ms: u64,
    /// Seconds since the worker started.
    pub uptime_s: f64,
    /// Model loaded and not draining: the same answer as `/readyz`.
    pub ready: bool,
    /// SIGTERM received; finishing accepted work, taking none.
    pub draining: bool,
    pub model: ModelInfo,
    pub queue: QueueStats,
    pub rates: RateStats,
    pub batches: BatchStats,
    pub gpu: GpuTelemetry,
    /// What one replica of this worker serves: the divisor of the gateway's scaling signal.
    /// `None` until the worker knows (calibrating), and from workers that predate it (added
    /// within schema version 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityStats>,
}

/// One replica's capacity: the queries per second it serves when saturated, with the current
/// mix of query lengths (`docs/signal.md`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CapacityStats {
    /// Queries per second at saturation: the larger of the calibration's figure (scaled to the
    /// recent tokens per query) and the figure observed from recent batches.
    pub per_s: f64,
    /// Which of the two `per_s` is.
    pub source: CapacitySource,
    /// Queries per second measured by the start-up calibration (full batches through the real
    /// pipeline, before the worker turned ready, or while it serves after a carried-over start),
    /// or set by `--capacity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibrated_per_s: Option<f64>,
    /// Real tokens per query of the calibration's queries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibrated_tokens_per_query: Option<f64>,
    /// Sessions x rows / backend time over the stats window: what the backend does while busy.
    /// `None` while the window holds too few batches to tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_per_s: Option<f64>,
    /// Real tokens per query over the stats window (`None` when no batch ran in it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_query: Option<f64>,
    /// Backend sessions that run batches at the same time (the light lane's).
    pub sessions: u64,
    /// The calibrated figure is the last calibration's of the same model, device and settings,
    /// carried over from the worker's capacity cache until its own calibration replaces it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub carried_over: bool,
}

/// Where [`CapacityStats::per_s`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacitySource {
    /// The start-up calibration, scaled to the recent tokens per query.
    Calibration,
    /// Recent batches (larger than the calibration's figure).
    Observed,
    /// The operator's `--capacity`.
    Configured,
}

/// What the worker serves and where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// Model directory name, e.g. `snips-minilm-int8`.
    pub name: String,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// Class labels, in output order.
    pub labels: Vec<String>,
}

/// Instantaneous load. `queued` and `in_flight` are disjoint: a request is counted in exactly one
/// of them from admission until its answer is ready, so `queued + in_flight` is the worker's load.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QueueStats {
    /// Admitted queries waiting for a batch (tokenizing or queued).
    pub queued: u64,
    /// Queries in the batch the backend is running or has been handed.
    pub in_flight: u64,
    /// Most queries admitted at once (`queued + in_flight`); beyond it the worker answers 429.
    pub capacity: u64,
    /// Most rows in one batch.
    pub max_batch_rows: u64,
    /// Token budget of one batch (padded length times rows).
    pub max_batch_tokens: u64,
    /// Longest time a query waits for companions before its batch runs, in milliseconds.
    pub max_queue_delay_ms: f64,
    /// Tokens of the `queued` queries (a query's cost: batch time grows with tokens). Added
    /// within schema version 1; 0 from workers that predate it.
    #[serde(default)]
    pub queued_tokens: u64,
    /// Tokens of the `in_flight` queries.
    #[serde(default)]
    pub in_flight_tokens: u64,
    /// Most tokens admitted at once (`queued_tokens + in_flight_tokens`); beyond it 429.
    #[serde(default)]
    pub capacity_tokens: u64,
    /// Queries of heavy requests admitted (queued or in flight), a part of `queued + in_flight`.
    #[serde(default)]
    pub heavy_queries: u64,
    /// Their tokens, a part of `queued_tokens + in_flight_tokens`.
    #[serde(default)]
    pub heavy_tokens: u64,
    /// A request of more tokens than this is heavy: it runs in its own lane and its class may hold
    /// at most half of each capacity.
    #[serde(default)]
    pub heavy_request_tokens: u64,
}

/// Request rates over a sliding window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateStats {
    /// Length of the window the rates are averaged over, seconds.
    pub window_s: f64,
    /// Queries admitted per second.
    pub arrival_per_s: f64,
    /// Queries answered per second.
    pub completion_per_s: f64,
    /// Queries refused with 429 per second.
    pub rejected_per_s: f64,
    /// Totals since start.
    pub admitted_total: u64,
    pub completed_total: u64,
    pub rejected_total: u64,
}

/// Batches run over the same window as [`RateStats`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BatchStats {
    /// Batches run in the window.
    pub count: u64,
    /// Mean rows per batch in the window (0 when none ran).
    pub mean_rows: f64,
    /// Mean padded sequence length in the window.
    pub mean_padded_len: f64,
    /// Mean backend time per batch in the window, milliseconds.
    pub mean_inference_ms: f64,
    /// Mean time a query waited in the queue in the window, milliseconds.
    pub mean_queue_wait_ms: f64,
    /// Fraction of the window the backend spent running batches, in `[0, 1]`.
    /// On a launch-bound GPU this reaches 1 long before NVML's utilization does.
    pub busy_fraction: f64,
    /// Total batches since start.
    pub total: u64,
}

/// GPU telemetry: a sample from NVML, or the reason there is none. Never zeros in place of a
/// reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum GpuTelemetry {
    Available(GpuSample),
    Unavailable {
        /// Why, e.g. `worker runs on cpu` or `NVML init failed: ...`.
        reason: String,
    },
}

/// One NVML reading of the worker's GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// Always `nvml`.
    pub source: String,
    /// When the sample was read, milliseconds since the Unix epoch.
    pub sampled_at_unix_ms: u64,
    /// Age of the sample when this snapshot was taken, milliseconds.
    pub age_ms: u64,
    pub device: GpuDevice,
    pub process: GpuProcess,
    /// Other compute processes run on the same GPU.
    pub shared: bool,
}

/// Device-wide figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuDevice {
    /// NVML index (not the CUDA ordinal under `CUDA_VISIBLE_DEVICES`).
    pub index: u32,
    pub uuid: String,
    pub name: String,
    /// Percent of the last sample period in which a kernel ran (a duty cycle, not saturation).
    pub utilization_pct: f64,
    /// Percent of the period device memory was read or written.
    pub memory_utilization_pct: f64,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_watts: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_watts: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<u32>,
}

/// This worker process on that device. Fields are `None` when NVML has no reading for it (no
/// kernel ran since the last sample, or the driver does not expose it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_utilization_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<u64>,
}

// ---------------------------------------------------------------------------------------------
// /v1/signal
// ---------------------------------------------------------------------------------------------

// The gateway computes these (`gateway/src/signal`) and serves them at `GET /v1/signal` and
// `GET /pools/{pool}/signal` on its admin port; the load generator reads them (the scaler reads
// the external metrics API instead).
// Fields missing from a document, but `pool` and `signal`, read as their defaults (a reader of an
// older or newer gateway).

/// What `/v1/signal` serves and the HPA will read later.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PoolSignal {
    pub pool: String,
    /// The pool's Kubernetes namespace (`--pool-namespace`, or its Service's).
    #[serde(default)]
    pub namespace: String,
    /// Replicas the pool needs at target: `max(smoothed raw, blind workers)`.
    pub signal: f64,
    /// Some worker's telemetry is stale (the signal holds and will not fall below `blind`).
    #[serde(default)]
    pub stale: bool,
    #[serde(default)]
    pub components: RawSignal,
    /// Workers receiving traffic now.
    #[serde(default)]
    pub ready_workers: usize,
    /// Requests waiting at the gateway for a ready worker now (held for a pool at zero, or in
    /// the short wait of a pool whose workers are out of rotation), as the admin port reads it.
    #[serde(default)]
    pub held_requests: u64,
    /// Highest device memory used / total among the workers with a fresh GPU reading; `None`
    /// when no worker has one (CPU workers, no driver): never a zero in place of a reading.
    #[serde(default)]
    pub gpu_memory_used_ratio: Option<f64>,
    /// `capacity` (the calibrated signal) or `queue` (the fallback: no capacity known yet).
    #[serde(default)]
    pub mode: SignalMode,
    /// Queries per second offered to the pool (admitted or refused) over `--demand-window`.
    #[serde(default)]
    pub demand_per_s: f64,
    /// One replica's capacity `C`, queries per second: the mean of the fresh workers' reports,
    /// or the last known; `None` before any.
    #[serde(default)]
    pub capacity_per_s: Option<f64>,
    /// The target utilization `u`.
    #[serde(default)]
    pub target_utilization: f64,
    #[serde(default)]
    pub targets_queue: f64,
    #[serde(default)]
    pub targets_gpu_pct: f64,
    #[serde(default)]
    pub updated_unix_ms: u64,
}

/// How a pool's signal was computed (`docs/signal.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalMode {
    /// Offered demand over capacity.
    Capacity,
    /// Queue and GPU over their targets: no capacity known yet.
    #[default]
    Queue,
}

/// The unsmoothed pool signal and its parts.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawSignal {
    pub raw: f64,
    /// Calibrated: the workers' backlog beyond what they clear within the latency target, in
    /// replicas. Fallback: the sum of the fresh workers' queue terms.
    pub queue: f64,
    /// Calibrated: `sum gpu / 100 / u` (the GPUs' own view; a floor only where saturated).
    /// Fallback: the sum of the fresh workers' GPU terms.
    pub gpu: f64,
    /// Sum of the held pressures of stale workers (fallback only).
    pub held: f64,
    /// The requests waiting at the gateway for a worker, in replicas.
    pub backlog: f64,
    /// Calibrated: `lambda / (C x u)`, the offered demand in replicas (0 in the fallback).
    pub demand: f64,
    /// Calibrated: what saturated workers ask for at least (0 in the fallback).
    pub saturation: f64,
    pub workers: usize,
    /// Workers with stale telemetry: the floor of the signal.
    pub blind: usize,
    /// Fresh workers that reported no GPU utilization.
    pub gpu_missing: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_type_serializes_as_its_label() {
        for t in [
            ErrorType::InvalidRequest,
            ErrorType::TooLarge,
            ErrorType::Overloaded,
            ErrorType::Unavailable,
            ErrorType::Timeout,
            ErrorType::Upstream,
            ErrorType::NotFound,
            ErrorType::MethodNotAllowed,
            ErrorType::Internal,
        ] {
            assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{}\"", t.as_str()));
        }
    }

    #[test]
    fn unavailable_gpu_carries_its_reason_and_no_numbers() {
        let t = GpuTelemetry::Unavailable { reason: "worker runs on cpu".into() };
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v, serde_json::json!({"status": "unavailable", "reason": "worker runs on cpu"}));
    }

    fn sample(shared: bool, process: Option<f64>) -> GpuTelemetry {
        GpuTelemetry::Available(GpuSample {
            source: "nvml".into(),
            sampled_at_unix_ms: 1,
            age_ms: 0,
            device: GpuDevice {
                index: 0,
                uuid: "GPU-x".into(),
                name: "H100".into(),
                utilization_pct: 80.0,
                memory_utilization_pct: 10.0,
                memory_used_bytes: 1,
                memory_total_bytes: 2,
                power_watts: None,
                power_limit_watts: None,
                sm_clock_mhz: None,
            },
            process: GpuProcess { pid: 1, sm_utilization_pct: process, memory_used_bytes: None },
            shared,
        })
    }

    #[test]
    fn gpu_samples_round_trip() {
        let v = serde_json::to_value(sample(true, Some(20.0))).unwrap();
        assert_eq!(v["status"], "available");
        let back: GpuTelemetry = serde_json::from_value(v).unwrap();
        assert_eq!(back, sample(true, Some(20.0)));
    }

    #[test]
    fn queue_stats_without_the_token_fields_still_decode() {
        let old = r#"{"queued": 3, "in_flight": 2, "capacity": 1024, "max_batch_rows": 32,
                      "max_batch_tokens": 4096, "max_queue_delay_ms": 0.0}"#;
        let q: QueueStats = serde_json::from_str(old).unwrap();
        assert_eq!((q.queued, q.in_flight, q.queued_tokens, q.capacity_tokens), (3, 2, 0, 0));
    }

    #[test]
    fn predict_request_rejects_unknown_fields() {
        assert!(serde_json::from_str::<PredictRequest>(r#"{"query":"a","foo":1}"#).is_err());
        let r: PredictRequest = serde_json::from_str(r#"{"queries":["a","b"]}"#).unwrap();
        assert_eq!(r.queries.unwrap().len(), 2);
    }
}
