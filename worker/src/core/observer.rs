//! Where the backend thread's reports go: metrics, the stats window, and the admission's count
//! of queries in flight.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::admission::{Admission, Class};
use crate::batching::runner::{BatchReport, Observer};
use crate::metrics::Metrics;
use crate::stats::{BatchFigures, Stats};

#[derive(Debug)]
pub(super) struct Telemetry {
    /// The lane whose backend thread reports here.
    pub lane: Class,
    pub admission: Arc<Admission>,
    pub stats: Arc<Stats>,
    pub metrics: Arc<Metrics>,
}

impl Observer for Telemetry {
    fn cancelled(&self, n: u64) {
        self.metrics.cancelled.inc_by(n);
    }

    fn started(&self, rows: usize, tokens: usize) {
        self.admission.batch_started(self.lane, rows as u64, tokens as u64);
    }

    fn waited(&self, wait: Duration) {
        self.metrics.queue_wait.observe(wait.as_secs_f64());
    }

    fn ran(&self, r: &BatchReport) {
        self.metrics.inference.observe(r.elapsed.as_secs_f64());
        self.metrics.batch_rows.observe(r.rows as f64);
        self.metrics.batch_padded_len.observe(r.padded_len as f64);
        let figures = BatchFigures {
            rows: r.rows as u64,
            tokens: r.tokens as u64,
            padded_len: r.padded_len as u64,
            inference: r.elapsed,
            queue_wait: r.total_wait,
        };
        self.stats.batch(Instant::now(), figures);
    }

    fn done(&self, rows: usize, tokens: usize) {
        self.admission.batch_done(self.lane, rows as u64, tokens as u64);
    }
}
