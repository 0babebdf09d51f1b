//! Connection threads: a thread per core, each running its own single-threaded tokio runtime,
//! that client connections are handed to once accepted ([`Server::connection_threads`]).
//!
//! On tokio's work-stealing runtime a connection's task moves between threads: it is woken by
//! another thread (the backend's, when an answer is ready) through the runtime's shared injection
//! queue, which every worker thread polls under one lock, and idle threads steal from busy ones.
//! Here a connection stays on the thread it was given: its wake-ups go to that thread's own
//! queue, its socket to that thread's own epoll, its timers to that thread's own wheel. This is
//! how nginx's and envoy's workers hold connections, and actix-web's and monoio's runtimes.
//!
//! The accept loop still runs where [`Server::serve`] runs, with the cap, evictions and drain
//! unchanged; only the accepted connection's task moves (its socket deregistered from the
//! accepting runtime and registered with the connection thread's). Each connection goes to the
//! thread holding the fewest open connections.
//!
//! [`Server::connection_threads`]: crate::Server::connection_threads
//! [`Server::serve`]: crate::Server::serve

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// How long a connection thread's runtime waits for its blocking tasks when it is shut down.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

/// The connection threads. Dropping them stops each runtime (tasks still on it are dropped) and
/// joins its thread.
#[derive(Debug)]
pub struct ConnectionThreads {
    threads: Vec<Thread>,
}

#[derive(Debug)]
struct Thread {
    handle: Handle,
    /// Connections handed to this thread and not yet ended.
    open: Arc<CachePadded<AtomicUsize>>,
    stop: Option<oneshot::Sender<()>>,
    join: Option<JoinHandle<()>>,
}

impl ConnectionThreads {
    /// Starts `n` threads (at least one), named `{name}-0`, `{name}-1`, ..., each with a
    /// current-thread runtime with I/O and timers.
    pub fn start(n: usize, name: &str) -> io::Result<Self> {
        let mut threads = Vec::with_capacity(n.max(1));
        for i in 0..n.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let handle = runtime.handle().clone();
            let (stop, stopped) = oneshot::channel::<()>();
            let join = std::thread::Builder::new().name(format!("{name}-{i}")).spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
                runtime.shutdown_timeout(SHUTDOWN_WAIT);
            })?;
            threads.push(Thread {
                handle,
                open: Arc::new(CachePadded::new(AtomicUsize::new(0))),
                stop: Some(stop),
                join: Some(join),
            });
        }
        Ok(Self { threads })
    }

    /// How many threads there are.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    /// Never: [`ConnectionThreads::start`] makes at least one.
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Connections each thread holds now, in thread order.
    pub fn open(&self) -> Vec<usize> {
        self.threads.iter().map(|t| t.open.load(Ordering::Relaxed)).collect()
    }

    /// Runs `task` on the thread holding the fewest connections, counted as one of its
    /// connections until `task` ends or is dropped. `task` is first polled on that thread,
    /// inside its runtime (where a socket it holds must be registered).
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let least = self.threads.iter().min_by_key(|t| t.open.load(Ordering::Relaxed)).expect("at least one thread");
        least.open.fetch_add(1, Ordering::Relaxed);
        let held = Held(Arc::clone(&least.open));
        least.handle.spawn(async move {
            let _held = held;
            task.await;
        });
    }
}

impl Drop for ConnectionThreads {
    fn drop(&mut self) {
        for t in &mut self.threads {
            if let Some(stop) = t.stop.take() {
                let _ = stop.send(());
            }
        }
        for t in &mut self.threads {
            if let Some(join) = t.join.take() {
                let _ = join.join();
            }
        }
    }
}

/// One connection counted on its thread while held.
struct Held(Arc<CachePadded<AtomicUsize>>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
