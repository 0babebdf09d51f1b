//! The command line of `scaler certs | run | replay`: one clap struct per subcommand, every flag
//! also a `SCALER_*` variable (see the `cli` crate for the conventions).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};

use crate::behavior::{BUILTIN_TARGET, Behavior};
use crate::hpa::{Controller, Spec};
use crate::quantity;

/// The `--help` headings, one per concern.
mod heading {
    pub const DECISION: &str = "Decision (the HPA's spec)";
    pub const METRIC: &str = "Metrics API";
    pub const WORKERS: &str = "Workers";
    pub const RUN: &str = "Run";
    pub const CERTS: &str = "Certificates";
    pub const LOGGING: &str = "Logging";
}

/// Variables read below the flags' own (`scaler::args::RENAMED_ENV`).
pub const RENAMED_ENV: &[cli::Renamed] = &[cli::Renamed::conventional("RUST_LOG", "SCALER_LOG", &["--log"])];

#[derive(Debug, Parser)]
#[command(
    name = "scaler",
    version,
    about = "A local HPA: reads the gateway's external metric, decides as the HPA does, runs CPU workers"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,

    /// Log filter (`tracing` env-filter syntax), as the gateway's; `RUST_LOG` is read when neither
    /// the flag nor `SCALER_LOG` is set. Logs go to stderr; the decisions to stdout.
    #[arg(long, global = true, env = "SCALER_LOG", default_value = "info", help_heading = heading::LOGGING)]
    pub log: String,

    /// Log as JSON lines.
    #[arg(long, global = true, env = "SCALER_LOG_JSON", help_heading = heading::LOGGING)]
    pub log_json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Write a CA, the gateway's serving certificate, the scaler's client certificate and a
    /// front-proxy CA into DIR (ca.crt, server.crt/.key, client.crt/.key, front-proxy-ca.crt).
    Certs {
        dir: PathBuf,
        /// The client certificate's CN (the user the gateway sees).
        #[arg(
            long,
            env = "SCALER_CLIENT_CN",
            default_value = "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
            help_heading = heading::CERTS
        )]
        client_cn: String,
        /// The client certificate's O (its group).
        #[arg(long, env = "SCALER_CLIENT_ORG", default_value = "system:authenticated", help_heading = heading::CERTS)]
        client_org: String,
    },
    /// Scale CPU workers between --min and --max on the gateway's metric.
    Run(Box<RunArgs>),
    /// The decisions over a recorded signal (JSON lines), offline.
    Replay(ReplayArgs),
}

/// What the HPA's spec says: replicas, target, tolerance, behavior, metric.
#[derive(Debug, Args, Clone)]
pub struct Decide {
    /// minReplicas; 0 scales to zero as the HPA does with HPAScaleToZero (an External metric).
    /// The scaler starts `min` workers: with 0 the pool starts empty and ScaledToZero, as KEDA
    /// leaves an idle target with minReplicaCount 0, and the first demand brings a worker
    #[arg(long, env = "SCALER_MIN", default_value_t = 1, value_parser = clap::value_parser!(i32).range(0..), help_heading = heading::DECISION)]
    pub min: i32,
    /// maxReplicas
    #[arg(long, env = "SCALER_MAX", default_value_t = 4, value_parser = clap::value_parser!(i32).range(1..), help_heading = heading::DECISION)]
    pub max: i32,
    /// target.averageValue (a Kubernetes quantity); the chart's default
    #[arg(long, env = "SCALER_TARGET", default_value = BUILTIN_TARGET, help_heading = heading::DECISION)]
    pub target: String,
    /// --horizontal-pod-autoscaler-tolerance (both directions; the behavior's scaleUp.tolerance and
    /// scaleDown.tolerance win where set)
    #[arg(long, env = "SCALER_TOLERANCE", default_value_t = 0.1, help_heading = heading::DECISION)]
    pub tolerance: f64,
    /// The HPA's `behavior` (YAML: scaleUp, scaleDown); default: the chart's
    #[arg(long, env = "SCALER_BEHAVIOR", help_heading = heading::DECISION)]
    pub behavior: Option<PathBuf>,
    /// The metric's name
    #[arg(long, env = "SCALER_METRIC", default_value = "gateway_pool_signal", help_heading = heading::DECISION)]
    pub metric: String,
    /// The HPA's sync period (kube-controller-manager's --horizontal-pod-autoscaler-sync-period)
    #[arg(long, env = "SCALER_INTERVAL", default_value = "15s", value_parser = cli::parse_duration, help_heading = heading::DECISION)]
    pub interval: Duration,
}

impl Decide {
    /// The controller these flags describe, or what is wrong with them.
    pub fn controller(&self) -> anyhow::Result<Controller> {
        if self.min > self.max {
            bail!("--min {} is above --max {}", self.min, self.max);
        }
        if !(self.tolerance >= 0.0 && self.tolerance.is_finite()) {
            bail!("--tolerance {}: must be 0 or more", self.tolerance);
        }
        let target_milli = quantity::milli_value(&self.target).context("--target")?;
        if target_milli <= 0 {
            bail!("--target {}: must be above zero", self.target);
        }
        let behavior = match &self.behavior {
            Some(p) => Behavior::from_file(p)?,
            None => Behavior::builtin(),
        };
        Ok(Controller::new(Spec {
            min_replicas: self.min,
            max_replicas: self.max,
            target_milli,
            tolerance: self.tolerance,
            behavior,
            metric_name: self.metric.clone(),
        }))
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub decide: Decide,
    /// The gateway's metrics API (`https://HOST:PORT`, as printed by `metrics API listening on`)
    #[arg(long, env = "SCALER_METRICS_API", help_heading = heading::METRIC)]
    pub metrics_api: String,
    /// CA that signed the metrics API's serving certificate
    #[arg(long, env = "SCALER_CA_FILE", help_heading = heading::METRIC)]
    pub ca_file: PathBuf,
    /// The scaler's client certificate (PEM)
    #[arg(long, env = "SCALER_CERT_FILE", help_heading = heading::METRIC)]
    pub cert_file: PathBuf,
    /// Its key (PEM)
    #[arg(long, env = "SCALER_KEY_FILE", help_heading = heading::METRIC)]
    pub key_file: PathBuf,
    /// The namespace whose metric is read (the gateway's --pool-namespace)
    #[arg(long, env = "SCALER_NAMESPACE", default_value = "default", help_heading = heading::METRIC)]
    pub namespace: String,
    /// The pool: the metric's selector is `pool=NAME`, and the worker file's lines name it
    #[arg(long, env = "SCALER_POOL", default_value = "default", help_heading = heading::METRIC)]
    pub pool: String,
    /// The gateway's --worker-file (the scaler owns it)
    #[arg(long, env = "SCALER_WORKER_FILE", help_heading = heading::WORKERS)]
    pub worker_file: PathBuf,
    /// The gateway's --worker-file-interval
    #[arg(long, env = "SCALER_WORKER_FILE_INTERVAL", default_value = "1s", value_parser = cli::parse_duration, help_heading = heading::WORKERS)]
    pub worker_file_interval: Duration,
    /// The gateway's admin URL: a leaving worker gets SIGTERM once /v1/pools no longer lists it
    #[arg(long, env = "SCALER_GATEWAY_ADMIN", help_heading = heading::WORKERS)]
    pub gateway_admin: Option<String>,
    /// The worker binary
    #[arg(long, env = "SCALER_WORKER_BIN", default_value = "target/release/worker", help_heading = heading::WORKERS)]
    pub worker_bin: PathBuf,
    /// A worker argument (repeatable; `--listen 127.0.0.1:0` is added). No variable: arguments
    /// start with `-` and may hold any separator.
    #[arg(long = "worker-arg", allow_hyphen_values = true, help_heading = heading::WORKERS)]
    pub worker_args: Vec<String>,
    /// Place each worker on a device of its own, adding `--device D`: a comma-separated list
    /// (`cuda:0,cuda:1`), or `gpus` for every GPU of this host (`CUDA_VISIBLE_DEVICES`, else the
    /// driver's count). A worker starts only on a free device: at most one worker per GPU.
    #[arg(long, env = "SCALER_WORKER_DEVICES", help_heading = heading::WORKERS)]
    pub worker_devices: Option<String>,
    /// Worker logs: DIR/worker-N.log
    #[arg(long, env = "SCALER_WORKER_LOG_DIR", help_heading = heading::WORKERS)]
    pub worker_log_dir: Option<PathBuf>,
    /// How long a SIGTERMed worker may drain before SIGKILL
    #[arg(long, env = "SCALER_DRAIN_TIMEOUT", default_value = "40s", value_parser = cli::parse_duration, help_heading = heading::WORKERS)]
    pub drain_timeout: Duration,
    /// JSON lines for loadtest's report (`loadtest --series FILE`)
    #[arg(long, env = "SCALER_SERIES", help_heading = heading::RUN)]
    pub series: Option<PathBuf>,
    /// Stop (and stop the workers) after this long; default: until SIGTERM or Ctrl-C
    #[arg(long, env = "SCALER_DURATION", value_parser = cli::parse_duration, help_heading = heading::RUN)]
    pub duration: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub decide: Decide,
    /// JSON lines with `t` (s) or `t_ms`, and the metric (a field of that name, or series lines)
    pub input: PathBuf,
    /// Replicas at the start
    #[arg(long, env = "SCALER_START_REPLICAS", default_value_t = 1, help_heading = heading::RUN)]
    pub start_replicas: i32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_scalers_flags_keep_the_conventions() {
        // `--worker-arg` has no variable: its values start with `-` and may hold any separator.
        let rules =
            cli::check::Rules { prefix: "SCALER", no_env: &["worker-arg"], bare_seconds: &[], renamed: RENAMED_ENV };
        let violations = cli::check::violations(Cli::command(), &rules);
        assert!(violations.is_empty(), "{}", violations.join("\n"));
    }

    #[test]
    fn run_and_replay_share_the_decisions_flags() {
        let run =
            Cli::try_parse_from(["scaler", "replay", "x.jsonl", "--interval", "30s", "--max", "3", "--log", "debug"])
                .unwrap();
        let Cmd::Replay(a) = run.cmd else { panic!("replay") };
        assert_eq!((a.decide.interval, a.decide.max), (Duration::from_secs(30), 3));
        assert_eq!(run.log, "debug");
        assert!(Cli::try_parse_from(["scaler", "replay", "x.jsonl", "--interval", "30"]).is_err(), "a unit is needed");
    }
}
