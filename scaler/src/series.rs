//! The scaler's series for loadtest's report (`loadtest --series FILE`): JSON lines
//! `{"t": UNIX_SECONDS, "series": NAME, "value": V}` (loadtest/src/series.rs reads them).

use std::io::Write as _;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The series the scaler writes.
pub const METRIC: &str = "gateway_pool_signal";
pub const DESIRED: &str = "replicas_desired";
pub const REPLICAS: &str = "replicas";

pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// An appending writer; each point is flushed at once (loadtest follows the file live).
pub struct SeriesWriter {
    file: Option<std::fs::File>,
}

impl SeriesWriter {
    pub fn open(path: Option<&Path>) -> anyhow::Result<Self> {
        let file = match path {
            Some(p) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
            ),
            None => None,
        };
        Ok(Self { file })
    }

    pub fn point(&mut self, t: f64, series: &str, value: f64) {
        if let Some(f) = self.file.as_mut() {
            let line = serde_json::json!({"t": t, "series": series, "value": value});
            if let Err(e) = writeln!(f, "{line}") {
                tracing::warn!("writing the series: {e}");
            }
        }
    }
}

/// `HH:MM:SS` (UTC) of a Unix time.
pub fn clock(t: f64) -> String {
    let s = t as u64 % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}
