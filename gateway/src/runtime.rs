//! Which data-plane core the current thread is, in the per-core runtime (`--runtime per-core`):
//! each core's thread sets its index at start; every other thread (the control plane's, a test's,
//! any thread of the shared runtime) is none. Read where state must stay with the runtime that
//! made it: an upstream connection is registered with its runtime's reactor (`upstream`'s idle
//! stack per core), and where a request should write only what its own core writes ([`Slots`]:
//! a worker's outstanding count, latency estimate and merge queue; admission's shares).

use std::cell::Cell;

use crossbeam_utils::CachePadded;

thread_local! {
    static CORE: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Marks this thread as data-plane core `index` for as long as it lives.
pub(crate) fn set_core(index: usize) {
    CORE.with(|c| c.set(index));
}

/// This thread's core index; `usize::MAX` on any thread that is not a data-plane core.
pub(crate) fn core() -> usize {
    CORE.with(Cell::get)
}

/// One `T` per data-plane core and one for every other thread, each on cache lines of its own,
/// so that a request on one core writes no line that another core's requests write. One slot in
/// all under the shared runtime (`Config::core_slots`): its threads share it, as before.
pub(crate) struct Slots<T> {
    slots: Box<[CachePadded<T>]>,
}

impl<T> Slots<T> {
    /// `n` slots (at least one), each made by `make`.
    pub(crate) fn new(n: usize, mut make: impl FnMut() -> T) -> Self {
        Self { slots: (0..n.max(1)).map(|_| CachePadded::new(make())).collect() }
    }

    /// The calling thread's slot index: its core's in the per-core runtime, the last for any
    /// other thread; the only one when there is one.
    pub(crate) fn mine(&self) -> usize {
        let last = self.slots.len() - 1;
        if last == 0 { 0 } else { core().min(last) }
    }

    /// The calling thread's slot.
    pub(crate) fn local(&self) -> &T {
        &self.slots[self.mine()]
    }

    /// Slot `i` (an index [`Slots::mine`] gave; a thread that moved on may hand it back to
    /// another).
    pub(crate) fn at(&self, i: usize) -> &T {
        &self.slots[i.min(self.slots.len() - 1)]
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map(|s| &**s)
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_no_core_until_it_says_so() {
        std::thread::spawn(|| {
            assert_eq!(core(), usize::MAX);
            set_core(3);
            assert_eq!(core(), 3);
        })
        .join()
        .unwrap();
        assert_eq!(core(), usize::MAX, "another thread's index is its own");
    }

    #[test]
    fn a_core_finds_its_own_slot_and_every_other_thread_the_last() {
        let slots = Slots::new(3, || 0u8);
        assert_eq!(slots.mine(), 2, "no core: the last");
        std::thread::spawn(move || {
            set_core(1);
            assert_eq!(slots.mine(), 1);
            set_core(7);
            assert_eq!(slots.mine(), 2, "a core past the slots takes the last");
            assert_eq!(Slots::new(1, || 0u8).mine(), 0, "one slot: everyone's");
        })
        .join()
        .unwrap();
    }
}
