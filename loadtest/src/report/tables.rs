//! The report's tables (phases, errors), the run's details, and number formatting.

use std::fmt::Write as _;

use super::svg::{esc, fmt_num};
use crate::summary::{PhaseSummary, Summary};

pub fn phases_table(h: &mut String, s: &Summary) {
    h.push_str(r#"<section class="panel"><h2>Phases</h2><table><thead><tr><th class="l">phase</th>"#);
    h.push_str("<th>seconds</th><th>offered/s</th><th>ok/s</th><th>requests</th><th>failed</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th></tr></thead><tbody>");
    let row = |h: &mut String, p: &PhaseSummary, class: &str| {
        let offered = p.rate.map_or_else(|| p.concurrency.map_or("–".to_owned(), |c| format!("c={c}")), fmt_num);
        let failed = p.failed();
        let fclass = if failed > 0 { " bad" } else { "" };
        let _ = write!(
            h,
            r#"<tr class="{class}"><td class="l">{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td class="n{fclass}">{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td></tr>"#,
            esc(&p.label),
            p.seconds,
            offered,
            fmt_num(p.throughput_per_s),
            group(p.requests),
            group(failed),
            p.p50_ms,
            p.p90_ms,
            p.p99_ms,
            p.p999_ms,
            p.max_ms
        );
    };
    for p in &s.phases {
        row(h, p, "");
    }
    if s.phases.len() > 1 {
        row(h, &s.total, "total");
    }
    h.push_str("</tbody></table></section>");
}

pub fn errors_table(h: &mut String, s: &Summary) {
    h.push_str(r#"<section class="panel"><h2>Errors</h2>"#);
    if s.total.errors_by_kind.is_empty() {
        h.push_str(r#"<p class="ok">No failed requests in the measured phases.</p></section>"#);
        return;
    }
    h.push_str(r#"<table><thead><tr><th class="l">status</th><th class="l">error_type / failure</th><th>count</th><th>share of requests</th></tr></thead><tbody>"#);
    let mut kinds = s.total.errors_by_kind.clone();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.count));
    for e in &kinds {
        let (status, what) = match &e.failed {
            crate::client::Failed::Status { status, error_type } => (status.to_string(), error_type.clone()),
            crate::client::Failed::Connect { error } => ("–".to_owned(), format!("connect: {error}")),
            crate::client::Failed::Transport { error } => ("–".to_owned(), format!("transport: {error}")),
            crate::client::Failed::Timeout => ("–".to_owned(), "timeout".to_owned()),
        };
        let share = if s.total.requests > 0 { 100.0 * e.count as f64 / s.total.requests as f64 } else { 0.0 };
        let _ = write!(
            h,
            r#"<tr><td class="l">{}</td><td class="l"><code>{}</code></td><td>{}</td><td>{}%</td></tr>"#,
            esc(&status),
            esc(&what),
            group(e.count),
            fmt_pct(share)
        );
    }
    h.push_str("</tbody></table></section>");
}

pub fn details(h: &mut String, s: &Summary) {
    h.push_str(r#"<section class="panel details"><h2>Run</h2><dl>"#);
    let mut item = |k: &str, v: String| {
        let _ = write!(h, "<dt>{}</dt><dd>{v}</dd>", esc(k));
    };
    item(
        "target",
        format!("<code>{}</code>", esc(&format!("{}{}", s.target.url.trim_end_matches('/'), s.target.path))),
    );
    let batch = if s.target.batch > 1 { format!(", {} queries per request", s.target.batch) } else { String::new() };
    item(
        "requests",
        esc(&format!("{}, HTTP/{}{batch}, timeout {}s", s.target.method, s.target.http, fmt_num(s.target.timeout_s))),
    );
    item("generator", esc(&format!("loadtest {}, {} thread(s)", s.loadtest, s.target.threads)));
    item(
        "connections",
        format!(
            "{} opened, {} request(s) resent after a kept-alive connection was closed",
            group(s.connections_opened),
            group(s.resent)
        ),
    );
    if let (Some(svc), Some(lag)) = (&s.service, &s.send_lag) {
        item(
            "open loop",
            format!(
                "latency runs from each request's due time. Service time (from the write): p50 {}, p99 {}. Send lag (write after due time, the generator's timer and load): p50 {}, p99 {}, max {}.",
                ms_plain(svc.p50_ms),
                ms_plain(svc.p99_ms),
                ms_plain(lag.p50_ms),
                ms_plain(lag.p99_ms),
                ms_plain(lag.max_ms)
            ),
        );
        if s.waited > 0 {
            item(
                "senders",
                esc(&format!(
                    "{} request(s) found every sender busy (--max-in-flight) and waited for one; the wait is in their latency",
                    group(s.waited)
                )),
            );
        }
    }
    if let Some(g) = &s.signal {
        item(
            "signal",
            esc(&format!("{} samples from {} (pool {}), {} failed", g.samples.len(), g.url, g.pool, g.failures)),
        );
    }
    for n in &s.notes {
        item("note", esc(n));
    }
    item("command", format!("<code>{}</code>", esc(&s.command.join(" "))));
    h.push_str("</dl></section>");
}

pub fn ms(v: f64) -> String {
    format!("{}<small> ms</small>", fmt_ms(v))
}
pub fn ms_plain(v: f64) -> String {
    format!("{} ms", fmt_ms(v))
}
pub fn fmt_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}
pub fn fmt_pct(v: f64) -> String {
    if (99.995..100.0).contains(&v) {
        return "99.99".to_owned();
    }
    if v == 100.0 || v == 0.0 { format!("{v:.0}") } else { format!("{v:.2}") }
}

/// `1234567` as `1,234,567`.
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Unix milliseconds as `2026-11-22 04:11:05`.
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, (rem % 3600) / 60, rem % 60)
}
