//! One queue's CUDA stream ([`CudaStream`]): the non-blocking `CUstream` the stream model enqueues
//! on, with what belongs to that queue (its callback stream, its indirect-dispatch lane, its progress
//! word). Everything that enqueues work takes one; the stream model (`src/stream.rs`) makes them.

use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{CUstream, CUstream_flags};
use hal::Result;

use crate::host_callback::CallbackStream;
use crate::indirect_launcher::{IndirectLauncher, Lane};
use crate::options::CompletionWait;
use crate::progress_word::ProgressWord;
use crate::sys::context::Context;
use crate::sys::result;

/// One queue's stream. Drained and destroyed on drop.
pub struct CudaStream {
    raw: CUstream,
    queue: usize,
    /// The queue's callback stream, in `CompletionWait::HostCallback` mode only. Dropped after the
    /// dispatch stream drained.
    callback: Option<CallbackStream>,
    context: Arc<Context>,
    indirect: Arc<IndirectLauncher>,
    /// The queue's indirect-dispatch lane, made at its first indirect dispatch; dropped after the
    /// dispatch stream drained (fields drop after `drop`), with the launcher still alive.
    lane: OnceLock<Arc<Lane>>,
    /// The word each mark's record is followed by a write to (`CudaOptions::completion_word`).
    progress: Option<Arc<ProgressWord>>,
}

// SAFETY: a CUstream is a driver handle; the scheduler serialises the calls that enqueue on one
// stream (its issue lock), and the driver's stream functions are thread-safe.
unsafe impl Send for CudaStream {}
// SAFETY: see `Send`.
unsafe impl Sync for CudaStream {}

impl CudaStream {
    /// The stream of queue `queue`, with a progress word if `completion_word` and a callback stream
    /// if `wait` is `HostCallback`.
    pub(crate) fn create(
        context: &Arc<Context>,
        indirect: &Arc<IndirectLauncher>,
        queue: usize,
        completion_word: bool,
        wait: CompletionWait,
    ) -> Result<CudaStream> {
        let flags = CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
        let raw = result::stream_create(&context.bind()?, flags)
            .map_err(|e| e.context(format!("stream of queue {queue}")))?;
        let mut stream = CudaStream {
            raw,
            queue,
            callback: None,
            context: context.clone(),
            indirect: indirect.clone(),
            lane: OnceLock::new(),
            progress: None,
        };
        if completion_word {
            // On failure `stream` drops here and destroys the dispatch stream: nothing leaks.
            stream.progress = Some(Arc::new(ProgressWord::create(context, &context.bind()?)?));
        }
        if wait == CompletionWait::HostCallback {
            // On failure `stream` drops here and destroys the dispatch stream: nothing leaks.
            stream.callback = Some(CallbackStream::create(context, queue)?);
        }
        Ok(stream)
    }

    /// The stream handle.
    pub fn raw(&self) -> CUstream {
        self.raw
    }

    /// The queue this stream serves.
    pub(crate) fn queue(&self) -> usize {
        self.queue
    }

    /// The word each mark's record is followed by a write to (`CudaOptions::completion_word`).
    pub(crate) fn progress(&self) -> Option<&Arc<ProgressWord>> {
        self.progress.as_ref()
    }

    /// The queue's callback stream (`CompletionWait::HostCallback` only).
    pub fn callback(&self) -> Option<&CallbackStream> {
        self.callback.as_ref()
    }

    /// The device's indirect-dispatch launcher.
    pub fn indirect(&self) -> &IndirectLauncher {
        &self.indirect
    }

    /// The queue's indirect-dispatch lane (made on first use; called under the issue lock).
    pub fn lane(&self) -> Result<Arc<Lane>> {
        if let Some(lane) = self.lane.get() {
            return Ok(lane.clone());
        }
        let lane = Arc::new(self.indirect.lane()?);
        Ok(self.lane.get_or_init(|| lane).clone())
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        let bound = match self.context.bind() {
            Ok(bound) => bound,
            Err(e) => {
                tracing::warn!(queue = self.queue, %e, "cannot bind the context to destroy a stream");
                return;
            }
        };
        // After a fault this returns the sticky error at once.
        let drained = result::stream_synchronize(&bound, self.raw);
        // SAFETY: destroyed once, here; nothing is enqueued on it any more (the scheduler stopped).
        let destroyed = unsafe { result::stream_destroy(&bound, self.raw) };
        for (what, result) in [("drain", drained), ("destroy", destroyed)] {
            if let Err(e) = result {
                tracing::warn!(queue = self.queue, %e, "stream {what} failed at teardown");
            }
        }
    }
}
