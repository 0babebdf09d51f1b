//! Kube's own tables, case by case with kube's names and numbers, run against this crate's port.
//! Where the two disagreed, kube won and the port changed (see `scaler/README.md`, "Kube's tables").
//!
//! Sources (kubernetes/kubernetes, read file by file through the search index; the constants
//! below are quoted in every assertion message, so a failing case names where it came from):
//! - [`HORIZONTAL_TEST`]: `TestScalingWithRules`, `TestNormalizeDesiredReplicasWithBehavior` (which
//!   is kube's table for `stabilizeRecommendationWithBehaviors`), `TestStoreScaleEvents`,
//!   `TestCalculateScaleUpLimitWithScalingRules`, `TestCalculateScaleDownLimitWithBehaviors`, and
//!   the `reconcileAutoscaler` cases (min/max clamps, metric errors, zero replicas, stabilization).
//! - [`REPLICA_CALCULATOR_TEST`]: the External per-pod (`AverageValue`) cases.
//! - [`REPLICA_CALCULATOR_TEST_KEP4951`]: the configurable-tolerance cases.

mod horizontal;
mod reconcile;
mod replica_calculator;

use std::time::Duration;

use tokio::time::Instant;

use crate::behavior::{Behavior, BehaviorSpec, Policy, PolicyType, RulesSpec, SelectPolicy};
use crate::hpa::{Controller, ScaleEvent, Spec};

/// `pkg/controller/podautoscaler/horizontal_test.go` at this commit.
pub(crate) const HORIZONTAL_TEST: &str =
    "kubernetes/kubernetes pkg/controller/podautoscaler/horizontal_test.go@4e62298c1bd12c8b9b9c7337aa7fd07a8b9c37a8";
/// `pkg/controller/podautoscaler/replica_calculator_test.go` at this commit.
pub(crate) const REPLICA_CALCULATOR_TEST: &str = "kubernetes/kubernetes pkg/controller/podautoscaler/replica_calculator_test.go@5f3bc7cdab9b2544f0389b9a83c88fa15b793b7a";
/// The KEP-4951 version of `replica_calculator_test.go` (the `Tolerances` struct; the API field
/// came with kubernetes commit a41284d9fa3a3d5a5e8760db6e9fd4f7e5e6fca6). The index holds it
/// without naming its commit.
pub(crate) const REPLICA_CALCULATOR_TEST_KEP4951: &str =
    "kubernetes/kubernetes pkg/controller/podautoscaler/replica_calculator_test.go (KEP-4951 version, after a41284d9)";

/// `generateScalingRules(pods, podsPeriod, percent, percentPeriod, stabilizationWindow)`: a zero
/// value leaves that policy out; no policy at all leaves `policies` nil (kube's default applies).
pub(crate) fn generate_scaling_rules(
    pods: i64,
    pods_period: i64,
    percent: i64,
    percent_period: i64,
    window: i64,
) -> RulesSpec {
    let mut policies = Vec::new();
    if pods != 0 {
        policies.push(Policy { kind: PolicyType::Pods, value: pods, period_seconds: pods_period });
    }
    if percent != 0 {
        policies.push(Policy { kind: PolicyType::Percent, value: percent, period_seconds: percent_period });
    }
    RulesSpec {
        stabilization_window_seconds: Some(window),
        select_policy: Some(SelectPolicy::Max),
        policies: (!policies.is_empty()).then_some(policies),
        tolerance: None,
    }
}

/// `generateEventsUniformDistribution(rawEvents, periodSeconds)`: event i at
/// `period - seg*(i+1) + seg/2` seconds ago (Go truncates that float to whole seconds).
pub(crate) fn events_uniform(now: Instant, raw: &[i32], period_s: u32) -> Vec<ScaleEvent> {
    let seg = f64::from(period_s) / raw.len() as f64;
    raw.iter()
        .enumerate()
        .map(|(i, &change)| {
            let ago = (f64::from(period_s) - seg * (i + 1) as f64 + seg / 2.0) as u64;
            ScaleEvent { change, at: now - Duration::from_secs(ago), outdated: false }
        })
        .collect()
}

/// A controller for one External `AverageValue` metric, with kube's defaulting applied to the
/// behavior (`GenerateHPAScaleUpRules` / `GenerateHPAScaleDownRules`).
pub(crate) fn controller(
    min: i32,
    max: i32,
    target_milli: i64,
    up: Option<RulesSpec>,
    down: Option<RulesSpec>,
) -> Controller {
    Controller::new(Spec {
        min_replicas: min,
        max_replicas: max,
        target_milli,
        tolerance: 0.1,
        behavior: Behavior::resolve(&BehaviorSpec { scale_up: up, scale_down: down }).expect("kube's rules are valid"),
        metric_name: "qps".into(),
    })
}
