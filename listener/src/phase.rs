//! What a connection is doing, and when it must end: the timeout policy as a plain struct
//! ([`Deadlines`]) tested on explicit instants, the per-connection state ([`ConnState`]) that the
//! socket wrapper, the service wrapper and the connection task update, and the coarse [`Clock`]
//! they read.
//!
//! Policy:
//! - **Head** (a request head is being received): closed `header` after its first byte, or after
//!   the connection opened for its first request (an opened connection that sends nothing is a
//!   slow head, as in nginx). Answered 408 when it fires.
//! - **Busy** (the service has the request): no connection deadline. Reading the body is bounded
//!   by `--body-read-timeout` (in [`BodyReader`](crate::BodyReader)), the handler by the
//!   application's own request timeout.
//! - **Flushing** (the answer is handed to hyper, not yet all written) and **Idle** (written, no
//!   new request yet): closed `idle` after the answer was handed over, without an answer. In
//!   Flushing that is a client that does not read its answer ("send" timeout); in Idle, an idle
//!   keep-alive connection.
//!
//! Time: no connection has a timer, and no request reads the system clock. One sweeper task per
//! listener (nginx and Envoy likewise keep one timer structure per worker thread) wakes every
//! [`Clock::resolution`] (a hundredth of the shorter timeout, between 5 and 100 ms), advances
//! the coarse clock and signals the connections past their deadline; phase changes stamp
//! themselves with that clock (an atomic load). A timeout therefore fires within one
//! resolution of its nominal time (1 %).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use futures::task::AtomicWaker;
use tokio::time::Instant;

/// What a connection is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    Head = 0,
    Busy = 1,
    Flushing = 2,
    Idle = 3,
}

impl Phase {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Head,
            1 => Self::Busy,
            2 => Self::Flushing,
            _ => Self::Idle,
        }
    }
}

/// Which limit ended a connection or a request; the `timeout` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutKind {
    /// `--header-read-timeout`.
    Header,
    /// `--body-read-timeout`.
    Body,
    /// `--idle-timeout`, between requests.
    Idle,
    /// `--idle-timeout`, with an answer the client did not read.
    Send,
}

impl TimeoutKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Header => "header",
            Self::Body => "body",
            Self::Idle => "idle",
            Self::Send => "send",
        }
    }
}

/// The header and idle timeouts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadlines {
    pub header: Duration,
    pub idle: Duration,
}

impl Deadlines {
    /// Which timeout a connection in `phase` since `since` has run past at `now`, if any.
    pub(crate) fn expired(&self, phase: Phase, since: Instant, now: Instant) -> Option<TimeoutKind> {
        let (limit, kind) = match phase {
            Phase::Head => (self.header, TimeoutKind::Header),
            Phase::Busy => return None,
            Phase::Flushing => (self.idle, TimeoutKind::Send),
            Phase::Idle => (self.idle, TimeoutKind::Idle),
        };
        (now.saturating_duration_since(since) >= limit).then_some(kind)
    }
}

/// A clock advanced by the sweeper: reading it is an atomic load.
#[derive(Debug)]
pub(crate) struct Clock {
    base: Instant,
    /// Nanoseconds since `base` at the last sweep.
    now: AtomicU64,
    resolution: Duration,
}

impl Clock {
    pub(crate) fn new(deadlines: Deadlines) -> Self {
        let resolution =
            (deadlines.header.min(deadlines.idle) / 100).clamp(Duration::from_millis(5), Duration::from_millis(100));
        let base = Instant::now();
        Self { base, now: AtomicU64::new(0), resolution }
    }

    /// How often the sweeper runs.
    pub(crate) fn resolution(&self) -> Duration {
        self.resolution
    }

    /// The time of the last sweep.
    pub(crate) fn now(&self) -> Instant {
        self.at(self.now.load(Ordering::Relaxed))
    }

    /// Advances the clock to the system's (tokio's) time; returns it.
    pub(crate) fn advance(&self) -> Instant {
        let now = Instant::now();
        self.now.store(self.nanos(now), Ordering::Relaxed);
        now
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    fn at(&self, nanos: u64) -> Instant {
        self.base + Duration::from_nanos(nanos)
    }
}

/// Signals from outside the connection's task.
pub(crate) const DRAIN: u8 = 1;
pub(crate) const EVICT: u8 = 2;
pub(crate) const ABORT: u8 = 4;
/// The sweeper found the connection past a deadline (the task checks again).
pub(crate) const EXPIRED: u8 = 8;

/// The state of one connection, shared by its socket wrapper, service wrapper and task (all
/// polled by that one task, so relaxed atomics suffice), and signalled by the accept loop and
/// the sweeper.
#[derive(Debug)]
pub(crate) struct ConnState {
    phase: AtomicU8,
    /// When the phase started (Head, Flushing, Idle), in the clock's nanoseconds.
    since: AtomicU64,
    signals: AtomicU8,
    header_timed_out: std::sync::atomic::AtomicBool,
    waker: AtomicWaker,
    clock: Arc<Clock>,
}

impl ConnState {
    /// A connection opened now, waiting for its first head.
    pub(crate) fn new(clock: Arc<Clock>) -> Self {
        Self {
            phase: AtomicU8::new(Phase::Head as u8),
            since: AtomicU64::new(clock.now.load(Ordering::Relaxed)),
            signals: AtomicU8::new(0),
            header_timed_out: std::sync::atomic::AtomicBool::new(false),
            waker: AtomicWaker::new(),
            clock,
        }
    }

    pub(crate) fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Relaxed))
    }

    pub(crate) fn since(&self) -> Instant {
        self.clock.at(self.since.load(Ordering::Relaxed))
    }

    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }

    fn enter(&self, phase: Phase, stamp: bool) {
        if stamp {
            self.since.store(self.clock.now.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    /// The first byte of a new head arrived on an idle connection.
    pub(crate) fn head_started(&self) {
        self.enter(Phase::Head, true);
    }

    /// A request went to the service.
    pub(crate) fn busy(&self) {
        self.enter(Phase::Busy, false);
    }

    /// The service's answer was handed over whole to hyper.
    pub(crate) fn answered(&self) {
        self.enter(Phase::Flushing, true);
    }

    /// hyper is closing the connection (the lingering close has its own bound): no deadline, and
    /// bytes read meanwhile (the rest of an unread body) do not start a head.
    pub(crate) fn closing(&self) {
        self.enter(Phase::Busy, false);
    }

    /// hyper flushed everything it had to write: an answer in Flushing is now on the wire.
    pub(crate) fn flushed(&self) {
        if self.phase() == Phase::Flushing {
            self.enter(Phase::Idle, false);
        }
    }

    pub(crate) fn signals(&self) -> u8 {
        self.signals.load(Ordering::Acquire)
    }

    /// Drain or evict: answer what was received, with `Connection: close`, take nothing more.
    pub(crate) fn draining(&self) -> bool {
        self.signals() & (DRAIN | EVICT) != 0
    }

    /// Closed to make room at the cap: a head trickling in is not waited for.
    pub(crate) fn evicted(&self) -> bool {
        self.signals() & EVICT != 0
    }

    /// Sets `bits` and wakes the connection's task.
    pub(crate) fn signal(&self, bits: u8) {
        self.signals.fetch_or(bits, Ordering::AcqRel);
        self.waker.wake();
    }

    /// Clears `bits`.
    pub(crate) fn clear(&self, bits: u8) {
        self.signals.fetch_and(!bits, Ordering::AcqRel);
    }

    pub(crate) fn register(&self, waker: &std::task::Waker) {
        self.waker.register(waker);
    }

    pub(crate) fn set_header_timed_out(&self) {
        self.header_timed_out.store(true, Ordering::Relaxed);
    }

    pub(crate) fn header_timed_out(&self) -> bool {
        self.header_timed_out.load(Ordering::Relaxed)
    }

    /// Stamps the current phase with `at` (tests).
    #[cfg(test)]
    pub(crate) fn stamp(&self, at: Instant) {
        self.since.store(self.clock.nanos(at), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Deadlines = Deadlines { header: Duration::from_secs(10), idle: Duration::from_secs(75) };

    fn at(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    #[test]
    fn a_head_expires_header_timeout_after_it_started() {
        let t0 = Instant::now();
        assert_eq!(D.expired(Phase::Head, t0, at(t0, 9)), None);
        assert_eq!(D.expired(Phase::Head, t0, at(t0, 10)), Some(TimeoutKind::Header));
    }

    #[test]
    fn a_busy_connection_has_no_deadline() {
        let t0 = Instant::now();
        assert_eq!(D.expired(Phase::Busy, t0, at(t0, 100_000)), None);
    }

    #[test]
    fn idle_and_unread_answers_expire_idle_timeout_after_the_answer() {
        let t0 = Instant::now();
        assert_eq!(D.expired(Phase::Idle, t0, at(t0, 74)), None);
        assert_eq!(D.expired(Phase::Idle, t0, at(t0, 75)), Some(TimeoutKind::Idle));
        assert_eq!(D.expired(Phase::Flushing, t0, at(t0, 75)), Some(TimeoutKind::Send));
        // A clock behind the stamp (never in practice) is not a timeout.
        assert_eq!(D.expired(Phase::Idle, at(t0, 5), t0), None);
    }

    #[test]
    fn the_clock_resolution_is_a_hundredth_of_the_shorter_timeout_within_bounds() {
        assert_eq!(Clock::new(D).resolution(), Duration::from_millis(100));
        let short = Deadlines { header: Duration::from_secs(2), idle: Duration::from_secs(5) };
        assert_eq!(Clock::new(short).resolution(), Duration::from_millis(20));
        let tiny = Deadlines { header: Duration::from_millis(100), idle: Duration::from_secs(5) };
        assert_eq!(Clock::new(tiny).resolution(), Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn phase_changes_are_stamped_with_the_last_sweep() {
        let clock = Arc::new(Clock::new(D));
        let conn = ConnState::new(Arc::clone(&clock));
        tokio::time::advance(Duration::from_secs(3)).await;
        let swept = clock.advance();
        tokio::time::advance(Duration::from_millis(50)).await;
        conn.busy();
        conn.answered();
        assert_eq!(conn.phase(), Phase::Flushing);
        assert_eq!(conn.since(), swept);
        conn.flushed();
        assert_eq!((conn.phase(), conn.since()), (Phase::Idle, swept));
    }
}
