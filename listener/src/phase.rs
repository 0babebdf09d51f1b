//! What a connection is doing, and when it must end: the timeout policy as a plain struct
//! ([`Deadlines`]) tested on explicit instants, and the per-connection state ([`ConnState`]) that
//! the socket wrapper, the service wrapper and the connection task update.
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
//! Timer: each connection has one `Sleep`, and it is not touched per request. It always fires at
//! or before the current deadline: it is armed at most `tick` (the shorter of the two timeouts)
//! ahead, and every phase change starts a deadline at least `tick` away, so a phase change never
//! needs to move it earlier; when it fires, the phase and its start are read and the timer
//! re-armed. A busy connection therefore costs one timer wake-up per `tick`, whatever its
//! request rate.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
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

/// The outcome of looking at a connection's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    Expired(TimeoutKind),
    /// Look again at this instant (never after the deadline).
    WakeAt(Instant),
}

/// The header and idle timeouts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadlines {
    pub header: Duration,
    pub idle: Duration,
}

impl Deadlines {
    fn tick(&self) -> Duration {
        self.header.min(self.idle)
    }

    /// Whether a connection in `phase` since `since` has run out of time at `now`.
    pub(crate) fn check(&self, phase: Phase, since: Instant, now: Instant) -> Check {
        let (deadline, kind) = match phase {
            Phase::Head => (since + self.header, TimeoutKind::Header),
            Phase::Busy => return Check::WakeAt(now + self.tick()),
            Phase::Flushing => (since + self.idle, TimeoutKind::Send),
            Phase::Idle => (since + self.idle, TimeoutKind::Idle),
        };
        if now >= deadline { Check::Expired(kind) } else { Check::WakeAt(deadline.min(now + self.tick())) }
    }

    /// Where the timer of a new connection (in Head since `opened`) is first armed.
    pub(crate) fn first_wake(&self, opened: Instant) -> Instant {
        opened + self.tick()
    }
}

/// Signals from outside the connection's task.
pub(crate) const DRAIN: u8 = 1;
pub(crate) const EVICT: u8 = 2;
pub(crate) const ABORT: u8 = 4;

/// The state of one connection, shared by its socket wrapper, service wrapper and task (all
/// polled by that one task, so relaxed atomics suffice), and signalled by the accept loop.
#[derive(Debug)]
pub(crate) struct ConnState {
    phase: AtomicU8,
    /// When the phase started (Head, Flushing, Idle), in nanoseconds since `base`.
    since: AtomicU64,
    signals: AtomicU8,
    header_timed_out: AtomicBool,
    waker: AtomicWaker,
    base: Instant,
}

impl ConnState {
    /// A connection opened at `now`, waiting for its first head.
    pub(crate) fn new(base: Instant, now: Instant) -> Self {
        Self {
            phase: AtomicU8::new(Phase::Head as u8),
            since: AtomicU64::new(nanos(base, now)),
            signals: AtomicU8::new(0),
            header_timed_out: AtomicBool::new(false),
            waker: AtomicWaker::new(),
            base,
        }
    }

    pub(crate) fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Relaxed))
    }

    pub(crate) fn since(&self) -> Instant {
        self.base + Duration::from_nanos(self.since.load(Ordering::Relaxed))
    }

    fn enter(&self, phase: Phase, at: Option<Instant>) {
        if let Some(at) = at {
            self.since.store(nanos(self.base, at), Ordering::Relaxed);
        }
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    /// The first byte of a new head arrived on an idle connection.
    pub(crate) fn head_started(&self) {
        self.enter(Phase::Head, Some(Instant::now()));
    }

    /// A request went to the service.
    pub(crate) fn busy(&self) {
        self.enter(Phase::Busy, None);
    }

    /// The service's answer was handed over whole to hyper.
    pub(crate) fn answered(&self) {
        self.answered_at(Instant::now());
    }

    pub(crate) fn answered_at(&self, at: Instant) {
        self.enter(Phase::Flushing, Some(at));
    }

    /// hyper flushed everything it had to write: an answer in Flushing is now on the wire.
    pub(crate) fn flushed(&self) {
        if self.phase() == Phase::Flushing {
            self.enter(Phase::Idle, None);
        }
    }

    pub(crate) fn signals(&self) -> u8 {
        self.signals.load(Ordering::Acquire)
    }

    /// Drain or evict: answer what was received, with `Connection: close`, take nothing more.
    pub(crate) fn draining(&self) -> bool {
        self.signals() & (DRAIN | EVICT) != 0
    }

    /// Sets `bits` and wakes the connection's task.
    pub(crate) fn signal(&self, bits: u8) {
        self.signals.fetch_or(bits, Ordering::AcqRel);
        self.waker.wake();
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
}

fn nanos(base: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX)
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
        assert_eq!(D.check(Phase::Head, t0, at(t0, 3)), Check::WakeAt(at(t0, 10)));
        assert_eq!(D.check(Phase::Head, t0, at(t0, 10)), Check::Expired(TimeoutKind::Header));
    }

    #[test]
    fn a_busy_connection_has_no_deadline_but_is_looked_at_every_tick() {
        let t0 = Instant::now();
        assert_eq!(D.check(Phase::Busy, t0, at(t0, 1000)), Check::WakeAt(at(t0, 1010)));
    }

    #[test]
    fn idle_and_unread_answers_expire_idle_timeout_after_the_answer() {
        let t0 = Instant::now();
        assert_eq!(D.check(Phase::Idle, t0, at(t0, 70)), Check::WakeAt(at(t0, 75)));
        assert_eq!(D.check(Phase::Idle, t0, at(t0, 75)), Check::Expired(TimeoutKind::Idle));
        assert_eq!(D.check(Phase::Flushing, t0, at(t0, 80)), Check::Expired(TimeoutKind::Send));
        // Early in the idle period the timer looks again within a tick, not at the deadline:
        // a head may start any moment and its deadline is nearer.
        assert_eq!(D.check(Phase::Idle, t0, at(t0, 1)), Check::WakeAt(at(t0, 11)));
    }

    /// The invariant that lets the timer stay untouched between its firings: wherever it is
    /// armed, neither the current deadline nor the deadline of any phase entered later comes
    /// before it.
    #[test]
    fn the_timer_never_fires_after_a_deadline_whatever_the_phase_changes() {
        let t0 = Instant::now();
        let long_header = Deadlines { header: Duration::from_secs(90), idle: Duration::from_secs(5) };
        for d in [D, long_header] {
            for phase in [Phase::Head, Phase::Busy, Phase::Flushing, Phase::Idle] {
                for fired_s in [0u64, 3, 4, 40] {
                    let fired = at(t0, fired_s);
                    let Check::WakeAt(armed) = d.check(phase, t0, fired) else { continue };
                    assert!(armed > fired);
                    if phase != Phase::Busy {
                        let own = if phase == Phase::Head { t0 + d.header } else { t0 + d.idle };
                        assert!(armed <= own, "{phase:?}: armed after its own deadline");
                    }
                    // A phase with a deadline entered at `t >= fired`: Head (`t + header`) or
                    // Flushing (`t + idle`).
                    for change_s in fired_s..fired_s + 100 {
                        let t = at(t0, change_s);
                        for deadline in [t + d.header, t + d.idle] {
                            assert!(armed <= deadline, "{phase:?} at {fired_s}s: armed {armed:?} > {deadline:?}");
                        }
                    }
                }
            }
        }
    }
}
