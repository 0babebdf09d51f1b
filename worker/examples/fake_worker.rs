//! The worker with the fake backend in place of ONNX Runtime: the whole host side (listener,
//! HTTP, parsing, admission, tokenizing, batching, answers) with no inference, so its CPU per
//! request is the worker's own host cost. `benches/host_cost.sh` builds it for two revisions and
//! compares them; on a GPU machine it tells the host's share from the GPU's.
//!
//!   cargo build --release -p worker --example fake_worker
//!   target/release/examples/fake_worker --listen 127.0.0.1:0 [worker flags...]
//!
//! Takes the worker's flags (ONNX Runtime's are ignored); prints `listening on http://ADDR`;
//! stops on SIGTERM or SIGINT, draining like the worker.
//!
//! `--batch-base-time T --batch-row-time R` make every batch take `T + R x rows` (slept on the
//! backend thread): a GPU-like worker of known capacity, `B / (T + R x B)` queries per second per
//! session with batches of `B` rows, on any machine (the signal's calibration test and
//! `benches/signal_calibration.sh` run several).

use std::time::Duration;

use clap::Parser;
use worker::Config;
use worker::backend::FakeBackend;
use worker::model::ModelDir;

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    worker: Config,
    /// Time every batch takes, whatever its size (`20ms`).
    #[arg(long, default_value = "0s", value_parser = cli::parse_duration, help_heading = "Fake backend")]
    batch_base_time: Duration,
    /// Time each query adds to its batch (`1ms`).
    #[arg(long, default_value = "0s", value_parser = cli::parse_duration, help_heading = "Fake backend")]
    batch_row_time: Duration,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = cli::args_with_renamed_env(worker::config::RENAMED_ENV);
    let Args { worker: config, batch_base_time, batch_row_time } = Args::parse_from(args);
    cli::log::init(&config.log, config.log_json)?;
    let model = ModelDir::load(&config.model, config.model_file.as_deref())?;
    let fake = FakeBackend::new(model.labels.len()).with_cost(batch_base_time, batch_row_time);
    let worker = worker::build(&config, model, move |_| Ok(fake.clone())).await?;
    worker.calibrate(&config).await;
    // The worker's own deep accept queue (`listener::bind`), not tokio's 1024: a burst of ~900
    // connects overflowed that one, and the overflow waited a second for the SYN's retransmit.
    let listener = listener::bind(config.listen)?;
    println!("listening on http://{}", listener.local_addr()?);
    worker
        .serve(listener, async {
            use tokio::signal::unix::{SignalKind, signal};
            let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        })
        .await?;
    Ok(())
}
