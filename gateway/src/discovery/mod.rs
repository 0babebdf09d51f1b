//! Discovery sources. Each publishes, per pool, the set of worker base URLs it knows into
//! [`Pools::update`](crate::pool::Pools::update):
//!
//! * static flags (`--worker`, `--pool-worker`), once at startup;
//! * a worker file, re-read when its content changes ([`file`](mod@file));
//! * Kubernetes EndpointSlices of a Service, through kube's runtime watcher ([`k8s`]).

pub(crate) mod file;
pub(crate) mod k8s;

use crate::error::StartError;
use crate::pool::Targets;

/// The targets given on the command line.
pub fn static_targets(default_pool: &str, workers: &[String], pool_workers: &[String]) -> Result<Targets, StartError> {
    let mut t = Targets::new();
    for w in workers.iter().filter(|w| !w.trim().is_empty()) {
        t.entry(default_pool.to_owned()).or_default().insert(w.trim().to_owned());
    }
    for pw in pool_workers.iter().filter(|w| !w.trim().is_empty()) {
        let (pool, url) =
            pw.split_once('=').ok_or_else(|| StartError::Config(format!("--pool-worker {pw:?}: expected POOL=URL")))?;
        t.entry(pool.trim().to_owned()).or_default().insert(url.trim().to_owned());
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_targets_split_pools() {
        let t = static_targets(
            "default",
            &["http://a:1".into(), "http://b:1".into()],
            &["big=http://c:1".into(), "big=http://d:1".into()],
        )
        .unwrap();
        assert_eq!(t["default"].len(), 2);
        assert_eq!(t["big"].len(), 2);
        assert!(static_targets("d", &[], &["nopool".into()]).is_err());
    }
}
