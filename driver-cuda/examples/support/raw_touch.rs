//! Raw CUDA set-up shared by the examples that measure beside the HAL: the primary context bound on
//! the calling thread, the `touch` kernel, a 256-byte buffer and one non-blocking stream, all
//! released on drop.

use cudarc::driver::sys;

/// The median of `v` (empty: NaN).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `Err` naming `what` unless `code` is success.
pub fn check(code: sys::CUresult, what: &str) -> Result<(), String> {
    if code == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(format!("{what}: {code:?}")) }
}

/// The handles one measurement uses.
pub struct RawTouch {
    pub dev: sys::CUdevice,
    pub ctx: sys::CUcontext,
    module: sys::CUmodule,
    pub f: sys::CUfunction,
    pub out: u64,
    pub stream: sys::CUstream,
}

impl RawTouch {
    /// Retains and binds device 0's primary context and loads `ptx` (which must define `touch`).
    pub fn new(ptx: &str) -> Result<Self, String> {
        let ptx = std::ffi::CString::new(ptx).map_err(|x| x.to_string())?;
        // SAFETY: plain driver calls after the caller's probe; every out-pointer is a live local or
        // field, and each handle is released once, in `Drop` (fields still null are skipped there).
        unsafe {
            let mut raw = RawTouch {
                dev: 0,
                ctx: std::ptr::null_mut(),
                module: std::ptr::null_mut(),
                f: std::ptr::null_mut(),
                out: 0,
                stream: std::ptr::null_mut(),
            };
            check(sys::cuDeviceGet(&mut raw.dev, 0), "cuDeviceGet")?;
            check(sys::cuDevicePrimaryCtxRetain(&mut raw.ctx, raw.dev), "retain")?;
            check(sys::cuCtxSetCurrent(raw.ctx), "set current")?;
            check(sys::cuModuleLoadData(&mut raw.module, ptx.as_ptr().cast()), "load")?;
            check(sys::cuModuleGetFunction(&mut raw.f, raw.module, c"touch".as_ptr()), "function")?;
            check(sys::cuMemAlloc_v2(&mut raw.out, 256), "alloc")?;
            check(sys::cuStreamCreate(&mut raw.stream, 1), "stream")?;
            Ok(raw)
        }
    }

    /// Launches `touch(out, 7)` on the stream: one block of one thread.
    pub fn launch(&self) -> Result<(), String> {
        let mut out = self.out;
        let mut value = 7u32;
        let mut params = [(&mut out as *mut u64).cast::<std::ffi::c_void>(), (&mut value as *mut u32).cast()];
        // SAFETY: the function and stream are live; the parameters point at live locals, which the
        // driver copies before this returns.
        let code = unsafe {
            sys::cuLaunchKernel(self.f, 1, 1, 1, 1, 1, 1, 0, self.stream, params.as_mut_ptr(), std::ptr::null_mut())
        };
        check(code, "launch")
    }
}

impl Drop for RawTouch {
    fn drop(&mut self) {
        // SAFETY: each handle was created in `new` (null ones were not) and is released once; the
        // stream is drained first.
        unsafe {
            if !self.stream.is_null() {
                sys::cuStreamSynchronize(self.stream);
                sys::cuStreamDestroy_v2(self.stream);
            }
            if self.out != 0 {
                sys::cuMemFree_v2(self.out);
            }
            if !self.module.is_null() {
                sys::cuModuleUnload(self.module);
            }
            if !self.ctx.is_null() {
                sys::cuDevicePrimaryCtxRelease_v2(self.dev);
            }
        }
    }
}

/// A reusable command buffer of one `touch` dispatch on `device` (built from `ptx`), or an empty one
/// when `dispatch` is false: the HAL side of the same measurement.
pub fn touch_command_buffer(device: &hal::Device, ptx: &str, dispatch: bool) -> hal::Result<hal::CommandBuffer> {
    use hal::{BufferBinding, BufferParams, CommandBufferMode, EntryPointInfo, ExecutableFormat, ExecutableSource};
    let cb = device.create_command_buffer(CommandBufferMode::Reusable)?;
    if dispatch {
        let exe = device.load_executable(&ExecutableSource::Bytes {
            format: ExecutableFormat::Ptx,
            data: std::sync::Arc::from(ptx.as_bytes()),
            entry_points: vec![EntryPointInfo::new("touch", 1, 1, 1)],
        })?;
        let buf = device.allocate_buffer(BufferParams::device_local(), 256)?;
        cb.dispatch(&exe, 0, [1, 1, 1], &[7], &[BufferBinding::range(&buf, 0, 4)])?;
    }
    cb.end()?;
    Ok(cb)
}
