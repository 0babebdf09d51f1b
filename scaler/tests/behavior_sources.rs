//! The scaler's built-in `behavior` and target are the chart's defaults, so what runs locally is
//! what the HPA the chart installs will do.

use scaler::behavior::{BUILTIN_TARGET, Behavior, BehaviorSpec};

#[test]
fn the_builtin_behavior_and_target_are_the_charts() {
    let path = testkit::repo_root().join("deploy/helm/inference-gateway/values.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let values: serde_yaml::Value = serde_yaml::from_str(&text).expect("values.yaml is YAML");
    let autoscaling = &values["autoscaling"];
    let behavior: BehaviorSpec =
        serde_yaml::from_value(autoscaling["behavior"].clone()).expect(".autoscaling.behavior has the HPA's shape");
    // Equal as written (no field left to defaulting on one side only) and once resolved.
    let builtin: BehaviorSpec = serde_yaml::from_str(scaler::behavior::BUILTIN_YAML).unwrap();
    assert_eq!(behavior, builtin, ".autoscaling.behavior differs from the scaler's built-in behavior");
    assert_eq!(Behavior::resolve(&behavior).unwrap(), Behavior::builtin());
    let target = match &autoscaling["targetAverageValue"] {
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Number(n) => n.to_string(),
        other => panic!(".autoscaling.targetAverageValue: {other:?}"),
    };
    assert_eq!(
        scaler::quantity::milli_value(&target).unwrap(),
        scaler::quantity::milli_value(BUILTIN_TARGET).unwrap(),
        ".autoscaling.targetAverageValue {target} is not the scaler's default {BUILTIN_TARGET}"
    );
}
