//! Open loop: requests are due on the profile's schedule whatever the server does (`wrk2 -R`,
//! vegeta, k6's arrival-rate executors), and each one's latency runs from its due time. That is
//! what a user arriving at that moment waits, and it keeps a stalled server from hiding its
//! stall (coordinated omission: a closed loop stops sending while it waits, so it never measures
//! the requests that would have queued behind the stall).
//!
//! Per thread, a dispatcher walks the schedule (every T-th request of it) and hands each due
//! request to an idle sender ("slot", one connection each for HTTP/1.1). When none is idle it
//! opens another, up to the thread's share of `--max-in-flight`; past that the request waits for
//! a slot, and the wait counts in its latency. The schedule is arithmetic (the profile's inverse
//! cumulative), so nothing is kept per request: the next due time is computed, not queued.
//!
//! Senders are reused most recently idle first, so a low rate keeps few connections warm, and a
//! sender that still holds its connection before one that must open a new one. That order
//! matters when a server refuses connections (a per-address cap answers a new one 503 and closes
//! it): a refused sender is idle again at once, and taken first it would be refused again and
//! again while the accepted connections sat idle, the run serving a fraction of what they carry.
//! Timers fire on tokio's 1 ms wheel: a request can go out up to about a millisecond after its
//! due time; that *send lag* is part of its latency and is reported on its own.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{Load, Shared};
use crate::client::{Client, ThreadCtx};
use crate::profile::{Cursor, Profile};
use crate::stats::PhaseId;

/// Sleeps longer than this also wake on a stop.
const LONG_SLEEP: Duration = Duration::from_millis(20);

struct Job {
    n: u64,
    due: Instant,
    phase: PhaseId,
}

/// Thread `k` of `threads`: requests `k, k + T, k + 2T, ...` of the schedule.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    k: usize,
    threads: usize,
    profile: &Profile,
    warmup_phase: bool,
    max_slots: usize,
    limit: Option<u64>,
    ctx: Rc<ThreadCtx>,
    shared: &Arc<Shared>,
) {
    let idle: Rc<RefCell<Idle>> = Rc::default();
    let free = Rc::new(Notify::new());
    let mut slots: Vec<mpsc::Sender<Job>> = Vec::new();
    let mut set = JoinSet::new();
    let mut cursor = Cursor::default();
    let last_phase = profile.phases().len().saturating_sub(1);
    let mut n = k as u64;
    'schedule: loop {
        if limit.is_some_and(|l| n >= l) {
            break;
        }
        let Some(due_s) = profile.due_from(n, &mut cursor) else { break };
        let due = shared.start + Duration::from_secs_f64(due_s);
        let now = Instant::now();
        if due > now {
            if due - now > LONG_SLEEP {
                if !shared.sleep_until(due).await {
                    break;
                }
            } else {
                tokio::time::sleep_until(due).await;
            }
        }
        if shared.stopped() {
            break;
        }
        let mut waited = false;
        let slot = loop {
            if let Some(s) = idle.borrow_mut().take() {
                break s;
            }
            if slots.len() < max_slots {
                let (tx, rx) = mpsc::channel(1);
                let id = slots.len();
                slots.push(tx);
                let slot = Slot { id, idle: idle.clone(), free: free.clone(), shared: shared.clone(), k };
                set.spawn_local(slot.go(rx, Client::new(ctx.clone())));
                break id;
            }
            // Every slot is busy: this request waits, and its latency keeps running.
            if !waited {
                waited = true;
                shared.threads[k].waited.fetch_add(1, Ordering::Relaxed);
            }
            let notified = free.notified();
            if shared.stopped() {
                break 'schedule;
            }
            notified.await;
        };
        let phase = Load::open_phase(warmup_phase, profile.phase_at(due_s).unwrap_or(last_phase));
        // The slot is idle: its channel is empty.
        let _ = slots[slot].try_send(Job { n, due, phase });
        n += threads as u64;
    }
    // A profile may end at rate 0 (a pause to watch a scale-in): the run lasts its whole length.
    let ran_out = limit.is_none_or(|l| n < l);
    if ran_out && !shared.stopped() {
        shared.sleep_until(shared.start + Duration::from_secs_f64(profile.length())).await;
    }
    // Closing the channels ends each slot after its request in flight.
    drop(slots);
    while set.join_next().await.is_some() {}
}

/// Idle senders, each stack most recently idle first.
#[derive(Default)]
struct Idle {
    /// Holding a connection.
    warm: Vec<usize>,
    /// Without one: the next request opens it.
    cold: Vec<usize>,
}

impl Idle {
    fn take(&mut self) -> Option<usize> {
        self.warm.pop().or_else(|| self.cold.pop())
    }

    fn put(&mut self, id: usize, connected: bool) {
        if connected { self.warm.push(id) } else { self.cold.push(id) }
    }
}

struct Slot {
    id: usize,
    idle: Rc<RefCell<Idle>>,
    free: Rc<Notify>,
    shared: Arc<Shared>,
    k: usize,
}

impl Slot {
    async fn go(self, mut jobs: mpsc::Receiver<Job>, mut client: Client) {
        let ts = &self.shared.threads[self.k];
        while let Some(job) = jobs.recv().await {
            let sent = Instant::now();
            ts.sent.fetch_add(1, Ordering::Relaxed);
            let outcome = client.send(job.n).await;
            let done = Instant::now();
            let (latency, service, lag) =
                (done.saturating_duration_since(job.due), done - sent, sent.saturating_duration_since(job.due));
            ts.shard.lock().unwrap_or_else(|e| e.into_inner()).record(
                job.phase,
                &outcome,
                latency,
                Some(service),
                Some(lag),
                done,
            );
            self.idle.borrow_mut().put(self.id, client.connected());
            self.free.notify_one();
        }
    }
}
