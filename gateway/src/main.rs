//! `gateway --listen 127.0.0.1:0 --worker http://127.0.0.1:8001 ...`; see `--help`.
#![forbid(unsafe_code)]

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = gateway::Config::parse();
    let filter = EnvFilter::try_new(&config.log).context("bad --log filter")?;
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if config.log_json {
        fmt.json().init();
    } else {
        fmt.init();
    }
    gateway::run(config).await.context("gateway failed")
}
