//! The streams of one HTTP/2 connection run inside the connection's own task. hyper's HTTP/2
//! server hands each stream (a call: its service future and the sending of its answer) to an
//! executor; with tokio's, every call is a task of its own, spawned, scheduled and freed, and on
//! a multi-threaded runtime it may run on another thread than its connection. There every frame
//! it sends and every one the connection takes for it crosses threads: h2 keeps a connection's
//! streams under one lock, and each side wakes the other's task.
//!
//! [`Exec`] keeps a connection's calls in the connection's task instead: [`Exec::run`] polls the
//! connection, then the calls it started that are ready to go on. A connection's calls share its
//! thread (as its frames already did); the runtime spreads connections, not calls, over its
//! threads. A call still running when its connection ends is dropped with it: its client is
//! gone, as when a request's client goes away (its admission freed, a merge it waits for goes
//! without it).
//!
//! On a runtime of one thread, new calls are started one a turn: the exchange a call spawns for
//! the worker then goes out before the next call is read, and the worker works while the
//! gateway reads the rest of a burst, not after it; and a turn polls the connection only when
//! the connection asked to be polled (its own waker: frames came, an answer is to be written, a
//! timer), not on every turn a call takes (see [`Exec::run`]).
//!
//! The price: one connection's calls are bound by one thread. A few very busy connections (one
//! or two clients sending as fast as they can) are served faster with a task a call, spread over
//! the runtime's threads, at more CPU a call: `--grpc-call-tasks` ([`Exec::Tasks`];
//! `benches/RESULTS.md`, "Open Inference Protocol through the gateway", compares the two).

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use futures::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::task::{ArcWake, AtomicWaker};

type CallFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Calls started since the connection's task last took them, that task's waker, and whether the
/// connection asked to be polled: `Arc<Started>` is the connection's own waker on a runtime of
/// one thread ([`Exec::run`]).
pub(super) struct Started {
    calls: Mutex<Vec<CallFuture>>,
    task: AtomicWaker,
    conn_woken: AtomicBool,
}

impl Default for Started {
    fn default() -> Self {
        // The connection is polled on the first turn.
        Self { calls: Mutex::default(), task: AtomicWaker::new(), conn_woken: AtomicBool::new(true) }
    }
}

impl ArcWake for Started {
    fn wake_by_ref(this: &Arc<Self>) {
        this.conn_woken.store(true, Ordering::Release);
        this.task.wake();
    }
}

/// hyper's executor for one connection's calls (make one per connection).
#[derive(Clone)]
pub(super) enum Exec {
    /// The calls run in the connection's task ([`Exec::run`]).
    Local(Arc<Started>),
    /// Each call is a tokio task of its own (`--grpc-call-tasks`).
    Tasks,
}

impl<F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F> for Exec {
    fn execute(&self, call: F) {
        match self {
            Exec::Local(started) => {
                // A panic the call's own guard did not catch (in hyper's part of it) ends that
                // call alone, as it would end a task of its own: not the connection's task.
                let call = AssertUnwindSafe(call).catch_unwind().map(drop);
                started.calls.lock().unwrap_or_else(PoisonError::into_inner).push(Box::pin(call));
                started.task.wake();
            }
            Exec::Tasks => {
                tokio::spawn(call);
            }
        }
    }
}

impl Exec {
    /// A connection's executor: its calls in its task, or each in a task of its own.
    pub(super) fn new(call_tasks: bool) -> Self {
        if call_tasks { Exec::Tasks } else { Exec::Local(Arc::default()) }
    }

    /// Drives `conn` (a connection served with this executor) and, for [`Exec::Local`], the
    /// calls it starts, until `conn` ends; those still running then are dropped.
    pub(super) async fn run<C: Future>(&self, conn: C) -> C::Output {
        let started = match self {
            Exec::Local(started) => started,
            Exec::Tasks => return conn.await,
        };
        // New calls started a turn of the task: one on a runtime of one thread, where nothing
        // else runs until this task yields. A call's first poll does its whole work up to the
        // worker (read, admitted, balanced, its exchange spawned); taken all at once, the calls
        // of one read keep the worker idle until the last is through, and their answers come
        // back as one burst too (`benches/RESULTS.md`, "Open Inference Protocol through the
        // gateway", has the comparison). On a multi-threaded runtime other threads take the
        // spawned exchanges as they come, and a turn a call would cost CPU for nothing.
        let one_thread = matches!(
            tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()),
            Ok(tokio::runtime::RuntimeFlavor::CurrentThread)
        );
        // On one thread the connection is polled when it asked to be (its own waker), not on
        // each of the turns its calls take. A multi-threaded runtime polls it every turn, with
        // the task's waker: there the connection's own waker saved nothing on a GPU host
        // (`benches/RESULTS.md`, "Open Inference Protocol through the gateway").
        let conn_waker = futures::task::waker(Arc::clone(started));
        let mut conn = pin!(conn);
        let mut calls = FuturesUnordered::new();
        let mut queued = VecDeque::new();
        poll_fn(|cx| {
            started.task.register(cx.waker());
            let polled = if !one_thread {
                conn.as_mut().poll(cx)
            } else if started.conn_woken.swap(false, Ordering::AcqRel) {
                conn.as_mut().poll(&mut Context::from_waker(&conn_waker))
            } else {
                Poll::Pending
            };
            // Taken before the end is seen: a call left in `started` would hold the connection's
            // state, which holds its waker, `started`.
            let new = std::mem::take(&mut *started.calls.lock().unwrap_or_else(PoisonError::into_inner));
            if polled.is_ready() {
                calls.clear();
                queued.clear();
                return polled;
            }
            if one_thread {
                queued.extend(new);
                calls.extend(queued.pop_front());
            } else {
                calls.extend(new);
            }
            // Until none is ready (`FuturesUnordered` yields by itself after a round of all).
            while let Poll::Ready(Some(())) = calls.poll_next_unpin(cx) {}
            if !queued.is_empty() {
                // The next one next turn, after the tasks this one woke.
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use hyper::rt::Executor;
    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn calls_run_in_the_connections_task_until_it_ends() {
        let exec = Exec::new(false);
        let done = Arc::new(AtomicUsize::new(0));
        let (end_tx, end_rx) = oneshot::channel::<()>();
        let (go_tx, go_rx) = oneshot::channel::<()>();
        let (first_tx, first_rx) = oneshot::channel::<()>();
        let conn = {
            let (exec, done) = (exec.clone(), Arc::clone(&done));
            async move {
                // A call started before the connection waits, one after: both run.
                let d = Arc::clone(&done);
                exec.execute(async move {
                    go_rx.await.unwrap();
                    d.fetch_add(1, Ordering::SeqCst);
                    first_tx.send(()).unwrap();
                });
                tokio::task::yield_now().await;
                let d = Arc::clone(&done);
                exec.execute(async move {
                    d.fetch_add(10, Ordering::SeqCst);
                });
                end_rx.await.unwrap();
                "ended"
            }
        };
        let mut run = pin!(exec.run(conn));
        // Nothing can finish until the first call is let go.
        assert!(futures::poll!(run.as_mut()).is_pending());
        tokio::task::yield_now().await;
        assert!(futures::poll!(run.as_mut()).is_pending());
        assert_eq!(done.load(Ordering::SeqCst), 10, "the second call ran in the connection's task");
        go_tx.send(()).unwrap();
        assert!(futures::poll!(run.as_mut()).is_pending());
        first_rx.await.unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 11);
        // A call still running when the connection ends is dropped, not left behind.
        let (held_tx, held_rx) = oneshot::channel::<()>();
        exec.execute(async move {
            let _held = held_tx;
            std::future::pending::<()>().await;
        });
        assert!(futures::poll!(run.as_mut()).is_pending());
        end_tx.send(()).unwrap();
        assert_eq!(run.await, "ended");
        assert!(held_rx.await.is_err(), "the call running at the end was dropped");
    }

    #[tokio::test]
    async fn with_call_tasks_each_call_is_a_task_that_outlives_its_connection() {
        let exec = Exec::new(true);
        let (tx, rx) = oneshot::channel::<()>();
        exec.execute(async move {
            tx.send(()).unwrap();
        });
        // The connection ends at once; its call, a task of its own, still runs.
        assert_eq!(exec.run(async { "ended" }).await, "ended");
        rx.await.expect("the call ran on its own task");
    }

    #[tokio::test]
    async fn a_call_that_panics_ends_alone_not_its_connection() {
        let exec = Exec::new(false);
        let (end_tx, end_rx) = oneshot::channel::<()>();
        let (ran_tx, ran_rx) = oneshot::channel::<()>();
        let mut run = pin!(exec.run(async move {
            end_rx.await.unwrap();
            "ended"
        }));
        exec.execute(async {
            let none: Vec<u8> = Vec::new();
            let _ = none[1];
        });
        exec.execute(async move {
            tokio::task::yield_now().await;
            ran_tx.send(()).unwrap();
        });
        assert!(futures::poll!(run.as_mut()).is_pending(), "the connection goes on");
        tokio::select! {
            _ = run.as_mut() => panic!("the connection ended"),
            r = ran_rx => r.expect("the other call ran"),
        }
        end_tx.send(()).unwrap();
        assert_eq!(run.await, "ended");
    }

    #[tokio::test]
    async fn on_one_thread_new_calls_start_one_a_turn_after_what_the_last_spawned() {
        let exec = Exec::new(false);
        let log = Arc::new(Mutex::new(Vec::new()));
        let (end_tx, end_rx) = oneshot::channel::<()>();
        let conn = {
            let (exec, log) = (exec.clone(), Arc::clone(&log));
            async move {
                // Three calls that come in one read, each spawning its exchange.
                for i in 0..3 {
                    let log = Arc::clone(&log);
                    exec.execute(async move {
                        log.lock().unwrap().push(format!("call {i}"));
                        let log = Arc::clone(&log);
                        tokio::spawn(async move { log.lock().unwrap().push(format!("exchange {i}")) });
                        std::future::pending::<()>().await;
                    });
                }
                end_rx.await.unwrap();
            }
        };
        let run = tokio::spawn(async move { exec.run(conn).await });
        while log.lock().unwrap().len() < 6 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            *log.lock().unwrap(),
            ["call 0", "exchange 0", "call 1", "exchange 1", "call 2", "exchange 2"],
            "each call's exchange went before the next call started"
        );
        end_tx.send(()).unwrap();
        run.await.unwrap();
    }

    #[tokio::test]
    async fn on_one_thread_the_connection_is_polled_when_it_asked_to_be_not_on_every_turn_of_a_call() {
        let exec = Exec::new(false);
        let polls = Arc::new(AtomicUsize::new(0));
        let waker = Arc::new(Mutex::new(None::<std::task::Waker>));
        let (turns, ended) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let conn = {
            let (exec, polls, waker, turns, ended) =
                (exec.clone(), Arc::clone(&polls), Arc::clone(&waker), Arc::clone(&turns), Arc::clone(&ended));
            poll_fn(move |cx| {
                if polls.fetch_add(1, Ordering::SeqCst) == 0 {
                    // A call that wakes its task five times before it ends.
                    let turns = Arc::clone(&turns);
                    exec.execute(poll_fn(move |cx| {
                        if turns.fetch_add(1, Ordering::SeqCst) == 5 {
                            return Poll::Ready(());
                        }
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }));
                }
                *waker.lock().unwrap() = Some(cx.waker().clone());
                if ended.load(Ordering::SeqCst) { Poll::Ready("ended") } else { Poll::Pending }
            })
        };
        let mut run = pin!(exec.run(conn));
        while turns.load(Ordering::SeqCst) < 6 {
            assert!(futures::poll!(run.as_mut()).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1, "the call's turns did not poll the connection");
        ended.store(true, Ordering::SeqCst);
        waker.lock().unwrap().take().unwrap().wake();
        assert_eq!(run.await, "ended", "woken, the connection was polled");
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }
}
