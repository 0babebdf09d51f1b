//! Test support in one place, for the tests of every crate (a dev-dependency only):
//!
//! - [`repo_root`], [`model_dir`]: where things are;
//! - [`ort_lib`]: ONNX Runtime's library, from `ORT_DYLIB_PATH` or `scripts/fetch-ort.sh` (the
//!   only place that names its version);
//! - [`sanity`]: the reference queries and the label list (`models/sanity.json`);
//! - [`bin`], [`Server`]: built binaries of the workspace, started and waited for until they
//!   print `listening on http://ADDR`;
//! - [`http`]: a small client whose answers are status, headers and JSON;
//! - [`wait_until`]: poll a condition with a bounded timeout;
//! - [`fault`]: for fault-injection tests: signals, resident memory, metric samples, raw
//!   sockets that trickle or stall, the servers' start commands;
//! - [`Captured`]: a log sink for tests that read what was logged;
//! - [`chart`]: the Helm chart rendered and its containers' arguments read back;
//! - [`layers`]: the layering check (no import cycle between sibling modules of a crate, at any
//!   depth).
#![forbid(unsafe_code)]

mod captured;
pub mod chart;
pub mod fault;
pub mod http;
pub mod layers;
pub mod load;
mod paths;
mod server;

pub use captured::Captured;
pub use paths::{Sanity, SanityQuery, bin, model_dir, ort_lib, repo_root, sanity};
pub use server::{Server, fake_batch_flags};

use std::future::Future;
use std::time::Duration;

/// Polls `check` every 10 ms until it returns true, failing with `what` after `limit`.
pub async fn wait_until<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out after {limit:?} waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
