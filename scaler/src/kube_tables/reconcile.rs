//! `horizontal_test.go`'s `reconcileAutoscaler` cases: min/max clamps, metric errors, zero
//! replicas, stabilization of the initial size, the scale-up cap. Kube drives them through fake
//! clients; here `Controller::reconcile` gets the same replica counts.
//!
//! Two kinds of case: kube's External `AverageValue` cases as they are, and cases kube writes
//! with another metric (CPU, Object) whose point is the clamp or condition, not the metric. For
//! those ("adapted"), the External metric here gives the same proposal kube's metric gives
//! (noted per case). Kube runs these tests without a `behavior`, which takes its older
//! `normalizeDesiredReplicas` path; the scaler always has a behavior, so they run with kube's
//! default behavior, on cases where both paths give kube's number.

use std::time::Duration;

use tokio::time::{Instant, advance};

use super::{HORIZONTAL_TEST, controller, generate_scaling_rules};
use crate::hpa::{Controller, Decision};

struct Case {
    name: &'static str,
    min: i32,
    max: i32,
    current: i32,
    /// The External metric's items and `target.averageValue`, milli-units; `None`: the metric
    /// cannot be read.
    metric: Option<(&'static [i64], i64)>,
    /// `recommendations: []timestampedRecommendation{}` in kube (an empty, non-nil history:
    /// no initial recommendation is recorded).
    empty_history: bool,
    expected: i32,
    /// A reason kube's expected conditions name (`AbleToScale`, `ScalingLimited` or
    /// `ScalingActive`'s), or "" when the case checks none.
    condition: &'static str,
}

fn check(ctl: &mut Controller, now: Instant, c: &Case) -> Decision {
    if c.empty_history {
        *ctl = ctl.clone().with_history(now, &[]);
    }
    let d = match c.metric {
        Some((items, _)) => ctl.reconcile(now, c.current, Ok(items)),
        None => ctl.reconcile(now, c.current, Err("something went wrong")),
    };
    let what = format!("{} ({HORIZONTAL_TEST})", c.name);
    assert_eq!(d.desired, c.expected, "{what}: {d:?}");
    if !c.condition.is_empty() {
        let reasons = [d.able_to_scale, d.limited, d.reason.split(':').next().unwrap_or("")];
        assert!(reasons.contains(&c.condition), "{what}: {} not in {reasons:?}", c.condition);
    }
    d
}

#[tokio::test(start_paused = true)]
async fn reconcile_cases() {
    advance(Duration::from_secs(7200)).await;
    let now = Instant::now();
    #[rustfmt::skip]
    let cases = [
        // External AverageValue, as kube has them.
        Case { name: "TestScaleUpPerPodCMExternal", min: 2, max: 6, current: 3, metric: Some((&[8600], 2222)), empty_history: false, expected: 4, condition: "" },
        Case { name: "TestScaleDownPerPodCMExternal", min: 2, max: 6, current: 5, metric: Some((&[8600], 3000)), empty_history: true, expected: 3, condition: "" },
        Case { name: "TestTolerancePerPodCMExternal", min: 2, max: 6, current: 4, metric: Some((&[8600], 2200)), empty_history: false, expected: 4, condition: "ReadyForNewScale" },
        Case { name: "TestConditionFailedGetMetrics/FailedGetExternalMetric", min: 1, max: 100, current: 3, metric: None, empty_history: false, expected: 3, condition: "FailedGetExternalMetric" },
        // Adapted: kube's CPU proposal 1 (3 % of 90 %) is 300m against 1 per pod here.
        Case { name: "TestMinReplicas (adapted)", min: 2, max: 5, current: 3, metric: Some((&[300], 1000)), empty_history: true, expected: 2, condition: "TooFewReplicas" },
        Case { name: "TestZeroMinReplicasDesiredZero (adapted)", min: 0, max: 5, current: 3, metric: Some((&[0], 1000)), empty_history: true, expected: 0, condition: "DesiredWithinRange" },
        Case { name: "TestMinReplicasDesiredZero (adapted)", min: 2, max: 5, current: 3, metric: Some((&[0], 1000)), empty_history: true, expected: 2, condition: "TooFewReplicas" },
        Case { name: "TestZeroReplicas", min: 3, max: 5, current: 0, metric: None, empty_history: false, expected: 0, condition: "ScalingDisabled" },
        Case { name: "TestTooFewReplicas", min: 3, max: 5, current: 2, metric: None, empty_history: false, expected: 3, condition: "" },
        Case { name: "TestTooManyReplicas", min: 3, max: 5, current: 10, metric: None, empty_history: false, expected: 5, condition: "" },
        // Adapted: kube's CPU proposal is 21 (616 % of 90 % on 3 pods).
        Case { name: "TestMaxReplicas (adapted)", min: 2, max: 5, current: 3, metric: Some((&[21000], 1000)), empty_history: false, expected: 5, condition: "TooManyReplicas" },
        // Adapted: kube's CPU proposal is 3 (28 % of 50 % on 5 pods); the initial recommendation (5) holds it.
        Case { name: "TestScaleDownStabilizeInitialSize (adapted)", min: 2, max: 6, current: 5, metric: Some((&[3000], 1000)), empty_history: false, expected: 5, condition: "ScaleDownStabilized" },
        Case { name: "TestScaleUpRCImmediately", min: 2, max: 6, current: 1, metric: Some((&[0], 1000)), empty_history: false, expected: 2, condition: "" },
        Case { name: "TestScaleDownRCImmediately", min: 2, max: 5, current: 6, metric: Some((&[18500], 1000)), empty_history: false, expected: 5, condition: "" },
        // Adapted: kube's External Value target 14.4 with a 0 metric proposes 0, as AverageValue does.
        Case { name: "TestScaleDownToZeroCMExternal (adapted)", min: 0, max: 6, current: 5, metric: Some((&[0], 14400)), empty_history: true, expected: 0, condition: "" },
    ];
    for c in &cases {
        let mut ctl = controller(c.min, c.max, c.metric.map_or(1000, |m| m.1), None, None);
        check(&mut ctl, now, c);
    }
}

/// `TestStabilizeDownscale` (adapted: kube's CPU proposal 2 is 2000m against 1 per pod on 4).
#[tokio::test(start_paused = true)]
async fn test_stabilize_downscale() {
    advance(Duration::from_secs(7200)).await;
    let now = Instant::now();
    let mut ctl = controller(1, 5, 1000, None, None).with_history(now, &[(10, 600), (4, 60)]);
    let c = Case {
        name: "TestStabilizeDownscale (adapted)",
        min: 1,
        max: 5,
        current: 4,
        metric: Some((&[2000], 1000)),
        empty_history: false,
        expected: 4,
        condition: "ScaleDownStabilized",
    };
    let d = check(&mut ctl, now, &c);
    assert_eq!(d.proposal, Some(2));
}

/// `TestUpscaleCap` and `TestUpscaleCapGreaterThanMaxReplicas` (adapted: kube's CPU proposal 60,
/// 2000 % of 10 % on 3 pods), with kube's `generateScalingRules(0, 0, 700, 60, 0)`.
#[tokio::test(start_paused = true)]
async fn test_upscale_cap() {
    advance(Duration::from_secs(7200)).await;
    let now = Instant::now();
    for (name, max, expected, condition) in [
        ("TestUpscaleCap (adapted)", 100, 24, "ScaleUpLimit"),
        ("TestUpscaleCapGreaterThanMaxReplicas (adapted)", 20, 20, "TooManyReplicas"),
    ] {
        let mut ctl = controller(1, max, 1000, Some(generate_scaling_rules(0, 0, 700, 60, 0)), None);
        let c = Case {
            name,
            min: 1,
            max,
            current: 3,
            metric: Some((&[60000], 1000)),
            empty_history: false,
            expected,
            condition,
        };
        check(&mut ctl, now, &c);
    }
}

/// `TestScaleUpFromZeroCMObject` and `TestScaleUpFromZeroIgnoresToleranceCMObject` (adapted:
/// kube's Object metrics 20 and 1 against 15 and 1 are External items here). Kube's cases
/// predate KEP-2021's `ScaledToZero` condition; from zero, the current controller reads the
/// metric only when it scaled the target to zero itself, so these start from that state.
#[tokio::test(start_paused = true)]
async fn test_scale_up_from_zero() {
    advance(Duration::from_secs(7200)).await;
    let now = Instant::now();
    const CASES: [(&str, &[i64], i64, i32); 2] = [
        ("TestScaleUpFromZeroCMObject (adapted)", &[20000], 15000, 2),
        ("TestScaleUpFromZeroIgnoresToleranceCMObject (adapted)", &[1000], 1000, 1),
    ];
    for (name, items, target, expected) in CASES {
        let mut ctl = controller(0, 6, target, None, None);
        ctl.scaled_to_zero = true;
        let c = Case {
            name,
            min: 0,
            max: 6,
            current: 0,
            metric: Some((items, target)),
            empty_history: false,
            expected,
            condition: "",
        };
        let d = check(&mut ctl, now, &c);
        assert!(!d.scaled_to_zero, "{name}: scaling from zero clears ScaledToZero");
    }
}

/// Scale to zero and back, as KEP-2021 describes it (not one of kube's tables): the controller
/// takes the target to zero (ScaledToZero true), reads the metric there, and comes back when the
/// load does; zero replicas it did not make (a paused workload) disable scaling instead.
#[tokio::test(start_paused = true)]
async fn scale_to_zero_and_back_with_the_scaled_to_zero_condition() {
    let mut ctl = controller(0, 4, 1000, None, Some(generate_scaling_rules(0, 0, 100, 15, 0)));
    let d = ctl.reconcile(Instant::now(), 2, Ok(&[0]));
    assert_eq!((d.desired, d.scaled_to_zero), (0, true), "{d:?}");
    advance(Duration::from_secs(15)).await;
    let d = ctl.reconcile(Instant::now(), 0, Ok(&[0]));
    assert_eq!((d.desired, d.scaling_inactive), (0, false), "at zero the metric is read: {d:?}");
    advance(Duration::from_secs(15)).await;
    let d = ctl.reconcile(Instant::now(), 0, Ok(&[2500]));
    assert_eq!((d.desired, d.scaled_to_zero), (3, false), "back from zero in one step: {d:?}");

    let mut paused = controller(0, 4, 1000, None, None);
    let d = paused.reconcile(Instant::now(), 0, Ok(&[2500]));
    assert!(d.scaling_inactive && d.desired == 0 && d.reason.starts_with("ScalingDisabled"), "{d:?}");
}
