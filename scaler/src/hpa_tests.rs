//! The controller's decisions on hand-derived edge cases, table-driven, on tokio's paused clock:
//! the boundaries kube's own tables leave out (an event or recommendation exactly one period or
//! window old, floating-point edges of the tolerance, a whole episode). Kube's own tables, case
//! by case, are in `kube_tables/`.

use std::time::Duration;

use tokio::time::{Instant, advance};

use crate::behavior::{Behavior, BehaviorSpec, Policy, PolicyType, RulesSpec, SelectPolicy};
use crate::hpa::{Controller, ScaleEvent, Spec, Tolerances, external_per_pod_replicas};

fn pods(value: i64, period_seconds: i64) -> Policy {
    Policy { kind: PolicyType::Pods, value, period_seconds }
}

fn percent(value: i64, period_seconds: i64) -> Policy {
    Policy { kind: PolicyType::Percent, value, period_seconds }
}

fn rules(window: i64, select: SelectPolicy, policies: Vec<Policy>) -> Option<RulesSpec> {
    Some(RulesSpec {
        stabilization_window_seconds: Some(window),
        select_policy: Some(select),
        policies: Some(policies),
        tolerance: None,
    })
}

fn spec(min: i32, max: i32, behavior: BehaviorSpec) -> Spec {
    Spec {
        min_replicas: min,
        max_replicas: max,
        target_milli: 1000,
        tolerance: 0.1,
        behavior: Behavior::resolve(&behavior).unwrap(),
        metric_name: "gateway_pool_signal".into(),
    }
}

fn ago(now: Instant, s: u64) -> Instant {
    now - Duration::from_secs(s)
}

#[test]
fn external_per_pod_replicas_as_the_replica_calculator() {
    // (status replicas, sum of the items in milli-units, per-pod target in milli-units, expected)
    let cases = [
        // TestReplicaCalcScaleUpCMExternalPerPod-like: 8600 / 2150 = 4
        (3, 8600, 2150, 4, "scale up"),
        // scale down: ceil(8600 / 3000) = 3
        (5, 8600, 3000, 3, "scale down"),
        // tolerance: 8600 / (2900 * 3) = 0.989, within 10 %
        (3, 8600, 2900, 3, "within tolerance"),
        // the edges in binary floating point, as Go computes them. isWithin (KEP-4951, 1.33+)
        // compares 1.1 <= 1.0 + 0.1: the same double, so a ratio of exactly 1.1 stays. The
        // scaler used the older math.Abs(1-ratio) > tolerance, where |1 - 1.1| =
        // 0.10000000000000009 scaled up: kube changed, the scaler follows.
        (3, 3300, 1000, 3, "ratio 1.1 stays (1.1 <= 1 + 0.1)"),
        (3, 3301, 1000, 4, "ratio 1.1003 scales up"),
        (3, 2700, 1000, 3, "ratio 0.9 stays (1 - 0.1 <= 0.9)"),
        (3, 2600, 1000, 3, "ratio 0.87 scales down to ceil(2.6) = 3"),
        (4, 2600, 1000, 3, "ratio 0.65 scales down"),
        (1, 0, 1000, 0, "no load proposes zero (min replicas clamps later)"),
        (4, 1001, 1000, 2, "rounded up"),
    ];
    for (status, sum, target, expected, name) in cases {
        let got = external_per_pod_replicas(status, &[sum], target, Tolerances::both(0.1));
        assert_eq!(got.replicas, expected, "{name}");
    }
}

/// `TestScalingWithRules`-like: rate limits from policies and past scale events. Stabilization
/// windows are 0 so the proposal reaches the rate limits unchanged.
#[tokio::test(start_paused = true)]
async fn scaling_with_rules() {
    advance(Duration::from_secs(3600)).await;
    let now = Instant::now();
    let default_up = None; // kube's default: 4 pods or 100 % per 15 s, Max
    struct Case {
        name: &'static str,
        up: Option<RulesSpec>,
        down: Option<RulesSpec>,
        min: i32,
        max: i32,
        up_events: Vec<(i32, u64)>,
        down_events: Vec<(i32, u64)>,
        current: i32,
        desired: i32,
        expected: i32,
        limited: &'static str,
    }
    let down0 = |select, p| rules(0, select, p);
    let up0 = |select, p| rules(0, select, p);
    #[rustfmt::skip]
    let cases = vec![
        Case { name: "default scale up: 100 % beats 4 pods", up: default_up.clone(), down: None, min: 1, max: 100, up_events: vec![], down_events: vec![], current: 10, desired: 50, expected: 20, limited: "ScaleUpLimit" },
        Case { name: "default scale up: 4 pods beat 100 % from 1", up: default_up.clone(), down: None, min: 1, max: 100, up_events: vec![], down_events: vec![], current: 1, desired: 50, expected: 5, limited: "ScaleUpLimit" },
        Case { name: "pods policy larger than percent policy", up: up0(SelectPolicy::Max, vec![pods(100, 60), percent(100, 60)]), down: None, min: 1, max: 1000, up_events: vec![], down_events: vec![], current: 10, desired: 500, expected: 110, limited: "ScaleUpLimit" },
        Case { name: "percent policy larger than pods policy", up: up0(SelectPolicy::Max, vec![pods(2, 60), percent(100, 60)]), down: None, min: 1, max: 1000, up_events: vec![], down_events: vec![], current: 10, desired: 500, expected: 20, limited: "ScaleUpLimit" },
        Case { name: "spec max replicas below a large pods policy", up: up0(SelectPolicy::Max, vec![pods(100, 60)]), down: None, min: 1, max: 50, up_events: vec![], down_events: vec![], current: 10, desired: 500, expected: 50, limited: "TooManyReplicas" },
        Case { name: "scale up within the policy", up: up0(SelectPolicy::Max, vec![pods(100, 60)]), down: None, min: 1, max: 1000, up_events: vec![], down_events: vec![], current: 10, desired: 30, expected: 30, limited: "DesiredWithinRange" },
        Case { name: "Min select: the smaller change", up: up0(SelectPolicy::Min, vec![pods(2, 60), percent(100, 60)]), down: None, min: 1, max: 1000, up_events: vec![], down_events: vec![], current: 10, desired: 500, expected: 12, limited: "ScaleUpLimit" },
        Case { name: "percent rounds up", up: up0(SelectPolicy::Max, vec![percent(10, 60)]), down: None, min: 1, max: 1000, up_events: vec![], down_events: vec![], current: 3, desired: 10, expected: 4, limited: "ScaleUpLimit" },
        Case { name: "Disabled scale up", up: up0(SelectPolicy::Disabled, vec![pods(4, 15)]), down: None, min: 1, max: 1000, up_events: vec![], down_events: vec![], current: 10, desired: 50, expected: 10, limited: "ScaleUpLimit" },
        Case { name: "scale-up events inside the period count", up: up0(SelectPolicy::Max, vec![pods(4, 60)]), down: None, min: 1, max: 1000, up_events: vec![(3, 30), (2, 70)], down_events: vec![], current: 10, desired: 50, expected: 11, limited: "ScaleUpLimit" },
        Case { name: "the period's budget used up: no scale up", up: up0(SelectPolicy::Max, vec![pods(4, 60)]), down: None, min: 1, max: 1000, up_events: vec![(4, 10)], down_events: vec![], current: 10, desired: 50, expected: 10, limited: "ScaleUpLimit" },
        Case { name: "an event exactly one period ago is outside it", up: up0(SelectPolicy::Max, vec![pods(4, 60)]), down: None, min: 1, max: 1000, up_events: vec![(4, 60)], down_events: vec![], current: 10, desired: 50, expected: 14, limited: "ScaleUpLimit" },
        Case { name: "scale up after a scale down in the period", up: up0(SelectPolicy::Max, vec![percent(100, 60)]), down: None, min: 1, max: 20, up_events: vec![(2, 20)], down_events: vec![(1, 10)], current: 5, desired: 20, expected: 8, limited: "ScaleUpLimit" },
        Case { name: "scale down: pods policy larger than percent policy", up: None, down: down0(SelectPolicy::Max, vec![pods(20, 60), percent(1, 60)]), min: 1, max: 1000, up_events: vec![], down_events: vec![], current: 100, desired: 2, expected: 80, limited: "ScaleDownLimit" },
        Case { name: "scale down: percent policy larger than pods policy", up: None, down: down0(SelectPolicy::Max, vec![pods(2, 60), percent(10, 60)]), min: 1, max: 1000, up_events: vec![], down_events: vec![], current: 100, desired: 2, expected: 90, limited: "ScaleDownLimit" },
        Case { name: "scale down Min select: the smaller change", up: None, down: down0(SelectPolicy::Min, vec![pods(20, 60), percent(1, 60)]), min: 1, max: 1000, up_events: vec![], down_events: vec![], current: 100, desired: 2, expected: 99, limited: "ScaleDownLimit" },
        Case { name: "scale down percent truncates (3 * 50 % = 1.5 -> 1)", up: None, down: down0(SelectPolicy::Max, vec![percent(50, 60)]), min: 1, max: 10, up_events: vec![], down_events: vec![], current: 3, desired: 1, expected: 1, limited: "DesiredWithinRange" },
        Case { name: "scale down percent truncates (5 * 50 % = 2.5 -> 2)", up: None, down: down0(SelectPolicy::Max, vec![percent(50, 60)]), min: 1, max: 10, up_events: vec![], down_events: vec![], current: 5, desired: 1, expected: 2, limited: "ScaleDownLimit" },
        Case { name: "scale-down events inside the period count", up: None, down: down0(SelectPolicy::Max, vec![percent(50, 60)]), min: 1, max: 10, up_events: vec![], down_events: vec![(4, 20)], current: 4, desired: 1, expected: 4, limited: "ScaleDownLimit" },
        Case { name: "min replicas below the policy's limit", up: None, down: down0(SelectPolicy::Max, vec![pods(100, 60)]), min: 3, max: 1000, up_events: vec![], down_events: vec![], current: 100, desired: 0, expected: 3, limited: "TooFewReplicas" },
        Case { name: "Disabled scale down", up: None, down: down0(SelectPolicy::Disabled, vec![pods(4, 15)]), min: 1, max: 1000, up_events: vec![], down_events: vec![], current: 10, desired: 1, expected: 10, limited: "ScaleDownLimit" },
    ];
    for c in cases {
        let down = c.down.clone().or_else(|| rules(0, SelectPolicy::Max, vec![percent(100, 15)]));
        let mut ctl = Controller::new(spec(c.min, c.max, BehaviorSpec { scale_up: c.up.clone(), scale_down: down }));
        ctl.scale_up_events =
            c.up_events.iter().map(|&(change, s)| ScaleEvent { change, at: ago(now, s), outdated: false }).collect();
        ctl.scale_down_events =
            c.down_events.iter().map(|&(change, s)| ScaleEvent { change, at: ago(now, s), outdated: false }).collect();
        let metric = [i64::from(c.desired) * 1000];
        let d = ctl.reconcile(now, c.current, Ok(&metric));
        assert_eq!(d.proposal, Some(c.desired), "{}: proposal", c.name);
        assert_eq!((d.desired, d.limited), (c.expected, c.limited), "{}", c.name);
    }
}

/// (name, up window, down window, history (replicas, seconds ago), current, desired, expected,
/// AbleToScale)
type StabilizeCase = (&'static str, i64, i64, Vec<(i32, u64)>, i32, i32, i32, &'static str);

/// `TestStabilizeRecommendationWithBehaviors`-like: past recommendations bound the new one.
#[tokio::test(start_paused = true)]
async fn stabilization_windows() {
    advance(Duration::from_secs(3600)).await;
    let now = Instant::now();
    let wide = vec![pods(1000, 15)];
    // (name, up window, down window, history (replicas, seconds ago), current, desired, expected, AbleToScale)
    #[rustfmt::skip]
    let cases: Vec<StabilizeCase> = vec![
        ("the first sync: the current count is the initial recommendation", 0, 300, vec![], 5, 2, 5, "ScaleDownStabilized"),
        ("a higher recommendation in the down window holds", 0, 300, vec![(5, 100), (3, 200)], 5, 2, 5, "ScaleDownStabilized"),
        ("the highest in the window, not the current", 0, 300, vec![(4, 100), (3, 200)], 5, 2, 4, "ScaleDownStabilized"),
        ("recommendations older than the window are ignored", 0, 300, vec![(5, 301), (3, 400)], 5, 2, 2, "ReadyForNewScale"),
        ("a recommendation exactly a window old is ignored", 0, 300, vec![(5, 300)], 5, 2, 2, "ReadyForNewScale"),
        ("a lower recommendation in the up window holds a scale up", 60, 0, vec![(3, 30)], 2, 6, 3, "ScaleUpStabilized"),
        ("the up window never scales below current", 60, 0, vec![(1, 30)], 2, 6, 2, "ScaleUpStabilized"),
        ("both windows: up bounded by the lowest, down by the highest", 60, 300, vec![(4, 30), (8, 120)], 5, 10, 5, "ScaleUpStabilized"),
        ("a flapping load: the down window keeps the peak", 0, 300, vec![(7, 15), (2, 30), (7, 45)], 7, 2, 7, "ScaleDownStabilized"),
    ];
    for (name, up_w, down_w, history, current, desired, expected, able) in cases {
        let behavior = BehaviorSpec {
            scale_up: rules(up_w, SelectPolicy::Max, wide.clone()),
            scale_down: rules(down_w, SelectPolicy::Max, wide.clone()),
        };
        let mut ctl = Controller::new(spec(1, 100, behavior));
        if !history.is_empty() {
            ctl = ctl.with_history(now, &history);
        }
        let metric = [i64::from(desired) * 1000];
        let d = ctl.reconcile(now, current, Ok(&metric));
        assert_eq!((d.desired, d.able_to_scale), (expected, able), "{name}");
    }
}

/// `reconcileAutoscaler`'s cases that bypass the metric, and a metric that cannot be read.
#[tokio::test(start_paused = true)]
async fn reconcile_edges() {
    let now = Instant::now();
    let mut ctl = Controller::new(spec(2, 4, BehaviorSpec::default()));
    let d = ctl.reconcile(now, 6, Ok(&[1000]));
    assert_eq!((d.desired, d.reason.as_str()), (4, "Current number of replicas above Spec.MaxReplicas"));
    let d = ctl.reconcile(now, 1, Ok(&[9000]));
    assert_eq!((d.desired, d.reason.as_str()), (2, "Current number of replicas below Spec.MinReplicas"));

    // A missing metric changes nothing (ScalingActive false), whatever the rest says.
    for m in [Err("connection refused"), Ok(&[][..])] {
        let d = ctl.reconcile(now, 3, m);
        assert!(d.scaling_inactive && !d.rescale() && d.metric_milli.is_none(), "{d:?}");
        assert!(d.reason.starts_with("FailedGetExternalMetric"), "{}", d.reason);
    }
    // Several items are summed (a selector matching several pools).
    let d = ctl.reconcile(now, 2, Ok(&[1500, 1700]));
    assert_eq!((d.metric_milli, d.desired), (Some(3200), 4));
    assert_eq!(d.reason, "gateway_pool_signal above target");
}

/// A whole episode with the chart's default behavior, one sync every 15 s (paused clock): a load
/// step up, then a long quiet. Expected counts worked out from kube's functions:
/// - t=0: 1 -> 5 (signal 5; 4 pods beat 100 %);
/// - t=30: signal 12 -> 10 (max replicas; the step at t=0 is outside the 15 s period);
/// - t=45..315: signal 0.5 wants 1, held at 10 by the 300 s scale-down window (12 at t=30);
/// - t=330: the 12 leaves the window: 10 -> 5 (50 % per 60 s);
/// - t=390: 5 -> 2 (2.5 truncated); t=450: 2 -> 1.
#[tokio::test(start_paused = true)]
async fn a_load_step_with_the_charts_behavior() {
    let mut ctl = Controller::new(Spec { behavior: Behavior::builtin(), ..spec(1, 10, BehaviorSpec::default()) });
    let mut current = 1;
    let mut got = Vec::new();
    for k in 0..=32u64 {
        let t = k * 15;
        let signal = match t {
            0..=15 => 5000,
            30 => 12_000,
            _ => 500,
        };
        let d = ctl.reconcile(Instant::now(), current, Ok(&[signal]));
        current = d.desired;
        got.push((t, current));
        advance(Duration::from_secs(15)).await;
    }
    let expected = |t: u64| match t {
        0..=15 => 5,
        30..=315 => 10,
        330..=375 => 5,
        390..=435 => 2,
        _ => 1,
    };
    for (t, replicas) in got {
        assert_eq!(replicas, expected(t), "at t={t}s");
    }
}

/// `scaler replay` over a recorded series gives the same decisions as the live loop would.
#[test]
fn replay_reads_both_recordings_and_syncs_every_interval() {
    let dir = std::env::temp_dir().join(format!("scaler-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bench = dir.join("step.jsonl");
    std::fs::write(
        &bench,
        "{\"t_ms\": 0, \"gateway_pool_signal\": 1.0}\n{\"t_ms\": 14000, \"gateway_pool_signal\": 3.4}\n{\"t_ms\": 29000, \"gateway_pool_signal\": 0.2}\n{\"t_ms\": 60000, \"gateway_pool_signal\": \"200m\"}\n",
    )
    .unwrap();
    let series = dir.join("scaler.jsonl");
    std::fs::write(
        &series,
        "{\"t\": 100.0, \"series\": \"replicas\", \"value\": 1}\n{\"t\": 100.0, \"series\": \"gateway_pool_signal\", \"value\": 1.0}\n{\"t\": 114.0, \"series\": \"gateway_pool_signal\", \"value\": 3.4}\n{\"t\": 129.0, \"series\": \"gateway_pool_signal\", \"value\": 0.2}\n{\"t\": 160.0, \"series\": \"gateway_pool_signal\", \"value\": 0.2}\n",
    )
    .unwrap();
    let a = crate::replay::read_points(&bench, "gateway_pool_signal").unwrap();
    let b = crate::replay::read_points(&series, "gateway_pool_signal").unwrap();
    assert_eq!(a.iter().map(|p| p.1).collect::<Vec<_>>(), b.iter().map(|p| p.1).collect::<Vec<_>>());
    let behavior = BehaviorSpec { scale_up: None, scale_down: rules(20, SelectPolicy::Max, vec![percent(100, 15)]) };
    let mut ctl = Controller::new(spec(1, 4, behavior));
    let out = crate::replay::replay(&mut ctl, &a, Duration::from_secs(15), 1);
    let replicas: Vec<(f64, i32)> = out.iter().map(|(t, d)| (*t, d.desired)).collect();
    // t=0: 1; t=15: 3.4 wants 4 (4 pods or 100 % from 1 allow 5; max replicas 4);
    // t=30: 0.2 wants 1, the 20 s window holds the 4 of t=15; t=45: the window has passed: 1.
    assert_eq!(replicas, [(0.0, 1), (15.0, 4), (30.0, 4), (45.0, 1), (60.0, 1)]);
    std::fs::remove_dir_all(&dir).unwrap();
}
