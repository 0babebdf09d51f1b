//! `loadtest`: see `loadtest --help` and `loadtest/README.md`.
#![forbid(unsafe_code)]

use std::io::Write as _;

use anyhow::Context as _;
use clap::Parser as _;
use loadtest::config::Config;
use loadtest::summary::Summary;

fn main() -> anyhow::Result<()> {
    let config = Config::parse_from(cli::args_with_renamed_env(loadtest::config::RENAMED_ENV));
    cli::log::init(&config.log, config.log_json)?;
    if let Some(from) = &config.render {
        let text = std::fs::read_to_string(from).with_context(|| format!("reading {}", from.display()))?;
        let summary: Summary =
            serde_json::from_str(&text).with_context(|| format!("{} is not a --summary file", from.display()))?;
        let out = config.report.as_ref().expect("clap requires --report with --render");
        write_report(&summary, out, config.json)?;
        return Ok(());
    }
    loadtest::raise_fd_limit();
    let spec = config.spec(std::env::args().collect())?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let summary = rt.block_on(loadtest::run::run(spec))?;
    let mut stdout = std::io::stdout().lock();
    if config.json {
        stdout.write_all(summary.json_lines().as_bytes())?;
    } else {
        stdout.write_all(summary.table().as_bytes())?;
        for line in summary.footer() {
            writeln!(stdout, "{line}")?;
        }
    }
    stdout.flush()?;
    drop(stdout);
    if let Some(path) = &config.summary {
        std::fs::write(path, serde_json::to_vec_pretty(&summary)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &config.report {
        write_report(&summary, path, config.json)?;
    }
    Ok(())
}

/// Write the report and print its path (to stderr under `--json`, which keeps stdout JSON).
fn write_report(summary: &Summary, path: &std::path::Path, json: bool) -> anyhow::Result<()> {
    std::fs::write(path, loadtest::report::render(summary)).with_context(|| format!("writing {}", path.display()))?;
    let shown = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let line = format!("report: {}", shown.display());
    if json {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
    Ok(())
}
