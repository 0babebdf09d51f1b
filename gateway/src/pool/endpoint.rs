//! One worker as the gateway sees it: its health state, the requests outstanding to it, its
//! latency estimate and its last telemetry snapshot. Everything the request path reads is an
//! atomic or a short uncontended lock.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
use crate::upstream::Upstream;

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

/// Per-worker state shared by the balancer, the proxy, the monitor task and the signal.
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
    outstanding: AtomicU64,
    /// Queries this gateway has sent to the worker since it was added (retries included).
    sent_queries: AtomicU64,
    /// Queries other clients sent the worker (its admitted plus refused, less ours), since the
    /// first snapshot: other gateway replicas' share of the demand.
    foreign: Mutex<Foreign>,
    rtt: Mutex<PeakEwma>,
    /// A refusal or a failure raised the estimate since its last answer: the next answer
    /// restarts it (the worker answers again; what the penalties guessed no longer holds).
    penalized: AtomicBool,
    default_rtt: Duration,
    rtt_decay: Duration,
    snapshot: Mutex<Option<Snapshot>>,
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
    /// Single-query requests waiting to be merged, and the exchanges in flight that decide it.
    coalesce: Mutex<Queue<Member>>,
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
        upstream_slots: usize,
        ready_notify: Arc<Notify>,
        metrics: &Metrics,
    ) -> Result<Self, String> {
        let (scheme, authority) = parse_base_url(url)?;
        let url = format!("{scheme}://{authority}");
        let ok = RequestLabels { pool: pool.to_owned(), worker: url.clone(), outcome: "ok".to_owned() };
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
            upstream: Upstream::new(authority, max_idle_connections, CONNECT_TIMEOUT, upstream_slots),
            health: AtomicU8::new(Health::Probing as u8),
            downs: AtomicU64::new(0),
            failures: AtomicU32::new(0),
            poll_timeouts: AtomicU32::new(0),
            outstanding: AtomicU64::new(0),
            sent_queries: AtomicU64::new(0),
            foreign: Mutex::new(Foreign::default()),
            rtt: Mutex::new(PeakEwma::new(rtt.default, rtt.cap, Instant::now())),
            penalized: AtomicBool::new(false),
            default_rtt: rtt.default,
            rtt_decay: rtt.decay,
            snapshot: Mutex::new(None),
            model: Mutex::new(None),
            held_pressure: Mutex::new(None),
            ready_notify,
            coalesce: Mutex::new(Queue::default()),
        })
    }

    /// The worker's queue of requests waiting to be merged (a short lock: one decision).
    pub(crate) fn coalesce(&self) -> std::sync::MutexGuard<'_, Queue<Member>> {
        match self.coalesce.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
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
                if let Ok(mut e) = self.rtt.lock() {
                    e.restart(self.default_rtt, Instant::now());
                }
                self.penalized.store(false, Ordering::Release);
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
        let restart = self.penalized.load(Ordering::Relaxed) && self.penalized.swap(false, Ordering::AcqRel);
        match rtt {
            Some(rtt) if restart => {
                if let Ok(mut e) = self.rtt.lock() {
                    e.restart(rtt.max(self.default_rtt), Instant::now());
                }
            }
            Some(rtt) => self.observe_rtt(rtt),
            None if restart => {
                if let Ok(mut e) = self.rtt.lock() {
                    e.restart(self.default_rtt, Instant::now());
                }
            }
            None => {}
        }
    }

    fn observe_rtt(&self, rtt: Duration) {
        if let Ok(mut e) = self.rtt.lock() {
            e.observe(rtt, Instant::now(), self.rtt_decay);
        }
    }

    /// A fast refusal (429) or failure must not look like a fast worker: the estimate doubles,
    /// bounded (see `ewma`).
    fn penalize(&self) {
        if let Ok(mut e) = self.rtt.lock() {
            e.penalize(self.default_rtt, Instant::now(), self.rtt_decay);
        }
        self.penalized.store(true, Ordering::Release);
    }

    /// The balancer's latency estimate now (seconds). A penalty older than `ewma::PENALTY_HOLD`
    /// with no answer since ends here: the estimate starts over at the default.
    pub(crate) fn rtt_estimate_s(&self) -> f64 {
        let now = Instant::now();
        self.rtt
            .lock()
            .map(|mut e| {
                if e.expire_penalty(self.default_rtt, now) {
                    self.penalized.store(false, Ordering::Release);
                }
                e.at(now, self.rtt_decay)
            })
            .unwrap_or(0.0)
    }

    pub(crate) fn outstanding(&self) -> u64 {
        self.outstanding.load(Ordering::Acquire)
    }

    /// `n` queries sent to the worker (an attempt).
    pub(crate) fn sent(&self, n: u64) {
        self.sent_queries.fetch_add(n, Ordering::Relaxed);
    }

    /// Queries other clients have sent the worker since the gateway first read its stats.
    pub(crate) fn foreign_queries(&self) -> u64 {
        self.foreign.lock().map_or(0, |f| f.total)
    }

    /// Count a request as outstanding until the guard drops.
    pub(crate) fn start(self: &Arc<Self>) -> InFlight {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        InFlight { ep: Arc::clone(self) }
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
            f.observe(worker_total, self.sent_queries.load(Ordering::Relaxed));
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

/// An outstanding request to a worker; decrements the count on drop, whatever happens.
#[derive(Debug)]
pub(crate) struct InFlight {
    ep: Arc<Endpoint>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.ep.outstanding.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests;
