//! Admission control, in queries and in tokens, by request class: a plain struct, unit-tested
//! without a runtime.
//!
//! Policy:
//! - A request is admitted in two steps. Before tokenizing, its queries must fit in the query
//!   capacity (`--max-outstanding`): this bounds the tokenizer's work and the memory of requests in
//!   hand. After tokenizing, its tokens are its cost (a batch's time grows with its tokens), and
//!   they must fit in the token capacity (`--max-outstanding-tokens`). Either miss is a 429 at once.
//!   A short request (tokenized on the runtime thread in microseconds) is tokenized first and
//!   admitted in one step, by the same rules ([`Admission::try_admit_tokenized`]).
//! - A request of more than `--heavy-request-tokens` tokens is *heavy*, any other *light*. Heavy
//!   requests together may hold at most half of each capacity, so light requests always find room
//!   however many heavy ones arrive; light requests may use all of it.
//! - Before tokenizing, a request whose tokens cannot exceed the threshold (each token takes at
//!   least one visible character, plus two special tokens per query; see `core::token_bound`) is
//!   surely light. Any other may be heavy, and waits for its tokens in the heavy share of the
//!   query capacity, so requests being tokenized cannot crowd light ones out either. While a long
//!   request is tokenized its running total is checked ([`Admission::fits`]): once it cannot fit,
//!   it is refused without tokenizing the rest, so refusing a heavy request is cheap.
//! - The two classes run in separate lanes (a queue, a batcher and a backend thread each; see
//!   `core::lanes`), so a light request never waits behind a heavy batch.
//!
//! - The two capacities are sized from the worker's own capacity once it is known
//!   ([`sized`]): what it answers within a request's deadline at its calibrated rate (Little's
//!   law), the flags being floors. A step of load below that capacity queues instead of being
//!   refused; load beyond it is still refused at once, with `Retry-After`.
//!
//! Everything admitted and not yet answered is counted until its [`Ticket`] is dropped, on every
//! way out of a request (answer, error, timeout, client gone).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use wire::QueueStats;

use crate::batching::Limits;
pub use crate::class::Class;

/// The capacities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capacity {
    /// Most queries admitted at once.
    pub queries: u64,
    /// Most tokens admitted at once.
    pub tokens: u64,
    /// A request of more tokens than this is heavy.
    pub heavy_request_tokens: u64,
}

/// The most queries either capacity is sized to: the lanes' queues are made this long, so a
/// capacity grown after they were made still never fills them.
pub const MAX_QUERIES: u64 = 1 << 24;

/// The capacities of a worker that answers `per_s` queries per second of `tokens_per_query`
/// tokens each, for requests that must be answered within `deadline`: as much as it answers in
/// that time (Little's law: held = rate x time), never below `floor` (the flags). Without a
/// known tokens per query (a capacity set by `--capacity`) the token capacity grows in step
/// with the query capacity.
pub fn sized(floor: Capacity, per_s: f64, tokens_per_query: Option<f64>, deadline: Duration) -> Capacity {
    let per_s = if per_s.is_finite() { per_s.max(0.0) } else { 0.0 };
    let queries_in_time = per_s * deadline.as_secs_f64();
    let held = |x: f64| if x.is_finite() && x > 0.0 { x.ceil().min(u64::MAX as f64) as u64 } else { 0 };
    let queries = held(queries_in_time).clamp(floor.queries, MAX_QUERIES.max(floor.queries));
    let tokens = match tokens_per_query.filter(|t| t.is_finite() && *t > 0.0) {
        Some(t) => held(queries_in_time * t),
        None => held(floor.tokens as f64 * queries as f64 / floor.queries.max(1) as f64),
    };
    Capacity { queries, tokens: tokens.max(floor.tokens), heavy_request_tokens: floor.heavy_request_tokens }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Queries,
    Tokens(Class),
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Held {
    queries: u64,
    tokens: u64,
}

#[derive(Debug, Default)]
struct Usage {
    /// The capacities now ([`Admission::resize`]).
    capacity: Capacity,
    /// Queries of requests admitted and not yet tokenized (no class yet): surely light, or maybe
    /// heavy.
    pending: [u64; 2],
    class: [Held; 2],
    /// In the batches each lane's backend sessions are running.
    in_flight: [Held; 2],
}

impl Usage {
    fn queries(&self) -> u64 {
        self.pending.iter().sum::<u64>() + self.class.iter().map(|h| h.queries).sum::<u64>()
    }
    fn tokens(&self) -> u64 {
        self.class.iter().map(|h| h.tokens).sum()
    }
    /// Charges `queries` queries of `tokens` tokens to `class`.
    fn hold(&mut self, class: Class, queries: u64, tokens: u64) {
        let held = &mut self.class[class.index()];
        held.queries += queries;
        held.tokens += tokens;
    }
}

#[derive(Debug)]
pub struct Admission {
    /// A request of more tokens than this is heavy (fixed; the capacities are in [`Usage`]).
    heavy_request_tokens: u64,
    usage: Mutex<Usage>,
}

/// What a request holds; released when dropped.
#[derive(Debug)]
pub struct Ticket {
    admission: Arc<Admission>,
    queries: u64,
    /// Its tokens may exceed the heavy threshold (known before tokenizing).
    maybe_heavy: bool,
    /// `None` until [`charge`](Self::charge) succeeded.
    charged: Option<(Class, u64)>,
}

impl Admission {
    pub fn new(capacity: Capacity) -> Self {
        let a = Self { heavy_request_tokens: capacity.heavy_request_tokens, usage: Mutex::default() };
        a.resize(capacity);
        a
    }

    pub fn capacity(&self) -> Capacity {
        self.lock().capacity
    }

    /// Sets the query and token capacities (the heavy threshold stays). What is held already
    /// stays admitted when they shrink: requests are refused until it fits again.
    pub fn resize(&self, capacity: Capacity) {
        self.lock().capacity = Capacity {
            queries: capacity.queries.clamp(1, MAX_QUERIES),
            tokens: capacity.tokens.max(1),
            heavy_request_tokens: self.heavy_request_tokens,
        };
    }

    /// The class of a request of `tokens` tokens.
    pub fn class_of(&self, tokens: u64) -> Class {
        if tokens > self.heavy_request_tokens { Class::Heavy } else { Class::Light }
    }

    fn lock(&self) -> MutexGuard<'_, Usage> {
        self.usage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Step one, before tokenizing: admits a request of `n` queries and at most `max_tokens`
    /// tokens, or refuses at once when its queries do not fit (in the heavy share when it may be
    /// heavy).
    pub fn try_admit(self: &Arc<Self>, n: usize, max_tokens: u64) -> Result<Ticket, Refused> {
        let n = n as u64;
        let maybe_heavy = max_tokens > self.heavy_request_tokens;
        let mut u = self.lock();
        if !Self::queries_fit(&u, n, maybe_heavy) {
            return Err(Refused::Queries);
        }
        u.pending[usize::from(maybe_heavy)] += n;
        Ok(Ticket { admission: self.clone(), queries: n, maybe_heavy, charged: None })
    }

    /// Both steps at once, for a request tokenized before it is admitted (a short one, tokenized
    /// in microseconds): admits `n` queries of `tokens` tokens in their class, as
    /// [`try_admit`](Self::try_admit) and then [`Ticket::charge`] would, under one lock.
    pub fn try_admit_tokenized(self: &Arc<Self>, n: usize, tokens: u64) -> Result<(Ticket, Class), Refused> {
        let n = n as u64;
        let class = self.class_of(tokens);
        let mut u = self.lock();
        if !Self::queries_fit(&u, n, class == Class::Heavy) {
            return Err(Refused::Queries);
        }
        if !Self::fits_in(&u, class, n, tokens) {
            return Err(Refused::Tokens(class));
        }
        u.hold(class, n, tokens);
        drop(u);
        let ticket = Ticket {
            admission: self.clone(),
            queries: n,
            maybe_heavy: class == Class::Heavy,
            charged: Some((class, tokens)),
        };
        Ok((ticket, class))
    }

    /// Whether `n` more queries fit in the query capacity (in the heavy share when they may be
    /// heavy).
    fn queries_fit(u: &Usage, n: u64, maybe_heavy: bool) -> bool {
        let mut fits = u.queries() + n <= u.capacity.queries;
        if maybe_heavy {
            fits &= u.pending[1] + u.class[Class::Heavy.index()].queries + n <= u.capacity.queries / 2;
        }
        fits
    }

    /// Whether a request of `queries` queries and (at least) `tokens` tokens could be charged now.
    pub fn fits(&self, queries: u64, tokens: u64) -> bool {
        Self::fits_in(&self.lock(), self.class_of(tokens), queries, tokens)
    }

    fn fits_in(u: &Usage, class: Class, queries: u64, tokens: u64) -> bool {
        let mut fits = u.tokens() + tokens <= u.capacity.tokens;
        if class == Class::Heavy {
            let heavy = u.class[Class::Heavy.index()];
            fits &= heavy.tokens + tokens <= u.capacity.tokens / 2 && heavy.queries + queries <= u.capacity.queries / 2;
        }
        fits
    }

    /// Queries admitted and not yet answered.
    pub fn outstanding(&self) -> u64 {
        self.lock().queries()
    }

    /// From `lane`'s backend threads: a batch of `queries` holding `tokens` starts.
    pub fn batch_started(&self, lane: Class, queries: u64, tokens: u64) {
        let held = &mut self.lock().in_flight[lane.index()];
        held.queries += queries;
        held.tokens += tokens;
    }

    /// From `lane`'s backend threads: a batch [started](Self::batch_started) is answered.
    pub fn batch_done(&self, lane: Class, queries: u64, tokens: u64) {
        let held = &mut self.lock().in_flight[lane.index()];
        held.queries = held.queries.saturating_sub(queries);
        held.tokens = held.tokens.saturating_sub(tokens);
    }

    pub fn stats(&self, limits: Limits) -> QueueStats {
        let u = self.lock();
        let (queries, tokens) = (u.queries(), u.tokens());
        let in_flight = u.in_flight.iter().map(|h| h.queries).sum::<u64>().min(queries);
        let in_flight_tokens = u.in_flight.iter().map(|h| h.tokens).sum::<u64>().min(tokens);
        let heavy = u.class[Class::Heavy.index()];
        QueueStats {
            queued: queries - in_flight,
            in_flight,
            capacity: u.capacity.queries,
            max_batch_rows: limits.max_rows as u64,
            max_batch_tokens: limits.max_tokens as u64,
            max_queue_delay_ms: limits.max_delay.as_secs_f64() * 1e3,
            queued_tokens: tokens - in_flight_tokens,
            in_flight_tokens,
            capacity_tokens: u.capacity.tokens,
            heavy_queries: heavy.queries,
            heavy_tokens: heavy.tokens,
            heavy_request_tokens: self.heavy_request_tokens,
        }
    }
}

impl Ticket {
    /// Step two, after tokenizing: charges the request's `tokens` to its class, or refuses when
    /// they do not fit (the ticket keeps its queries until dropped).
    pub fn charge(&mut self, tokens: u64) -> Result<Class, Refused> {
        assert!(self.charged.is_none(), "a ticket is charged once");
        let a = &self.admission;
        let class = a.class_of(tokens);
        let mut u = a.lock();
        if !Admission::fits_in(&u, class, self.queries, tokens) {
            return Err(Refused::Tokens(class));
        }
        u.pending[usize::from(self.maybe_heavy)] -= self.queries;
        u.hold(class, self.queries, tokens);
        drop(u);
        self.charged = Some((class, tokens));
        Ok(class)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut u = self.admission.lock();
        match self.charged {
            None => u.pending[usize::from(self.maybe_heavy)] -= self.queries,
            Some((class, tokens)) => {
                let held = &mut u.class[class.index()];
                held.queries -= self.queries;
                held.tokens -= tokens;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn admission(queries: u64, tokens: u64, heavy_request_tokens: u64) -> Arc<Admission> {
        Arc::new(Admission::new(Capacity { queries, tokens, heavy_request_tokens }))
    }

    fn limits() -> Limits {
        Limits { max_rows: 2, max_tokens: 10, max_delay: Duration::ZERO, min_fill: 0.0 }
    }

    const FLOOR: Capacity = Capacity { queries: 1024, tokens: 65536, heavy_request_tokens: 256 };

    #[test]
    fn capacities_are_what_the_worker_answers_within_a_deadline_never_below_the_flags() {
        let deadline = Duration::from_secs(30);
        // 700 queries/s of 12.5 tokens for 30 s: 21,000 queries and 262,500 tokens.
        let c = sized(FLOOR, 700.0, Some(12.5), deadline);
        assert_eq!((c.queries, c.tokens, c.heavy_request_tokens), (21_000, 262_500, 256));
        // A slow worker, or a short deadline: the flags.
        assert_eq!(sized(FLOOR, 10.0, Some(12.5), deadline), FLOOR);
        assert_eq!(sized(FLOOR, 700.0, Some(12.5), Duration::from_millis(100)), FLOOR);
        // Long queries: the token capacity grows past its floor before the query capacity does.
        let long = sized(FLOOR, 30.0, Some(100.0), deadline);
        assert_eq!((long.queries, long.tokens), (1024, 90_000));
        // A configured capacity (no tokens per query): tokens in step with the queries.
        let set = sized(FLOOR, 100.0, None, deadline);
        assert_eq!((set.queries, set.tokens), (3000, 192_000));
        // Nonsense in, the flags out; and never past the lanes' queues.
        for bad in [f64::NAN, f64::INFINITY, -5.0, 0.0] {
            assert_eq!(sized(FLOOR, bad, Some(12.5), deadline), FLOOR, "{bad}");
        }
        assert_eq!(sized(FLOOR, 1e12, Some(12.5), deadline).queries, MAX_QUERIES);
    }

    #[test]
    fn a_resized_admission_admits_up_to_its_new_capacity_and_keeps_what_it_holds() {
        let a = admission(4, 100, 1000);
        let held = a.try_admit(4, 10).unwrap();
        assert_eq!(a.try_admit(1, 10).unwrap_err(), Refused::Queries);
        a.resize(Capacity { queries: 8, tokens: 200, heavy_request_tokens: 1 });
        let mut more = a.try_admit(4, 10).expect("room for 4 more");
        assert_eq!(more.charge(150), Ok(Class::Light), "the heavy threshold is not resized");
        let s = a.stats(limits());
        assert_eq!((s.capacity, s.capacity_tokens, s.heavy_request_tokens), (8, 200, 1000));
        // Shrunk below what it holds: nothing is dropped, nothing more admitted until it fits.
        a.resize(Capacity { queries: 2, tokens: 100, heavy_request_tokens: 1000 });
        assert_eq!(a.outstanding(), 8);
        assert_eq!(a.try_admit(1, 10).unwrap_err(), Refused::Queries);
        drop((held, more));
        assert!(a.try_admit(2, 10).is_ok());
    }

    #[test]
    fn queries_are_bounded_before_tokenizing_and_counts_are_disjoint() {
        let a = admission(4, 1000, 100);
        let t1 = a.try_admit(3, 10).expect("room for 3");
        assert_eq!(a.try_admit(2, 10).unwrap_err(), Refused::Queries, "only one place left");
        let mut t2 = a.try_admit(1, 10).expect("the last place");
        t2.charge(20).unwrap();
        a.batch_started(Class::Light, 1, 20);
        let s = a.stats(limits());
        assert_eq!((s.queued, s.in_flight, s.capacity), (3, 1, 4));
        assert_eq!((s.queued_tokens, s.in_flight_tokens, s.capacity_tokens), (0, 20, 1000));
        drop(t1);
        drop(t2);
        a.batch_done(Class::Light, 1, 20);
        assert_eq!(a.outstanding(), 0);
        assert_eq!(a.stats(limits()).queued_tokens, 0);
        assert!(a.try_admit(5, 10).is_err(), "more than the capacity never fits");
    }

    #[test]
    fn a_request_tokenized_first_is_admitted_in_one_step_as_in_two() {
        // The same sequence of requests through both ways: the same answers, the same counts.
        let one = admission(6, 100, 40);
        let two = admission(6, 100, 40);
        let (mut held, mut outcomes) = (Vec::new(), Vec::new());
        for (n, tokens) in [(2, 30), (1, 50), (2, 45), (1, 31), (3, 10), (1, 21), (1, 1)] {
            let a = one.try_admit_tokenized(n, tokens).map(|(t, class)| {
                held.push(t);
                class
            });
            // A ticket whose charge was refused is dropped at once, as the core drops it.
            let b = two.try_admit(n, tokens).and_then(|mut t| {
                let class = t.charge(tokens)?;
                held.push(t);
                Ok(class)
            });
            assert_eq!(a, b, "{n} queries of {tokens} tokens");
            outcomes.push(a);
            let (x, y) = (one.stats(limits()), two.stats(limits()));
            assert_eq!(
                (x.queued, x.queued_tokens, x.heavy_queries, x.heavy_tokens),
                (y.queued, y.queued_tokens, y.heavy_queries, y.heavy_tokens),
            );
        }
        for outcome in [
            Ok(Class::Light),
            Ok(Class::Heavy),
            Err(Refused::Tokens(Class::Heavy)),
            Err(Refused::Tokens(Class::Light)),
            Err(Refused::Queries),
        ] {
            assert!(outcomes.contains(&outcome), "{outcome:?} met: {outcomes:?}");
        }
        drop(held);
        assert_eq!((one.outstanding(), one.stats(limits()).queued_tokens), (0, 0));
        assert_eq!((two.outstanding(), two.stats(limits()).queued_tokens), (0, 0));
    }

    #[test]
    fn tokens_are_bounded_after_tokenizing() {
        let a = admission(100, 100, 1000);
        let mut t1 = a.try_admit(2, 10).unwrap();
        assert_eq!(t1.charge(70), Ok(Class::Light));
        let mut t2 = a.try_admit(1, 10).unwrap();
        assert_eq!(t2.charge(31), Err(Refused::Tokens(Class::Light)), "70 + 31 > 100");
        assert_eq!(a.outstanding(), 3, "a refused ticket holds its queries until dropped");
        drop(t2);
        assert_eq!(a.outstanding(), 2);
        let mut t3 = a.try_admit(1, 10).unwrap();
        assert_eq!(t3.charge(30), Ok(Class::Light), "exactly full");
        drop((t1, t3));
        assert_eq!((a.outstanding(), a.stats(limits()).queued_tokens), (0, 0));
    }

    #[test]
    fn heavy_requests_hold_at_most_half_and_light_ones_always_find_room() {
        // 1000 tokens; a request of more than 100 is heavy.
        let a = admission(64, 1000, 100);
        assert_eq!(a.class_of(100), Class::Light);
        assert_eq!(a.class_of(101), Class::Heavy);
        let mut heavy = Vec::new();
        for _ in 0..2 {
            let mut t = a.try_admit(8, 1000).unwrap();
            assert_eq!(t.charge(250), Ok(Class::Heavy));
            heavy.push(t);
        }
        // A third heavy request would take the heavy class past half the tokens.
        let mut t = a.try_admit(8, 1000).unwrap();
        assert_eq!(t.charge(250), Err(Refused::Tokens(Class::Heavy)));
        drop(t);
        // Light requests fill the rest.
        let mut light = Vec::new();
        for _ in 0..5 {
            let mut t = a.try_admit(1, 10).unwrap();
            assert_eq!(t.charge(100), Ok(Class::Light));
            light.push(t);
        }
        let mut t = a.try_admit(1, 10).unwrap();
        assert_eq!(t.charge(1), Err(Refused::Tokens(Class::Light)), "the whole capacity is used");
        drop(t);
        let s = a.stats(limits());
        assert_eq!((s.heavy_queries, s.heavy_tokens, s.queued_tokens), (16, 500, 1000));
        drop(heavy);
        drop(light);
        assert_eq!(a.outstanding(), 0);
    }

    #[test]
    fn heavy_requests_hold_at_most_half_of_the_queries_too() {
        let a = admission(10, 10_000, 100);
        assert_eq!(a.try_admit(6, 1000).unwrap_err(), Refused::Queries, "6 queries that may be heavy > half of 10");
        let mut t = a.try_admit(6, 60).unwrap();
        assert_eq!(t.charge(600), Err(Refused::Tokens(Class::Heavy)), "6 heavy queries > half of 10");
        drop(t);
        let mut t = a.try_admit(5, 1000).unwrap();
        assert_eq!(t.charge(600), Ok(Class::Heavy));
        let mut light = a.try_admit(5, 10).unwrap();
        assert_eq!(light.charge(50), Ok(Class::Light), "light requests may take the other half");
    }

    #[test]
    fn requests_that_may_be_heavy_wait_for_their_tokens_in_the_heavy_share() {
        let a = admission(10, 10_000, 100);
        // Five queries being tokenized that may be heavy take the heavy share of the queries...
        let maybe = a.try_admit(5, 101).unwrap();
        assert_eq!(a.try_admit(1, 101).unwrap_err(), Refused::Queries);
        // ...but not the surely light requests' room.
        let mut light = a.try_admit(5, 100).unwrap();
        assert_eq!(light.charge(60), Ok(Class::Light));
        assert_eq!(a.outstanding(), 10);
        drop(maybe);
        assert!(a.try_admit(1, 101).is_ok());
    }

    #[test]
    fn a_running_total_that_cannot_fit_is_known_before_the_end() {
        let a = admission(100, 1000, 100);
        let mut held = a.try_admit(10, 1000).unwrap();
        assert_eq!(held.charge(400), Ok(Class::Heavy));
        assert!(a.fits(10, 90), "still light: any room in the whole capacity");
        assert!(a.fits(10, 100));
        assert!(!a.fits(10, 101), "heavy from here, and 400 + 101 > 500");
        drop(held);
        assert!(a.fits(10, 500));
        assert!(!a.fits(10, 501));
    }
}
