//! Small submissions the driver makes for itself and waits for at once, outside any HAL queue's
//! order: zeroing new device-local memory the host cannot map, and the clock anchor of profiling.
//! Each gets a command pool and a fence of its own, so it touches no stream's state; its waits are
//! none, so it completes once the device reaches it.

use std::sync::Arc;
use std::time::Instant;

use ash::vk;
use hal::Result;
use hal::driver::lock;

use crate::error::from_vk;
use crate::gpu::Gpu;

/// Records commands with `record` into a one-time command buffer, submits it to the first Vulkan
/// queue and waits for it; `what` names it in errors. Returns the host instants just before the
/// submit call and just after the wait.
pub fn run(gpu: &Arc<Gpu>, what: &str, record: impl FnOnce(vk::CommandBuffer)) -> Result<(Instant, Instant)> {
    let device = &gpu.device;
    let info = vk::CommandPoolCreateInfo::default()
        .flags(vk::CommandPoolCreateFlags::TRANSIENT)
        .queue_family_index(gpu.physical.queue_family);
    // SAFETY: a valid create info; destroyed below once nothing of it is in use.
    let pool = unsafe { device.create_command_pool(&info, None) }.map_err(|e| from_vk("vkCreateCommandPool", e))?;
    let ran = (|| {
        let allocate = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is ours alone.
        let cmd = unsafe { device.allocate_command_buffers(&allocate) }
            .map_err(|e| from_vk("vkAllocateCommandBuffers", e))?[0];
        let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: a fresh command buffer of our own pool.
        unsafe { device.begin_command_buffer(cmd, &begin) }.map_err(|e| from_vk("vkBeginCommandBuffer", e))?;
        record(cmd);
        // SAFETY: as above, recorded.
        unsafe { device.end_command_buffer(cmd) }.map_err(|e| from_vk("vkEndCommandBuffer", e))?;
        // SAFETY: a valid create info; destroyed below.
        let fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }
            .map_err(|e| from_vk("vkCreateFence", e))?;
        let cmds = [cmd];
        let submit = vk::SubmitInfo::default().command_buffers(&cmds);
        let before = Instant::now();
        let queue = lock(gpu.queue(0));
        // SAFETY: the queue is locked; the command buffer is recorded and waits on nothing.
        let submitted = unsafe { device.queue_submit(*queue, &[submit], fence) };
        drop(queue);
        // SAFETY: the fence is live; waited on only when the submission was made.
        let waited = submitted.and_then(|()| unsafe { device.wait_for_fences(&[fence], true, u64::MAX) });
        let after = Instant::now();
        // SAFETY: the submission completed (or was never made), so the fence is unused.
        unsafe { device.destroy_fence(fence, None) };
        waited.map_err(|e| from_vk(&format!("vkQueueSubmit/vkWaitForFences ({what})"), e))?;
        Ok((before, after))
    })();
    // SAFETY: the submission completed (or was never made), so nothing of the pool is in use.
    unsafe { device.destroy_command_pool(pool, None) };
    ran
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
