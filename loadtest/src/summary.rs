//! The record of a run (`--summary FILE`, and what the HTML report is drawn from), its table on
//! stdout, and one JSON line per phase (`--json`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::client::Failed;
use crate::stats::{Acc, Percentiles};

/// The whole run. Fields added after the first version default when absent, so that older
/// records still render.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// `loadtest` version that made it.
    pub loadtest: String,
    pub title: String,
    pub started_unix_ms: u64,
    /// The command line.
    pub command: Vec<String>,
    pub target: TargetInfo,
    /// `open` (a rate profile) or `closed` (concurrency steps).
    pub mode: String,
    /// The `--rate` profile as written (open loop).
    pub profile: Option<String>,
    /// Wall-clock seconds from the start to the last answer.
    pub seconds: f64,
    /// Seconds per timeline row.
    pub interval_s: f64,
    /// All measured phases together (warm-up left out).
    pub total: PhaseSummary,
    pub phases: Vec<PhaseSummary>,
    /// Where each phase (and warm-up) lies on the timeline.
    pub spans: Vec<SpanInfo>,
    pub timeline: Vec<Tick>,
    /// The measured latency distribution: (percentile, ms) points.
    #[serde(default)]
    pub latency_spectrum: Vec<(f64, f64)>,
    /// Open loop: the same for the service time (from the write).
    #[serde(default)]
    pub service_spectrum: Vec<(f64, f64)>,
    /// Open loop: latency from the moment each request was written (without waiting for a free
    /// sender or the timer).
    #[serde(default)]
    pub service: Option<Percentiles>,
    /// Open loop: how late after its due time each request was written.
    #[serde(default)]
    pub send_lag: Option<Percentiles>,
    #[serde(default)]
    pub connections_opened: u64,
    /// Open loop: requests that found all `--max-in-flight` senders busy and waited for one (the
    /// wait is part of their latency).
    #[serde(default)]
    pub waited: u64,
    /// Requests sent again on a new connection because the server had closed the kept-alive one.
    #[serde(default)]
    pub resent: u64,
    #[serde(default)]
    pub signal: Option<SignalTrack>,
    /// Caller series (`--series`): name -> (seconds from the start, value), in time order.
    #[serde(default)]
    pub series: BTreeMap<String, Vec<(f64, f64)>>,
    #[serde(default)]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetInfo {
    pub url: String,
    pub path: String,
    pub method: String,
    pub batch: usize,
    pub http: String,
    pub threads: usize,
    pub timeout_s: f64,
}

/// Figures of one phase (a closed-loop step, or a part of the rate profile).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseSummary {
    pub label: String,
    /// Closed loop: the clients.
    pub concurrency: Option<usize>,
    /// Open loop: the mean offered rate, requests/s.
    pub rate: Option<f64>,
    pub seconds: f64,
    /// Finished requests: `ok` plus every error.
    pub requests: u64,
    pub ok: u64,
    /// Successes per second.
    pub throughput_per_s: f64,
    /// Latency of the successes (0 when there were none).
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// Failures by label: `429 overloaded`, `connect: connection refused`, `timeout`.
    pub errors: BTreeMap<String, u64>,
    /// The same, structured: status and `error_type`, or the transport kind.
    pub errors_by_kind: Vec<ErrorCount>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorCount {
    #[serde(flatten)]
    pub failed: Failed,
    pub count: u64,
}

impl PhaseSummary {
    pub fn new(label: String, concurrency: Option<usize>, rate: Option<f64>, seconds: f64, acc: &Acc) -> Self {
        let p = Percentiles::of(&acc.latency).unwrap_or_default();
        Self {
            label,
            concurrency,
            rate,
            seconds,
            requests: acc.finished(),
            ok: acc.ok,
            throughput_per_s: if seconds > 0.0 { acc.ok as f64 / seconds } else { 0.0 },
            p50_ms: p.p50_ms,
            p90_ms: p.p90_ms,
            p99_ms: p.p99_ms,
            p999_ms: p.p999_ms,
            max_ms: p.max_ms,
            mean_ms: p.mean_ms,
            errors: acc.errors.iter().map(|(k, v)| (k.label(), *v)).collect(),
            errors_by_kind: acc.errors.iter().map(|(k, v)| ErrorCount { failed: k.clone(), count: *v }).collect(),
        }
    }

    pub fn failed(&self) -> u64 {
        self.errors.values().sum()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanInfo {
    pub label: String,
    pub warmup: bool,
    pub start: f64,
    pub end: f64,
}

/// One timeline row: what finished in `(t - dt, t]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tick {
    pub t: f64,
    pub dt: f64,
    /// Open loop: requests due in the interval.
    pub offered: Option<u64>,
    pub sent: u64,
    pub ok: u64,
    pub failed: u64,
    /// Failures by label.
    pub errors: BTreeMap<String, u64>,
    /// Latency of the successes that finished in the interval.
    pub latency: Option<Percentiles>,
    /// Requests outstanding at `t`.
    pub in_flight: u64,
    /// Connections open at `t`.
    pub connections: u64,
}

/// The gateway's scaling signal, sampled during the run (`--gateway-admin`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SignalTrack {
    pub url: String,
    pub pool: String,
    pub samples: Vec<SignalSample>,
    pub failures: u64,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct SignalSample {
    pub t: f64,
    /// Replicas the pool needs at target.
    pub signal: f64,
    pub stale: bool,
    /// The signal's unsmoothed value and its queue and GPU terms, in replicas.
    pub raw: f64,
    pub queue: f64,
    pub gpu: f64,
    /// Workers in the pool (its replicas now).
    pub workers: u64,
    /// Requests the gateway held waiting for a ready worker (a pool waking from zero).
    #[serde(default)]
    pub held: u64,
}

impl Summary {
    /// The table printed at the end: one row per phase, then a total when there are several.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let width = self.phases.iter().map(|p| p.label.chars().count()).max().unwrap_or(4).clamp(8, 28);
        out.push_str(&format!(
            "{:>width$} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}  errors\n",
            "load", "ok", "req/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
        ));
        let row = |p: &PhaseSummary| {
            let errors = if p.errors.is_empty() {
                "-".to_owned()
            } else {
                p.errors.iter().map(|(k, v)| format!("{v}x {k}")).collect::<Vec<_>>().join(", ")
            };
            format!(
                "{:>width$} {:>8} {:>10.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}  {errors}\n",
                p.label, p.ok, p.throughput_per_s, p.p50_ms, p.p90_ms, p.p99_ms, p.p999_ms, p.max_ms
            )
        };
        for p in &self.phases {
            out.push_str(&row(p));
        }
        if self.phases.len() > 1 {
            out.push_str(&row(&self.total));
        }
        out
    }

    /// Notes worth a line under the table.
    pub fn footer(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.mode == "open" {
            let offered = self.timeline.iter().filter_map(|t| t.offered).sum::<u64>();
            let sent: u64 = self.timeline.iter().map(|t| t.sent).sum();
            lines.push(format!(
                "open loop: {sent} of {offered} due requests sent; latency runs from each request's due time"
            ));
            if let (Some(s), Some(l)) = (&self.service, &self.send_lag) {
                lines.push(format!(
                    "  service time (from the write) p50 {:.2} ms, p99 {:.2} ms; send lag p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                    s.p50_ms, s.p99_ms, l.p50_ms, l.p99_ms, l.max_ms
                ));
            }
        }
        if self.waited > 0 {
            lines.push(format!(
                "  {} request(s) found all --max-in-flight senders busy and waited for one (the wait is in their latency)",
                self.waited
            ));
        }
        lines.extend(self.notes.iter().cloned());
        lines
    }

    /// One JSON object per phase, a line each (the `--json` output).
    pub fn json_lines(&self) -> String {
        self.phases.iter().map(|p| serde_json::to_string(p).expect("plain data") + "\n").collect()
    }
}
