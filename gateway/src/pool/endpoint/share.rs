//! What each data-plane core owns of a worker (see `Endpoint`'s documentation): its outstanding
//! requests, the queries it sent, its latency estimate and its merge queue, each core's on cache
//! lines of its own (`runtime::Slots`); and the sums that read every core's.

use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::{Endpoint, Rtt, lock};
use crate::pool::ewma::PeakEwma;
use crate::pool::merge_queue::{Member, Queue};

/// How often a core re-reads the other cores' outstanding counts for its balancer: at most one
/// sum of their lines a worker per millisecond a core, however many requests it picks for.
pub(crate) const OTHERS_REFRESH: Duration = Duration::from_millis(1);

/// What one data-plane core owns of a worker: written by that core's requests alone (and read,
/// never written, by the others' sums).
pub(super) struct Share {
    /// Requests this core has outstanding to the worker.
    outstanding: AtomicU64,
    /// Queries this core has sent the worker since it was added (retries included).
    sent_queries: AtomicU64,
    local: Mutex<Local>,
    /// Single-query requests of this core waiting to be merged, and its exchanges in flight
    /// that decide it.
    coalesce: Mutex<Queue<Member>>,
}

/// A core's view of the worker's latency, and of the other cores' outstanding requests.
struct Local {
    rtt: PeakEwma,
    /// A refusal or a failure raised the estimate since its last answer: the next answer
    /// restarts it (the worker answers again; what the penalties guessed no longer holds).
    penalized: bool,
    /// The other cores' outstanding requests to the worker, summed at `others_at`.
    others: u64,
    others_at: Option<Instant>,
}

/// What the balancer reads of a worker, from the calling core's share.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoadInputs {
    /// The core's latency estimate, seconds.
    pub(crate) rtt_s: f64,
    /// This core's outstanding requests (live) and the other cores' (at most
    /// [`OTHERS_REFRESH`] old).
    pub(crate) outstanding: u64,
    /// The other clients' queue from fresh telemetry (0 when stale or none).
    pub(crate) foreign_queue: u64,
}

impl Share {
    pub(super) fn new(rtt: Rtt, now: Instant) -> Self {
        Self {
            outstanding: AtomicU64::new(0),
            sent_queries: AtomicU64::new(0),
            local: Mutex::new(Local {
                rtt: PeakEwma::new(rtt.default, rtt.cap, now),
                penalized: false,
                others: 0,
                others_at: None,
            }),
            coalesce: Mutex::new(Queue::default()),
        }
    }
}

impl Endpoint {
    /// The calling core's slot, for [`Endpoint::coalesce`] later from wherever the work ends.
    pub(crate) fn slot(&self) -> usize {
        self.shares.mine()
    }

    /// Core `slot`'s queue of requests waiting to be merged (a short lock, of that core's alone:
    /// one decision). Requests merge with others of the same core, on its connections.
    pub(crate) fn coalesce(&self, slot: usize) -> MutexGuard<'_, Queue<Member>> {
        lock(&self.shares.at(slot).coalesce)
    }

    /// The calling core's latency estimate and view of the others.
    fn local(&self) -> MutexGuard<'_, Local> {
        lock(&self.shares.local().local)
    }

    /// Every core's estimate starts over at the default (the worker is back in rotation).
    pub(super) fn restart_estimates(&self) {
        let now = Instant::now();
        for share in self.shares.iter() {
            let mut l = lock(&share.local);
            l.rtt.restart(self.default_rtt, now);
            l.penalized = false;
        }
    }

    /// An answer, with its latency sample if it is one: the first answer after penalties
    /// restarts the calling core's estimate (at least `--default-rtt`).
    pub(super) fn answered(&self, rtt: Option<Duration>) {
        let mut l = self.local();
        let restart = std::mem::take(&mut l.penalized);
        let now = Instant::now();
        match rtt {
            Some(rtt) if restart => l.rtt.restart(rtt.max(self.default_rtt), now),
            Some(rtt) => l.rtt.observe(rtt, now, self.rtt_decay),
            None if restart => l.rtt.restart(self.default_rtt, now),
            None => {}
        }
    }

    pub(super) fn observe_rtt(&self, rtt: Duration) {
        self.local().rtt.observe(rtt, Instant::now(), self.rtt_decay);
    }

    /// A fast refusal (429) or failure must not look like a fast worker: the estimate doubles,
    /// bounded (see `ewma`). The calling core's estimate: each core learns the worker's state
    /// from its own answers, as nginx's workers do.
    pub(super) fn penalize(&self) {
        let mut l = self.local();
        l.rtt.penalize(self.default_rtt, Instant::now(), self.rtt_decay);
        l.penalized = true;
    }

    /// The calling core's latency estimate now (seconds), its penalty expired if it is old.
    fn rtt_at(&self, l: &mut Local, now: Instant) -> f64 {
        if l.rtt.expire_penalty(self.default_rtt, now) {
            l.penalized = false;
        }
        l.rtt.at(now, self.rtt_decay)
    }

    /// The balancer's latency estimate now (seconds), the calling core's. A penalty older than
    /// `ewma::PENALTY_HOLD` with no answer since ends here: the estimate starts over at the
    /// default.
    pub(crate) fn rtt_estimate_s(&self) -> f64 {
        let now = Instant::now();
        self.rtt_at(&mut self.local(), now)
    }

    /// The highest of the cores' latency estimates now (seconds): what `/v1/pools` shows (a
    /// core that sends the worker nothing decays towards zero; the busiest one says most).
    pub(crate) fn rtt_estimate_max_s(&self) -> f64 {
        let now = Instant::now();
        self.shares
            .iter()
            .map(|s| lock(&s.local).rtt.at(now, self.rtt_decay))
            .fold(0.0, f64::max)
            .min(self.rtt_cap.as_secs_f64())
    }

    /// What the balancer weighs the worker by, from the calling core's share (one short lock of
    /// its own, two atomic loads of what the monitor publishes, and at most every
    /// [`OTHERS_REFRESH`] a read of the other cores' counts).
    pub(crate) fn load_inputs(&self, now: Instant, stale_after: Duration) -> LoadInputs {
        let mine = self.shares.mine();
        let share = self.shares.at(mine);
        let mut l = lock(&share.local);
        let rtt_s = self.rtt_at(&mut l, now);
        if l.others_at.is_none_or(|at| now.saturating_duration_since(at) >= OTHERS_REFRESH) {
            l.others = self
                .shares
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != mine)
                .map(|(_, s)| s.outstanding.load(Ordering::Relaxed))
                .sum();
            l.others_at = Some(now);
        }
        let outstanding = share.outstanding.load(Ordering::Relaxed) + l.others;
        drop(l);
        let foreign_queue = self.telemetry.foreign_queue(now, stale_after);
        LoadInputs { rtt_s, outstanding, foreign_queue }
    }

    /// Requests outstanding to the worker, every core's.
    pub(crate) fn outstanding(&self) -> u64 {
        self.shares.iter().map(|s| s.outstanding.load(Ordering::Acquire)).sum()
    }

    /// `n` queries sent to the worker (an attempt).
    pub(crate) fn sent(&self, n: u64) {
        self.shares.local().sent_queries.fetch_add(n, Ordering::Relaxed);
    }

    /// Queries sent to the worker, every core's.
    pub(super) fn sent_queries(&self) -> u64 {
        self.shares.iter().map(|s| s.sent_queries.load(Ordering::Relaxed)).sum()
    }

    /// Count a request as outstanding (on the calling core's share) until the guard drops.
    pub(crate) fn start(&self) -> InFlight<'_> {
        let slot = self.shares.mine();
        self.shares.at(slot).outstanding.fetch_add(1, Ordering::AcqRel);
        InFlight { ep: self, slot }
    }
}

/// An outstanding request to a worker; decrements the count on drop, whatever happens (on the
/// share it counted on).
#[derive(Debug)]
pub(crate) struct InFlight<'a> {
    ep: &'a Endpoint,
    slot: usize,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.ep.shares.at(self.slot).outstanding.fetch_sub(1, Ordering::AcqRel);
    }
}
