//! `scaler certs | run | replay`: see the crate's README.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use tokio::time::{Instant, MissedTickBehavior};

use scaler::behavior::{BUILTIN_TARGET, Behavior};
use scaler::client::{MetricsClient, Target};
use scaler::hpa::{Controller, Spec};
use scaler::series::{self, SeriesWriter};
use scaler::workers::{WorkerConfig, Workers};
use scaler::{decision_line, quantity};

#[derive(Parser)]
#[command(
    version,
    about = "A local HPA: reads the gateway's external metric, decides as the HPA does, runs CPU workers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write a CA, the gateway's serving certificate, the scaler's client certificate and a
    /// front-proxy CA into DIR (ca.crt, server.crt/.key, client.crt/.key, front-proxy-ca.crt).
    Certs {
        dir: PathBuf,
        /// The client certificate's CN (the user the gateway sees).
        #[arg(long, default_value = "system:serviceaccount:kube-system:horizontal-pod-autoscaler")]
        client_cn: String,
        /// The client certificate's O (its group).
        #[arg(long, default_value = "system:authenticated")]
        client_org: String,
    },
    /// Scale CPU workers between --min and --max on the gateway's metric.
    Run(Box<RunArgs>),
    /// The decisions over a recorded signal (JSON lines), offline.
    Replay(ReplayArgs),
}

#[derive(Args, Clone)]
struct Decide {
    /// minReplicas; 0 scales to zero as the HPA does with HPAScaleToZero (an External metric). The
    /// scaler starts max(min, 1) workers, as a Deployment starts with replicas 1 under an HPA
    #[arg(long, env = "SCALER_MIN", default_value_t = 1, value_parser = clap::value_parser!(i32).range(0..))]
    min: i32,
    /// maxReplicas
    #[arg(long, env = "SCALER_MAX", default_value_t = 4, value_parser = clap::value_parser!(i32).range(1..))]
    max: i32,
    /// target.averageValue (a Kubernetes quantity); the chart's default
    #[arg(long, env = "SCALER_TARGET", default_value = BUILTIN_TARGET)]
    target: String,
    /// --horizontal-pod-autoscaler-tolerance (both directions; the behavior's scaleUp.tolerance and
    /// scaleDown.tolerance win where set)
    #[arg(long, env = "SCALER_TOLERANCE", default_value_t = 0.1)]
    tolerance: f64,
    /// The HPA's `behavior` (YAML: scaleUp, scaleDown); default: the chart's
    #[arg(long, env = "SCALER_BEHAVIOR")]
    behavior: Option<PathBuf>,
    /// The metric's name
    #[arg(long, env = "SCALER_METRIC", default_value = "gateway_pool_signal")]
    metric: String,
}

impl Decide {
    fn controller(&self) -> anyhow::Result<Controller> {
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

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    decide: Decide,
    /// The gateway's metrics API (`https://HOST:PORT`, as printed by `metrics API listening on`)
    #[arg(long, env = "SCALER_METRICS_API")]
    metrics_api: String,
    /// CA that signed the metrics API's serving certificate
    #[arg(long, env = "SCALER_CA_FILE")]
    ca_file: PathBuf,
    /// The scaler's client certificate (PEM)
    #[arg(long, env = "SCALER_CERT_FILE")]
    cert_file: PathBuf,
    /// Its key (PEM)
    #[arg(long, env = "SCALER_KEY_FILE")]
    key_file: PathBuf,
    #[arg(long, env = "SCALER_NAMESPACE", default_value = "default")]
    namespace: String,
    /// The pool: the metric's selector is `pool=NAME`, and the worker file's lines name it
    #[arg(long, env = "SCALER_POOL", default_value = "default")]
    pool: String,
    /// The HPA's sync period (kube-controller-manager's --horizontal-pod-autoscaler-sync-period)
    #[arg(long, env = "SCALER_INTERVAL", default_value = "15s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// The gateway's --worker-file (the scaler owns it)
    #[arg(long, env = "SCALER_WORKER_FILE")]
    worker_file: PathBuf,
    /// The gateway's --worker-file-interval
    #[arg(long, env = "SCALER_WORKER_FILE_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    worker_file_interval: Duration,
    /// The gateway's admin URL: a leaving worker gets SIGTERM once /v1/pools no longer lists it
    #[arg(long, env = "SCALER_GATEWAY_ADMIN")]
    gateway_admin: Option<String>,
    /// The worker binary
    #[arg(long, env = "SCALER_WORKER_BIN", default_value = "target/release/worker")]
    worker_bin: PathBuf,
    /// A worker argument (repeatable; `--listen 127.0.0.1:0` is added)
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    /// Place each worker on a device of its own, adding `--device D`: a comma-separated list
    /// (`cuda:0,cuda:1`), or `gpus` for every GPU of this host (`CUDA_VISIBLE_DEVICES`, else the
    /// driver's count). A worker starts only on a free device: at most one worker per GPU.
    #[arg(long, env = "SCALER_WORKER_DEVICES")]
    worker_devices: Option<String>,
    /// Worker logs: DIR/worker-N.log
    #[arg(long, env = "SCALER_WORKER_LOG_DIR")]
    worker_log_dir: Option<PathBuf>,
    /// How long a SIGTERMed worker may drain before SIGKILL
    #[arg(long, env = "SCALER_DRAIN_TIMEOUT", default_value = "40s", value_parser = humantime::parse_duration)]
    drain_timeout: Duration,
    /// JSON lines for loadtest's report (`loadtest --series FILE`)
    #[arg(long, env = "SCALER_SERIES")]
    series: Option<PathBuf>,
    /// Stop (and stop the workers) after this long; default: until SIGTERM or Ctrl-C
    #[arg(long, env = "SCALER_DURATION", value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
}

#[derive(Args)]
struct ReplayArgs {
    #[command(flatten)]
    decide: Decide,
    /// JSON lines with `t` (s) or `t_ms`, and the metric (a field of that name, or series lines)
    input: PathBuf,
    /// The sync period
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Replicas at the start
    #[arg(long, default_value_t = 1)]
    start_replicas: i32,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Certs { dir, client_cn, client_org } => {
            let f = scaler::certs::generate(&dir, &client_cn, &client_org)?;
            println!("ca: {}", f.ca.display());
            println!("server: {} {}", f.server_cert.display(), f.server_key.display());
            println!("client: {} {} (CN {client_cn}, O {client_org})", f.client_cert.display(), f.client_key.display());
            println!("front-proxy ca: {}", f.front_proxy_ca.display());
            Ok(())
        }
        Cmd::Replay(a) => {
            let mut ctl = a.decide.controller()?;
            let pts = scaler::replay::read_points(&a.input, &a.decide.metric)?;
            if pts.is_empty() {
                bail!("{}: no {} values", a.input.display(), a.decide.metric);
            }
            let target = ctl.spec.target_milli;
            for (t, d) in scaler::replay::replay(&mut ctl, &pts, a.interval, a.start_replicas) {
                println!("{}", decision_line(&format!("t={t:>6.1}s"), &d, target));
            }
            Ok(())
        }
        Cmd::Run(a) => tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(run(*a)),
    }
}

async fn run(a: RunArgs) -> anyhow::Result<()> {
    let mut ctl = a.decide.controller()?;
    let target_milli = ctl.spec.target_milli;
    let client = MetricsClient::new(
        Target {
            base: a.metrics_api.clone(),
            namespace: a.namespace.clone(),
            metric: a.decide.metric.clone(),
            selector: format!("pool={}", a.pool),
        },
        &a.ca_file,
        &a.cert_file,
        &a.key_file,
        Duration::from_secs(5),
    )?;
    if let Some(dir) = &a.worker_log_dir {
        std::fs::create_dir_all(dir)?;
    }
    let mut workers = Workers::new(WorkerConfig {
        bin: a.worker_bin.clone(),
        args: a.worker_args.clone(),
        file: a.worker_file.clone(),
        pool: a.pool.clone(),
        file_interval: a.worker_file_interval,
        gateway_admin: a.gateway_admin.clone(),
        log_dir: a.worker_log_dir.clone(),
        start_timeout: Duration::from_secs(60),
        drain_timeout: a.drain_timeout,
        devices: match a.worker_devices.as_deref() {
            None => Vec::new(),
            Some("gpus") => {
                let gpus = scaler::workers::host_gpus();
                anyhow::ensure!(!gpus.is_empty(), "--worker-devices gpus: this host has no GPU that the driver lists");
                gpus
            }
            Some(list) => list.split(',').map(|d| d.trim().to_owned()).filter(|d| !d.is_empty()).collect(),
        },
    })?;
    let mut out = SeriesWriter::open(a.series.as_deref())?;
    let b = &ctl.spec.behavior;
    let t = ctl.spec.tolerances();
    println!(
        "scaler: {} {}{} every {:?}; target averageValue {}; replicas {}..{}; tolerance down {} up {}; scaleUp window {}s, scaleDown window {}s",
        a.decide.metric,
        a.metrics_api,
        client.target().path(),
        a.interval,
        a.decide.target,
        a.decide.min,
        a.decide.max,
        t.scale_down,
        t.scale_up,
        b.scale_up.stabilization_window_s,
        b.scale_down.stabilization_window_s,
    );
    // A Deployment under an HPA starts with its default 1 replica even with minReplicas 0; the HPA
    // takes it to zero (and may bring it back: ScaledToZero).
    let start = a.decide.min.max(1);
    let n = workers.scale_to(start).await;
    println!("scaler: started {n} worker(s): {}", workers.urls().join(" "));
    if n < start {
        workers.shutdown().await;
        bail!("could not start {start} workers (--min {})", a.decide.min);
    }
    let now = series::unix_now();
    out.point(now, series::REPLICAS, f64::from(n));
    out.point(now, series::DESIRED, f64::from(n));

    let mut ticker = tokio::time::interval(a.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let stop_at = a.duration.map(|d| Instant::now() + d);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = async { match stop_at { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => break,
        }
        for l in workers.reap() {
            println!("scaler: worker-{} {} left: {}", l.n, l.url, l.outcome);
        }
        let current = workers.count();
        let metric = client.get().await;
        let err;
        let m = match &metric {
            Ok(v) => Ok(v.as_slice()),
            Err(e) => {
                err = format!("{e:#}");
                Err(err.as_str())
            }
        };
        let d = ctl.reconcile(Instant::now(), current, m);
        let t = series::unix_now();
        println!("{}", decision_line(&series::clock(t), &d, target_milli));
        if let Some(mv) = d.metric_milli {
            out.point(t, series::METRIC, mv as f64 / 1000.0);
        }
        out.point(t, series::DESIRED, f64::from(d.desired));
        if d.rescale() {
            let reached = workers.scale_to(d.desired).await;
            println!("scaler: {} -> {reached} worker(s): {}", d.current, workers.urls().join(" "));
            out.point(series::unix_now(), series::REPLICAS, f64::from(reached));
        }
    }
    println!("scaler: stopping: every worker leaves the file, drains and exits");
    for l in workers.shutdown().await {
        println!("scaler: worker-{} {} left: {}", l.n, l.url, l.outcome);
    }
    Ok(())
}
