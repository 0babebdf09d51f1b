//! `gateway --listen 127.0.0.1:0 --worker http://127.0.0.1:8001 ...`; see `--help`.
#![forbid(unsafe_code)]

use anyhow::Context;
use clap::Parser;

/// mimalloc instead of glibc malloc: every proxied request allocates and frees a few dozen small
/// blocks (headers, buffers, futures), and glibc's malloc/free were a visible share of the
/// gateway's CPU on the proxy path.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let config = gateway::Config::parse_from(cli::args_with_renamed_env(gateway::RENAMED_ENV));
    cli::log::init(&config.log, config.log_json)?;
    if config.runtime == gateway::Runtime::PerCore {
        return gateway::run_per_core(config).context("gateway failed");
    }
    let threads = config.runtime_threads();
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    let runtime = builder.enable_all().build().context("starting the runtime")?;
    tracing::debug!(threads, "runtime started");
    runtime.block_on(gateway::run(config)).context("gateway failed")
}
