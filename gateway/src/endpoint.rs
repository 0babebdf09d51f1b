//! One worker as the gateway sees it: its health state, the requests outstanding to it, its
//! latency estimate and its last telemetry snapshot. Everything the request path reads is an
//! atomic or a short uncontended lock.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use http::Uri;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics::{Metrics, RequestLabels, WorkerLabels};
use crate::upstream::Upstream;
use std::sync::Arc;

/// How long the gateway waits for a TCP connection to a worker.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Idle connections to a worker are closed after this long.
pub const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether a worker gets traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Just discovered; `/readyz` not answered 200 yet.
    Probing = 0,
    /// Receives traffic.
    Ready = 1,
    /// `/readyz` said no, or it is draining (a 503 `unavailable` answer or `draining` in its
    /// stats); re-probed with backoff.
    NotReady = 2,
    /// Too many consecutive failures; re-probed with backoff.
    Ejected = 3,
}

impl Health {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Ready,
            2 => Self::NotReady,
            3 => Self::Ejected,
            _ => Self::Probing,
        }
    }
}

/// The part of a `/v1/stats` document the gateway uses, with the time it arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// When the gateway received it.
    pub at: Instant,
    /// `queued + in_flight` as the worker reported it.
    pub reported_queue: u64,
    /// The gateway's outstanding requests to this worker when the snapshot arrived; the part of
    /// `reported_queue` beyond it belongs to other clients.
    pub outstanding_at_snapshot: u64,
    /// `GpuTelemetry::utilization_pct()`: `None` when the worker has no GPU reading.
    pub gpu_pct: Option<f64>,
    /// Device memory used / total, when the worker has a GPU reading.
    pub gpu_memory_used_ratio: Option<f64>,
    pub ready: bool,
    pub draining: bool,
}

impl Snapshot {
    /// Load other clients put on the worker (never negative).
    pub fn foreign_queue(&self) -> u64 {
        self.reported_queue.saturating_sub(self.outstanding_at_snapshot)
    }
}

/// Peak-EWMA latency estimate (tower's `load::PeakEwma`): jumps up to a slower sample at once,
/// moves towards faster ones with time constant `decay`, and without samples decays towards zero,
/// so that a worker nobody picks (new, or slow once) is tried again after a while instead of
/// being starved while the others are lightly loaded.
#[derive(Debug, Clone, Copy)]
pub struct PeakEwma {
    pub estimate_s: f64,
    pub updated: Instant,
}

impl PeakEwma {
    fn weight(&self, now: Instant, decay: Duration) -> f64 {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        (-elapsed / decay.as_secs_f64().max(1e-9)).exp()
    }

    /// The estimate at `now`: the last one, decayed towards zero since it was updated.
    pub fn at(&self, now: Instant, decay: Duration) -> f64 {
        self.estimate_s * self.weight(now, decay)
    }

    pub fn observe(&mut self, rtt: Duration, now: Instant, decay: Duration) {
        let rtt = rtt.as_secs_f64();
        let w = self.weight(now, decay);
        self.estimate_s = if rtt > self.estimate_s * w { rtt } else { self.estimate_s * w + rtt * (1.0 - w) };
        self.updated = now;
    }

    /// Start again from at least `floor` (a worker that becomes ready).
    pub fn restart(&mut self, floor: Duration, now: Instant, decay: Duration) {
        self.estimate_s = self.at(now, decay).max(floor.as_secs_f64());
        self.updated = now;
    }
}

/// Per-worker state shared by the balancer, the proxy, the monitor task and the signal.
pub struct Endpoint {
    /// Base URL as discovered, e.g. `http://10.0.0.5:8000` (no trailing slash).
    pub url: String,
    pub pool: String,
    health: AtomicU8,
    /// Incremented each time the worker leaves `Ready`: the monitor restarts its backoff then.
    downs: AtomicU64,
    failures: AtomicU32,
    outstanding: AtomicU64,
    rtt: Mutex<PeakEwma>,
    default_rtt: Duration,
    rtt_decay: Duration,
    snapshot: Mutex<Option<Snapshot>>,
    /// Last pressure computed from fresh telemetry: held while telemetry is stale.
    held_pressure: Mutex<Option<f64>>,
    /// Woken when the worker becomes ready (shared with its pool).
    ready_notify: Arc<Notify>,
    pub(crate) ok_requests: Counter,
    pub(crate) ok_latency: Histogram,
    pub(crate) labels: WorkerLabels,
    /// The gateway's connections to the worker.
    pub(crate) upstream: Upstream,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("url", &self.url).field("health", &self.health()).finish()
    }
}

/// Parse and normalise a worker base URL.
pub fn parse_base_url(url: &str) -> Result<(http::uri::Scheme, http::uri::Authority), String> {
    let uri: Uri = url.trim().parse().map_err(|e| format!("bad worker URL {url:?}: {e}"))?;
    let scheme = uri.scheme().cloned().ok_or_else(|| format!("worker URL {url:?} has no scheme"))?;
    if scheme != http::uri::Scheme::HTTP {
        return Err(format!("worker URL {url:?}: only http:// is supported"));
    }
    let authority = uri.authority().cloned().ok_or_else(|| format!("worker URL {url:?} has no host"))?;
    Ok((scheme, authority))
}

impl Endpoint {
    pub fn new(
        pool: &str,
        url: &str,
        default_rtt: Duration,
        rtt_decay: Duration,
        max_idle_connections: usize,
        ready_notify: Arc<Notify>,
        metrics: &Metrics,
    ) -> Result<Self, String> {
        let (scheme, authority) = parse_base_url(url)?;
        let url = format!("{scheme}://{authority}");
        let ok = RequestLabels { pool: pool.to_owned(), worker: url.clone(), outcome: "ok".to_owned() };
        Ok(Self {
            ok_requests: metrics.requests.get_or_create_owned(&ok),
            ok_latency: metrics.latency.get_or_create_owned(&ok),
            labels: WorkerLabels { pool: pool.to_owned(), worker: url.clone() },
            pool: pool.to_owned(),
            url,
            upstream: Upstream::new(authority, max_idle_connections, CONNECT_TIMEOUT),
            health: AtomicU8::new(Health::Probing as u8),
            downs: AtomicU64::new(0),
            failures: AtomicU32::new(0),
            outstanding: AtomicU64::new(0),
            rtt: Mutex::new(PeakEwma { estimate_s: default_rtt.as_secs_f64(), updated: Instant::now() }),
            default_rtt,
            rtt_decay,
            snapshot: Mutex::new(None),
            held_pressure: Mutex::new(None),
            ready_notify,
        })
    }

    pub fn health(&self) -> Health {
        Health::from_u8(self.health.load(Ordering::Acquire))
    }

    pub fn is_ready(&self) -> bool {
        self.health() == Health::Ready
    }

    pub fn set_health(&self, h: Health) {
        let prev = self.health.swap(h as u8, Ordering::AcqRel);
        if prev == Health::Ready as u8 && h != Health::Ready {
            self.downs.fetch_add(1, Ordering::AcqRel);
        }
        if h == Health::Ready {
            self.failures.store(0, Ordering::Release);
            if prev != Health::Ready as u8 {
                // Back (or new): no latency estimate that decayed while it was out may let
                // every pick flood it before its first answer.
                if let Ok(mut e) = self.rtt.lock() {
                    e.restart(self.default_rtt, Instant::now(), self.rtt_decay);
                }
                self.ready_notify.notify_waiters();
            }
        }
    }

    /// How many times the worker has left `Ready`.
    pub fn downs(&self) -> u64 {
        self.downs.load(Ordering::Acquire)
    }

    /// Record a failure (connection error, dropped response, timeout). Returns `true` when this
    /// failure ejected the worker.
    pub fn record_failure(&self, eject_after: u32) -> bool {
        let n = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        if n >= eject_after {
            let prev = self.health.swap(Health::Ejected as u8, Ordering::AcqRel);
            if prev == Health::Ready as u8 {
                self.downs.fetch_add(1, Ordering::AcqRel);
            }
            return prev != Health::Ejected as u8;
        }
        false
    }

    /// Record a success: the consecutive-failure count starts over.
    pub fn record_success(&self, rtt: Duration) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Release);
        }
        self.observe_rtt(rtt);
    }

    pub fn observe_rtt(&self, rtt: Duration) {
        if let Ok(mut e) = self.rtt.lock() {
            e.observe(rtt, Instant::now(), self.rtt_decay);
        }
    }

    /// A fast refusal (429) must not look like a fast worker: raise the estimate as if the
    /// request had taken twice the current estimate.
    pub fn penalize(&self) {
        let est = self.rtt_estimate_s();
        self.observe_rtt(Duration::from_secs_f64(est * 2.0));
    }

    /// The balancer's latency estimate now (seconds).
    pub fn rtt_estimate_s(&self) -> f64 {
        self.rtt.lock().map(|e| e.at(Instant::now(), self.rtt_decay)).unwrap_or(0.0)
    }

    pub fn outstanding(&self) -> u64 {
        self.outstanding.load(Ordering::Acquire)
    }

    /// Count a request as outstanding until the guard drops.
    pub fn start(self: &Arc<Self>) -> InFlight {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        InFlight { ep: Arc::clone(self) }
    }

    pub fn store_snapshot(&self, stats: &wire::WorkerStats) {
        let snap = Snapshot {
            at: Instant::now(),
            reported_queue: stats.queue.queued + stats.queue.in_flight,
            outstanding_at_snapshot: self.outstanding(),
            gpu_pct: stats.gpu.utilization_pct(),
            gpu_memory_used_ratio: match &stats.gpu {
                wire::GpuTelemetry::Available(s) if s.device.memory_total_bytes > 0 => {
                    Some(s.device.memory_used_bytes as f64 / s.device.memory_total_bytes as f64)
                }
                _ => None,
            },
            ready: stats.ready,
            draining: stats.draining,
        };
        if let Ok(mut s) = self.snapshot.lock() {
            *s = Some(snap);
        }
    }

    pub fn snapshot(&self) -> Option<Snapshot> {
        self.snapshot.lock().ok().and_then(|s| s.clone())
    }

    /// The snapshot if it is younger than `stale_after`.
    pub fn fresh_snapshot(&self, stale_after: Duration) -> Option<Snapshot> {
        self.snapshot().filter(|s| s.at.elapsed() <= stale_after)
    }

    pub fn held_pressure(&self) -> Option<f64> {
        self.held_pressure.lock().ok().and_then(|p| *p)
    }

    pub fn set_held_pressure(&self, p: f64) {
        if let Ok(mut h) = self.held_pressure.lock() {
            *h = Some(p);
        }
    }
}

/// An outstanding request to a worker; decrements the count on drop, whatever happens.
#[derive(Debug)]
pub struct InFlight {
    ep: Arc<Endpoint>,
}

impl InFlight {
    pub fn endpoint(&self) -> &Arc<Endpoint> {
        &self.ep
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.ep.outstanding.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep() -> Arc<Endpoint> {
        Arc::new(
            Endpoint::new(
                "p",
                "http://127.0.0.1:9/",
                Duration::from_millis(30),
                Duration::from_secs(10),
                4,
                Arc::default(),
                &Metrics::default(),
            )
            .unwrap(),
        )
    }

    #[test]
    fn urls_are_normalised_and_checked() {
        assert_eq!(ep().url, "http://127.0.0.1:9");
        assert!(parse_base_url("https://x").is_err());
        assert!(parse_base_url("10.0.0.1:80").is_err());
    }

    #[test]
    fn consecutive_failures_eject_once_and_success_resets() {
        let e = ep();
        e.set_health(Health::Ready);
        assert!(!e.record_failure(3));
        assert!(!e.record_failure(3));
        e.record_success(Duration::from_millis(1));
        assert!(!e.record_failure(3));
        assert!(!e.record_failure(3));
        assert!(e.record_failure(3));
        assert_eq!(e.health(), Health::Ejected);
        assert!(!e.record_failure(3), "already ejected");
        e.set_health(Health::Ready);
        assert!(!e.record_failure(3));
    }

    #[test]
    fn in_flight_guard_counts_outstanding() {
        let e = ep();
        let a = e.start();
        let b = e.start();
        assert_eq!(e.outstanding(), 2);
        drop(a);
        drop(b);
        assert_eq!(e.outstanding(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn peak_ewma_jumps_up_and_decays_down() {
        let t0 = Instant::now();
        let mut e = PeakEwma { estimate_s: 0.010, updated: t0 };
        e.observe(Duration::from_millis(100), t0, Duration::from_secs(10));
        assert_eq!(e.estimate_s, 0.100);
        tokio::time::advance(Duration::from_secs(10)).await;
        e.observe(Duration::from_millis(10), Instant::now(), Duration::from_secs(10));
        assert!(e.estimate_s < 0.100 && e.estimate_s > 0.010, "{}", e.estimate_s);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unused_estimate_decays_towards_zero_and_restarts_at_the_default() {
        let e = ep();
        e.set_health(Health::Ready);
        e.observe_rtt(Duration::from_millis(200));
        let peak = e.rtt_estimate_s();
        assert!((peak - 0.200).abs() < 1e-9, "{peak}");
        // No samples for one decay time: down by a factor e, and further with time.
        tokio::time::advance(Duration::from_secs(10)).await;
        let later = e.rtt_estimate_s();
        assert!((later - 0.200 / std::f64::consts::E).abs() < 1e-6, "{later}");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(e.rtt_estimate_s() < 0.001, "an idle worker becomes worth trying again");
        // Out and back: it restarts no lower than the default, so it is not flooded.
        e.set_health(Health::NotReady);
        e.set_health(Health::Ready);
        assert!((e.rtt_estimate_s() - 0.030).abs() < 1e-9, "{}", e.rtt_estimate_s());
        // A peak above a decayed estimate counts in full.
        tokio::time::advance(Duration::from_secs(30)).await;
        e.observe_rtt(Duration::from_millis(5));
        assert!((e.rtt_estimate_s() - 0.005).abs() < 1e-9, "{}", e.rtt_estimate_s());
    }
}
