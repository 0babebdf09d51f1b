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
//! The price: one connection's calls are bound by one thread. A few very busy connections (one
//! or two clients sending tens of thousands of calls a second) are served faster with a task a
//! call, spread over the runtime's threads, at more CPU a call: `--grpc-call-tasks`
//! ([`Exec::Tasks`]; `benches/RESULTS.md` has both, measured).

use std::future::{Future, poll_fn};
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;

use futures::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::task::AtomicWaker;

type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Calls started since the connection's task last took them, and that task's waker.
#[derive(Default)]
pub(super) struct Started {
    calls: Mutex<Vec<Call>>,
    task: AtomicWaker,
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
        let mut conn = pin!(conn);
        let mut calls = FuturesUnordered::new();
        poll_fn(|cx| {
            started.task.register(cx.waker());
            let polled = conn.as_mut().poll(cx);
            let new = std::mem::take(&mut *started.calls.lock().unwrap_or_else(PoisonError::into_inner));
            if polled.is_ready() {
                calls.clear();
                return polled;
            }
            calls.extend(new);
            // Until none is ready (`FuturesUnordered` yields by itself after a round of all).
            while let Poll::Ready(Some(())) = calls.poll_next_unpin(cx) {}
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
}
