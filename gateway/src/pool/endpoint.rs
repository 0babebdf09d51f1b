//! One worker as the gateway sees it: its health state, the requests outstanding to it, its
//! latency estimate and its last telemetry snapshot.
//!
//! Split by who writes what (issue 47), so that a request writes no cache line that another
//! data-plane core's requests write:
//! - each core's own part ([`Share`], one per core in a [`Slots`]): the requests it has
//!   outstanding to the worker, the queries it sent, its latency estimate (learnt from its own
//!   answers and penalties) and its queue of requests waiting to be merged. A request touches
//!   only its own core's; sums (the signal's outstanding, the stats' queries sent) read them all;
//! - what the monitor writes (health, failures, the telemetry snapshot, the model), which the
//!   request path only reads; the balancer's part of the snapshot (the other clients' queue and
//!   when it was read) is published as two atomics, so that a pick takes no lock;
//! - the upstream connections, one idle stack per core (`upstream`).
//!
//! The balancer reads its own core's outstanding count live and the other cores' as a sum it
//! refreshes at most every [`OTHERS_REFRESH`] (reading their lines, never writing them).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http::Uri;
use listener::shard::{Counter, Histogram};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::ewma::PeakEwma;
use super::merge_queue::{Member, Queue};
use super::outcome::{HealthEffect, STALL_AFTER};
use super::stats::StatsView;
use crate::ctx::Ctx;
use crate::metrics::{Metrics, PoolLabels, RequestLabels, WorkerLabels};
use crate::runtime::Slots;
use crate::upstream::Upstream;

/// How often a core re-reads the other cores' outstanding counts for its balancer: at most one
/// sum of their lines a worker per millisecond a core, however many requests it picks for.
pub(crate) const OTHERS_REFRESH: Duration = Duration::from_millis(1);

/// No snapshot published yet (`Endpoint::snapshot_at_us`).
const NO_SNAPSHOT: u64 = u64::MAX;

/// How long the gateway waits for a TCP connection to a worker.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Idle connections to a worker are closed after this long.
pub(crate) const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether a worker gets traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Just discovered; `/readyz` not answered 200 yet.
    Probing = 0,
    /// Receives traffic.
    Ready = 1,
    /// `/readyz` said no, or it is draining (a 503 `unavailable` answer or `draining` in its
    /// stats); re-probed with backoff.
    NotReady = 2,
    /// Too many consecutive failures; re-probed with backoff.
    Ejected = 3,
    /// Its stats or readiness calls time out (a stopped or wedged process); re-probed at every
    /// poll, back as soon as `/readyz` answers 200 in time.
    Stalled = 4,
}

impl Health {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Ready,
            2 => Self::NotReady,
            3 => Self::Ejected,
            4 => Self::Stalled,
            _ => Self::Probing,
        }
    }
}

/// What a health effect changed, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    None,
    Ejected,
    Drained,
    Stalled,
    Recovered,
}

/// The part of a `/v1/stats` document the gateway keeps, with the time it arrived.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Snapshot {
    /// When the gateway received it.
    pub(crate) at: Instant,
    /// `queued + in_flight` as the worker reported it.
    pub(crate) reported_queue: u64,
    /// The same in tokens, when the worker reports it.
    pub(crate) reported_queue_tokens: Option<u64>,
    /// The gateway's outstanding requests to this worker when the snapshot arrived; the part of
    /// `reported_queue` beyond it belongs to other clients.
    pub(crate) outstanding_at_snapshot: u64,
    /// GPU utilization in percent (see `stats`): `None` when the worker has no GPU reading.
    pub(crate) gpu_pct: Option<f64>,
    /// Device memory used / total, when the worker has a GPU reading.
    pub(crate) gpu_memory_used_ratio: Option<f64>,
    /// The worker's capacity (queries per second when saturated) and the queries its full
    /// batches hold, when it reports them.
    pub(crate) capacity: Option<(f64, u64)>,
}

impl Snapshot {
    /// Load other clients put on the worker (never negative).
    pub(crate) fn foreign_queue(&self) -> u64 {
        self.reported_queue.saturating_sub(self.outstanding_at_snapshot)
    }
}

/// Other clients' queries at a worker: what it counted (admitted or refused) beyond what this
/// gateway sent it, from the difference at the first reading. Our queries in flight at a reading
/// are ours on one side only: the total never decreases, so they can count as theirs once (a
/// bounded, one-off error). A worker's restart (its count going back) starts a new baseline.
#[derive(Debug, Default)]
struct Foreign {
    /// `worker_total - ours` at the first reading, and the worker's count then.
    baseline: Option<(i128, u64)>,
    /// Their queries since: never decreasing.
    total: u64,
}

impl Foreign {
    fn observe(&mut self, worker_total: u64, ours: u64) {
        let diff = i128::from(worker_total) - i128::from(ours);
        match self.baseline {
            Some((base, last)) if worker_total >= last => {
                let theirs = u64::try_from((diff - base).max(0)).unwrap_or(u64::MAX);
                self.total = self.total.max(theirs);
                self.baseline = Some((base, worker_total));
            }
            // First reading, or the worker restarted: a new baseline; the total so far stays.
            _ => {
                self.baseline = Some((diff - i128::from(self.total), worker_total));
            }
        }
    }
}

/// The latency estimate's settings: where it starts (`--default-rtt`), its decay
/// (`--rtt-decay`) and its bound (the request deadline, `--request-timeout`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rtt {
    pub(crate) default: Duration,
    pub(crate) decay: Duration,
    pub(crate) cap: Duration,
}

impl Rtt {
    pub(crate) fn from_config(c: &crate::config::Config) -> Self {
        Self { default: c.default_rtt, decay: c.rtt_decay, cap: c.request_timeout }
    }
}

/// What one data-plane core owns of a worker: written by that core's requests alone (and read,
/// never written, by the others' sums).
struct Share {
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

/// Per-worker state shared by the balancer, the proxy, the monitor task and the signal.
///
/// Aligned to a cache line pair so that the `Arc`'s reference count (which every pick of the
/// worker writes) shares no line with the fields every core reads.
#[repr(align(128))]
pub(crate) struct Endpoint {
    /// Base URL as discovered, e.g. `http://10.0.0.5:8000` (no trailing slash).
    pub(crate) url: String,
    pub(crate) pool: String,
    health: AtomicU8,
    /// Incremented each time the worker leaves `Ready`: the monitor restarts its backoff then.
    downs: AtomicU64,
    failures: AtomicU32,
    /// Monitoring calls timed out in a row.
    poll_timeouts: AtomicU32,
    /// Each core's part (see the module documentation).
    shares: Slots<Share>,
    /// Queries other clients sent the worker (its admitted plus refused, less ours), since the
    /// first snapshot: other gateway replicas' share of the demand.
    foreign: Mutex<Foreign>,
    default_rtt: Duration,
    rtt_decay: Duration,
    rtt_cap: Duration,
    snapshot: Mutex<Option<Snapshot>>,
    /// The balancer's part of the snapshot, published by the monitor: the other clients' queue,
    /// and when it arrived (microseconds after `born`; [`NO_SNAPSHOT`] before the first).
    foreign_queue: AtomicU64,
    snapshot_at_us: AtomicU64,
    born: Instant,
    /// The model the worker serves, by the name its Open Inference Protocol routes answer to
    /// (from its stats; `None` until they arrive).
    model: Mutex<Option<Arc<str>>>,
    /// Last pressure computed from fresh telemetry: held while telemetry is stale.
    held_pressure: Mutex<Option<f64>>,
    /// Woken when the worker becomes ready (shared with its pool).
    ready_notify: Arc<Notify>,
    /// Series of `gateway_requests_total` and `gateway_request_duration_seconds` for `ok`,
    /// fetched once (the hot path).
    ok_requests: Counter,
    ok_latency: Histogram,
    /// The pool's series of `gateway_coalesced_requests_total` and
    /// `gateway_coalesced_exchanges_total` (made with the worker: served from the start, 0).
    pub(crate) coalesced_requests: Counter,
    pub(crate) coalesced_exchanges: Counter,
    /// Outcomes it has been counted under, so that those series go when it leaves.
    outcomes: Mutex<BTreeSet<String>>,
    /// Left the pool: no new series.
    retired: AtomicBool,
    pub(crate) labels: WorkerLabels,
    /// The gateway's connections to the worker.
    pub(crate) upstream: Upstream,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("url", &self.url).field("health", &self.health()).finish()
    }
}

/// Parse and normalise a worker base URL.
pub(crate) fn parse_base_url(url: &str) -> Result<(http::uri::Scheme, http::uri::Authority), String> {
    let uri: Uri = url.trim().parse().map_err(|e| format!("bad worker URL {url:?}: {e}"))?;
    let scheme = uri.scheme().cloned().ok_or_else(|| format!("worker URL {url:?} has no scheme"))?;
    if scheme != http::uri::Scheme::HTTP {
        return Err(format!("worker URL {url:?}: only http:// is supported"));
    }
    let authority = uri.authority().cloned().ok_or_else(|| format!("worker URL {url:?} has no host"))?;
    Ok((scheme, authority))
}

impl Endpoint {
    pub(crate) fn new(
        pool: &str,
        url: &str,
        rtt: Rtt,
        max_idle_connections: usize,
        core_slots: usize,
        ready_notify: Arc<Notify>,
        metrics: &Metrics,
    ) -> Result<Self, String> {
        let (scheme, authority) = parse_base_url(url)?;
        let url = format!("{scheme}://{authority}");
        let ok = RequestLabels { pool: pool.to_owned(), worker: url.clone(), outcome: "ok".to_owned() };
        let now = Instant::now();
        let share = || Share {
            outstanding: AtomicU64::new(0),
            sent_queries: AtomicU64::new(0),
            local: Mutex::new(Local {
                rtt: PeakEwma::new(rtt.default, rtt.cap, now),
                penalized: false,
                others: 0,
                others_at: None,
            }),
            coalesce: Mutex::new(Queue::default()),
        };
        Ok(Self {
            ok_requests: metrics.requests.get_or_create_owned(&ok),
            ok_latency: metrics.latency.get_or_create_owned(&ok),
            coalesced_requests: metrics.coalesced_requests.get_or_create_owned(&PoolLabels { pool: pool.to_owned() }),
            coalesced_exchanges: metrics.coalesced_exchanges.get_or_create_owned(&PoolLabels { pool: pool.to_owned() }),
            outcomes: Mutex::new(BTreeSet::from(["ok".to_owned()])),
            retired: AtomicBool::new(false),
            labels: WorkerLabels { pool: pool.to_owned(), worker: url.clone() },
            pool: pool.to_owned(),
            url,
            upstream: Upstream::new(authority, max_idle_connections, CONNECT_TIMEOUT, core_slots),
            health: AtomicU8::new(Health::Probing as u8),
            downs: AtomicU64::new(0),
            failures: AtomicU32::new(0),
            poll_timeouts: AtomicU32::new(0),
            shares: Slots::new(core_slots, share),
            foreign: Mutex::new(Foreign::default()),
            default_rtt: rtt.default,
            rtt_decay: rtt.decay,
            rtt_cap: rtt.cap,
            snapshot: Mutex::new(None),
            foreign_queue: AtomicU64::new(0),
            snapshot_at_us: AtomicU64::new(NO_SNAPSHOT),
            born: now,
            model: Mutex::new(None),
            held_pressure: Mutex::new(None),
            ready_notify,
        })
    }

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

    pub(crate) fn health(&self) -> Health {
        Health::from_u8(self.health.load(Ordering::Acquire))
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.health() == Health::Ready
    }

    pub(crate) fn set_health(&self, h: Health) {
        let prev = self.health.swap(h as u8, Ordering::AcqRel);
        if prev == Health::Ready as u8 && h != Health::Ready {
            self.downs.fetch_add(1, Ordering::AcqRel);
        }
        if h == Health::Ready {
            self.failures.store(0, Ordering::Release);
            if prev != Health::Ready as u8 {
                // Back (or new): the estimate starts over at the default, neither what decayed
                // while it was out (every pick would flood it before its first answer) nor what
                // the penalties and slow answers that took it out left (it would get no traffic
                // for minutes).
                let now = Instant::now();
                for share in self.shares.iter() {
                    let mut l = lock(&share.local);
                    l.rtt.restart(self.default_rtt, now);
                    l.penalized = false;
                }
                self.ready_notify.notify_waiters();
            }
        }
    }

    /// How many times the worker has left `Ready`.
    pub(crate) fn downs(&self) -> u64 {
        self.downs.load(Ordering::Acquire)
    }

    /// Carry out a health effect decided by the outcome policy (`outcome::classify`); an
    /// ejection is logged (with `why`) and counted in `gateway_ejections_total`.
    pub(crate) fn apply(&self, effect: HealthEffect, ctx: &Ctx, why: &dyn std::fmt::Display) -> Change {
        let change = match effect {
            HealthEffect::None => Change::None,
            HealthEffect::Success { rtt } => {
                self.record_success(rtt);
                Change::None
            }
            HealthEffect::Refused => {
                self.penalize();
                Change::None
            }
            HealthEffect::Failure => {
                self.penalize();
                if self.record_failure(ctx.config.eject_after) { Change::Ejected } else { Change::None }
            }
            HealthEffect::Unreachable => {
                if self.is_ready() && self.record_failure(ctx.config.eject_after) {
                    Change::Ejected
                } else {
                    Change::None
                }
            }
            HealthEffect::Slow { waited } => {
                // Slow is not failed: a sample, never a failure.
                self.observe_rtt(waited);
                Change::None
            }
            HealthEffect::Responsive => {
                self.poll_timeouts.store(0, Ordering::Release);
                Change::None
            }
            HealthEffect::Unresponsive => {
                let n = self.poll_timeouts.fetch_add(1, Ordering::AcqRel).saturating_add(1);
                if n >= STALL_AFTER && self.is_ready() {
                    self.set_health(Health::Stalled);
                    Change::Stalled
                } else {
                    Change::None
                }
            }
            HealthEffect::Draining if self.is_ready() => {
                self.set_health(Health::NotReady);
                Change::Drained
            }
            HealthEffect::Draining => Change::None,
            HealthEffect::Ready if !self.is_ready() => {
                self.poll_timeouts.store(0, Ordering::Release);
                self.set_health(Health::Ready);
                Change::Recovered
            }
            HealthEffect::Ready => Change::None,
        };
        if change == Change::Ejected {
            tracing::warn!(pool = %self.pool, worker = %self.url, reason = %why, "worker ejected after consecutive failures");
            self.with_series(&ctx.metrics, |m| m.ejections.get_or_create(&self.labels).inc());
        }
        if change == Change::Stalled {
            tracing::warn!(pool = %self.pool, worker = %self.url, timeouts = STALL_AFTER,
                "worker stalled: its monitoring calls time out; out of rotation until it answers");
        }
        change
    }

    /// Record a failure (connection error, dropped response, timeout). Returns `true` when this
    /// failure ejected the worker.
    fn record_failure(&self, eject_after: u32) -> bool {
        let n = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        if n >= eject_after {
            let prev = self.health.swap(Health::Ejected as u8, Ordering::AcqRel);
            if prev == Health::Ready as u8 {
                self.downs.fetch_add(1, Ordering::AcqRel);
            }
            return prev != Health::Ejected as u8;
        }
        false
    }

    /// Record a success: the consecutive-failure count starts over, and the latency sample
    /// (if any: a heavy request's time says nothing of the light ones') is taken. The first
    /// answer after penalties restarts the estimate (at least `--default-rtt`): the worker
    /// answers again, and a penalised estimate would keep it from traffic for tens of seconds.
    fn record_success(&self, rtt: Option<Duration>) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Release);
        }
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

    fn observe_rtt(&self, rtt: Duration) {
        self.local().rtt.observe(rtt, Instant::now(), self.rtt_decay);
    }

    /// A fast refusal (429) or failure must not look like a fast worker: the estimate doubles,
    /// bounded (see `ewma`). The calling core's estimate: each core learns the worker's state
    /// from its own answers, as nginx's workers do.
    fn penalize(&self) {
        let mut l = self.local();
        l.rtt.penalize(self.default_rtt, Instant::now(), self.rtt_decay);
        l.penalized = true;
    }

    /// The calling core's latency estimate now (seconds), after [`Endpoint::expire_penalty`].
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
        let at = self.snapshot_at_us.load(Ordering::Acquire);
        let fresh = at != NO_SNAPSHOT
            && now.saturating_duration_since(self.born).as_micros().saturating_sub(u128::from(at))
                <= stale_after.as_micros();
        let foreign_queue = if fresh { self.foreign_queue.load(Ordering::Relaxed) } else { 0 };
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
    fn sent_queries(&self) -> u64 {
        self.shares.iter().map(|s| s.sent_queries.load(Ordering::Relaxed)).sum()
    }

    /// Queries other clients have sent the worker since the gateway first read its stats.
    pub(crate) fn foreign_queries(&self) -> u64 {
        self.foreign.lock().map_or(0, |f| f.total)
    }

    /// Count a request as outstanding (on the calling core's share) until the guard drops.
    pub(crate) fn start(&self) -> InFlight<'_> {
        let slot = self.shares.mine();
        self.shares.at(slot).outstanding.fetch_add(1, Ordering::AcqRel);
        InFlight { ep: self, slot }
    }

    /// Count one client request that this worker answered (or failed) with `outcome`.
    pub(crate) fn count_request(&self, metrics: &Metrics, outcome: &str, elapsed_s: f64) {
        if outcome == "ok" {
            self.ok_requests.inc();
            self.ok_latency.observe(elapsed_s);
            return;
        }
        if let Ok(mut seen) = self.outcomes.lock() {
            seen.insert(outcome.to_owned());
        }
        let labels = RequestLabels { pool: self.pool.clone(), worker: self.url.clone(), outcome: outcome.to_owned() };
        self.with_series(metrics, |m| {
            m.requests.get_or_create(&labels).inc();
            m.latency.get_or_create(&labels).observe(elapsed_s);
        });
    }

    /// Update series that carry this worker's label: when the worker has left its pool
    /// meanwhile, they are removed again (the flag is set before `retire` removes the series, so
    /// whichever runs second leaves no series behind).
    pub(crate) fn with_series<T>(&self, metrics: &Metrics, update: impl FnOnce(&Metrics) -> T) {
        update(metrics);
        if self.retired.load(Ordering::Acquire) {
            self.forget_series(metrics);
        }
    }

    /// The worker left its pool: remove every series that carries its `worker` label.
    pub(crate) fn retire(&self, metrics: &Metrics) {
        self.retired.store(true, Ordering::Release);
        self.forget_series(metrics);
    }

    fn forget_series(&self, metrics: &Metrics) {
        let outcomes = self.outcomes.lock().map(|s| s.clone()).unwrap_or_default();
        metrics.forget_worker(&self.labels, outcomes.iter().map(String::as_str));
    }

    pub(crate) fn store_snapshot(&self, stats: &StatsView) {
        if let (Some(worker_total), Ok(mut f)) = (stats.offered_total(), self.foreign.lock()) {
            f.observe(worker_total, self.sent_queries());
        }
        let snap = Snapshot {
            at: Instant::now(),
            reported_queue: stats.reported_queue(),
            reported_queue_tokens: stats.reported_queue_tokens(),
            outstanding_at_snapshot: self.outstanding(),
            gpu_pct: stats.gpu_utilization_pct(),
            gpu_memory_used_ratio: stats.gpu_memory_used_ratio(),
            capacity: stats.capacity(),
        };
        self.foreign_queue.store(snap.foreign_queue(), Ordering::Relaxed);
        let at_us = u64::try_from(snap.at.saturating_duration_since(self.born).as_micros()).unwrap_or(NO_SNAPSHOT - 1);
        self.snapshot_at_us.store(at_us, Ordering::Release);
        if let Ok(mut s) = self.snapshot.lock() {
            *s = Some(snap);
        }
        if let (Some(m), Ok(mut held)) = (&stats.model, self.model.lock())
            && held.as_deref() != Some(m.name.as_str())
        {
            *held = Some(Arc::from(m.name.as_str()));
        }
    }

    /// Whether the worker serves the model `name` (and `version`, if any) by its last stats:
    /// what its Open Inference Protocol routes would accept (`oip::check_model`).
    pub(crate) fn serves(&self, name: &str, version: Option<&str>) -> bool {
        self.model
            .lock()
            .is_ok_and(|m| m.as_deref().is_some_and(|served| oip::check_model(served, name, version).is_ok()))
    }

    pub(crate) fn snapshot(&self) -> Option<Snapshot> {
        self.snapshot.lock().ok().and_then(|s| s.clone())
    }

    /// The snapshot if it is younger than `stale_after`.
    pub(crate) fn fresh_snapshot(&self, stale_after: Duration) -> Option<Snapshot> {
        self.snapshot().filter(|s| s.at.elapsed() <= stale_after)
    }

    pub(crate) fn held_pressure(&self) -> Option<f64> {
        self.held_pressure.lock().ok().and_then(|p| *p)
    }

    pub(crate) fn set_held_pressure(&self, p: f64) {
        if let Ok(mut h) = self.held_pressure.lock() {
            *h = Some(p);
        }
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

/// A lock whatever a panic elsewhere left: every value behind these locks is whole after each
/// statement.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

#[cfg(test)]
mod tests;
