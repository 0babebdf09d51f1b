use anyhow::Context as _;
use clap::Parser;
use tracing_subscriber::EnvFilter;
use worker::Config;

fn main() -> anyhow::Result<()> {
    let config = Config::parse_from(listener::args_with_renamed_env(worker::config::RENAMED_ENV));
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if config.runtime_threads > 0 {
        runtime.worker_threads(config.runtime_threads);
    }
    runtime.enable_all().build()?.block_on(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&config.log).context("bad --log filter")?;
    let subscriber = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if config.log_json {
        subscriber.json().init();
    } else {
        subscriber.init();
    }
    worker::run(config).await?;
    Ok(())
}
