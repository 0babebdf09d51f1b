//! Closed loop: each client sends its next request when its last one is answered, so the load
//! follows the server's speed (`hey -c`, `wrk`). Latency is from the moment each request is sent.

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{ClosedStep, Shared, Span};
use crate::client::{Client, Failed, ThreadCtx};

/// After a failed connect, a client waits this long before the next request, so that a server
/// that is down is not met with a busy loop of refused connections.
const CONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// Thread `k` of `threads`: its share of each step's clients; the steps run in order, all threads
/// together. Connections are kept from one step to the next.
pub async fn run(
    k: usize,
    threads: usize,
    steps: &[ClosedStep],
    ctx: Rc<ThreadCtx>,
    shared: &Arc<Shared>,
    barrier: &tokio::sync::Barrier,
    claims: &Arc<[AtomicU64]>,
) {
    let mut idle: Vec<Client> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let leader = barrier.wait().await.is_leader();
        // Every thread passes both barriers of every step, stopped or not (a thread that left
        // the loop would leave the others waiting): a stopped step just sends nothing.
        let skip = shared.stopped();
        let begin = Instant::now();
        let warm_end = begin + step.warmup;
        let end = step.duration.map(|d| warm_end + d);
        let mine = if skip { 0 } else { step.clients / threads + usize::from(k < step.clients % threads) };
        let mut set = JoinSet::new();
        for c in 0..mine {
            let client = idle.pop().unwrap_or_else(|| Client::new(ctx.clone()));
            let run = ClientRun {
                shared: shared.clone(),
                claims: claims.clone(),
                k,
                step: i,
                warm_end,
                end,
                limit: step.requests,
                // Clients start at different places in the query mix.
                first: ((k + c * threads) * 7) as u64,
            };
            set.spawn_local(run.go(client));
        }
        while let Some(done) = set.join_next().await {
            if let Ok(client) = done {
                idle.push(client);
            }
        }
        barrier.wait().await;
        if leader && !skip {
            let now = shared.seconds(Instant::now());
            let (b, w) = (shared.seconds(begin), shared.seconds(warm_end).min(now));
            if w > b {
                shared.record_span(Span { phase: None, start: b, end: w });
            }
            shared.record_span(Span { phase: Some(i as u32), start: w, end: now });
        }
    }
}

struct ClientRun {
    shared: Arc<Shared>,
    claims: Arc<[AtomicU64]>,
    k: usize,
    step: usize,
    warm_end: Instant,
    end: Option<Instant>,
    limit: Option<u64>,
    first: u64,
}

impl ClientRun {
    async fn go(self, mut client: Client) -> Client {
        let ts = &self.shared.threads[self.k];
        let mut i = self.first;
        loop {
            if self.shared.stopped() {
                break;
            }
            let t0 = Instant::now();
            if self.end.is_some_and(|e| t0 >= e) {
                break;
            }
            let phase = if t0 < self.warm_end {
                None
            } else {
                if let Some(n) = self.limit
                    && self.claims[self.step].fetch_add(1, Ordering::Relaxed) >= n
                {
                    break;
                }
                Some(self.step as u32)
            };
            ts.sent.fetch_add(1, Ordering::Relaxed);
            let outcome = client.send(i).await;
            let done = Instant::now();
            ts.shard.lock().unwrap_or_else(|e| e.into_inner()).record(phase, &outcome, done - t0, None, None, done);
            if matches!(outcome, Err(Failed::Connect { .. })) {
                tokio::time::sleep(CONNECT_BACKOFF).await;
            }
            i += 1;
        }
        client
    }
}
