use clap::Parser;
use tracing_subscriber::EnvFilter;
use worker::Config;

fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if config.runtime_threads > 0 {
        runtime.worker_threads(config.runtime_threads);
    }
    runtime.enable_all().build()?.block_on(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,ort=warn"));
    let subscriber = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if config.log_json {
        subscriber.json().init();
    } else {
        subscriber.init();
    }
    worker::run(config).await?;
    Ok(())
}
