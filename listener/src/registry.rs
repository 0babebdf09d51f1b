//! Every open connection's state and how many each client address holds, so the accept loop can
//! cap connections per address, drain them all, abort them, or make room at the connection cap.
//! Touched twice when a connection opens and twice when it closes (a short mutex), never per
//! request.
//!
//! Making room at the cap ([`Registry::make_room`]) for a newcomer closes connections that hold
//! a place without a request in progress, those of the addresses holding the most connections
//! first (a flood pays for itself, as nginx's and HAProxy's per-source tracking intend), and
//! among one address's the longest waiting: each is asked to close (an idle keep-alive one, or
//! one still waiting for a request head, closes at once unless a request's bytes are already
//! there: that request is answered first, with `Connection: close`). Only connections of
//! addresses holding at least twice the newcomer's are taken (idle ones: at least as many), so
//! a flooding address cannot push out anyone smaller than itself nor churn with flooders of its
//! size, and at the cap its new connections are refused while a client holding few gets in.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use slab::Slab;

use tokio::time::Instant;

use crate::phase::{ABORT, ConnState, DRAIN, Deadlines, EVICT, EXPIRED, Phase};

/// A client address as the per-address cap counts it: an IPv4 address (also when it comes
/// IPv4-mapped), or an IPv6 /64 (what one host or one customer is given).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct AddrKey(u128);

impl AddrKey {
    pub(crate) fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self(u128::from(v4.to_ipv6_mapped())),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self(u128::from(v4.to_ipv6_mapped())),
                None => Self(u128::from(v6) & !u128::from(u64::MAX)),
            },
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    conns: Slab<(Arc<ConnState>, AddrKey)>,
    per_address: HashMap<AddrKey, usize>,
}

#[derive(Debug, Default)]
pub(crate) struct Registry {
    inner: Mutex<Inner>,
    draining: AtomicBool,
}

/// What [`Registry::make_room`] did for a newcomer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Room {
    /// Connections it asked to close.
    pub(crate) closed: usize,
    /// Connections it could have taken that were closing already.
    pub(crate) closing: usize,
}

impl Room {
    /// Whether a place is coming for the newcomer.
    pub(crate) fn coming(self) -> bool {
        self.closed + self.closing > 0
    }
}

/// A place of one address under the per-address cap, given back when dropped.
#[derive(Debug)]
pub(crate) struct AddrSlot {
    registry: Arc<Registry>,
    key: AddrKey,
}

impl AddrSlot {
    pub(crate) fn key(&self) -> AddrKey {
        self.key
    }

    /// Connections its address holds now, this one included.
    pub(crate) fn held(&self) -> usize {
        self.registry.lock().per_address.get(&self.key).copied().unwrap_or(0)
    }
}

impl Drop for AddrSlot {
    fn drop(&mut self) {
        let mut inner = self.registry.lock();
        if let Some(n) = inner.per_address.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                inner.per_address.remove(&self.key);
            }
        }
    }
}

/// Removes its connection from the registry when dropped.
#[derive(Debug)]
pub(crate) struct Entry {
    registry: Arc<Registry>,
    key: usize,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.registry.lock().conns.try_remove(self.key);
    }
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves the slab and the counts consistent: keep going.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for one more connection from `ip`, unless it holds `cap` already.
    pub(crate) fn reserve(self: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<AddrSlot> {
        let key = AddrKey::of(ip);
        let mut inner = self.lock();
        let n = inner.per_address.entry(key).or_default();
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(AddrSlot { registry: Arc::clone(self), key })
    }

    /// Adds a connection from `addr`; one added while [`Registry::drain_all`] runs is drained too.
    pub(crate) fn insert(self: &Arc<Self>, conn: Arc<ConnState>, addr: AddrKey) -> Entry {
        let key = self.lock().conns.insert((Arc::clone(&conn), addr));
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
        for (_, (c, _)) in self.lock().conns.iter() {
            c.signal(DRAIN);
        }
    }

    /// Every connection closes now.
    pub(crate) fn abort_all(&self) {
        for (_, (c, _)) in self.lock().conns.iter() {
            c.signal(ABORT);
        }
    }

    /// Signals every connection past a deadline at `now` (the sweeper, once per clock tick).
    pub(crate) fn expire(&self, deadlines: Deadlines, now: Instant) {
        for (_, (c, _)) in self.lock().conns.iter() {
            if c.signals() & EXPIRED == 0 && deadlines.expired(c.phase(), c.since(), now).is_some() {
                c.signal(EXPIRED);
            }
        }
    }

    /// Closes up to `n` connections without a request in progress (idle, or waiting for a
    /// head) for a newcomer whose address holds `holds` (itself included; 0: any may go): those
    /// of the addresses holding twice as many (idle ones: at least as many), the biggest first,
    /// then the longest waiting. Returns how many it closed, and how many such connections were
    /// closing already (asked by an earlier newcomer, their places not yet free): room is coming
    /// for the newcomer either way.
    pub(crate) fn make_room(&self, n: usize, holds: usize) -> Room {
        let inner = self.lock();
        let mut closing = 0;
        let mut victims: Vec<(usize, Instant, &Arc<ConnState>)> = inner
            .conns
            .iter()
            .filter_map(|(_, (c, addr))| {
                let count = inner.per_address.get(addr).copied().unwrap_or(0);
                let may = match c.phase() {
                    Phase::Idle => count >= holds,
                    // Twice as many: flooding addresses of about the same size do not close each
                    // other's connections (their new ones are refused), a client holding few does.
                    Phase::Head => count >= holds.saturating_mul(2).max(holds + 1),
                    Phase::Busy | Phase::Flushing => false,
                };
                if may && c.signals() & (EVICT | ABORT) != 0 {
                    closing += 1;
                    return None;
                }
                may.then(|| (count, c.since(), c))
            })
            .collect();
        let order = |a: &(usize, Instant, &Arc<ConnState>), b: &(usize, Instant, &Arc<ConnState>)| {
            b.0.cmp(&a.0).then(a.1.cmp(&b.1))
        };
        if victims.len() > n {
            victims.select_nth_unstable_by(n, order);
            victims.truncate(n);
        }
        for (_, _, c) in &victims {
            // Each closes cleanly when its task next reads: at once if nothing has arrived (an
            // idle connection, a bare one), else after answering the request whose bytes are
            // there (a client that sent its request the moment it connected gets its answer,
            // never the reset of a close with its request unread); a head trickling in is closed
            // when the bytes that came are read (`io`).
            c.signal(EVICT);
        }
        Room { closed: victims.len(), closing }
    }

    /// Connections held by `ip`'s address now (tests).
    #[cfg(test)]
    pub(crate) fn held_by(&self, ip: IpAddr) -> usize {
        self.lock().per_address.get(&AddrKey::of(ip)).copied().unwrap_or(0)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().conns.len()
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

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn making_room_takes_idle_and_head_pending_connections_of_the_biggest_address_first() {
        let r = Arc::new(Registry::default());
        let clock = Arc::new(Clock::new(D));
        let base = Instant::now();
        let (flood, user) = (ip("127.0.0.2"), ip("127.0.0.1"));
        let mut keep = Vec::new();
        let mut open = |from: IpAddr| {
            let c = Arc::new(ConnState::new(Arc::clone(&clock)));
            let slot = r.reserve(from, 100).unwrap();
            keep.push((r.insert(Arc::clone(&c), slot.key()), slot));
            c
        };
        // The user: a busy connection and the longest-idle one of all.
        let (user_busy, user_idle) = (open(user), open(user));
        user_busy.busy();
        answered_at(&user_idle, base);
        // The flood: three waiting for a head, one idle, one busy.
        let flood_heads: Vec<_> = (0..3).map(|_| open(flood)).collect();
        let flood_idle = open(flood);
        answered_at(&flood_idle, base + Duration::from_secs(5));
        open(flood).busy();
        assert_eq!(r.make_room(4, 5).closed, 1, "a newcomer of the flood takes only the flood's idle one");
        assert!(flood_idle.signals() & (EVICT | ABORT) == EVICT, "idle: drained");
        let room = r.make_room(4, 3);
        assert_eq!(room.closed, 0, "a newcomer holding more than half the flood's takes none of it");
        assert_eq!(room.closing, 1, "but the flood's idle one is closing: its place is coming");
        assert_eq!(r.make_room(3, 2), Room { closed: 3, closing: 1 }, "a newcomer of the user's: the flood's first");
        assert!(flood_heads.iter().all(|c| c.signals() & (EVICT | ABORT) == EVICT), "head-pending: asked to close");
        assert_eq!(user_idle.signals() | user_busy.signals(), 0, "the user loses nothing");
        assert_eq!(r.make_room(4, 0).closed, 1, "then the user's idle one, never a busy one");
        assert!(user_idle.draining());
        drop(keep);
        assert_eq!((r.len(), r.held_by(flood), r.held_by(user)), (0, 0, 0));
    }

    #[test]
    fn the_per_address_cap_counts_ipv4_and_ipv6_slash_64s() {
        let r = Arc::new(Registry::default());
        let a = r.reserve(ip("10.0.0.1"), 2).unwrap();
        let _b = r.reserve(ip("::ffff:10.0.0.1"), 2).expect("an IPv4-mapped address is the IPv4 one");
        assert!(r.reserve(ip("10.0.0.1"), 2).is_none());
        assert!(r.reserve(ip("10.0.0.2"), 2).is_some(), "another address has its own");
        drop(a);
        assert!(r.reserve(ip("10.0.0.1"), 2).is_some(), "a place comes back when a connection closes");
        let _v6 = r.reserve(ip("2001:db8:0:1::1"), 1).unwrap();
        assert!(r.reserve(ip("2001:db8:0:1:ffff::9"), 1).is_none(), "the same /64");
        assert!(r.reserve(ip("2001:db8:0:2::1"), 1).is_some(), "another /64");
    }

    #[test]
    fn the_sweep_signals_exactly_the_connections_past_a_deadline() {
        let r = Arc::new(Registry::default());
        let clock = Arc::new(Clock::new(D));
        let t0 = Instant::now();
        let mk = || Arc::new(ConnState::new(Arc::clone(&clock)));
        let (head, busy, idle) = (mk(), mk(), mk());
        let key = AddrKey::of(IpAddr::from([127, 0, 0, 1]));
        let _entries: Vec<Entry> = [&head, &busy, &idle].iter().map(|c| r.insert(Arc::clone(c), key)).collect();
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
