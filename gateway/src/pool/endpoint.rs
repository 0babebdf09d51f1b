//! One worker as the gateway sees it: its health state, the requests outstanding to it, its
//! latency estimate and its last telemetry snapshot.
//!
//! Split by who writes what (issue 47), so that a request writes no cache line that another
//! data-plane core's requests write:
//! - each core's own part (`share::Share`, one per core in a [`Slots`]): the requests it has
//!   outstanding to the worker, the queries it sent, its latency estimate (learnt from its own
//!   answers and penalties) and its queue of requests waiting to be merged. A request touches
//!   only its own core's; sums (the signal's outstanding, the stats' queries sent) read them all;
//! - what the monitor writes (health, failures, the telemetry snapshot, the model), which the
//!   request path only reads; the balancer's part of the snapshot (the other clients' queue and
//!   when it was read) is published as two atomics, so that a pick takes no lock;
//! - the upstream connections, one idle stack per core (`upstream`).
//!
//! The balancer reads its own core's outstanding count live and the other cores' as a sum it
//! refreshes at most every `share::OTHERS_REFRESH` (reading their lines, never writing them).
//!
//! Here: the worker's identity, health and series; `share.rs`: each core's part; `telemetry.rs`:
//! what the monitor writes.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http::Uri;
use listener::shard::{Counter, Histogram};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::outcome::{HealthEffect, STALL_AFTER};
use crate::ctx::Ctx;
use crate::metrics::{Metrics, PoolLabels, RequestLabels, WorkerLabels};
use crate::runtime::Slots;
use crate::upstream::Upstream;

mod share;
mod telemetry;

use share::Share;
#[cfg(test)]
use telemetry::Foreign;
use telemetry::Telemetry;

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
    default_rtt: Duration,
    rtt_decay: Duration,
    rtt_cap: Duration,
    /// What the monitor writes.
    telemetry: Telemetry,
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
            shares: Slots::new(core_slots, || Share::new(rtt, now)),
            default_rtt: rtt.default,
            rtt_decay: rtt.decay,
            rtt_cap: rtt.cap,
            telemetry: Telemetry::new(now),
            ready_notify,
        })
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
                self.restart_estimates();
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
        self.answered(rtt);
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
