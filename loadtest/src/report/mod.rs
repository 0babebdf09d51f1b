//! The HTML report: one self-contained file (inline CSS and SVG, no script, nothing fetched),
//! drawn from a [`Summary`]: headline figures, plots over time (offered vs achieved rate,
//! latency percentiles, errors, requests in flight, and the gateway's signal and replicas with
//! the caller's series), the latency distribution, and tables per phase and per error.
//!
//! The markup is also well-formed XML, so tests parse it with an XML parser.

mod svg;
mod tables;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use svg::{Band, Chart, Series, Style, XAxis, esc, fmt_num, fmt_time};
use tables::{details, errors_table, fmt_pct, group, ms, ms_plain, phases_table, utc};

use crate::summary::{Summary, Tick};

/// The report's style sheet, inlined.
const CSS: &str = include_str!("style.css");

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
    // A short last row (the run ended just after a tick) would show a rate out of few requests.
    let min_dt = s.interval_s * 0.5;
    let rate = |f: fn(&Tick) -> f64| -> Vec<(f64, f64)> {
        rows.iter().filter(|r| r.dt >= min_dt).map(|r| (mid(r), f(r) / r.dt)).collect()
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
            .filter(|r| r.dt >= min_dt)
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
    let mut caption = "Requests outstanding and connections open at the end of each interval.".to_owned();
    if let Some(g) = signal.filter(|g| g.samples.iter().any(|x| x.held > 0)) {
        flight.series.push(
            Series::new(
                "held at the gateway",
                RED,
                Style::Step,
                g.samples.iter().map(|x| (x.t, x.held as f64)).collect(),
            )
            .width(2.0),
        );
        caption.push_str(" Held: requests the gateway kept waiting for a ready worker (a pool waking from zero), answered once one was ready.");
    }
    section(h, "In flight", &caption, &flight);

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

#[cfg(test)]
mod tests {
    use super::tables::*;

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
