//! Line charts as inline SVG: axes with round ticks, linear or log scale, shaded bands (the
//! run's phases), lines, steps and areas, a legend. Written by hand: a few hundred lines instead
//! of a plotting crate's dependency tree, and the output is plain, well-formed XML.

use std::fmt::Write as _;

/// Escape text for XML.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Style {
    Line,
    Dashed,
    /// Holds each value until the next point (counts: replicas, workers).
    Step,
    /// Filled down to zero.
    Area,
}

#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub color: &'static str,
    pub style: Style,
    pub width: f64,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, color: &'static str, style: Style, points: Vec<(f64, f64)>) -> Self {
        Self { name: name.into(), color, style, width: 2.0, points }
    }
    pub fn width(mut self, w: f64) -> Self {
        self.width = w;
        self
    }
}

/// A shaded stretch of the x axis with a label on top.
#[derive(Debug, Clone)]
pub struct Band {
    pub start: f64,
    pub end: f64,
    pub label: String,
    pub muted: bool,
}

/// How the x axis is labelled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum XAxis {
    /// Seconds from the start: `0s`, `30s`, `1m30s`.
    Time,
    /// "Nines" of a percentile: x is `-log10(1 - p)`, labelled `90%`, `99%`, `99.9%`.
    Nines,
}

#[derive(Debug, Clone)]
pub struct Chart {
    pub width: f64,
    pub height: f64,
    pub y_label: String,
    pub x_axis: XAxis,
    pub x_range: (f64, f64),
    /// Log scale on y (values <= 0 are left out).
    pub y_log: bool,
    pub series: Vec<Series>,
    pub bands: Vec<Band>,
    /// Shown in the middle when there is nothing to draw.
    pub empty_note: Option<String>,
}

const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 42.0;
const BOTTOM: f64 = 34.0;

impl Chart {
    pub fn new(y_label: impl Into<String>, x_range: (f64, f64)) -> Self {
        Self {
            width: 1040.0,
            height: 300.0,
            y_label: y_label.into(),
            x_axis: XAxis::Time,
            x_range,
            y_log: false,
            series: Vec::new(),
            bands: Vec::new(),
            empty_note: None,
        }
    }

    fn y_range(&self) -> (f64, f64) {
        let values = self.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).filter(|v| v.is_finite());
        if self.y_log {
            let pos: Vec<f64> = values.filter(|v| *v > 0.0).collect();
            let lo = pos.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = pos.iter().copied().fold(0.0, f64::max);
            if pos.is_empty() {
                return (0.1, 10.0);
            }
            let lo = 10f64.powf(lo.log10().floor());
            let hi = 10f64.powf(hi.log10().ceil()).max(lo * 10.0);
            (lo, hi)
        } else {
            // Some headroom, so that a line at its maximum is not drawn on the frame.
            let hi = values.fold(0.0, f64::max) * 1.06;
            let hi = if hi <= 0.0 { 1.0 } else { hi };
            let step = nice_step(hi / 5.0);
            (0.0, (hi / step).ceil() * step)
        }
    }

    pub fn render(&self) -> String {
        let (w, h) = (self.width, self.height);
        let (pw, ph) = (w - LEFT - RIGHT, h - TOP - BOTTOM);
        let (x0, x1) =
            if self.x_range.1 > self.x_range.0 { self.x_range } else { (self.x_range.0, self.x_range.0 + 1.0) };
        let (y0, y1) = self.y_range();
        let sx = |x: f64| LEFT + (x.clamp(x0, x1) - x0) / (x1 - x0) * pw;
        let sy = |y: f64| {
            let f = if self.y_log {
                (y.max(y0).log10() - y0.log10()) / (y1.log10() - y0.log10())
            } else {
                (y - y0) / (y1 - y0)
            };
            TOP + ph - f.clamp(0.0, 1.02) * ph
        };
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {w} {h}" width="100%" role="img" aria-label="{}">"#,
            esc(&self.y_label)
        );
        // Bands first, under everything.
        for (i, b) in self.bands.iter().enumerate() {
            let (a, z) = (sx(b.start), sx(b.end));
            if z - a < 0.5 {
                continue;
            }
            let class = if b.muted {
                "band muted"
            } else if i % 2 == 0 {
                "band even"
            } else {
                "band odd"
            };
            let _ = write!(
                s,
                r#"<rect class="{class}" x="{a:.1}" y="{TOP}" width="{:.1}" height="{ph:.1}"><title>{}</title></rect>"#,
                z - a,
                esc(&b.label)
            );
            let _ = write!(
                s,
                r#"<line class="band-edge" x1="{a:.1}" x2="{a:.1}" y1="{:.1}" y2="{:.1}"/>"#,
                TOP - 16.0,
                TOP + ph
            );
            if z - a > 34.0 {
                let max_chars = ((z - a - 8.0) / 6.2) as usize;
                let label: String = if b.label.chars().count() > max_chars {
                    b.label.chars().take(max_chars.saturating_sub(1)).chain(['…']).collect()
                } else {
                    b.label.clone()
                };
                // Above the plot, under the legend: no line covers it.
                let _ = write!(
                    s,
                    r#"<text class="band-label" x="{:.1}" y="{:.1}">{}</text>"#,
                    a + 4.0,
                    TOP - 5.0,
                    esc(&label)
                );
            }
        }
        // Grid and y ticks.
        for v in self.y_ticks(y0, y1) {
            let y = sy(v);
            let _ = write!(s, r#"<line class="grid" x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}"/>"#, LEFT + pw);
            let _ = write!(
                s,
                r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                LEFT - 6.0,
                y + 4.0,
                fmt_num(v)
            );
        }
        // X ticks.
        for v in self.x_ticks(x0, x1) {
            let x = sx(v);
            let _ = write!(
                s,
                r#"<line class="xtick" x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}"/>"#,
                TOP + ph,
                TOP + ph + 4.0
            );
            let label = match self.x_axis {
                XAxis::Time => fmt_time(v),
                XAxis::Nines => fmt_nines(v),
            };
            // A label at the right edge ends there instead of running past it.
            let anchor = if x > LEFT + pw - 20.0 { "end" } else { "middle" };
            let _ = write!(
                s,
                r#"<text class="tick" x="{x:.1}" y="{:.1}" text-anchor="{anchor}">{label}</text>"#,
                TOP + ph + 17.0
            );
        }
        let _ = write!(
            s,
            r#"<line class="axis" x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}"/>"#,
            LEFT + pw,
            TOP + ph,
            TOP + ph
        );
        let _ = write!(
            s,
            r#"<text class="axis-label" x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{}</text>"#,
            TOP + ph / 2.0,
            TOP + ph / 2.0,
            esc(&self.y_label)
        );
        // Series: areas first, then lines on top.
        let mut drawn = 0;
        let mut ordered: Vec<&Series> = self.series.iter().collect();
        ordered.sort_by_key(|s| s.style != Style::Area);
        for series in ordered {
            let pts: Vec<(f64, f64)> = series
                .points
                .iter()
                .copied()
                .filter(|p| p.0.is_finite() && p.1.is_finite() && (!self.y_log || p.1 > 0.0))
                .collect();
            if pts.is_empty() {
                continue;
            }
            drawn += 1;
            let mut d = String::new();
            for (i, (x, y)) in pts.iter().enumerate() {
                let (px, py) = (sx(*x), sy(*y));
                if i == 0 {
                    let _ = write!(d, "M{px:.1} {py:.1}");
                } else if series.style == Style::Step {
                    let _ = write!(d, "H{px:.1}V{py:.1}");
                } else {
                    let _ = write!(d, "L{px:.1} {py:.1}");
                }
            }
            if series.style == Style::Step
                && let Some(last) = pts.last()
                && last.0 < x1
            {
                // A count holds until the end.
                let _ = write!(d, "H{:.1}", sx(x1));
            }
            let title = format!("<title>{}</title>", esc(&series.name));
            match series.style {
                Style::Area => {
                    let base = sy(y0);
                    let _ = write!(
                        s,
                        r#"<path class="area" d="{d}L{:.1} {base:.1}L{:.1} {base:.1}Z" fill="{}">{title}</path>"#,
                        sx(pts[pts.len() - 1].0),
                        sx(pts[0].0),
                        series.color
                    );
                    let _ = write!(
                        s,
                        r#"<path class="line" d="{d}" stroke="{}" stroke-width="{}">{title}</path>"#,
                        series.color, series.width
                    );
                }
                Style::Dashed => {
                    let _ = write!(
                        s,
                        r#"<path class="line" d="{d}" stroke="{}" stroke-width="{}" stroke-dasharray="6 4">{title}</path>"#,
                        series.color, series.width
                    );
                }
                Style::Line | Style::Step => {
                    let _ = write!(
                        s,
                        r#"<path class="line" d="{d}" stroke="{}" stroke-width="{}">{title}</path>"#,
                        series.color, series.width
                    );
                }
            }
            if pts.len() == 1 {
                let _ = write!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}"/>"#,
                    sx(pts[0].0),
                    sy(pts[0].1),
                    series.color
                );
            }
        }
        if drawn == 0
            && let Some(note) = &self.empty_note
        {
            let _ = write!(
                s,
                r#"<text class="empty" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                LEFT + pw / 2.0,
                TOP + ph / 2.0,
                esc(note)
            );
        }
        // Legend, top right, in series order.
        let mut lx = LEFT + pw;
        for series in self.series.iter().rev().filter(|s| !s.points.is_empty()) {
            let text_w = series.name.chars().count() as f64 * 6.6;
            lx -= text_w + 26.0;
            let dash = if series.style == Style::Dashed { r#" stroke-dasharray="4 3""# } else { "" };
            let _ = write!(
                s,
                r#"<g class="legend"><line x1="{lx:.1}" x2="{:.1}" y1="8" y2="8" stroke="{}" stroke-width="3"{dash}/><text x="{:.1}" y="12">{}</text></g>"#,
                lx + 16.0,
                series.color,
                lx + 20.0,
                esc(&series.name)
            );
        }
        s.push_str("</svg>");
        s
    }

    fn y_ticks(&self, y0: f64, y1: f64) -> Vec<f64> {
        if self.y_log {
            let mut out = Vec::new();
            let mut decade = y0;
            while decade <= y1 * 1.0001 {
                for m in [1.0, 2.0, 5.0] {
                    let v = decade * m;
                    if v >= y0 * 0.9999 && v <= y1 * 1.0001 && (m == 1.0 || y1 / y0 <= 1000.0) {
                        out.push(v);
                    }
                }
                decade *= 10.0;
            }
            out
        } else {
            let step = nice_step((y1 - y0) / 5.0);
            (0..=((y1 - y0) / step).round() as usize).map(|i| y0 + i as f64 * step).collect()
        }
    }

    fn x_ticks(&self, x0: f64, x1: f64) -> Vec<f64> {
        match self.x_axis {
            XAxis::Nines => (0..=(x1.floor() as usize)).map(|i| i as f64).collect(),
            XAxis::Time => {
                let span = x1 - x0;
                let step = [1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0]
                    .into_iter()
                    .find(|s| span / s <= 10.0)
                    .unwrap_or(14400.0);
                let first = (x0 / step).ceil() * step;
                (0..).map(|i| first + i as f64 * step).take_while(|v| *v <= x1 + 1e-9).collect()
            }
        }
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
pub fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].into_iter().map(|m| m * p).find(|s| *s >= raw * 0.999).unwrap_or(10.0 * p)
}

/// A tick value: `0`, `0.5`, `12`, `1.5k`, `20k`, `1.2M`.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_owned() } else { s };
    if a >= 1e6 {
        format!("{}M", trim(format!("{:.1}", v / 1e6)))
    } else if a >= 1e4 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        trim(format!("{v:.1}"))
    } else {
        trim(format!("{v:.3}"))
    }
}

/// Seconds as `45s`, `2m`, `1m30s`, `1h5m`.
pub fn fmt_time(s: f64) -> String {
    let s = s.round() as i64;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        if s % 60 == 0 { format!("{}m", s / 60) } else { format!("{}m{}s", s / 60, s % 60) }
    } else if s % 3600 == 0 {
        format!("{}h", s / 3600)
    } else {
        format!("{}h{}m", s / 3600, (s % 3600) / 60)
    }
}

fn fmt_nines(x: f64) -> String {
    let n = x.round() as i32;
    match n {
        0 => "0%".to_owned(),
        1 => "90%".to_owned(),
        2 => "99%".to_owned(),
        n => format!("99.{}%", "9".repeat((n - 2) as usize)),
    }
}

/// Percentile (0..100) to the "nines" axis; the maximum goes just right of the last point.
pub fn nines(p: f64) -> f64 {
    -(1.0 - p / 100.0).max(1e-9).log10()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(nice_step(17.0), 20.0);
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(2.2), 2.5);
        let c = Chart::new("req/s", (0.0, 95.0));
        assert_eq!(c.x_ticks(0.0, 95.0), [0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0]);
        let mut log = Chart::new("ms", (0.0, 1.0));
        log.y_log = true;
        log.series.push(Series::new("p99", "red", Style::Line, vec![(0.0, 0.3), (1.0, 420.0)]));
        assert_eq!(log.y_range(), (0.1, 1000.0));
        assert_eq!(fmt_time(90.0), "1m30s");
        assert_eq!(fmt_time(3900.0), "1h5m");
        assert_eq!(fmt_num(25000.0), "25k");
        assert_eq!(fmt_num(0.25), "0.25");
        assert_eq!(fmt_nines(3.0), "99.9%");
    }

    #[test]
    fn a_chart_is_well_formed_svg_with_a_path_per_series_and_escaped_text() {
        let mut c = Chart::new("req/s <&>", (0.0, 10.0));
        c.series.push(Series::new("ok/s", "#2563eb", Style::Area, vec![(0.0, 1.0), (5.0, 3.0), (10.0, 2.0)]));
        c.series.push(Series::new("workers", "#10b981", Style::Step, vec![(0.0, 1.0), (4.0, 2.0)]));
        c.bands.push(Band { start: 0.0, end: 5.0, label: "10/s".into(), muted: false });
        let svg = c.render();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let paths: Vec<_> = doc.descendants().filter(|n| n.has_tag_name("path")).collect();
        assert_eq!(paths.len(), 3, "area fill, area edge, step line");
        assert!(svg.contains("req/s &lt;&amp;&gt;"));
        assert!(paths.iter().any(|p| p.attribute("d").unwrap().contains('H')), "steps are drawn as steps");
    }
}
