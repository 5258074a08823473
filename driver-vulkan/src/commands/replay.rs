//! Reusable command buffers recorded once. A reusable HAL command buffer whose buffers are all
//! known when it ends keeps a few recorded `VkCommandBuffer`s ([`Recording`]s) per stream. A
//! recording with nothing that changes per execute (no indirect count checks, no binding-table
//! sets) is replayed by every execute, pending or not. One with binding-table sets is replayed,
//! pending or not, by an execute whose table its sets already hold (nothing is written); an
//! execute with another table writes it into a recording whose last submission completed (its
//! stream's timeline reached the value it was submitted at), or records a new one. Both are
//! recorded for simultaneous use. A recording with count checks is pending once at a time (its
//! scratch is read at retirement). Past the bound, an execute records one that is not kept.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ash::vk;
use hal::Result;
use hal::driver::{Command, lock};

use super::bound::{BoundSets, Descriptors};
use super::record::{CommandPool, Keep};
use crate::memory::{Block, VulkanMemory};

/// Recordings with per-execute state kept per command buffer and stream: how many of its executes
/// one stream replays in flight together without recording (a deep chain of executes is as deep).
const KEPT_RECORDINGS: usize = 16;

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
    /// Nothing in it changes per execute (no count checks, no sets): every execute replays it.
    fixed: bool,
    /// Recorded for simultaneous use (no count checks): it may be pending several times at once.
    simultaneous: bool,
    /// The stages its submissions wait at (see `Recorder::wait_stages`).
    pub(crate) wait_stages: vk::PipelineStageFlags,
}

impl Recording {
    /// `cmd`, recorded on `pool` for replay, keeping `keep`, `checks` and the `sets` it binds; its
    /// submissions wait at `wait_stages`.
    pub fn new(
        pool: Arc<CommandPool>,
        cmd: vk::CommandBuffer,
        keep: Keep,
        checks: Option<(Arc<Block>, Vec<usize>)>,
        sets: Option<BoundSets>,
        wait_stages: vk::PipelineStageFlags,
    ) -> Self {
        let fixed = checks.is_none() && sets.is_none();
        let simultaneous = Self::simultaneous_use(checks.as_ref());
        Recording {
            pool,
            cmd,
            _keep: keep,
            checks,
            sets,
            submitted_at: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            fixed,
            simultaneous,
            wait_stages,
        }
    }

    /// Whether a recording with these count checks is recorded for simultaneous use
    /// (`VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT`): one without them. A binding-table
    /// recording is, so that executes passing the table its sets hold replay it while it is
    /// pending: on an H200 a chain of such executes over recordings pending once at a time took
    /// the device about 3.5 us longer an execute than one recording for simultaneous use.
    pub fn simultaneous_use(checks: Option<&(Arc<Block>, Vec<usize>)>) -> bool {
        checks.is_none()
    }

    /// Leases the recording (one [`Replays`] keeps) for the submission of stream value `value`, if
    /// it is idle at `reached`.
    fn try_lease(self: &Arc<Self>, reached: u64, value: u64) -> Option<Lease> {
        if !self.fixed && self.submitted_at.load(Ordering::Acquire) > reached {
            return None;
        }
        if self.checks.is_some() && self.busy.swap(true, Ordering::AcqRel) {
            return None;
        }
        self.submitted_at.store(value, Ordering::Release);
        Some(Lease { recording: self.clone(), kept: true })
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        // Not pending: every submission holds a lease, hence the recording, until it retires.
        self.pool.release(self.cmd);
    }
}

/// A recording replayed by one submission, held until it retires.
pub struct Lease {
    recording: Arc<Recording>,
    /// Whether its [`Replays`] keeps the recording (past the bound, the lease alone holds it).
    kept: bool,
}

impl Lease {
    /// The leased recording.
    pub fn recording(&self) -> &Recording {
        &self.recording
    }

    /// Whether the submission must hold the lease until it retires: not for a recording without
    /// per-execute state that its [`Replays`] keeps, which lives as long as the command buffer the
    /// submission's work holds and has no per-submission state to hand back.
    pub fn needs_holding(&self) -> bool {
        !(self.kept && self.recording.fixed)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.recording.checks.is_some() {
            self.recording.busy.store(false, Ordering::Release);
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
            if matches!(command, Command::Collective { .. })
                || !command.buffers().all(|buffer| VulkanMemory::of(buffer).is_ok_and(|memory| !memory.is_transient()))
            {
                return None;
            }
        }
        Some(Replays::default())
    }

    /// A recording made on `pool` that may be submitted now, leased for the submission of `value`:
    /// one without per-execute state, or one idle at the value `reached()` says the stream's
    /// timeline reached (asked only for recordings with per-execute state: on NVIDIA the query took
    /// a few hundred nanoseconds of the submit thread's). `None`: record one (past the bound,
    /// [`Self::add`] does not keep it). The submit thread never waits for the device here: the
    /// stream's other work would wait behind it.
    pub fn lease(
        &self,
        pool: &Arc<CommandPool>,
        reached: impl FnOnce() -> Result<u64>,
        value: u64,
    ) -> Result<Option<Lease>> {
        let kept = lock(&self.kept);
        let ours = || kept.iter().filter(|r| Arc::ptr_eq(&r.pool, pool));
        let Some(first) = ours().next() else { return Ok(None) };
        // The recordings of one command buffer are alike: all without per-execute state, or none.
        let reached = if first.fixed { 0 } else { reached()? };
        Ok(ours().find_map(|r| r.try_lease(reached, value)))
    }

    /// The descriptors `commands` (an execute's, resolved for its table) put in the sets of the
    /// recordings kept on `pool`, their memory kept in `keep` (see [`BoundSets::descriptors`]);
    /// `None` where none with sets is kept yet.
    pub fn descriptors(
        &self,
        pool: &Arc<CommandPool>,
        commands: &[Command],
        keep: &mut Keep,
    ) -> Result<Option<Descriptors>> {
        let kept = lock(&self.kept);
        match kept.iter().find(|r| Arc::ptr_eq(&r.pool, pool)).and_then(|r| r.sets.as_ref()) {
            Some(sets) => sets.descriptors(commands, keep).map(Some),
            None => Ok(None),
        }
    }

    /// A kept recording made on `pool` for simultaneous use whose sets hold `wanted` (the
    /// execute's descriptors, their memory in `keep`), pending or not, leased for the submission
    /// of `value`: replaying it writes nothing a pending submission reads.
    pub fn lease_holding(
        &self,
        pool: &Arc<CommandPool>,
        wanted: &Descriptors,
        keep: &Keep,
        value: u64,
    ) -> Option<Lease> {
        let kept = lock(&self.kept);
        let recording = kept.iter().find(|r| {
            Arc::ptr_eq(&r.pool, pool) && r.simultaneous && r.sets.as_ref().is_some_and(|sets| sets.holds(wanted, keep))
        })?;
        recording.submitted_at.fetch_max(value, Ordering::AcqRel);
        Some(Lease { recording: recording.clone(), kept: true })
    }

    /// Leases `recording`, just made, for the submission of `value`, and keeps it while its pool
    /// has fewer than the bound (past it, it is freed when the submission retires).
    pub fn add(&self, recording: Recording, value: u64) -> Lease {
        self.recorded.fetch_add(1, Ordering::Relaxed);
        recording.submitted_at.store(value, Ordering::Release);
        recording.busy.store(recording.checks.is_some(), Ordering::Release);
        let recording = Arc::new(recording);
        let mut kept = lock(&self.kept);
        let keep = kept.iter().filter(|r| Arc::ptr_eq(&r.pool, &recording.pool)).count() < KEPT_RECORDINGS;
        if keep {
            kept.push(recording.clone());
        }
        Lease { recording, kept: keep }
    }

    /// How many times the commands were recorded.
    pub fn recorded(&self) -> u64 {
        self.recorded.load(Ordering::Relaxed)
    }
}
