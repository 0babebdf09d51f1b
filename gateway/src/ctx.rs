//! What every pool, worker monitor, signal task and request shares: the configuration and the
//! metric families.

use crate::config::Config;
use crate::metrics::Metrics;

pub(crate) struct Ctx {
    pub(crate) config: Config,
    pub(crate) metrics: Metrics,
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
        Self { config, metrics: Metrics::default() }
    }
}
