//! The Helm chart's gateway arguments are the gateway's: `deploy/helm/inference-gateway` is
//! rendered with the helm that `scripts/fetch-k8s-tools.sh` fetches, for every values file of
//! its `ci/` folder, and the gateway container's arguments are parsed by `gateway::Config`, the
//! `clap` parser behind `gateway --help`. A flag the chart renders and the binary lacks (or a
//! value it refuses) fails here, not in a cluster.
//!
//! Skips, saying why, only when helm has not been fetched (`scripts/test.sh` fetches it first).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;

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

/// `helm template` of one template of the chart with one ci values file.
fn render(helm: &Path, values: &Path, template: &str, set: &[&str]) -> String {
    let chart = root().join("deploy/helm/inference-gateway");
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

/// Every `args:` list of a rendered manifest, in order. The chart writes each argument as one
/// plain or double-quoted scalar on its own `- ` line.
fn arg_lists(manifest: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = manifest.lines().collect();
    let mut lists = Vec::new();
    for (i, line) in lines.iter().enumerate() {
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
            lists.push(args);
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

fn ci_values() -> Vec<PathBuf> {
    let dir = root().join("deploy/helm/inference-gateway/ci");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the chart's ci folder")
        .map(|e| e.expect("ci entry").path())
        .filter(|p| p.to_string_lossy().ends_with("-values.yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "ci values files: {files:?}");
    files
}

fn parse(args: &[String]) -> Result<gateway::Config, clap::Error> {
    gateway::Config::try_parse_from(std::iter::once("gateway".to_owned()).chain(args.iter().cloned()))
}

#[test]
fn the_charts_gateway_arguments_parse_with_the_gateways_parser() {
    let Some(helm) = helm() else { return };
    for values in ci_values() {
        let name = values.file_name().unwrap().to_string_lossy().into_owned();
        let manifest = render(&helm, &values, "templates/gateway-deployment.yaml", &[]);
        let lists = arg_lists(&manifest);
        assert_eq!(lists.len(), 1, "{name}: one gateway container");
        let args = &lists[0];
        let config =
            parse(args).unwrap_or_else(|e| panic!("{name}: the gateway refuses the chart's arguments {args:?}:\n{e}"));
        assert_eq!(config.listen, "0.0.0.0:8080".parse::<SocketAddr>().unwrap(), "{name}");
        assert_eq!(config.admin_listen, "0.0.0.0:9090".parse::<SocketAddr>().unwrap(), "{name}");
        assert_eq!(config.target_gpu, 70.0, "{name}: --target-gpu is in percent");
        assert_eq!(config.target_queue, 32.0, "{name}");
        assert_eq!(config.pool_namespace, "ml", "{name}");
        assert!(!config.k8s_services.is_empty(), "{name}: pools come from their Services");
        for s in &config.k8s_services {
            assert!(s.contains("=ml/ig-inference-gateway-worker-") && s.ends_with(":http"), "{name}: {s}");
        }
        let api = !name.starts_with("keda") && !name.starts_with("prometheus-adapter");
        assert_eq!(
            config.metrics_api.metrics_api_listen.is_some(),
            api,
            "{name}: the metrics API only when the chart owns the APIService"
        );
        if api {
            assert!(
                config.metrics_api.tls_cert_file.is_some() && config.metrics_api.tls_private_key_file.is_some(),
                "{name}"
            );
        }
    }
}

#[test]
fn extra_arguments_reach_the_gateway_and_a_wrong_flag_is_caught() {
    let Some(helm) = helm() else { return };
    let values = root().join("deploy/helm/inference-gateway/ci/default-values.yaml");
    let manifest =
        render(&helm, &values, "templates/gateway-deployment.yaml", &["gateway.extraArgs={--eject-after=3}"]);
    let args = &arg_lists(&manifest)[0];
    assert_eq!(parse(args).expect("parses").eject_after, 3);
    // The parser is strict: the test would catch a flag the gateway does not have.
    let manifest =
        render(&helm, &values, "templates/gateway-deployment.yaml", &["gateway.extraArgs={--no-such-flag=1}"]);
    assert!(parse(&arg_lists(&manifest)[0]).is_err());
}
