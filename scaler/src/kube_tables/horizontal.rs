//! `horizontal_test.go`'s tables for the behavior functions: `TestScalingWithRules`
//! (`convertDesiredReplicasWithBehaviorRate`), `TestNormalizeDesiredReplicasWithBehavior`
//! (`stabilizeRecommendationWithBehaviors`), `TestStoreScaleEvents`, and the two limit tests.
//! Kube builds its events and recommendations from `time.Now()`; here from a paused clock.

use std::time::Duration;

use tokio::time::{Instant, advance};

use super::{HORIZONTAL_TEST, controller, events_uniform, generate_scaling_rules as rules};
use crate::behavior::{Behavior, BehaviorSpec, Policy, PolicyType, RulesSpec, SelectPolicy};
use crate::hpa::{ScaleEvent, change_in_period, scale_down_limit, scale_up_limit};

async fn a_clock() -> Instant {
    advance(Duration::from_secs(7200)).await;
    Instant::now()
}

struct RulesCase {
    name: &'static str,
    /// `generateEventsUniformDistribution(raw, 120)`, as every case with events uses.
    up_events: &'static [i32],
    down_events: &'static [i32],
    min: i32,
    max: i32,
    up: Option<RulesSpec>,
    down: Option<RulesSpec>,
    current: i32,
    desired: i32,
    expected: i32,
    condition: &'static str,
}

/// `TestScalingWithRules`, every case. Kube marks "scaleDownLimit is the limit because
/// scaleDownLimit > minReplicas with user defined policies" `testThis: true`, which its loop
/// skips; it is run here with the value kube's table gives it.
#[tokio::test(start_paused = true)]
async fn test_scaling_with_rules() {
    let now = a_clock().await;
    #[rustfmt::skip]
    let cases = vec![
        RulesCase { name: "prenormalized desired replicas within range", up_events: &[], down_events: &[], min: 3, max: 8, up: None, down: None, current: 5, desired: 7, expected: 7, condition: "DesiredWithinRange" },
        RulesCase { name: "prenormalized desired replicas < minReplicas", up_events: &[], down_events: &[], min: 2, max: 8, up: None, down: None, current: 3, desired: 1, expected: 2, condition: "TooFewReplicas" },
        RulesCase { name: "prenormalized desired replicas within range when minReplicas is 0", up_events: &[], down_events: &[], min: 0, max: 10, up: None, down: None, current: 1, desired: 0, expected: 0, condition: "DesiredWithinRange" },
        RulesCase { name: "maxReplicas is the limit because maxReplicas < scaleUpLimit", up_events: &[], down_events: &[], min: 1, max: 10, up: None, down: None, current: 20, desired: 1000, expected: 10, condition: "TooManyReplicas" },
        RulesCase { name: "desired replica count is more than the maximum replica count", up_events: &[], down_events: &[], min: 100, max: 150, up: None, down: None, current: 100, desired: 1000, expected: 150, condition: "TooManyReplicas" },
        RulesCase { name: "scaleUpLimit is the limit because scaleUpLimit < maxReplicas with user policies", up_events: &[], down_events: &[], min: 1, max: 2000, up: Some(rules(0, 0, 1, 60, 0)), down: None, current: 3, desired: 1000, expected: 4, condition: "ScaleUpLimit" },
        RulesCase { name: "scaleDownLimit is the limit because scaleDownLimit > minReplicas with user defined policies", up_events: &[], down_events: &[], min: 3, max: 2000, up: None, down: Some(rules(20, 60, 0, 0, 0)), current: 1000, desired: 3, expected: 980, condition: "ScaleDownLimit" },
        RulesCase { name: "scaleUp with default behavior", up_events: &[], down_events: &[], min: 1, max: 1000, up: None, down: None, current: 10, desired: 50, expected: 20, condition: "ScaleUpLimit" },
        RulesCase { name: "scaleUp with pods policy larger than percent policy", up_events: &[], down_events: &[], min: 1, max: 1000, up: Some(rules(100, 60, 100, 60, 0)), down: None, current: 10, desired: 500, expected: 110, condition: "ScaleUpLimit" },
        RulesCase { name: "scaleUp with percent policy larger than pods policy", up_events: &[], down_events: &[], min: 1, max: 1000, up: Some(rules(2, 60, 100, 60, 0)), down: None, current: 10, desired: 500, expected: 20, condition: "ScaleUpLimit" },
        RulesCase { name: "scaleUp with spec MaxReplicas limitation with large pod policy", up_events: &[], down_events: &[], min: 1, max: 1000, up: Some(rules(100, 60, 0, 0, 0)), down: None, current: 10, desired: 50, expected: 50, condition: "DesiredWithinRange" },
        RulesCase { name: "scaleUp with spec MaxReplicas limitation with large percent policy", up_events: &[], down_events: &[], min: 1, max: 1000, up: Some(rules(10000, 60, 0, 0, 0)), down: None, current: 10, desired: 50, expected: 50, condition: "DesiredWithinRange" },
        RulesCase { name: "scaleUp with pod policy limitation", up_events: &[], down_events: &[], min: 1, max: 1000, up: Some(rules(30, 60, 0, 0, 0)), down: None, current: 10, desired: 50, expected: 40, condition: "ScaleUpLimit" },
        RulesCase { name: "scaleUp with percent policy limitation", up_events: &[], down_events: &[], min: 1, max: 1000, up: Some(rules(0, 0, 200, 60, 0)), down: None, current: 10, desired: 50, expected: 30, condition: "ScaleUpLimit" },
        RulesCase { name: "scaleDown with percent policy larger than pod policy", up_events: &[], down_events: &[], min: 1, max: 1000, up: None, down: Some(rules(20, 60, 1, 60, 300)), current: 100, desired: 2, expected: 80, condition: "ScaleDownLimit" },
        RulesCase { name: "scaleDown with pod policy larger than percent policy", up_events: &[], down_events: &[], min: 1, max: 1000, up: None, down: Some(rules(2, 60, 1, 60, 300)), current: 100, desired: 2, expected: 98, condition: "ScaleDownLimit" },
        RulesCase { name: "scaleDown with spec MinReplicas=nil limitation with large pod policy", up_events: &[], down_events: &[], min: 1, max: 1000, up: None, down: Some(rules(100, 60, 0, 0, 300)), current: 10, desired: 0, expected: 1, condition: "TooFewReplicas" },
        RulesCase { name: "scaleDown with spec MinReplicas limitation with large pod policy", up_events: &[], down_events: &[], min: 1, max: 1000, up: None, down: Some(rules(100, 60, 0, 0, 300)), current: 10, desired: 0, expected: 1, condition: "TooFewReplicas" },
        RulesCase { name: "scaleDown with spec MinReplicas limitation with large percent policy", up_events: &[], down_events: &[], min: 5, max: 1000, up: None, down: Some(rules(0, 0, 100, 60, 300)), current: 10, desired: 2, expected: 5, condition: "TooFewReplicas" },
        RulesCase { name: "scaleDown with pod policy limitation", up_events: &[], down_events: &[], min: 1, max: 1000, up: None, down: Some(rules(5, 60, 0, 0, 300)), current: 10, desired: 2, expected: 5, condition: "ScaleDownLimit" },
        RulesCase { name: "scaleDown with percent policy limitation", up_events: &[], down_events: &[], min: 1, max: 1000, up: None, down: Some(rules(0, 0, 50, 60, 300)), current: 10, desired: 5, expected: 5, condition: "DesiredWithinRange" },
        RulesCase { name: "scaleUp with spec MaxReplicas limitation with large pod policy and events", up_events: &[1, 5, 9], down_events: &[], min: 1, max: 200, up: Some(rules(300, 60, 0, 0, 0)), down: None, current: 100, desired: 500, expected: 200, condition: "TooManyReplicas" },
        RulesCase { name: "scaleUp with spec MaxReplicas limitation with large percent policy and events", up_events: &[1, 5, 9], down_events: &[], min: 1, max: 200, up: Some(rules(0, 0, 10000, 60, 0)), down: None, current: 100, desired: 500, expected: 200, condition: "TooManyReplicas" },
        RulesCase { name: "scaleUp with currentReplicas limitation with rate.PeriodSeconds with a lot of recent scale up events", up_events: &[1, 5, 9], down_events: &[], min: 1, max: 1000, up: Some(rules(5, 120, 0, 0, 0)), down: None, current: 100, desired: 500, expected: 100, condition: "ScaleUpLimit" },
        RulesCase { name: "scaleUp with pod policy and previous scale up events", up_events: &[1, 5, 9], down_events: &[], min: 1, max: 1000, up: Some(rules(150, 120, 0, 0, 0)), down: None, current: 100, desired: 500, expected: 235, condition: "ScaleUpLimit" },
        RulesCase { name: "scaleUp with percent policy and previous scale up events", up_events: &[1, 5, 9], down_events: &[], min: 1, max: 1000, up: Some(rules(0, 0, 200, 120, 0)), down: None, current: 100, desired: 500, expected: 255, condition: "ScaleUpLimit" },
        RulesCase { name: "scaleDown with default policy and previous events", up_events: &[], down_events: &[1, 5, 9], min: 1, max: 1000, up: None, down: None, current: 10, desired: 5, expected: 5, condition: "DesiredWithinRange" },
        RulesCase { name: "scaleDown with spec MinReplicas=nil limitation with large pod policy and previous events", up_events: &[], down_events: &[1, 5, 9], min: 1, max: 1000, up: None, down: Some(rules(115, 120, 0, 0, 300)), current: 100, desired: 0, expected: 1, condition: "TooFewReplicas" },
        RulesCase { name: "scaleDown with spec MinReplicas limitation with large pod policy and previous events", up_events: &[], down_events: &[1, 5, 9], min: 5, max: 1000, up: None, down: Some(rules(130, 120, 0, 0, 300)), current: 100, desired: 0, expected: 5, condition: "TooFewReplicas" },
        RulesCase { name: "scaleDown with spec MinReplicas limitation with large percent policy and previous events", up_events: &[], down_events: &[1, 5, 9], min: 5, max: 1000, up: None, down: Some(rules(0, 0, 100, 120, 300)), current: 100, desired: 2, expected: 5, condition: "TooFewReplicas" },
        RulesCase { name: "scaleDown with pod policy limitation and previous events", up_events: &[], down_events: &[1, 5, 9], min: 1, max: 1000, up: None, down: Some(rules(5, 120, 0, 0, 300)), current: 100, desired: 2, expected: 100, condition: "ScaleDownLimit" },
        RulesCase { name: "scaleDown with percent policy limitation and previous events", up_events: &[], down_events: &[2, 4, 6], min: 1, max: 1000, up: None, down: Some(rules(0, 0, 50, 120, 300)), current: 100, desired: 0, expected: 56, condition: "ScaleDownLimit" },
        RulesCase { name: "scaleDown with previous events preventing further scale down", up_events: &[], down_events: &[10, 10, 10], min: 1, max: 1000, up: None, down: Some(rules(0, 0, 10, 120, 300)), current: 100, desired: 0, expected: 100, condition: "ScaleDownLimit" },
        RulesCase { name: "scaleDown with with previous events still allowing more scale down", up_events: &[], down_events: &[10, 10, 10], min: 1, max: 1000, up: None, down: Some(rules(0, 0, 1000, 120, 300)), current: 10, desired: 5, expected: 5, condition: "DesiredWithinRange" },
        RulesCase { name: "check 'outdated' flag for events for one behavior for up", up_events: &[8, 12, 9, 11], down_events: &[], min: 1, max: 1000, up: Some(rules(1000, 60, 0, 0, 0)), down: None, current: 100, desired: 200, expected: 200, condition: "DesiredWithinRange" },
        RulesCase { name: "check that events were not marked 'outdated' for two different policies in the behavior for up", up_events: &[8, 12, 9, 11], down_events: &[], min: 1, max: 1000, up: Some(rules(1000, 120, 100, 60, 0)), down: None, current: 100, desired: 200, expected: 200, condition: "DesiredWithinRange" },
        RulesCase { name: "check that events were marked 'outdated' for two different policies in the behavior for up", up_events: &[8, 12, 9, 11], down_events: &[], min: 1, max: 1000, up: Some(rules(1000, 30, 100, 60, 0)), down: None, current: 100, desired: 200, expected: 200, condition: "DesiredWithinRange" },
        RulesCase { name: "check 'outdated' flag for events for one behavior for down", up_events: &[], down_events: &[8, 12, 9, 11], min: 1, max: 1000, up: None, down: Some(rules(1000, 60, 0, 0, 300)), current: 100, desired: 5, expected: 5, condition: "DesiredWithinRange" },
        RulesCase { name: "check that events were not marked 'outdated' for two different policies in the behavior for down", up_events: &[], down_events: &[8, 12, 9, 11], min: 1, max: 1000, up: None, down: Some(rules(1000, 120, 100, 60, 300)), current: 100, desired: 5, expected: 5, condition: "DesiredWithinRange" },
        RulesCase { name: "check that events were marked 'outdated' for two different policies in the behavior for down", up_events: &[], down_events: &[8, 12, 9, 11], min: 1, max: 1000, up: None, down: Some(rules(1000, 30, 100, 60, 300)), current: 100, desired: 5, expected: 5, condition: "DesiredWithinRange" },
    ];
    assert_eq!(cases.len(), 40, "every case of kube's table");
    for c in cases {
        let mut ctl = controller(c.min, c.max, 1000, c.up, c.down);
        ctl.scale_up_events = events_uniform(now, c.up_events, 120);
        ctl.scale_down_events = events_uniform(now, c.down_events, 120);
        let got = ctl.convert_with_behavior_rate(now, c.current, c.desired);
        assert_eq!(got, (c.expected, c.condition), "TestScalingWithRules/{} ({HORIZONTAL_TEST})", c.name);
    }
}

/// `TestNormalizeDesiredReplicasWithBehavior`: (name, recommendations (replicas, seconds ago),
/// current, prenormalized desired, expected, stored recommendations after, up window, down
/// window). Kube's windows are 0 where its case leaves them unset.
type StabilizeCase = (&'static str, &'static [(i32, u64)], i32, i32, i32, &'static [i32], i64, i64);

#[tokio::test(start_paused = true)]
async fn test_normalize_desired_replicas_with_behavior() {
    let now = a_clock().await;
    const M: u64 = 60;
    #[rustfmt::skip]
    let cases: [StabilizeCase; 9] = [
        ("empty recommendations for scaling down", &[], 100, 5, 5, &[5], 0, 0),
        ("simple scale down stabilization", &[(4, 2 * M), (5, M)], 100, 3, 5, &[4, 5, 3], 0, 3 * M as i64),
        ("simple scale up stabilization", &[(4, 2 * M), (5, M)], 1, 7, 4, &[4, 5, 7], 5 * M as i64, 0),
        ("no scale down stabilization", &[(1, 2 * M), (2, M)], 100, 3, 3, &[1, 2, 3], 5 * M as i64, 0),
        ("no scale up stabilization", &[(4, 2 * M), (5, M)], 1, 3, 3, &[4, 5, 3], 0, 5 * M as i64),
        ("no scale down stabilization, reuse recommendation element", &[(10, 10 * M), (9, 9 * M)], 100, 3, 3, &[10, 3], 0, 0),
        ("no scale up stabilization, reuse recommendation element", &[(10, 10 * M), (9, 9 * M)], 1, 100, 100, &[10, 100], 0, 0),
        ("scale down stabilization, reuse one of obsolete recommendation element", &[(10, 10 * M), (4, M), (5, 2 * M), (9, 9 * M)], 100, 3, 5, &[10, 4, 5, 3], 0, 3 * M as i64),
        ("scale up stabilization, reuse one of obsolete recommendation element", &[(10, 100 * M), (6, M), (5, 2 * M), (9, 3 * M)], 1, 100, 5, &[100, 6, 5, 9], 300, 0),
    ];
    for (name, recs, current, desired, expected, stored, up_window, down_window) in cases {
        let window = |w| Some(RulesSpec { stabilization_window_seconds: Some(w), ..Default::default() });
        let mut ctl = controller(0, 1000, 1000, window(up_window), window(down_window)).with_history(now, recs);
        let (got, _) = ctl.stabilize(now, current, desired);
        let what = format!("TestNormalizeDesiredReplicasWithBehavior/{name} ({HORIZONTAL_TEST})");
        assert_eq!(got, expected, "{what}");
        assert_eq!(ctl.recommendation_values(), stored, "{what}: stored recommendations");
    }
}

/// `TestStoreScaleEvents`: (name, previous events (change, seconds ago), rules, the change in the
/// last 60 s before storing, the events after storing a change of 5 (change, outdated)). Kube's
/// two cases without a behavior ("empty entries with default behavior", "one outdated entry to be
/// kept untouched without behavior") store nothing; the scaler always has a behavior (the
/// chart's), so they have no counterpart here.
type StoreCase = (&'static str, &'static [(i32, u64)], RulesSpec, i32, &'static [(i32, bool)]);

#[tokio::test(start_paused = true)]
async fn test_store_scale_events() {
    let now = a_clock().await;
    #[rustfmt::skip]
    let cases: [StoreCase; 6] = [
        ("empty entries with two-policy-behavior", &[], rules(10, 60, 100, 60, 0), 0, &[(5, false)]),
        ("one outdated entry to be replaced with behavior", &[(7, 61)], rules(10, 60, 100, 60, 0), 0, &[(5, false)]),
        ("one actual entry to be not touched with behavior", &[(7, 58)], rules(10, 60, 100, 60, 0), 7, &[(7, false), (5, false)]),
        ("two entries, one of them to be replaced", &[(7, 61), (6, 59)], rules(10, 60, 0, 0, 0), 6, &[(5, false), (6, false)]),
        ("replace one entry, use policies with different periods", &[(8, 29), (6, 59), (7, 61), (9, 61)], rules(10, 60, 100, 30, 0), 14, &[(8, false), (6, false), (7, true), (5, false)]),
        ("two entries, both actual", &[(7, 58), (6, 59)], rules(10, 120, 100, 30, 0), 13, &[(7, false), (6, false), (5, false)]),
    ];
    for (name, prev, rules, change_before, after) in cases {
        let what = format!("TestStoreScaleEvents/{name} ({HORIZONTAL_TEST})");
        let prev: Vec<ScaleEvent> = prev
            .iter()
            .map(|&(change, ago)| ScaleEvent { change, at: now - Duration::from_secs(ago), outdated: false })
            .collect();
        let summary = |events: &[ScaleEvent]| events.iter().map(|e| (e.change, e.outdated)).collect::<Vec<_>>();
        // up
        let mut up = controller(1, 1000, 1000, Some(rules.clone()), None);
        up.scale_up_events = prev.clone();
        assert_eq!(change_in_period(now, 60, &up.scale_up_events), change_before, "{what}: up");
        up.store_scale_event(now, 10, 15);
        assert_eq!(summary(&up.scale_up_events), after, "{what}: up");
        // down
        let mut down = controller(1, 1000, 1000, None, Some(rules));
        down.scale_down_events = prev;
        assert_eq!(change_in_period(now, 60, &down.scale_down_events), change_before, "{what}: down");
        down.store_scale_event(now, 10, 5);
        assert_eq!(summary(&down.scale_down_events), after, "{what}: down");
    }
}

fn min_policy_pods_2_percent_50() -> Behavior {
    let r = RulesSpec {
        stabilization_window_seconds: Some(300),
        select_policy: Some(SelectPolicy::Min),
        policies: Some(vec![
            Policy { kind: PolicyType::Pods, value: 2, period_seconds: 60 },
            Policy { kind: PolicyType::Percent, value: 50, period_seconds: 60 },
        ]),
        tolerance: None,
    };
    Behavior::resolve(&BehaviorSpec { scale_up: Some(r.clone()), scale_down: Some(r) }).unwrap()
}

#[tokio::test(start_paused = true)]
async fn test_calculate_scale_up_limit_with_scaling_rules() {
    let now = a_clock().await;
    let b = min_policy_pods_2_percent_50();
    assert_eq!(
        scale_up_limit(now, 1, &[], &[], &b.scale_up),
        2,
        "TestCalculateScaleUpLimitWithScalingRules ({HORIZONTAL_TEST})"
    );
}

#[tokio::test(start_paused = true)]
async fn test_calculate_scale_down_limit_with_behaviors() {
    let now = a_clock().await;
    let b = min_policy_pods_2_percent_50();
    assert_eq!(
        scale_down_limit(now, 5, &[], &[], &b.scale_down),
        3,
        "TestCalculateScaleDownLimitWithBehaviors ({HORIZONTAL_TEST})"
    );
}
