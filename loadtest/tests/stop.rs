//! Stopping early (Ctrl-C, or a deadline): sending stops, what is in flight is awaited, and the
//! run still reports what it measured.

mod support;

use std::time::{Duration, Instant};

use clap::Parser as _;
use support::Server;

async fn run_until(url: &str, args: &[&str], deadline: Duration) -> loadtest::summary::Summary {
    let mut argv = vec!["loadtest", "--url", url, "--progress", "never"];
    argv.extend_from_slice(args);
    let mut spec = loadtest::config::Config::try_parse_from(&argv).unwrap().spec(vec![]).unwrap();
    spec.deadline = Some(deadline);
    tokio::time::timeout(Duration::from_secs(30), loadtest::run::run(spec)).await.expect("it stops").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_loop_stopped_mid_step_reports_and_skips_the_rest() {
    let server = Server::ok().await;
    let t = Instant::now();
    let s = run_until(
        &server.url(),
        &["-c", "2,4,8", "-d", "20s", "--warmup", "0s", "--threads", "2"],
        Duration::from_secs(1),
    )
    .await;
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(s.phases[0].ok > 0);
    assert_eq!(s.phases[1].requests + s.phases[2].requests, 0, "the later steps were skipped");
    assert!(s.notes.iter().any(|n| n.contains("stopped early")), "{:?}", s.notes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_loop_stopped_early_reports_what_was_sent() {
    let server = Server::ok().await;
    let t = Instant::now();
    let s = run_until(
        &server.url(),
        &["--rate", "const(100, 30s)", "--warmup", "0s", "--threads", "2"],
        Duration::from_secs(1),
    )
    .await;
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!((80..=170).contains(&s.total.ok), "about a second at 100/s: {}", s.total.ok);
    assert_eq!(s.total.failed(), 0);
}
