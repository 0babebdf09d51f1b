//! The HPA controller's decision for one `External` metric with an `AverageValue` target, ported
//! from kube-controller-manager (`pkg/controller/podautoscaler`):
//!
//! - `reconcileAutoscaler` (horizontal.go): the initial recommendation, zero replicas that the
//!   controller did not scale to zero disable scaling (`ScalingDisabled`), the min/max clamps that
//!   bypass the metric, a metric that cannot be read leaves the replicas alone (`ScalingActive`
//!   false), `rescale = desired != current`, scale events stored only when it rescales, and the
//!   `ScaledToZero` condition (KEP-2021, `HPAScaleToZero`) that lets it scale from zero again;
//! - `GetExternalPerPodMetricReplicas` (replica_calculator.go): the sum of the items' milli-values
//!   (capped at `MaxInt64`), `usageRatio = sum / (target * statusReplicas)`, unchanged while
//!   `Tolerances.isWithin` (`1 - scaleDown <= ratio <= 1 + scaleUp`, KEP-4951), else
//!   `ceil(sum / target)` (capped at `MaxInt32`); `tolerancesForHpa` picks each direction's
//!   `behavior.*.tolerance` over the cluster-wide one;
//! - `normalizeDesiredReplicasWithBehaviors`: `stabilizeRecommendationWithBehaviors` (the lowest
//!   recommendation within the scale-up window and the highest within the scale-down window bound
//!   the current count), then `convertDesiredReplicasWithBehaviorRate` with
//!   `calculateScaleUpLimitWithScalingRules` / `calculateScaleDownLimitWithBehaviors` over the
//!   scale events of each policy's period, `selectPolicy` Max/Min/Disabled, and min/max replicas;
//! - `storeScaleEvent`, `markScaleEventsOutdated`, `getReplicasChangePerPeriod`.
//!
//! Time is explicit (`now`), so the same code runs live (tokio's clock, paused in tests) and in
//! `scaler replay`. Comparisons keep kube's strictness (`After`, `Before`).

use std::time::Duration;

use tokio::time::Instant;

use crate::behavior::{Behavior, PolicyType, Rules, SelectPolicy};

/// What the controller is told to keep.
#[derive(Debug, Clone)]
pub struct Spec {
    /// `minReplicas`; 0 is scale to zero (`HPAScaleToZero`, an External metric).
    pub min_replicas: i32,
    pub max_replicas: i32,
    /// `target.averageValue` in milli-units (`resource.Quantity.MilliValue()`).
    pub target_milli: i64,
    /// `--horizontal-pod-autoscaler-tolerance` (0.1): the cluster-wide tolerance.
    pub tolerance: f64,
    pub behavior: Behavior,
    /// The metric's name, for the reasons (`"gateway_pool_signal above target"`).
    pub metric_name: String,
}

impl Spec {
    /// `tolerancesForHpa`: each direction's `behavior.*.tolerance`, else the cluster-wide one.
    pub fn tolerances(&self) -> Tolerances {
        Tolerances {
            scale_down: self.behavior.scale_down.tolerance.unwrap_or(self.tolerance),
            scale_up: self.behavior.scale_up.tolerance.unwrap_or(self.tolerance),
        }
    }
}

/// `Tolerances` (replica_calculator.go): the usage ratio's dead band, per direction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerances {
    pub scale_down: f64,
    pub scale_up: f64,
}

impl Tolerances {
    /// The same tolerance both ways (the cluster-wide flag alone).
    pub fn both(t: f64) -> Self {
        Self { scale_down: t, scale_up: t }
    }

    /// `isWithin`: `(1.0-t.scaleDown) <= usageRatio && usageRatio <= (1.0+t.scaleUp)`. A NaN ratio
    /// (0/0, no load on zero replicas) is not within.
    pub fn is_within(&self, ratio: f64) -> bool {
        (1.0 - self.scale_down) <= ratio && ratio <= (1.0 + self.scale_up)
    }
}

/// `GetExternalPerPodMetricReplicas`'s result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerPod {
    /// The proposal (`replicaCount`).
    pub replicas: i32,
    /// The items' sum, milli-units (capped at `i64::MAX`).
    pub usage: i64,
    /// The per-pod value kube reports in the status (`ceil(sum / statusReplicas)`); `None` on zero
    /// replicas, where kube's `int64(+Inf)` has no meaning.
    pub average: Option<i64>,
}

#[derive(Debug, Clone, Copy)]
struct Recommendation {
    replicas: i32,
    at: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScaleEvent {
    /// Replicas added (scale-up events) or removed (scale-down events), positive.
    pub change: i32,
    pub at: Instant,
    pub outdated: bool,
}

/// One reconciliation's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub current: i32,
    pub desired: i32,
    /// The metric's sum in milli-units, when it was read.
    pub metric_milli: Option<i64>,
    /// The per-pod value (`status.currentMetrics[].external.current.averageValue`).
    pub average_milli: Option<i64>,
    /// The proposal before stabilization and rate limits (`metricDesiredReplicas`).
    pub proposal: Option<i32>,
    /// Why: the rescale reason (`... above target`, `All metrics below target`, `Current number
    /// of replicas above Spec.MaxReplicas`, ...) or why nothing changed.
    pub reason: String,
    /// The `AbleToScale` reason (`ScaleUpStabilized`, `ScaleDownStabilized`, `ReadyForNewScale`).
    pub able_to_scale: &'static str,
    /// The `ScalingLimited` reason (`DesiredWithinRange`, `ScaleUpLimit`, `ScaleDownLimit`,
    /// `TooManyReplicas`, `TooFewReplicas`).
    pub limited: &'static str,
    /// `ScalingActive` false: the metric could not be used, or scaling is disabled at zero
    /// replicas (nothing changes).
    pub scaling_inactive: bool,
    /// The `ScaledToZero` condition after this sync: the controller scaled the target to zero.
    pub scaled_to_zero: bool,
}

impl Decision {
    pub fn rescale(&self) -> bool {
        self.desired != self.current
    }
}

/// The controller's memory for one HPA: recommendations, scale events, and the `ScaledToZero`
/// condition kept in the HPA's status.
#[derive(Debug, Clone)]
pub struct Controller {
    pub spec: Spec,
    /// `a.recommendations[key]`: `None` is Go's nil (never synced), which
    /// `recordInitialRecommendation` fills; an empty list is not.
    recommendations: Option<Vec<Recommendation>>,
    pub scale_up_events: Vec<ScaleEvent>,
    pub scale_down_events: Vec<ScaleEvent>,
    /// `status.conditions[ScaledToZero]` true.
    pub scaled_to_zero: bool,
}

impl Controller {
    pub fn new(spec: Spec) -> Self {
        Self {
            spec,
            recommendations: None,
            scale_up_events: Vec::new(),
            scale_down_events: Vec::new(),
            scaled_to_zero: false,
        }
    }

    /// One sync: `current` replicas now (the scale's spec and status: the scaler applies its
    /// decisions before the next sync), `metric` the items' values in milli-units or why they
    /// could not be read. The caller applies `desired` when [`Decision::rescale`].
    pub fn reconcile(&mut self, now: Instant, current: i32, metric: Result<&[i64], &str>) -> Decision {
        // recordInitialRecommendation
        self.recommendations.get_or_insert_with(|| vec![Recommendation { replicas: current, at: now }]);
        let min = self.spec.min_replicas;
        let max = self.spec.max_replicas;
        let mut d = Decision {
            current,
            desired: current,
            metric_milli: None,
            average_milli: None,
            proposal: None,
            reason: String::new(),
            able_to_scale: "ReadyForNewScale",
            limited: "DesiredWithinRange",
            scaling_inactive: false,
            scaled_to_zero: self.scaled_to_zero,
        };
        if current == 0 && !self.scaled_to_zero {
            // Zero replicas the controller did not scale to (a person paused the workload, or
            // minReplicas > 0): scaling is disabled. With ScaledToZero the metric is read.
            d.scaling_inactive = true;
            d.reason = "ScalingDisabled: scaling is disabled since the replica count of the target is zero".into();
            return d;
        } else if current > max {
            d.desired = max;
            d.reason = "Current number of replicas above Spec.MaxReplicas".into();
        } else if current < min {
            d.desired = min;
            d.reason = "Current number of replicas below Spec.MinReplicas".into();
        } else {
            let values = match metric {
                Ok([]) => Err("no metrics returned from external metrics API"),
                Ok(v) => Ok(v),
                Err(e) => Err(e),
            };
            let values = match values {
                Ok(v) => v,
                Err(e) => {
                    d.scaling_inactive = true;
                    d.reason = format!("FailedGetExternalMetric: {e}");
                    return d;
                }
            };
            let per_pod = external_per_pod_replicas(current, values, self.spec.target_milli, self.spec.tolerances());
            d.metric_milli = Some(per_pod.usage);
            d.average_milli = per_pod.average;
            d.proposal = Some(per_pod.replicas);
            let (desired, able, limited) = self.normalize(now, current, per_pod.replicas);
            d.reason = rescale_reason(current, per_pod.replicas.max(0), &self.spec.metric_name);
            (d.desired, d.able_to_scale, d.limited) = (desired, able, limited);
        }
        if d.rescale() {
            self.store_scale_event(now, current, d.desired);
            // The ScaledToZero condition: true when this rescale took the target to zero.
            self.scaled_to_zero = current > 0 && d.desired == 0 && min == 0;
            d.scaled_to_zero = self.scaled_to_zero;
        }
        d
    }

    /// `normalizeDesiredReplicasWithBehaviors`: stabilization, then the rate limits and min/max.
    /// Returns the replicas and the `AbleToScale` and `ScalingLimited` reasons.
    pub(crate) fn normalize(&mut self, now: Instant, current: i32, proposal: i32) -> (i32, &'static str, &'static str) {
        // desiredReplicas starts at 0; the metric's proposal wins when larger.
        let prenormalized = proposal.max(0);
        let (stabilized, able) = self.stabilize(now, current, prenormalized);
        let able = if stabilized != prenormalized { able } else { "ReadyForNewScale" };
        let (normalized, limited) = self.convert_with_behavior_rate(now, current, stabilized);
        (normalized, able, limited)
    }

    /// `stabilizeRecommendationWithBehaviors`: returns the stabilized recommendation and the
    /// `AbleToScale` reason to use when it differs from `desired`.
    pub(crate) fn stabilize(&mut self, now: Instant, current: i32, desired: i32) -> (i32, &'static str) {
        let up_cutoff = cutoff(now, self.spec.behavior.scale_up.stabilization_window_s);
        let down_cutoff = cutoff(now, self.spec.behavior.scale_down.stabilization_window_s);
        let mut up = desired;
        let mut down = desired;
        let mut old = None;
        let recommendations = self.recommendations.get_or_insert_with(Vec::new);
        for (i, r) in recommendations.iter().enumerate() {
            if after(r.at, up_cutoff) {
                up = up.min(r.replicas);
            }
            if after(r.at, down_cutoff) {
                down = down.max(r.replicas);
            }
            if before(r.at, up_cutoff) && before(r.at, down_cutoff) {
                old = Some(i);
            }
        }
        let mut recommendation = current;
        if recommendation < up {
            recommendation = up;
        }
        if recommendation > down {
            recommendation = down;
        }
        let rec = Recommendation { replicas: desired, at: now };
        match old {
            Some(i) => recommendations[i] = rec,
            None => recommendations.push(rec),
        }
        let reason = if desired >= current { "ScaleUpStabilized" } else { "ScaleDownStabilized" };
        (recommendation, reason)
    }

    /// `convertDesiredReplicasWithBehaviorRate`.
    pub(crate) fn convert_with_behavior_rate(&self, now: Instant, current: i32, desired: i32) -> (i32, &'static str) {
        let b = &self.spec.behavior;
        if desired > current {
            let limit =
                scale_up_limit(now, current, &self.scale_up_events, &self.scale_down_events, &b.scale_up).max(current);
            let (allowed, reason) = if self.spec.max_replicas > limit {
                (limit, "ScaleUpLimit")
            } else {
                (self.spec.max_replicas, "TooManyReplicas")
            };
            if desired > allowed {
                return (allowed, reason);
            }
        } else if desired < current {
            let limit = scale_down_limit(now, current, &self.scale_up_events, &self.scale_down_events, &b.scale_down)
                .min(current);
            let (allowed, reason) = if self.spec.min_replicas < limit {
                (limit, "ScaleDownLimit")
            } else {
                (self.spec.min_replicas, "TooFewReplicas")
            };
            if desired < allowed {
                return (allowed, reason);
            }
        }
        (desired, "DesiredWithinRange")
    }

    /// `storeScaleEvent`: reuses an outdated slot (older than the direction's longest policy
    /// period) or appends.
    pub(crate) fn store_scale_event(&mut self, now: Instant, prev: i32, new: i32) {
        let (events, rules, change) = if new > prev {
            (&mut self.scale_up_events, &self.spec.behavior.scale_up, new - prev)
        } else {
            (&mut self.scale_down_events, &self.spec.behavior.scale_down, prev - new)
        };
        let longest = rules.policies.iter().map(|p| p.period_seconds).max().unwrap_or(0);
        let cut = cutoff(now, longest as u32);
        for e in events.iter_mut() {
            if before(e.at, cut) {
                e.outdated = true;
            }
        }
        let event = ScaleEvent { change, at: now, outdated: false };
        match events.iter().rposition(|e| e.outdated) {
            Some(i) => events[i] = event,
            None => events.push(event),
        }
    }
}

/// The rescale reason `reconcileAutoscaler` writes from the metric's proposal (before
/// stabilization and limits, as kube does).
fn rescale_reason(current: i32, desired: i32, metric: &str) -> String {
    if desired > current {
        format!("{metric} above target")
    } else if desired < current {
        "All metrics below target".into()
    } else {
        "recommended size matches current size".into()
    }
}

/// `GetExternalPerPodMetricReplicas`: `status_replicas` pods, the items in milli-units, the
/// per-pod target in milli-units.
pub fn external_per_pod_replicas(status_replicas: i32, items: &[i64], target_milli: i64, t: Tolerances) -> PerPod {
    let mut usage: i64 = 0;
    for &v in items {
        // Go: usage = usage + val; if usage < 0 { usage = MaxInt64; break } ("the only way we
        // would ever get here is because of an Int64 overflow"; a negative item lands here too).
        usage = usage.wrapping_add(v);
        if usage < 0 {
            usage = i64::MAX;
            break;
        }
    }
    let mut replicas = status_replicas;
    let ratio = usage as f64 / (target_milli as f64 * f64::from(status_replicas));
    if !t.is_within(ratio) {
        let r = (usage as f64 / target_milli as f64).ceil();
        replicas = if r > f64::from(i32::MAX) { i32::MAX } else { r as i32 };
    }
    let average = if usage as f64 >= i64::MAX as f64 {
        Some(i64::MAX)
    } else if status_replicas == 0 {
        None
    } else {
        Some((usage as f64 / f64::from(status_replicas)).ceil() as i64)
    };
    PerPod { replicas, usage, average }
}

/// `calculateScaleUpLimitWithScalingRules`.
pub fn scale_up_limit(now: Instant, current: i32, up: &[ScaleEvent], down: &[ScaleEvent], rules: &Rules) -> i32 {
    let (mut result, pick): (i32, fn(i32, i32) -> i32) = match rules.select_policy {
        SelectPolicy::Disabled => return current,
        SelectPolicy::Min => (i32::MAX, i32::min),
        SelectPolicy::Max => (i32::MIN, i32::max),
    };
    for p in &rules.policies {
        let start =
            current - change_in_period(now, p.period_seconds, up) + change_in_period(now, p.period_seconds, down);
        let proposed = match p.kind {
            PolicyType::Pods => start.wrapping_add(p.value as i32),
            // Rounded up, so that a small count still grows.
            PolicyType::Percent => (f64::from(start) * (1.0 + p.value as f64 / 100.0)).ceil() as i32,
        };
        result = pick(result, proposed);
    }
    result
}

/// `calculateScaleDownLimitWithBehaviors`.
pub fn scale_down_limit(now: Instant, current: i32, up: &[ScaleEvent], down: &[ScaleEvent], rules: &Rules) -> i32 {
    let (mut result, pick): (i32, fn(i32, i32) -> i32) = match rules.select_policy {
        SelectPolicy::Disabled => return current,
        SelectPolicy::Min => (i32::MIN, i32::max),
        SelectPolicy::Max => (i32::MAX, i32::min),
    };
    for p in &rules.policies {
        let start =
            current - change_in_period(now, p.period_seconds, up) + change_in_period(now, p.period_seconds, down);
        let proposed = match p.kind {
            PolicyType::Pods => start.wrapping_sub(p.value as i32),
            // Go's int32(float64) truncates.
            PolicyType::Percent => (f64::from(start) * (1.0 - p.value as f64 / 100.0)) as i32,
        };
        result = pick(result, proposed);
    }
    result
}

/// `getReplicasChangePerPeriod`: the changes of events after `now - period`.
pub fn change_in_period(now: Instant, period_s: i64, events: &[ScaleEvent]) -> i32 {
    let cut = cutoff(now, period_s as u32);
    events.iter().filter(|e| after(e.at, cut)).map(|e| e.change).sum()
}

/// `now - seconds`; `None` when that is before the clock's origin (everything is after it).
fn cutoff(now: Instant, seconds: u32) -> Option<Instant> {
    now.checked_sub(Duration::from_secs(u64::from(seconds)))
}

/// `t.After(cutoff)`.
fn after(t: Instant, cutoff: Option<Instant>) -> bool {
    cutoff.is_none_or(|c| t > c)
}

/// `t.Before(cutoff)`.
fn before(t: Instant, cutoff: Option<Instant>) -> bool {
    cutoff.is_some_and(|c| t < c)
}

#[cfg(test)]
impl Controller {
    /// Seed the controller's memory as the upstream tests do.
    pub(crate) fn with_history(mut self, now: Instant, recs: &[(i32, u64)]) -> Self {
        self.recommendations = Some(
            recs.iter().map(|&(r, ago)| Recommendation { replicas: r, at: now - Duration::from_secs(ago) }).collect(),
        );
        self
    }

    /// The stored recommendations' values, in order.
    pub(crate) fn recommendation_values(&self) -> Vec<i32> {
        self.recommendations.iter().flatten().map(|r| r.replicas).collect()
    }
}
