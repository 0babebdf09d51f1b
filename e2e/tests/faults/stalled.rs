//! A stalled worker. (one of the fault families of `main.rs`, which holds the helpers
//! and runs the cases one at a time).

use super::*;

/// SIGSTOP on one of three workers under load through the gateway, for longer than the
/// request deadline: no request fails (an attempt that waits too long is retried on another
/// worker), the stopped worker leaves rotation within 2 s, and after SIGCONT it gets traffic
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_worker_costs_no_request_and_comes_back() {
    let _serial = SERIAL.lock().await;
    let workers = [
        Server::start(worker_cmd(&[])).await,
        Server::start(worker_cmd(&[])).await,
        Server::start(worker_cmd(&[])).await,
    ];
    let mut flags = vec!["--request-timeout", "3s"];
    for w in &workers {
        flags.extend(["--worker", w.url.as_str()]);
    }
    let (gw, admin) = start_gateway(&flags).await;
    let c = client();
    for w in &workers {
        wait_health(&c, &admin, &w.url, true, Duration::from_secs(10)).await;
    }
    let stopped = &workers[0];

    let (stop, tally) = (Arc::new(AtomicBool::new(false)), Arc::new(Tally::default()));
    let load = closed_loop(&c, &gw.at(LIGHT_QUERY), 8, &stop, &tally, |_| {});
    testkit::wait_until(Duration::from_secs(10), "load runs on the stopped-to-be worker", || async {
        ok_count(&c, &admin, &stopped.url).await >= 20.0
    })
    .await;

    signal(stopped.pid(), Signal::SIGSTOP);
    let t = Instant::now();
    testkit::wait_until(Duration::from_secs(5), "the stopped worker leaves rotation", || async {
        health(&c, &admin, &stopped.url).await != "ready"
    })
    .await;
    let out_after = t.elapsed();
    let health_when_out = health(&c, &admin, &stopped.url).await;
    // Longer than the 3 s request deadline: requests that went to it must not wait it out.
    tokio::time::sleep(Duration::from_millis(4000).saturating_sub(t.elapsed())).await;
    let before = ok_count(&c, &admin, &stopped.url).await;
    signal(stopped.pid(), Signal::SIGCONT);
    let t = Instant::now();
    testkit::wait_until(Duration::from_secs(10), "the worker gets traffic again after SIGCONT", || async {
        ok_count(&c, &admin, &stopped.url).await - before >= 20.0
    })
    .await;
    let back_after = t.elapsed();
    stop.store(true, Ordering::SeqCst);
    join(load).await;

    eprintln!(
        "SIGSTOP: out of rotation ({health_when_out}) after {out_after:?}; SIGCONT: 20 answers after {back_after:?}; \
         clients got {:?}, e.g. {:?}",
        tally.statuses(),
        tally.bad.lock().unwrap()
    );
    assert_eq!(tally.not_ok(), 0, "failed requests: {:?}", tally.bad.lock().unwrap());
    assert!(out_after <= Duration::from_secs(2), "the stopped worker stayed in rotation for {out_after:?}");
}
