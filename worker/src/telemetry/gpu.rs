//! Samples the worker's GPU through NVML on a plain thread and publishes on a `watch` channel.
//!
//! Without NVML (no driver, a CPU worker) the channel holds `Unavailable { reason }`: never zeros.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::{Device, Nvml};
use tokio::sync::watch;
use wire::{GpuDevice, GpuProcess, GpuSample, GpuTelemetry};

use crate::config;

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The telemetry as of now: fills in the sample's age.
pub fn with_age(t: GpuTelemetry) -> GpuTelemetry {
    with_age_at(t, unix_ms())
}

/// The telemetry as of `now_unix_ms`: a sample's age is how long before then it was read (0 if
/// the clock went back).
fn with_age_at(mut t: GpuTelemetry, now_unix_ms: u64) -> GpuTelemetry {
    if let GpuTelemetry::Available(s) = &mut t {
        s.age_ms = now_unix_ms.saturating_sub(s.sampled_at_unix_ms);
    }
    t
}

/// Starts sampling the GPU that `device` runs on every `period`; stops when every receiver is gone.
pub fn spawn_sampler(device: config::Device, period: Duration) -> watch::Receiver<GpuTelemetry> {
    let config::Device::Cuda(ordinal) = device else {
        let (_, rx) = watch::channel(GpuTelemetry::Unavailable { reason: "worker runs on the CPU".into() });
        return rx;
    };
    let (tx, rx) = watch::channel(GpuTelemetry::Unavailable { reason: "NVML not sampled yet".into() });
    let spawned = std::thread::Builder::new().name("nvml-sampler".into()).spawn(move || {
        let nvml = match Nvml::init() {
            Ok(n) => n,
            Err(e) => {
                let _ = tx.send(GpuTelemetry::Unavailable { reason: format!("NVML init failed: {e}") });
                return;
            }
        };
        let gpu = match resolve_device(&nvml, ordinal, std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref()) {
            Ok(d) => d,
            Err(reason) => {
                let _ = tx.send(GpuTelemetry::Unavailable { reason });
                return;
            }
        };
        let mut sampler = Sampler { device: gpu, pid: std::process::id(), last_seen: None };
        while !tx.is_closed() {
            let reading = match sampler.sample() {
                Ok(s) => GpuTelemetry::Available(s),
                Err(e) => GpuTelemetry::Unavailable { reason: format!("NVML read failed: {e}") },
            };
            let _ = tx.send(reading);
            std::thread::sleep(period);
        }
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "could not start the NVML sampler thread");
    }
    rx
}

/// Which NVML device CUDA ordinal `ordinal` is, honouring `CUDA_VISIBLE_DEVICES` (indices or UUIDs,
/// UUID prefixes allowed, as CUDA accepts them).
fn resolve_device<'n>(nvml: &'n Nvml, ordinal: u32, visible: Option<&str>) -> Result<Device<'n>, String> {
    let entry = match visible.map(str::trim).filter(|v| !v.is_empty()) {
        None => {
            return nvml.device_by_index(ordinal).map_err(|e| format!("NVML device {ordinal}: {e}"));
        }
        Some(list) => list
            .split(',')
            .map(str::trim)
            .nth(ordinal as usize)
            .ok_or_else(|| format!("CUDA_VISIBLE_DEVICES={list} has no device {ordinal}"))?
            .to_owned(),
    };
    if entry.starts_with("MIG-") {
        return Err(format!("MIG device {entry}: per-instance NVML telemetry is not supported"));
    }
    if entry.starts_with("GPU-") {
        let count = nvml.device_count().map_err(|e| format!("NVML device count: {e}"))?;
        for i in 0..count {
            let d = nvml.device_by_index(i).map_err(|e| format!("NVML device {i}: {e}"))?;
            if d.uuid().is_ok_and(|u| u.starts_with(&entry)) {
                return Ok(d);
            }
        }
        return Err(format!("no GPU with UUID {entry}"));
    }
    let index: u32 = entry.parse().map_err(|_| format!("CUDA_VISIBLE_DEVICES entry {entry:?} is not understood"))?;
    nvml.device_by_index(index).map_err(|e| format!("NVML device {index}: {e}"))
}

struct Sampler<'n> {
    device: Device<'n>,
    pid: u32,
    last_seen: Option<u64>,
}

impl Sampler<'_> {
    fn sample(&mut self) -> Result<GpuSample, nvml_wrapper::error::NvmlError> {
        let d = &self.device;
        let util = d.utilization_rates()?;
        let mem = d.memory_info()?;
        let device = GpuDevice {
            index: d.index()?,
            uuid: d.uuid()?,
            name: d.name()?,
            utilization_pct: f64::from(util.gpu),
            memory_utilization_pct: f64::from(util.memory),
            memory_used_bytes: mem.used,
            memory_total_bytes: mem.total,
            power_watts: d.power_usage().ok().map(|mw| f64::from(mw) / 1e3),
            power_limit_watts: d.enforced_power_limit().ok().map(|mw| f64::from(mw) / 1e3),
            sm_clock_mhz: d.clock_info(Clock::SM).ok(),
        };
        let procs = d.running_compute_processes().unwrap_or_default();
        let me = procs.iter().find(|p| p.pid == self.pid);
        // In a container NVML reports host PIDs: then this process cannot be told apart, and the
        // GPU counts as shared only if more than one compute process holds it.
        let shared = match me {
            Some(_) => procs.iter().any(|p| p.pid != self.pid),
            None => procs.len() > 1,
        };
        let sm_utilization_pct = match (me, d.process_utilization_stats(self.last_seen)) {
            (Some(_), Ok(samples)) => {
                if let Some(latest) = samples.iter().map(|s| s.timestamp).max() {
                    self.last_seen = Some(latest);
                }
                // NVML lists only processes that ran kernels in the period: absent means idle.
                let mine = samples.iter().filter(|s| s.pid == self.pid).max_by_key(|s| s.timestamp);
                Some(mine.map_or(0.0, |s| f64::from(s.sm_util)))
            }
            _ => None,
        };
        let memory_used_bytes = me.and_then(|p| match p.used_gpu_memory {
            UsedGpuMemory::Used(b) => Some(b),
            UsedGpuMemory::Unavailable => None,
        });
        Ok(GpuSample {
            source: "nvml".into(),
            sampled_at_unix_ms: unix_ms(),
            age_ms: 0,
            device,
            process: GpuProcess { pid: self.pid, sm_utilization_pct, memory_used_bytes },
            shared,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_worker_reports_no_gpu_and_says_why() {
        let rx = spawn_sampler(config::Device::Cpu, Duration::from_millis(10));
        match &*rx.borrow() {
            GpuTelemetry::Unavailable { reason } => assert!(reason.contains("CPU")),
            other => panic!("expected unavailable, got {other:?}"),
        }
    }

    #[test]
    fn a_cuda_worker_reports_a_reading_or_the_reason_never_zeros() {
        // On machines with an NVIDIA driver this reads real telemetry instead; either way no zeros
        // stand in for a reading.
        let mut rx = spawn_sampler(config::Device::Cuda(0), Duration::from_millis(10));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let t = rx.borrow_and_update().clone();
            match t {
                GpuTelemetry::Unavailable { reason } if reason == "NVML not sampled yet" => {}
                GpuTelemetry::Unavailable { reason } => {
                    assert!(reason.contains("NVML") || reason.contains("CUDA_VISIBLE_DEVICES"), "{reason}");
                    break;
                }
                GpuTelemetry::Available(s) => {
                    assert_eq!(s.source, "nvml");
                    assert!(s.device.memory_total_bytes > 0);
                    break;
                }
            }
            assert!(std::time::Instant::now() < deadline, "the sampler never reported");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn age_is_filled_in_at_read_time() {
        let sample = |sampled_at_unix_ms| {
            GpuTelemetry::Available(GpuSample {
                source: "nvml".into(),
                sampled_at_unix_ms,
                age_ms: 0,
                device: GpuDevice {
                    index: 0,
                    uuid: "GPU-x".into(),
                    name: "test".into(),
                    utilization_pct: 50.0,
                    memory_utilization_pct: 0.0,
                    memory_used_bytes: 1,
                    memory_total_bytes: 2,
                    power_watts: None,
                    power_limit_watts: None,
                    sm_clock_mhz: None,
                },
                process: GpuProcess { pid: 1, sm_utilization_pct: None, memory_used_bytes: None },
                shared: false,
            })
        };
        let age = |t: GpuTelemetry| match t {
            GpuTelemetry::Available(s) => s.age_ms,
            GpuTelemetry::Unavailable { .. } => panic!("a sample stays a sample"),
        };
        assert_eq!(age(with_age_at(sample(10_000), 10_250)), 250);
        assert_eq!(age(with_age_at(sample(10_000), 9_000)), 0, "a clock that went back gives 0, not a wrap");
        let none = GpuTelemetry::Unavailable { reason: "x".into() };
        assert_eq!(with_age_at(none.clone(), 10_250), none, "no reading, no age");
    }
}
