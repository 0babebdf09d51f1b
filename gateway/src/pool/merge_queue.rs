//! When single-query requests bound for one worker are merged into one exchange: a plain
//! [`Queue`] per worker, every decision a method, unit-tested without a runtime. The exchange
//! itself (the merged body, the split answer, what a failure means for each request) is
//! `routing::coalesce`'s.
//!
//! The policy, per worker:
//!
//! * **Below `--coalesce-after-in-flight` exchanges in flight** to the worker (exchanges of
//!   mergeable requests, alone or merged), a request goes alone at once, as it would without
//!   coalescing: at low load nothing waits and nothing is merged. There is no timer anywhere.
//! * **At or above it**, a request waits in the worker's queue. Whenever one of the worker's
//!   exchanges ends, the queue's oldest requests go out together as one exchange (up to the
//!   caps below): requests merge only because they were already waiting.
//! * **A full merge never waits**: when the queue holds a merge's worth (any cap reached), it
//!   goes out at once, whatever is in flight; so the policy never caps what a worker gets, only
//!   how it is packed.
//! * **Caps of one merge**: `--coalesce-max-queries` queries; at most `--heavy-request-tokens`
//!   estimated tokens (a merge of light requests is light at the worker too: it is never sent
//!   to the worker's heavy lane); at most `--max-body-bytes` of body (the worker's own limit).
//!   A request alone always fits.
//! * **Abandoned requests** (the client went away, or its attempt timed out and went elsewhere)
//!   are skipped when a merge is taken, never sent.

use std::collections::VecDeque;

use tokio::sync::oneshot;
use tokio::time::Instant;
use wire::ErrorType;

use super::outcome::Verdict;
use crate::upstream::Answer;

/// The caps of one merge and the threshold that starts merging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Exchanges in flight to the worker (the core's: its queue's) from which requests wait to
    /// be merged.
    pub(crate) after_in_flight: usize,
    pub(crate) max_queries: usize,
    pub(crate) max_tokens: u64,
    pub(crate) max_bytes: usize,
}

/// What a merged body adds to its queries: `{"queries":[` and `]}`.
pub(crate) const BODY_OVERHEAD: usize = 14;

impl Policy {
    /// The merge policy of `cfg`'s flags; `None` when coalescing is off.
    pub(crate) fn from_config(cfg: &crate::config::Config) -> Option<Self> {
        if cfg.no_coalesce || cfg.coalesce_max_queries <= 1 {
            return None;
        }
        Some(Self {
            // Each core's queue counts its own exchanges: its part of the worker's.
            after_in_flight: usize::try_from(cfg.coalesce_after_in_flight.div_ceil(cfg.data_plane_cores() as u64))
                .unwrap_or(usize::MAX),
            max_queries: usize::try_from(cfg.coalesce_max_queries).unwrap_or(usize::MAX),
            max_tokens: cfg.heavy_request_tokens,
            max_bytes: cfg.max_body_bytes.saturating_sub(BODY_OVERHEAD),
        })
    }
}

/// A client request waiting to go in a merge.
#[derive(Debug)]
pub(crate) struct Member {
    /// Its query as a JSON string (quoted, escaped): its piece of the merged body.
    pub(crate) json: String,
    /// Its estimated tokens at most.
    pub(crate) tokens: u64,
    /// When its attempt must have its answer.
    pub(crate) deadline: Instant,
    /// Where its part of the outcome goes (exactly once, or dropped: see [`Delivery`]).
    pub(crate) answer: oneshot::Sender<Delivery>,
}

/// One request's part of a merged exchange's outcome.
#[derive(Debug)]
pub(crate) enum Delivery {
    /// The exchange's verdict, for this request: with its own answer (its part of the split
    /// answer, or the worker's refusal of the whole merge) and the answer's `error_type`, or
    /// why the exchange failed.
    Done { verdict: Verdict, result: Result<(Answer, Option<ErrorType>), String> },
    /// The worker refused the merge as a request (a 4xx other than 429: one query it would not
    /// take): this request goes alone, and gets the answer the worker gives it alone.
    Alone,
    /// The exchange's deadline (its members' latest) passed first.
    TimedOut,
}

impl Weighed for Member {
    fn tokens(&self) -> u64 {
        self.tokens
    }

    fn bytes(&self) -> usize {
        // The JSON string and its comma.
        self.json.len() + 1
    }

    fn abandoned(&self) -> bool {
        self.answer.is_closed()
    }
}

/// What a merge must know of a waiting request.
pub(crate) trait Weighed {
    /// Its estimated tokens.
    fn tokens(&self) -> u64;
    /// Its bytes in the merged body.
    fn bytes(&self) -> usize;
    /// Nobody waits for its answer any more.
    fn abandoned(&self) -> bool;
}

/// A worker's waiting requests and its exchanges in flight.
#[derive(Debug)]
pub(crate) struct Queue<T> {
    waiting: VecDeque<T>,
    /// Exchanges of mergeable requests in flight (alone or merged).
    in_flight: usize,
    /// The waiting requests' tokens and bytes (abandoned ones included until taken).
    tokens: u64,
    bytes: usize,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self { waiting: VecDeque::new(), in_flight: 0, tokens: 0, bytes: 0 }
    }
}

/// What to do with a request that arrives.
#[derive(Debug, PartialEq)]
pub(crate) enum Arrival<T> {
    /// Send it alone, now (an exchange is counted in flight: end it with [`Queue::finished`]).
    Alone(T),
    /// Send these together, now (it among them; an exchange counted in flight).
    Merge(Vec<T>),
    /// It waits for an exchange to end.
    Wait,
}

impl<T: Weighed> Queue<T> {
    /// A request arrives for the worker.
    pub(crate) fn arrive(&mut self, item: T, p: &Policy) -> Arrival<T> {
        // With nothing in flight, no exchange will end to take a waiting request: it goes.
        let after = p.after_in_flight.max(1);
        if self.waiting.is_empty() && self.in_flight < after {
            self.in_flight += 1;
            return Arrival::Alone(item);
        }
        self.push(item);
        if self.in_flight < after || self.full(p) {
            return match self.take(p) {
                Some(merge) => Arrival::Merge(merge),
                None => Arrival::Wait,
            };
        }
        Arrival::Wait
    }

    /// One of the worker's exchanges ended: the next merge to send, if requests wait (counted in
    /// flight in place of the one that ended).
    pub(crate) fn finished(&mut self, p: &Policy) -> Option<Vec<T>> {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.take(p)
    }

    /// Exchanges in flight.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Requests waiting (abandoned ones included until a merge skips them).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    fn push(&mut self, item: T) {
        self.tokens = self.tokens.saturating_add(item.tokens());
        self.bytes = self.bytes.saturating_add(item.bytes());
        self.waiting.push_back(item);
    }

    /// Whether the waiting requests fill a merge.
    fn full(&self, p: &Policy) -> bool {
        self.waiting.len() >= p.max_queries || self.tokens >= p.max_tokens || self.bytes >= p.max_bytes
    }

    /// The oldest waiting requests that fit in one merge (abandoned ones dropped on the way),
    /// counted as an exchange in flight; `None` when none is left.
    fn take(&mut self, p: &Policy) -> Option<Vec<T>> {
        let mut merge: Vec<T> = Vec::new();
        let (mut tokens, mut bytes) = (0u64, 0usize);
        while let Some(next) = self.waiting.front() {
            let (t, b) = (next.tokens(), next.bytes());
            if !next.abandoned() {
                let fits = merge.len() < p.max_queries
                    && tokens.saturating_add(t) <= p.max_tokens
                    && bytes.saturating_add(b) <= p.max_bytes;
                if !fits && !merge.is_empty() {
                    break;
                }
                tokens = tokens.saturating_add(t);
                bytes = bytes.saturating_add(b);
            }
            self.tokens = self.tokens.saturating_sub(t);
            self.bytes = self.bytes.saturating_sub(b);
            let Some(item) = self.waiting.pop_front() else { break };
            if !item.abandoned() {
                merge.push(item);
            }
        }
        if merge.is_empty() {
            return None;
        }
        self.in_flight += 1;
        Some(merge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct R {
        id: u32,
        tokens: u64,
        gone: bool,
    }

    impl Weighed for R {
        fn tokens(&self) -> u64 {
            self.tokens
        }
        fn bytes(&self) -> usize {
            10
        }
        fn abandoned(&self) -> bool {
            self.gone
        }
    }

    fn r(id: u32) -> R {
        R { id, tokens: 10, gone: false }
    }

    const P: Policy = Policy { after_in_flight: 2, max_queries: 4, max_tokens: 256, max_bytes: 1000 };

    fn ids(merge: &[R]) -> Vec<u32> {
        merge.iter().map(|r| r.id).collect()
    }

    #[test]
    fn below_the_threshold_every_request_goes_alone_at_once() {
        let mut q = Queue::default();
        assert_eq!(q.arrive(r(1), &P), Arrival::Alone(r(1)));
        assert_eq!(q.arrive(r(2), &P), Arrival::Alone(r(2)));
        assert_eq!(q.in_flight(), 2);
        // One ends and nothing waits: nothing to send; the next goes alone again.
        assert_eq!(q.finished(&P), None);
        assert_eq!(q.arrive(r(3), &P), Arrival::Alone(r(3)));
        assert_eq!(q.waiting(), 0);
    }

    #[test]
    fn at_the_threshold_requests_wait_and_go_together_when_an_exchange_ends() {
        let mut q = Queue::default();
        for i in 1..=2 {
            assert!(matches!(q.arrive(r(i), &P), Arrival::Alone(_)));
        }
        for i in 3..=5 {
            assert_eq!(q.arrive(r(i), &P), Arrival::Wait);
        }
        let merge = q.finished(&P).expect("the waiting ones go");
        assert_eq!(ids(&merge), [3, 4, 5]);
        assert_eq!(q.in_flight(), 2, "the merge took the place of the exchange that ended");
        assert_eq!(q.finished(&P), None);
        assert_eq!(q.finished(&P), None);
        assert_eq!(q.in_flight(), 0);
    }

    #[test]
    fn a_full_merge_goes_at_once_whatever_is_in_flight() {
        let mut q = Queue::default();
        q.arrive(r(1), &P);
        q.arrive(r(2), &P);
        for i in 3..=5 {
            assert_eq!(q.arrive(r(i), &P), Arrival::Wait);
        }
        let Arrival::Merge(merge) = q.arrive(r(6), &P) else { panic!("four queries fill a merge") };
        assert_eq!(ids(&merge), [3, 4, 5, 6]);
        assert_eq!(q.in_flight(), 3);
        assert_eq!(q.waiting(), 0);
    }

    #[test]
    fn a_merge_stays_within_the_token_cap_so_it_is_never_heavy() {
        let mut q = Queue::default();
        q.arrive(r(1), &P);
        q.arrive(r(2), &P);
        let big = |id| R { id, tokens: 100, gone: false };
        assert_eq!(q.arrive(big(3), &P), Arrival::Wait);
        assert_eq!(q.arrive(big(4), &P), Arrival::Wait);
        // 300 tokens wait: a full merge goes at once, of what fits in 256.
        let Arrival::Merge(merge) = q.arrive(big(5), &P) else { panic!("the token cap fills a merge") };
        assert_eq!(ids(&merge), [3, 4]);
        assert_eq!(q.waiting(), 1);
        assert_eq!(ids(&q.finished(&P).unwrap()), [5]);
    }

    #[test]
    fn a_request_alone_always_fits() {
        let p = Policy { max_tokens: 5, max_bytes: 5, ..P };
        let mut q = Queue::default();
        q.arrive(r(1), &p);
        q.arrive(r(2), &p);
        let Arrival::Merge(merge) = q.arrive(r(3), &p) else { panic!("over every cap alone: it goes") };
        assert_eq!(ids(&merge), [3]);
    }

    #[test]
    fn abandoned_requests_are_skipped_never_sent() {
        let mut q = Queue::default();
        q.arrive(r(1), &P);
        q.arrive(r(2), &P);
        q.arrive(R { id: 3, tokens: 10, gone: true }, &P);
        q.arrive(r(4), &P);
        assert_eq!(ids(&q.finished(&P).unwrap()), [4]);
        // Only abandoned ones wait: nothing to send, and the exchange that ended is not replaced.
        q.arrive(R { id: 5, tokens: 10, gone: true }, &P);
        assert_eq!(q.finished(&P), None);
        assert_eq!(q.in_flight(), 1);
        assert_eq!(q.waiting(), 0);
    }

    #[test]
    fn a_request_never_waits_with_nothing_in_flight() {
        // A threshold of 0 is taken as 1: no exchange would end to take the waiting request.
        let p = Policy { after_in_flight: 0, ..P };
        let mut q = Queue::default();
        assert_eq!(q.arrive(r(1), &p), Arrival::Alone(r(1)));
        assert_eq!(q.arrive(r(2), &p), Arrival::Wait);
        assert_eq!(ids(&q.finished(&p).unwrap()), [2]);
    }
}
