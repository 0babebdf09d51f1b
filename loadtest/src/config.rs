//! The command line: one clap struct, every flag also settable by an environment variable.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use crate::Error;
use crate::engine::{ClosedStep, Load, Plan};
use crate::profile::{self, Profile, fmt_rate};
use crate::progress::When;
use crate::run::{PhaseInfo, RunSpec};
use crate::signal::Source;
use crate::summary::TargetInfo;
use crate::target::{self, Http, Shape, Spec, Target};

/// Parse a duration: `250ms`, `10s`, `1.5s`, `2m`, `1h 30m` (`humantime`, the one duration syntax
/// of the project's binaries; a unit is required, except for `0`).
pub use cli::parse_duration;

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("not a number of seconds: {s:?}"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("not a number of seconds: {s:?}"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// The `--help` headings, one per concern.
mod heading {
    pub const TARGET: &str = "Target";
    pub const LOAD: &str = "Load";
    pub const SIGNAL: &str = "Gateway signal";
    pub const OUTPUT: &str = "Output";
    pub const LOGGING: &str = "Logging";
}

/// Load generator for `/predict` of a worker or gateway (or any HTTP server).
///
/// Closed loop (`-c 1,8,32`): that many clients, each sending its next request when its last is
/// answered; one step per value. Open loop (`--rate PROFILE`): requests are due on a schedule
/// whatever the server does, and each one's latency runs from its due time (no coordinated
/// omission). Profiles: `200`, `ramp(0, 500, 30s)`, `steps(10 20 40 20 10, 15s)`,
/// `sine(100, 50, 20s, 2m)`, `spike(50, 500, 20s, 2s)`, `trace(day.csv)`, joined with `,` or
/// `then`, added with `+`. See loadtest/README.md.
#[derive(Debug, Clone, Parser)]
#[command(name = "loadtest", version, about, long_about)]
pub struct Config {
    /// Base URL of the server, e.g. `http://127.0.0.1:8080`; requests go to `<url><path>`.
    #[arg(long, env = "LOADTEST_URL", required_unless_present = "render", help_heading = heading::TARGET)]
    pub url: Option<String>,

    /// Path to request (`/predict`, or `/pools/NAME/predict` on a gateway).
    #[arg(long, env = "LOADTEST_PATH", default_value = "/predict", help_heading = heading::TARGET)]
    pub path: String,

    /// Closed loop: clients; a comma-separated list runs one step per value.
    #[arg(short = 'c', long, env = "LOADTEST_CONCURRENCY", value_delimiter = ',', default_value = "8", help_heading = heading::LOAD)]
    pub concurrency: Vec<usize>,

    /// Open loop: the rate profile, in requests/s (`200`, `steps(10 20 40 20 10, 15s)`, ...).
    #[arg(short = 'r', long, env = "LOADTEST_RATE", conflicts_with = "concurrency", help_heading = heading::LOAD)]
    pub rate: Option<String>,

    /// Length of each closed-loop step, and of an open-ended rate (`200`); `10s` unless
    /// `--requests` is given.
    #[arg(short = 'd', long, env = "LOADTEST_DURATION", value_parser = parse_duration, help_heading = heading::LOAD)]
    pub duration: Option<Duration>,

    /// Stop after this many measured requests (per step in a closed loop).
    #[arg(short = 'n', long, env = "LOADTEST_REQUESTS", help_heading = heading::LOAD)]
    pub requests: Option<u64>,

    /// Unmeasured warm-up before each closed-loop step, or at the profile's starting rate.
    #[arg(long, env = "LOADTEST_WARMUP", default_value = "1s", value_parser = parse_duration, help_heading = heading::LOAD)]
    pub warmup: Duration,

    /// Per-request timeout (counted as a `timeout` error). Named as the gateway's and the worker's
    /// `--request-timeout`; was `--timeout` (still accepted; `LOADTEST_TIMEOUT` still read).
    #[arg(long = "request-timeout", alias = "timeout", env = "LOADTEST_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration, help_heading = heading::LOAD)]
    pub request_timeout: Duration,

    /// Deprecated: `--duration` in seconds.
    #[arg(long, hide = true, value_parser = parse_seconds, conflicts_with = "duration")]
    pub duration_s: Option<Duration>,

    /// Deprecated: `--warmup` in seconds.
    #[arg(long, hide = true, value_parser = parse_seconds)]
    pub warmup_s: Option<Duration>,

    /// Deprecated: `--request-timeout` in seconds.
    #[arg(long, hide = true, value_parser = parse_seconds)]
    pub timeout_s: Option<Duration>,

    /// Open loop: most requests outstanding at once (each HTTP/1.1 one has its own connection).
    /// Beyond it a due request waits for one to finish, and the wait counts in its latency. Named
    /// as the gateway's limit of the same kind; was `--max-in-flight` (still accepted;
    /// `LOADTEST_MAX_IN_FLIGHT` still read).
    #[arg(long = "max-outstanding", alias = "max-in-flight", env = "LOADTEST_MAX_OUTSTANDING", default_value_t = 4096, help_heading = heading::LOAD)]
    pub max_outstanding: usize,

    /// How queries are sent: `get` (`?query=`) or `post` (a JSON body).
    #[arg(long, env = "LOADTEST_METHOD", value_enum, default_value = "get", help_heading = heading::TARGET)]
    pub method: Shape,

    /// With `--method post`: queries per request (`{"queries": [...]}` above 1).
    #[arg(long, env = "LOADTEST_BATCH", default_value_t = 1, help_heading = heading::TARGET)]
    pub batch: usize,

    /// File of queries, one a line; by default the built-in SNIPS test utterances.
    #[arg(long, env = "LOADTEST_QUERIES", help_heading = heading::TARGET)]
    pub queries: Option<PathBuf>,

    /// Extra request header, `"Name: value"` (repeatable; one a line in the variable).
    /// (`LOADTEST_HEADERS` is still read.)
    #[arg(short = 'H', long = "header", env = "LOADTEST_HEADER", value_delimiter = '\n', help_heading = heading::TARGET)]
    pub headers: Vec<String>,

    /// Protocol: `predict` (`/predict`, as `--method` says), `oip` (the Open Inference Protocol
    /// over REST, `POST /v2/models/{--model-name}/infer`) or `grpc` (its gRPC `ModelInfer` on h2c;
    /// implies `--http 2`). `oip` and `grpc` send `--batch` texts per request.
    #[arg(long, env = "LOADTEST_PROTOCOL", value_enum, default_value = "predict", help_heading = heading::TARGET)]
    pub protocol: target::Protocol,

    /// The model `--protocol oip|grpc` names (the worker's `--model-name`). Was `--model` (still
    /// accepted; `LOADTEST_MODEL` still read).
    #[arg(long = "model-name", alias = "model", env = "LOADTEST_MODEL_NAME", default_value = "snips-minilm-l6", help_heading = heading::TARGET)]
    pub model_name: String,

    /// HTTP version: `1.1` (keep-alive) or `2` (h2c, prior knowledge).
    #[arg(long, env = "LOADTEST_HTTP", value_enum, default_value = "1.1", help_heading = heading::TARGET)]
    pub http: Http,

    /// HTTP/2: connections per thread; requests are multiplexed over them.
    #[arg(long, env = "LOADTEST_H2_CONNECTIONS", default_value_t = 1, help_heading = heading::TARGET)]
    pub h2_connections: usize,

    /// Load threads (each a single-threaded runtime); 0: one per CPU this process may use.
    #[arg(long, env = "LOADTEST_THREADS", default_value_t = 0, help_heading = heading::LOAD)]
    pub threads: usize,

    /// Time resolution of the timeline, the live display and the report.
    #[arg(long, env = "LOADTEST_INTERVAL", default_value = "1s", value_parser = parse_duration, help_heading = heading::OUTPUT)]
    pub interval: Duration,

    /// Live display: `auto` (when stdout is a terminal), `always`, `never`.
    #[arg(long, env = "LOADTEST_PROGRESS", value_enum, default_value = "auto", help_heading = heading::OUTPUT)]
    pub progress: When,

    /// Print one JSON object per phase (a line each) instead of the table.
    #[arg(long, env = "LOADTEST_JSON", help_heading = heading::OUTPUT)]
    pub json: bool,

    /// Write the whole run as JSON (summary, phases, timeline, signal, series) to this file.
    #[arg(long, env = "LOADTEST_SUMMARY", help_heading = heading::OUTPUT)]
    pub summary: Option<PathBuf>,

    /// Write a self-contained HTML report to this file (its path is printed at the end).
    #[arg(long, env = "LOADTEST_REPORT", help_heading = heading::OUTPUT)]
    pub report: Option<PathBuf>,

    /// Title of the report.
    #[arg(long, env = "LOADTEST_TITLE", help_heading = heading::OUTPUT)]
    pub title: Option<String>,

    /// A gateway's admin URL (e.g. `http://127.0.0.1:9090`): its pool's scaling signal and
    /// workers are sampled during the run (`GET /pools/{pool}/signal`) and shown.
    #[arg(long, env = "LOADTEST_GATEWAY_ADMIN", help_heading = heading::SIGNAL)]
    pub gateway_admin: Option<String>,

    /// The pool whose signal is sampled.
    #[arg(long, env = "LOADTEST_POOL", default_value = "default", help_heading = heading::SIGNAL)]
    pub pool: String,

    /// How often the signal is sampled.
    #[arg(long, env = "LOADTEST_SIGNAL_INTERVAL", default_value = "1s", value_parser = parse_duration, help_heading = heading::SIGNAL)]
    pub signal_interval: Duration,

    /// JSON-lines file of the caller's own series, followed during the run and drawn in the
    /// report: `{"t": SECONDS, "series": "replicas_desired", "value": 3}` (repeatable; `t` in
    /// Unix seconds, or seconds since the start).
    #[arg(long = "series", env = "LOADTEST_SERIES", value_delimiter = ',', help_heading = heading::OUTPUT)]
    pub series: Vec<PathBuf>,

    /// Send nothing: draw `--report` from a `--summary` file of an earlier run.
    #[arg(long, env = "LOADTEST_RENDER", requires = "report", help_heading = heading::OUTPUT)]
    pub render: Option<PathBuf>,

    /// Log filter (`tracing` env-filter syntax), as the gateway's; `RUST_LOG` is read when neither
    /// the flag nor `LOADTEST_LOG` is set. Logs go to stderr, the report to stdout.
    #[arg(long, env = "LOADTEST_LOG", default_value = "info", help_heading = heading::LOGGING)]
    pub log: String,

    /// Log as JSON lines.
    #[arg(long, env = "LOADTEST_LOG_JSON", help_heading = heading::LOGGING)]
    pub log_json: bool,
}

/// Variables read below the flags' own (`cli::args_with_renamed_env`): old names of variables
/// renamed to match their flags (read until the next release, with a warning), and `RUST_LOG`.
pub const RENAMED_ENV: &[cli::Renamed] = &[
    cli::Renamed::deprecated("LOADTEST_TIMEOUT", "LOADTEST_REQUEST_TIMEOUT", &["--request-timeout", "--timeout"]),
    cli::Renamed::deprecated(
        "LOADTEST_MAX_IN_FLIGHT",
        "LOADTEST_MAX_OUTSTANDING",
        &["--max-outstanding", "--max-in-flight"],
    ),
    cli::Renamed::deprecated("LOADTEST_HEADERS", "LOADTEST_HEADER", &["--header", "-H"]),
    cli::Renamed::deprecated("LOADTEST_MODEL", "LOADTEST_MODEL_NAME", &["--model-name", "--model"]),
    cli::Renamed::conventional("RUST_LOG", "LOADTEST_LOG", &["--log"]),
];

impl Config {
    /// The run this configuration describes.
    pub fn spec(&self, command: Vec<String>) -> Result<RunSpec, Error> {
        let url = self.url.clone().ok_or_else(|| Error::Config("--url is required".to_owned()))?;
        let queries = match &self.queries {
            Some(path) => target::lines(
                &std::fs::read_to_string(path)
                    .map_err(|e| Error::Config(format!("--queries {}: {e}", path.display())))?,
            ),
            None => target::builtin_queries(),
        };
        let target = Target::new(
            &Spec {
                url: &url,
                path: &self.path,
                shape: self.method,
                batch: self.batch,
                headers: &self.headers,
                http: self.http,
                protocol: self.protocol,
                model: &self.model_name,
            },
            &queries,
        )?;
        if self.interval < Duration::from_millis(100) {
            return Err(Error::Config("--interval must be at least 100ms".to_owned()));
        }
        let duration = self.duration.or(self.duration_s);
        let warmup = self.warmup_s.unwrap_or(self.warmup);
        let timeout = self.timeout_s.unwrap_or(self.request_timeout).max(Duration::from_millis(1));
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut threads = if self.threads == 0 { cpus } else { self.threads };

        let (load, phases) = match &self.rate {
            Some(text) => {
                let open_length = duration.unwrap_or(Duration::from_secs(10)).as_secs_f64();
                let profile = profile::parse(text, open_length)?;
                let phases = profile
                    .phases()
                    .iter()
                    .map(|p| PhaseInfo {
                        label: p.label.clone(),
                        concurrency: None,
                        span: Some((p.start, p.end)),
                        rate: Some(profile.mean_rate(p.start, p.end)),
                    })
                    .collect();
                let r0 = profile.rate_at(0.0);
                let warm = warmup.as_secs_f64();
                let (profile, warmup_phase) = if warm > 0.0 && r0 > 0.0 {
                    (Profile::constant(r0, warm).then(profile), true)
                } else {
                    (profile, false)
                };
                let max_in_flight = self.max_outstanding.max(1);
                threads = threads.min(max_in_flight);
                (
                    Load::Open { profile: Arc::new(profile), warmup_phase, max_in_flight, requests: self.requests },
                    phases,
                )
            }
            None => {
                let duration = match (duration, self.requests) {
                    (Some(d), _) => Some(d),
                    (None, Some(_)) => None,
                    (None, None) => Some(Duration::from_secs(10)),
                };
                let steps: Vec<ClosedStep> = self
                    .concurrency
                    .iter()
                    .map(|&c| ClosedStep { clients: c.max(1), warmup, duration, requests: self.requests })
                    .collect();
                if steps.is_empty() {
                    return Err(Error::Config("--concurrency needs at least one value".to_owned()));
                }
                threads = threads.min(steps.iter().map(|s| s.clients).max().unwrap_or(1));
                let phases = steps
                    .iter()
                    .map(|s| PhaseInfo {
                        label: format!("c={}", s.clients),
                        concurrency: Some(s.clients),
                        span: None,
                        rate: None,
                    })
                    .collect();
                (Load::Closed(steps), phases)
            }
        };
        let threads = threads.max(1);
        let signal = self.gateway_admin.as_deref().map(|u| Source::new(u, &self.pool)).transpose()?;
        let title =
            self.title.clone().unwrap_or_else(|| format!("loadtest {}{}", url.trim_end_matches('/'), self.path));
        let profile_text = self.rate.as_ref().map(|r| {
            if let Load::Open { warmup_phase: true, profile, .. } = &load {
                format!("{r}  (after {}s of warm-up at {}/s)", fmt_secs(warmup), fmt_rate(profile.rate_at(0.0)))
            } else {
                r.clone()
            }
        });
        Ok(RunSpec {
            target_info: TargetInfo {
                url: url.clone(),
                path: self.path.clone(),
                method: target.method.to_string(),
                batch: self.batch.max(1),
                http: match target.http {
                    Http::Http1 => "1.1",
                    Http::Http2 => "2",
                }
                .to_owned(),
                threads,
                timeout_s: timeout.as_secs_f64(),
            },
            plan: Plan { load, threads, timeout, h2_connections: self.h2_connections.max(1) },
            target: Arc::new(target),
            phases,
            title,
            command,
            profile_text,
            interval: self.interval,
            signal,
            signal_interval: self.signal_interval.max(Duration::from_millis(100)),
            series: self.series.clone(),
            progress: self.progress,
            json: self.json,
            deadline: None,
        })
    }
}

fn fmt_secs(d: Duration) -> String {
    fmt_rate(d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(args: &[&str]) -> Result<RunSpec, Error> {
        let mut argv = vec!["loadtest", "--url", "http://127.0.0.1:1"];
        argv.extend_from_slice(args);
        Config::try_parse_from(argv).map_err(|e| Error::Config(e.to_string()))?.spec(vec![])
    }

    #[test]
    fn the_load_generators_flags_keep_the_conventions() {
        use clap::CommandFactory;
        let rules = cli::check::Rules { prefix: "LOADTEST", no_env: &[], bare_seconds: &[], renamed: RENAMED_ENV };
        let violations = cli::check::violations(Config::command(), &rules);
        assert!(violations.is_empty(), "{}", violations.join("\n"));
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn the_old_flags_still_mean_what_they_did() {
        let s = spec(&["--concurrency", "1,8,32", "--duration-s", "5", "--warmup-s", "0.5", "--threads", "2"]).unwrap();
        let Load::Closed(steps) = &s.plan.load else { panic!("closed loop") };
        assert_eq!(steps.iter().map(|s| s.clients).collect::<Vec<_>>(), [1, 8, 32]);
        assert!(
            steps.iter().all(|s| s.duration == Some(Duration::from_secs(5)) && s.warmup == Duration::from_millis(500))
        );
        assert_eq!(s.phases.iter().map(|p| p.label.as_str()).collect::<Vec<_>>(), ["c=1", "c=8", "c=32"]);
        let s = spec(&["--rate", "200", "--duration-s", "3"]).unwrap();
        let Load::Open { profile, warmup_phase, .. } = &s.plan.load else { panic!("open loop") };
        assert!(*warmup_phase);
        assert_eq!(profile.length(), 4.0, "1 s of warm-up at 200/s, then 3 s");
        assert_eq!(s.phases.len(), 1);
    }

    #[test]
    fn renamed_flags_keep_their_old_names() {
        let c = |args: &[&str]| Config::try_parse_from([&["loadtest", "--url", "http://127.0.0.1:1"], args].concat());
        let old = c(&["--timeout", "2s", "--max-in-flight", "7", "--model", "m"]).unwrap();
        let new = c(&["--request-timeout", "2s", "--max-outstanding", "7", "--model-name", "m"]).unwrap();
        for cfg in [old, new] {
            assert_eq!(
                (cfg.request_timeout, cfg.max_outstanding, cfg.model_name.as_str()),
                (Duration::from_secs(2), 7, "m")
            );
        }
    }

    #[test]
    fn counts_replace_the_default_duration_and_rates_exclude_concurrency() {
        let s = spec(&["-c", "4", "-n", "1000"]).unwrap();
        let Load::Closed(steps) = &s.plan.load else { panic!() };
        assert_eq!((steps[0].duration, steps[0].requests), (None, Some(1000)));
        assert!(spec(&["-c", "4", "--rate", "10"]).is_err());
        assert!(spec(&["--rate", "ramp(0,10)"]).unwrap_err().to_string().contains("rate profile"));
        // A profile starting at 0 has no warm-up.
        let s = spec(&["--rate", "ramp(0, 10, 5s)"]).unwrap();
        assert!(matches!(s.plan.load, Load::Open { warmup_phase: false, .. }));
    }
}
