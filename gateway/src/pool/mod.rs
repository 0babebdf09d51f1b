//! Pools of workers and their health: the registry that keeps pools in step with discovery
//! ([`Pools`]), one pool's worker set and backlog ([`Pool`]), one worker's state
//! ([`endpoint`]), the per-worker monitor task ([`monitor`]) that reads the worker's stats
//! through the gateway's narrow view of them ([`stats`]), and the policy that says what the outcome of a call to a worker means
//! ([`outcome`]).
//!
//! A pool's worker set is swapped atomically (`ArcSwap`, as pingora does): a request holds the
//! `Arc<Endpoint>` it picked, so a worker that leaves the set finishes the requests already sent
//! to it.

mod endpoint;
mod ewma;
pub(crate) mod merge_queue;
mod monitor;
pub(crate) mod outcome;
mod registry;
mod stats;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

pub use endpoint::Health;
#[cfg(test)]
pub(crate) use endpoint::Rtt;
pub(crate) use endpoint::{Change, Endpoint, parse_base_url};
pub(crate) use ewma::secs;
pub use registry::Pools;
pub(crate) use registry::Targets;
#[cfg(test)]
pub(crate) use stats::StatsView;

use crate::ctx::Ctx;
use crate::task::AbortOnDrop;
use wire::PoolSignal;

/// Where a pool belongs in Kubernetes terms: the namespace whose external metrics requests see it,
/// and the labels a metric label selector is matched against (always `pool`; pools fed by a
/// Service also carry `service`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolMeta {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
}

impl PoolMeta {
    /// A pool given by flags or the worker file: the configured namespace, the `pool` label.
    pub fn plain(pool: &str, namespace: &str) -> Self {
        Self { namespace: namespace.to_owned(), labels: BTreeMap::from([("pool".to_owned(), pool.to_owned())]) }
    }
}

/// One worker as `/v1/pools` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerStatus {
    /// Base URL, e.g. `http://10.0.0.5:8000`.
    pub url: String,
    pub health: Health,
    /// Requests this gateway has sent it and not finished.
    pub outstanding: u64,
    /// The balancer's latency estimate: the highest of the cores' (each core keeps its own).
    pub rtt_estimate_ms: f64,
    /// Age of its last `/v1/stats` snapshot; `None` before the first.
    pub telemetry_age_ms: Option<u64>,
    /// `queued + in_flight` in its last snapshot.
    pub reported_queue: Option<u64>,
    /// The same in tokens, when the worker reports it.
    pub reported_queue_tokens: Option<u64>,
    /// GPU utilization (0..1) in its last snapshot; `None` without a GPU reading.
    pub gpu_utilization_ratio: Option<f64>,
}

/// One named pool: its workers, their monitors, its backlog and its signal.
pub struct Pool {
    pub name: String,
    pub meta: PoolMeta,
    ctx: Arc<Ctx>,
    endpoints: ArcSwap<Vec<Arc<Endpoint>>>,
    monitors: Mutex<HashMap<String, AbortOnDrop>>,
    ready_notify: Arc<Notify>,
    backlog: AtomicU64,
    /// Requests and their body bytes held while the pool is at zero (`--cold-start-hold*`).
    held_requests: AtomicU64,
    held_bytes: AtomicU64,
    /// Queries offered to the pool since start, admitted or refused: the signal's demand.
    offered: listener::shard::Counter,
    /// The merge policy (`--coalesce-*`), made once: it reads the cores.
    coalesce: Option<merge_queue::Policy>,
    /// Bumped whenever a request starts waiting for a worker: wakes KEDA's `StreamIsActive`
    /// at once (a pool at zero replicas is activated by its first request, not the next tick).
    waiting: watch::Sender<()>,
    signal: watch::Sender<PoolSignal>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("name", &self.name).finish_non_exhaustive()
    }
}

/// A request held for a pool at zero ([`Pool::hold`]): its place under the pool's hold bounds,
/// given back when dropped, and its time held observed in `gateway_pool_hold_seconds` then.
pub(crate) struct Held<'a> {
    pool: &'a Pool,
    bytes: u64,
    since: Instant,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.pool.held_requests.fetch_sub(1, Ordering::AcqRel);
        self.pool.held_bytes.fetch_sub(self.bytes, Ordering::AcqRel);
        let labels = crate::metrics::PoolLabels { pool: self.pool.name.clone() };
        self.pool.ctx.metrics.pool_hold.get_or_create(&labels).observe(self.since.elapsed().as_secs_f64());
    }
}

/// Counts a request waiting for a ready worker in the pool's backlog while it lives.
struct Waiting<'a>(&'a AtomicU64);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Pool {
    fn new(name: &str, meta: PoolMeta, ctx: Arc<Ctx>) -> Arc<Self> {
        // Every pool's hold histogram exists from the start: a count of 0 says no request waited.
        drop(ctx.metrics.pool_hold.get_or_create(&crate::metrics::PoolLabels { pool: name.to_owned() }));
        let (signal, _) = watch::channel(PoolSignal {
            pool: name.to_owned(),
            namespace: meta.namespace.clone(),
            ..Default::default()
        });
        let coalesce = merge_queue::Policy::from_config(&ctx.config);
        Arc::new(Self {
            name: name.to_owned(),
            meta,
            ctx,
            endpoints: ArcSwap::from_pointee(Vec::new()),
            monitors: Mutex::new(HashMap::new()),
            ready_notify: Arc::new(Notify::new()),
            backlog: AtomicU64::new(0),
            held_requests: AtomicU64::new(0),
            held_bytes: AtomicU64::new(0),
            offered: listener::shard::Counter::default(),
            coalesce,
            waiting: watch::Sender::new(()),
            signal,
        })
    }

    pub(crate) fn ctx(&self) -> &Arc<Ctx> {
        &self.ctx
    }

    pub(crate) fn endpoints(&self) -> Arc<Vec<Arc<Endpoint>>> {
        self.endpoints.load_full()
    }

    /// Every worker of the pool, as `/v1/pools` shows it.
    pub fn workers(&self) -> Vec<WorkerStatus> {
        let now = Instant::now();
        self.endpoints
            .load()
            .iter()
            .map(|e| {
                let s = e.snapshot();
                WorkerStatus {
                    url: e.url.clone(),
                    health: e.health(),
                    outstanding: e.outstanding(),
                    rtt_estimate_ms: e.rtt_estimate_max_s() * 1000.0,
                    telemetry_age_ms: s.as_ref().map(|s| now.saturating_duration_since(s.at).as_millis() as u64),
                    reported_queue: s.as_ref().map(|s| s.reported_queue),
                    reported_queue_tokens: s.as_ref().and_then(|s| s.reported_queue_tokens),
                    gpu_utilization_ratio: s.and_then(|s| s.gpu_pct).map(|p| p / 100.0),
                }
            })
            .collect()
    }

    /// Requests waiting at the gateway for a ready worker.
    /// A client request of `queries` queries arrived for this pool (counted before admission:
    /// refused ones are demand too).
    pub fn offer(&self, queries: u64) {
        self.offered.inc_by(queries);
    }

    /// The merge policy; `None` when coalescing is off.
    pub(crate) fn coalesce(&self) -> Option<merge_queue::Policy> {
        self.coalesce
    }

    /// Queries offered since start.
    pub fn offered(&self) -> u64 {
        self.offered.get()
    }

    pub fn backlog(&self) -> u64 {
        self.backlog.load(Ordering::Acquire)
    }

    /// The latest signal, published every `--signal-interval` (what the external metrics API
    /// and `/v1/signal` serve).
    pub fn signal(&self) -> watch::Receiver<PoolSignal> {
        self.signal.subscribe()
    }

    /// Changes whenever a request starts waiting for a worker (see [`Pool::backlog`]).
    pub fn waiting(&self) -> watch::Receiver<()> {
        self.waiting.subscribe()
    }

    /// Whether the pool has demand: requests waiting for a worker or in flight at the gateway,
    /// or work queued at its workers as they last reported.
    pub fn has_demand(&self) -> bool {
        self.backlog() > 0
            || self.endpoints.load().iter().any(|e| e.outstanding() > 0)
            || self.signal.borrow().components.queue > 0.0
    }

    pub(crate) fn publish_signal(&self, s: PoolSignal) {
        self.signal.send_replace(s);
    }

    /// Whether the pool is at zero: no worker, or only workers still starting (probing or not
    /// ready yet); none ready, ejected or stalled (a pool whose workers fail is not waking up).
    pub(crate) fn at_zero(&self) -> bool {
        self.endpoints.load().iter().all(|e| matches!(e.health(), Health::Probing | Health::NotReady))
    }

    /// Whether the pool's requests are held now: it is at zero and `--cold-start-hold` is on.
    pub(crate) fn holds(&self) -> bool {
        !self.ctx.config.cold_start_hold.is_zero() && self.at_zero()
    }

    /// A place for a request of `bytes` body bytes among those held while the pool is at zero,
    /// unless the pool holds `--cold-start-hold-requests` or `--cold-start-hold-bytes` already.
    pub(crate) fn hold(&self, bytes: u64) -> Option<Held<'_>> {
        let cfg = &self.ctx.config;
        if self.held_requests.fetch_add(1, Ordering::AcqRel) >= cfg.cold_start_hold_requests {
            self.held_requests.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        if self.held_bytes.fetch_add(bytes, Ordering::AcqRel).saturating_add(bytes) > cfg.cold_start_hold_bytes {
            self.held_bytes.fetch_sub(bytes, Ordering::AcqRel);
            self.held_requests.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Held { pool: self, bytes, since: Instant::now() })
    }

    /// The worker `pick` chooses among the pool's workers, waiting up to `wait` (counted in the
    /// pool's backlog) for one to become ready when it finds none.
    pub(crate) async fn wait_for_worker(
        &self,
        wait: Duration,
        mut pick: impl FnMut(&[Arc<Endpoint>]) -> Option<Arc<Endpoint>>,
    ) -> Option<Arc<Endpoint>> {
        if let Some(e) = pick(&self.endpoints.load()) {
            return Some(e);
        }
        if wait.is_zero() {
            return None;
        }
        self.backlog.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(&self.backlog);
        self.waiting.send_replace(());
        let deadline = Instant::now() + wait;
        loop {
            let notified = self.ready_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(e) = pick(&self.endpoints.load()) {
                return Some(e);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Replace the pool's workers with `urls` (already normalised by `parse_base_url`).
    /// Known workers keep their state; new ones start probing; removed ones stop being picked,
    /// and their metric series go.
    fn set_workers(self: &Arc<Self>, urls: &BTreeSet<String>) {
        let current = self.endpoints();
        if current.len() == urls.len() && current.iter().all(|e| urls.contains(&e.url)) {
            return;
        }
        let mut next = Vec::with_capacity(urls.len());
        let mut monitors = match self.monitors.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        for url in urls {
            if let Some(e) = current.iter().find(|e| &e.url == url) {
                next.push(Arc::clone(e));
                continue;
            }
            let cfg = &self.ctx.config;
            let ep = match Endpoint::new(
                &self.name,
                url,
                endpoint::Rtt::from_config(cfg),
                cfg.pool_max_idle_per_host,
                cfg.core_slots(),
                Arc::clone(&self.ready_notify),
                &self.ctx.metrics,
            ) {
                Ok(e) => Arc::new(e),
                Err(e) => {
                    tracing::warn!(pool = %self.name, error = %e, "ignoring worker");
                    continue;
                }
            };
            tracing::info!(pool = %self.name, worker = %ep.url, "worker added");
            monitors.insert(ep.url.clone(), AbortOnDrop(monitor::spawn(Arc::clone(&ep), Arc::clone(&self.ctx))));
            next.push(ep);
        }
        self.endpoints.store(Arc::new(next));
        for gone in current.iter().filter(|e| !urls.contains(&e.url)) {
            tracing::info!(pool = %self.name, worker = %gone.url, "worker removed");
            monitors.remove(&gone.url);
            gone.retire(&self.ctx.metrics);
        }
        self.ready_notify.notify_waiters();
    }
}
