//! The HTML report of a recorded run: well-formed (parsed as XML), every plot present with its
//! series, the gateway's signal and the caller's series drawn, and the same report again from
//! the run's JSON record.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use support::{Action, OK, Server, json_error, run};

/// A stand-in for the gateway's admin port: `GET /pools/default/signal` answers the JSON of
/// `gateway/src/signal.rs` `PoolSignal`, its signal rising by 0.5 and its workers by one every
/// two readings.
async fn signal_server() -> Server {
    let n = Arc::new(AtomicU64::new(0));
    Server::start(0, move |r| {
        if r.target != "/pools/default/signal" {
            return Action::Answer(json_error(404, "not_found"));
        }
        let i = n.fetch_add(1, Ordering::Relaxed);
        let body = format!(
            r#"{{"pool":"default","signal":{},"stale":false,"components":{{"raw":{0},"queue":{0},"gpu":0.0,"held":0.0,"backlog":0.0,"workers":{},"blind":0,"gpu_missing":1}},"targets_queue":8.0,"targets_gpu_pct":70.0,"updated_unix_ms":0}}"#,
            0.5 * i as f64,
            1 + i / 2
        );
        Action::Answer(Bytes::from(format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )))
    })
    .await
}

/// Parse the report as XML (stricter than HTML: every tag closed, every attribute quoted).
fn parse(html: &str) -> roxmltree::Document<'_> {
    let opts = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
    roxmltree::Document::parse_with_options(html, opts).unwrap_or_else(|e| panic!("not well-formed: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_of_a_recorded_run_is_well_formed_and_has_every_plot() {
    let target = Server::start(0, |r| {
        if r.query() == "busy" {
            Action::Answer(json_error(429, "overloaded"))
        } else {
            Action::Answer(Bytes::from_static(OK))
        }
    })
    .await;
    let gateway = signal_server().await;
    let dir = std::env::temp_dir().join(format!("loadtest-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let queries = dir.join("q.txt");
    std::fs::write(&queries, "a\nb\nc\nbusy\n").unwrap();
    let series = dir.join("scaler.jsonl");
    std::fs::write(
        &series,
        "{\"t\": 0, \"series\": \"replicas_desired\", \"value\": 1}\n{\"t\": 1.2, \"series\": \"replicas_desired\", \"value\": 3}\n",
    )
    .unwrap();
    let s = run(
        &target.url(),
        &[
            "--rate",
            "steps(40 80 40, 1s)",
            "--warmup",
            "0s",
            "--interval",
            "250ms",
            "--queries",
            queries.to_str().unwrap(),
            "--gateway-admin",
            &gateway.url(),
            "--signal-interval",
            "250ms",
            "--series",
            series.to_str().unwrap(),
            "--title",
            "Steps <up> & down",
        ],
    )
    .await;
    assert_eq!(s.phases.len(), 3);
    assert_eq!(s.total.requests, 160);
    assert_eq!(s.total.errors["429 overloaded"], 40);
    let sig = s.signal.as_ref().unwrap();
    assert!(sig.samples.len() >= 8, "{} samples", sig.samples.len());
    assert!(sig.samples.last().unwrap().workers > sig.samples[0].workers);
    assert_eq!(s.series["replicas_desired"], [(0.0, 1.0), (1.2, 3.0)]);

    let html = loadtest::report::render(&s);
    let doc = parse(&html);
    let title = doc.descendants().find(|n| n.has_tag_name("title")).unwrap();
    assert_eq!(title.text(), Some("Steps <up> & down"));
    assert!(doc.descendants().all(|n| !n.has_tag_name("script")), "no script");
    assert!(!html.contains("http://") || !html.contains("src=\"http"), "nothing fetched");

    // Each panel: its heading, and for plots an SVG with the named series.
    let panel = |heading: &str| {
        doc.descendants()
            .filter(|n| n.has_tag_name("section"))
            .find(|sec| sec.children().any(|c| c.has_tag_name("h2") && c.text() == Some(heading)))
            .unwrap_or_else(|| panic!("no panel {heading:?}"))
    };
    let series_in = |heading: &str| -> Vec<String> {
        panel(heading)
            .descendants()
            .filter(|n| n.has_tag_name("path") && n.attribute("class") == Some("line"))
            .filter_map(|p| p.children().find(|c| c.has_tag_name("title")).and_then(|t| t.text()).map(String::from))
            .collect()
    };
    for (heading, want) in [
        ("Offered vs achieved", &["ok", "offered", "failed"][..]),
        ("Latency", &["p50", "p90", "p99", "max"]),
        ("Errors", &["429 overloaded"]),
        ("Scaling signal and replicas", &["signal", "queue term", "workers", "replicas_desired"]),
        ("In flight", &["in flight", "connections"]),
        ("Latency distribution", &["from the due time", "from the write (service time)"]),
    ] {
        let got = series_in(heading);
        for w in want {
            assert!(got.iter().any(|g| g == w), "{heading}: {w:?} not in {got:?}");
        }
        // A line has points: an SVG path with several segments.
        let p = panel(heading).descendants().find(|n| n.attribute("class") == Some("line")).unwrap();
        assert!(p.attribute("d").unwrap().matches(['L', 'H']).count() >= 2, "{heading}");
    }
    // Phase bands carry the step labels.
    let bands: Vec<_> = panel("Latency")
        .descendants()
        .filter(|n| n.attribute("class") == Some("band-label"))
        .filter_map(|n| n.text())
        .collect();
    assert_eq!(bands, ["40/s", "80/s", "40/s"]);
    // The phase table: a row per phase and the total.
    let rows = panel("Phases").descendants().filter(|n| n.has_tag_name("tr")).count();
    assert_eq!(rows, 1 + 3 + 1);

    // The JSON record is the whole run: the report comes out the same from it.
    let json = serde_json::to_string(&s).unwrap();
    let back: loadtest::summary::Summary = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s);
    assert_eq!(loadtest::report::render(&back), html);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_loop_report_without_errors_or_signal_says_so() {
    let target = Server::ok().await;
    let s = run(&target.url(), &["-c", "1,2", "-n", "50", "--warmup", "0s"]).await;
    let html = loadtest::report::render(&s);
    let doc = parse(&html);
    let text: String = doc.descendants().filter_map(|n| n.text()).collect();
    assert!(text.contains("No failed requests"));
    assert!(text.contains("no failed requests"), "the empty errors plot says so");
    assert!(!text.contains("Scaling signal"), "no signal plot without a gateway");
    assert!(text.contains("closed loop, 1 → 2 client(s)"));
}
