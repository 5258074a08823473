//! Binding-table executes replayed without re-recording. A reusable command buffer recorded
//! against binding slots gets its commands resolved for each execute's table; where the device
//! has `descriptorBindingStorageBufferUpdateAfterBind`, its recordings bind one update-after-bind
//! descriptor set per dispatch instead of pushing the buffers, and each execute writes its own
//! table's buffers into the sets of the recording it leased (not pending: its stream's timeline
//! reached its last submission) before submitting it. Update-after-bind is what lets a set bound
//! in a recorded command buffer be written without invalidating the recording.
//!
//! Only dispatch bindings change between executes this way: a recording bakes the buffers of
//! fills, updates, copies and indirect counts into the command stream, so an execute whose table
//! moves one of those (or names a transient buffer there) is recorded at its issue as before.

use std::sync::{Arc, Mutex, Weak};

use ash::vk;
use hal::driver::{BindingState, Command, lock};
use hal::{Error, Result};

use super::record::{Keep, descriptor_info};
use super::replay::Replays;
use crate::error::from_vk;
use crate::executable::Pipeline;
use crate::gpu::Gpu;
use crate::memory::{Block, VulkanMemory, resolve};

/// What a binding-table command buffer keeps across its executes (in its [`BindingState`], so for
/// as long as it lives): the fixed buffers its recordings bake in, as its first replayed execute
/// resolved them (held, so that no other buffer can take their place), and the recordings.
struct BoundCommands {
    fixed: Vec<(Arc<Block>, u64)>,
    replays: Arc<Replays>,
}

/// The recordings that this execute of a binding-table command buffer (its `commands` resolved
/// for its table) replays, writing its dispatch bindings into their sets; `None`: record it at
/// issue (no update-after-bind, a fixed buffer unlike the first execute's or transient, a
/// dispatch with more bindings than an update-after-bind set holds).
pub fn replays_for(gpu: &Gpu, commands: &[Command], state: &BindingState) -> Option<Arc<Replays>> {
    let limit = gpu.update_after_bind?;
    let fixed = fixed_buffers(commands, limit)?;
    let kept = match state.get::<BoundCommands>() {
        Some(kept) => kept,
        None => state.set(Arc::new(BoundCommands { fixed: fixed.clone(), replays: Arc::default() }))?,
    };
    let same = kept.fixed.len() == fixed.len()
        && kept.fixed.iter().zip(&fixed).all(|((a, at), (b, bt))| Arc::ptr_eq(a, b) && at == bt);
    same.then(|| kept.replays.clone())
}

/// The recordings kept in `state`, if its executes replay.
pub fn kept_replays(state: &BindingState) -> Option<Arc<Replays>> {
    state.get::<BoundCommands>().map(|kept| kept.replays.clone())
}

/// Each buffer and byte a recording of `commands` bakes in, in order; `None` where one is
/// transient or unknown, or a dispatch takes more than `limit` bindings.
fn fixed_buffers(commands: &[Command], limit: u32) -> Option<Vec<(Arc<Block>, u64)>> {
    let mut fixed = Vec::new();
    let mut add = |buffer: &hal::Buffer, offset: u64| -> Option<()> {
        if VulkanMemory::of(buffer).ok()?.is_transient() {
            return None;
        }
        let (block, base) = resolve(buffer).ok()?;
        fixed.push((block, base + offset));
        Some(())
    };
    for command in commands {
        match command {
            Command::Fill { target, offset, .. } | Command::Update { target, offset, .. } => add(target, *offset)?,
            Command::Copy { source, source_offset, target, target_offset, .. } => {
                add(source, *source_offset)?;
                add(target, *target_offset)?;
            }
            Command::Dispatch { bindings, .. } if bindings.len() as u64 <= u64::from(limit) => {}
            Command::DispatchIndirect { count, count_offset, bindings, .. }
                if bindings.len() as u64 <= u64::from(limit) =>
            {
                add(count, *count_offset)?
            }
            Command::Barrier => {}
            _ => return None,
        }
    }
    Some(fixed)
}

/// The update-after-bind descriptor sets of one recording: one per dispatch with bindings, with
/// the index of its command.
pub struct BoundSets {
    gpu: Arc<Gpu>,
    /// Null when no dispatch has bindings.
    pool: vk::DescriptorPool,
    sets: Vec<(usize, vk::DescriptorSet)>,
    /// How many descriptors the sets hold, all together.
    descriptors: usize,
    /// What each descriptor of the sets holds, set by set and binding by binding (empty until the
    /// first write): an execute writes only the descriptors its table changes, and none when it
    /// passes the table the recording's last execute passed.
    written: Mutex<Vec<Option<Written>>>,
}

/// A descriptor as written: the buffer's block (weakly: the sets do not keep memory alive) and the
/// range. While this `Weak` lives no other block can take its address, so an execute whose block
/// is at that address has the very block the descriptor names, alive (the execute holds it).
struct Written {
    block: Weak<Block>,
    offset: u64,
    range: u64,
}

impl Written {
    /// Whether the descriptor already holds `info` of `block`.
    fn holds(&self, block: &Arc<Block>, info: &vk::DescriptorBufferInfo) -> bool {
        std::ptr::eq(self.block.as_ptr(), Arc::as_ptr(block)) && self.offset == info.offset && self.range == info.range
    }
}

impl BoundSets {
    /// A pool with room for a set per dispatch of `commands` that has bindings.
    pub fn new(gpu: &Arc<Gpu>, commands: &[Command]) -> Result<BoundSets> {
        let (mut sets, mut descriptors) = (0u64, 0u64);
        for command in commands {
            if let Command::Dispatch { bindings, .. } | Command::DispatchIndirect { bindings, .. } = command
                && !bindings.is_empty()
            {
                sets += 1;
                descriptors += bindings.len() as u64;
            }
        }
        let mut bound = BoundSets {
            gpu: gpu.clone(),
            pool: vk::DescriptorPool::null(),
            sets: Vec::with_capacity(usize::try_from(sets).unwrap_or(0)),
            descriptors: usize::try_from(descriptors).unwrap_or(0),
            written: Mutex::new(Vec::new()),
        };
        if sets == 0 {
            return Ok(bound);
        }
        let too_many = || {
            Error::resource_exhausted(format!(
                "vulkan: a command buffer of {sets} dispatches with {descriptors} bindings needs more descriptors \
                 than one pool takes"
            ))
        };
        let sizes = [vk::DescriptorPoolSize {
            ty: vk::DescriptorType::STORAGE_BUFFER,
            descriptor_count: u32::try_from(descriptors).map_err(|_| too_many())?,
        }];
        let info = vk::DescriptorPoolCreateInfo::default()
            .flags(vk::DescriptorPoolCreateFlags::UPDATE_AFTER_BIND)
            .max_sets(u32::try_from(sets).map_err(|_| too_many())?)
            .pool_sizes(&sizes);
        // SAFETY: a valid create info on a device with update-after-bind enabled; destroyed in `Drop`.
        bound.pool = unsafe { gpu.device.create_descriptor_pool(&info, None) }
            .map_err(|e| from_vk("vkCreateDescriptorPool", e))?;
        Ok(bound)
    }

    /// A set of `pipeline`'s set 0 layout for the dispatch at command `at`.
    pub fn allocate(&mut self, at: usize, pipeline: &Pipeline) -> Result<vk::DescriptorSet> {
        let layouts = [pipeline.set_layout];
        let info = vk::DescriptorSetAllocateInfo::default().descriptor_pool(self.pool).set_layouts(&layouts);
        // SAFETY: the pool has room for one set per dispatch with bindings (counted in `new`), and
        // only this recording's thread allocates from it.
        let sets = unsafe { self.gpu.device.allocate_descriptor_sets(&info) }
            .map_err(|e| from_vk("vkAllocateDescriptorSets", e))?;
        let set = *sets.first().ok_or_else(|| Error::internal("vulkan: no descriptor set allocated"))?;
        self.sets.push((at, set));
        Ok(set)
    }

    /// The descriptors the dispatch bindings of `commands` (an execute's, resolved for its table)
    /// put in the sets, keeping their memory in `keep`. Every recording of one command buffer has
    /// sets alike, so one recording's answer serves them all.
    pub fn descriptors(&self, commands: &[Command], keep: &mut Keep) -> Result<Descriptors> {
        let mut entries = Vec::with_capacity(self.descriptors);
        keep.blocks.reserve(self.descriptors);
        for (index, &(at, _)) in self.sets.iter().enumerate() {
            let bindings = match commands.get(at) {
                Some(Command::Dispatch { bindings, .. } | Command::DispatchIndirect { bindings, .. }) => bindings,
                _ => return Err(Error::internal(format!("vulkan: command {at} of a replayed execute is no dispatch"))),
            };
            for (binding, buffer) in bindings.iter().enumerate() {
                let info = descriptor_info(&self.gpu, binding, buffer, keep)
                    .map_err(|e| e.context(format!("command {at}")))?;
                // `descriptor_info` keeps the block the descriptor names last.
                entries.push(Descriptor { set: index, binding: binding as u32, info, kept: keep.blocks.len() - 1 });
            }
        }
        Ok(Descriptors { entries })
    }

    /// Whether the sets hold every descriptor of `wanted` (whose memory `keep` holds) already: an
    /// execute with that table writes nothing, so it may replay the recording even while it is
    /// pending.
    pub fn holds(&self, wanted: &Descriptors, keep: &Keep) -> bool {
        let written = lock(&self.written);
        written.len() == wanted.entries.len()
            && wanted.entries.iter().zip(written.iter()).all(|(descriptor, held)| {
                held.as_ref().is_some_and(|held| held.holds(&keep.blocks[descriptor.kept], &descriptor.info))
            })
    }

    /// Writes into the sets the descriptors of `wanted` (whose memory `keep` holds) that they do
    /// not hold already. The recording must not be pending.
    pub fn write(&self, wanted: &Descriptors, keep: &Keep) {
        let mut written = lock(&self.written);
        if written.len() != wanted.entries.len() {
            written.clear();
            written.resize_with(wanted.entries.len(), || None);
        }
        let mut changed = Vec::new();
        for (descriptor, held) in wanted.entries.iter().zip(written.iter_mut()) {
            let block = &keep.blocks[descriptor.kept];
            if held.as_ref().is_some_and(|held| held.holds(block, &descriptor.info)) {
                continue;
            }
            *held = Some(Written {
                block: Arc::downgrade(block),
                offset: descriptor.info.offset,
                range: descriptor.info.range,
            });
            if changed.is_empty() {
                changed.reserve_exact(wanted.entries.len());
            }
            changed.push(
                vk::WriteDescriptorSet::default()
                    .dst_set(self.sets[descriptor.set].1)
                    .dst_binding(descriptor.binding)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(std::slice::from_ref(&descriptor.info)),
            );
        }
        if changed.is_empty() {
            return;
        }
        // SAFETY: the sets are live and not in use by a pending submission (the recording's lease
        // saw its last submission complete); their bindings are update-after-bind, so writing them
        // leaves the recording valid. The buffers are kept with this submission, and so are those
        // of the descriptors left as they were (same blocks, alive).
        unsafe { self.gpu.device.update_descriptor_sets(&changed, &[]) };
    }
}

/// An execute's descriptors for a binding-table command buffer's sets, in the sets' order.
pub struct Descriptors {
    entries: Vec<Descriptor>,
}

/// One descriptor: which set (by its place among the recording's) and binding, what it names, and
/// where in the execute's `Keep` its block is.
struct Descriptor {
    set: usize,
    binding: u32,
    info: vk::DescriptorBufferInfo,
    kept: usize,
}

impl Drop for BoundSets {
    fn drop(&mut self) {
        if self.pool != vk::DescriptorPool::null() {
            // SAFETY: dropped with its recording, which is not pending (see `Recording`'s drop);
            // destroying the pool frees its sets.
            unsafe { self.gpu.device.destroy_descriptor_pool(self.pool, None) };
        }
    }
}
