//! How the host thread waits for the GPU: the scheduling flags of the device's primary context
//! (the context ONNX Runtime's CUDA provider runs in), set through the CUDA driver API before the
//! first session is made.
//!
//! CUDA's default (`auto`: spin while the process has fewer active contexts than cores) keeps the
//! backend thread busy-waiting through every batch: under load most of a core goes to waiting.
//! `blocking` parks the thread on an OS primitive until the GPU is done instead, for a wake-up
//! per batch.

use std::ffi::{c_char, c_int, c_uint};

use libloading::Library;

/// `CU_CTX_SCHED_*` (cuda.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaSync {
    /// CUDA's choice (`CU_CTX_SCHED_AUTO`): spin when the process has fewer active contexts than
    /// cores, else yield.
    Auto,
    /// Busy-wait (`CU_CTX_SCHED_SPIN`): the lowest wake-up latency, a core per waiting thread.
    Spin,
    /// Spin, yielding the core between polls (`CU_CTX_SCHED_YIELD`).
    Yield,
    /// Sleep until the GPU is done (`CU_CTX_SCHED_BLOCKING_SYNC`).
    Blocking,
}

impl CudaSync {
    fn flags(self) -> c_uint {
        match self {
            Self::Auto => 0x00,
            Self::Spin => 0x01,
            Self::Yield => 0x02,
            Self::Blocking => 0x04,
        }
    }
}

type CuResult = c_int;

/// Sets `sync` on CUDA device `ordinal`'s primary context. Allowed while the context is active
/// (CUDA 11 and later), so the order against ONNX Runtime does not matter for correctness; it is
/// called before the first session all the same. Errors name the driver call that failed.
#[allow(unsafe_code)]
pub fn set_sync(ordinal: u32, sync: CudaSync) -> Result<(), String> {
    // SAFETY: libcuda.so.1 is the CUDA driver's own library; loading it runs no initializers
    // beyond the driver's, which ONNX Runtime's CUDA provider loads anyway.
    let lib = unsafe { Library::new("libcuda.so.1") }.map_err(|e| format!("could not load libcuda.so.1: {e}"))?;
    // SAFETY: the signatures are those of cuda.h (CUDA 11 and later: `_v2` of the flag setter).
    unsafe {
        let cu_init = lib.get::<unsafe extern "C" fn(c_uint) -> CuResult>("cuInit").map_err(|e| e.to_string())?;
        let device_get =
            lib.get::<unsafe extern "C" fn(*mut c_int, c_int) -> CuResult>("cuDeviceGet").map_err(|e| e.to_string())?;
        let set_flags = lib
            .get::<unsafe extern "C" fn(c_int, c_uint) -> CuResult>("cuDevicePrimaryCtxSetFlags_v2")
            .map_err(|e| e.to_string())?;
        let error_name = lib
            .get::<unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult>("cuGetErrorName")
            .map_err(|e| e.to_string())?;
        let check = |call: &str, code: CuResult| {
            if code == 0 {
                return Ok(());
            }
            let mut name: *const c_char = std::ptr::null();
            let name = if error_name(code, &mut name) == 0 && !name.is_null() {
                std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned()
            } else {
                format!("error {code}")
            };
            Err(format!("{call}: {name}"))
        };
        check("cuInit", cu_init(0))?;
        let mut device = 0;
        let ordinal = c_int::try_from(ordinal).map_err(|_| format!("no CUDA device {ordinal}"))?;
        check("cuDeviceGet", device_get(&mut device, ordinal))?;
        check("cuDevicePrimaryCtxSetFlags", set_flags(device, sync.flags()))?;
    }
    // The driver stays loaded for the process (ONNX Runtime's provider holds it too); keep this
    // handle from unloading it in between.
    std::mem::forget(lib);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_it_is_an_error_not_a_panic() {
        if std::path::Path::new("/dev/nvidiactl").exists() {
            return; // a machine with a GPU: covered by benches/gpu/run.sh
        }
        let e = set_sync(0, CudaSync::Blocking).unwrap_err();
        assert!(e.contains("libcuda") || e.contains("cuInit"), "{e}");
    }
}
