//! GPU telemetry from NVML.

mod gpu;

pub use gpu::{spawn_sampler, with_age};
