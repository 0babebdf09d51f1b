//! What the scaler's end-to-end loop tests share: a directory holding the metrics API's
//! certificates and an empty worker file, the gateway serving the external metric over them, the
//! scaler's `run` command against that gateway, and its stop.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// A test's directory: `certs/` made by `scaler certs`, and the worker file the scaler writes and
/// the gateway reads (empty at first).
pub struct Rig {
    pub dir: PathBuf,
    pub certs: PathBuf,
    pub workers_file: PathBuf,
}

impl Rig {
    /// A fresh directory `NAME-PID` under the temporary directory.
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let certs = dir.join("certs");
        let ok = std::process::Command::new(testkit::bin("scaler"))
            .arg("certs")
            .arg(&certs)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success(), "scaler certs");
        let workers_file = dir.join("workers.txt");
        std::fs::write(&workers_file, "").unwrap();
        Self { dir, certs, workers_file }
    }

    /// [`Rig::gateway`] started: the process, its admin address and its metrics API's.
    pub async fn start_gateway(&self, extra: &[&str]) -> (testkit::Server, String, String) {
        let gateway = testkit::Server::start(self.gateway(extra)).await;
        let admin = gateway.announced("admin", Duration::from_secs(5)).await.expect("admin port");
        let api = gateway.announced("metrics API", Duration::from_secs(5)).await.expect("metrics API port");
        (gateway, admin, api)
    }

    /// The gateway on free loopback ports, reading the worker file, its metrics API with this
    /// rig's certificates (`AlwaysAllow`), the demo's windows; `extra` flags after.
    pub fn gateway(&self, extra: &[&str]) -> Command {
        let certs = &self.certs;
        let mut cmd = Command::new(testkit::bin("gateway"));
        cmd.args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .arg("--worker-file")
            .arg(&self.workers_file)
            .args(["--worker-file-interval", "250ms", "--stats-interval", "250ms", "--demand-window", "2s"])
            .args(extra)
            .args(["--metrics-api-listen", "127.0.0.1:0", "--authorization-mode", "AlwaysAllow"])
            .arg("--tls-cert-file")
            .arg(certs.join("server.crt"))
            .arg("--tls-private-key-file")
            .arg(certs.join("server.key"))
            .arg("--client-ca-file")
            .arg(certs.join("ca.crt"))
            .arg("--requestheader-client-ca-file")
            .arg(certs.join("front-proxy-ca.crt"))
            .env("RUST_LOG", "warn");
        cmd
    }

    /// `scaler run` against the metrics API at `api` and the gateway's admin port `admin`:
    /// `run_args` (interval and bounds), `behavior`, its series to `series`, fake workers
    /// started with `worker_args`; quiet, killed on drop.
    pub fn scaler(
        &self,
        api: &str,
        admin: &str,
        run_args: &[&str],
        behavior: &Path,
        series: &Path,
        worker_args: &[String],
    ) -> Command {
        let certs = &self.certs;
        let mut scaler = Command::new(testkit::bin("scaler"));
        scaler
            .arg("run")
            .args(["--metrics-api", api])
            .args(run_args)
            .arg("--ca-file")
            .arg(certs.join("ca.crt"))
            .arg("--cert-file")
            .arg(certs.join("client.crt"))
            .arg("--key-file")
            .arg(certs.join("client.key"))
            .arg("--worker-file")
            .arg(&self.workers_file)
            .args(["--worker-file-interval", "250ms", "--gateway-admin", admin, "--drain-timeout", "5s"])
            .arg("--behavior")
            .arg(behavior)
            .arg("--series")
            .arg(series)
            .arg("--worker-bin")
            .arg(testkit::bin("examples/fake_worker"));
        for a in worker_args {
            scaler.arg("--worker-arg").arg(a);
        }
        scaler
            .current_dir(testkit::repo_root())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true);
        scaler
    }
}

/// The scaler, stopped with SIGTERM (it drains and stops its workers) and waited for.
pub struct Stopper(pub Child);

impl Stopper {
    pub async fn stop(mut self) {
        if let Some(pid) = self.0.id() {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
        let _ = tokio::time::timeout(Duration::from_secs(20), self.0.wait()).await;
    }
}
