//! The device side of a semaphore only the host signals (`SemaphoreFlags::HOST_SIGNAL_ONLY`): a
//! timeline `VkSemaphore` of the driver's own that the host's signals reach through
//! `vkSignalSemaphore`. Work waiting on such a semaphore is submitted ahead of the signal, waiting
//! on this timeline, so the signal releases it on the device with no `vkQueueSubmit` after it: the
//! round trip a raw Vulkan program makes with a host-signalled timeline.
//!
//! Vulkan is otherwise never handed a wait before its signal (`docs/decisions.md`): two HAL queues
//! on one Vulkan queue could then wait on each other there. A host-only value has no device
//! signaller queued behind it, but a wait on it still holds back everything after it on its Vulkan
//! queue, so the gate covers a wait only where the waiting stream has its Vulkan queue to itself
//! (and the driver's own submit-and-wait submissions use another); elsewhere the work is held on
//! the host until the signal, as before.

use std::sync::{Arc, Mutex};

use hal::Result;
use hal::driver::lock;
use hal::driver::stream_model::HostGate;

use crate::gpu::Gpu;
use crate::stream::{Timeline, VulkanEvent, VulkanStreams};

/// A host-signalled semaphore's timeline on one HAL device's queues.
pub(crate) struct VulkanGate {
    gpu: Arc<Gpu>,
    /// Where the device's queues start among the GPU's Vulkan queues.
    first_queue: usize,
    timeline: Arc<Timeline>,
    state: Mutex<GateState>,
}

struct GateState {
    /// The timeline's value: only the host signals it.
    signalled: u64,
    /// The highest value a stream was handed an event for (what a release must reach).
    highest_wait: u64,
}

impl VulkanGate {
    /// A gate at `initial` on the queues of `streams`' device.
    pub(crate) fn new(streams: &VulkanStreams, initial: u64) -> Result<VulkanGate> {
        let timeline = streams.new_timeline(initial)?;
        // Nothing submits its signals: a wait on it is never held for a signal to be issued.
        timeline.set_issued(u64::MAX);
        Ok(VulkanGate {
            gpu: streams.gpu().clone(),
            first_queue: streams.first_queue(),
            timeline: Arc::new(timeline),
            state: Mutex::new(GateState { signalled: initial, highest_wait: initial }),
        })
    }

    /// Moves the timeline to `value`, or as far toward it as the device allows between a timeline's
    /// value and its pending waits: every wait handed out is within that of the value already
    /// (`event_at`), so each is reached either way.
    fn raise(&self, state: &mut GateState, value: u64) -> Result<()> {
        if value <= state.signalled {
            return Ok(());
        }
        let next = value.min(state.signalled.saturating_add(self.gpu.physical.max_timeline_difference));
        self.timeline.signal(next)?;
        state.signalled = next;
        Ok(())
    }
}

impl HostGate<VulkanStreams> for VulkanGate {
    fn event_at(&self, queue: usize, value: u64) -> Option<VulkanEvent> {
        let vk_queue = self.gpu.queue_index(self.first_queue, queue);
        if !self.gpu.queue_has_one_stream(vk_queue) {
            return None;
        }
        let mut state = lock(&self.state);
        if value - state.signalled.min(value) > self.gpu.physical.max_timeline_difference {
            return None;
        }
        state.highest_wait = state.highest_wait.max(value);
        Some(VulkanEvent::at(self.timeline.clone(), value))
    }

    fn signal(&self, value: u64) -> Result<()> {
        let mut state = lock(&self.state);
        self.raise(&mut state, value)
    }

    fn release(&self) {
        let mut state = lock(&self.state);
        let target = state.highest_wait;
        if let Err(e) = self.raise(&mut state, target) {
            tracing::error!(%e, target, "vulkan: releasing the device waits on a failed host-signalled semaphore");
        }
    }
}
