//! Raw-Vulkan baselines: the patterns the HAL workloads issue, done by hand on `ash` with nothing
//! else in the way. Command buffers are recorded once (one `touch` dispatch per buffer, or N with a
//! compute barrier between them); every submission is one `vkQueueSubmit` with a timeline
//! semaphore wait and signal; host waits are `vkWaitSemaphores`. The kernel is the same SPIR-V the
//! HAL loads ([`crate::workloads::touch_spirv`]).

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ash::vk;
use hal::{Error, Result};

/// The most queues the baseline takes (the fan-out row's producer and consumers).
const MAX_QUEUES: usize = 8;

/// The device, one buffer, the `touch` pipeline and a recorded command buffer per dispatch count.
pub struct RawVulkan {
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    /// Up to [`MAX_QUEUES`] queues of the compute family, and at least two entries (its one queue
    /// twice where it has one).
    queues: Vec<vk::Queue>,
    /// How many of `queues` are distinct Vulkan queues.
    distinct_queues: usize,
    pool: vk::CommandPool,
    memory: vk::DeviceMemory,
    buffer: vk::Buffer,
    shader: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    descriptors: vk::DescriptorPool,
    set: vk::DescriptorSet,
    /// Recorded command buffers by dispatch count.
    recorded: HashMap<usize, vk::CommandBuffer>,
    /// A 1-dispatch command buffer for each queue of the fan-out row, whose consumers run at once:
    /// one command buffer pending on several queues at the same time faulted NVIDIA's H200 (Xid 13,
    /// `SKEDCHECK22_INVALIDATE_ACTIVE_QMD`, then `VK_ERROR_DEVICE_LOST`) in the full run.
    fan_out: Vec<vk::CommandBuffer>,
    /// A 1-dispatch command buffer per thread of [`RawVulkan::threaded_chains`] (see
    /// [`RawVulkan::add_thread_buffers`]), for the reason `fan_out` has one per queue.
    thread_buffers: Vec<vk::CommandBuffer>,
    /// The name of the physical device.
    pub name: String,
}

fn vk_err(call: &str) -> impl Fn(vk::Result) -> Error + '_ {
    move |e| Error::internal(format!("raw vulkan: {call} failed: {e:?}"))
}

/// A timeline semaphore destroyed when dropped.
struct Timeline<'a> {
    device: &'a ash::Device,
    semaphore: vk::Semaphore,
}

impl Drop for Timeline<'_> {
    fn drop(&mut self) {
        // SAFETY: every submission using the semaphore completed (each trial waits for its last
        // signal before it returns, and errors end the run after a device wait idle).
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_semaphore(self.semaphore, None);
        }
    }
}

impl RawVulkan {
    /// Opens physical device `ordinal` (in the loader's order), loads `spirv` (entry point
    /// `touch`: binding 0 a storage buffer, one `u32` push constant) and records command buffers
    /// of each of `dispatch_counts` dispatches.
    pub fn new(ordinal: usize, spirv: &[u8], dispatch_counts: &[usize]) -> Result<RawVulkan> {
        // SAFETY: loading the Vulkan loader runs only its initialisers.
        let entry = unsafe { ash::Entry::load() }
            .map_err(|e| Error::unavailable(format!("raw vulkan: the Vulkan loader did not load: {e}")))?;
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
        let create = vk::InstanceCreateInfo::default().application_info(&app);
        // SAFETY: the create info outlives the call.
        let instance = unsafe { entry.create_instance(&create, None) }.map_err(vk_err("vkCreateInstance"))?;
        Self::open(entry, instance, ordinal, spirv, dispatch_counts)
    }

    fn open(
        entry: ash::Entry,
        instance: ash::Instance,
        ordinal: usize,
        spirv: &[u8],
        dispatch_counts: &[usize],
    ) -> Result<RawVulkan> {
        let (device, family, queues, memory_types, name) = match Self::choose(&instance, ordinal) {
            Ok(chosen) => chosen,
            Err(e) => {
                // SAFETY: nothing else was made from the instance.
                unsafe { instance.destroy_instance(None) };
                return Err(e);
            }
        };
        let distinct_queues = if queues.len() == 2 && queues[0] == queues[1] { 1 } else { queues.len() };
        let mut raw = RawVulkan {
            _entry: entry,
            instance,
            device,
            queues,
            distinct_queues,
            pool: vk::CommandPool::null(),
            memory: vk::DeviceMemory::null(),
            buffer: vk::Buffer::null(),
            shader: vk::ShaderModule::null(),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            descriptors: vk::DescriptorPool::null(),
            set: vk::DescriptorSet::null(),
            recorded: HashMap::new(),
            fan_out: Vec::new(),
            thread_buffers: Vec::new(),
            name,
        };
        // From here `raw`'s Drop destroys whatever was made (null handles are ignored).
        raw.build(family, &memory_types, spirv, dispatch_counts)?;
        Ok(raw)
    }

    /// The physical device `ordinal`, a logical device with timeline semaphores on the compute
    /// family the HAL's driver takes, up to [`MAX_QUEUES`] queues of it (at least two entries: its
    /// one queue twice where it has one), its memory types and name.
    #[allow(clippy::type_complexity)]
    fn choose(
        instance: &ash::Instance,
        ordinal: usize,
    ) -> Result<(ash::Device, u32, Vec<vk::Queue>, vk::PhysicalDeviceMemoryProperties, String)> {
        // SAFETY: plain queries on a live instance.
        let physicals =
            unsafe { instance.enumerate_physical_devices() }.map_err(vk_err("vkEnumeratePhysicalDevices"))?;
        let physical = *physicals
            .get(ordinal)
            .ok_or_else(|| Error::not_found(format!("raw vulkan: no physical device {ordinal}")))?;
        // SAFETY: `physical` comes from this instance.
        let (properties, families, memory_types) = unsafe {
            (
                instance.get_physical_device_properties(physical),
                instance.get_physical_device_queue_family_properties(physical),
                instance.get_physical_device_memory_properties(physical),
            )
        };
        let name = properties.device_name_as_c_str().map(CStr::to_string_lossy).unwrap_or_default().into_owned();
        // The family the HAL's driver takes: a compute-only one first (NVIDIA's), else any with
        // compute. On NVIDIA's graphics family a cross-queue hop cost 177 us, against 12-21 us
        // through the HAL on the compute family: a baseline on other hardware queues than the
        // HAL's measures the queues, not the code.
        let compute = |f: &&vk::QueueFamilyProperties| f.queue_flags.contains(vk::QueueFlags::COMPUTE);
        let family = families
            .iter()
            .position(|f| compute(&f) && !f.queue_flags.contains(vk::QueueFlags::GRAPHICS))
            .or_else(|| families.iter().position(|f| compute(&f)))
            .ok_or_else(|| Error::unavailable(format!("raw vulkan: {name} has no compute queue")))?;
        let queue_count = families[family].queue_count.clamp(1, MAX_QUEUES as u32);
        let priorities = [1.0f32; MAX_QUEUES];
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family as u32)
            .queue_priorities(&priorities[..queue_count as usize])];
        let mut timeline = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        let device_info = vk::DeviceCreateInfo::default().queue_create_infos(&queue_info).push_next(&mut timeline);
        // SAFETY: the create infos outlive the call; `physical` comes from this instance.
        let device =
            unsafe { instance.create_device(physical, &device_info, None) }.map_err(vk_err("vkCreateDevice"))?;
        // SAFETY: the queues were requested at creation.
        let mut queues: Vec<vk::Queue> =
            (0..queue_count).map(|i| unsafe { device.get_device_queue(family as u32, i) }).collect();
        if queues.len() == 1 {
            queues.push(queues[0]);
        }
        Ok((device, family as u32, queues, memory_types, name))
    }

    fn build(
        &mut self,
        family: u32,
        memory_types: &vk::PhysicalDeviceMemoryProperties,
        spirv: &[u8],
        dispatch_counts: &[usize],
    ) -> Result<()> {
        let d = &self.device;
        let buffer_info = vk::BufferCreateInfo::default().size(4096).usage(vk::BufferUsageFlags::STORAGE_BUFFER);
        // SAFETY: every create info below outlives its call; each handle is made from `d` and
        // stored in `self` at once, so Drop destroys it.
        unsafe {
            self.buffer = d.create_buffer(&buffer_info, None).map_err(vk_err("vkCreateBuffer"))?;
            let needs = d.get_buffer_memory_requirements(self.buffer);
            let type_index = storage_memory_type(memory_types, needs.memory_type_bits)
                .ok_or_else(|| Error::unavailable("raw vulkan: no memory type for a storage buffer"))?;
            let alloc = vk::MemoryAllocateInfo::default().allocation_size(needs.size).memory_type_index(type_index);
            self.memory = d.allocate_memory(&alloc, None).map_err(vk_err("vkAllocateMemory"))?;
            d.bind_buffer_memory(self.buffer, self.memory, 0).map_err(vk_err("vkBindBufferMemory"))?;

            let words: Vec<u32> = spirv.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
            let module = vk::ShaderModuleCreateInfo::default().code(&words);
            self.shader = d.create_shader_module(&module, None).map_err(vk_err("vkCreateShaderModule"))?;
            let binding = [vk::DescriptorSetLayoutBinding::default()
                .binding(0)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)];
            let set_layout = vk::DescriptorSetLayoutCreateInfo::default().bindings(&binding);
            self.set_layout =
                d.create_descriptor_set_layout(&set_layout, None).map_err(vk_err("vkCreateDescriptorSetLayout"))?;
            let push = [vk::PushConstantRange::default().stage_flags(vk::ShaderStageFlags::COMPUTE).size(4)];
            let set_layouts = [self.set_layout];
            let layout = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts).push_constant_ranges(&push);
            self.layout = d.create_pipeline_layout(&layout, None).map_err(vk_err("vkCreatePipelineLayout"))?;
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(self.shader)
                .name(c"touch");
            let pipeline = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(self.layout)];
            self.pipeline = d
                .create_compute_pipelines(vk::PipelineCache::null(), &pipeline, None)
                .map_err(|(_, e)| vk_err("vkCreateComputePipelines")(e))?[0];
            let sizes = [vk::DescriptorPoolSize::default().ty(vk::DescriptorType::STORAGE_BUFFER).descriptor_count(1)];
            let pool = vk::DescriptorPoolCreateInfo::default().max_sets(1).pool_sizes(&sizes);
            self.descriptors = d.create_descriptor_pool(&pool, None).map_err(vk_err("vkCreateDescriptorPool"))?;
            let allocate =
                vk::DescriptorSetAllocateInfo::default().descriptor_pool(self.descriptors).set_layouts(&set_layouts);
            self.set = d.allocate_descriptor_sets(&allocate).map_err(vk_err("vkAllocateDescriptorSets"))?[0];
            let range = [vk::DescriptorBufferInfo::default().buffer(self.buffer).offset(0).range(4)];
            let write = [vk::WriteDescriptorSet::default()
                .dst_set(self.set)
                .dst_binding(0)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(&range)];
            d.update_descriptor_sets(&write, &[]);

            let pool = vk::CommandPoolCreateInfo::default().queue_family_index(family);
            self.pool = d.create_command_pool(&pool, None).map_err(vk_err("vkCreateCommandPool"))?;
        }
        // The dispatch counts asked for, then one 1-dispatch buffer per fan-out queue.
        for &count in dispatch_counts {
            let cb = self.record(count)?;
            self.recorded.insert(count, cb);
        }
        for _ in 0..MAX_QUEUES {
            let cb = self.record(1)?;
            self.fan_out.push(cb);
        }
        Ok(())
    }

    /// Allocates a command buffer from the pool (freed with it) and records `count` dispatches of
    /// the pipeline into it, a compute barrier between each two.
    fn record(&mut self, count: usize) -> Result<vk::CommandBuffer> {
        let d = &self.device;
        let allocate = vk::CommandBufferAllocateInfo::default()
            .command_pool(self.pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool, pipeline, layout and set are live handles of `d`; `&mut self` keeps
        // every other use of the pool out while this records; the create infos outlive the calls.
        unsafe {
            let cb = d.allocate_command_buffers(&allocate).map_err(vk_err("vkAllocateCommandBuffers"))?[0];
            // Simultaneous use: the patterns below resubmit a command buffer while its previous
            // submission is still pending (ordered behind it by the timeline, on one queue or
            // alternating two). Without the flag that is invalid usage.
            let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE);
            d.begin_command_buffer(cb, &begin).map_err(vk_err("vkBeginCommandBuffer"))?;
            d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, self.pipeline);
            d.cmd_bind_descriptor_sets(cb, vk::PipelineBindPoint::COMPUTE, self.layout, 0, &[self.set], &[]);
            for i in 0..count {
                if i > 0 {
                    let barrier = [vk::MemoryBarrier::default()
                        .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                        .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
                    d.cmd_pipeline_barrier(
                        cb,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::DependencyFlags::empty(),
                        &barrier,
                        &[],
                        &[],
                    );
                }
                d.cmd_push_constants(cb, self.layout, vk::ShaderStageFlags::COMPUTE, 0, &(i as u32).to_le_bytes());
                d.cmd_dispatch(cb, 1, 1, 1);
            }
            d.end_command_buffer(cb).map_err(vk_err("vkEndCommandBuffer"))?;
            Ok(cb)
        }
    }

    /// Records one 1-dispatch command buffer per thread for
    /// [`threaded_chains`](Self::threaded_chains) (`threads` in all; call before sharing the
    /// baseline between threads).
    pub fn add_thread_buffers(&mut self, threads: usize) -> Result<()> {
        while self.thread_buffers.len() < threads {
            let cb = self.record(1)?;
            self.thread_buffers.push(cb);
        }
        Ok(())
    }

    /// Distinct Vulkan queues [`threaded_chains`](Self::threaded_chains) can give a thread each.
    pub fn distinct_queues(&self) -> usize {
        self.distinct_queues
    }

    /// `threads` threads, started together, each submitting its own 1-dispatch command buffer `ops`
    /// times as a dependent chain on its own timeline (each submission waits for the thread's
    /// previous value), then waiting on the host for its last value: thread t on queue t, or all on
    /// queue 0 with `shared` (a mutex around `vkQueueSubmit` there, which a queue used by several
    /// threads needs). The span from the first thread's start to the last one's wait returning.
    pub fn threaded_chains(&self, threads: usize, shared: bool, ops: u64) -> Result<Duration> {
        if threads == 0 || threads > self.thread_buffers.len() {
            return Err(Error::invalid_argument(format!(
                "raw vulkan threaded chains: {threads} threads, {} command buffers recorded for them",
                self.thread_buffers.len()
            )));
        }
        if !shared && threads > self.distinct_queues {
            return Err(Error::invalid_argument(format!(
                "raw vulkan threaded chains: {threads} threads on queues of their own, the device has {}",
                self.distinct_queues
            )));
        }
        // Made and destroyed here, not on the threads: destroying one waits for the device to be
        // idle, which must not race another thread's submission.
        let timelines = (0..threads).map(|_| self.timeline(0)).collect::<Result<Vec<_>>>()?;
        let one_queue = Mutex::new(());
        crate::scaling::together(
            threads,
            |_| Ok(()),
            |t, ()| {
                let (cb, semaphore) = (Some(self.thread_buffers[t]), timelines[t].semaphore);
                for i in 0..ops {
                    if shared {
                        let _queue = one_queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        self.submit(self.queues[0], cb, semaphore, Some(i), i + 1)?;
                    } else {
                        self.submit(self.queues[t], cb, semaphore, Some(i), i + 1)?;
                    }
                }
                self.wait(semaphore, ops)
            },
        )
    }

    fn timeline(&self, initial: u64) -> Result<Timeline<'_>> {
        let mut kind =
            vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(initial);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: the create info outlives the call.
        let semaphore = unsafe { self.device.create_semaphore(&info, None) }.map_err(vk_err("vkCreateSemaphore"))?;
        Ok(Timeline { device: &self.device, semaphore })
    }

    /// One submission to `queue`: `cb` (if any), waiting for `wait` (if any) and signalling `signal`,
    /// all on `timeline`.
    fn submit(
        &self,
        queue: vk::Queue,
        cb: Option<vk::CommandBuffer>,
        timeline: vk::Semaphore,
        wait: Option<u64>,
        signal: u64,
    ) -> Result<()> {
        let wait = wait.map(|value| [(timeline, value)]);
        self.submit_between(queue, cb, wait.as_ref().map_or(&[][..], |w| &w[..]), (timeline, signal))
    }

    /// One submission to `queue`: `cb` (if any), waiting for `waits` (timelines and their values,
    /// at most [`MAX_QUEUES`]) and signalling `signal` (a timeline and its value).
    fn submit_between(
        &self,
        queue: vk::Queue,
        cb: Option<vk::CommandBuffer>,
        waits: &[(vk::Semaphore, u64)],
        signal: (vk::Semaphore, u64),
    ) -> Result<()> {
        if waits.len() > MAX_QUEUES {
            return Err(Error::invalid_argument(format!("raw vulkan: {} waits, at most {MAX_QUEUES}", waits.len())));
        }
        let mut wait_semaphores = [vk::Semaphore::null(); MAX_QUEUES];
        let mut wait_values = [0u64; MAX_QUEUES];
        for (i, &(semaphore, value)) in waits.iter().enumerate() {
            (wait_semaphores[i], wait_values[i]) = (semaphore, value);
        }
        let waits = waits.len();
        let (signal_semaphores, signal_values) = ([signal.0], [signal.1]);
        let stages = [vk::PipelineStageFlags::COMPUTE_SHADER; MAX_QUEUES];
        let mut values = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_values[..waits])
            .signal_semaphore_values(&signal_values);
        let cbs: &[vk::CommandBuffer] = match &cb {
            Some(cb) => std::slice::from_ref(cb),
            None => &[],
        };
        let submit = [vk::SubmitInfo::default()
            .wait_semaphores(&wait_semaphores[..waits])
            .wait_dst_stage_mask(&stages[..waits])
            .command_buffers(cbs)
            .signal_semaphores(&signal_semaphores)
            .push_next(&mut values)];
        // SAFETY: the handles are live; the recorded command buffers are for simultaneous use, so
        // resubmitting one while it is pending is valid.
        unsafe { self.device.queue_submit(queue, &submit, vk::Fence::null()) }.map_err(vk_err("vkQueueSubmit"))
    }

    fn wait(&self, timeline: vk::Semaphore, value: u64) -> Result<()> {
        let (semaphores, values) = ([timeline], [value]);
        let info = vk::SemaphoreWaitInfo::default().semaphores(&semaphores).values(&values);
        // SAFETY: the semaphore is live.
        unsafe { self.device.wait_semaphores(&info, u64::MAX) }.map_err(vk_err("vkWaitSemaphores"))
    }

    fn cb(&self, dispatches: usize) -> Result<Option<vk::CommandBuffer>> {
        if dispatches == 0 {
            return Ok(None);
        }
        self.recorded
            .get(&dispatches)
            .copied()
            .map(Some)
            .ok_or_else(|| Error::internal(format!("raw vulkan: no {dispatches}-dispatch command buffer recorded")))
    }

    /// `ops` submissions of the `dispatches`-dispatch command buffer (none for 0) chained on one
    /// timeline of queue 0 (each waits for the previous one's value), one host wait at the end.
    pub fn chain(&self, dispatches: usize, ops: u64) -> Result<Duration> {
        let cb = self.cb(dispatches)?;
        let t = self.timeline(0)?;
        let start = Instant::now();
        for i in 0..ops {
            self.submit(self.queues[0], cb, t.semaphore, Some(i), i + 1)?;
        }
        self.wait(t.semaphore, ops)?;
        Ok(start.elapsed())
    }

    /// `calls` times: `submissions` submissions of the `dispatches`-dispatch command buffer chained
    /// on one timeline of queue 0, then a host wait for the last one. The timeline is made once for
    /// all the calls, so that a call costs its submissions and its wait only.
    pub fn chain_calls(&self, dispatches: usize, submissions: u64, calls: u64) -> Result<Duration> {
        let cb = self.cb(dispatches)?;
        let t = self.timeline(0)?;
        let mut value = 0;
        let start = Instant::now();
        for _ in 0..calls {
            for _ in 0..submissions {
                self.submit(self.queues[0], cb, t.semaphore, Some(value), value + 1)?;
                value += 1;
            }
            self.wait(t.semaphore, value)?;
        }
        Ok(start.elapsed())
    }

    /// `ops` submissions of the 1-dispatch command buffer on queue 0 with no wait (queue order
    /// only), each signalling the next value; one host wait at the end.
    pub fn independent(&self, ops: u64) -> Result<Duration> {
        let cb = self.cb(1)?;
        let t = self.timeline(0)?;
        let start = Instant::now();
        for i in 0..ops {
            self.submit(self.queues[0], cb, t.semaphore, None, i + 1)?;
        }
        self.wait(t.semaphore, ops)?;
        Ok(start.elapsed())
    }

    /// `ops` hops of a 1-dispatch submission alternating between two queues (one queue where the
    /// device has one), each waiting for the previous one, on one timeline a queue.
    pub fn ping_pong(&self, ops: u64) -> Result<Duration> {
        self.hops(ops, false)
    }

    /// [`Self::ping_pong`] with each submission also waiting for its own queue's previous one, as
    /// a stream that orders its own submissions does (Vulkan does not order separate submissions of
    /// one queue): the HAL's hop has this second wait.
    pub fn ping_pong_ordered(&self, ops: u64) -> Result<Duration> {
        self.hops(ops, true)
    }

    fn hops(&self, ops: u64, ordered: bool) -> Result<Duration> {
        let cb = self.cb(1)?;
        // One timeline a queue, each signalled by its own queue only, as a hand-written hop does.
        let timelines = [self.timeline(0)?, self.timeline(0)?];
        let start = Instant::now();
        for i in 0..ops {
            let (this, other) = ((i % 2) as usize, ((i + 1) % 2) as usize);
            // Hop i is this queue's (i / 2 + 1)-th; it waits for the other queue's hop i - 1 (and,
            // ordered, for this queue's hop i - 2).
            let mut waits = [(vk::Semaphore::null(), 0); 2];
            let mut count = 0;
            if i > 0 {
                waits[count] = (timelines[other].semaphore, (i - 1) / 2 + 1);
                count += 1;
            }
            if ordered && i > 1 {
                waits[count] = (timelines[this].semaphore, i / 2);
                count += 1;
            }
            self.submit_between(self.queues[this], cb, &waits[..count], (timelines[this].semaphore, i / 2 + 1))?;
        }
        if ops > 0 {
            let last = ops - 1;
            self.wait(timelines[(last % 2) as usize].semaphore, last / 2 + 1)?;
        }
        Ok(start.elapsed())
    }

    /// `rounds` rounds of fan-out/fan-in, as the HAL's row runs them: a producer on queue 0, a
    /// consumer on each of queues 1..=`consumers` (modulo the queues there are) waiting on it, and
    /// a joiner on queue 0 waiting on all of them, the next producer waiting on the joiner; one
    /// timeline each for the producer, the joiner and every consumer, each signalled by its own
    /// queue; one host wait at the end.
    pub fn fan_out_in(&self, consumers: usize, rounds: u64) -> Result<Duration> {
        if consumers == 0 || consumers >= MAX_QUEUES {
            return Err(Error::invalid_argument(format!(
                "raw vulkan fan-out: {consumers} consumers (1 to {} here)",
                MAX_QUEUES - 1
            )));
        }
        let (produced, joined) = (self.timeline(0)?, self.timeline(0)?);
        let consumed = (0..consumers).map(|_| self.timeline(0)).collect::<Result<Vec<_>>>()?;
        let queue = |k: usize| self.queues[k % self.queues.len()];
        // Each consumer replays a command buffer of its own: they run at the same time.
        let cb = |k: usize| self.fan_out.get(k).copied();
        let mut joins = [(vk::Semaphore::null(), 0); MAX_QUEUES];
        let start = Instant::now();
        for r in 1..=rounds {
            self.submit_between(queue(0), cb(0), &[(joined.semaphore, r - 1)], (produced.semaphore, r))?;
            for (k, c) in consumed.iter().enumerate() {
                self.submit_between(queue(k + 1), cb(k + 1), &[(produced.semaphore, r)], (c.semaphore, r))?;
                joins[k] = (c.semaphore, r);
            }
            self.submit_between(queue(0), cb(0), &joins[..consumers], (joined.semaphore, r))?;
        }
        self.wait(joined.semaphore, rounds)?;
        Ok(start.elapsed())
    }

    /// `ops` round trips: a `dispatches`-dispatch submission, then `vkWaitSemaphores` for it.
    pub fn round_trip(&self, dispatches: usize, ops: u64) -> Result<Duration> {
        self.round_trips(0, dispatches, false, false, ops)
    }

    /// Queues it submits to (at least two entries; a one-queue device's queue twice).
    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// `ops` times: the `dispatches`-dispatch command buffer submitted to queue `queue` (modulo the
    /// queues), then a host wait for it that polls the timeline's counter
    /// (`vkGetSemaphoreCounterValue` in a loop) where `polled`, else blocks in `vkWaitSemaphores`.
    pub fn round_trip_on(&self, queue: usize, dispatches: usize, polled: bool, ops: u64) -> Result<Duration> {
        self.round_trips(queue, dispatches, polled, false, ops)
    }

    /// [`round_trip_on`](Self::round_trip_on) with each submission also waiting on the previous
    /// one's value (reached by then), as a HAL stream's submissions wait on their stream's
    /// previous value.
    pub fn round_trip_ordered_on(&self, queue: usize, dispatches: usize, polled: bool, ops: u64) -> Result<Duration> {
        self.round_trips(queue, dispatches, polled, true, ops)
    }

    fn round_trips(&self, queue: usize, dispatches: usize, polled: bool, ordered: bool, ops: u64) -> Result<Duration> {
        let cb = self.cb(dispatches)?;
        let t = self.timeline(0)?;
        let queue = self.queues[queue % self.queues.len()];
        let start = Instant::now();
        for i in 0..ops {
            self.submit(queue, cb, t.semaphore, ordered.then_some(i), i + 1)?;
            if !polled {
                self.wait(t.semaphore, i + 1)?;
                continue;
            }
            self.poll_until(t.semaphore, i + 1, &AtomicBool::new(false))?;
        }
        Ok(start.elapsed())
    }

    /// Polls `timeline`'s counter (`vkGetSemaphoreCounterValue`) until it reaches `value` (true)
    /// or `stop` is set (false).
    fn poll_until(&self, timeline: vk::Semaphore, value: u64, stop: &AtomicBool) -> Result<bool> {
        loop {
            // SAFETY: the semaphore is a live timeline semaphore of this device.
            let reached = unsafe { self.device.get_semaphore_counter_value(timeline) }
                .map_err(vk_err("vkGetSemaphoreCounterValue"))?;
            if reached >= value {
                return Ok(true);
            }
            if stop.load(Ordering::Acquire) {
                return Ok(false);
            }
            std::hint::spin_loop();
        }
    }

    /// [`round_trip_ordered_on`](Self::round_trip_ordered_on), polled, with each submission made by
    /// a second thread that watches for it (yielding between looks, as a HAL stream's submit thread
    /// does): what handing a submission to another thread adds to a round trip.
    pub fn round_trip_handed_off_on(&self, queue: usize, dispatches: usize, ops: u64) -> Result<Duration> {
        let cb = self.cb(dispatches)?;
        let t = self.timeline(0)?;
        let queue = self.queues[queue % self.queues.len()];
        let requested = AtomicU64::new(0);
        // Set when either side fails or is done, so the other does not wait for it forever.
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let submitter = scope.spawn(|| -> Result<()> {
                for submitted in 0..ops {
                    while requested.load(Ordering::Acquire) == submitted {
                        if stop.load(Ordering::Acquire) {
                            return Ok(());
                        }
                        std::thread::yield_now();
                    }
                    self.submit(queue, cb, t.semaphore, Some(submitted), submitted + 1)
                        .inspect_err(|_| stop.store(true, Ordering::Release))?;
                }
                Ok(())
            });
            let waited = (|| -> Result<Duration> {
                let start = Instant::now();
                for i in 0..ops {
                    requested.store(i + 1, Ordering::Release);
                    if !self.poll_until(t.semaphore, i + 1, &stop)? {
                        break;
                    }
                }
                Ok(start.elapsed())
            })();
            stop.store(true, Ordering::Release);
            let submitted =
                submitter.join().unwrap_or_else(|_| Err(Error::internal("raw vulkan: the submitting thread panicked")));
            submitted.and(waited)
        })
    }

    /// `ops` times: a 1-dispatch submission waiting for a value the host then signals
    /// (`vkSignalSemaphore`), and a host wait for its own signal (`vkWaitSemaphores`); the time from
    /// each signal to its wait returning, summed.
    pub fn deferred_release(&self, ops: u64) -> Result<Duration> {
        self.deferred_releases(false, ops)
    }

    /// [`deferred_release`](Self::deferred_release) with the host waiting by polling the timeline's
    /// counter (`vkGetSemaphoreCounterValue` in a loop), as the HAL's waiter does.
    pub fn deferred_release_polled(&self, ops: u64) -> Result<Duration> {
        self.deferred_releases(true, ops)
    }

    /// [`deferred_release_polled`](Self::deferred_release_polled) with the value the host signals
    /// on a semaphore of its own, submitted before the signal (what the HAL does not do: such a
    /// wait holds back everything after it on the queue): each
    /// submission waits for the gate's value and for its queue timeline's previous value, and
    /// signals the timeline. With `blocked_waiter`, a second thread waits in `vkWaitSemaphores` for
    /// each submission's value meanwhile, as the HAL's completion thread does.
    pub fn deferred_release_gated(&self, blocked_waiter: bool, ops: u64) -> Result<Duration> {
        let cb = self.cb(1)?;
        let gate = self.timeline(0)?;
        let t = self.timeline(0)?;
        let mut elapsed = Duration::ZERO;
        std::thread::scope(|scope| -> Result<()> {
            let waiter = blocked_waiter.then(|| {
                let semaphore = t.semaphore;
                scope.spawn(move || (1..=ops).try_for_each(|value| self.wait(semaphore, value)))
            });
            for i in 1..=ops {
                self.submit_between(
                    self.queues[0],
                    cb,
                    &[(gate.semaphore, i), (t.semaphore, i - 1)],
                    (t.semaphore, i),
                )?;
                let start = Instant::now();
                let info = vk::SemaphoreSignalInfo::default().semaphore(gate.semaphore).value(i);
                // SAFETY: the semaphore is live and the value is ahead of its current one.
                unsafe { self.device.signal_semaphore(&info) }.map_err(vk_err("vkSignalSemaphore"))?;
                self.poll_until(t.semaphore, i, &AtomicBool::new(false))?;
                elapsed += start.elapsed();
            }
            match waiter.map(|w| w.join()) {
                Some(Err(_)) => Err(Error::internal("raw vulkan: the waiting thread panicked")),
                Some(Ok(waited)) => waited,
                None => Ok(()),
            }
        })?;
        Ok(elapsed)
    }

    fn deferred_releases(&self, polled: bool, ops: u64) -> Result<Duration> {
        let cb = self.cb(1)?;
        let t = self.timeline(0)?;
        let mut elapsed = Duration::ZERO;
        for i in 0..ops {
            self.submit(self.queues[0], cb, t.semaphore, Some(2 * i + 1), 2 * i + 2)?;
            let start = Instant::now();
            let info = vk::SemaphoreSignalInfo::default().semaphore(t.semaphore).value(2 * i + 1);
            // SAFETY: the semaphore is live and the value is ahead of its current one.
            unsafe { self.device.signal_semaphore(&info) }.map_err(vk_err("vkSignalSemaphore"))?;
            if polled {
                self.poll_until(t.semaphore, 2 * i + 2, &AtomicBool::new(false))?;
            } else {
                self.wait(t.semaphore, 2 * i + 2)?;
            }
            elapsed += start.elapsed();
        }
        Ok(elapsed)
    }
}

/// The memory type a storage buffer the device's kernels write goes in, of those `allowed` (a
/// bit per type): device-local where one is allowed, as the HAL's device-local buffers are (the
/// first allowed type may be one in host memory: NVIDIA lists a type with no property flags in the
/// system-memory heap first), else the first allowed.
fn storage_memory_type(memory_types: &vk::PhysicalDeviceMemoryProperties, allowed: u32) -> Option<u32> {
    let allowed_types = || (0..memory_types.memory_type_count).filter(move |&i| allowed & (1 << i) != 0);
    let device_local =
        |&i: &u32| memory_types.memory_types[i as usize].property_flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL);
    allowed_types().find(device_local).or_else(|| allowed_types().next())
}

impl Drop for RawVulkan {
    fn drop(&mut self) {
        let d = &self.device;
        // SAFETY: the device is idle after the wait; every handle was made from it (or is null,
        // which destroy calls ignore), and none is used after this.
        unsafe {
            let _ = d.device_wait_idle();
            d.destroy_command_pool(self.pool, None);
            d.destroy_descriptor_pool(self.descriptors, None);
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
            d.destroy_shader_module(self.shader, None);
            d.destroy_buffer(self.buffer, None);
            d.free_memory(self.memory, None);
            d.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The raw baselines on Vulkan device 0, or `None` (printed as not run) where there is none,
    /// unless `HAL_REQUIRE_VULKAN=1` makes that a failure.
    fn raw(counts: &[usize]) -> Option<RawVulkan> {
        let spirv = crate::workloads::touch_spirv().expect("the touch kernel compiles");
        match RawVulkan::new(0, &spirv, counts) {
            Ok(raw) => Some(raw),
            Err(e) if std::env::var("HAL_REQUIRE_VULKAN").as_deref() != Ok("1") => {
                println!("not run: no Vulkan device: {e}");
                None
            }
            Err(e) => panic!("HAL_REQUIRE_VULKAN=1 and no Vulkan device: {e}"),
        }
    }

    #[test]
    fn each_raw_pattern_completes_its_submissions() {
        let Some(raw) = raw(&[1, 3]) else { return };
        for dispatches in [0, 1, 3] {
            raw.chain(dispatches, 5).unwrap();
            raw.round_trip(dispatches, 3).unwrap();
        }
        raw.independent(5).unwrap();
        raw.ping_pong(5).unwrap();
        assert!(raw.deferred_release(3).unwrap() > Duration::ZERO);
        assert!(raw.deferred_release_polled(3).unwrap() > Duration::ZERO);
        let e = raw.chain(2, 1).unwrap_err();
        assert!(e.message().contains("no 2-dispatch command buffer"), "{e}");
    }

    #[test]
    fn threaded_chains_run_every_thread_to_its_last_value_and_refuse_what_they_lack() {
        let Some(mut raw) = raw(&[]) else { return };
        raw.add_thread_buffers(3).unwrap();
        assert!(raw.threaded_chains(3, true, 20).unwrap() > Duration::ZERO);
        let own = raw.distinct_queues().min(3);
        assert!(raw.threaded_chains(own, false, 20).unwrap() > Duration::ZERO);
        let e = raw.threaded_chains(4, true, 1).unwrap_err();
        assert!(e.message().contains("4 threads, 3 command buffers"), "{e}");
        if raw.distinct_queues() < 3 {
            let e = raw.threaded_chains(3, false, 1).unwrap_err();
            assert!(e.message().contains("queues of their own"), "{e}");
        }
        assert_eq!(raw.threaded_chains(0, true, 1).unwrap_err().code(), hal::StatusCode::InvalidArgument);
    }

    #[test]
    fn a_missing_physical_device_is_named() {
        if raw(&[]).is_none() {
            return;
        }
        let spirv = crate::workloads::touch_spirv().unwrap();
        let e = RawVulkan::new(1000, &spirv, &[1]).err().expect("no physical device 1000");
        assert_eq!(e.code(), hal::StatusCode::NotFound, "{e}");
        assert!(e.message().contains("1000"), "{e}");
    }

    #[test]
    fn kernel_memory_is_device_local_where_a_device_local_type_is_allowed() {
        let mut types = vk::PhysicalDeviceMemoryProperties { memory_type_count: 3, ..Default::default() };
        // As NVIDIA lists them: a type with no flags (in the host heap) first.
        types.memory_types[0] = vk::MemoryType { property_flags: vk::MemoryPropertyFlags::empty(), heap_index: 1 };
        types.memory_types[1] = vk::MemoryType { property_flags: vk::MemoryPropertyFlags::DEVICE_LOCAL, heap_index: 0 };
        types.memory_types[2] = vk::MemoryType {
            property_flags: vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
            heap_index: 1,
        };
        assert_eq!(storage_memory_type(&types, 0b111), Some(1));
        assert_eq!(storage_memory_type(&types, 0b101), Some(0), "no device-local type allowed: the first allowed");
        assert_eq!(storage_memory_type(&types, 0b100), Some(2));
        assert_eq!(storage_memory_type(&types, 0), None);
        assert_eq!(storage_memory_type(&types, 0b1000), None, "a bit past the types");
    }
}
