//! Running the load: one OS thread per `--threads`, each with its own single-threaded tokio
//! runtime and its share of the load (a share of the clients, or every T-th request of the
//! schedule), recording into its own [`Shard`]. The collector reads the shards from another
//! thread every interval.

mod closed;
mod open;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::client::ConnCounters;
use crate::profile::Profile;
use crate::stats::{PhaseId, Shard};
use crate::target::Target;

/// A closed-loop step: `clients` senders, each sending its next request when the last is answered.
#[derive(Debug, Clone)]
pub struct ClosedStep {
    pub clients: usize,
    /// Unmeasured time first.
    pub warmup: Duration,
    /// Measured time; `None`: until `requests` are done.
    pub duration: Option<Duration>,
    /// Stop after this many measured requests.
    pub requests: Option<u64>,
}

/// The shape of the load.
#[derive(Debug, Clone)]
pub enum Load {
    Closed(Vec<ClosedStep>),
    Open {
        /// The schedule from the start of the run (the warm-up included).
        profile: Arc<Profile>,
        /// The profile's first phase is the unmeasured warm-up.
        warmup_phase: bool,
        /// Most requests outstanding at once (connections for HTTP/1.1).
        max_in_flight: usize,
        /// Stop after this many requests.
        requests: Option<u64>,
    },
}

impl Load {
    /// Profile phase `i` as a measured phase id.
    pub fn open_phase(warmup_phase: bool, i: usize) -> PhaseId {
        match (warmup_phase, i) {
            (true, 0) => None,
            (true, i) => Some((i - 1) as u32),
            (false, i) => Some(i as u32),
        }
    }
}

/// Everything a run needs besides the target.
#[derive(Debug, Clone)]
pub struct Plan {
    pub load: Load,
    pub threads: usize,
    pub timeout: Duration,
    /// HTTP/2 connections per thread.
    pub h2_connections: usize,
}

/// A phase as it ran, in seconds from the start (closed loop: known only once run).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    pub phase: PhaseId,
    pub start: f64,
    pub end: f64,
}

/// What one load thread shares with the collector.
#[derive(Debug, Default)]
pub struct ThreadShared {
    pub shard: Mutex<Shard>,
    /// Requests sent so far.
    pub sent: AtomicU64,
    /// Open loop: requests that found every sender busy and waited for one.
    pub waited: AtomicU64,
    pub counters: Arc<ConnCounters>,
}

/// State shared by the load threads and the collector.
#[derive(Debug)]
pub struct Shared {
    pub start: Instant,
    stop: AtomicBool,
    stop_notify: Notify,
    pub threads: Vec<ThreadShared>,
    pub spans: Mutex<Vec<Span>>,
}

impl Shared {
    pub fn new(threads: usize, start: Instant) -> Arc<Self> {
        Arc::new(Self {
            start,
            stop: AtomicBool::new(false),
            stop_notify: Notify::new(),
            threads: (0..threads).map(|_| ThreadShared::default()).collect(),
            spans: Mutex::new(Vec::new()),
        })
    }

    /// Ask every thread to stop sending (Ctrl-C); what is in flight is still awaited.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.stop_notify.notify_waiters();
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub fn seconds(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.start).as_secs_f64()
    }

    fn record_span(&self, span: Span) {
        self.spans.lock().unwrap_or_else(|e| e.into_inner()).push(span);
    }

    /// Sleep until `t`, or until stopped: whether it was not stopped.
    async fn sleep_until(&self, t: Instant) -> bool {
        let notified = self.stop_notify.notified();
        if self.stopped() {
            return false;
        }
        tokio::select! {
            () = tokio::time::sleep_until(t) => !self.stopped(),
            () = notified => false,
        }
    }
}

/// Start the load threads.
pub fn spawn(
    plan: &Plan,
    target: Arc<Target>,
    shared: Arc<Shared>,
) -> std::io::Result<Vec<std::thread::JoinHandle<()>>> {
    let threads = shared.threads.len();
    let barrier = Arc::new(tokio::sync::Barrier::new(threads));
    let steps = if let Load::Closed(steps) = &plan.load { steps.len() } else { 0 };
    let claims: Arc<[AtomicU64]> = (0..steps).map(|_| AtomicU64::new(0)).collect();
    (0..threads)
        .map(|k| {
            let (plan, target, shared, barrier, claims) =
                (plan.clone(), target.clone(), shared.clone(), barrier.clone(), claims.clone());
            std::thread::Builder::new().name(format!("load-{k}")).spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, async move {
                    let ctx = std::rc::Rc::new(crate::client::ThreadCtx::new(
                        target,
                        plan.timeout,
                        shared.threads[k].counters.clone(),
                        plan.h2_connections,
                    ));
                    match &plan.load {
                        Load::Closed(steps) => closed::run(k, threads, steps, ctx, &shared, &barrier, &claims).await,
                        Load::Open { profile, warmup_phase, max_in_flight, requests } => {
                            let share = max_in_flight.div_ceil(threads).max(1);
                            open::run(k, threads, profile, *warmup_phase, share, *requests, ctx, &shared).await;
                        }
                    }
                });
            })
        })
        .collect()
}
