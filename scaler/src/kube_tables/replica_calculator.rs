//! `replica_calculator_test.go`'s External per-pod (`AverageValue`) cases, run through
//! `GetExternalPerPodMetricReplicas`' port, and KEP-4951's configurable-tolerance cases. Kube's
//! External `Value` cases (`TestReplicaCalc*CMExternal` without `PerPod`) divide by ready pods, a
//! target type the scaler does not have (the chart uses `AverageValue`); they are left out, as
//! are the Resource, Pods and Object cases.

use super::{REPLICA_CALCULATOR_TEST, REPLICA_CALCULATOR_TEST_KEP4951};
use crate::hpa::{PerPod, Tolerances, external_per_pod_replicas};

const DEFAULT_TESTING_TOLERANCE: f64 = 0.1;

/// Go's `Tolerances{scaleDown, scaleUp}`, positional as kube writes it.
fn tolerances(scale_down: f64, scale_up: f64) -> Tolerances {
    Tolerances { scale_down, scale_up }
}

/// (kube's test, source, tolerances, currentReplicas, levels, perPodTargetUsage,
/// expectedReplicas, expectedUsage)
type PerPodCase = (&'static str, &'static str, Tolerances, i32, &'static [i64], i64, i32, i64);

#[test]
fn external_per_pod_cases() {
    let default = tolerances(DEFAULT_TESTING_TOLERANCE, DEFAULT_TESTING_TOLERANCE);
    #[rustfmt::skip]
    let cases: [PerPodCase; 4] = [
        ("TestReplicaCalcScaleUpPerPodCMExternal", REPLICA_CALCULATOR_TEST, default, 3, &[8600], 2150, 4, 2867),
        ("TestReplicaCalcScaleDownPerPodCMExternal", REPLICA_CALCULATOR_TEST, default, 5, &[8600], 2867, 3, 1720),
        ("TestReplicaCalcTolerancePerPodCMExternal", REPLICA_CALCULATOR_TEST, default, 3, &[8600], 2900, 3, 2867),
        ("TestReplicaCalcConfigurableTolerancePerPodCMExternal", REPLICA_CALCULATOR_TEST_KEP4951, tolerances(DEFAULT_TESTING_TOLERANCE, 0.01), 3, &[8600], 2800, 4, 2867),
    ];
    for (name, source, t, current, levels, target, replicas, usage) in cases {
        let got = external_per_pod_replicas(current, levels, target, t);
        assert_eq!((got.replicas, got.average), (replicas, Some(usage)), "{name} ({source})");
    }
}

/// `TestReplicaCalcConfigurableTolerance`'s cases are Resource metrics; what they test is
/// `Tolerances.isWithin` on the usage ratio their utilization gives (101 %, 190 %, 109 %, 65 %
/// of a 100 % target). The ratios and tolerances are kube's; the replica counts follow from them.
#[test]
fn test_replica_calc_configurable_tolerance_is_within() {
    let d = DEFAULT_TESTING_TOLERANCE;
    #[rustfmt::skip]
    let cases = [
        ("Outside of a 0% tolerance", tolerances(0., 0.), 1.01, false),
        ("Within a 200% scale-up tolerance", tolerances(d, 2.), 1.90, true),
        ("Outside 8% scale-up tolerance (and superfuous scale-down tolerance)", tolerances(2., 0.08), 1.09, false),
        ("Within a 36% scale-down tolerance", tolerances(0.36, d), 0.65, true),
        ("Outside a 34% scale-down tolerance", tolerances(0.34, d), 0.65, false),
    ];
    for (name, t, ratio, within) in cases {
        assert_eq!(
            t.is_within(ratio),
            within,
            "TestReplicaCalcConfigurableTolerance/{name} ({REPLICA_CALCULATOR_TEST_KEP4951})"
        );
    }
}

/// The caps in `GetExternalPerPodMetricReplicas` (not in kube's tables; from the function): a sum
/// past `MaxInt64` (or any negative running sum) is `MaxInt64`, a proposal past `MaxInt32` is
/// `MaxInt32`; zero replicas with load scale to `ceil(sum / target)` whatever the tolerance.
#[test]
fn external_per_pod_caps_and_zero_replicas() {
    let t = Tolerances::both(DEFAULT_TESTING_TOLERANCE);
    let got = external_per_pod_replicas(3, &[i64::MAX, 1], 1000, t);
    assert_eq!(got, PerPod { replicas: i32::MAX, usage: i64::MAX, average: Some(i64::MAX) });
    let got = external_per_pod_replicas(3, &[-5], 1000, t);
    assert_eq!(got.usage, i64::MAX, "Go's `usage < 0` overflow check catches a negative item too");
    let got = external_per_pod_replicas(0, &[20000], 15000, t);
    assert_eq!((got.replicas, got.average), (2, None), "+Inf ratio is not within: ceil(20000/15000)");
    let got = external_per_pod_replicas(0, &[1000], 1000, t);
    assert_eq!(got.replicas, 1, "from zero the tolerance is not applied (ratio +Inf)");
    let got = external_per_pod_replicas(0, &[0], 1000, t);
    assert_eq!(got.replicas, 0, "NaN ratio: ceil(0) stays at zero");
}
