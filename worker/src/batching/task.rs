//! The thin async loop around [`State`]: receives tokenized queries, hands ready batches to the
//! backend through a channel of one slot (at most one batch prefetched).
//!
//! The slot is reserved *before* a batch is formed, and while every backend session is busy only
//! a full batch is cut: a batch is cut as late as possible, with every query that arrived while
//! the sessions were busy. When a session finishes it says so ([`BackendLoad`]) and the waiting
//! queries leave at once.
//!
//! The loop also answers queries whose deadline has passed ([`Pending::time_out`]), in its queue
//! and in the batches it handed over and the backend has not finished ([`Handed`]): one timer, at
//! the earliest deadline it knows, instead of one per request.

use std::collections::VecDeque;
use std::pin::{Pin, pin};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep, sleep_until};

use super::{BackendLoad, Handed, Limits, Pending, State};

/// Runs until the sender side of `rx` is dropped and the queue is flushed, or the backend is gone.
/// `cancelled(n)` is told of queries dropped because their client had gone.
pub async fn run<T: Pending + Send>(
    limits: Limits,
    mut rx: mpsc::Receiver<T>,
    tx: mpsc::Sender<Arc<Handed<T>>>,
    backend: Arc<BackendLoad>,
    cancelled: impl Fn(u64) + Send,
) {
    let mut state = State::new(limits);
    // Queries dropped in the queue because their client had gone, reported as they are met.
    let mut reported = 0;
    let mut report = |state: &State<T>| {
        let new = state.cancelled_total() - reported;
        if new > 0 {
            cancelled(new);
        }
        reported = state.cancelled_total();
    };
    // Batches handed over, until the backend has answered them (it drops its handle then).
    let mut handed: VecDeque<Arc<Handed<T>>> = VecDeque::new();
    // No later than the earliest deadline of a query in the queue or in `handed` (`None`: none
    // has one). Under load it is older than that: the queries it was set for have left, and
    // when it comes every deadline is looked at and it moves on, once per request timeout.
    let mut expiry: Option<Instant> = None;
    let push = |state: &mut State<T>, expiry: &mut Option<Instant>, item: T, now: Instant| {
        if let Some(d) = item.deadline() {
            *expiry = Some(expiry.map_or(d, |e| e.min(d)));
        }
        state.push(item, now);
    };
    let expire = |state: &mut State<T>, handed: &mut VecDeque<Arc<Handed<T>>>| {
        let now = Instant::now();
        handed.retain(|h| Arc::strong_count(h) > 1);
        let next = handed.iter().filter_map(|h| h.expire(now)).min();
        [next, state.expire(now)].into_iter().flatten().min()
    };
    // The delay's timer, the deadlines' timer and the wait for a session, kept from one turn of
    // the loop to the next: under load the loop turns for nearly every query, and a timer or a
    // wait made afresh at each turn is registered and unregistered each time (a lock apiece).
    // A timer that has fired stays fired until reset, so one left at an unchanged deadline is
    // ready at once when polled again.
    let mut delay = pin!(sleep_until(Instant::now()));
    let mut timeouts = pin!(sleep_until(Instant::now()));
    let mut session_freed = pin!(backend.on_finish());
    'outer: loop {
        let permit = loop {
            arm(timeouts.as_mut(), expiry);
            tokio::select! {
                biased;
                permit = tx.reserve() => match permit {
                    Ok(p) => break p,
                    Err(_) => return,
                },
                item = rx.recv() => match item {
                    Some(item) => push(&mut state, &mut expiry, item, Instant::now()),
                    None => break 'outer,
                },
                () = &mut timeouts, if expiry.is_some() => expiry = expire(&mut state, &mut handed),
            }
        };
        let batch = loop {
            // One clock reading for the queries already waiting and the decision.
            let now = Instant::now();
            while let Ok(item) = rx.try_recv() {
                push(&mut state, &mut expiry, item, now);
            }
            let free = backend.has_room();
            let batch = state.next_batch(now, free);
            report(&state);
            if let Some(batch) = batch {
                break batch;
            }
            let deadline = state.next_deadline().filter(|_| free);
            if let Some(d) = deadline.filter(|&d| d != delay.deadline()) {
                delay.as_mut().reset(d);
            }
            arm(timeouts.as_mut(), expiry);
            tokio::select! {
                item = rx.recv() => match item {
                    Some(item) => push(&mut state, &mut expiry, item, Instant::now()),
                    None => break 'outer,
                },
                () = &mut delay, if deadline.is_some() => {}
                () = &mut session_freed, if !free => session_freed.set(backend.on_finish()),
                () = &mut timeouts, if expiry.is_some() => expiry = expire(&mut state, &mut handed),
            }
        };
        let batch = Arc::new(Handed::new(batch));
        handed.retain(|h| Arc::strong_count(h) > 1);
        handed.push_back(batch.clone());
        backend.handed();
        permit.send(batch);
    }
    // No more producers (so no request waits for an answer): run what is queued without waiting
    // for companions.
    while let Some(batch) = state.take_batch() {
        report(&state);
        backend.handed();
        if tx.send(Arc::new(Handed::new(batch))).await.is_err() {
            break;
        }
    }
    report(&state);
}

/// Sets `timer` to `at`, unless it is already waiting for that instant. A timer that has fired
/// is reset even to its own deadline: it stays ready until reset, and the loop must not spin on
/// it.
fn arm(timer: Pin<&mut Sleep>, at: Option<Instant>) {
    if let Some(d) = at.filter(|&d| d != timer.deadline() || timer.is_elapsed()) {
        timer.reset(d);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::*;

    fn ignore(_: u64) {}

    #[derive(Debug)]
    struct Q(usize);
    impl Pending for Q {
        fn tokens(&self) -> usize {
            self.0
        }
        fn is_cancelled(&self) -> bool {
            false
        }
    }

    fn limits(max_rows: usize, delay_ms: u64) -> Limits {
        Limits { max_rows, max_tokens: 10_000, max_delay: Duration::from_millis(delay_ms), min_fill: 0.0 }
    }

    fn idle() -> Arc<BackendLoad> {
        Arc::default()
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_query_runs_at_once() {
        let (in_tx, in_rx) = mpsc::channel(16);
        let (out_tx, mut out_rx) = mpsc::channel(1);
        tokio::spawn(run(limits(8, 10), in_rx, out_tx, idle(), ignore));
        let t0 = Instant::now();
        in_tx.send(Q(3)).await.unwrap();
        let batch = out_rx.recv().await.unwrap();
        assert_eq!(batch.len(), 1);
        assert_eq!(Instant::now(), t0, "no companion expected: no wait for the 10 ms delay");
    }

    #[tokio::test(start_paused = true)]
    async fn under_steady_arrivals_a_query_waits_the_delay_for_companions() {
        let (in_tx, in_rx) = mpsc::channel(16);
        let (out_tx, mut out_rx) = mpsc::channel(1);
        let backend = idle();
        tokio::spawn(run(limits(64, 10), in_rx, out_tx, backend.clone(), ignore));
        // Queries 1 ms apart; each batch is finished by the backend 1 ms after it is cut.
        let feeder = tokio::spawn(async move {
            for _ in 0..40 {
                in_tx.send(Q(3)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            in_tx
        });
        let mut sizes = Vec::new();
        while let Some(batch) = out_rx.recv().await {
            sizes.push(batch.len());
            tokio::time::sleep(Duration::from_millis(1)).await;
            backend.finished();
            if sizes.iter().sum::<usize>() == 40 {
                break;
            }
        }
        drop(feeder.await.unwrap());
        assert_eq!(sizes[0], 1, "the first query has no history: at once");
        assert!(sizes.len() >= 3, "{sizes:?}");
        let middle = &sizes[1..sizes.len() - 1];
        assert!(middle.iter().all(|&n| n >= 8), "then batches of about the delay's worth: {sizes:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_does_not_wait() {
        let (in_tx, in_rx) = mpsc::channel(16);
        let (out_tx, mut out_rx) = mpsc::channel(1);
        tokio::spawn(run(limits(4, 1000), in_rx, out_tx, idle(), ignore));
        let t0 = Instant::now();
        for _ in 0..4 {
            in_tx.send(Q(3)).await.unwrap();
        }
        let batch = out_rx.recv().await.unwrap();
        assert_eq!(batch.len(), 4);
        assert_eq!(Instant::now(), t0);
    }

    #[tokio::test(start_paused = true)]
    async fn queries_arriving_while_the_backend_is_busy_leave_together_when_it_finishes() {
        let (in_tx, in_rx) = mpsc::channel(64);
        let (out_tx, mut out_rx) = mpsc::channel(1);
        let backend = idle();
        tokio::spawn(run(limits(32, 1), in_rx, out_tx, backend.clone(), ignore));
        in_tx.send(Q(3)).await.unwrap();
        // The backend takes the first batch and works on it for 50 ms.
        assert_eq!(out_rx.recv().await.unwrap().len(), 1);
        for _ in 0..10 {
            in_tx.send(Q(3)).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Past their 1 ms delay, but the backend is busy: nothing is cut yet.
        assert!(out_rx.try_recv().is_err());
        let finished_at = Instant::now();
        backend.finished();
        let batch = out_rx.recv().await.unwrap();
        assert_eq!(batch.len(), 10, "all ten leave together");
        assert_eq!(Instant::now(), finished_at, "at once when the backend is free");
    }

    #[tokio::test(start_paused = true)]
    async fn with_two_sessions_a_partial_batch_leaves_while_one_is_busy() {
        let (in_tx, in_rx) = mpsc::channel(64);
        let (out_tx, mut out_rx) = mpsc::channel(1);
        let backend = Arc::new(BackendLoad::new(2));
        tokio::spawn(run(limits(32, 1), in_rx, out_tx, backend.clone(), ignore));
        in_tx.send(Q(3)).await.unwrap();
        assert_eq!(out_rx.recv().await.unwrap().len(), 1);
        for _ in 0..3 {
            in_tx.send(Q(3)).await.unwrap();
        }
        let t0 = Instant::now();
        // One session is busy, the other free: the three leave without waiting for the first.
        let batch = tokio::time::timeout(Duration::from_millis(10), out_rx.recv()).await;
        assert_eq!(batch.expect("a batch while a session is free").unwrap().len(), 3);
        assert!(Instant::now() - t0 <= Duration::from_millis(1));
        // Both busy: only a full batch would leave.
        for _ in 0..5 {
            in_tx.send(Q(3)).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(out_rx.try_recv().is_err());
        let finished_at = Instant::now();
        backend.finished();
        assert_eq!(out_rx.recv().await.unwrap().len(), 5);
        assert_eq!(Instant::now(), finished_at, "at once when a session is free");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_is_prefetched_while_the_backend_is_busy() {
        let (in_tx, in_rx) = mpsc::channel(64);
        let (out_tx, mut out_rx) = mpsc::channel(1);
        tokio::spawn(run(limits(4, 1), in_rx, out_tx, idle(), ignore));
        in_tx.send(Q(3)).await.unwrap();
        assert_eq!(out_rx.recv().await.unwrap().len(), 1);
        for _ in 0..4 {
            in_tx.send(Q(3)).await.unwrap();
        }
        // Busy backend (never finished), yet four queries make a full batch.
        assert_eq!(out_rx.recv().await.unwrap().len(), 4);
    }

    #[derive(Debug)]
    struct Gone(tokio::sync::oneshot::Sender<()>);
    impl Pending for Gone {
        fn tokens(&self) -> usize {
            3
        }
        fn is_cancelled(&self) -> bool {
            self.0.is_closed()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn queries_whose_client_has_gone_are_counted_not_sent() {
        let (in_tx, in_rx) = mpsc::channel(16);
        let (out_tx, mut out_rx) = mpsc::channel(1);
        let cancelled = Arc::new(AtomicU64::new(0));
        let counted = cancelled.clone();
        tokio::spawn(run(limits(8, 10), in_rx, out_tx, idle(), move |n| {
            counted.fetch_add(n, Ordering::SeqCst);
        }));
        let (gone, client) = tokio::sync::oneshot::channel();
        drop(client);
        let (kept, _client) = tokio::sync::oneshot::channel();
        in_tx.send(Gone(gone)).await.unwrap();
        in_tx.send(Gone(kept)).await.unwrap();
        let batch = out_rx.recv().await.unwrap();
        assert_eq!(batch.len(), 1);
        assert_eq!(cancelled.load(Ordering::SeqCst), 1);
    }

    /// A query with a deadline, telling when it was timed out.
    #[derive(Debug)]
    struct D {
        deadline: Instant,
        timed_out: tokio::sync::oneshot::Sender<Instant>,
    }
    impl Pending for D {
        fn tokens(&self) -> usize {
            3
        }
        fn is_cancelled(&self) -> bool {
            false
        }
        fn deadline(&self) -> Option<Instant> {
            Some(self.deadline)
        }
        fn time_out(self) {
            let _ = self.timed_out.send(Instant::now());
        }
    }

    /// When `out` says its query was timed out (within a minute of paused time, or the test fails).
    async fn timed_out_at(out: tokio::sync::oneshot::Receiver<Instant>) -> Instant {
        tokio::time::timeout(Duration::from_secs(60), out).await.expect("timed out within a minute").unwrap()
    }

    fn due_in(ms: u64) -> (D, tokio::sync::oneshot::Receiver<Instant>) {
        let (timed_out, rx) = tokio::sync::oneshot::channel();
        (D { deadline: Instant::now() + Duration::from_millis(ms), timed_out }, rx)
    }

    #[tokio::test(start_paused = true)]
    async fn queries_are_timed_out_at_their_deadline_in_the_queue_and_in_a_running_batch() {
        let (in_tx, in_rx) = mpsc::channel(16);
        let (out_tx, mut out_rx) = mpsc::channel(1);
        let backend = idle();
        tokio::spawn(run(limits(8, 1), in_rx, out_tx, backend.clone(), ignore));
        let t0 = Instant::now();
        let (first, first_out) = due_in(100);
        in_tx.send(first).await.unwrap();
        // The backend takes it and hangs: never finished.
        let running = out_rx.recv().await.unwrap();
        assert_eq!(running.len(), 1);
        let (second, second_out) = due_in(50);
        let (third, mut third_out) = due_in(10_000);
        in_tx.send(second).await.unwrap();
        in_tx.send(third).await.unwrap();
        assert_eq!(timed_out_at(second_out).await, t0 + Duration::from_millis(50), "in the queue, at its deadline");
        assert_eq!(
            timed_out_at(first_out).await,
            t0 + Duration::from_millis(100),
            "in the running batch, at its deadline"
        );
        assert!(running.is_empty(), "its row is emptied");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(third_out.try_recv().is_err(), "a query before its deadline is left alone");
        backend.finished();
        assert_eq!(out_rx.recv().await.unwrap().len(), 1, "and runs once a session is free");
    }

    #[tokio::test(start_paused = true)]
    async fn queries_are_timed_out_at_their_deadline_in_the_prefetched_batch() {
        let (in_tx, in_rx) = mpsc::channel(16);
        let (out_tx, mut out_rx) = mpsc::channel(1);
        tokio::spawn(run(limits(2, 1), in_rx, out_tx, idle(), ignore));
        let t0 = Instant::now();
        let (first, _first_out) = due_in(10_000);
        in_tx.send(first).await.unwrap();
        let _running = out_rx.recv().await.unwrap();
        // A full batch, cut into the channel's slot while the one session is busy, never taken.
        let (a, a_out) = due_in(30);
        let (b, b_out) = due_in(40);
        in_tx.send(a).await.unwrap();
        in_tx.send(b).await.unwrap();
        assert_eq!(timed_out_at(a_out).await, t0 + Duration::from_millis(30));
        assert_eq!(timed_out_at(b_out).await, t0 + Duration::from_millis(40));
        assert!(out_rx.recv().await.unwrap().is_empty(), "the backend finds nothing left to run");
    }

    #[tokio::test(start_paused = true)]
    async fn closing_the_input_flushes_the_queue_at_once() {
        let (in_tx, in_rx) = mpsc::channel(16);
        let (out_tx, mut out_rx) = mpsc::channel(1);
        let task = tokio::spawn(run(limits(8, 60_000), in_rx, out_tx, idle(), ignore));
        in_tx.send(Q(3)).await.unwrap();
        in_tx.send(Q(4)).await.unwrap();
        drop(in_tx);
        let t0 = Instant::now();
        assert_eq!(out_rx.recv().await.unwrap().len(), 2);
        assert_eq!(Instant::now(), t0, "no waiting for the 60 s delay");
        task.await.unwrap();
    }
}
