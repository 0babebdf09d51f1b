//! Which data-plane core the current thread is, in the per-core runtime (`--runtime per-core`):
//! each core's thread sets its index at start; every other thread (the control plane's, a test's,
//! any thread of the shared runtime) is none. Read where state must stay with the runtime that
//! made it: an upstream connection is registered with its runtime's reactor (`upstream`'s idle
//! stack per core).

use std::cell::Cell;

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
}
