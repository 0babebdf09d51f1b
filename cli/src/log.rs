//! `--log FILTER` and `--log-json`, the same on every binary: `tracing`'s env-filter syntax
//! (`info`, `warn,gateway::pool=debug`), text or JSON lines, on stderr (stdout is the binaries'
//! output: the load generator's report, the scaler's decisions). The flag's variable is the
//! binary's (`GATEWAY_LOG`); `RUST_LOG` is read below it ([`crate::Renamed::conventional`]).

use tracing_subscriber::EnvFilter;

/// A `--log` filter that does not parse, or a second subscriber.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("bad --log filter {filter:?}: {reason}")]
    Filter { filter: String, reason: String },
    #[error("a log subscriber is already set: {0}")]
    AlreadySet(String),
}

/// Installs the process's subscriber: events passing `filter`, as text or (with `json`) JSON
/// lines, on stderr.
pub fn init(filter: &str, json: bool) -> Result<(), Error> {
    let parsed =
        EnvFilter::try_new(filter).map_err(|e| Error::Filter { filter: filter.to_owned(), reason: e.to_string() })?;
    let fmt = tracing_subscriber::fmt().with_env_filter(parsed).with_writer(std::io::stderr);
    let set = if json { fmt.json().try_init() } else { fmt.try_init() };
    set.map_err(|e| Error::AlreadySet(e.to_string()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_bad_filter_is_an_error_naming_the_flag() {
        let e = super::init("gateway=loud", false).unwrap_err().to_string();
        assert!(e.contains("--log"), "{e}");
    }
}
