//! The served metrics and the `ExternalMetricValueList` the HPA decodes (wire shape checked
//! against the `k8s-metrics` crate's types in the tests).
//!
//! Fail-static: a pool whose workers went blind keeps the signal they last justified (the signal
//! never falls below the number of blind workers), so a stale pool is served, never an error.
//! A value that does not exist is left out, never replaced by a zero: a pool whose signal was
//! never computed, and `gateway_pool_gpu_memory_used_ratio` of a pool with no GPU reading. An
//! empty list makes the HPA keep its replica count ("no metrics returned"), which is the safe
//! answer for a value nobody has measured.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, Time};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::selector::LabelSelector;
use super::source::PoolView;

pub const GROUP: &str = "external.metrics.k8s.io";
pub const VERSION: &str = "v1beta1";
pub const GROUP_VERSION: &str = "external.metrics.k8s.io/v1beta1";
pub const LIST_KIND: &str = "ExternalMetricValueList";

/// One served metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    Signal,
    SignalQueue,
    SignalGpu,
    ReadyWorkers,
    GpuMemoryUsedRatio,
}

impl Metric {
    pub const ALL: [Self; 5] =
        [Self::Signal, Self::SignalQueue, Self::SignalGpu, Self::ReadyWorkers, Self::GpuMemoryUsedRatio];

    pub fn name(self) -> &'static str {
        match self {
            Self::Signal => "gateway_pool_signal",
            Self::SignalQueue => "gateway_pool_signal_queue",
            Self::SignalGpu => "gateway_pool_signal_gpu",
            Self::ReadyWorkers => "gateway_pool_ready_workers",
            Self::GpuMemoryUsedRatio => "gateway_pool_gpu_memory_used_ratio",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    pub fn description(self) -> &'static str {
        match self {
            Self::Signal => {
                "Replicas the pool needs at target: max(queue term, GPU term) summed over workers, plus the \
                 gateway's backlog; stale workers hold their last value. Use with target.type AverageValue, \
                 averageValue 1."
            }
            Self::SignalQueue => "The signal's queue term: queued plus in-flight queries over the per-replica target.",
            Self::SignalGpu => "The signal's GPU term: GPU utilization over the per-replica target.",
            Self::ReadyWorkers => "Workers of the pool receiving traffic now.",
            Self::GpuMemoryUsedRatio => {
                "Highest device memory used / total among the pool's workers with a fresh GPU reading \
                 (absent without one)."
            }
        }
    }

    /// The value for a pool; `None` when there is none to serve.
    pub fn value(self, p: &PoolView) -> Option<f64> {
        if p.updated_unix_ms == 0 {
            return None;
        }
        match self {
            Self::Signal => Some(p.signal),
            Self::SignalQueue => Some(p.queue),
            Self::SignalGpu => Some(p.gpu),
            Self::ReadyWorkers => Some(p.ready_workers as f64),
            Self::GpuMemoryUsedRatio => p.gpu_memory_used_ratio,
        }
    }
}

/// A value as a Kubernetes quantity in its canonical form: milli-units (`1500m`), whole numbers
/// without a suffix (`2`). `None` for a value that is not a finite number.
pub fn milli_quantity(v: f64) -> Option<Quantity> {
    if !v.is_finite() {
        return None;
    }
    let m = (v.max(0.0) * 1000.0).round() as i64;
    Some(Quantity(if m % 1000 == 0 { (m / 1000).to_string() } else { format!("{m}m") }))
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExternalMetricValueList {
    kind: &'static str,
    api_version: &'static str,
    metadata: ListMeta,
    pub items: Vec<ExternalMetricValue>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExternalMetricValue {
    pub metric_name: &'static str,
    pub metric_labels: BTreeMap<String, String>,
    pub timestamp: Time,
    /// Seconds; 0: an instantaneous value, not a rate over a window.
    pub window: i64,
    pub value: Quantity,
}

/// The answer to `GET .../namespaces/{namespace}/{metric}?labelSelector=...`: one item per pool
/// of the namespace whose labels match.
pub fn list(metric: Metric, pools: &[PoolView], selector: &LabelSelector) -> ExternalMetricValueList {
    let items = pools
        .iter()
        .filter(|p| selector.matches(&p.labels))
        .filter_map(|p| {
            let value = milli_quantity(metric.value(p)?)?;
            let at = Timestamp::from_millisecond(i64::try_from(p.updated_unix_ms).ok()?).ok()?;
            Some(ExternalMetricValue {
                metric_name: metric.name(),
                metric_labels: p.labels.clone(),
                timestamp: Time(at),
                window: 0,
                value,
            })
        })
        .collect();
    ExternalMetricValueList { kind: LIST_KIND, api_version: GROUP_VERSION, metadata: ListMeta::default(), items }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_canonical_milli_units() {
        for (v, want) in [(1.5, "1500m"), (2.0, "2"), (0.0, "0"), (0.8734, "873m"), (0.0004, "0"), (12.3456, "12346m")]
        {
            assert_eq!(milli_quantity(v).unwrap().0, want, "{v}");
        }
        assert!(milli_quantity(f64::NAN).is_none());
        assert!(milli_quantity(f64::INFINITY).is_none());
    }

    fn pool(name: &str, ms: u64) -> PoolView {
        PoolView {
            name: name.to_owned(),
            namespace: "ml".to_owned(),
            labels: BTreeMap::from([("pool".to_owned(), name.to_owned())]),
            signal: 2.25,
            queue: 2.25,
            gpu: 0.5,
            ready_workers: 3,
            gpu_memory_used_ratio: None,
            stale: false,
            updated_unix_ms: ms,
        }
    }

    #[test]
    fn missing_values_are_left_out_not_zeroed() {
        let pools = [pool("a", 1_700_000_000_123), pool("b", 0)];
        let all = LabelSelector::default();
        let l = list(Metric::Signal, &pools, &all);
        assert_eq!(l.items.len(), 1, "a pool never computed is not served");
        assert_eq!(l.items[0].value.0, "2250m");
        assert!(list(Metric::GpuMemoryUsedRatio, &pools, &all).items.is_empty());
        let json = serde_json::to_value(&l).unwrap();
        assert_eq!(json["items"][0]["timestamp"], "2023-11-14T22:13:20Z");
        assert_eq!(json["items"][0]["window"], 0);
        assert_eq!(json["kind"], "ExternalMetricValueList");
        assert_eq!(json["apiVersion"], "external.metrics.k8s.io/v1beta1");
        assert_eq!(json["metadata"], serde_json::json!({}));
    }

    #[test]
    fn names_round_trip() {
        for m in Metric::ALL {
            assert_eq!(Metric::from_name(m.name()), Some(m));
        }
        assert_eq!(Metric::from_name("gateway_pool"), None);
    }
}
