//! The profile language of `--rate`.
//!
//! ```text
//! profile := seq
//! seq     := sum (("," | "then") sum)*          one after another
//! sum     := atom ("+" atom)*                   rates added; as long as the longest term
//! atom    := RATE                                constant; as long as the rest of its sum, or --duration
//!          | const(RATE, DUR)
//!          | ramp(FROM, TO, DUR)                 linear from FROM to TO
//!          | steps(RATE RATE ..., DUR)           each rate for DUR (rates split by spaces or commas)
//!          | sine(MEAN, AMPLITUDE, PERIOD, DUR)  MEAN + AMPLITUDE sin(2πt/PERIOD), never below 0
//!          | spike(BASE, PEAK, DUR[, WIDTH])     BASE for DUR with PEAK in the middle for WIDTH (DUR/10)
//!          | trace(FILE.csv[, SCALE])            CSV lines `seconds,rate` (a header line is skipped),
//!                                                linear between points, rates times SCALE
//!          | "(" seq ")"
//! RATE    := number ["/s" | "/m"]                per second unless "/m"
//! DUR     := number ("ms" | "s" | "m" | "h")
//! ```
//!
//! Examples: `200` (200/s for `--duration`); `ramp(0, 500, 30s)`; `steps(10 20 40 80 40 20 10, 15s)`
//! (up, then back down); `ramp(0, 100, 10s), const(100, 1m), ramp(100, 0, 10s)`;
//! `sine(100, 50, 20s, 2m)`; `100 + spike(0, 400, 1m, 5s)` (+400/s for 5 s mid-minute); `const(50, 10s) then spike(50, 500, 20s, 2s)`.

use std::path::Path;

use super::{Phase, Piece, Profile, fmt_rate};

/// Pieces per period of a sine.
const SINE_PIECES: usize = 64;

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("rate profile {input:?}, at character {at}: {message}")]
pub struct ParseError {
    pub input: String,
    pub at: usize,
    pub message: String,
}

/// Parse a profile; open-ended constants last `default_length` seconds (see the module docs).
pub fn parse(input: &str, default_length: f64) -> Result<Profile, ParseError> {
    let mut p = Parser { s: input, pos: 0 };
    let node = p.seq()?;
    p.ws();
    if p.pos < p.s.len() {
        return Err(p.err("unexpected text (profiles are joined with \",\" or \"then\", summed with \"+\")"));
    }
    let profile = node.compile(default_length);
    if profile.length() <= 0.0 {
        return Err(p.err_at(0, "the profile has no length"));
    }
    Ok(profile)
}

#[derive(Debug, Clone)]
enum Node {
    /// `length: None`: open-ended.
    Const {
        rate: f64,
        length: Option<f64>,
    },
    Ramp {
        from: f64,
        to: f64,
        length: f64,
    },
    Steps {
        rates: Vec<f64>,
        each: f64,
    },
    Sine {
        mean: f64,
        amplitude: f64,
        period: f64,
        length: f64,
    },
    Spike {
        base: f64,
        peak: f64,
        length: f64,
        width: f64,
    },
    Trace {
        label: String,
        points: Vec<(f64, f64)>,
    },
    Seq(Vec<Node>),
    Sum(Vec<Node>),
}

impl Node {
    /// Length with open-ended constants at `default`; whether it is open-ended.
    fn length(&self, default: f64) -> (f64, bool) {
        match self {
            Node::Const { length: None, .. } => (default, true),
            Node::Const { length: Some(l), .. } => (*l, false),
            Node::Ramp { length, .. } | Node::Sine { length, .. } | Node::Spike { length, .. } => (*length, false),
            Node::Steps { rates, each } => (rates.len() as f64 * each, false),
            Node::Trace { points, .. } => (points.last().map_or(0.0, |p| p.0), false),
            Node::Seq(nodes) => (nodes.iter().map(|n| n.length(default).0).sum(), false),
            Node::Sum(nodes) => {
                let closed = nodes.iter().map(|n| n.length(default)).filter(|(_, open)| !open).map(|(l, _)| l);
                match closed.reduce(f64::max) {
                    Some(l) => (l, false),
                    None => (default, true),
                }
            }
        }
    }

    fn compile(&self, open_length: f64) -> Profile {
        match self {
            Node::Const { rate, length } => Profile::constant(*rate, length.unwrap_or(open_length)),
            Node::Ramp { from, to, length } => Profile::new(
                vec![Piece { t0: 0.0, t1: *length, r0: *from, r1: *to }],
                vec![Phase {
                    label: format!("ramp {}→{}/s", fmt_rate(*from), fmt_rate(*to)),
                    start: 0.0,
                    end: *length,
                }],
            ),
            Node::Steps { rates, each } => {
                rates.iter().map(|r| Profile::constant(*r, *each)).reduce(Profile::then).expect("at least one step")
            }
            Node::Sine { mean, amplitude, period, length } => {
                let n = ((length / period) * SINE_PIECES as f64).ceil().max(1.0) as usize;
                let rate = |t: f64| (mean + amplitude * (std::f64::consts::TAU * t / period).sin()).max(0.0);
                let pieces = (0..n)
                    .map(|i| {
                        let (t0, t1) = (length * i as f64 / n as f64, length * (i + 1) as f64 / n as f64);
                        Piece { t0, t1, r0: rate(t0), r1: rate(t1) }
                    })
                    .collect();
                let label = format!("sine {}±{}/s", fmt_rate(*mean), fmt_rate(*amplitude));
                Profile::new(pieces, vec![Phase { label, start: 0.0, end: *length }])
            }
            Node::Spike { base, peak, length, width } => {
                let side = (length - width) / 2.0;
                let mut spike = Profile::constant(*peak, *width);
                spike.phases[0].label = format!("spike {}/s", fmt_rate(*peak));
                Profile::constant(*base, side).then(spike).then(Profile::constant(*base, side))
            }
            Node::Trace { label, points } => {
                let pieces = points
                    .windows(2)
                    .filter(|w| w[1].0 > w[0].0)
                    .map(|w| Piece { t0: w[0].0, t1: w[1].0, r0: w[0].1, r1: w[1].1 })
                    .collect();
                let end = points.last().map_or(0.0, |p| p.0);
                Profile::new(pieces, vec![Phase { label: label.clone(), start: 0.0, end }])
            }
            Node::Seq(nodes) => {
                nodes.iter().map(|n| n.compile(open_length)).reduce(Profile::then).expect("at least one term")
            }
            Node::Sum(nodes) => {
                let (length, _) = self.length(open_length);
                let mut terms = nodes.iter().map(|n| n.compile(length));
                let first = terms.next().expect("at least one term");
                terms.fold(first, |acc, t| acc.plus(&t))
            }
        }
    }
}

struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, message: impl Into<String>) -> ParseError {
        self.err_at(self.pos, message)
    }
    fn err_at(&self, at: usize, message: impl Into<String>) -> ParseError {
        ParseError { input: self.s.to_owned(), at, message: message.into() }
    }
    fn rest(&self) -> &str {
        &self.s[self.pos..]
    }
    fn ws(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.s.len() - trimmed.len();
    }
    /// Consume `tok` (after spaces) if it comes next.
    fn eat(&mut self, tok: &str) -> bool {
        self.ws();
        if self.rest().starts_with(tok) {
            self.pos += tok.len();
            true
        } else {
            false
        }
    }
    fn expect(&mut self, tok: &str) -> Result<(), ParseError> {
        if self.eat(tok) { Ok(()) } else { Err(self.err(format!("expected {tok:?}"))) }
    }
    /// A word of letters, without consuming it.
    fn peek_word(&mut self) -> &str {
        self.ws();
        let r = self.rest();
        let end = r.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(r.len());
        &r[..end]
    }

    fn seq(&mut self) -> Result<Node, ParseError> {
        let mut terms = vec![self.sum()?];
        loop {
            if self.eat(",") {
                terms.push(self.sum()?);
            } else if self.peek_word() == "then" {
                self.pos += 4;
                terms.push(self.sum()?);
            } else {
                break;
            }
        }
        Ok(if terms.len() == 1 { terms.pop().expect("one") } else { Node::Seq(terms) })
    }

    fn sum(&mut self) -> Result<Node, ParseError> {
        let mut terms = vec![self.atom()?];
        while self.eat("+") {
            terms.push(self.atom()?);
        }
        Ok(if terms.len() == 1 { terms.pop().expect("one") } else { Node::Sum(terms) })
    }

    fn atom(&mut self) -> Result<Node, ParseError> {
        if self.eat("(") {
            let inner = self.seq()?;
            self.expect(")")?;
            return Ok(inner);
        }
        let start = self.pos;
        let word = self.peek_word().to_owned();
        if word.is_empty() {
            let rate = self.rate()?;
            return Ok(Node::Const { rate, length: None });
        }
        self.pos += word.len();
        self.expect("(")?;
        let node = match word.as_str() {
            "const" => {
                let rate = self.rate()?;
                self.expect(",")?;
                Node::Const { rate, length: Some(self.duration()?) }
            }
            "ramp" => {
                let from = self.rate()?;
                self.expect(",")?;
                let to = self.rate()?;
                self.expect(",")?;
                Node::Ramp { from, to, length: self.duration()? }
            }
            "steps" => self.steps()?,
            "sine" => {
                let mean = self.rate()?;
                self.expect(",")?;
                let amplitude = self.rate()?;
                self.expect(",")?;
                let period = self.duration()?;
                self.expect(",")?;
                Node::Sine { mean, amplitude, period, length: self.duration()? }
            }
            "spike" => {
                let base = self.rate()?;
                self.expect(",")?;
                let peak = self.rate()?;
                self.expect(",")?;
                let length = self.duration()?;
                let width = if self.eat(",") { self.duration()? } else { length / 10.0 };
                if width > length {
                    return Err(self.err("the spike is wider than the whole"));
                }
                Node::Spike { base, peak, length, width }
            }
            "trace" => self.trace()?,
            other => {
                return Err(self.err_at(
                    start,
                    format!("unknown shape {other:?} (const, ramp, steps, sine, spike, trace, or a number)"),
                ));
            }
        };
        self.expect(")")?;
        Ok(node)
    }

    fn steps(&mut self) -> Result<Node, ParseError> {
        // Rates split by spaces or commas, then ", DUR": a duration is a number with a time unit.
        let mut rates = Vec::new();
        loop {
            self.ws();
            let before = self.pos;
            let (value, unit) = self.number_with_unit()?;
            if is_time_unit(unit) {
                if rates.is_empty() {
                    return Err(self.err_at(before, "steps(RATE RATE ..., DUR) needs at least one rate"));
                }
                let each = to_seconds(value, unit).ok_or_else(|| self.err_at(before, "bad duration"))?;
                return Ok(Node::Steps {
                    rates,
                    each: positive(each).ok_or_else(|| self.err_at(before, "a step must last more than 0"))?,
                });
            }
            rates.push(to_rate(value, unit).ok_or_else(|| self.err_at(before, format!("not a rate: unit {unit:?}")))?);
            self.eat(",");
        }
    }

    fn trace(&mut self) -> Result<Node, ParseError> {
        self.ws();
        let r = self.rest();
        let end = r.find([',', ')']).unwrap_or(r.len());
        let path = r[..end].trim().to_owned();
        let at = self.pos;
        self.pos += end;
        let scale = if self.eat(",") { self.plain_number()? } else { 1.0 };
        let text = std::fs::read_to_string(&path).map_err(|e| self.err_at(at, format!("trace file {path:?}: {e}")))?;
        let points = read_trace(&text, scale).map_err(|e| self.err_at(at, format!("trace file {path:?}: {e}")))?;
        let name = Path::new(&path).file_name().map_or(path.clone(), |n| n.to_string_lossy().into_owned());
        Ok(Node::Trace { label: format!("trace {name}"), points })
    }

    /// A number and the unit letters (or `/s`, `/m`) right after it.
    fn number_with_unit(&mut self) -> Result<(f64, &'a str), ParseError> {
        self.ws();
        let r = self.rest();
        let num_end = number_len(r);
        let value: f64 = r[..num_end].parse().map_err(|_| self.err("expected a number"))?;
        if !value.is_finite() || value < 0.0 {
            return Err(self.err("expected a number of at least 0"));
        }
        let after = &r[num_end..];
        let unit_end = after.find(|c: char| !(c.is_ascii_alphabetic() || c == '/')).unwrap_or(after.len());
        let start = self.pos;
        self.pos += num_end + unit_end;
        let s: &'a str = self.s;
        Ok((value, &s[start + num_end..start + num_end + unit_end]))
    }

    fn plain_number(&mut self) -> Result<f64, ParseError> {
        self.ws();
        let at = self.pos;
        match self.number_with_unit()? {
            (v, "") => Ok(v),
            (_, unit) => Err(self.err_at(at, format!("expected a plain number, not one in {unit:?}"))),
        }
    }

    fn rate(&mut self) -> Result<f64, ParseError> {
        self.ws();
        let at = self.pos;
        let (value, unit) = self.number_with_unit()?;
        to_rate(value, unit)
            .ok_or_else(|| self.err_at(at, format!("expected a rate such as 100 or 100/s, not unit {unit:?}")))
    }

    fn duration(&mut self) -> Result<f64, ParseError> {
        self.ws();
        let at = self.pos;
        let (value, unit) = self.number_with_unit()?;
        to_seconds(value, unit)
            .and_then(positive)
            .ok_or_else(|| self.err_at(at, "expected a duration above 0 such as 500ms, 10s, 2m or 1h"))
    }
}

/// Length of the decimal number (digits, a point, an exponent) at the start of `r`.
fn number_len(r: &str) -> usize {
    let b = r.as_bytes();
    let mut i = 0;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
        i += 1;
    }
    if i > 0 && i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'-' || b[j] == b'+') {
            j += 1;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            i = j;
        }
    }
    i
}

fn is_time_unit(unit: &str) -> bool {
    matches!(unit, "ms" | "s" | "m" | "h")
}

fn to_seconds(v: f64, unit: &str) -> Option<f64> {
    Some(match unit {
        "ms" => v / 1e3,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return None,
    })
}

fn to_rate(v: f64, unit: &str) -> Option<f64> {
    match unit {
        "" | "/s" => Some(v),
        "/m" => Some(v / 60.0),
        _ => None,
    }
}

fn positive(v: f64) -> Option<f64> {
    (v > 0.0).then_some(v)
}

/// `seconds,rate` lines (blank lines, `#` comments and one header line skipped), shifted to
/// start at 0, times non-decreasing.
fn read_trace(text: &str, scale: f64) -> Result<Vec<(f64, f64)>, String> {
    let mut points: Vec<(f64, f64)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut cols = line.split(',').map(str::trim);
        let (Some(t), Some(r)) = (cols.next(), cols.next()) else {
            return Err(format!("line {}: expected `seconds,rate`", i + 1));
        };
        let (Ok(t), Ok(r)) = (t.parse::<f64>(), r.parse::<f64>()) else {
            if points.is_empty() && i == text.lines().position(|l| !l.trim().is_empty()).unwrap_or(0) {
                continue; // a header
            }
            return Err(format!("line {}: not numbers: {line:?}", i + 1));
        };
        if !t.is_finite() || !r.is_finite() || r < 0.0 {
            return Err(format!("line {}: bad value", i + 1));
        }
        if let Some(&(prev, _)) = points.last()
            && t < prev
        {
            return Err(format!("line {}: time {t} before the previous {prev}", i + 1));
        }
        points.push((t, r * scale));
    }
    if points.len() < 2 {
        return Err("needs at least two points".to_owned());
    }
    let t0 = points[0].0;
    Ok(points.into_iter().map(|(t, r)| (t - t0, r)).collect())
}
