//! Every open connection's state, so the accept loop can drain them all, abort them, or evict the
//! longest-idle ones at the connection cap. Touched once when a connection opens and once when it
//! closes (a short mutex), never per request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use slab::Slab;

use tokio::time::Instant;

use crate::phase::{ABORT, ConnState, DRAIN, Deadlines, EVICT, EXPIRED, Phase};

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

    /// Signals every connection past a deadline at `now` (the sweeper, once per clock tick).
    pub(crate) fn expire(&self, deadlines: Deadlines, now: Instant) {
        for (_, c) in self.lock().iter() {
            if c.signals() & EXPIRED == 0 && deadlines.expired(c.phase(), c.since(), now).is_some() {
                c.signal(EXPIRED);
            }
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
    use crate::phase::Clock;
    use std::time::Duration;

    const D: Deadlines = Deadlines { header: Duration::from_secs(10), idle: Duration::from_secs(75) };

    fn answered_at(c: &ConnState, at: Instant) {
        c.busy();
        c.answered();
        c.flushed();
        c.stamp(at);
    }

    #[test]
    fn eviction_takes_the_longest_idle_and_only_idle_ones() {
        let r = Arc::new(Registry::default());
        let clock = Arc::new(Clock::new(D));
        let base = Instant::now();
        let mk = || Arc::new(ConnState::new(Arc::clone(&clock)));
        let (busy, old, young, older) = (mk(), mk(), mk(), mk());
        let entries: Vec<Entry> = [&busy, &old, &young, &older].iter().map(|c| r.insert(Arc::clone(c))).collect();
        busy.busy();
        answered_at(&older, base + Duration::from_secs(1));
        answered_at(&old, base + Duration::from_secs(2));
        answered_at(&young, base + Duration::from_secs(3));
        assert_eq!(r.evict_idle(2), 2);
        assert!(older.draining() && old.draining());
        assert!(!young.draining() && !busy.draining());
        assert_eq!(r.len(), 4);
        drop(entries);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn the_sweep_signals_exactly_the_connections_past_a_deadline() {
        let r = Arc::new(Registry::default());
        let clock = Arc::new(Clock::new(D));
        let t0 = Instant::now();
        let mk = || Arc::new(ConnState::new(Arc::clone(&clock)));
        let (head, busy, idle) = (mk(), mk(), mk());
        let _entries: Vec<Entry> = [&head, &busy, &idle].iter().map(|c| r.insert(Arc::clone(c))).collect();
        head.stamp(t0);
        busy.busy();
        answered_at(&idle, t0);
        r.expire(D, t0 + Duration::from_secs(9));
        assert!([&head, &busy, &idle].iter().all(|c| c.signals() & EXPIRED == 0));
        r.expire(D, t0 + Duration::from_secs(10));
        assert_eq!((head.signals() & EXPIRED, busy.signals() & EXPIRED, idle.signals() & EXPIRED), (EXPIRED, 0, 0));
        r.expire(D, t0 + Duration::from_secs(75));
        assert_eq!((busy.signals() & EXPIRED, idle.signals() & EXPIRED), (0, EXPIRED));
    }
}
