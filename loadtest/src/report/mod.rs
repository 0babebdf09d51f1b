//! The HTML report: one self-contained file (inline CSS and SVG, no script, nothing fetched),
//! drawn from a [`Summary`]: headline figures, plots over time (offered vs achieved rate,
//! latency percentiles, errors, requests in flight, and the gateway's signal and replicas with
//! the caller's series), the latency distribution, and tables per phase and per error.
//!
//! The markup is also well-formed XML, so tests parse it with an XML parser.

mod svg;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use svg::{Band, Chart, Series, Style, XAxis, esc, fmt_num, fmt_time};

use crate::summary::{PhaseSummary, Summary, Tick};

const BLUE: &str = "#2563eb";
const SKY: &str = "#0ea5e9";
const ORANGE: &str = "#f59e0b";
const RED: &str = "#dc2626";
const GREEN: &str = "#059669";
const PURPLE: &str = "#7c3aed";
const GREY: &str = "#6b7280";
const PINK: &str = "#db2777";
const TEAL: &str = "#0d9488";
/// Colours of series without a fixed one (errors, caller series).
const PALETTE: [&str; 8] = [RED, PURPLE, PINK, ORANGE, TEAL, SKY, GREY, GREEN];

/// Most points drawn per series; longer timelines are averaged into buckets.
const MAX_POINTS: usize = 1200;

pub fn render(s: &Summary) -> String {
    let mut h = String::with_capacity(256 * 1024);
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>");
    h.push_str(r#"<meta name="viewport" content="width=device-width, initial-scale=1"/>"#);
    let _ = write!(h, "<title>{}</title><style>{CSS}</style></head><body><main>", esc(&s.title));
    header(&mut h, s);
    cards(&mut h, s);
    charts(&mut h, s);
    phases_table(&mut h, s);
    errors_table(&mut h, s);
    details(&mut h, s);
    h.push_str("</main></body></html>\n");
    h
}

fn header(h: &mut String, s: &Summary) {
    let mode = match (&s.profile, s.mode.as_str()) {
        (Some(p), _) => format!("open loop, rate profile <code>{}</code>", esc(p)),
        (None, _) => {
            let cs: Vec<String> = s.phases.iter().filter_map(|p| p.concurrency.map(|c| c.to_string())).collect();
            format!("closed loop, {} client(s)", cs.join(" → "))
        }
    };
    let _ = write!(
        h,
        r#"<header><h1>{}</h1><p class="sub">{} <span class="dot">·</span> {} <span class="dot">·</span> {} <span class="dot">·</span> {} UTC</p></header>"#,
        esc(&s.title),
        esc(&format!("{} {}{}", s.target.method, s.target.url.trim_end_matches('/'), s.target.path)),
        mode,
        fmt_time(s.seconds),
        utc(s.started_unix_ms)
    );
}

fn card(h: &mut String, label: &str, value: &str, note: &str, class: &str) {
    let _ = write!(
        h,
        r#"<div class="card {class}"><div class="label">{}</div><div class="value">{}</div><div class="note">{}</div></div>"#,
        esc(label),
        value,
        note
    );
}

fn cards(h: &mut String, s: &Summary) {
    let t = &s.total;
    h.push_str(r#"<section class="cards">"#);
    let failed = t.failed();
    card(h, "Requests", &group(t.requests), &format!("{} ok · {} failed", group(t.ok), group(failed)), "");
    let success = if t.requests > 0 { 100.0 * t.ok as f64 / t.requests as f64 } else { 0.0 };
    let class = if failed == 0 {
        "good"
    } else if success >= 99.0 {
        "warn"
    } else {
        "bad"
    };
    card(
        h,
        "Success",
        &format!("{}<small>%</small>", fmt_pct(success)),
        &format!("{} error kind(s)", t.errors.len()),
        class,
    );
    let peak = s.timeline.iter().filter(|r| r.dt > 0.2).map(|r| r.ok as f64 / r.dt).fold(0.0, f64::max);
    let offered = t.rate.map(|r| format!(" · offered {}/s", fmt_num(r))).unwrap_or_default();
    card(
        h,
        "Throughput",
        &format!("{}<small>/s</small>", fmt_num(t.throughput_per_s)),
        &format!("peak {}/s{offered}", fmt_num(peak)),
        "",
    );
    card(h, "Latency p50", &ms(t.p50_ms), &format!("mean {}", ms_plain(t.mean_ms)), "");
    card(h, "p99", &ms(t.p99_ms), &format!("p90 {}", ms_plain(t.p90_ms)), "");
    card(h, "p99.9", &ms(t.p999_ms), &format!("max {}", ms_plain(t.max_ms)), "");
    if let Some(sig) = s.signal.as_ref().filter(|g| !g.samples.is_empty()) {
        let peak = sig.samples.iter().map(|x| x.signal).fold(0.0, f64::max);
        let lo = sig.samples.iter().map(|x| x.workers).min().unwrap_or(0);
        let hi = sig.samples.iter().map(|x| x.workers).max().unwrap_or(0);
        card(h, "Peak signal", &format!("{peak:.2}"), &format!("pool {} · workers {lo}–{hi}", esc(&sig.pool)), "");
    }
    h.push_str("</section>");
}

fn section(h: &mut String, title: &str, caption: &str, chart: &Chart) {
    let _ = write!(
        h,
        r#"<section class="panel"><h2>{}</h2><p class="caption">{}</p>{}</section>"#,
        esc(title),
        caption,
        chart.render()
    );
}

fn charts(h: &mut String, s: &Summary) {
    let x = (0.0, s.seconds.max(s.timeline.last().map_or(0.0, |t| t.t)).max(1.0));
    let bands: Vec<Band> = s
        .spans
        .iter()
        .map(|sp| Band { start: sp.start, end: sp.end, label: sp.label.clone(), muted: sp.warmup })
        .collect();
    let rows = bucket(&s.timeline);
    let mid = |r: &Tick| r.t - r.dt / 2.0;
    let rate = |f: fn(&Tick) -> f64| -> Vec<(f64, f64)> {
        rows.iter().filter(|r| r.dt > 0.0).map(|r| (mid(r), f(r) / r.dt)).collect()
    };

    // Offered vs achieved.
    let mut load = Chart::new("requests / s", x);
    load.bands = bands.clone();
    load.series.push(Series::new("ok", BLUE, Style::Area, rate(|r| r.ok as f64)));
    if s.mode == "open" {
        load.series.push(Series::new("offered", GREY, Style::Dashed, rate(|r| r.offered.unwrap_or(0) as f64)));
    } else {
        load.series.push(Series::new("sent", GREY, Style::Dashed, rate(|r| r.sent as f64)));
    }
    if rows.iter().any(|r| r.failed > 0) {
        load.series.push(Series::new("failed", RED, Style::Line, rate(|r| r.failed as f64)));
    }
    let caption = if s.mode == "open" {
        "Requests due per second on the schedule (offered) against successes per second. A gap means the server (or the generator) could not keep up."
    } else {
        "Requests sent and successes per second; in a closed loop the rate follows the server's speed."
    };
    section(h, "Offered vs achieved", caption, &load);

    // Latency percentiles over time.
    let lat = |f: fn(&crate::stats::Percentiles) -> f64| -> Vec<(f64, f64)> {
        rows.iter().filter_map(|r| r.latency.as_ref().map(|p| (mid(r), f(p)))).collect()
    };
    let mut latency = Chart::new("latency (ms)", x);
    latency.bands = bands.clone();
    latency.series.push(Series::new("p50", BLUE, Style::Line, lat(|p| p.p50_ms)));
    latency.series.push(Series::new("p90", TEAL, Style::Line, lat(|p| p.p90_ms)));
    latency.series.push(Series::new("p99", ORANGE, Style::Line, lat(|p| p.p99_ms)));
    latency.series.push(Series::new("max", RED, Style::Line, lat(|p| p.max_ms)).width(1.2));
    let lows = rows.iter().filter_map(|r| r.latency.map(|p| p.p50_ms)).fold(f64::INFINITY, f64::min);
    let highs = rows.iter().filter_map(|r| r.latency.map(|p| p.max_ms)).fold(0.0, f64::max);
    latency.y_log = highs > 0.0 && lows > 0.0 && highs / lows > 30.0;
    latency.empty_note = Some("no successful requests".to_owned());
    let from = if s.mode == "open" {
        "from each request's due time (no coordinated omission)"
    } else {
        "from the moment each request was sent"
    };
    let scale = if latency.y_log { " Log scale." } else { "" };
    section(h, "Latency", &format!("Percentiles of the successes finished in each interval, {from}.{scale}"), &latency);

    // Errors over time.
    let mut errors = Chart::new("errors / s", x);
    errors.bands = bands.clone();
    let mut totals: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &rows {
        for (k, v) in &r.errors {
            *totals.entry(k).or_default() += v;
        }
    }
    let mut kinds: Vec<(&str, u64)> = totals.into_iter().collect();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    for (i, (kind, _)) in kinds.iter().take(PALETTE.len()).enumerate() {
        let pts = rows
            .iter()
            .filter(|r| r.dt > 0.0)
            .map(|r| (mid(r), *r.errors.get(*kind).unwrap_or(&0) as f64 / r.dt))
            .collect();
        errors.series.push(Series::new(*kind, PALETTE[i], Style::Line, pts));
    }
    errors.empty_note = Some("no failed requests".to_owned());
    if kinds.is_empty() {
        errors.height = 150.0;
    }
    section(
        h,
        "Errors",
        "Failed requests per second, by status and <code>error_type</code>, or by transport failure.",
        &errors,
    );

    // Scaling: the gateway's signal and workers, and the caller's series.
    let signal = s.signal.as_ref().filter(|g| !g.samples.is_empty());
    if signal.is_some() || !s.series.is_empty() {
        let mut scale = Chart::new("replicas", x);
        scale.bands = bands.clone();
        if let Some(g) = signal {
            let pts =
                |f: fn(&crate::summary::SignalSample) -> f64| g.samples.iter().map(|x| (x.t, f(x))).collect::<Vec<_>>();
            scale.series.push(Series::new("signal", ORANGE, Style::Line, pts(|x| x.signal)).width(2.5));
            scale.series.push(Series::new("queue term", ORANGE, Style::Dashed, pts(|x| x.queue)).width(1.0));
            if g.samples.iter().any(|x| x.gpu > 0.0) {
                scale.series.push(Series::new("GPU term", PURPLE, Style::Dashed, pts(|x| x.gpu)).width(1.0));
            }
            scale.series.push(Series::new("workers", GREEN, Style::Step, pts(|x| x.workers as f64)).width(2.5));
        }
        for (i, (name, pts)) in s.series.iter().enumerate() {
            scale.series.push(Series::new(name.clone(), PALETTE[(i + 1) % PALETTE.len()], Style::Step, pts.clone()));
        }
        let cap = match signal {
            Some(g) => format!(
                "The gateway's scaling signal for pool <code>{}</code> (replicas the load needs at target; sampled from <code>{}</code>), its queue term, and the pool's workers now. Step lines from <code>--series</code> files are the caller's own.",
                esc(&g.pool),
                esc(&g.url)
            ),
            None => "Series from <code>--series</code> files.".to_owned(),
        };
        section(h, "Scaling signal and replicas", &cap, &scale);
    }

    // In flight and connections.
    let mut flight = Chart::new("requests / connections", x);
    flight.bands = bands;
    flight.series.push(Series::new(
        "in flight",
        PURPLE,
        Style::Line,
        rows.iter().map(|r| (r.t, r.in_flight as f64)).collect(),
    ));
    flight.series.push(Series::new(
        "connections",
        GREY,
        Style::Dashed,
        rows.iter().map(|r| (r.t, r.connections as f64)).collect(),
    ));
    section(h, "In flight", "Requests outstanding and connections open at the end of each interval.", &flight);

    // The latency distribution.
    if !s.latency_spectrum.is_empty() {
        // The maximum (100 %) sits just right of the last percentile.
        let place = |spec: &[(f64, f64)]| -> (Vec<(f64, f64)>, f64) {
            let pts: Vec<(f64, f64)> = spec.iter().map(|(p, v)| (svg::nines(*p), *v)).collect();
            let last = pts.iter().filter(|p| p.0 < 8.0).map(|p| p.0).fold(0.0, f64::max);
            (pts.into_iter().map(|(x, v)| (if x >= 8.0 { last + 0.3 } else { x }, v)).collect(), last + 0.3)
        };
        let (lat, end) = place(&s.latency_spectrum);
        let (svc, _) = place(&s.service_spectrum);
        let mut dist = Chart::new("latency (ms)", (0.0, end.ceil().max(2.0)));
        dist.x_axis = XAxis::Nines;
        let open = !svc.is_empty();
        dist.series.push(Series::new(if open { "from the due time" } else { "latency" }, BLUE, Style::Line, lat));
        if open {
            dist.series.push(Series::new("from the write (service time)", GREY, Style::Dashed, svc));
        }
        let lo = s.latency_spectrum.first().map_or(0.0, |p| p.1);
        let hi = s.latency_spectrum.last().map_or(0.0, |p| p.1);
        dist.y_log = lo > 0.0 && hi / lo > 30.0;
        dist.height = 260.0;
        let cap = if open {
            "Latency by percentile over all measured phases, the tail to the right (99%, 99.9%, ...; the last point is the maximum). From the due time is what a user arriving on schedule waits; from the write leaves out the wait for a free sender (<code>--max-in-flight</code>) and the generator's own send lag."
        } else {
            "Latency by percentile over all measured phases, the tail to the right (99%, 99.9%, ...; the last point is the maximum)."
        };
        section(h, "Latency distribution", cap, &dist);
    }
}

/// Average timeline rows into at most [`MAX_POINTS`] buckets (counts summed, percentiles
/// averaged, the maximum kept).
fn bucket(rows: &[Tick]) -> Vec<Tick> {
    if rows.len() <= MAX_POINTS {
        return rows.to_vec();
    }
    let k = rows.len().div_ceil(MAX_POINTS);
    rows.chunks(k)
        .map(|c| {
            let mut t = c.last().expect("chunk").clone();
            t.dt = c.iter().map(|r| r.dt).sum();
            t.offered = c.iter().map(|r| r.offered).sum();
            t.sent = c.iter().map(|r| r.sent).sum();
            t.ok = c.iter().map(|r| r.ok).sum();
            t.failed = c.iter().map(|r| r.failed).sum();
            let mut errors = BTreeMap::new();
            for r in c {
                for (k, v) in &r.errors {
                    *errors.entry(k.clone()).or_default() += v;
                }
            }
            t.errors = errors;
            let lats: Vec<_> = c.iter().filter_map(|r| r.latency).collect();
            t.latency = (!lats.is_empty()).then(|| {
                let n = lats.len() as f64;
                let avg = |f: fn(&crate::stats::Percentiles) -> f64| lats.iter().map(f).sum::<f64>() / n;
                crate::stats::Percentiles {
                    p50_ms: avg(|p| p.p50_ms),
                    p90_ms: avg(|p| p.p90_ms),
                    p99_ms: avg(|p| p.p99_ms),
                    p999_ms: avg(|p| p.p999_ms),
                    max_ms: lats.iter().map(|p| p.max_ms).fold(0.0, f64::max),
                    mean_ms: avg(|p| p.mean_ms),
                }
            });
            t
        })
        .collect()
}

fn phases_table(h: &mut String, s: &Summary) {
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

fn errors_table(h: &mut String, s: &Summary) {
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

fn details(h: &mut String, s: &Summary) {
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

fn ms(v: f64) -> String {
    format!("{}<small> ms</small>", fmt_ms(v))
}
fn ms_plain(v: f64) -> String {
    format!("{} ms", fmt_ms(v))
}
fn fmt_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}
fn fmt_pct(v: f64) -> String {
    if (99.995..100.0).contains(&v) {
        return "99.99".to_owned();
    }
    if v == 100.0 || v == 0.0 { format!("{v:.0}") } else { format!("{v:.2}") }
}

/// `1234567` as `1,234,567`.
fn group(n: u64) -> String {
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
fn utc(ms: u64) -> String {
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

const CSS: &str = r#"
:root { --ink: #111827; --muted: #6b7280; --line: #e5e7eb; --bg: #f5f6f8; --card: #ffffff; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
  font: 14px/1.45 -apple-system, BlinkMacSystemFont, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1100px; margin: 0 auto; padding: 28px 20px 48px; }
header h1 { font-size: 22px; margin: 0 0 4px; font-weight: 650; letter-spacing: -0.01em; }
.sub { color: var(--muted); margin: 0 0 20px; }
.dot { margin: 0 6px; color: #c0c4cc; }
code { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #eef0f3; padding: 1px 5px; border-radius: 4px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(140px, 1fr)); gap: 12px; margin-bottom: 18px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px; }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: 0.04em; }
.card .value { font-size: 24px; font-weight: 650; margin: 2px 0; font-variant-numeric: tabular-nums; }
.card .value small { font-size: 13px; font-weight: 500; color: var(--muted); }
.card .note { color: var(--muted); font-size: 12px; }
.card.good { border-top: 3px solid #059669; }
.card.warn { border-top: 3px solid #f59e0b; }
.card.bad { border-top: 3px solid #dc2626; }
.panel { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px 10px; margin-bottom: 16px; }
.panel h2 { font-size: 15px; margin: 0 0 2px; font-weight: 650; }
.caption { color: var(--muted); margin: 0 0 8px; font-size: 12.5px; }
svg.chart { display: block; }
svg .grid { stroke: #eceef1; stroke-width: 1; }
svg .axis { stroke: #9ca3af; stroke-width: 1; }
svg .xtick { stroke: #9ca3af; }
svg .tick { fill: #6b7280; font-size: 11px; }
svg .axis-label { fill: #6b7280; font-size: 11px; }
svg .band.even { fill: #f3f6fb; }
svg .band.odd { fill: #fbfbfd; }
svg .band.muted { fill: #eeeeee; }
svg .band-label { fill: #6b7280; font-size: 10.5px; }
svg .band-edge { stroke: #d9dde3; stroke-width: 1; }
svg .line { fill: none; stroke-linejoin: round; stroke-linecap: round; }
svg .area { opacity: 0.13; stroke: none; }
svg .legend text { fill: #374151; font-size: 11.5px; }
svg .empty { fill: #9ca3af; font-size: 13px; }
table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; margin-bottom: 6px; }
th, td { padding: 6px 8px; text-align: right; border-bottom: 1px solid var(--line); white-space: nowrap; }
th { color: var(--muted); font-weight: 600; font-size: 12px; }
.l { text-align: left; }
tr.total td { font-weight: 650; border-top: 2px solid var(--line); }
td.bad { color: #dc2626; font-weight: 600; }
p.ok { color: #059669; margin: 4px 0 8px; }
.details dl { display: grid; grid-template-columns: 120px 1fr; gap: 6px 14px; margin: 6px 0; }
.details dt { color: var(--muted); }
.details dd { margin: 0; overflow-wrap: anywhere; }
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_numbers_and_percentages_read_well() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_795_365_526_671), "2026-11-22 16:38:46");
        assert_eq!(group(1_234_567), "1,234,567");
        assert_eq!(group(12), "12");
        assert_eq!(fmt_pct(100.0), "100");
        assert_eq!(fmt_pct(99.999), "99.99");
        assert_eq!(fmt_ms(12.345), "12.3");
    }
}
