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

use clap::Parser;
use tracing_subscriber::EnvFilter;
use worker::Config;
use worker::backend::FakeBackend;
use worker::model::ModelDir;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,ort=warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let model = ModelDir::load(&config.model, config.model_file.as_deref())?;
    let fake = FakeBackend::new(model.labels.len());
    let worker = worker::build(&config, model, move |_| Ok(fake.clone())).await?;
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
