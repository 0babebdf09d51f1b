//! The bundled load generator: closed loop (`-c`) or open loop on a rate profile (`--rate`),
//! HTTP/1.1 or HTTP/2, HDR latency histograms, errors by status and `error_type`, a live
//! display, a JSON record of the run and a self-contained HTML report. See `loadtest/README.md`.
#![forbid(unsafe_code)]

pub mod client;
pub mod collect;
pub mod config;
pub mod engine;
pub mod http1;
pub mod http2;
pub mod profile;
pub mod progress;
pub mod report;
pub mod run;
pub mod series;
pub mod signal;
pub mod stats;
pub mod summary;
pub mod target;

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Target(String),
    #[error(transparent)]
    Profile(#[from] profile::ParseError),
    #[error("{0}")]
    Config(String),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// Raise the open-files limit to its hard maximum: an open loop may hold thousands of
/// connections. Best effort.
pub fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}
