//! The Prometheus exposition a scraper asked for: OpenMetrics as `prometheus-client` writes it,
//! or the Prometheus text format 0.0.4 made from it. Shared by the worker's and the gateway's
//! `/metrics`.

/// `Content-Type` of the OpenMetrics exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// `Content-Type` of the Prometheus text exposition 0.0.4.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The exposition a scraper asked for by its `Accept` header: OpenMetrics when it names
/// `application/openmetrics-text` (Prometheus does), else the Prometheus text format 0.0.4
/// (`curl`, `promtool check metrics`, older scrapers). Returns the `Content-Type` and the body.
pub fn negotiate(openmetrics: String, accept: Option<&str>) -> (&'static str, String) {
    if accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
        (OPENMETRICS_CONTENT_TYPE, openmetrics)
    } else {
        (TEXT_CONTENT_TYPE, openmetrics_to_text(&openmetrics))
    }
}

/// The Prometheus text format 0.0.4 of an OpenMetrics exposition as `prometheus-client` writes
/// it. They differ where a parser of one rejects the other: a counter family is named with its
/// `_total` in `# HELP`/`# TYPE` (OpenMetrics names it without), `unknown` is `untyped`, and
/// there is no `# EOF`, `# UNIT`, `_created` sample or exemplar.
pub fn openmetrics_to_text(om: &str) -> String {
    let counters: std::collections::HashSet<&str> =
        om.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.strip_suffix(" counter")).collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ").or_else(|| line.strip_prefix("# TYPE ")) {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = if counters.contains(name) { format!("{name}_total") } else { name.to_owned() };
            if line.starts_with("# HELP ") {
                // OpenMetrics escapes `"` in help text; the text format does not.
                out.push_str(&format!("# HELP {name} {}\n", tail.replace("\\\"", "\"")));
            } else {
                let kind = if tail == "unknown" { "untyped" } else { tail };
                out.push_str(&format!("# TYPE {name} {kind}\n"));
            }
            continue;
        }
        let series = line.split([' ', '{']).next().unwrap_or("");
        if series.ends_with("_created") && !line.starts_with('#') {
            continue;
        }
        // An exemplar follows ` # ` after the value.
        out.push_str(line.split(" # ").next().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_exposition_names_counters_with_their_total() {
        let om = "# HELP x_requests Requests \\\"served\\\".\n# TYPE x_requests counter\nx_requests_total{a=\"b\"} 3\nx_requests_created 1.5\n# HELP x_up Up.\n# TYPE x_up gauge\nx_up 1 # {id=\"e\"} 1.0\n# TYPE x_odd unknown\nx_odd 2\n# EOF\n";
        assert_eq!(
            openmetrics_to_text(om),
            "# HELP x_requests_total Requests \"served\".\n# TYPE x_requests_total counter\nx_requests_total{a=\"b\"} 3\n# HELP x_up Up.\n# TYPE x_up gauge\nx_up 1\n# TYPE x_odd untyped\nx_odd 2\n"
        );
        assert_eq!(
            negotiate(om.to_owned(), Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5")).0,
            OPENMETRICS_CONTENT_TYPE
        );
        assert_eq!(negotiate(om.to_owned(), Some("*/*")).0, TEXT_CONTENT_TYPE);
        assert_eq!(negotiate(om.to_owned(), None).0, TEXT_CONTENT_TYPE);
    }
}
