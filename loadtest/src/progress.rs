//! The live display: a line per interval (rates, latency, errors, the gateway's signal and
//! workers, the caller's series) and, on a terminal, a status bar under it. Quiet unless stdout
//! is a terminal, or `--progress always` (plain lines, to stderr when stdout carries `--json`).

use std::io::{IsTerminal, Write};

use crate::summary::{SignalSample, Tick};

/// When to show the live display.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum When {
    /// When stdout is a terminal.
    Auto,
    Always,
    Never,
}

const HEADER_EVERY: usize = 25;

pub struct Progress {
    out: Option<Box<dyn Write>>,
    tty: bool,
    lines: usize,
    total: Option<f64>,
    signal: bool,
    status_shown: bool,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress").field("on", &self.out.is_some()).field("tty", &self.tty).finish()
    }
}

/// The figures of one line.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub tick: &'a Tick,
    pub phase: &'a str,
    pub signal: Option<&'a SignalSample>,
    pub series: &'a [(String, f64)],
    /// Totals so far.
    pub ok: u64,
    pub failed: u64,
}

impl Progress {
    /// `total`: the expected length in seconds, when known; `signal`: a signal column.
    pub fn new(when: When, stdout_is_json: bool, total: Option<f64>, signal: bool) -> Self {
        let stdout_tty = std::io::stdout().is_terminal();
        let on = match when {
            When::Auto => stdout_tty,
            When::Always => true,
            When::Never => false,
        };
        let (out, tty): (Option<Box<dyn Write>>, bool) = match (on, stdout_is_json) {
            (false, _) => (None, false),
            (true, false) => (Some(Box::new(std::io::stdout())), stdout_tty),
            (true, true) => (Some(Box::new(std::io::stderr())), std::io::stderr().is_terminal()),
        };
        Self { out, tty, lines: 0, total, signal, status_shown: false }
    }

    /// A display that writes to `out` (tests).
    pub fn to_writer(out: Box<dyn Write>, tty: bool, total: Option<f64>, signal: bool) -> Self {
        Self { out: Some(out), tty, lines: 0, total, signal, status_shown: false }
    }

    pub fn is_on(&self) -> bool {
        self.out.is_some()
    }

    fn header(&self) -> String {
        let mut h = format!(
            "{:>7} {:<16} {:>9} {:>9} {:>8} {:>9} {:>6} {:>8} {:>8} {:>8}",
            "time", "phase", "offered/s", "ok/s", "errors/s", "in-flight", "conns", "p50 ms", "p99 ms", "max ms"
        );
        if self.signal {
            h.push_str(&format!(" | {:>7} {:>7}", "signal", "workers"));
        }
        h
    }

    pub fn tick(&mut self, v: &View<'_>) {
        if self.out.is_none() {
            return;
        }
        let mut text = String::new();
        if self.status_shown {
            text.push_str("\r\x1b[2K");
        }
        if self.lines.is_multiple_of(HEADER_EVERY) {
            let h = self.header();
            text.push_str(&if self.tty { format!("\x1b[1m{h}\x1b[0m\n") } else { format!("{h}\n") });
        }
        self.lines += 1;
        let t = v.tick;
        let per_s = |n: u64| if t.dt > 0.0 { n as f64 / t.dt } else { 0.0 };
        let offered = t.offered.map_or("-".to_owned(), |o| format!("{:.1}", per_s(o)));
        let ms = |f: fn(&crate::stats::Percentiles) -> f64| {
            t.latency.as_ref().map_or("-".to_owned(), |p| format!("{:.2}", f(p)))
        };
        let errors = format!("{:.1}", per_s(t.failed));
        let errors =
            if self.tty && t.failed > 0 { format!("\x1b[31m{errors:>8}\x1b[0m") } else { format!("{errors:>8}") };
        let mut phase: String = v.phase.chars().take(16).collect();
        if phase.is_empty() {
            phase.push('-');
        }
        let time = if t.dt < 0.95 { format!("{:.1}s", t.t) } else { format!("{:.0}s", t.t) };
        text.push_str(&format!(
            "{:>7} {:<16} {:>9} {:>9.1} {} {:>9} {:>6} {:>8} {:>8} {:>8}",
            time,
            phase,
            offered,
            per_s(t.ok),
            errors,
            t.in_flight,
            t.connections,
            ms(|p| p.p50_ms),
            ms(|p| p.p99_ms),
            ms(|p| p.max_ms)
        ));
        if self.signal {
            match v.signal {
                Some(s) => text.push_str(&format!(
                    " | {:>7.2} {:>7}{}",
                    s.signal,
                    s.workers,
                    if s.stale { " stale" } else { "" }
                )),
                None => text.push_str(&format!(" | {:>7} {:>7}", "?", "?")),
            }
        }
        for (name, value) in v.series {
            text.push_str(&format!("  {name}={}", crate::profile::fmt_rate(*value)));
        }
        text.push('\n');
        if self.tty {
            text.push_str(&self.status(t.t, v.ok, v.failed));
            self.status_shown = true;
        }
        if let Some(out) = self.out.as_mut() {
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
    }

    fn status(&self, t: f64, ok: u64, failed: u64) -> String {
        const WIDTH: usize = 30;
        let bar = match self.total {
            Some(total) if total > 0.0 => {
                let done = ((t / total).clamp(0.0, 1.0) * WIDTH as f64).round() as usize;
                format!("[{}{}] {t:.0}/{total:.0} s", "#".repeat(done), ".".repeat(WIDTH - done))
            }
            _ => format!("{t:.0} s"),
        };
        format!("{bar}  {ok} ok, {failed} failed  (Ctrl-C stops and reports)")
    }

    /// A line of its own (e.g. "stopping").
    pub fn message(&mut self, msg: &str) {
        let clear = if self.status_shown { "\r\x1b[2K" } else { "" };
        self.status_shown = false;
        if let Some(out) = self.out.as_mut() {
            let _ = writeln!(out, "{clear}{msg}");
            let _ = out.flush();
        }
    }

    /// Clear the status bar.
    pub fn finish(&mut self) {
        if self.status_shown
            && let Some(out) = self.out.as_mut()
        {
            let _ = write!(out, "\r\x1b[2K");
            let _ = out.flush();
        }
        self.status_shown = false;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::stats::Percentiles;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn tick() -> Tick {
        Tick {
            t: 3.0,
            dt: 1.0,
            offered: Some(40),
            sent: 40,
            ok: 38,
            failed: 2,
            errors: [("429 overloaded".to_owned(), 2)].into(),
            latency: Some(Percentiles {
                p50_ms: 12.5,
                p90_ms: 20.0,
                p99_ms: 31.25,
                p999_ms: 40.0,
                max_ms: 44.0,
                mean_ms: 13.0,
            }),
            in_flight: 3,
            connections: 5,
        }
    }

    #[test]
    fn a_plain_line_carries_rates_latency_signal_and_series_without_escapes() {
        let buf = Buf::default();
        let mut p = Progress::to_writer(Box::new(buf.clone()), false, Some(10.0), true);
        let sig = SignalSample { t: 3.0, signal: 2.25, workers: 2, ..Default::default() };
        let series = vec![("replicas_desired".to_owned(), 3.0)];
        p.tick(&View { tick: &tick(), phase: "40/s", signal: Some(&sig), series: &series, ok: 100, failed: 2 });
        p.finish();
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].contains("offered/s") && lines[0].contains("signal"));
        for part in ["3s", "40/s", "40.0", "38.0", "2.0", "12.50", "31.25", "44.00", "2.25", "replicas_desired=3"] {
            assert!(lines[1].contains(part), "{part} in {:?}", lines[1]);
        }
        assert!(!text.contains('\x1b'), "no terminal escapes off a terminal");
    }

    #[test]
    fn on_a_terminal_the_status_bar_is_redrawn_under_the_lines() {
        let buf = Buf::default();
        let mut p = Progress::to_writer(Box::new(buf.clone()), true, Some(10.0), false);
        let v = View { tick: &tick(), phase: "x", signal: None, series: &[], ok: 1, failed: 0 };
        p.tick(&v);
        p.tick(&v);
        p.finish();
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("[#########"), "{text}");
        assert_eq!(text.matches("\r\x1b[2K").count(), 2, "cleared before the second line and at the end");
    }
}
