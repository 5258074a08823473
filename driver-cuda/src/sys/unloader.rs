//! Module unloads, made on a thread of their own.
//!
//! `cuModuleUnload` returns only once every kernel running on the GPU has finished, whichever
//! stream it runs on (`docs/drivers.md`). An executable's last handle is often dropped by a queue's
//! completion thread, when the last submission that launched it retires: unloading there would hold
//! that queue's later retirements (and the semaphores they signal) behind kernels of other queues,
//! for as long as those run. So the unload goes to one process-wide thread, which makes them in
//! order; the executable's context lives until its unload is made. Were that thread not started,
//! the unload is made where the executable dropped, as before.

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::CUmodule;

use crate::sys::context::Context;
use crate::sys::result;

/// A module to unload and the context it was loaded in.
struct Unload {
    context: Arc<Context>,
    module: CUmodule,
}

// SAFETY: a CUmodule is a driver handle usable from any thread where its context is bound; the
// unloader binds it, and the module is unloaded once, by whoever holds this.
unsafe impl Send for Unload {}

impl Unload {
    fn run(self) {
        let unloaded = self.context.bind().and_then(|bound| {
            // SAFETY: the module is unloaded once, here (see `unload`'s contract).
            unsafe { result::module_unload(&bound, self.module) }
        });
        if let Err(e) = unloaded {
            tracing::debug!(%e, "unloading a module failed");
        }
    }
}

/// Unloads `module` of `context` on the unloader thread (or here, if it cannot be started).
///
/// # Safety
/// `module` was loaded in `context`, is unloaded once, and nothing launches its functions any more.
pub(crate) unsafe fn unload(context: Arc<Context>, module: CUmodule) {
    static THREAD: OnceLock<Option<Mutex<Sender<Unload>>>> = OnceLock::new();
    let sender = THREAD.get_or_init(|| {
        let (sender, receiver) = mpsc::channel::<Unload>();
        let started = std::thread::Builder::new()
            .name("cuda-unloader".to_string())
            .spawn(move || receiver.into_iter().for_each(Unload::run));
        match started {
            Ok(_) => Some(Mutex::new(sender)),
            Err(e) => {
                tracing::warn!(%e, "cuda: the unloader thread did not start; modules unload where they drop");
                None
            }
        }
    });
    let job = Unload { context, module };
    let refused = match sender {
        Some(sender) => hal::driver::lock(sender).send(job).err().map(|e| e.0),
        None => Some(job),
    };
    if let Some(job) = refused {
        job.run();
    }
}
