//! `loadtest`: drives `/predict` of a worker or gateway and reports throughput, latency
//! percentiles, and every non-200 answer by status and `error_type`.
//!
//! Closed loop (`--concurrency 1,4,16`): that many clients, each sending its next request when the
//! last is answered; one step per value. Open loop (`--rate 200`): requests start on a fixed
//! schedule whatever the latency (no coordinated omission), at most `--max-in-flight` at once;
//! latency is measured from the scheduled start.
#![forbid(unsafe_code)]

mod report;
mod run;

use std::time::Duration;

use clap::Parser;

/// Load generator for `/predict`.
#[derive(Debug, Clone, Parser)]
#[command(name = "loadtest", version, about)]
pub struct Config {
    /// Base URL of a worker or gateway, e.g. `http://127.0.0.1:8080`; requests go to `<url><path>`.
    #[arg(long, env = "LOADTEST_URL")]
    pub url: String,

    /// Path to request (`/predict`, or `/pools/NAME/predict` on a gateway).
    #[arg(long, env = "LOADTEST_PATH", default_value = "/predict")]
    pub path: String,

    /// Closed-loop steps: comma-separated client counts, run one after another.
    #[arg(long, env = "LOADTEST_CONCURRENCY", value_delimiter = ',', default_value = "8")]
    pub concurrency: Vec<usize>,

    /// Open loop instead: requests per second (overrides --concurrency).
    #[arg(long, env = "LOADTEST_RATE")]
    pub rate: Option<f64>,

    /// Open loop: most requests outstanding at once; beyond it a start is counted as `dropped`.
    #[arg(long, env = "LOADTEST_MAX_IN_FLIGHT", default_value_t = 4096)]
    pub max_in_flight: usize,

    /// Length of each step, in seconds.
    #[arg(long, env = "LOADTEST_DURATION_S", default_value_t = 10.0)]
    pub duration_s: f64,

    /// Unmeasured warm-up before each step, in seconds.
    #[arg(long, env = "LOADTEST_WARMUP_S", default_value_t = 1.0)]
    pub warmup_s: f64,

    /// Per-request timeout, in seconds.
    #[arg(long, env = "LOADTEST_TIMEOUT_S", default_value_t = 30.0)]
    pub timeout_s: f64,

    /// File of queries, one a line; by default 56 SNIPS test utterances built in.
    #[arg(long, env = "LOADTEST_QUERIES")]
    pub queries: Option<std::path::PathBuf>,

    /// Print one JSON object per step instead of a table.
    #[arg(long, env = "LOADTEST_JSON")]
    pub json: bool,
}

impl Config {
    fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.duration_s.max(0.1))
    }
    fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup_s.max(0.0))
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_s.max(0.001))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    let queries = match &config.queries {
        Some(path) => std::fs::read_to_string(path)?,
        None => include_str!("../queries.txt").to_owned(),
    };
    let queries: Vec<String> = queries.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
    anyhow::ensure!(!queries.is_empty(), "no queries");
    let target = run::Target::new(&config, &queries)?;
    if !config.json {
        println!("{}", report::Step::header());
    }
    let steps: Vec<run::Mode> = match config.rate {
        Some(rate) => vec![run::Mode::Rate(rate)],
        None => config.concurrency.iter().map(|&c| run::Mode::Clients(c.max(1))).collect(),
    };
    for mode in steps {
        if !config.warmup().is_zero() {
            run::step(&target, mode, config.warmup(), config.max_in_flight).await;
        }
        let step = run::step(&target, mode, config.duration(), config.max_in_flight).await;
        if config.json {
            println!("{}", serde_json::to_string(&step.summary())?);
        } else {
            println!("{}", step.row());
        }
    }
    Ok(())
}
