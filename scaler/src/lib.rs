//! A local autoscaler that does what the HPA will do in a cluster: it reads the gateway's
//! external metric with the HPA's request (HTTPS, a client certificate), decides with the HPA
//! controller's algorithm and `behavior` ([`hpa`], [`behavior`]), and starts and stops CPU
//! worker processes through the gateway's worker file ([`workers`]).
#![forbid(unsafe_code)]

pub mod args;
pub mod behavior;
pub mod certs;
pub mod client;
pub mod hpa;
pub mod quantity;
pub mod replay;
pub mod series;
pub mod workers;

#[cfg(test)]
mod hpa_tests;
#[cfg(test)]
mod kube_tables;

/// One decision as a line: time, metric, current, desired, reason.
pub fn decision_line(clock: &str, d: &hpa::Decision, target_milli: i64) -> String {
    let metric = match d.metric_milli {
        Some(m) => format!("{:.3}", m as f64 / 1000.0),
        None => "-".to_owned(),
    };
    let mut s = format!(
        "{clock}  metric={metric:<7} target={}  current={} desired={}  {}",
        quantity::format_milli(target_milli),
        d.current,
        d.desired,
        if d.reason.is_empty() { "no change" } else { d.reason.as_str() }
    );
    if d.able_to_scale != "ReadyForNewScale" {
        s.push_str(&format!(" [{}]", d.able_to_scale));
    }
    if d.limited != "DesiredWithinRange" {
        s.push_str(&format!(" [{}]", d.limited));
    }
    s
}
