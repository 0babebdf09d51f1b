//! The HPA's `behavior` (`autoscaling/v2` `HorizontalPodAutoscalerBehavior`), read from YAML in
//! the same shape, with kube's defaulting (`pkg/apis/autoscaling/v2/defaults.go`:
//! `GenerateHPAScaleUpRules`, `GenerateHPAScaleDownRules`) and validation
//! (`pkg/apis/autoscaling/validation`: `validateScalingRules`). `tolerance` per direction is
//! KEP-4951's field (`HPAConfigurableTolerance`: alpha in 1.33, beta and on by default from 1.35):
//! unset, the controller's `--horizontal-pod-autoscaler-tolerance` applies; negative is refused.

use std::path::Path;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// The built-in behavior: the chart's `.autoscaling.behavior` default
/// (`deploy/helm/inference-gateway/values.yaml`), word for word. A test compares the two.
pub const BUILTIN_YAML: &str = "\
scaleUp:
  stabilizationWindowSeconds: 0
  selectPolicy: Max
  policies:
    - {type: Percent, value: 100, periodSeconds: 15}
    - {type: Pods, value: 4, periodSeconds: 15}
scaleDown:
  stabilizationWindowSeconds: 300
  selectPolicy: Max
  policies:
    - {type: Percent, value: 50, periodSeconds: 60}
";

/// The chart's `.autoscaling.targetAverageValue` default: one replica per unit of signal.
pub const BUILTIN_TARGET: &str = "1";

/// kube-controller-manager's `--horizontal-pod-autoscaler-downscale-stabilization` default: the
/// scale-down window when `behavior.scaleDown.stabilizationWindowSeconds` is unset.
pub const DEFAULT_DOWNSCALE_STABILIZATION_S: u32 = 300;

/// `MaxPeriodSeconds` of kube's validation.
const MAX_PERIOD_S: i64 = 1800;
/// `MaxStabilizationWindowSeconds` of kube's validation.
const MAX_STABILIZATION_S: i64 = 3600;

/// As written (every field optional, as in the API).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BehaviorSpec {
    pub scale_up: Option<RulesSpec>,
    pub scale_down: Option<RulesSpec>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RulesSpec {
    pub stabilization_window_seconds: Option<i64>,
    pub select_policy: Option<SelectPolicy>,
    pub policies: Option<Vec<Policy>>,
    /// A `resource.Quantity` (`0.05`, `"50m"`), read with `AsApproximateFloat64()`.
    pub tolerance: Option<Quantity>,
}

/// A Kubernetes quantity as YAML writes it: a number or a string.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Quantity {
    Number(f64),
    Text(String),
}

impl Quantity {
    /// `AsApproximateFloat64()`.
    pub fn approximate_f64(&self) -> anyhow::Result<f64> {
        match self {
            Quantity::Number(n) => Ok(*n),
            Quantity::Text(t) => crate::quantity::approximate_f64(t),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum SelectPolicy {
    Max,
    Min,
    Disabled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum PolicyType {
    Pods,
    Percent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    #[serde(rename = "type")]
    pub kind: PolicyType,
    pub value: i64,
    pub period_seconds: i64,
}

/// One direction after defaulting and validation.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    pub stabilization_window_s: u32,
    pub select_policy: SelectPolicy,
    pub policies: Vec<Policy>,
    /// `tolerance`; `None`: the controller's cluster-wide tolerance.
    pub tolerance: Option<f64>,
}

/// Both directions after defaulting and validation: what the controller uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Behavior {
    pub scale_up: Rules,
    pub scale_down: Rules,
}

impl Behavior {
    /// The chart's default ([`BUILTIN_YAML`]).
    pub fn builtin() -> Self {
        Self::from_yaml(BUILTIN_YAML).expect("the built-in behavior is valid")
    }

    pub fn from_yaml(text: &str) -> anyhow::Result<Self> {
        let spec: BehaviorSpec = serde_yaml::from_str(text).context("not an HPA behavior (scaleUp, scaleDown)")?;
        Self::resolve(&spec)
    }

    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_yaml(&text).with_context(|| format!("in {}", path.display()))
    }

    /// kube's defaulting, then its validation.
    pub fn resolve(spec: &BehaviorSpec) -> anyhow::Result<Self> {
        let up = default_rules(
            spec.scale_up.as_ref(),
            0,
            vec![
                Policy { kind: PolicyType::Pods, value: 4, period_seconds: 15 },
                Policy { kind: PolicyType::Percent, value: 100, period_seconds: 15 },
            ],
        );
        let down = default_rules(
            spec.scale_down.as_ref(),
            i64::from(DEFAULT_DOWNSCALE_STABILIZATION_S),
            vec![Policy { kind: PolicyType::Percent, value: 100, period_seconds: 15 }],
        );
        Ok(Self { scale_up: validate(up, "scaleUp")?, scale_down: validate(down, "scaleDown")? })
    }
}

/// `copyHPAScalingRules(from, defaults)`: every field set in `from` wins.
fn default_rules(from: Option<&RulesSpec>, window: i64, policies: Vec<Policy>) -> RulesSpec {
    let mut to = RulesSpec {
        stabilization_window_seconds: Some(window),
        select_policy: Some(SelectPolicy::Max),
        policies: Some(policies),
        tolerance: None,
    };
    if let Some(from) = from {
        if from.select_policy.is_some() {
            to.select_policy = from.select_policy;
        }
        if from.stabilization_window_seconds.is_some() {
            to.stabilization_window_seconds = from.stabilization_window_seconds;
        }
        if from.policies.is_some() {
            to.policies.clone_from(&from.policies);
        }
        to.tolerance.clone_from(&from.tolerance);
    }
    to
}

fn validate(r: RulesSpec, at: &str) -> anyhow::Result<Rules> {
    let window = r.stabilization_window_seconds.unwrap_or(0);
    if !(0..=MAX_STABILIZATION_S).contains(&window) {
        bail!("{at}.stabilizationWindowSeconds: {window}: must be between 0 and {MAX_STABILIZATION_S}");
    }
    let policies = r.policies.unwrap_or_default();
    if policies.is_empty() {
        bail!("{at}.policies: must specify at least one Policy");
    }
    for (i, p) in policies.iter().enumerate() {
        if p.period_seconds <= 0 || p.period_seconds > MAX_PERIOD_S {
            bail!("{at}.policies[{i}].periodSeconds: {}: must be between 1 and {MAX_PERIOD_S}", p.period_seconds);
        }
        if p.value <= 0 || p.value > i64::from(i32::MAX) {
            bail!("{at}.policies[{i}].value: {}: must be greater than zero", p.value);
        }
    }
    let tolerance = match &r.tolerance {
        None => None,
        Some(q) => {
            let t = q.approximate_f64().with_context(|| format!("{at}.tolerance"))?;
            if t.is_nan() || t < 0.0 {
                bail!("{at}.tolerance: {t}: must be greater than or equal to 0");
            }
            Some(t)
        }
    };
    Ok(Rules {
        stabilization_window_s: window as u32,
        select_policy: r.select_policy.unwrap_or(SelectPolicy::Max),
        policies,
        tolerance,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_is_the_charts_default_as_helpers_md_writes_it() {
        let b = Behavior::builtin();
        assert_eq!(b.scale_up.stabilization_window_s, 0);
        assert_eq!(b.scale_up.select_policy, SelectPolicy::Max);
        assert_eq!(
            b.scale_up.policies,
            [
                Policy { kind: PolicyType::Percent, value: 100, period_seconds: 15 },
                Policy { kind: PolicyType::Pods, value: 4, period_seconds: 15 },
            ]
        );
        assert_eq!(b.scale_down.stabilization_window_s, 300);
        assert_eq!(b.scale_down.policies, [Policy { kind: PolicyType::Percent, value: 50, period_seconds: 60 }]);
    }

    #[test]
    fn unset_fields_take_kubes_defaults() {
        let b = Behavior::from_yaml("scaleDown: {stabilizationWindowSeconds: 30}").unwrap();
        assert_eq!(b.scale_up.stabilization_window_s, 0);
        assert_eq!(b.scale_up.policies.len(), 2, "scale up: 4 pods or 100 % per 15 s");
        assert_eq!(b.scale_down.stabilization_window_s, 30);
        assert_eq!(b.scale_down.policies, [Policy { kind: PolicyType::Percent, value: 100, period_seconds: 15 }]);
        let empty = Behavior::from_yaml("{}").unwrap();
        assert_eq!(empty.scale_down.stabilization_window_s, DEFAULT_DOWNSCALE_STABILIZATION_S);
    }

    #[test]
    fn tolerances_are_quantities_per_direction_and_unset_is_none() {
        let b = Behavior::from_yaml("scaleUp: {tolerance: 0.05}\nscaleDown: {tolerance: \"150m\"}").unwrap();
        assert_eq!((b.scale_up.tolerance, b.scale_down.tolerance), (Some(0.05), Some(0.15)));
        // Setting only the tolerance keeps the direction's default policies and window.
        assert_eq!(b.scale_up.policies.len(), 2);
        assert_eq!(b.scale_down.stabilization_window_s, DEFAULT_DOWNSCALE_STABILIZATION_S);
        let b = Behavior::from_yaml("scaleUp: {tolerance: 0}").unwrap();
        assert_eq!((b.scale_up.tolerance, b.scale_down.tolerance), (Some(0.0), None));
        assert_eq!(Behavior::builtin().scale_up.tolerance, None);
    }

    #[test]
    fn invalid_behaviors_are_refused_with_the_field_named() {
        for (yaml, field) in [
            ("scaleUp: {policies: []}", "scaleUp.policies"),
            ("scaleDown: {policies: [{type: Pods, value: 0, periodSeconds: 15}]}", "scaleDown.policies[0].value"),
            ("scaleUp: {policies: [{type: Pods, value: 1, periodSeconds: 1801}]}", "scaleUp.policies[0].periodSeconds"),
            ("scaleDown: {stabilizationWindowSeconds: 3601}", "scaleDown.stabilizationWindowSeconds"),
            ("scaleDown: {stabilizationWindowSeconds: -1}", "scaleDown.stabilizationWindowSeconds"),
            ("scaleUp: {tolerance: -0.01}", "scaleUp.tolerance"),
            ("scaleDown: {tolerance: \"-1m\"}", "scaleDown.tolerance"),
            ("scaleDown: {tolerance: 5x}", "scaleDown.tolerance"),
        ] {
            let e = Behavior::from_yaml(yaml).unwrap_err().to_string();
            assert!(e.starts_with(field), "{yaml}: {e}");
        }
        for yaml in [
            "scaleUp: {selectPolicy: Sometimes}",
            "scaleUp: {policies: [{type: Nodes, value: 1, periodSeconds: 1}]}",
            "scaleSideways: {}",
        ] {
            assert!(Behavior::from_yaml(yaml).is_err(), "{yaml}");
        }
    }
}
