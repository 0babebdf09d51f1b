//! What every pool, worker monitor, signal task and request shares: the configuration and the
//! metric families, and the budget of worker answers held in memory.

use std::sync::Arc;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::upstream::AnswerBudget;

pub(crate) struct Ctx {
    pub(crate) config: Config,
    pub(crate) metrics: Metrics,
    /// `--max-buffered-answer-bytes`, over every request in flight.
    pub(crate) answers: Arc<AnswerBudget>,
}

impl Ctx {
    pub(crate) fn new(config: Config, metrics: Metrics) -> Self {
        let limit = i64::try_from(config.max_buffered_answer_bytes).unwrap_or(i64::MAX);
        metrics.answer_buffered_limit.set(limit);
        let answers = AnswerBudget::new(config.max_buffered_answer_bytes, metrics.answer_buffered.clone());
        Self { config, metrics, answers }
    }
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").finish_non_exhaustive()
    }
}

#[cfg(test)]
impl Ctx {
    /// Test defaults, changed by `edit`.
    pub(crate) fn for_tests(edit: impl FnOnce(&mut Config)) -> Self {
        let mut config = Config::for_tests();
        edit(&mut config);
        Self::new(config, Metrics::default())
    }
}
