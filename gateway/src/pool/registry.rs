//! All pools, and the union of what every discovery source knows about them.
//!
//! Discovery sources (static flags, the worker file, each Kubernetes Service) publish the set of
//! worker URLs they know per pool ([`Pools::update`]); a pool's workers are the union over
//! sources.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};

use arc_swap::ArcSwap;

use super::{Pool, PoolMeta, parse_base_url};
use crate::ctx::Ctx;

/// Worker URLs per pool, as one discovery source knows them.
pub(crate) type Targets = BTreeMap<String, BTreeSet<String>>;

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
    pub(crate) fn new(ctx: Arc<Ctx>, known: BTreeMap<String, PoolMeta>) -> Arc<Self> {
        Arc::new(Self {
            ctx,
            known,
            pools: ArcSwap::from_pointee(HashMap::new()),
            sources: Mutex::new(BTreeMap::new()),
        })
    }

    pub(crate) fn ctx(&self) -> &Arc<Ctx> {
        &self.ctx
    }

    /// The pool named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Pool>> {
        self.pools.load().get(name).cloned()
    }

    /// Every pool, by name.
    pub fn all(&self) -> Vec<Arc<Pool>> {
        let mut v: Vec<_> = self.pools.load().values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Make sure a pool exists (a configured pool with no workers yet answers 503, not 404).
    pub(crate) fn ensure(&self, name: &str) -> Arc<Pool> {
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
    pub(crate) fn update(&self, source: &str, targets: Targets) {
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
    pub(crate) fn downgrade(self: &Arc<Self>) -> Weak<Self> {
        Arc::downgrade(self)
    }
}
