//! The command-line conventions of every binary in the workspace (gateway, worker, loadtest,
//! scaler), in one place so that they read alike:
//!
//! - **One name per concept.** A setting that two binaries share has one flag name in both
//!   (`--listen`, `--request-timeout`, `--max-outstanding`, `--runtime-threads`, `--drain-timeout`,
//!   `--log`); an old name stays a clap `alias` for a release.
//! - **Each flag's environment variable is its name** under the binary's prefix:
//!   `--pool-max-idle-per-host` is `GATEWAY_POOL_MAX_IDLE_PER_HOST`. A renamed variable's old name
//!   is still read, below the new one and the flag, with a warning ([`Renamed::deprecated`]); a
//!   library's conventional variable (`RUST_LOG`, `ORT_DYLIB_PATH`) is read the same way, without
//!   one ([`Renamed::conventional`]).
//! - **Every flag sits under a help heading** (`--help` groups them by concern).
//! - **Every duration is humantime** (`250ms`, `10s`, `2m`, `1h 30m`): [`parse_duration`]. A bare
//!   number is refused (seconds or milliseconds?), except where a flag took one before (then it
//!   is seconds, as documented on the flag).
//! - **`--log FILTER` and `--log-json` on every binary**: [`log::init`], `tracing`'s env-filter
//!   syntax, on stderr.
//!
//! [`check::violations`] tests a binary's `clap::Command` against these rules; each binary's
//! tests call it.

#![forbid(unsafe_code)]

pub mod check;
mod duration;
mod env;
pub mod log;

pub use duration::{parse_duration, parse_duration_or_seconds};
pub use env::{Renamed, args_with_renamed_env, with_renamed_env};
