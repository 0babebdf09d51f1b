//! Rate profiles: the arrival rate of an open-loop run as a function of time, and the arithmetic
//! that turns it into send times.
//!
//! Every shape compiles to a piecewise-linear rate `r(t)` (constant, ramp, steps and trace are
//! exact; a sine is cut into 64 linear pieces per period, within 0.1 % of its amplitude). The
//! expected number of arrivals by time `t` is `N(t) = ∫ r`, quadratic on each piece, so both
//! `N(t)` and its inverse are closed-form. Request `n` (from 0) is due at the time `t_n` where
//! `N(t_n) = n + 1/2`: a constant 100/s sends at 5 ms, 15 ms, ... and a run of `D` seconds sends
//! `round(100 D)` requests; a piece at rate 0 sends nothing.
//!
//! A profile is also cut into *phases* (one per step of `steps`, per term of a sequence...): the
//! summary and the report give figures per phase, attributed by each request's due time.
//!
//! The language is parsed in `parse` (`parse.rs`); see its documentation for the syntax.

mod parse;

pub use parse::{ParseError, parse};

/// One linear piece of the rate: from `r0` at `t0` to `r1` at `t1` (seconds, requests/s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Piece {
    pub t0: f64,
    pub t1: f64,
    pub r0: f64,
    pub r1: f64,
}

impl Piece {
    fn len(&self) -> f64 {
        self.t1 - self.t0
    }
    fn slope(&self) -> f64 {
        if self.len() > 0.0 { (self.r1 - self.r0) / self.len() } else { 0.0 }
    }
    fn rate_at(&self, t: f64) -> f64 {
        self.r0 + self.slope() * (t - self.t0)
    }
    /// Arrivals from `t0` to `t` (clamped to the piece).
    fn area_to(&self, t: f64) -> f64 {
        let x = (t - self.t0).clamp(0.0, self.len());
        self.r0 * x + 0.5 * self.slope() * x * x
    }
    fn area(&self) -> f64 {
        0.5 * (self.r0 + self.r1) * self.len()
    }
    /// The offset `x` into the piece where the area reaches `a` (`0 <= a <= area`).
    fn offset_of_area(&self, a: f64) -> f64 {
        let s = self.slope();
        // Solves r0 x + s x²/2 = a in the form that is stable for both signs of s and for r0 = 0.
        let disc = (self.r0 * self.r0 + 2.0 * s * a).max(0.0);
        let denom = self.r0 + disc.sqrt();
        let x = if denom > 0.0 { 2.0 * a / denom } else { 0.0 };
        x.clamp(0.0, self.len())
    }
}

/// A named part of the profile, for figures per phase.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub label: String,
    pub start: f64,
    pub end: f64,
}

/// A compiled rate profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pieces: Vec<Piece>,
    /// Arrivals before each piece.
    before: Vec<f64>,
    phases: Vec<Phase>,
}

impl Profile {
    /// From contiguous pieces starting at 0 and their phases.
    pub fn new(pieces: Vec<Piece>, phases: Vec<Phase>) -> Self {
        let mut before = Vec::with_capacity(pieces.len());
        let mut total = 0.0;
        for p in &pieces {
            before.push(total);
            total += p.area();
        }
        Self { pieces, before, phases }
    }

    /// A constant rate for `length` seconds.
    pub fn constant(rate: f64, length: f64) -> Self {
        let label = format!("{}/s", fmt_rate(rate));
        Self::new(
            vec![Piece { t0: 0.0, t1: length, r0: rate, r1: rate }],
            vec![Phase { label, start: 0.0, end: length }],
        )
    }

    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }
    pub fn phases(&self) -> &[Phase] {
        &self.phases
    }

    /// Length in seconds.
    pub fn length(&self) -> f64 {
        self.pieces.last().map_or(0.0, |p| p.t1)
    }

    /// The rate at `t` (the later piece's at a boundary; 0 outside the profile).
    pub fn rate_at(&self, t: f64) -> f64 {
        match self.piece_at(t) {
            Some(i) => self.pieces[i].rate_at(t),
            None => 0.0,
        }
    }

    fn piece_at(&self, t: f64) -> Option<usize> {
        if t < 0.0 || t >= self.length() {
            return None;
        }
        let i = self.pieces.partition_point(|p| p.t1 <= t);
        (i < self.pieces.len()).then_some(i)
    }

    /// Expected arrivals in `[0, t]`: `N(t)`.
    pub fn arrivals_by(&self, t: f64) -> f64 {
        if t <= 0.0 {
            return 0.0;
        }
        let i = self.pieces.partition_point(|p| p.t1 <= t);
        if i >= self.pieces.len() {
            return self.total();
        }
        self.before[i] + self.pieces[i].area_to(t)
    }

    /// Expected arrivals over the whole profile.
    pub fn total(&self) -> f64 {
        self.before.last().zip(self.pieces.last()).map_or(0.0, |(b, p)| b + p.area())
    }

    /// Requests due in `[0, t)`: those `n` with `t_n < t`.
    pub fn due_before(&self, t: f64) -> u64 {
        // t_n < t  <=>  n + 1/2 < N(t) (N is non-decreasing; equality only on flat stretches).
        let n = self.arrivals_by(t);
        if n <= 0.5 { 0 } else { (n - 0.5).ceil() as u64 }
    }

    /// Mean rate over `[a, b]`.
    pub fn mean_rate(&self, a: f64, b: f64) -> f64 {
        if b <= a { 0.0 } else { (self.arrivals_by(b) - self.arrivals_by(a)) / (b - a) }
    }

    /// Due time of request `n` (seconds from the start), or `None` past the end.
    pub fn due(&self, n: u64) -> Option<f64> {
        let mut cursor = Cursor::default();
        self.due_from(n, &mut cursor)
    }

    /// As [`Self::due`], for increasing `n`: resumes the piece search from `cursor`.
    pub fn due_from(&self, n: u64, cursor: &mut Cursor) -> Option<f64> {
        let target = n as f64 + 0.5;
        let mut i = cursor.piece;
        if i < self.pieces.len() && self.before[i] > target {
            i = 0;
        }
        while i < self.pieces.len() {
            let p = &self.pieces[i];
            let rel = target - self.before[i];
            // Strictly inside this piece's arrivals (a piece at rate 0 holds none).
            if rel < p.area() {
                cursor.piece = i;
                return Some(p.t0 + p.offset_of_area(rel));
            }
            i += 1;
        }
        cursor.piece = i;
        None
    }

    /// The phase holding time `t` (the last phase at its end).
    pub fn phase_at(&self, t: f64) -> Option<usize> {
        let i = self.phases.partition_point(|p| p.end <= t);
        (i < self.phases.len() && self.phases[i].start <= t).then_some(i)
    }

    /// This profile followed by `next`.
    pub fn then(mut self, next: Profile) -> Profile {
        let off = self.length();
        self.pieces.extend(next.pieces.iter().map(|p| Piece { t0: p.t0 + off, t1: p.t1 + off, ..*p }));
        self.phases.extend(next.phases.into_iter().map(|p| Phase { start: p.start + off, end: p.end + off, ..p }));
        Profile::new(self.pieces, self.phases)
    }

    /// The sum of this profile's rate and `other`'s (each 0 past its end); as long as the longer.
    /// The phases are this profile's, the last one stretched to the new length.
    pub fn plus(self, other: &Profile) -> Profile {
        let length = self.length().max(other.length());
        let mut cuts: Vec<f64> =
            self.pieces.iter().chain(&other.pieces).flat_map(|p| [p.t0, p.t1]).chain([0.0, length]).collect();
        cuts.sort_by(f64::total_cmp);
        cuts.dedup();
        let side = |prof: &Profile, a: f64, b: f64| -> (f64, f64) {
            // The rate just after a and just before b, within one piece of `prof` (cuts include
            // every boundary, so [a, b] lies inside one piece or outside the profile).
            let mid = 0.5 * (a + b);
            match prof.piece_at(mid) {
                Some(i) => (prof.pieces[i].rate_at(a), prof.pieces[i].rate_at(b)),
                None => (0.0, 0.0),
            }
        };
        let pieces = cuts
            .windows(2)
            .filter(|w| w[1] > w[0])
            .map(|w| {
                let (a0, a1) = side(&self, w[0], w[1]);
                let (b0, b1) = side(other, w[0], w[1]);
                Piece { t0: w[0], t1: w[1], r0: a0 + b0, r1: a1 + b1 }
            })
            .collect();
        let mut phases = self.phases;
        if let Some(last) = phases.last_mut() {
            last.end = length;
        }
        for p in &mut phases {
            p.label.push_str(" (+)");
        }
        Profile::new(pieces, phases)
    }

    /// The first `length` seconds (the whole profile if shorter).
    pub fn truncate(mut self, length: f64) -> Profile {
        self.pieces.retain(|p| p.t0 < length);
        if let Some(last) = self.pieces.last_mut()
            && last.t1 > length
        {
            let r = last.rate_at(length);
            last.t1 = length;
            last.r1 = r;
        }
        self.phases.retain(|p| p.start < length);
        if let Some(last) = self.phases.last_mut() {
            last.end = last.end.min(length);
        }
        Profile::new(self.pieces, self.phases)
    }
}

/// Where [`Profile::due_from`] left off.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cursor {
    piece: usize,
}

/// A rate for labels: `200`, `12.5`.
pub fn fmt_rate(r: f64) -> String {
    if (r - r.round()).abs() < 1e-9 {
        return format!("{}", r.round() as i64);
    }
    let s = format!("{r:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests;
