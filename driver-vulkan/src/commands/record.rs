//! Recording HAL commands into a `VkCommandBuffer`. Every buffer and executable a recording uses is
//! kept in its [`Keep`] until the submission completes. A full memory barrier separates each
//! command from the next (HAL commands run in order on every driver), and one at the end makes the
//! device's writes visible to the host's later reads. A stream's [`CommandPool`] hands out the
//! command buffers recorded into.

use std::sync::{Arc, Mutex};

use ash::vk;
use hal::driver::{Command, ExecutableExt, lock};
use hal::{Buffer, Error, Executable, Result};

use super::bound::BoundSets;
use super::{CHECK_SLOT_BYTES, check_binding_range};
use crate::error::from_vk;
use crate::executable::{Pipeline, VulkanExecutable};
use crate::gpu::Gpu;
use crate::memory::{Block, Placement, resolve};

/// What a recorded submission holds until it completes.
#[derive(Default)]
pub struct Keep {
    /// Buffers it reads or writes, and its staging buffers.
    pub blocks: Vec<Arc<Block>>,
    /// Executables whose pipelines it binds.
    pub executables: Vec<Executable>,
}

/// Records into one command buffer in the recording state.
pub struct Recorder<'a> {
    gpu: &'a Arc<Gpu>,
    cmd: vk::CommandBuffer,
    keep: &'a mut Keep,
    /// A query pool and the command indices of the dispatches to time (queries `2 + 2k` and
    /// `3 + 2k` for the `k`-th of them).
    timed: Option<(vk::QueryPool, &'a [usize])>,
    /// Where indirect dispatches' counts are checked.
    checks: Option<CountChecks<'a>>,
    /// Where dispatches take an update-after-bind set each, written at every execute, instead of
    /// pushing their buffers now.
    sets: Option<&'a mut BoundSets>,
    /// The index of the command being recorded.
    at: usize,
    /// The pipeline bound last: a dispatch of the same one does not bind it again.
    bound: Option<vk::Pipeline>,
    /// The layout and buffers pushed last to set 0: a dispatch pushing the same ones does not push
    /// again (pushing with another layout replaces this).
    pushed: Option<PushedSet>,
    /// The pipeline stages of the commands recorded so far (see [`Self::wait_stages`]).
    stages: vk::PipelineStageFlags,
}

/// A push-descriptor set as pushed: the layout, and each binding's buffer, offset and range.
type PushedSet = (vk::PipelineLayout, Vec<(vk::Buffer, u64, u64)>);

impl<'a> Recorder<'a> {
    /// A recorder of `cmd` (begun), keeping what it uses in `keep`.
    pub fn new(gpu: &'a Arc<Gpu>, cmd: vk::CommandBuffer, keep: &'a mut Keep) -> Self {
        Recorder {
            gpu,
            cmd,
            keep,
            timed: None,
            checks: None,
            sets: None,
            at: 0,
            bound: None,
            pushed: None,
            stages: vk::PipelineStageFlags::empty(),
        }
    }

    /// Binds each dispatch's buffers through a set of `sets` (written per execute), not pushed.
    pub fn with_bound_sets(mut self, sets: &'a mut BoundSets) -> Self {
        self.sets = Some(sets);
        self
    }

    /// Checks indirect dispatches' counts with `checks` (see [`CHECK_COUNT_WGSL`](super::CHECK_COUNT_WGSL)).
    pub fn with_count_checks(mut self, checks: CountChecks<'a>) -> Self {
        self.checks = Some(checks);
        self
    }

    /// Times the dispatches at command indices `dispatches` into `pool`: queries `2 + 2k` and
    /// `3 + 2k` frame the `k`-th of them.
    pub fn with_timing(mut self, pool: vk::QueryPool, dispatches: &'a [usize]) -> Self {
        self.timed = Some((pool, dispatches));
        self
    }

    /// The stages a submission of this recording waits at: those of the commands it recorded, so
    /// that a wait holds back only what the recording runs. A wait at `ALL_COMMANDS` cost NVIDIA
    /// about 1.5 us more between submit and completion than one at `COMPUTE_SHADER`
    /// (`docs/decisions.md#vulkan-wait-stages`). `ALL_COMMANDS` for a recording that runs nothing (a
    /// batch's signal then still follows its waits) or writes timestamps (the first one must not
    /// run ahead of the waits).
    pub fn wait_stages(&self) -> vk::PipelineStageFlags {
        if self.stages.is_empty() { vk::PipelineStageFlags::ALL_COMMANDS } else { self.stages }
    }

    /// Writes timestamp `query` once every earlier command finished.
    pub fn timestamp(&mut self, pool: vk::QueryPool, query: u32) {
        self.stages |= vk::PipelineStageFlags::ALL_COMMANDS;
        // SAFETY: `cmd` is recording; the pool holds `query` (sized by the caller) and was reset
        // at the start of this command buffer.
        unsafe { self.gpu.device.cmd_write_timestamp(self.cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, pool, query) };
    }

    /// The query of the dispatch at command `index` when it is timed.
    fn timed_query(&self, index: usize) -> Option<(vk::QueryPool, u32)> {
        let (pool, dispatches) = self.timed?;
        let k = dispatches.iter().position(|&i| i == index)?;
        Some((pool, 2 + 2 * k as u32))
    }

    /// Records `commands` in order, a barrier between each two.
    ///
    /// Every command is ordered behind the one before it by one barrier naming their two sides, so
    /// an explicit [`Command::Barrier`] adds nothing and records nothing: the command after it is
    /// ordered behind the last command before it, by that one barrier. (Recording the explicit
    /// barrier as well, with the barriers on each side of it, made three barriers where one does,
    /// and NVIDIA pays device time for each.)
    pub fn commands(&mut self, commands: &[Command]) -> Result<()> {
        let mut previous: Option<Side> = None;
        for (index, command) in commands.iter().enumerate() {
            let explicit_barrier = matches!(command, Command::Barrier);
            if !explicit_barrier && let Some(before) = previous {
                self.barrier_between(before, Side::of(command));
            }
            self.at = index;
            let timed = self.timed_query(index);
            if let Some((pool, query)) = timed {
                self.timestamp(pool, query);
            }
            if !explicit_barrier {
                self.command(command).map_err(|e| e.context(format!("command {index}")))?;
                previous = Some(Side::of(command));
            }
            if let Some((pool, query)) = timed {
                self.timestamp(pool, query + 1);
            }
        }
        Ok(())
    }

    /// Records one command.
    pub fn command(&mut self, command: &Command) -> Result<()> {
        match command {
            Command::Fill { target, offset, length, pattern, pattern_len } => {
                self.fill(target, *offset, *length, *pattern, *pattern_len)
            }
            Command::Update { target, offset, data } => self.update(target, *offset, data),
            Command::Copy { source, source_offset, target, target_offset, length } => {
                self.copy(source, *source_offset, target, *target_offset, *length)
            }
            Command::Dispatch { executable, entry_point, workgroups, constants, bindings } => {
                if workgroups.contains(&0) {
                    return Ok(());
                }
                self.bind(executable, *entry_point, constants, bindings)?;
                // SAFETY: `cmd` is recording, with a compute pipeline and its descriptors bound.
                unsafe { self.gpu.device.cmd_dispatch(self.cmd, workgroups[0], workgroups[1], workgroups[2]) };
                self.stages |= vk::PipelineStageFlags::COMPUTE_SHADER;
                Ok(())
            }
            Command::DispatchIndirect { executable, entry_point, count, count_offset, constants, bindings } => {
                let (block, base) = self.block(count)?;
                let at = base + count_offset;
                if at % 4 != 0 {
                    return Err(Error::invalid_argument(format!(
                        "vulkan: {count}: the workgroup count at byte {at} of its memory is not 4-byte aligned"
                    )));
                }
                let (checked, checked_at) = self.check_count(&block, at)?;
                self.bind(executable, *entry_point, constants, bindings)?;
                // SAFETY: as above; the checked count lies inside the scratch buffer.
                unsafe { self.gpu.device.cmd_dispatch_indirect(self.cmd, checked, checked_at) };
                self.stages |= vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::DRAW_INDIRECT;
                Ok(())
            }
            Command::Barrier => {
                self.barrier_between(Side::Any, Side::Any);
                Ok(())
            }
            Command::Collective { .. } => Err(Error::unimplemented(
                "vulkan: collectives are not implemented (Vulkan has no collective library; no channel can be made)",
            )),
        }
    }

    /// Orders `after` behind `before` and makes `before`'s writes visible to `after`'s accesses,
    /// naming only their stages (see [`Side`]): a catch-all barrier (`ALL_COMMANDS`, `MEMORY_*`)
    /// between two dispatches costs NVIDIA far more device time (`docs/decisions.md#vulkan-barriers-and-binds`). Consecutive
    /// barriers chain, so a transfer between two dispatches still orders them (their stage masks
    /// meet at the transfer).
    pub fn barrier_between(&mut self, before: Side, after: Side) {
        let (src_stages, src_access) = before.source();
        let (dst_stages, dst_access) = after.destination();
        let barrier = vk::MemoryBarrier::default().src_access_mask(src_access).dst_access_mask(dst_access);
        // SAFETY: `cmd` is recording.
        unsafe {
            self.gpu.device.cmd_pipeline_barrier(
                self.cmd,
                src_stages,
                dst_stages,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            )
        };
    }

    /// Whether the host may see memory this recording touches (see [`Block::host_may_access`]):
    /// so it needs [`host_barrier`](Self::host_barrier) at its end. A recording whose dispatches
    /// take their buffers from sets written at each execute cannot tell, nor can one with count
    /// checks (their scratch is read by the host): they always do.
    pub fn host_may_access(&self) -> bool {
        self.sets.is_some() || self.checks.is_some() || self.keep.blocks.iter().any(|block| block.host_may_access())
    }

    /// Makes the device's writes visible to host reads after the submission completes.
    pub fn host_barrier(&mut self) {
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(vk::AccessFlags::HOST_READ | vk::AccessFlags::HOST_WRITE);
        // SAFETY: `cmd` is recording.
        unsafe {
            self.gpu.device.cmd_pipeline_barrier(
                self.cmd,
                vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            )
        };
    }

    fn block(&mut self, buffer: &Buffer) -> Result<(Arc<Block>, u64)> {
        let (block, base) = resolve(buffer)?;
        self.keep.blocks.push(block.clone());
        Ok((block, base))
    }

    /// A staging buffer holding `bytes`, kept with the submission.
    fn staging(&mut self, bytes: &[u8]) -> Result<Arc<Block>> {
        let block = Arc::new(Block::new(self.gpu, bytes.len() as u64, None, "hal staging", Placement::Upload, false)?);
        let ptr = block.ptr()?;
        // SAFETY: the new block's mapping holds at least `bytes.len()` bytes and nothing else uses it.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.as_ptr(), bytes.len()) };
        self.keep.blocks.push(block.clone());
        Ok(block)
    }

    fn copy_regions(&mut self, from: vk::Buffer, to: vk::Buffer, regions: &[vk::BufferCopy]) {
        if regions.is_empty() {
            return;
        }
        // SAFETY: `cmd` is recording; the regions lie inside both buffers (ranges checked by the
        // HAL when recorded or submitted; staging sized to fit).
        unsafe { self.gpu.device.cmd_copy_buffer(self.cmd, from, to, regions) };
        self.stages |= vk::PipelineStageFlags::TRANSFER;
    }

    fn update(&mut self, target: &Buffer, offset: u64, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let (block, base) = self.block(target)?;
        let staging = self.staging(data)?;
        let region = vk::BufferCopy { src_offset: 0, dst_offset: base + offset, size: data.len() as u64 };
        self.copy_regions(staging.buffer, block.buffer, &[region]);
        Ok(())
    }

    /// Copies `length` bytes at `offset` of `source` into `staging` (from its byte 0), for the host
    /// to read once the submission completed; the last barrier makes them visible there.
    pub fn read_back(&mut self, source: &Buffer, offset: u64, length: u64, staging: Arc<Block>) -> Result<()> {
        let (block, base) = self.block(source)?;
        if length > 0 {
            let region = vk::BufferCopy { src_offset: base + offset, dst_offset: 0, size: length };
            self.copy_regions(block.buffer, staging.buffer, &[region]);
        }
        self.keep.blocks.push(staging);
        Ok(())
    }

    fn copy(
        &mut self,
        source: &Buffer,
        source_offset: u64,
        target: &Buffer,
        target_offset: u64,
        length: u64,
    ) -> Result<()> {
        if length == 0 {
            return Ok(());
        }
        let (from, from_base) = self.block(source)?;
        let (to, to_base) = self.block(target)?;
        let region =
            vk::BufferCopy { src_offset: from_base + source_offset, dst_offset: to_base + target_offset, size: length };
        self.copy_regions(from.buffer, to.buffer, &[region]);
        Ok(())
    }

    /// `vkCmdFillBuffer` writes whole aligned words; the unaligned edges (at most 3 bytes each) are
    /// copied from a small staging buffer. The pattern's phase starts at the fill's first byte.
    fn fill(&mut self, target: &Buffer, offset: u64, length: u64, pattern: u32, pattern_len: u8) -> Result<()> {
        if length == 0 {
            return Ok(());
        }
        let (block, base) = self.block(target)?;
        let start = base + offset;
        let end = start + length;
        let pattern_bytes = pattern.to_le_bytes();
        let period = u64::from(pattern_len.clamp(1, 4));
        let byte_at = |at: u64| pattern_bytes[((at - start) % period) as usize];
        let (first_word, last_word) = (start.next_multiple_of(4), end / 4 * 4);
        if first_word >= last_word {
            let bytes: Vec<u8> = (start..end).map(byte_at).collect();
            let staging = self.staging(&bytes)?;
            let region = vk::BufferCopy { src_offset: 0, dst_offset: start, size: length };
            self.copy_regions(staging.buffer, block.buffer, &[region]);
            return Ok(());
        }
        let word = u32::from_le_bytes([
            byte_at(first_word),
            byte_at(first_word + 1),
            byte_at(first_word + 2),
            byte_at(first_word + 3),
        ]);
        // SAFETY: `cmd` is recording; the aligned range lies inside the buffer.
        unsafe { self.gpu.device.cmd_fill_buffer(self.cmd, block.buffer, first_word, last_word - first_word, word) };
        self.stages |= vk::PipelineStageFlags::TRANSFER;
        let head: Vec<u8> = (start..first_word).map(byte_at).collect();
        let tail: Vec<u8> = (last_word..end).map(byte_at).collect();
        if head.is_empty() && tail.is_empty() {
            return Ok(());
        }
        let staging = self.staging(&[head.as_slice(), tail.as_slice()].concat())?;
        let mut regions = Vec::new();
        if !head.is_empty() {
            regions.push(vk::BufferCopy { src_offset: 0, dst_offset: start, size: head.len() as u64 });
        }
        if !tail.is_empty() {
            regions.push(vk::BufferCopy {
                src_offset: head.len() as u64,
                dst_offset: last_word,
                size: tail.len() as u64,
            });
        }
        self.copy_regions(staging.buffer, block.buffer, &regions);
        Ok(())
    }

    /// Binds entry point `entry_point`'s pipeline, its buffers (push descriptors) and constants.
    fn bind(
        &mut self,
        executable: &Executable,
        entry_point: u32,
        constants: &[u32],
        bindings: &[hal::BufferBinding],
    ) -> Result<()> {
        let loaded = executable
            .backend()
            .as_any()
            .downcast_ref::<VulkanExecutable>()
            .ok_or_else(|| Error::invalid_argument(format!("vulkan: {executable} is not a Vulkan executable")))?;
        let pipeline = loaded
            .pipelines
            .get(entry_point as usize)
            .ok_or_else(|| Error::out_of_range(format!("vulkan: {executable} has no entry point {entry_point}")))?;
        if bindings.len() != pipeline.bindings || constants.len() != pipeline.constants {
            return Err(Error::invalid_argument(format!(
                "vulkan: dispatch of {executable} entry point {entry_point}: {} bindings and {} constants given, it \
                 takes {} and {}",
                bindings.len(),
                constants.len(),
                pipeline.bindings,
                pipeline.constants
            )));
        }
        self.keep.executables.push(executable.clone());
        if self.sets.is_some() {
            let pipeline = loaded.bound_pipeline(entry_point)?;
            let set = match self.sets.as_deref_mut() {
                Some(sets) if !bindings.is_empty() => Some(sets.allocate(self.at, pipeline)?),
                _ => None,
            };
            self.bind_pipeline_once(pipeline.pipeline);
            if let Some(set) = set {
                // SAFETY: `cmd` is recording; `set` has the layout's set 0 layout and lives with
                // the recording. Its descriptors are written before each submission.
                unsafe {
                    self.gpu.device.cmd_bind_descriptor_sets(
                        self.cmd,
                        vk::PipelineBindPoint::COMPUTE,
                        pipeline.layout,
                        0,
                        &[set],
                        &[],
                    )
                };
                // The set replaces whatever was pushed to set 0.
                self.pushed = None;
            }
            self.push_constants(pipeline, constants);
            return Ok(());
        }
        let infos = bindings
            .iter()
            .enumerate()
            .map(|(index, binding)| descriptor_info(self.gpu, index, binding, self.keep))
            .collect::<Result<Vec<_>>>()?;
        self.bind_pipeline(pipeline, &infos, constants)
    }

    fn push_constants(&mut self, pipeline: &Pipeline, constants: &[u32]) {
        if !constants.is_empty() {
            let bytes: Vec<u8> = constants.iter().flat_map(|c| c.to_le_bytes()).collect();
            // SAFETY: `cmd` is recording; the layout has a push-constant range of exactly these bytes.
            unsafe {
                self.gpu.device.cmd_push_constants(self.cmd, pipeline.layout, vk::ShaderStageFlags::COMPUTE, 0, &bytes)
            };
        }
    }

    /// Binds `pipeline` with `infos` as its storage buffers (set 0, binding i) and `constants`.
    fn bind_pipeline(
        &mut self,
        pipeline: &Pipeline,
        infos: &[vk::DescriptorBufferInfo],
        constants: &[u32],
    ) -> Result<()> {
        self.bind_pipeline_once(pipeline.pipeline);
        let key: Vec<(vk::Buffer, u64, u64)> = infos.iter().map(|i| (i.buffer, i.offset, i.range)).collect();
        let same = self.pushed.as_ref().is_some_and(|(layout, pushed)| *layout == pipeline.layout && *pushed == key);
        if !infos.is_empty() && !same {
            let writes: Vec<vk::WriteDescriptorSet<'_>> = infos
                .iter()
                .enumerate()
                .map(|(i, info)| {
                    vk::WriteDescriptorSet::default()
                        .dst_binding(i as u32)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .buffer_info(std::slice::from_ref(info))
                })
                .collect();
            let push = self.gpu.push.as_ref().ok_or_else(|| {
                Error::unimplemented("vulkan: the device has no VK_KHR_push_descriptor, which dispatches need")
            })?;
            // SAFETY: `cmd` is recording; the layout's set 0 is a push-descriptor set of these bindings.
            unsafe {
                push.cmd_push_descriptor_set(self.cmd, vk::PipelineBindPoint::COMPUTE, pipeline.layout, 0, &writes)
            };
            self.pushed = Some((pipeline.layout, key));
        }
        self.push_constants(pipeline, constants);
        Ok(())
    }

    /// Binds `pipeline` unless it is bound already: consecutive dispatches of one entry point (the
    /// common case of a recorded function) bind it once, as a hand-written command buffer does.
    fn bind_pipeline_once(&mut self, pipeline: vk::Pipeline) {
        if self.bound == Some(pipeline) {
            return;
        }
        // SAFETY: `cmd` is recording; the pipeline is kept alive with the submission.
        unsafe { self.gpu.device.cmd_bind_pipeline(self.cmd, vk::PipelineBindPoint::COMPUTE, pipeline) };
        self.bound = Some(pipeline);
    }

    /// Records the count check of the next indirect dispatch: the checker copies the count at
    /// `at` of `count` into the submission's scratch, or zeros and a flag where it is past the
    /// device's limits. Returns where the checked count lies.
    fn check_count(&mut self, count: &Arc<Block>, at: u64) -> Result<(vk::Buffer, u64)> {
        let Some(checks) = self.checks.as_mut() else {
            return Err(Error::internal("vulkan: an indirect dispatch recorded without its count check"));
        };
        let slot = checks.next;
        checks.next += 1;
        let (pipeline, scratch) = (checks.pipeline, checks.scratch.clone());
        let alignment = self.gpu.physical.limits.min_storage_buffer_offset_alignment.max(1);
        let bound = at / alignment * alignment;
        let infos = [
            vk::DescriptorBufferInfo { buffer: count.buffer, offset: bound, range: at - bound + INDIRECT_COUNT_BYTES },
            vk::DescriptorBufferInfo {
                buffer: scratch.buffer,
                offset: slot * CHECK_SLOT_BYTES,
                range: CHECK_SLOT_BYTES,
            },
        ];
        let limits = self.gpu.physical.limits.max_compute_work_group_count;
        self.bind_pipeline(pipeline, &infos, &[((at - bound) / 4) as u32, limits[0], limits[1], limits[2]])?;
        // SAFETY: `cmd` is recording with the checker bound.
        unsafe { self.gpu.device.cmd_dispatch(self.cmd, 1, 1, 1) };
        self.stages |= vk::PipelineStageFlags::COMPUTE_SHADER;
        self.barrier_between(Side::Compute, Side::IndirectCount);
        Ok((scratch.buffer, slot * CHECK_SLOT_BYTES))
    }
}

/// One side of a barrier inside a command buffer: what the commands before it did, or what the
/// command after it will do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// A dispatch: shader reads and writes in the compute stage.
    Compute,
    /// A fill, update or copy: the transfer stage.
    Transfer,
    /// An indirect dispatch's launch reading its checked count.
    IndirectCount,
    /// Anything a command buffer holds (an explicit barrier).
    Any,
}

impl Side {
    /// The side of `command`.
    pub fn of(command: &Command) -> Side {
        match command {
            Command::Dispatch { .. } | Command::DispatchIndirect { .. } => Side::Compute,
            Command::Fill { .. } | Command::Update { .. } | Command::Copy { .. } => Side::Transfer,
            _ => Side::Any,
        }
    }

    /// Stages and write accesses the barrier waits for.
    fn source(self) -> (vk::PipelineStageFlags, vk::AccessFlags) {
        match self {
            Side::Compute => (vk::PipelineStageFlags::COMPUTE_SHADER, vk::AccessFlags::SHADER_WRITE),
            Side::Transfer => (vk::PipelineStageFlags::TRANSFER, vk::AccessFlags::TRANSFER_WRITE),
            // Nothing writes in the indirect stage: wait for whatever may have written.
            Side::IndirectCount | Side::Any => (
                vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE,
            ),
        }
    }

    /// Stages and accesses the barrier holds back.
    fn destination(self) -> (vk::PipelineStageFlags, vk::AccessFlags) {
        // Storage buffers only: IREE's Vulkan ABI binds no uniform buffers (constants are push
        // constants), so the barrier names no UNIFORM_READ.
        let shader = vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE;
        let transfer = vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE;
        match self {
            Side::Compute => (vk::PipelineStageFlags::COMPUTE_SHADER, shader),
            Side::Transfer => (vk::PipelineStageFlags::TRANSFER, transfer),
            Side::IndirectCount => (
                vk::PipelineStageFlags::DRAW_INDIRECT | vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::AccessFlags::INDIRECT_COMMAND_READ | shader,
            ),
            Side::Any => (
                vk::PipelineStageFlags::COMPUTE_SHADER
                    | vk::PipelineStageFlags::TRANSFER
                    | vk::PipelineStageFlags::DRAW_INDIRECT,
                shader | transfer | vk::AccessFlags::INDIRECT_COMMAND_READ,
            ),
        }
    }
}

/// Bytes of an indirect workgroup count.
const INDIRECT_COUNT_BYTES: u64 = hal::driver::INDIRECT_COUNT_BYTES;

/// The count checks of one submission: the checker, the scratch it writes and the next slot.
pub struct CountChecks<'a> {
    pub(crate) pipeline: &'a Pipeline,
    pub(crate) scratch: Arc<Block>,
    pub(crate) next: u64,
}

/// The descriptor of dispatch binding `index`, its memory kept in `keep`. `InvalidArgument` where
/// it starts off the device's `minStorageBufferOffsetAlignment`, `OutOfRange` past its
/// `maxStorageBufferRange`.
pub fn descriptor_info(
    gpu: &Gpu,
    index: usize,
    binding: &hal::BufferBinding,
    keep: &mut Keep,
) -> Result<vk::DescriptorBufferInfo> {
    let limits = &gpu.physical.limits;
    let (block, base) = resolve(&binding.buffer)?;
    let offset = base + binding.offset;
    let alignment = limits.min_storage_buffer_offset_alignment.max(1);
    if !offset.is_multiple_of(alignment) {
        return Err(Error::invalid_argument(format!(
            "vulkan: binding {index} ({}) starts at byte {offset} of its memory, not a multiple of the device's \
             minStorageBufferOffsetAlignment ({alignment})",
            binding.buffer
        )));
    }
    check_binding_range(index, &binding.buffer, binding.length, limits.max_storage_buffer_range)?;
    if binding.length == 0 {
        // A descriptor's range is never 0 (and `VK_WHOLE_SIZE` would be the whole buffer): an empty
        // binding reaches the device's empty-binding block instead, so no byte of the embedder's
        // buffer is in its reach.
        let empty = empty_binding(&block)?;
        let info = vk::DescriptorBufferInfo { buffer: empty.buffer, offset: 0, range: vk::WHOLE_SIZE };
        keep.blocks.push(empty);
        return Ok(info);
    }
    let info = vk::DescriptorBufferInfo { buffer: block.buffer, offset, range: binding.length };
    keep.blocks.push(block);
    Ok(info)
}

/// The block zero-length bindings reach on `near`'s device: a few bytes of its own, shared while
/// any submission holds it.
fn empty_binding(near: &Arc<Block>) -> Result<Arc<Block>> {
    let gpu = near.gpu();
    let mut cached = lock(&gpu.empty_binding);
    if let Some(block) = cached.upgrade() {
        return Ok(block);
    }
    let block = Arc::new(Block::new(gpu, EMPTY_BINDING_BYTES, None, "empty binding", Placement::Upload, false)?);
    *cached = Arc::downgrade(&block);
    Ok(block)
}

/// The size of the block empty bindings reach: one 16-byte vector.
const EMPTY_BINDING_BYTES: u64 = 16;

/// A stream's command pool. Vulkan allows one thread at a time on a pool and its command
/// buffers, so only the thread issuing on the stream (holding its issuer lock) calls Vulkan with
/// it; a completed submission (or a dropped replay recording) hands its command buffer back
/// through `idle`, and an issuing thread records into it again.
pub(crate) struct CommandPool {
    gpu: Arc<Gpu>,
    pool: vk::CommandPool,
    idle: Mutex<Vec<vk::CommandBuffer>>,
}

impl CommandPool {
    /// `pool`, a command pool of `gpu`'s device, destroyed with this.
    pub(crate) fn new(gpu: Arc<Gpu>, pool: vk::CommandPool) -> Self {
        CommandPool { gpu, pool, idle: Mutex::new(Vec::new()) }
    }

    /// A command buffer to record into (the issuing thread only).
    pub(crate) fn acquire(&self) -> Result<vk::CommandBuffer> {
        if let Some(cmd) = lock(&self.idle).pop() {
            return Ok(cmd);
        }
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(self.pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: only the thread holding the stream's issuer lock uses the pool.
        let buffers = unsafe { self.gpu.device.allocate_command_buffers(&info) }
            .map_err(|e| from_vk("vkAllocateCommandBuffers", e))?;
        Ok(buffers[0])
    }

    /// Hands back `cmd`, not pending (never submitted, or completed); any thread.
    pub(crate) fn release(&self, cmd: vk::CommandBuffer) {
        lock(&self.idle).push(cmd);
    }

    /// Hands back `cmd`, whose recording failed part-way (the issuing thread only). It is reset first:
    /// a command buffer left in the recording state cannot be begun again.
    pub(crate) fn release_failed(&self, cmd: vk::CommandBuffer) {
        // SAFETY: `cmd` is a buffer of this pool (which allows resetting one buffer), not pending,
        // and only the thread holding the stream's issuer lock uses the pool.
        match unsafe { self.gpu.device.reset_command_buffer(cmd, vk::CommandBufferResetFlags::empty()) } {
            Ok(()) => self.release(cmd),
            // Not handed back: it is freed with the pool.
            Err(e) => tracing::error!(%e, "vulkan: resetting a command buffer whose recording failed"),
        }
    }
}

impl Drop for CommandPool {
    fn drop(&mut self) {
        // SAFETY: no command buffer of the pool is pending (each in-flight entry holds the pool),
        // and destroying the pool frees them all.
        unsafe { self.gpu.device.destroy_command_pool(self.pool, None) };
    }
}
