//! Reusable command buffers recorded once. A reusable HAL command buffer whose buffers are all
//! known when it ends keeps a few recorded `VkCommandBuffer`s ([`Recording`]s) per stream; an
//! execute replays one whose last submission completed (its stream's timeline reached the value it
//! was submitted at), or records a new one. A `VkCommandBuffer` without simultaneous use is pending
//! once at a time, so executes in flight together replay a recording each; past the bound, the
//! submit thread waits for the oldest recording's submission instead of recording more.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use hal::Result;
use hal::driver::{Command, lock};

use crate::bound::BoundSets;
use crate::memory::{Block, VulkanMemory};
use crate::record::Keep;
use crate::stream::{CommandPool, Timeline};

/// Recordings kept per command buffer and stream: how many of its executes one stream replays in
/// flight together.
const KEPT_RECORDINGS: usize = 4;

/// A command buffer recorded for replay, with what it uses.
pub struct Recording {
    pool: Arc<CommandPool>,
    pub(crate) cmd: vk::CommandBuffer,
    _keep: Keep,
    /// The indirect count checks' scratch and the command index of each indirect dispatch.
    pub(crate) checks: Option<(Arc<Block>, Vec<usize>)>,
    /// For a binding-table command buffer, the sets its dispatches bind, written at each execute.
    pub(crate) sets: Option<BoundSets>,
    /// The stream value of its latest submission (0: none).
    submitted_at: AtomicU64,
    /// Held from the submit until the submission retired, for a recording with count checks (the
    /// scratch is read at retirement).
    busy: AtomicBool,
}

impl Recording {
    /// `cmd`, recorded on `pool` for replay, keeping `keep`, `checks` and the `sets` it binds.
    pub fn new(
        pool: Arc<CommandPool>,
        cmd: vk::CommandBuffer,
        keep: Keep,
        checks: Option<(Arc<Block>, Vec<usize>)>,
        sets: Option<BoundSets>,
    ) -> Self {
        Recording {
            pool,
            cmd,
            _keep: keep,
            checks,
            sets,
            submitted_at: AtomicU64::new(0),
            busy: AtomicBool::new(false),
        }
    }

    /// Leases the recording for the submission of stream value `value`, if it is idle at `reached`.
    fn try_lease(self: &Arc<Self>, reached: u64, value: u64) -> Option<Lease> {
        if self.submitted_at.load(Ordering::Acquire) > reached {
            return None;
        }
        if self.checks.is_some() && self.busy.swap(true, Ordering::AcqRel) {
            return None;
        }
        self.submitted_at.store(value, Ordering::Release);
        Some(Lease(self.clone()))
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        // Not pending: every submission holds a lease, hence the recording, until it retires.
        self.pool.release(self.cmd);
    }
}

/// A recording replayed by one submission, held until it retires.
pub struct Lease(Arc<Recording>);

impl Lease {
    /// The leased recording.
    pub fn recording(&self) -> &Recording {
        &self.0
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.0.checks.is_some() {
            self.0.busy.store(false, Ordering::Release);
        }
    }
}

/// The recordings of one reusable command buffer.
#[derive(Default)]
pub struct Replays {
    kept: Mutex<Vec<Arc<Recording>>>,
    recorded: AtomicU64,
}

impl Replays {
    /// Replays for `commands`, or none where a command names a buffer whose `VkBuffer` is only
    /// known at issue (a transient buffer, a binding table's slot) or a collective.
    pub fn for_commands(commands: &[Command]) -> Option<Replays> {
        for command in commands {
            let buffers: Vec<&hal::Buffer> = match command {
                Command::Fill { target, .. } | Command::Update { target, .. } => vec![target],
                Command::Copy { source, target, .. } => vec![source, target],
                Command::Dispatch { bindings, .. } => bindings.iter().map(|b| &b.buffer).collect(),
                Command::DispatchIndirect { count, bindings, .. } => {
                    std::iter::once(count).chain(bindings.iter().map(|b| &b.buffer)).collect()
                }
                Command::Barrier => Vec::new(),
                Command::Collective { .. } => return None,
            };
            if !buffers.iter().all(|buffer| VulkanMemory::of(buffer).is_ok_and(|memory| !memory.is_transient())) {
                return None;
            }
        }
        Some(Replays::default())
    }

    /// An idle recording made on `pool` (whose stream's timeline is `timeline`), leased for the
    /// submission of `value`. With the bound reached and none idle, waits for the oldest one's
    /// submission. `None`: record one.
    pub fn lease(&self, pool: &Arc<CommandPool>, timeline: &Timeline, value: u64) -> Result<Option<Lease>> {
        let reached = timeline.value()?;
        let oldest = {
            let kept = lock(&self.kept);
            let mine: Vec<&Arc<Recording>> = kept.iter().filter(|r| Arc::ptr_eq(&r.pool, pool)).collect();
            if let Some(lease) = mine.iter().find_map(|r| r.try_lease(reached, value)) {
                return Ok(Some(lease));
            }
            if mine.len() < KEPT_RECORDINGS {
                return Ok(None);
            }
            mine.iter().map(|r| r.submitted_at.load(Ordering::Acquire)).min().unwrap_or(0)
        };
        // An earlier value of this stream: it was issued, so it completes.
        timeline.wait_forever(oldest)?;
        let reached = timeline.value()?;
        Ok(lock(&self.kept).iter().filter(|r| Arc::ptr_eq(&r.pool, pool)).find_map(|r| r.try_lease(reached, value)))
    }

    /// Leases `recording`, just made, for the submission of `value`, and keeps it while its pool
    /// has fewer than the bound (past it, it is freed when the submission retires).
    pub fn add(&self, recording: Recording, value: u64) -> Lease {
        self.recorded.fetch_add(1, Ordering::Relaxed);
        recording.submitted_at.store(value, Ordering::Release);
        recording.busy.store(recording.checks.is_some(), Ordering::Release);
        let recording = Arc::new(recording);
        let mut kept = lock(&self.kept);
        if kept.iter().filter(|r| Arc::ptr_eq(&r.pool, &recording.pool)).count() < KEPT_RECORDINGS {
            kept.push(recording.clone());
        }
        Lease(recording)
    }

    /// How many times the commands were recorded.
    pub fn recorded(&self) -> u64 {
        self.recorded.load(Ordering::Relaxed)
    }
}
