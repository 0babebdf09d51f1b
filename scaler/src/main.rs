//! `scaler certs | run | replay`: see the crate's README.

use std::time::Duration;

use anyhow::bail;
use clap::Parser;
use tokio::time::{Instant, MissedTickBehavior};

use scaler::args::{Cli, Cmd, RunArgs};
use scaler::client::{MetricsClient, Target};
use scaler::decision_line;
use scaler::series::{self, SeriesWriter};
use scaler::workers::{WorkerConfig, Workers};

fn main() -> anyhow::Result<()> {
    let opts = Cli::parse_from(cli::args_with_renamed_env(scaler::args::RENAMED_ENV));
    cli::log::init(&opts.log, opts.log_json)?;
    match opts.cmd {
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
            for (t, d) in scaler::replay::replay(&mut ctl, &pts, a.decide.interval, a.start_replicas) {
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
        a.decide.interval,
        a.decide.target,
        a.decide.min,
        a.decide.max,
        t.scale_down,
        t.scale_up,
        b.scale_up.stabilization_window_s,
        b.scale_down.stabilization_window_s,
    );
    // With minReplicas 0 the pool starts empty, as a KEDA ScaledObject with minReplicaCount 0
    // leaves an idle target (and as an HPA leaves it once it scaled it to zero): the controller
    // holds ScaledToZero, so the first demand brings a worker (otherwise zero replicas it did not
    // scale to would disable scaling).
    let start = a.decide.min;
    ctl.scaled_to_zero = start == 0;
    let n = workers.scale_to(start).await;
    println!("scaler: started {n} worker(s): {}", workers.urls().join(" "));
    if n < start {
        workers.shutdown().await;
        bail!("could not start {start} workers (--min {})", a.decide.min);
    }
    let now = series::unix_now();
    out.point(now, series::REPLICAS, f64::from(n));
    out.point(now, series::DESIRED, f64::from(n));

    let mut ticker = tokio::time::interval(a.decide.interval);
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
