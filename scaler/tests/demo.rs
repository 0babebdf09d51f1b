//! The main job, short: `scripts/demo.sh` with 8 s load steps and the debug binaries. Replicas go
//! up with the load and back to one, and no request fails.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

/// The whole demo, startup included; it takes about 2 minutes on a 2-core machine.
const LIMIT: Duration = Duration::from_secs(300);

#[tokio::test]
async fn the_demo_scales_up_with_the_load_and_back_down_without_a_failed_request() {
    let bin_dir = testkit::bin("scaler").parent().unwrap().to_path_buf();
    for b in ["worker", "gateway", "loadtest"] {
        testkit::bin(b);
    }
    let out = std::env::temp_dir().join(format!("scaler-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let root = testkit::repo_root();
    let mut cmd = Command::new(root.join("scripts/demo.sh"));
    cmd.current_dir(&root)
        .env("DEMO_BIN_DIR", &bin_dir)
        .env("DEMO_OUT", &out)
        // Time at 0.9 C for the signal to rise, the scaler to sync and a worker to calibrate
        // and start before the 1.2 C step, on a loaded 2-core machine.
        .env("DEMO_STEP_S", "8")
        .env("DEMO_TAIL_S", "20")
        .env("ORT_DYLIB_PATH", testkit::ort_lib())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().expect("scripts/demo.sh");
    let pid = child.id().expect("running") as i32;
    let done = tokio::time::timeout(LIMIT, child.wait_with_output()).await;
    let output = match done {
        Ok(o) => o.expect("the demo's output"),
        Err(_) => {
            // SIGTERM: its trap stops the scaler (which drains its workers) and the gateway.
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
            panic!("scripts/demo.sh did not finish within {LIMIT:?}");
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "scripts/demo.sh failed ({}):\n{stdout}\n{stderr}", output.status);

    // The scaler's series: 1 worker at the start, more under load, 1 again at the end.
    let replicas = series(&out.join("scaler.jsonl"), "replicas");
    assert_eq!(replicas.first(), Some(&1.0), "{replicas:?}");
    let peak = replicas.iter().copied().fold(0.0, f64::max);
    assert!(peak >= 2.0, "replicas never went up: {replicas:?}\n{stdout}");
    assert_eq!(replicas.last(), Some(&1.0), "replicas did not come back to 1: {replicas:?}\n{stdout}");
    let up = replicas.iter().position(|r| *r >= 2.0).unwrap();
    assert!(replicas[up..].contains(&1.0), "down after up: {replicas:?}");

    // loadtest's record of the run: every request answered with success.
    let run: Value = serde_json::from_slice(&std::fs::read(out.join("demo-run.json")).unwrap()).unwrap();
    let total = &run["total"];
    let requests = total["requests"].as_u64().unwrap();
    assert!(requests > 500, "{total}");
    assert_eq!(total["ok"].as_u64(), Some(requests), "failed requests: {}", total["errors"]);
    // The scaler's series reached the run's record, and the report was written.
    assert!(run["series"]["replicas"].as_array().is_some_and(|a| !a.is_empty()), "no scaler series in the run");
    let report = std::fs::read_to_string(out.join("demo-report.html")).unwrap();
    assert!(report.contains("<svg") && report.contains("replicas_desired"), "the report lacks the scaler's series");
    assert!(stdout.contains("failed 0") && stdout.contains("report: "), "{stdout}");
    std::fs::remove_dir_all(&out).unwrap();
}

fn series(path: &Path, name: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["series"] == name)
        .map(|v| v["value"].as_f64().unwrap())
        .collect()
}
