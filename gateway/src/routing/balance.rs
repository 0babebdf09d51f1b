//! Power-of-two-choices over a load estimate (tower's `balance::p2c` with `load::PeakEwma`).
//!
//! The load of a worker is
//!
//! ```text
//! load = rtt_estimate * (outstanding + foreign_queue + 1)
//! ```
//!
//! * `outstanding`: requests this gateway has sent to the worker and not finished: the picking
//!   core's own, live, and the other cores' as it last summed them (at most a millisecond old:
//!   `Endpoint::load_inputs`), so that a pick writes nothing other cores write;
//! * `foreign_queue`: what the worker reports as `queued + in_flight` beyond our own outstanding
//!   requests when the snapshot was taken, i.e. the load other gateways put on it (0 when the
//!   telemetry is stale: it would be a guess);
//! * `rtt_estimate`: the picking core's peak-EWMA of the worker's response time, starting at `--default-rtt` for a
//!   new worker or one ready again (the floor linkerd uses so that a new endpoint is not flooded
//!   before it has answered once), decaying towards zero while unused (so it is tried again).
//!
//! Why not tower's `Balance` service itself: it is driven through `&mut self` (so it needs a
//! `Buffer` task in front, a channel hop and one task serialising every pick), it cannot exclude
//! the worker a retry must avoid, and its endpoints' load cannot see the worker-reported queue.
//! The algorithm is the same: two random ready candidates, the less loaded wins.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::pool::{Endpoint, Pool};

/// A ready worker of `pool` other than `exclude`, by power of two choices, waiting up to `wait`
/// for one to become ready.
pub(crate) async fn acquire(pool: &Pool, exclude: Option<&Arc<Endpoint>>, wait: Duration) -> Option<Arc<Endpoint>> {
    let stale_after = pool.ctx().config.stale_after;
    pool.wait_for_worker(wait, |endpoints| pick(endpoints, exclude, stale_after, &mut rand::rng())).await
}

/// The load estimate of one worker (see the module documentation).
fn load(rtt_estimate_s: f64, outstanding: u64, foreign_queue: u64) -> f64 {
    rtt_estimate_s.max(1e-6) * (outstanding + foreign_queue + 1) as f64
}

fn endpoint_load(ep: &Endpoint, now: Instant, stale_after: Duration) -> f64 {
    let i = ep.load_inputs(now, stale_after);
    load(i.rtt_s, i.outstanding, i.foreign_queue)
}

/// Pick a ready worker by power of two choices, never `exclude`.
fn pick(
    endpoints: &[Arc<Endpoint>],
    exclude: Option<&Arc<Endpoint>>,
    stale_after: Duration,
    rng: &mut impl Rng,
) -> Option<Arc<Endpoint>> {
    let usable = |e: &&Arc<Endpoint>| e.is_ready() && exclude.is_none_or(|x| !Arc::ptr_eq(x, e));
    let n = endpoints.iter().filter(usable).count();
    match n {
        0 => None,
        1 => endpoints.iter().find(usable).cloned(),
        _ => {
            let i = rng.random_range(0..n);
            let mut j = rng.random_range(0..n - 1);
            if j >= i {
                j += 1;
            }
            let mut a = None;
            let mut b = None;
            for (k, e) in endpoints.iter().filter(usable).enumerate() {
                if k == i {
                    a = Some(e);
                }
                if k == j {
                    b = Some(e);
                }
            }
            let (a, b) = (a?, b?);
            let now = Instant::now();
            let (la, lb) = (endpoint_load(a, now, stale_after), endpoint_load(b, now, stale_after));
            Some(Arc::clone(if la <= lb { a } else { b }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::pool::Health;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn eps(n: usize) -> Vec<Arc<Endpoint>> {
        (0..n)
            .map(|i| {
                let e = Endpoint::new(
                    "p",
                    &format!("http://127.0.0.1:{}", 1000 + i),
                    crate::pool::Rtt {
                        default: Duration::from_millis(30),
                        decay: Duration::from_secs(10),
                        cap: Duration::from_secs(10),
                    },
                    4,
                    1,
                    Arc::default(),
                    &Metrics::default(),
                )
                .unwrap();
                e.set_health(Health::Ready);
                Arc::new(e)
            })
            .collect()
    }

    #[test]
    fn load_grows_with_each_input() {
        assert!(load(0.01, 1, 0) > load(0.01, 0, 0));
        assert!(load(0.01, 0, 1) > load(0.01, 0, 0));
        assert!(load(0.02, 0, 0) > load(0.01, 0, 0));
    }

    #[test]
    fn never_picks_unready_or_excluded() {
        let e = eps(3);
        e[0].set_health(Health::Ejected);
        e[1].set_health(Health::NotReady);
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..100 {
            let p = pick(&e, None, Duration::from_secs(3), &mut rng).unwrap();
            assert!(Arc::ptr_eq(&p, &e[2]));
        }
        assert!(pick(&e, Some(&e[2]), Duration::from_secs(3), &mut rng).is_none());
        assert!(pick(&[], None, Duration::from_secs(3), &mut rng).is_none());
    }

    #[test]
    fn the_busier_worker_loses_every_duel() {
        let e = eps(2);
        let _busy: Vec<_> = (0..5).map(|_| e[0].start()).collect();
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..100 {
            assert!(Arc::ptr_eq(&pick(&e, None, Duration::from_secs(3), &mut rng).unwrap(), &e[1]));
        }
    }

    // Paused clock: equal workers have equal (undecayed) latency estimates.
    #[tokio::test(start_paused = true)]
    async fn traffic_spreads_over_equal_workers() {
        let e = eps(4);
        let mut rng = StdRng::seed_from_u64(3);
        let mut counts = [0usize; 4];
        for _ in 0..4000 {
            let p = pick(&e, None, Duration::from_secs(3), &mut rng).unwrap();
            counts[e.iter().position(|x| Arc::ptr_eq(x, &p)).unwrap()] += 1;
        }
        assert!(counts.iter().all(|&c| c > 500), "{counts:?}");
    }
}
