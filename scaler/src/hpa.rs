//! The HPA controller's decision for one `External` metric with an `AverageValue` target, ported
//! from kube-controller-manager (`pkg/controller/podautoscaler`):
//!
//! - `reconcileAutoscaler` (horizontal.go): the initial recommendation, the min/max clamps that
//!   bypass the metric, a metric that cannot be read leaves the replicas alone (`ScalingActive`
//!   false), `rescale = desired != current`, scale events stored only when it rescales;
//! - `GetExternalPerPodMetricReplicas` (replica_calculator.go): the sum of the items' milli-values,
//!   `usageRatio = sum / (target * statusReplicas)`, unchanged within the tolerance, else
//!   `ceil(sum / target)`;
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
    pub min_replicas: i32,
    pub max_replicas: i32,
    /// `target.averageValue` in milli-units (`resource.Quantity.MilliValue()`).
    pub target_milli: i64,
    /// `--horizontal-pod-autoscaler-tolerance` (0.1).
    pub tolerance: f64,
    pub behavior: Behavior,
    /// The metric's name, for the reasons (`"gateway_pool_signal above target"`).
    pub metric_name: String,
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
    /// `ScalingActive` false: the metric could not be used (nothing changes).
    pub scaling_inactive: bool,
}

impl Decision {
    pub fn rescale(&self) -> bool {
        self.desired != self.current
    }
}

/// The controller's memory for one HPA: recommendations and scale events.
#[derive(Debug, Clone)]
pub struct Controller {
    pub spec: Spec,
    recommendations: Vec<Recommendation>,
    pub scale_up_events: Vec<ScaleEvent>,
    pub scale_down_events: Vec<ScaleEvent>,
}

impl Controller {
    pub fn new(spec: Spec) -> Self {
        Self { spec, recommendations: Vec::new(), scale_up_events: Vec::new(), scale_down_events: Vec::new() }
    }

    /// One sync: `current` replicas now (the scale's spec and status: the scaler applies its
    /// decisions before the next sync), `metric` the items' values in milli-units or why they
    /// could not be read. The caller applies `desired` when [`Decision::rescale`].
    pub fn reconcile(&mut self, now: Instant, current: i32, metric: Result<&[i64], &str>) -> Decision {
        // recordInitialRecommendation
        if self.recommendations.is_empty() {
            self.recommendations.push(Recommendation { replicas: current, at: now });
        }
        let min = self.spec.min_replicas;
        let max = self.spec.max_replicas;
        let mut d = Decision {
            current,
            desired: current,
            metric_milli: None,
            proposal: None,
            reason: String::new(),
            able_to_scale: "ReadyForNewScale",
            limited: "DesiredWithinRange",
            scaling_inactive: false,
        };
        if current > max {
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
            let sum: i64 = values.iter().sum();
            d.metric_milli = Some(sum);
            let proposal = external_per_pod_replicas(current, sum, self.spec.target_milli, self.spec.tolerance);
            d.proposal = Some(proposal);
            // desiredReplicas starts at 0; the metric's proposal wins when larger.
            let desired = proposal.max(0);
            if desired > current {
                d.reason = format!("{} above target", self.spec.metric_name);
            } else if desired < current {
                d.reason = "All metrics below target".into();
            } else {
                d.reason = "recommended size matches current size".into();
            }
            let (stabilized, able) = self.stabilize(now, current, desired);
            d.able_to_scale = if stabilized != desired { able } else { "ReadyForNewScale" };
            let (normalized, limited) = self.convert_with_behavior_rate(now, current, stabilized);
            d.desired = normalized;
            d.limited = limited;
        }
        if d.rescale() {
            self.store_scale_event(now, current, d.desired);
        }
        d
    }

    /// `stabilizeRecommendationWithBehaviors`: returns the stabilized recommendation and the
    /// `AbleToScale` reason to use when it differs from `desired`.
    fn stabilize(&mut self, now: Instant, current: i32, desired: i32) -> (i32, &'static str) {
        let up_cutoff = cutoff(now, self.spec.behavior.scale_up.stabilization_window_s);
        let down_cutoff = cutoff(now, self.spec.behavior.scale_down.stabilization_window_s);
        let mut up = desired;
        let mut down = desired;
        let mut old = None;
        for (i, r) in self.recommendations.iter().enumerate() {
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
            Some(i) => self.recommendations[i] = rec,
            None => self.recommendations.push(rec),
        }
        let reason = if desired >= current { "ScaleUpStabilized" } else { "ScaleDownStabilized" };
        (recommendation, reason)
    }

    /// `convertDesiredReplicasWithBehaviorRate`.
    fn convert_with_behavior_rate(&self, now: Instant, current: i32, desired: i32) -> (i32, &'static str) {
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
    fn store_scale_event(&mut self, now: Instant, prev: i32, new: i32) {
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

/// `GetExternalPerPodMetricReplicas`: `status_replicas` pods, the items' sum and the per-pod
/// target in milli-units.
pub fn external_per_pod_replicas(status_replicas: i32, sum_milli: i64, target_milli: i64, tolerance: f64) -> i32 {
    let ratio = sum_milli as f64 / (target_milli as f64 * f64::from(status_replicas));
    // Go: math.Abs(1.0-usageRatio) > tolerance; NaN (0/0) compares false, keeping the count.
    if (1.0 - ratio).abs() > tolerance {
        (sum_milli as f64 / target_milli as f64).ceil() as i32
    } else {
        status_replicas
    }
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
            PolicyType::Pods => start + p.value as i32,
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
            PolicyType::Pods => start - p.value as i32,
            // Go's int32(float64) truncates.
            PolicyType::Percent => (f64::from(start) * (1.0 - p.value as f64 / 100.0)) as i32,
        };
        result = pick(result, proposed);
    }
    result
}

/// `getReplicasChangePerPeriod`: the changes of events after `now - period`.
fn change_in_period(now: Instant, period_s: i64, events: &[ScaleEvent]) -> i32 {
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
        self.recommendations =
            recs.iter().map(|&(r, ago)| Recommendation { replicas: r, at: now - Duration::from_secs(ago) }).collect();
        self
    }
}
