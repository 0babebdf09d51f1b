//! Heavy requests beside light ones. (one of the fault families of `main.rs`, which holds the helpers
//! and runs the cases one at a time).

use super::*;

fn heavy_body() -> String {
    let words = "play some jazz music by miles davis in the living room tonight please";
    let query: String = words.split(' ').cycle().take(400).collect::<Vec<_>>().join(" ").chars().take(2048).collect();
    serde_json::json!({ "queries": vec![query; 64] }).to_string()
}

/// Light requests per second of `clients` closed-loop clients over `window`; every one 200.
async fn light_rate(c: &reqwest::Client, url: &str, clients: usize, window: Duration) -> f64 {
    let (stop, tally) = (Arc::new(AtomicBool::new(false)), Arc::new(Tally::default()));
    let load = closed_loop(c, url, clients, &stop, &tally, |r| {
        assert!(r.as_ref().is_ok_and(|a| a.status == 200), "a light request: {r:?}");
    });
    let t = Instant::now();
    tokio::time::sleep(window).await;
    let n = tally.ok.load(Ordering::SeqCst);
    let rate = n as f64 / t.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    join(load).await;
    rate
}

/// Heavy queries running in `workers` now (their `/v1/stats`).
async fn heavy_running(c: &reqwest::Client, workers: &[Server]) -> u64 {
    let mut running = 0;
    for w in workers {
        running += get(c, &w.at("/v1/stats")).await.body["queue"]["heavy_queries"].as_u64().unwrap_or(0);
    }
    running
}

/// Eight clients posting 64 maximum-length queries per request (seconds of CPU each) through
/// the gateway beside four light clients: the light ones keep at least half the throughput
/// they had alone, and no worker is ejected (slow is not failed). Heavy clients get answers,
/// 429 with `Retry-After` (and wait it, as clients should), or a JSON 503/504: never a 500.
///
/// The light clients' throughput alone is measured before and after the heavy clients run, and
/// the mean is the reference: on a shared machine the background load drifts, and a drift
/// between one reference and the measurement would read as the servers' doing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_requests_leave_light_ones_half_their_throughput_and_eject_no_one() {
    let _serial = SERIAL.lock().await;
    let workers = [Server::start(worker_cmd(&[])).await, Server::start(worker_cmd(&[])).await];
    let (gw, admin) = start_gateway(&["--worker", &workers[0].url, "--worker", &workers[1].url]).await;
    let c = client();
    for w in &workers {
        wait_health(&c, &admin, &w.url, true, Duration::from_secs(10)).await;
    }
    let light_url = gw.at(LIGHT_QUERY);
    light_rate(&c, &light_url, 4, Duration::from_millis(500)).await; // warm-up
    let alone_before = light_rate(&c, &light_url, 4, Duration::from_secs(3)).await;

    let statuses = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let body = heavy_body();
    let heavy: Vec<_> = (0..8)
        .map(|_| {
            let (c, url, statuses, body) = (c.clone(), gw.at("/predict"), statuses.clone(), body.clone());
            tokio::spawn(async move {
                loop {
                    let resp = c.post(&url).header("content-type", "application/json").body(body.clone()).send().await;
                    let a = match resp {
                        Ok(resp) => Answer::read(resp).await,
                        Err(e) => {
                            *statuses.lock().unwrap().entry(format!("transport: {e}")).or_default() += 1;
                            continue;
                        }
                    };
                    let key = match a.status.as_u16() {
                        200 => "200".to_owned(),
                        s => format!("{s} {}", a.error_type().unwrap_or("(no error_type)")),
                    };
                    *statuses.lock().unwrap().entry(key).or_default() += 1;
                    if a.status == 429 {
                        let s = a.headers.get("retry-after").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(1);
                        tokio::time::sleep(Duration::from_secs(s)).await;
                    }
                }
            })
        })
        .collect();
    testkit::wait_until(Duration::from_secs(20), "heavy requests are running in a worker", || async {
        heavy_running(&c, &workers).await > 0
    })
    .await;
    // Whether heavy queries were running, sampled through the measurement.
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (c, sampling, urls) =
            (c.clone(), sampling.clone(), workers.iter().map(|w| w.at("/v1/stats")).collect::<Vec<_>>());
        tokio::spawn(async move {
            let (mut samples, mut busy) = (0u32, 0u32);
            while sampling.load(Ordering::SeqCst) {
                let mut running = 0;
                for url in &urls {
                    running += get(&c, url).await.body["queue"]["heavy_queries"].as_u64().unwrap_or(0);
                }
                samples += 1;
                busy += u32::from(running > 0);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            (busy, samples)
        })
    };
    let beside = light_rate(&c, &light_url, 4, Duration::from_secs(4)).await;
    sampling.store(false, Ordering::SeqCst);
    let (busy, samples) = sampler.await.unwrap();
    for h in heavy {
        h.abort();
    }
    let text = metrics(&c, &admin).await;
    let ejections = metric_sum(&text, "gateway_ejections_total", &[]);
    let view = workers_view(&c, &admin).await;
    let statuses = statuses.lock().unwrap().clone();
    // Abandoned requests are dropped by the gateway and then by the workers.
    testkit::wait_until(Duration::from_secs(15), "the heavy queries are gone", || async {
        heavy_running(&c, &workers).await == 0
    })
    .await;
    let alone_after = light_rate(&c, &light_url, 4, Duration::from_secs(3)).await;
    let alone = (alone_before + alone_after) / 2.0;
    eprintln!(
        "light req/s alone {alone_before:.1} before, {alone_after:.1} after; beside heavy {beside:.1} ({:.0} % of \
         the mean); heavy queries running in {busy} of {samples} samples; heavy answers {statuses:?}; ejections \
         {ejections}",
        100.0 * beside / alone
    );
    assert!(busy * 4 >= samples * 3, "heavy queries ran in only {busy} of {samples} samples of the measurement");
    assert!(beside >= 0.5 * alone, "light throughput {beside:.1} req/s beside heavy requests, {alone:.1} alone");
    assert_eq!(ejections, 0.0, "a worker that answers, however slowly, is not ejected");
    for (url, w) in &view {
        assert_eq!(w["health"], "ready", "{url}: {w}");
    }
    for key in statuses.keys() {
        let allowed = ["200", "429 overloaded", "503 overloaded", "503 unavailable", "504 timeout"];
        assert!(allowed.contains(&key.as_str()), "a heavy request got {key}: {statuses:?}");
    }
}
