//! Named pools of workers and the registry that keeps them in step with discovery.
//!
//! Discovery sources (static flags, the worker file, each Kubernetes Service) publish the set of
//! worker URLs they know per pool; a pool's workers are the union over sources. The endpoint list
//! is swapped atomically (`ArcSwap`, as pingora does): a request holds the `Arc<Endpoint>` it
//! picked, so a worker that leaves the set finishes the requests already sent to it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::Config;
use crate::endpoint::{Endpoint, parse_base_url};
use crate::metrics::Metrics;
use crate::signal::PoolSignal;
use crate::{balance, monitor, signal_task};

/// What every pool, endpoint monitor and request shares.
pub struct Ctx {
    pub config: Config,
    pub metrics: Metrics,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").finish_non_exhaustive()
    }
}

/// Aborts a background task when dropped.
#[derive(Debug)]
pub struct AbortOnDrop(pub JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

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

/// One named pool: its workers, their monitors, its backlog and its signal.
pub struct Pool {
    pub name: String,
    pub meta: PoolMeta,
    ctx: Arc<Ctx>,
    endpoints: ArcSwap<Vec<Arc<Endpoint>>>,
    monitors: Mutex<HashMap<String, AbortOnDrop>>,
    ready_notify: Arc<Notify>,
    backlog: AtomicU64,
    signal: watch::Sender<PoolSignal>,
    signal_task: Mutex<Option<AbortOnDrop>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("name", &self.name).finish_non_exhaustive()
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
        let (signal, _) = watch::channel(PoolSignal {
            pool: name.to_owned(),
            namespace: meta.namespace.clone(),
            ..Default::default()
        });
        let pool = Arc::new(Self {
            name: name.to_owned(),
            meta,
            ctx,
            endpoints: ArcSwap::from_pointee(Vec::new()),
            monitors: Mutex::new(HashMap::new()),
            ready_notify: Arc::new(Notify::new()),
            backlog: AtomicU64::new(0),
            signal,
            signal_task: Mutex::new(None),
        });
        let task = signal_task::spawn(Arc::downgrade(&pool), Arc::clone(&pool.ctx));
        if let Ok(mut t) = pool.signal_task.lock() {
            *t = Some(AbortOnDrop(task));
        }
        pool
    }

    pub fn ctx(&self) -> &Arc<Ctx> {
        &self.ctx
    }

    pub fn endpoints(&self) -> Arc<Vec<Arc<Endpoint>>> {
        self.endpoints.load_full()
    }

    /// Requests waiting at the gateway for a ready worker.
    pub fn backlog(&self) -> u64 {
        self.backlog.load(Ordering::Acquire)
    }

    /// The latest signal; the accessor the external metrics API will serve.
    pub fn signal(&self) -> watch::Receiver<PoolSignal> {
        self.signal.subscribe()
    }

    pub(crate) fn publish_signal(&self, s: PoolSignal) {
        self.signal.send_replace(s);
    }

    /// Replace the pool's workers with `urls` (already normalised by `parse_base_url`).
    /// Known workers keep their state; new ones start probing; removed ones stop being picked.
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
            let ep = match Endpoint::new(
                &self.name,
                url,
                self.ctx.config.default_rtt,
                self.ctx.config.rtt_decay,
                self.ctx.config.pool_max_idle_per_host,
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
        for gone in current.iter().filter(|e| !urls.contains(&e.url)) {
            tracing::info!(pool = %self.name, worker = %gone.url, "worker removed");
            monitors.remove(&gone.url);
            self.ctx.metrics.forget_worker(&self.name, &gone.url);
        }
        self.endpoints.store(Arc::new(next));
        self.ready_notify.notify_waiters();
    }

    /// Pick a ready worker other than `exclude`, waiting up to `wait` for one to become ready.
    pub async fn acquire(&self, exclude: Option<&Arc<Endpoint>>, wait: Duration) -> Option<Arc<Endpoint>> {
        let stale_after = self.ctx.config.stale_after;
        if let Some(e) = balance::pick(&self.endpoints.load(), exclude, stale_after, &mut rand::rng()) {
            return Some(e);
        }
        if wait.is_zero() {
            return None;
        }
        self.backlog.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(&self.backlog);
        let deadline = Instant::now() + wait;
        loop {
            let notified = self.ready_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(e) = balance::pick(&self.endpoints.load(), exclude, stale_after, &mut rand::rng()) {
                return Some(e);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }
}

/// Worker URLs per pool, as one discovery source knows them.
pub type Targets = BTreeMap<String, BTreeSet<String>>;

/// All pools, looked up without a lock on the request path.
pub struct Pools {
    ctx: Arc<Ctx>,
    /// Pools whose place is known from the start (those fed by a Service); any other pool gets
    /// [`PoolMeta::plain`] in `--pool-namespace`.
    known: BTreeMap<String, PoolMeta>,
    pools: ArcSwap<HashMap<String, Arc<Pool>>>,
    sources: Mutex<BTreeMap<String, Targets>>,
}

impl std::fmt::Debug for Pools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pools").finish_non_exhaustive()
    }
}

impl Pools {
    pub fn new(ctx: Arc<Ctx>, known: BTreeMap<String, PoolMeta>) -> Arc<Self> {
        Arc::new(Self {
            ctx,
            known,
            pools: ArcSwap::from_pointee(HashMap::new()),
            sources: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn ctx(&self) -> &Arc<Ctx> {
        &self.ctx
    }

    pub fn get(&self, name: &str) -> Option<Arc<Pool>> {
        self.pools.load().get(name).cloned()
    }

    pub fn all(&self) -> Vec<Arc<Pool>> {
        let mut v: Vec<_> = self.pools.load().values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Make sure a pool exists (a configured pool with no workers yet answers 503, not 404).
    pub fn ensure(&self, name: &str) -> Arc<Pool> {
        let _serialised = match self.sources.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        self.ensure_locked(name)
    }

    fn ensure_locked(&self, name: &str) -> Arc<Pool> {
        if let Some(p) = self.get(name) {
            return p;
        }
        let meta =
            self.known.get(name).cloned().unwrap_or_else(|| PoolMeta::plain(name, &self.ctx.config.pool_namespace));
        let pool = Pool::new(name, meta, Arc::clone(&self.ctx));
        let mut map = HashMap::clone(&self.pools.load());
        map.insert(name.to_owned(), Arc::clone(&pool));
        self.pools.store(Arc::new(map));
        pool
    }

    /// Replace what `source` knows; every pool gets the union over all sources.
    pub fn update(&self, source: &str, targets: Targets) {
        let mut sources = match self.sources.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        sources.insert(source.to_owned(), targets);
        let mut union: Targets = BTreeMap::new();
        for t in sources.values() {
            for (pool, urls) in t {
                let set = union.entry(pool.clone()).or_default();
                for url in urls {
                    match parse_base_url(url) {
                        Ok((scheme, authority)) => {
                            set.insert(format!("{scheme}://{authority}"));
                        }
                        Err(e) => tracing::warn!(pool = %pool, error = %e, "ignoring worker"),
                    }
                }
            }
        }
        for name in union.keys() {
            self.ensure_locked(name);
        }
        let empty = BTreeSet::new();
        for pool in self.all() {
            pool.set_workers(union.get(&pool.name).unwrap_or(&empty));
        }
    }

    /// Weak handle for background tasks.
    pub fn downgrade(self: &Arc<Self>) -> Weak<Self> {
        Arc::downgrade(self)
    }
}
