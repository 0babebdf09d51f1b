//! The `loadtest` binary as scripts use it: quiet off a terminal, the table or JSON lines on
//! stdout, `report: PATH` at the end, the summary file, `--render`, live lines on demand, and
//! clear errors for bad input.

mod support;

use std::process::{Command, Output};

use support::Server;

fn loadtest(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loadtest")).args(args).output().expect("runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("loadtest-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_a_terminal_it_prints_only_the_table_and_the_old_flags_work() {
    let server = Server::ok().await;
    let url = server.url();
    let out = tokio::task::spawn_blocking(move || {
        loadtest(&["--url", &url, "--concurrency", "1,2", "--duration-s", "0.5", "--warmup-s", "0"])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<_> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "header, two steps, total:\n{stdout}");
    assert!(lines[0].contains("req/s") && lines[0].contains("p99 ms"));
    assert!(lines[1].trim_start().starts_with("c=1") && lines[2].trim_start().starts_with("c=2"));
    assert!(lines[3].trim_start().starts_with("total"));
    assert!(!stdout.contains("offered/s") && !stdout.contains('\x1b'), "no live display off a terminal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_summary_report_and_render_agree() {
    let server = Server::ok().await;
    let dir = tempdir("json");
    let (summary, report, again) = (dir.join("run.json"), dir.join("run.html"), dir.join("again.html"));
    let (s, r, a) =
        (summary.to_str().unwrap().to_owned(), report.to_str().unwrap().to_owned(), again.to_str().unwrap().to_owned());
    let url = server.url();
    let out = tokio::task::spawn_blocking(move || {
        loadtest(&[
            "--url",
            &url,
            "--rate",
            "steps(50 100, 500ms)",
            "--warmup",
            "0s",
            "--json",
            "--summary",
            &s,
            "--report",
            &r,
        ])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "one JSON object per phase");
    assert_eq!(lines[0]["label"], "50/s");
    assert_eq!(lines[1]["rate"], 100.0);
    for key in ["ok", "throughput_per_s", "p50_ms", "p90_ms", "p99_ms", "max_ms", "errors"] {
        assert!(lines[0].get(key).is_some(), "{key} is kept for the scripts that read it");
    }
    assert_eq!(lines[0]["ok"].as_u64().unwrap() + lines[1]["ok"].as_u64().unwrap(), 75);
    let stderr = text(&out.stderr);
    let shown = stderr.lines().find_map(|l| l.strip_prefix("report: ")).expect("the report's path");
    assert_eq!(std::fs::canonicalize(shown).unwrap(), std::fs::canonicalize(&report).unwrap());

    let out = tokio::task::spawn_blocking(move || loadtest(&["--render", summary.to_str().unwrap(), "--report", &a]))
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("report: "));
    assert_eq!(std::fs::read(&report).unwrap(), std::fs::read(&again).unwrap(), "the same report from the record");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_always_prints_a_line_per_interval() {
    let server = Server::ok().await;
    let url = server.url();
    let out = tokio::task::spawn_blocking(move || {
        loadtest(&[
            "--url",
            &url,
            "--rate",
            "const(40, 2s)",
            "--warmup",
            "0s",
            "--interval",
            "500ms",
            "--progress",
            "always",
        ])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let live: Vec<_> = stdout.lines().filter(|l| l.contains(" 40/s ")).collect();
    assert!((4..=5).contains(&live.len()), "a line per 500 ms:\n{stdout}");
    assert!(stdout.lines().next().unwrap().contains("offered/s"));
    assert!(!stdout.contains('\x1b'), "plain lines off a terminal");
}

#[test]
fn bad_input_is_a_clear_error() {
    let out = loadtest(&["--url", "http://127.0.0.1:9", "--rate", "ramp(0, 100)"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("rate profile") && err.contains("expected"), "{err}");
    let out = loadtest(&["--url", "https://127.0.0.1:9"]);
    assert!(text(&out.stderr).contains("http only"), "{}", text(&out.stderr));
    let out = loadtest(&["--url", "http://127.0.0.1:9", "--duration", "10"]);
    assert!(text(&out.stderr).contains("10s"), "{}", text(&out.stderr));
}
