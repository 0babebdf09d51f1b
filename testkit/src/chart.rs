//! The Helm chart rendered with the helm that `scripts/fetch-k8s-tools.sh` fetches, and the
//! containers' arguments read back, so that each binary's tests can parse them with its own
//! `clap` parser (`worker/tests/chart_args.rs`, `gateway/tests/chart_args.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::repo_root;

/// The fetched helm, or `None` after saying why the caller skips (`scripts/test.sh` fetches it
/// first, so only a bare `cargo test` skips).
pub fn helm() -> Option<PathBuf> {
    let helm = repo_root().join(".cache/k8s-tools/helm");
    if helm.is_file() {
        Some(helm)
    } else {
        eprintln!("SKIP: {} is missing: run scripts/fetch-k8s-tools.sh (scripts/test.sh does)", helm.display());
        None
    }
}

/// `helm template` of one template of the chart with one values file and `--set` overrides.
pub fn render(helm: &Path, values: &Path, template: &str, set: &[&str]) -> String {
    let chart = repo_root().join("deploy/helm/inference-gateway");
    let mut cmd = Command::new(helm);
    cmd.args(["template", "ig"]).arg(&chart).args(["--namespace", "ml", "-f"]).arg(values);
    cmd.args(["--show-only", template]);
    for s in set {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().expect("running helm");
    assert!(out.status.success(), "helm template {}: {}", values.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 manifest")
}

/// The chart's `ci/*-values.yaml` files, sorted (at least five).
pub fn ci_values() -> Vec<PathBuf> {
    let dir = repo_root().join("deploy/helm/inference-gateway/ci");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the chart's ci folder")
        .map(|e| e.expect("ci entry").path())
        .filter(|p| p.to_string_lossy().ends_with("-values.yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "ci values files: {files:?}");
    files
}

/// One container's `args:` list, with the `terminationGracePeriodSeconds` of its pod (0 if the
/// manifest gave none before it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub args: Vec<String>,
    pub grace_s: u64,
}

/// Every `args:` list of a rendered manifest, in order. The chart writes each argument as one
/// plain or double-quoted scalar on its own `- ` line.
pub fn arg_lists(manifest: &str) -> Vec<Args> {
    let lines: Vec<&str> = manifest.lines().collect();
    let mut lists = Vec::new();
    let mut grace_s = 0;
    for (i, line) in lines.iter().enumerate() {
        if let Some(g) = line.trim().strip_prefix("terminationGracePeriodSeconds: ") {
            grace_s = g.parse().expect("a number of seconds");
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
                args.push(unquote(item.trim()));
            }
            lists.push(Args { args, grace_s });
        }
    }
    lists
}

fn unquote(s: &str) -> String {
    match s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(inner) => inner.replace("\\\"", "\"").replace("\\\\", "\\"),
        None => s.to_owned(),
    }
}

/// `name` followed by `args`, as a parser's `try_parse_from` takes them.
pub fn argv(name: &str, args: &[String]) -> Vec<String> {
    std::iter::once(name.to_owned()).chain(args.iter().cloned()).collect()
}
