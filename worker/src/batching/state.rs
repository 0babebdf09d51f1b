//! The batch queue as a plain struct: which queries run together, and when.
//!
//! No channels, no runtime: the async task in [`super::task`] owns a [`State`] and feeds it, and the
//! unit tests below drive it with explicit instants.
//!
//! Policy:
//! - A batch is *ready* when the queue holds `max_rows` queries or their tokens reach the token
//!   budget; or, once the backend is idle, when the oldest query has waited `max_delay` for
//!   companions. While the backend is busy a partial batch is not cut: queries arriving meanwhile
//!   join it, and it runs the moment the backend is free (it could not run sooner anyway).
//! - A query waits for companions only when one is expected within its delay: from a moving
//!   average of the gaps between arrivals (each gap counted at most `2 x max_delay`), the next
//!   arrival is due at the last one plus that gap. When it is due after the oldest query's
//!   deadline (a lone client, a trickle, the first query after a pause), waiting would only add
//!   latency, and the batch is cut at once. Under load the gaps are short and queries wait as
//!   configured.
//! - The oldest live query anchors every batch, so no query waits behind younger ones for long.
//!   Companions are the queries closest in length to the anchor (ties to the older), which cuts
//!   padding: a batch pads every row to its longest.
//! - Budgets: at most `max_rows` rows, `padded length x rows <= max_tokens` (a single query
//!   longer than the budget still runs, alone), and real tokens over padded cells at least
//!   `min_fill` (padding costs arithmetic on a CPU; on a GPU it is nearly free and `min_fill` is 0).
//! - Queries whose client has gone are dropped when met, never run.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::Duration;

use tokio::time::Instant;

/// What the queue needs to know of a queued query.
pub trait Pending {
    /// Sequence length in tokens (what padding is measured in).
    fn tokens(&self) -> usize;
    /// The client has gone: the answer would be thrown away.
    fn is_cancelled(&self) -> bool;
    /// When the query times out (`None`: never); see [`time_out`](Self::time_out).
    fn deadline(&self) -> Option<Instant> {
        None
    }
    /// Answers the query as timed out: called once its [`deadline`](Self::deadline) has passed,
    /// wherever it waits (the queue, a batch handed to the backend or running there).
    fn time_out(self)
    where
        Self: Sized,
    {
    }
}

/// The budgets of one batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub max_rows: usize,
    pub max_tokens: usize,
    pub max_delay: Duration,
    /// Least fraction of a batch's padded cells that hold real tokens, in `[0, 1]`.
    pub min_fill: f64,
}

/// A query in the queue, with the time it arrived.
#[derive(Debug)]
pub struct Queued<T> {
    pub item: T,
    pub enqueued_at: Instant,
}

/// Queries to run together; every row is padded to `padded_len`.
#[derive(Debug)]
pub struct Batch<T> {
    pub entries: Vec<Queued<T>>,
    pub padded_len: usize,
}

/// Key ordering queries by length, then by arrival.
type LenKey = (usize, u64);

#[derive(Debug)]
pub struct State<T> {
    limits: Limits,
    by_len: BTreeMap<LenKey, Queued<T>>,
    /// Arrival id -> length, oldest first.
    by_age: BTreeMap<u64, usize>,
    next_id: u64,
    tokens: usize,
    cancelled: u64,
    /// The latest arrival, and the moving average of the gaps between arrivals (`None` until two
    /// have been seen).
    last_arrival: Option<Instant>,
    gap: Option<Duration>,
}

/// Weight of a new gap in the moving average of gaps between arrivals.
const GAP_WEIGHT: f64 = 1.0 / 4.0;

impl<T: Pending> State<T> {
    pub fn new(limits: Limits) -> Self {
        assert!(limits.max_rows > 0 && limits.max_tokens > 0, "batch limits must be positive");
        Self {
            limits,
            by_len: BTreeMap::new(),
            by_age: BTreeMap::new(),
            next_id: 0,
            tokens: 0,
            cancelled: 0,
            last_arrival: None,
            gap: None,
        }
    }

    /// Queries waiting (cancelled ones not yet met included).
    pub fn len(&self) -> usize {
        self.by_age.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_age.is_empty()
    }

    /// Queries dropped so far because their client had gone.
    pub fn cancelled_total(&self) -> u64 {
        self.cancelled
    }

    pub fn push(&mut self, item: T, now: Instant) {
        let id = self.next_id;
        self.next_id += 1;
        let len = item.tokens();
        self.tokens += len;
        if let Some(last) = self.last_arrival {
            // Past twice the delay, a gap's length makes no difference to the decision.
            let sample = now.saturating_duration_since(last).min(self.limits.max_delay * 2);
            self.gap = Some(match self.gap {
                None => sample,
                Some(g) => g.mul_f64(1.0 - GAP_WEIGHT) + sample.mul_f64(GAP_WEIGHT),
            });
        }
        self.last_arrival = Some(self.last_arrival.map_or(now, |l| l.max(now)));
        self.by_age.insert(id, len);
        self.by_len.insert((len, id), Queued { item, enqueued_at: now });
    }

    /// When the oldest query's wait runs out; `None` when the queue is empty. That is its arrival
    /// when no companion is expected before `max_delay` has passed (see the module's policy).
    pub fn next_deadline(&self) -> Option<Instant> {
        let (&id, &len) = self.by_age.first_key_value()?;
        let arrived = self.by_len[&(len, id)].enqueued_at;
        let deadline = arrived + self.limits.max_delay;
        let expected = match (self.last_arrival, self.gap) {
            (Some(last), Some(gap)) => last + gap <= deadline,
            _ => false,
        };
        Some(if expected { deadline } else { arrived })
    }

    /// Takes every query whose deadline is at or before `now` out of the queue and [times it
    /// out](Pending::time_out); returns the earliest deadline left. Walks the whole queue: called
    /// when the earliest deadline known comes, not per query.
    pub fn expire(&mut self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut expired = Vec::new();
        for (key, q) in &self.by_len {
            match q.item.deadline() {
                Some(d) if d <= now => expired.push(*key),
                Some(d) => next = Some(next.map_or(d, |n| n.min(d))),
                None => {}
            }
        }
        for key in expired {
            self.remove(key).item.time_out();
        }
        next
    }

    /// The moving average of the gaps between arrivals, once two have been seen.
    #[cfg(test)]
    fn mean_gap(&self) -> Option<Duration> {
        self.gap
    }

    /// A batch is full, or a backend session is free and the oldest query has waited long enough.
    pub fn is_ready(&self, now: Instant, session_free: bool) -> bool {
        self.len() >= self.limits.max_rows
            || self.tokens >= self.limits.max_tokens
            || (session_free && self.next_deadline().is_some_and(|d| now >= d))
    }

    /// The next batch if one [is ready](Self::is_ready).
    pub fn next_batch(&mut self, now: Instant, session_free: bool) -> Option<Batch<T>> {
        if self.is_ready(now, session_free) { self.take_batch() } else { None }
    }

    /// The next batch whether or not it is ready (used to flush the queue on shutdown).
    pub fn take_batch(&mut self) -> Option<Batch<T>> {
        loop {
            let (&id, &len) = self.by_age.first_key_value()?;
            let anchor = (len, id);
            if self.by_len[&anchor].item.is_cancelled() {
                self.remove(anchor);
                self.cancelled += 1;
                continue;
            }
            let (selected, cancelled) = self.select(anchor);
            for key in cancelled {
                self.remove(key);
                self.cancelled += 1;
            }
            let padded_len = selected.iter().map(|k| k.0).max().unwrap_or(len);
            let mut entries: Vec<_> = selected.into_iter().map(|k| (k.1, self.remove(k))).collect();
            entries.sort_unstable_by_key(|(id, _)| *id);
            return Some(Batch { entries: entries.into_iter().map(|(_, q)| q).collect(), padded_len });
        }
    }

    /// Walks outward in length from the anchor; returns the chosen keys and the cancelled ones met.
    fn select(&self, anchor: LenKey) -> (Vec<LenKey>, Vec<LenKey>) {
        let Limits { max_rows, max_tokens, min_fill, .. } = self.limits;
        let live = |(k, q): (&LenKey, &Queued<T>)| (*k, q.item.is_cancelled());
        let mut shorter = self.by_len.range(..anchor).rev().map(live);
        let mut longer = self.by_len.range((Bound::Excluded(anchor), Bound::Unbounded)).map(live);
        let (mut lo, mut hi) = (shorter.next(), longer.next());
        let mut selected = vec![anchor];
        let mut cancelled = Vec::new();
        let mut max_len = anchor.0;
        let mut real = anchor.0;
        while selected.len() < max_rows {
            let take_longer = match (lo, hi) {
                (None, None) => break,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((l, _)), Some((h, _))) => {
                    let (dl, dh) = (anchor.0 - l.0, h.0 - anchor.0);
                    dh < dl || (dh == dl && h.1 < l.1)
                }
            };
            let (key, is_cancelled) = if take_longer { hi.take() } else { lo.take() }.expect("chosen side is present");
            if is_cancelled {
                cancelled.push(key);
            } else {
                let padded = max_len.max(key.0);
                let cells = padded * (selected.len() + 1);
                // Both limits only get worse further out on either side, so a miss ends that side.
                if cells > max_tokens || ((real + key.0) as f64) < min_fill * cells as f64 {
                    // The side's next candidate was taken: that side is closed.
                    continue;
                }
                selected.push(key);
                max_len = padded;
                real += key.0;
            }
            if take_longer {
                hi = longer.next();
            } else {
                lo = shorter.next();
            }
        }
        (selected, cancelled)
    }

    fn remove(&mut self, key: LenKey) -> Queued<T> {
        self.by_age.remove(&key.1);
        self.tokens -= key.0;
        self.by_len.remove(&key).expect("key is queued")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[derive(Debug, Clone)]
    struct Q {
        name: &'static str,
        len: usize,
        gone: Arc<AtomicBool>,
    }

    impl Pending for Q {
        fn tokens(&self) -> usize {
            self.len
        }
        fn is_cancelled(&self) -> bool {
            self.gone.load(Ordering::Relaxed)
        }
    }

    fn q(name: &'static str, len: usize) -> Q {
        Q { name, len, gone: Arc::default() }
    }

    fn limits(max_rows: usize, max_tokens: usize, delay_ms: u64) -> Limits {
        Limits { max_rows, max_tokens, max_delay: Duration::from_millis(delay_ms), min_fill: 0.0 }
    }

    fn names(b: &Batch<Q>) -> Vec<&'static str> {
        b.entries.iter().map(|e| e.item.name).collect()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Ten arrivals 1 ms apart, run: the state expects the next arrival within 1 ms. Returns
    /// the time of the next one.
    fn with_traffic(s: &mut State<Q>, t0: Instant) -> Instant {
        for i in 0..10 {
            s.push(q("warm", 8), t0 + ms(i));
        }
        while s.take_batch().is_some() {}
        t0 + ms(10)
    }

    #[test]
    fn waits_for_companions_until_the_deadline() {
        let mut s = State::new(limits(4, 1000, 5));
        let t0 = with_traffic(&mut s, Instant::now());
        s.push(q("a", 8), t0);
        assert!(s.next_batch(t0, true).is_none());
        assert_eq!(s.next_deadline(), Some(t0 + Duration::from_millis(5)));
        assert!(s.next_batch(t0 + Duration::from_millis(4), true).is_none());
        let b = s.next_batch(t0 + Duration::from_millis(5), true).expect("deadline reached");
        assert_eq!(names(&b), ["a"]);
        assert!(s.is_empty());
        assert_eq!(s.next_deadline(), None);
    }

    #[test]
    fn a_lone_query_does_not_wait_when_no_companion_is_expected() {
        // The first query ever: nothing is known of arrivals.
        let t0 = Instant::now();
        let mut s = State::new(limits(4, 1000, 5));
        s.push(q("a", 8), t0);
        assert_eq!(s.next_deadline(), Some(t0));
        assert_eq!(names(&s.next_batch(t0, true).expect("cut at once")), ["a"]);
        // A trickle: one query every 20 ms, four times the delay.
        for i in 1..=5 {
            let t = t0 + ms(20 * i);
            s.push(q("b", 8), t);
            assert_eq!(names(&s.next_batch(t, true).expect("cut at once")), ["b"], "arrival {i}");
        }
        assert_eq!(s.mean_gap(), Some(ms(10)), "each gap is counted at most twice the delay");
    }

    #[test]
    fn the_expectation_follows_the_arrivals() {
        let mut s = State::new(limits(8, 1000, 5));
        let t0 = with_traffic(&mut s, Instant::now());
        // Busy traffic was seen: a query after a pause still waits for companions...
        let t1 = t0 + Duration::from_secs(1);
        s.push(q("c", 8), t1);
        assert_eq!(s.next_deadline(), Some(t1 + ms(5)));
        s.take_batch();
        // ...but a trickle (20 ms apart) is cut at once from its second query on.
        let waited: Vec<bool> = (1..=6)
            .map(|i| {
                let t = t1 + ms(20 * i);
                s.push(q("d", 8), t);
                let waits = s.next_batch(t, true).is_none();
                s.take_batch();
                waits
            })
            .collect();
        assert_eq!(waited, [true, false, false, false, false, false]);
        // And a burst (100 us apart) waits again after a few short gaps.
        let t2 = t1 + ms(200);
        s.push(q("e", 8), t2);
        assert!(s.next_batch(t2, true).is_some(), "nothing says a burst is coming");
        let t3 = t2 + Duration::from_micros(100);
        s.push(q("e", 8), t3);
        assert!(s.next_batch(t3, true).is_some(), "one short gap is not yet enough");
        let mut t = t3;
        let mut waits = false;
        for _ in 0..6 {
            t += Duration::from_micros(100);
            s.push(q("e", 8), t);
            waits = s.next_batch(t, true).is_none();
            if waits {
                break;
            }
        }
        assert!(waits, "a few short gaps and the burst waits for companions");
    }

    #[test]
    fn a_busy_backend_holds_a_partial_batch_past_the_deadline() {
        let t0 = Instant::now();
        let mut s = State::new(limits(4, 1000, 5));
        s.push(q("a", 8), t0);
        let late = t0 + Duration::from_millis(50);
        assert!(s.next_batch(late, false).is_none(), "the backend is busy: keep gathering");
        s.push(q("b", 8), late);
        let b = s.next_batch(late, true).expect("idle backend, deadline passed");
        assert_eq!(names(&b), ["a", "b"]);
        // A full batch does not wait for the backend to be idle (it is prefetched).
        for n in ["c", "d", "e", "f"] {
            s.push(q(n, 8), late);
        }
        assert_eq!(s.next_batch(late, false).unwrap().entries.len(), 4);
    }

    #[test]
    fn min_fill_keeps_very_different_lengths_apart() {
        let t0 = Instant::now();
        let mut s = State::new(Limits { min_fill: 0.75, ..limits(8, 10_000, 0) });
        for (name, len) in [("a", 10), ("b", 11), ("c", 9), ("long", 40), ("tiny", 2)] {
            s.push(q(name, len), t0);
        }
        // a, b, c fill 30 of 33 cells; adding "long" would fill 70 of 160, "tiny" 32 of 44.
        let b = s.next_batch(t0, true).unwrap();
        assert_eq!(names(&b), ["a", "b", "c"]);
        assert_eq!(names(&s.next_batch(t0, true).unwrap()), ["long"]);
        assert_eq!(names(&s.next_batch(t0, true).unwrap()), ["tiny"]);
    }

    #[test]
    fn a_full_batch_runs_at_once_and_respects_max_rows() {
        let t0 = Instant::now();
        let mut s = State::new(limits(3, 1000, 1000));
        for name in ["a", "b", "c", "d", "e"] {
            s.push(q(name, 5), t0);
        }
        let b = s.next_batch(t0, true).expect("full");
        assert_eq!(names(&b), ["a", "b", "c"]);
        // Two left: not full, deadline not reached.
        assert!(s.next_batch(t0, true).is_none());
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn token_budget_bounds_padded_rows() {
        let t0 = Instant::now();
        // 40 tokens: four rows of 10, or two of 20.
        let mut s = State::new(limits(100, 40, 0));
        for (name, len) in [("a", 10), ("b", 10), ("c", 10), ("d", 10), ("e", 10)] {
            s.push(q(name, len), t0);
        }
        let b = s.next_batch(t0, true).unwrap();
        assert_eq!(names(&b), ["a", "b", "c", "d"]);
        assert_eq!(b.padded_len * b.entries.len(), 40);

        let mut s = State::new(limits(100, 40, 0));
        s.push(q("a", 10), t0);
        s.push(q("long", 20), t0);
        s.push(q("b", 10), t0);
        s.push(q("c", 10), t0);
        let b = s.next_batch(t0, true).unwrap();
        // The anchor's length peers come first; the long one would make 4 x 20 > 40.
        assert_eq!(names(&b), ["a", "b", "c"]);
        assert_eq!(b.padded_len, 10);
        let b = s.next_batch(t0, true).unwrap();
        assert_eq!(names(&b), ["long"]);
    }

    #[test]
    fn a_query_over_the_budget_runs_alone() {
        let t0 = Instant::now();
        let mut s = State::new(limits(8, 16, 0));
        s.push(q("huge", 64), t0);
        s.push(q("small", 4), t0);
        let b = s.next_batch(t0, true).unwrap();
        assert_eq!(names(&b), ["huge"]);
        assert_eq!(b.padded_len, 64);
        assert_eq!(names(&s.next_batch(t0, true).unwrap()), ["small"]);
    }

    #[test]
    fn groups_by_length_around_the_oldest() {
        let t0 = Instant::now();
        let mut s = State::new(limits(3, 10_000, 0));
        for (name, len) in [("old12", 12), ("l40", 40), ("l11", 11), ("l3", 3), ("l13", 13), ("l64", 64)] {
            s.push(q(name, len), t0);
        }
        let b = s.next_batch(t0, true).unwrap();
        // The oldest anchors; its nearest lengths join; output in arrival order.
        assert_eq!(names(&b), ["old12", "l11", "l13"]);
        assert_eq!(b.padded_len, 13);
        // Next anchor is the oldest remaining (l40), with its nearest neighbours.
        let b = s.next_batch(t0, true).unwrap();
        assert_eq!(names(&b), ["l40", "l3", "l64"]);
    }

    #[test]
    fn fifo_anchor_means_no_starvation() {
        let t0 = Instant::now();
        let mut s = State::new(limits(2, 10_000, 0));
        s.push(q("outlier", 100), t0);
        for i in 0..10 {
            s.push(q("x", 5 + i), t0);
        }
        // The oldest runs first even though everyone else is shorter.
        let b = s.next_batch(t0, true).unwrap();
        assert_eq!(b.entries[0].item.name, "outlier");
    }

    #[test]
    fn cancelled_queries_are_dropped_not_run() {
        let t0 = Instant::now();
        let mut s = State::new(limits(4, 1000, 0));
        let a = q("a", 5);
        let b = q("b", 5);
        let c = q("c", 5);
        for x in [&a, &b, &c] {
            s.push(x.clone(), t0);
        }
        a.gone.store(true, Ordering::Relaxed);
        c.gone.store(true, Ordering::Relaxed);
        let batch = s.next_batch(t0, true).unwrap();
        assert_eq!(names(&batch), ["b"]);
        assert_eq!(s.cancelled_total(), 2);
        assert!(s.is_empty());

        // A queue holding only cancelled queries yields nothing.
        let d = q("d", 5);
        s.push(d.clone(), t0);
        d.gone.store(true, Ordering::Relaxed);
        assert!(s.next_batch(t0, true).is_none());
        assert_eq!(s.cancelled_total(), 3);
        assert!(s.is_empty());
    }

    #[test]
    fn take_batch_flushes_without_waiting() {
        let t0 = Instant::now();
        let mut s = State::new(limits(4, 1000, 60_000));
        s.push(q("a", 5), t0);
        s.push(q("b", 5), t0);
        assert!(s.next_batch(t0, true).is_none());
        assert_eq!(names(&s.take_batch().unwrap()), ["a", "b"]);
        assert!(s.take_batch().is_none());
    }

    #[test]
    fn token_total_tracks_pushes_and_removals() {
        let t0 = Instant::now();
        let mut s = State::new(limits(100, 30, 60_000));
        s.push(q("a", 10), t0);
        s.push(q("b", 10), t0);
        assert!(!s.is_ready(t0, true));
        s.push(q("c", 10), t0);
        assert!(s.is_ready(t0, true), "30 tokens queued fill the budget");
        let b = s.next_batch(t0, true).unwrap();
        assert_eq!(b.entries.len(), 3);
        assert!(!s.is_ready(t0, true));
    }
}
