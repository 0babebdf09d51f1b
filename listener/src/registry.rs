//! Every open connection's state, so the accept loop can drain them all, abort them, or evict the
//! longest-idle ones at the connection cap. Touched once when a connection opens and once when it
//! closes (a short mutex), never per request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use slab::Slab;

use crate::phase::{ABORT, ConnState, DRAIN, EVICT, Phase};

#[derive(Debug, Default)]
pub(crate) struct Registry {
    conns: Mutex<Slab<Arc<ConnState>>>,
    draining: AtomicBool,
}

/// Removes its connection from the registry when dropped.
#[derive(Debug)]
pub(crate) struct Entry {
    registry: Arc<Registry>,
    key: usize,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.registry.lock().try_remove(self.key);
    }
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Slab<Arc<ConnState>>> {
        // A panic while holding this lock leaves the slab consistent: keep going.
        self.conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds a connection; one added while [`Registry::drain_all`] runs is drained too.
    pub(crate) fn insert(self: &Arc<Self>, conn: Arc<ConnState>) -> Entry {
        let key = self.lock().insert(Arc::clone(&conn));
        // `drain_all` sets the flag before it walks the connections under the lock: either it
        // met this one, or the flag is visible here.
        if self.is_draining() {
            conn.signal(DRAIN);
        }
        Entry { registry: Arc::clone(self), key }
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Every connection, and every one opened from now on, drains.
    pub(crate) fn drain_all(&self) {
        self.draining.store(true, Ordering::Release);
        for (_, c) in self.lock().iter() {
            c.signal(DRAIN);
        }
    }

    /// Every connection closes now.
    pub(crate) fn abort_all(&self) {
        for (_, c) in self.lock().iter() {
            c.signal(ABORT);
        }
    }

    /// Asks up to `n` of the longest-idle keep-alive connections to close; returns how many.
    pub(crate) fn evict_idle(&self, n: usize) -> usize {
        let conns = self.lock();
        let mut idle: Vec<&Arc<ConnState>> =
            conns.iter().map(|(_, c)| c).filter(|c| c.phase() == Phase::Idle && !c.draining()).collect();
        if idle.len() > n {
            idle.select_nth_unstable_by_key(n, |c| c.since());
            idle.truncate(n);
        }
        for c in &idle {
            c.signal(EVICT);
        }
        idle.len()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn eviction_takes_the_longest_idle_and_only_idle_ones() {
        let r = Arc::new(Registry::default());
        let base = Instant::now();
        let mk = |s: u64| Arc::new(ConnState::new(base, base + Duration::from_secs(s)));
        let (busy, old, young, older) = (mk(0), mk(0), mk(0), mk(0));
        let _e: Vec<Entry> = [&busy, &old, &young, &older].iter().map(|c| r.insert(Arc::clone(c))).collect();
        busy.busy();
        for c in [&old, &young, &older] {
            c.busy();
        }
        // Answered (and flushed) at different times.
        tokio_test_answer(&older, base, 1);
        tokio_test_answer(&old, base, 2);
        tokio_test_answer(&young, base, 3);
        assert_eq!(r.evict_idle(2), 2);
        assert!(older.draining() && old.draining());
        assert!(!young.draining() && !busy.draining());
        assert_eq!(r.len(), 4);
        drop(_e);
        assert_eq!(r.len(), 0);
    }

    fn tokio_test_answer(c: &ConnState, base: Instant, s: u64) {
        c.answered_at(base + Duration::from_secs(s));
        c.flushed();
    }
}
