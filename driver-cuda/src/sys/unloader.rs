//! Module unloads: kept back while the device may be running, made on a thread of their own.
//!
//! `cuModuleUnload` returns only once every kernel running on the GPU has finished, whichever
//! stream it runs on, and while it waits it can hold a driver lock that launches take: a launch made
//! on another thread during an unload then returns only when the device's running kernels end
//! (`docs/decisions.md#cuda-modules-kept`). So a dropped executable's module is not unloaded at
//! once: its context keeps it ([`KeptModules`], up to [`KEPT_MODULES`]) until `Device::trim` or the
//! context's drop, when the embedder says the device is idle or nothing runs on it any more. A
//! module that would overflow that is the oldest kept one's cue to go: it is unloaded on one
//! process-wide thread, never where the executable dropped (often a completion thread, whose
//! queue's later retirements would wait behind other queues' kernels). Were that thread not
//! started, the unload is made where the executable dropped.

use std::collections::VecDeque;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::CUmodule;
use hal::driver::lock;

use crate::sys::context::{Bound, Context};
use crate::sys::result;

/// Modules of dropped executables one context keeps loaded.
pub(crate) const KEPT_MODULES: usize = 64;

/// A module handle that moves between threads.
struct Module(CUmodule);

// SAFETY: a CUmodule is a driver handle usable from any thread where its context is bound; whoever
// holds this binds the context before unloading it, and unloads it once.
unsafe impl Send for Module {}

/// The modules of a context's dropped executables, oldest first.
#[derive(Default)]
pub(crate) struct KeptModules {
    modules: Mutex<VecDeque<Module>>,
}

impl KeptModules {
    /// How many are kept.
    pub(crate) fn len(&self) -> usize {
        lock(&self.modules).len()
    }

    /// Keeps `module`; hands back the oldest one when that makes more than [`KEPT_MODULES`].
    fn keep(&self, module: CUmodule) -> Option<Module> {
        let mut modules = lock(&self.modules);
        modules.push_back(Module(module));
        (modules.len() > KEPT_MODULES).then(|| modules.pop_front()).flatten()
    }

    /// Takes every kept module.
    fn take_all(&self) -> Vec<Module> {
        lock(&self.modules).drain(..).collect()
    }

    /// Unloads every kept module here (the context's drop: nothing of it runs any more).
    pub(crate) fn unload_all(&self, bound: &Bound<'_>) {
        for module in self.take_all() {
            // SAFETY: kept modules belong to this context, are unloaded once (taken out above), and
            // their executables dropped, so nothing launches their functions.
            if let Err(e) = unsafe { result::module_unload(bound, module.0) } {
                tracing::debug!(%e, "unloading a kept module failed");
            }
        }
    }
}

/// A module to unload and the context it was loaded in.
struct Unload {
    context: Arc<Context>,
    module: Module,
}

impl Unload {
    fn run(self) {
        let unloaded = self.context.bind().and_then(|bound| {
            // SAFETY: the module is unloaded once, here (see `retire`'s contract).
            unsafe { result::module_unload(&bound, self.module.0) }
        });
        if let Err(e) = unloaded {
            tracing::debug!(%e, "unloading a module failed");
        }
    }
}

/// Retires `module` of `context`, whose executable dropped: the context keeps it, and the oldest
/// kept one is unloaded on the unloader thread if that makes too many.
///
/// # Safety
/// `module` was loaded in `context`, is retired once, and nothing launches its functions any more.
pub(crate) unsafe fn retire(context: &Arc<Context>, module: CUmodule) {
    if let Some(oldest) = context.kept_modules().keep(module) {
        unload_elsewhere(Unload { context: context.clone(), module: oldest });
    }
}

/// Unloads every module `context` keeps, on the unloader thread (`Device::trim`).
pub(crate) fn unload_kept(context: &Arc<Context>) {
    for module in context.kept_modules().take_all() {
        unload_elsewhere(Unload { context: context.clone(), module });
    }
}

/// Sends `job` to the unloader thread (or runs it here, if that cannot be started).
fn unload_elsewhere(job: Unload) {
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
    let refused = match sender {
        Some(sender) => lock(sender).send(job).err().map(|e| e.0),
        None => Some(job),
    };
    if let Some(job) = refused {
        job.run();
    }
}
