//! The Helm chart's worker arguments are the worker's: `deploy/helm/inference-gateway` is
//! rendered with the helm that `scripts/fetch-k8s-tools.sh` fetches, for every values file of
//! its `ci/` folder, and each pool's worker arguments are parsed by `worker::Config`, the `clap`
//! parser behind `worker --help`.
//!
//! Skips, saying why, only when helm has not been fetched (`scripts/test.sh` fetches it first).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use clap::Parser;
use worker::config::Device;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn helm() -> Option<PathBuf> {
    let helm = root().join(".cache/k8s-tools/helm");
    if helm.is_file() {
        Some(helm)
    } else {
        eprintln!("SKIP: {} is missing: run scripts/fetch-k8s-tools.sh (scripts/test.sh does)", helm.display());
        None
    }
}

fn render(helm: &Path, values: &Path, set: &[&str]) -> String {
    let chart = root().join("deploy/helm/inference-gateway");
    let mut cmd = Command::new(helm);
    cmd.args(["template", "ig"]).arg(&chart).args(["--namespace", "ml", "-f"]).arg(values);
    cmd.args(["--show-only", "templates/workers.yaml"]);
    for s in set {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().expect("running helm");
    assert!(out.status.success(), "helm template {}: {}", values.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 manifest")
}

/// Every `args:` list of a rendered manifest with the grace period of its pod, in order. The
/// chart writes each argument as one plain or double-quoted scalar on its own `- ` line.
fn arg_lists(manifest: &str) -> Vec<(Vec<String>, u64)> {
    let lines: Vec<&str> = manifest.lines().collect();
    let mut lists = Vec::new();
    let mut grace = 0;
    for (i, line) in lines.iter().enumerate() {
        if let Some(g) = line.trim().strip_prefix("terminationGracePeriodSeconds: ") {
            grace = g.parse().expect("a number of seconds");
        }
        if line.trim() == "args:" {
            let item_indent = line.len() - line.trim_start().len() + 2;
            let mut args = Vec::new();
            for l in &lines[i + 1..] {
                let indent = l.len() - l.trim_start().len();
                let Some(item) = l.trim_start().strip_prefix("- ") else { break };
                if indent != item_indent {
                    break;
                }
                let item = item.trim();
                args.push(match item.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
                    Some(inner) => inner.replace("\\\"", "\"").replace("\\\\", "\\"),
                    None => item.to_owned(),
                });
            }
            lists.push((args, grace));
        }
    }
    lists
}

#[test]
fn the_charts_worker_arguments_parse_with_the_workers_parser() {
    let Some(helm) = helm() else { return };
    let dir = root().join("deploy/helm/inference-gateway/ci");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the chart's ci folder")
        .map(|e| e.expect("ci entry").path())
        .filter(|p| p.to_string_lossy().ends_with("-values.yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "ci values files: {files:?}");
    let (mut gpu, mut cpu) = (0, 0);
    for values in files {
        let name = values.file_name().unwrap().to_string_lossy().into_owned();
        let lists = arg_lists(&render(&helm, &values, &[]));
        assert!(!lists.is_empty(), "{name}: worker Deployments");
        for (args, grace) in lists {
            let config =
                worker::Config::try_parse_from(std::iter::once("worker".to_owned()).chain(args.iter().cloned()))
                    .unwrap_or_else(|e| panic!("{name}: the worker refuses the chart's arguments {args:?}:\n{e}"));
            assert_eq!(config.listen.to_string(), "0.0.0.0:8000", "{name}");
            assert_eq!(config.model, PathBuf::from("/opt/model"), "{name}");
            // The pod outlives the worker's whole drain: requests, then as long for answers.
            assert!(
                Duration::from_secs(grace) > 2 * config.drain_timeout,
                "{name}: grace {grace}s, drain {:?}",
                config.drain_timeout
            );
            match config.device {
                Device::Cuda(0) => gpu += 1,
                Device::Cpu if name.starts_with("cpu-only") => cpu += 1,
                other => panic!("{name}: device {other:?}"),
            }
        }
    }
    assert!(gpu > 0 && cpu > 0, "GPU pools {gpu}, CPU pools {cpu}");
}

#[test]
fn a_flag_the_worker_lacks_is_caught() {
    let Some(helm) = helm() else { return };
    let values = root().join("deploy/helm/inference-gateway/ci/default-values.yaml");
    let (args, _) = &arg_lists(&render(&helm, &values, &["workerDefaults.extraArgs={--max-queries=16}"]))[0];
    let config = worker::Config::try_parse_from(std::iter::once("worker".to_owned()).chain(args.iter().cloned()))
        .expect("parses");
    assert_eq!(config.max_queries, 16);
    let (args, _) = &arg_lists(&render(&helm, &values, &["workerDefaults.extraArgs={--no-such-flag}"]))[0];
    assert!(worker::Config::try_parse_from(std::iter::once("worker".to_owned()).chain(args.iter().cloned())).is_err());
}
