//! The endpoint's health, ejection, in-flight count and series, on a plain endpoint.

use super::*;

#[test]
fn other_clients_queries_are_what_the_worker_counted_beyond_ours() {
    let mut f = Foreign::default();
    // First reading: 10 in flight of ours not yet counted by the worker; 500 from before.
    f.observe(500, 10);
    assert_eq!(f.total, 0);
    // We sent 100 more, the worker counted 100 + 10 of ours + 40 of another gateway's: the
    // 10 of ours in flight at the first reading count as theirs, once.
    f.observe(650, 110);
    assert_eq!(f.total, 50);
    // Our requests in flight make the difference dip: the total never goes back.
    f.observe(660, 130);
    assert_eq!(f.total, 50);
    f.observe(700, 130);
    assert_eq!(f.total, 80);
    // The worker restarted (its count went back): a new baseline, the total kept.
    f.observe(5, 135);
    assert_eq!(f.total, 80);
    f.observe(30, 140);
    assert_eq!(f.total, 100, "20 more of theirs after the restart");
}

const RTT: Rtt =
    Rtt { default: Duration::from_millis(30), decay: Duration::from_secs(10), cap: Duration::from_secs(10) };

fn ep() -> Arc<Endpoint> {
    Arc::new(Endpoint::new("p", "http://127.0.0.1:9/", RTT, 4, 1, Arc::default(), &Metrics::default()).unwrap())
}

#[test]
fn urls_are_normalised_and_checked() {
    assert_eq!(ep().url, "http://127.0.0.1:9");
    assert!(parse_base_url("https://x").is_err());
    assert!(parse_base_url("10.0.0.1:80").is_err());
}

#[test]
fn consecutive_failures_eject_once_and_success_resets() {
    let ctx = Ctx::for_tests(|c| c.eject_after = 3);
    let e = ep();
    e.set_health(Health::Ready);
    let fail = |e: &Endpoint| e.apply(HealthEffect::Failure, &ctx, &"test");
    assert_eq!(fail(&e), Change::None);
    assert_eq!(fail(&e), Change::None);
    e.apply(HealthEffect::Success { rtt: Some(Duration::from_millis(1)) }, &ctx, &"test");
    assert_eq!(fail(&e), Change::None);
    assert_eq!(fail(&e), Change::None);
    assert_eq!(fail(&e), Change::Ejected);
    assert_eq!(e.health(), Health::Ejected);
    assert_eq!(fail(&e), Change::None, "already ejected");
    assert_eq!(e.apply(HealthEffect::Ready, &ctx, &"test"), Change::Recovered);
    assert_eq!(fail(&e), Change::None);
    let text = crate::metrics::render(&ctx.metrics.registry());
    assert!(text.contains("gateway_ejections_total{pool=\"p\",worker=\"http://127.0.0.1:9\"} 1"), "{text}");
}

#[test]
fn unreachable_counts_only_while_ready_and_draining_takes_it_out() {
    let ctx = Ctx::for_tests(|c| c.eject_after = 1);
    let e = ep();
    assert_eq!(e.apply(HealthEffect::Unreachable, &ctx, &"test"), Change::None, "probing: not counted");
    assert_eq!(e.health(), Health::Probing);
    e.set_health(Health::Ready);
    assert_eq!(e.apply(HealthEffect::Draining, &ctx, &"test"), Change::Drained);
    assert_eq!(e.health(), Health::NotReady);
    assert_eq!(e.apply(HealthEffect::Draining, &ctx, &"test"), Change::None);
    e.set_health(Health::Ready);
    assert_eq!(e.apply(HealthEffect::Unreachable, &ctx, &"test"), Change::Ejected);
}

#[tokio::test(start_paused = true)]
async fn slow_never_ejects_and_timed_out_polls_stall_until_a_probe_answers() {
    let ctx = Ctx::for_tests(|c| c.eject_after = 1);
    let e = ep();
    e.set_health(Health::Ready);
    for _ in 0..1000 {
        assert_eq!(e.apply(HealthEffect::Slow { waited: Duration::from_secs(9) }, &ctx, &"t"), Change::None);
    }
    assert_eq!(e.health(), Health::Ready, "slow is not failed");
    assert_eq!(e.rtt_estimate_s(), 9.0);
    // One timed-out poll is a blip; an answer in between starts the count over.
    assert_eq!(e.apply(HealthEffect::Unresponsive, &ctx, &"t"), Change::None);
    assert_eq!(e.apply(HealthEffect::Responsive, &ctx, &"t"), Change::None);
    assert_eq!(e.apply(HealthEffect::Unresponsive, &ctx, &"t"), Change::None);
    assert_eq!(e.apply(HealthEffect::Unresponsive, &ctx, &"t"), Change::Stalled);
    assert_eq!(e.health(), Health::Stalled);
    assert_eq!(e.apply(HealthEffect::Unresponsive, &ctx, &"t"), Change::None);
    assert_eq!(e.apply(HealthEffect::Ready, &ctx, &"t"), Change::Recovered);
    assert!((e.rtt_estimate_s() - 0.030).abs() < 1e-9, "restarted: {}", e.rtt_estimate_s());
    assert_eq!(e.apply(HealthEffect::Unresponsive, &ctx, &"t"), Change::None, "the count started over");
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

#[test]
fn each_core_counts_and_learns_on_its_own_share_and_the_sums_see_them_all() {
    let ctx = Ctx::for_tests(|_| {});
    // Three slots: cores 0 and 1, and every other thread (this one).
    let e = Endpoint::new("p", "http://127.0.0.1:9/", RTT, 4, 3, Arc::default(), &Metrics::default()).unwrap();
    e.set_health(Health::Ready);
    let mine = e.start();
    e.sent(5);
    let on_core_0 = std::thread::scope(|s| {
        s.spawn(|| {
            crate::runtime::set_core(0);
            let held = (e.start(), e.start());
            e.sent(7);
            e.apply(HealthEffect::Refused, &ctx, &"test");
            assert!(e.rtt_estimate_s() > 0.05, "core 0's estimate is penalised: {}", e.rtt_estimate_s());
            let seen = e.load_inputs(Instant::now(), Duration::from_secs(3));
            assert_eq!(seen.outstanding, 3, "its own 2, live, and the other thread's 1");
            held
        })
        .join()
        .unwrap()
    });
    assert_eq!((e.outstanding(), e.sent_queries()), (3, 12), "the sums read every share");
    let seen = e.load_inputs(Instant::now(), Duration::from_secs(3));
    assert_eq!((seen.outstanding, seen.foreign_queue), (3, 0), "no telemetry: no foreign queue");
    assert!((seen.rtt_s - 0.030).abs() < 1e-3, "this thread's estimate is its own: {}", seen.rtt_s);
    assert!(e.rtt_estimate_max_s() > 0.05, "/v1/pools shows the highest");
    drop(on_core_0);
    drop(mine);
    assert_eq!(e.outstanding(), 0, "each guard gives back on the share it took");
    // Out and back: every core's estimate starts over.
    e.set_health(Health::NotReady);
    e.set_health(Health::Ready);
    assert!((e.rtt_estimate_max_s() - 0.030).abs() < 1e-3, "{}", e.rtt_estimate_max_s());
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
    // Out and back: it restarts at the default, so it is not flooded.
    e.set_health(Health::NotReady);
    e.set_health(Health::Ready);
    assert!((e.rtt_estimate_s() - 0.030).abs() < 1e-9, "{}", e.rtt_estimate_s());
    // A peak above a decayed estimate counts in full.
    tokio::time::advance(Duration::from_secs(30)).await;
    e.observe_rtt(Duration::from_millis(5));
    assert!((e.rtt_estimate_s() - 0.005).abs() < 1e-9, "{}", e.rtt_estimate_s());
}

/// The overload: 429 after 429 doubled the estimate until it overflowed. Now it
/// saturates, and the worker gets traffic again within seconds: at its first answer, or at
/// once when it is ready again after being out.
#[tokio::test(start_paused = true)]
async fn penalties_saturate_and_the_estimate_restarts_on_recovery() {
    let ctx = Ctx::for_tests(|c| c.eject_after = u32::MAX);
    let (e, other) = (ep(), ep());
    e.set_health(Health::Ready);
    other.set_health(Health::Ready);
    for _ in 0..100_000 {
        e.apply(HealthEffect::Refused, &ctx, &"429");
        e.apply(HealthEffect::Failure, &ctx, &"500");
    }
    let est = e.rtt_estimate_s();
    assert!(est.is_finite() && est <= super::super::ewma::PENALTY_CAP_S, "{est}");
    // Refusals stop; the worker answers (its first answer in a while): it starts over.
    tokio::time::advance(Duration::from_millis(500)).await;
    assert!(e.rtt_estimate_s() > 0.5, "the penalty holds");
    e.apply(HealthEffect::Success { rtt: Some(Duration::from_millis(5)) }, &ctx, &"ok");
    assert!((e.rtt_estimate_s() - 0.030).abs() < 1e-9, "{}", e.rtt_estimate_s());
    // Later answers are samples as usual.
    e.apply(HealthEffect::Success { rtt: Some(Duration::from_millis(80)) }, &ctx, &"ok");
    assert!((e.rtt_estimate_s() - 0.080).abs() < 1e-9, "{}", e.rtt_estimate_s());
    // Refused again, and given no traffic: the penalty ends by itself after a second.
    e.apply(HealthEffect::Refused, &ctx, &"429");
    assert!((e.rtt_estimate_s() - 0.160).abs() < 1e-9, "{}", e.rtt_estimate_s());
    tokio::time::advance(Duration::from_millis(1_000)).await;
    assert!((e.rtt_estimate_s() - 0.030).abs() < 1e-9, "{}", e.rtt_estimate_s());
    // Out of rotation with the highest estimate there is, and back: the default again, as
    // low as a worker that has been answering in 30 ms, so it wins duels at once.
    for _ in 0..100 {
        e.apply(HealthEffect::Failure, &ctx, &"500");
    }
    e.observe_rtt(Duration::MAX);
    assert_eq!(e.rtt_estimate_s(), 10.0, "bounded by the request deadline");
    e.set_health(Health::NotReady);
    tokio::time::advance(Duration::from_secs(1)).await;
    other.observe_rtt(Duration::from_millis(30));
    e.apply(HealthEffect::Ready, &ctx, &"probe");
    assert!((e.rtt_estimate_s() - 0.030).abs() < 1e-9, "{}", e.rtt_estimate_s());
    assert!(e.rtt_estimate_s() <= other.rtt_estimate_s() * 1.1, "it competes with a worker answering in 30 ms");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(500)))]

    /// Any sequence of health effects on a worker: no panic, and an estimate that stays
    /// finite and within the request deadline.
    #[test]
    fn any_sequence_of_effects_keeps_the_estimate_bounded(
        ops in proptest::collection::vec((0u8..8, proptest::prelude::any::<u64>()), 0..300),
    ) {
        let ctx = Ctx::for_tests(|c| c.eject_after = 3);
        let e = ep();
        for (op, n) in ops {
            let effect = match op {
                0 => HealthEffect::Success { rtt: Some(Duration::from_nanos(n)) },
                1 => HealthEffect::Success { rtt: Some(Duration::new(n, 999_999_999)) },
                2 => HealthEffect::Success { rtt: None },
                3 => HealthEffect::Refused,
                4 => HealthEffect::Failure,
                5 => HealthEffect::Ready,
                6 => HealthEffect::Draining,
                _ => HealthEffect::Unreachable,
            };
            e.apply(effect, &ctx, &"prop");
            let est = e.rtt_estimate_s();
            proptest::prop_assert!(est.is_finite() && (0.0..=10.0).contains(&est), "{est}");
        }
    }
}

#[test]
fn a_retired_worker_leaves_no_series() {
    let m = Metrics::default();
    let registry = m.registry();
    let e = Endpoint::new("p", "http://10.0.0.9:80", Rtt { default: Duration::ZERO, ..RTT }, 1, 1, Arc::default(), &m)
        .unwrap();
    e.count_request(&m, "ok", 0.01);
    e.count_request(&m, "timeout", 0.01);
    e.count_request(&m, "status_418", 0.01);
    m.worker_ready.get_or_create(&e.labels).set(1);
    m.ejections.get_or_create(&e.labels).inc();
    assert!(crate::metrics::render(&registry).contains("10.0.0.9"));
    e.retire(&m);
    e.count_request(&m, "upstream", 0.01);
    let text = crate::metrics::render(&registry);
    assert!(!text.contains("10.0.0.9"), "{text}");
}
