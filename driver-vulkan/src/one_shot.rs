//! Small submissions the driver makes for itself and waits for at once, outside any HAL queue's
//! order: zeroing new device-local memory the host cannot map, and the clock anchor of profiling.
//! They share a command pool and a fence of the device's, apart from every stream's; they wait on
//! nothing, so each completes once the device reaches it.

use std::sync::Arc;
use std::time::Instant;

use ash::vk;
use hal::Result;
use hal::driver::lock;

use crate::error::from_vk;
use crate::gpu::Gpu;

/// The command pool, command buffer and fence one-shot submissions reuse: made at a device's first
/// one, kept until it drops (creating them each time costs more than the submission).
pub struct OneShotContext {
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
}

impl OneShotContext {
    fn new(gpu: &Gpu) -> Result<OneShotContext> {
        let device = &gpu.device;
        let info = vk::CommandPoolCreateInfo::default()
            .flags(vk::CommandPoolCreateFlags::TRANSIENT | vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER)
            .queue_family_index(gpu.physical.queue_family);
        // SAFETY: a valid create info; destroyed on the error paths below or by `destroy`.
        let pool = unsafe { device.create_command_pool(&info, None) }.map_err(|e| from_vk("vkCreateCommandPool", e))?;
        let allocate = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is ours alone.
        let made = unsafe { device.allocate_command_buffers(&allocate) }
            .map_err(|e| from_vk("vkAllocateCommandBuffers", e))
            .and_then(|cmds| {
                // SAFETY: a valid create info; destroyed by `destroy`.
                let fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }
                    .map_err(|e| from_vk("vkCreateFence", e))?;
                Ok((cmds[0], fence))
            });
        match made {
            Ok((cmd, fence)) => Ok(OneShotContext { pool, cmd, fence }),
            Err(e) => {
                // SAFETY: nothing of the pool was submitted.
                unsafe { device.destroy_command_pool(pool, None) };
                Err(e)
            }
        }
    }

    /// Destroys the objects (nothing of them in use: every submission was waited for).
    pub fn destroy(self, device: &ash::Device) {
        // SAFETY: no submission of the context is pending (each was waited for, or never made).
        unsafe {
            device.destroy_fence(self.fence, None);
            device.destroy_command_pool(self.pool, None);
        }
    }
}

/// Records commands with `record` into a one-time command buffer, submits it to the first Vulkan
/// queue and waits for it; `what` names it in errors. Returns the host instants just before the
/// submit call and just after the wait. One at a time per device (they share a context).
pub fn run(gpu: &Arc<Gpu>, what: &str, record: impl FnOnce(vk::CommandBuffer)) -> Result<(Instant, Instant)> {
    let device = &gpu.device;
    let mut slot = lock(&gpu.one_shot);
    if slot.is_none() {
        *slot = Some(OneShotContext::new(gpu)?);
    }
    let Some(context) = slot.as_ref() else { return Err(hal::Error::internal("vulkan: no one-shot context")) };
    let (cmd, fence) = (context.cmd, context.fence);
    let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
    // SAFETY: the command buffer's last submission completed (waited for below, under this lock),
    // so it may be reset and recorded again; the fence is unsignalled (reset after each wait).
    unsafe {
        device
            .reset_command_buffer(cmd, vk::CommandBufferResetFlags::empty())
            .map_err(|e| from_vk("vkResetCommandBuffer", e))?;
        device.begin_command_buffer(cmd, &begin).map_err(|e| from_vk("vkBeginCommandBuffer", e))?;
    }
    record(cmd);
    // SAFETY: as above, recorded.
    unsafe { device.end_command_buffer(cmd) }.map_err(|e| from_vk("vkEndCommandBuffer", e))?;
    let cmds = [cmd];
    let submit = vk::SubmitInfo::default().command_buffers(&cmds);
    let before = Instant::now();
    let queue = lock(gpu.queue(0));
    // SAFETY: the queue is locked; the command buffer is recorded and waits on nothing.
    let submitted = unsafe { device.queue_submit(*queue, &[submit], fence) };
    drop(queue);
    let reached_queue = submitted.is_ok();
    // SAFETY: the fence is live; waited on only when the submission was made.
    let waited = submitted.and_then(|()| unsafe { device.wait_for_fences(&[fence], true, u64::MAX) });
    let after = Instant::now();
    match waited {
        // SAFETY: the fence's submission completed.
        Ok(()) => unsafe { device.reset_fences(&[fence]) }.map_err(|e| from_vk("vkResetFences", e))?,
        Err(e) => {
            // Not reused: a submission that never reached the queue leaves nothing pending, so its
            // objects go now; one whose wait failed (a lost device) may still be, so they are left
            // to the device's teardown.
            if let Some(context) = slot.take().filter(|_| !reached_queue) {
                context.destroy(device);
            }
            return Err(from_vk(&format!("vkQueueSubmit/vkWaitForFences ({what})"), e));
        }
    }
    Ok((before, after))
}

/// Fills the first `size` bytes (a multiple of 4) of `buffer` with zeros on the device and waits.
pub fn zero(gpu: &Arc<Gpu>, buffer: vk::Buffer, size: u64) -> Result<()> {
    run(gpu, "zeroing new device memory", |cmd| {
        // SAFETY: `buffer` is a live buffer of this device with TRANSFER_DST usage and at least
        // `size` bytes; the command buffer is recording.
        unsafe { gpu.device.cmd_fill_buffer(cmd, buffer, 0, size, 0) };
    })
    .map(|_| ())
}
