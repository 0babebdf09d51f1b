//! The scaler places each worker on a device of its own: `--device D` for a free one, none
//! beyond the devices there are, and a device is free again once its worker has exited.

use std::time::Duration;

use scaler::workers::{WorkerConfig, Workers};

/// A stand-in worker: announces an address, writes its `--device` to its log, waits for SIGTERM.
fn fake_worker(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("fake-worker.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --device ] && echo \"device $2\" >&2; shift; done\n\
         echo \"listening on http://127.0.0.1:$$\"\nexec sleep 60\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn devices_in_logs(dir: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "log").then(|| std::fs::read_to_string(p).ok()).flatten()
        })
        .flat_map(|t| t.lines().filter_map(|l| l.strip_prefix("device ").map(str::to_owned)).collect::<Vec<_>>())
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn one_worker_per_device_and_a_device_is_reused_once_its_worker_is_gone() {
    let dir = tempfile_dir();
    let cfg = WorkerConfig {
        bin: fake_worker(&dir),
        args: Vec::new(),
        file: dir.join("workers.txt"),
        pool: "default".into(),
        file_interval: Duration::from_millis(10),
        gateway_admin: None,
        log_dir: Some(dir.clone()),
        start_timeout: Duration::from_secs(10),
        drain_timeout: Duration::from_secs(5),
        devices: vec!["cuda:0".into(), "cuda:1".into()],
    };
    let mut workers = Workers::new(cfg).unwrap();
    assert_eq!(workers.scale_to(3).await, 2, "two devices: two workers, not three");
    assert_eq!(devices_in_logs(&dir), ["cuda:0", "cuda:1"]);
    assert_eq!(workers.scale_to(1).await, 1);
    // The newest (cuda:1) leaves; until it has exited its device is not free.
    assert_eq!(workers.scale_to(2).await, 1, "cuda:1 is still held by the draining worker");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while workers.leaving() > 0 || !workers.reap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the worker never left");
        workers.reap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(workers.scale_to(2).await, 2);
    assert_eq!(devices_in_logs(&dir), ["cuda:0", "cuda:1", "cuda:1"]);
    workers.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("scaler-devices-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
