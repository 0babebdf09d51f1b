use clap::Parser;
use worker::Config;

fn main() -> anyhow::Result<()> {
    let config = Config::parse_from(cli::args_with_renamed_env(worker::config::RENAMED_ENV));
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if config.runtime_threads > 0 {
        runtime.worker_threads(config.runtime_threads);
    }
    runtime.enable_all().build()?.block_on(serve(config))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    cli::log::init(&config.log, config.log_json)?;
    worker::run(config).await?;
    Ok(())
}
