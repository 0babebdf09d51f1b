//! `scaler replay`: the HPA's decisions over a recorded signal, offline. The input is JSON lines
//! with a time (`t` in seconds, or `t_ms`) and the metric, either as a field named like it
//! (`{"t_ms": 1200, "gateway_pool_signal": 2.4}`, what `benches/metrics_api.sh` records) or as a
//! series line (`{"t": ..., "series": "gateway_pool_signal", "value": 2.4}`, what `scaler run
//! --series` writes). Every `interval` from the first point, the controller reads the latest
//! value at or before that time; the replicas follow each decision at once.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;
use tokio::time::Instant;

use crate::hpa::{Controller, Decision};

/// Points `(seconds, milli-units)` from the file, in time order.
pub fn read_points(path: &Path, field: &str) -> anyhow::Result<Vec<(f64, i64)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut pts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))?;
        let t = match (v.get("t_ms").and_then(Value::as_f64), v.get("t").and_then(Value::as_f64)) {
            (Some(ms), _) => ms / 1000.0,
            (None, Some(s)) => s,
            _ => bail!("{}:{}: no `t` or `t_ms`", path.display(), i + 1),
        };
        let value = match v.get("series").and_then(Value::as_str) {
            Some(s) if s == field => v.get("value"),
            Some(_) => continue,
            None => v.get(field),
        };
        let milli = match value {
            Some(Value::Number(n)) => (n.as_f64().unwrap_or(0.0) * 1000.0).round() as i64,
            Some(Value::String(q)) => crate::quantity::milli_value(q)?,
            Some(Value::Null) | None => continue,
            Some(other) => bail!("{}:{}: {field}: {other}", path.display(), i + 1),
        };
        pts.push((t, milli));
    }
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(pts)
}

/// The decisions, one per sync, as `(seconds since the first point, decision)`.
pub fn replay(
    ctl: &mut Controller,
    points: &[(f64, i64)],
    interval: Duration,
    start_replicas: i32,
) -> Vec<(f64, Decision)> {
    let Some(&(t0, _)) = points.first() else { return Vec::new() };
    let t_end = points.last().map_or(t0, |p| p.0);
    let origin = Instant::now();
    let mut out = Vec::new();
    let mut current = start_replicas;
    let mut k = 0u32;
    loop {
        let at = interval * k;
        let t = t0 + at.as_secs_f64();
        if t > t_end + 1e-9 {
            break;
        }
        let latest = points.iter().rev().find(|p| p.0 <= t + 1e-9).map(|p| p.1);
        let values: Vec<i64> = latest.into_iter().collect();
        let d = ctl.reconcile(origin + at, current, Ok(&values));
        current = d.desired;
        out.push((t - t0, d));
        k += 1;
    }
    out
}
