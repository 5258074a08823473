//! Running one program on a driver and checking it against the model (the oracle): every wait
//! returns by its deadline plus a slack; values and failures match the model before and after the
//! devices drop; a read that must run has its bytes and one that cannot has none; a host call runs
//! once or never as predicted; before the drop nothing is in flight and exactly the held work the
//! model allows is pending; after it no thread, timepoint or pending work is left; no operation
//! panics (but for hostile wakers, whose panics are theirs).

use std::cell::RefCell;
use std::future::{Future, IntoFuture};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use hal::driver::SemaphoreExt;
use hal::{
    Buffer, BufferBinding, BufferParams, CommandBuffer, CommandBufferMode, Device, Error, HostCallFlags, Queue,
    Readback, Semaphore, SemaphoreValue as SV, StatusCode, Timeout, WaitFuture, WaitMode,
};

use super::InFlightProbes;
use super::model::{HOST_CALL_FAILURE, Outcomes, Prediction, gate_failure, gate_state};
use super::program::{
    DEVICES, Element, Family, MARKER_SLOTS, Op, Owner, PanicsWhen, Program, QUEUES, SCRATCH_BYTES, SemKind, Step,
    WakerTarget,
};
use super::wakers::{self, Counter};
use super::watchdog::{SETTLE, SharedDiagnostics, eventually, panic_message, stuck_report, thread_names, threads_now};
use crate::Fixture;
use crate::kernels::{ELEMENTWISE_WORKGROUP, Kernel};

/// A settled wait that takes longer than this is a hang.
pub(crate) const HANG: Duration = Duration::from_secs(10);
/// Words the command buffers' fill kernel writes (at byte [`FILL_KERNEL_OFFSET`] of the scratch).
const FILL_KERNEL_WORDS: u32 = 4 * ELEMENTWISE_WORKGROUP;
const FILL_KERNEL_OFFSET: u64 = 1024;

/// How a program runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunSettings {
    /// How late a wait may return after its deadline.
    pub(crate) slack: Duration,
    /// Whether the thread count must be back to what it was once the devices dropped.
    pub(crate) check_threads: bool,
}

/// The handles of one device.
pub(crate) struct DeviceHandles {
    pub(crate) device: Device,
    pub(crate) queues: Vec<Queue>,
    pub(crate) scratch: Buffer,
    pub(crate) markers: Buffer,
    command_buffer: Option<CommandBuffer>,
}

/// A future of a semaphore's value or a readback's bytes.
type AnyFuture = Pin<Box<dyn Future<Output = hal::Result<Vec<u8>>>>>;

/// A future polled with a hostile waker, and one polled beside it with a counting waker; each
/// `None` once it resolved (a future is not polled after that).
struct HostileEntry {
    step: usize,
    target: WakerTarget,
    mode: PanicsWhen,
    hostile: Option<AnyFuture>,
    witness: Option<AnyFuture>,
    /// Whether the witness was left pending (so it must be woken once its target is decided).
    witness_pending: bool,
    counter: Arc<Counter>,
}

/// A program being run.
pub(crate) struct Run<'p> {
    pub(crate) fixture: &'p Fixture,
    pub(crate) program: &'p Program,
    pub(crate) prediction: Prediction,
    pub(crate) settings: RunSettings,
    diagnostics: &'p SharedDiagnostics,
    threads_before: usize,
    devices: Vec<Option<DeviceHandles>>,
    sems: Vec<Semaphore>,
    readbacks: Vec<Option<Readback>>,
    /// Per read node: its outcome once something took it (a typed read, a future), for the checks
    /// that come after.
    read_outcomes: Vec<Option<hal::Result<Vec<u8>>>>,
    /// Typed reads that found their read undecided, retried once the program settled.
    typed_reads_left: Vec<(usize, usize, Element)>,
    allocas: Vec<Option<Buffer>>,
    host_calls_ran: Vec<Arc<AtomicU32>>,
    inner_failures: Arc<Mutex<Vec<String>>>,
    wakers: Vec<WaitFuture>,
    hostile: Vec<HostileEntry>,
    pub(crate) violations: Vec<String>,
    /// The scenarios that need device work in flight, and whether they had it.
    pub(crate) in_flight: RefCell<InFlightProbes>,
}

fn device_handles(fixture: &Fixture, program: &Program) -> hal::Result<DeviceHandles> {
    let device = fixture.create_device()?;
    let queues = (0..QUEUES).map(|q| device.queue(q)).collect::<hal::Result<Vec<_>>>()?;
    let scratch = device.allocate_buffer(BufferParams::device_local(), SCRATCH_BYTES)?;
    let markers = device.allocate_buffer(BufferParams::host_visible(), MARKER_SLOTS * 4)?;
    let command_buffer = if program.families.has(Family::CommandBuffers) {
        // A transfer and a kernel of the driver's catalogue (native closures, or PTX on CUDA).
        let fill = crate::kernels::load(fixture.catalogue(), &device, Kernel::FillU32)?;
        let cb = device.create_command_buffer(CommandBufferMode::Reusable)?;
        cb.fill(&scratch, 0, 256, 0x5A5A_5A5Au32)?;
        let words = BufferBinding::range(&scratch, FILL_KERNEL_OFFSET, 4 * u64::from(FILL_KERNEL_WORDS));
        cb.dispatch(&fill, 0, [FILL_KERNEL_WORDS / ELEMENTWISE_WORKGROUP, 1, 1], &[0xC0DE_F00D], &[words])?;
        cb.end()?;
        Some(cb)
    } else {
        None
    };
    Ok(DeviceHandles { device, queues, scratch, markers, command_buffer })
}

/// A semaphore's future with a readback's output (no bytes), so both kinds share one type. Not an
/// `async` block: that one could not be polled again after a waker's panic went through it.
struct ValueFuture(WaitFuture);

impl Future for ValueFuture {
    type Output = hal::Result<Vec<u8>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|reached| reached.map(|()| Vec::new()))
    }
}

/// Polls `future` once with `waker`.
fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(waker))
}

/// `readback`'s bytes as `element`s, turned back into bytes.
fn wait_as(readback: &Readback, element: Element, timeout: Timeout) -> hal::Result<Vec<u8>> {
    fn bytes<T: bytemuck::Pod>(values: Vec<T>) -> Vec<u8> {
        bytemuck::cast_slice(&values).to_vec()
    }
    match element {
        Element::U8 => readback.wait_as::<u8>(timeout).map(bytes),
        Element::U16 => readback.wait_as::<u16>(timeout).map(bytes),
        Element::Bytes3 => readback.wait_as::<[u8; 3]>(timeout).map(bytes),
        Element::U32 => readback.wait_as::<u32>(timeout).map(bytes),
        Element::Bytes5 => readback.wait_as::<[u8; 5]>(timeout).map(bytes),
        Element::U64 => readback.wait_as::<u64>(timeout).map(bytes),
    }
}

impl<'p> Run<'p> {
    pub(crate) fn new(
        fixture: &'p Fixture,
        program: &'p Program,
        settings: RunSettings,
        diagnostics: &'p SharedDiagnostics,
    ) -> Result<Self, String> {
        let threads_before = threads_now();
        let mut devices = Vec::new();
        for _ in 0..DEVICES {
            devices.push(Some(device_handles(fixture, program).map_err(|e| format!("setup: {e}"))?));
        }
        let mut sems = Vec::new();
        for spec in &program.sems {
            sems.push(match spec.owner {
                Owner::Host => Semaphore::new(0),
                Owner::Device(d) => devices[d]
                    .as_ref()
                    .map(|h| h.device.create_semaphore(0))
                    .expect("device")
                    .map_err(|e| format!("setup: {e}"))?,
            });
        }
        let prediction = Prediction::of(program, program.families.has(Family::DropInFlight));
        {
            let mut d = diagnostics.lock().unwrap_or_else(|p| p.into_inner());
            d.devices = devices.iter().flatten().map(|h| h.device.clone()).collect();
            d.sems = sems.clone();
        }
        let n = program.nodes.len();
        Ok(Run {
            fixture,
            program,
            prediction,
            settings,
            diagnostics,
            threads_before,
            devices,
            sems,
            readbacks: vec![None; n],
            read_outcomes: vec![None; n],
            typed_reads_left: Vec::new(),
            allocas: vec![None; n],
            host_calls_ran: (0..n).map(|_| Arc::new(AtomicU32::new(0))).collect(),
            inner_failures: Arc::new(Mutex::new(Vec::new())),
            wakers: Vec::new(),
            hostile: Vec::new(),
            violations: Vec::new(),
            in_flight: RefCell::default(),
        })
    }

    fn phase(&self, phase: impl Into<String>) {
        self.diagnostics.lock().unwrap_or_else(|p| p.into_inner()).phase = phase.into();
    }

    pub(crate) fn handles(&self, device: usize) -> &DeviceHandles {
        self.devices[device].as_ref().expect("the device is still held")
    }

    pub(crate) fn execute(mut self) -> Result<InFlightProbes, String> {
        for at in 0..self.program.steps.len() {
            let step = &self.program.steps[at];
            self.phase(format!("step {at}: {step:?}"));
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| self.step(at))) {
                self.violations.push(format!("step {at} ({step:?}) panicked: {}", panic_message(&*panic)));
            }
        }
        let in_flight = self.program.families.has(Family::DropInFlight);
        if !in_flight {
            self.phase("settle before drop");
            self.settle()?;
            self.check_idle();
            self.check_sems(false);
            self.retry_typed_reads();
        }
        self.phase("drop");
        self.wakers.clear();
        // The buffers allocas made are the devices' handles too: one kept would keep its device's
        // memory, and with it what the driver's library keeps per device (the Vulkan validation
        // layer's queue threads, named after the HAL thread that started them).
        self.allocas.iter_mut().for_each(|buffer| *buffer = None);
        self.diagnostics.lock().unwrap_or_else(|p| p.into_inner()).devices.clear();
        for d in self.program.drop_order {
            let handles = self.devices[d].take();
            // A hostile waker a drop wakes panics there: that is the HAL's to contain.
            if let Err(panic) = catch_unwind(AssertUnwindSafe(move || drop(handles))) {
                self.violations.push(format!("dropping device {d} panicked: {}", panic_message(&*panic)));
            }
        }
        self.phase("settle after drop");
        self.settle()?;
        self.retry_typed_reads();
        // First, as the futures it holds keep timepoints that the checks after the drop count.
        self.phase("hostile wakers");
        self.check_hostile_wakers();
        self.phase("checks after drop");
        self.check_after_drop();
        if self.violations.is_empty() {
            return Ok(self.in_flight.take());
        }
        Err(self.violations.join("\n"))
    }

    fn step(&mut self, at: usize) {
        match &self.program.steps[at] {
            Step::Submit(node) => self.submit(*node),
            Step::Signal { sem, value } => {
                if let Err(e) = self.sems[*sem].signal(*value) {
                    self.violations.push(format!("step {at}: host signal of sem {sem} to {value}: {e}"));
                }
            }
            Step::Fail { sem } => {
                self.sems[*sem].fail(Error::new(gate_failure(*sem), format!("fuzz: gate {sem} failed by the host")))
            }
            Step::Wait { entries, any, timeout_us } => self.host_wait(at, entries, *any, *timeout_us),
            Step::PanickingWaker { sem, value } => {
                let mut future = self.sems[*sem].wait_async(*value);
                let waker = Waker::from(Arc::new(wakers::PanicOnWake));
                if poll_once(Pin::new(&mut future), &waker).is_pending() {
                    self.wakers.push(future);
                }
            }
            Step::Scenario(scenario) => {
                let problems = self.scenario(scenario);
                self.violations.extend(problems.into_iter().map(|p| format!("step {at} {scenario:?}: {p}")));
            }
            Step::HostileWaker { target, mode } => self.hostile_waker(at, *target, *mode),
            Step::TypedRead { node, element } => self.typed_read(at, *node, *element, Timeout::Immediate),
        }
    }

    fn list(&self, entries: &[(usize, u64)]) -> Vec<SV> {
        entries.iter().map(|&(s, v)| SV::new(&self.sems[s], v)).collect()
    }

    fn submit(&mut self, n: usize) {
        let node = &self.program.nodes[n];
        let (waits, signals) = (self.list(&node.waits), self.list(&node.signals));
        let handles = self.handles(node.device);
        let queue = &handles.queues[node.queue];
        let submitted = match &node.op {
            Op::Barrier => queue.barrier(&waits, &signals),
            Op::Fill { offset, pattern } => queue.fill(&waits, &handles.scratch, *offset, 64, *pattern, &signals),
            Op::Write { offset, byte } => queue.write(&waits, &handles.scratch, *offset, vec![*byte; 16], &signals),
            Op::Read { offset, length } => queue.read(&waits, &handles.scratch, *offset, *length, &signals).map(|r| {
                self.readbacks[n] = Some(r);
            }),
            Op::Alloca => queue.alloca(&waits, BufferParams::device_local(), 256, &signals).map(|b| {
                self.allocas[n] = Some(b);
            }),
            Op::Dealloca { alloca } => match &self.allocas[*alloca] {
                Some(buffer) => queue.dealloca(&waits, buffer, &signals),
                // Its alloca was refused: a barrier has the same waits and signals.
                None => queue.barrier(&waits, &signals),
            },
            Op::Execute => queue.execute(&waits, handles.command_buffer.as_ref().expect("command buffer"), &signals),
            Op::HostCall(spec) => {
                let settled = !self.prediction.nodes[n].pending;
                // A held host call that holds a handle of its own device would keep it alive for good.
                let target = spec.submit_to.filter(|_| settled).map(|(d, q)| self.handles(d).queues[q].clone());
                let hold = (settled && self.program.families.has(Family::DropInFlight)).then(|| handles.device.clone());
                let (ran, failures, spec) = (self.host_calls_ran[n].clone(), self.inner_failures.clone(), spec.clone());
                let call = move || {
                    // Perhaps the device's last handle: it then drops on the completion thread.
                    let _hold = hold;
                    ran.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_micros(spec.sleep_us));
                    if let Some(queue) = target {
                        let done = queue.device().create_semaphore(0)?;
                        let waited = queue
                            .barrier(&[], &[SV::new(&done, 1)])
                            .and_then(|()| done.wait(1, Timeout::After(Duration::from_secs(2))));
                        if let Err(e) = waited {
                            failures.lock().unwrap_or_else(|p| p.into_inner()).push(format!(
                                "node {n}: the host call's barrier on {queue:?} and its wait failed: {e}\n{}",
                                queue.device().report()
                            ));
                            return Err(e);
                        }
                    }
                    if spec.fails {
                        Err(Error::new(HOST_CALL_FAILURE, format!("fuzz: host call {n} fails")))
                    } else {
                        Ok(())
                    }
                };
                // A blocking call holds later work of its queue until it returns (IREE's meaning), so
                // two blocking calls that each wait for work on the other's queue deadlock by design
                // (their 2 s waits would time out). Calls that wait on another queue do not block
                // theirs; the rest (plain calls, and calls that wait on their own queue, which their
                // gate does not hold) keep the default and exercise the gates.
                let own_queue = Some((node.device, node.queue));
                let flags = match spec.submit_to {
                    Some(target) if Some(target) != own_queue => HostCallFlags::NON_BLOCKING,
                    _ => HostCallFlags::empty(),
                };
                queue.host_call_with(&waits, call, flags, &signals)
            }
        };
        if let Err(e) = submitted {
            // Refused because a signal semaphore failed already: the work would have failed its
            // signals with that status, so the harness does it.
            let refused_for_failure =
                node.signals.iter().any(|&(s, _)| matches!(self.sems[s].query(), Err(f) if f.code() == e.code()));
            if refused_for_failure {
                for &(s, _) in &node.signals {
                    self.sems[s].fail(e.clone());
                }
            } else {
                self.violations.push(format!("node {n} ({node:?}): submission refused: {e}"));
            }
        }
    }

    /// What the model allows for a host wait on one entry at host step `at`.
    fn entry_outcomes(&self, at: usize, sem: usize, value: u64) -> Outcomes {
        match self.program.sems[sem].kind {
            SemKind::Gate => match gate_state(self.program, sem, at) {
                (_, Some(code)) => Outcomes::failed(code),
                (reached, None) if value <= reached => Outcomes::OK,
                _ => Outcomes::PENDING,
            },
            SemKind::Timeline => self.prediction.wait(self.program, sem, value, at),
        }
    }

    fn host_wait(&mut self, at: usize, entries: &[(usize, u64)], any: bool, timeout_us: u64) {
        let list = self.list(entries);
        let reached = |e: &SV| e.semaphore.query().is_ok_and(|v| v >= e.value);
        let reached_before = if any { list.iter().any(reached) } else { list.iter().all(reached) };
        let mode = if any { WaitMode::Any } else { WaitMode::All };
        let timeout = Duration::from_micros(timeout_us);
        let started = Instant::now();
        let result = hal::wait_semaphores(mode, &list, Timeout::After(timeout));
        let took = started.elapsed();
        let outcomes: Vec<Outcomes> = entries.iter().map(|&(s, v)| self.entry_outcomes(at, s, v)).collect();
        let what = format!("step {at}: host wait ({mode:?}) on {entries:?} with {timeout:?}");
        if took > timeout + self.settings.slack {
            self.violations.push(format!("{what} returned after {took:?}"));
        }
        match result {
            Ok(()) => {
                let allowed = if any { outcomes.iter().any(|o| o.ok) } else { outcomes.iter().all(|o| o.ok) };
                let now_reached = if any { list.iter().any(reached) } else { list.iter().all(reached) };
                let failed_since = list.iter().any(|e| e.semaphore.query().is_err());
                if !allowed || (!now_reached && !failed_since) {
                    self.violations.push(format!("{what}: Ok, but the model allows {outcomes:?}"));
                }
            }
            Err(e) if e.code() == StatusCode::DeadlineExceeded => {
                let gate_reached =
                    if any { outcomes.iter().any(|o| o.is_ok()) } else { outcomes.iter().all(|o| o.is_ok()) };
                let gates_only = entries.iter().all(|&(s, _)| self.program.sems[s].kind == SemKind::Gate);
                if reached_before || (gates_only && gate_reached) {
                    self.violations.push(format!("{what}: DeadlineExceeded on values already reached"));
                }
            }
            Err(e) => {
                if !outcomes.iter().any(|o| o.may_fail_with(e.code())) {
                    self.violations.push(format!("{what}: {e}, but the model allows {outcomes:?}"));
                }
            }
        }
    }

    /// Polls a future of `target` with a hostile waker, then a second one with a counting waker;
    /// both are kept (and checked once the devices dropped).
    fn hostile_waker(&mut self, at: usize, target: WakerTarget, mode: PanicsWhen) {
        let futures: Option<(AnyFuture, AnyFuture)> = match target {
            WakerTarget::Semaphore { sem, value } => {
                let future = |s: &Semaphore| -> AnyFuture { Box::pin(ValueFuture(s.wait_async(value))) };
                Some((future(&self.sems[sem]), future(&self.sems[sem])))
            }
            WakerTarget::Read { node, into_future } => self.readbacks[node].as_ref().map(|r| {
                let hostile: AnyFuture =
                    if into_future { Box::pin(r.clone().into_future()) } else { Box::pin(r.wait_async()) };
                (hostile, Box::pin(r.wait_async()) as AnyFuture)
            }),
        };
        // A refused read has no readback.
        let Some((mut hostile, mut witness)) = futures else { return };
        let waker = wakers::hostile(mode);
        let polled = catch_unwind(AssertUnwindSafe(|| poll_once(hostile.as_mut(), &waker)));
        // Dropped here on purpose: a waker that panics when dropped panics in this thread.
        let _ = catch_unwind(AssertUnwindSafe(move || drop(waker)));
        let mut hostile = Some(hostile);
        match polled {
            Ok(Poll::Ready(outcome)) => {
                hostile = None;
                self.record_read(target, outcome);
            }
            Ok(Poll::Pending) => {}
            // A clone that panics does so in the poller's thread: the poll may pass it on.
            Err(_) if mode == PanicsWhen::Cloned => {}
            Err(panic) => self.violations.push(format!(
                "step {at}: polling {target:?} with a waker that panics when {} panicked: {}",
                format!("{mode:?}").to_lowercase(),
                panic_message(&*panic)
            )),
        }
        let counter = Arc::new(Counter::default());
        let (witness, witness_pending) = match poll_once(witness.as_mut(), &Waker::from(counter.clone())) {
            Poll::Ready(outcome) => {
                self.record_read(target, outcome);
                (None, false)
            }
            Poll::Pending => (Some(witness), true),
        };
        self.hostile.push(HostileEntry { step: at, target, mode, hostile, witness, witness_pending, counter });
    }

    /// Keeps the first outcome a future of a read took (its bytes can be taken once).
    fn record_read(&mut self, target: WakerTarget, outcome: hal::Result<Vec<u8>>) {
        if let WakerTarget::Read { node, .. } = target
            && self.read_outcomes[node].is_none()
        {
            self.read_outcomes[node] = Some(outcome);
        }
    }

    /// Whether `target` is decided: the value reached or the semaphore failed; the read done.
    fn decided(&self, target: WakerTarget) -> bool {
        match target {
            WakerTarget::Semaphore { sem, value } => self.sems[sem].query().map_or(true, |v| v >= value),
            WakerTarget::Read { node, .. } => self.readbacks[node].as_ref().is_some_and(Readback::is_ready),
        }
    }

    /// Once the devices dropped: each waiter polled beside a hostile waker was woken if its
    /// target was decided, and both futures resolve when polled again.
    fn check_hostile_wakers(&mut self) {
        for mut entry in std::mem::take(&mut self.hostile) {
            let mode = format!("{:?}", entry.mode).to_lowercase();
            let what = format!("step {} ({:?}, a waker that panics when {mode})", entry.step, entry.target);
            self.check_hostile_entry(&mut entry, &what);
            // The futures' drop may drop the hostile waker in this thread, where its panic is its own.
            if let Err(panic) = catch_unwind(AssertUnwindSafe(move || drop(entry))) {
                let message = panic_message(&*panic);
                if !message.contains(wakers::HOSTILE_PANIC) {
                    self.violations.push(format!("{what}: dropping its futures panicked: {message}"));
                }
            }
        }
    }

    fn check_hostile_entry(&mut self, entry: &mut HostileEntry, what: &str) {
        // A semaphore is as the settled program left it (a host one nobody signals stays pending);
        // a read does not outlive its device, though its readback may be decided a moment after.
        let decided = match entry.target {
            WakerTarget::Semaphore { .. } => self.decided(entry.target),
            WakerTarget::Read { .. } => eventually(|| self.decided(entry.target)),
        };
        if !decided {
            if matches!(entry.target, WakerTarget::Read { .. }) {
                self.violations.push(format!("{what}: the readback is still pending after its device dropped"));
            }
            return;
        }
        if entry.witness_pending && !eventually(|| entry.counter.count() > 0) {
            self.violations.push(format!(
                "{what}: a waiter polled beside the hostile waker was never woken, though its target is decided ({})",
                self.describe_target(entry.target)
            ));
        }
        for (name, slot) in [("the waiter's", &mut entry.witness), ("the hostile waker's", &mut entry.hostile)] {
            let Some(future) = slot.as_mut() else { continue };
            // Polling again may drop the hostile waker in this thread, where its panic is its own.
            match catch_unwind(AssertUnwindSafe(|| poll_once(future.as_mut(), Waker::noop()))) {
                Ok(Poll::Ready(outcome)) => {
                    *slot = None;
                    self.record_read(entry.target, outcome);
                }
                Ok(Poll::Pending) => self.violations.push(format!(
                    "{what}: {name} future is still pending when polled again, though its target is decided ({})",
                    self.describe_target(entry.target)
                )),
                Err(panic) if panic_message(&*panic).contains(wakers::HOSTILE_PANIC) => {}
                Err(panic) => self
                    .violations
                    .push(format!("{what}: polling {name} future again panicked: {}", panic_message(&*panic))),
            }
        }
    }

    fn describe_target(&self, target: WakerTarget) -> String {
        match target {
            WakerTarget::Semaphore { sem, .. } => format!("sem {sem} is {:?}", self.sems[sem].query()),
            WakerTarget::Read { node, .. } => format!("read node {node}: {:?}", self.read_outcomes[node]),
        }
    }

    /// `wait_as` of read node `node` as `element`s with `timeout`: a size that does not divide the
    /// read is `InvalidArgument`, and the bytes stay for the `wait` that follows; one that divides
    /// gives the bytes. Undecided, it is retried once the program settled.
    fn typed_read(&mut self, at: usize, node: usize, element: Element, timeout: Timeout) {
        let Op::Read { length, .. } = self.program.nodes[node].op else { return };
        let Some(readback) = self.readbacks[node].clone() else { return };
        if self.read_outcomes[node].is_some() {
            return;
        }
        let what = format!("step {at}: read node {node} ({length} bytes) wait_as::<{element:?}>");
        let fits = length % element.size() == 0;
        match wait_as(&readback, element, timeout) {
            Err(e) if e.code() == StatusCode::DeadlineExceeded => self.typed_reads_left.push((at, node, element)),
            // Refused at once, read or not: the bytes, or the read's failure, stay for a plain wait.
            Err(e) if e.code() == StatusCode::InvalidArgument && !fits => match readback.wait(timeout) {
                Err(f) if f.code() == StatusCode::DeadlineExceeded => {}
                Ok(bytes) if bytes.len() as u64 == length => self.read_outcomes[node] = Some(Ok(bytes)),
                Err(f)
                    if f.code() != StatusCode::FailedPrecondition
                        && self.prediction.nodes[node].after_drop().may_fail_with(f.code()) =>
                {
                    self.read_outcomes[node] = Some(Err(f));
                }
                following => {
                    self.violations.push(format!(
                        "{what}: {e}; the wait() that follows should still give the {length} bytes (or the \
                         read's failure), it gave {following:?}"
                    ));
                    self.read_outcomes[node] = Some(following);
                }
            },
            Ok(bytes) if fits && bytes.len() as u64 == length => self.read_outcomes[node] = Some(Ok(bytes)),
            Ok(bytes) => {
                self.violations.push(format!("{what}: gave {} bytes of values", bytes.len()));
                self.read_outcomes[node] = Some(Ok(bytes));
            }
            Err(e) => {
                // The read did not run: its status is the one its waits or signals carry.
                let allowed = self.prediction.nodes[node].after_drop();
                if e.code() == StatusCode::InvalidArgument || !allowed.may_fail_with(e.code()) {
                    self.violations.push(format!("{what}: {e}, but the model allows {allowed}"));
                }
                self.read_outcomes[node] = Some(Err(e));
            }
        }
    }

    /// The typed reads that found their read undecided, once more now that everything settled.
    fn retry_typed_reads(&mut self) {
        for (at, node, element) in std::mem::take(&mut self.typed_reads_left) {
            let settled = self.devices.iter().all(Option::is_none) || !self.prediction.nodes[node].pending;
            let timeout = if settled { Timeout::After(SETTLE) } else { Timeout::Immediate };
            self.typed_read(at, node, element, timeout);
        }
        // Still undecided before the drop: tried again after it; after it, that is a failure.
        if self.devices.iter().all(Option::is_none) {
            for (at, node, _) in std::mem::take(&mut self.typed_reads_left) {
                self.violations.push(format!("step {at}: read node {node} is still pending after its device dropped"));
            }
        }
    }

    /// Waits, with [`HANG`] each, for every submission the model says does not stay pending.
    fn settle(&mut self) -> Result<(), String> {
        let dropped = self.devices.iter().all(Option::is_none);
        for (n, node) in self.program.nodes.iter().enumerate() {
            let outcome = if dropped { self.prediction.nodes[n].after_drop() } else { self.prediction.nodes[n] };
            if outcome.pending {
                continue;
            }
            for &(s, v) in &node.signals {
                if let Err(e) = self.sems[s].wait(v, Timeout::After(HANG))
                    && e.code() == StatusCode::DeadlineExceeded
                {
                    let report = stuck_report(self.diagnostics);
                    return Err(format!(
                        "hang: node {n} ({node:?}) predicted {outcome} did not signal sem {s} to {v} within {HANG:?} \
                         ({}); {}\n{report}",
                        if dropped { "after the devices dropped" } else { "before drop" },
                        self.violations.join("\n")
                    ));
                }
            }
        }
        Ok(())
    }

    /// Before drop: nothing in flight, and exactly the held work the model allows is pending.
    fn check_idle(&mut self) {
        for d in 0..DEVICES {
            let on_device = |n: &usize| self.program.nodes[*n].device == d;
            let nodes = 0..self.program.nodes.len();
            let surely =
                nodes.clone().filter(on_device).filter(|&n| self.prediction.nodes[n] == Outcomes::PENDING).count();
            let maybe = nodes.filter(on_device).filter(|&n| self.prediction.nodes[n].pending).count();
            let device = &self.handles(d).device;
            let mut last = device.resource_usage();
            let idle = eventually(|| {
                last = device.resource_usage();
                let used = |name: &str| last.pools.iter().find(|p| p.name == name).map_or(0, |p| p.in_use);
                let pending = used("pending actions");
                used("in-flight submissions") == 0
                    && (surely..=maybe).contains(&pending)
                    && (maybe > 0 || last.is_idle())
            });
            if !idle {
                self.violations.push(format!(
                    "device {d}: after settling, usage {last}; the model allows {surely}..={maybe} pending actions\n{}",
                    device.report()
                ));
            }
        }
    }

    /// Each semaphore's state against the model, before the drop (`after_drop` false) or after it.
    fn check_sems(&mut self, after_drop: bool) {
        for (s, sem) in self.sems.iter().enumerate() {
            let state = sem.query();
            if let Some(problem) = self.sem_problem(s, &state, after_drop) {
                self.violations.push(format!(
                    "sem {s} ({:?}) {} drop: {problem}",
                    self.program.sems[s],
                    if after_drop { "after" } else { "before" }
                ));
            }
        }
    }

    fn sem_problem(&self, s: usize, state: &hal::Result<u64>, after_drop: bool) -> Option<String> {
        let program = self.program;
        if program.sems[s].kind == SemKind::Gate {
            let expected = match gate_state(program, s, program.steps.len()) {
                (_, Some(code)) => Err(code),
                (value, None) => Ok(value),
            };
            let got = state.as_ref().map(|v| *v).map_err(|e| e.code());
            return (got != expected).then(|| format!("is {state:?}, the host left it at {expected:?}"));
        }
        let producers = &self.prediction.producers[s];
        let outcome = |p: usize| {
            let o = self.prediction.nodes[p];
            if after_drop { o.after_drop() } else { o }
        };
        let describe = || {
            let list: Vec<String> = producers.iter().map(|&p| format!("node {p} {}", outcome(p))).collect();
            format!("producers: {}", list.join(", "))
        };
        match state {
            Ok(value) => {
                let Some(j) = (0..=producers.len()).find(|&j| self.prediction.value_after(program, s, j) == *value)
                else {
                    return Some(format!("value {value} is no value a producer signals; {}", describe()));
                };
                let applied_ok = producers[..j].iter().all(|&p| outcome(p).ok);
                let next_may_wait = producers.get(j).is_none_or(|&p| outcome(p).pending);
                (!applied_ok || !next_may_wait)
                    .then(|| format!("value {value}, which the model does not allow; {}", describe()))
            }
            Err(e) => {
                let allowed = producers.iter().any(|&p| outcome(p).may_fail_with(e.code()));
                (!allowed).then(|| format!("failed with {e}, which the model does not allow; {}", describe()))
            }
        }
    }

    fn check_after_drop(&mut self) {
        let baseline = self.threads_before;
        if self.settings.check_threads && !eventually(|| threads_now() <= baseline) {
            // A debugger can look at the threads left while this waits (`HAL_FUZZ_PAUSE_SECONDS`).
            if let Some(seconds) = std::env::var("HAL_FUZZ_PAUSE_SECONDS").ok().and_then(|s| s.parse().ok()) {
                eprintln!("fuzz: paused {seconds} s with threads left: {}", thread_names());
                std::thread::sleep(Duration::from_secs(seconds));
            }
            self.violations.push(format!(
                "threads left after the devices dropped: {} before, {} now ({})",
                baseline,
                threads_now(),
                thread_names()
            ));
        }
        for (s, sem) in self.sems.iter().enumerate() {
            if !eventually(|| sem.pending_count() == 0) {
                self.violations.push(format!(
                    "sem {s}: {} timepoints left after drop: {}",
                    sem.pending_count(),
                    sem.report()
                ));
            }
        }
        self.check_sems(true);
        for (n, node) in self.program.nodes.iter().enumerate() {
            let waits = self.prediction.waits[n];
            // Runs for sure: its waits are reached, and nothing can refuse or cancel it.
            let must_run =
                waits.is_ok() && !self.prediction.refusable[n] && !self.program.families.has(Family::DropInFlight);
            match &node.op {
                Op::HostCall(_) => {
                    let ran = self.host_calls_ran[n].load(Ordering::SeqCst);
                    if (must_run && ran != 1) || (waits.never_ok() && ran != 0) || ran > 1 {
                        self.violations.push(format!("node {n} (host call, waits {waits}) ran {ran} times"));
                    }
                }
                Op::Read { length, .. } => {
                    let outcome = self.read_outcome(n);
                    let has = outcome.as_ref().and_then(|o| o.as_ref().ok()).map(Vec::len);
                    if (must_run && has != Some(*length as usize)) || (waits.never_ok() && has.is_some()) {
                        self.violations
                            .push(format!("node {n} (read of {length} bytes, waits {waits}) has {has:?} bytes"));
                    }
                    if self.program.families.has(Family::DroppedMidRead) {
                        self.check_read_status(n, outcome);
                    }
                }
                _ => {}
            }
        }
        let failures = self.inner_failures.lock().unwrap_or_else(|p| p.into_inner());
        self.violations.extend(failures.iter().cloned());
    }

    /// Read node `n`'s outcome once its device dropped: what something took already, or what its
    /// readback holds (`None`: refused at submission, or still pending).
    fn read_outcome(&mut self, n: usize) -> Option<hal::Result<Vec<u8>>> {
        if let Some(outcome) = &self.read_outcomes[n] {
            return Some(outcome.clone());
        }
        let readback = self.readbacks[n].as_ref()?;
        if !self.program.families.has(Family::DroppedMidRead) {
            return readback.take().map(Ok);
        }
        eventually(|| readback.is_ready()).then(|| readback.wait(Timeout::Immediate))
    }

    /// A read that did not run fails with the status its signal semaphores carry (a cancelled
    /// read: the device's destruction), not one of its own; a readback is never left pending.
    fn check_read_status(&mut self, n: usize, outcome: Option<hal::Result<Vec<u8>>>) {
        let node = &self.program.nodes[n];
        let Some(outcome) = outcome else {
            if self.readbacks[n].is_some() {
                self.violations
                    .push(format!("node {n} (read): its readback is still pending after its device dropped"));
            }
            return;
        };
        let Err(e) = outcome else { return };
        let signals: Vec<hal::Result<u64>> = node.signals.iter().map(|&(s, _)| self.sems[s].query()).collect();
        if !signals.iter().any(|state| matches!(state, Err(f) if f.code() == e.code())) {
            self.violations.push(format!(
                "node {n} (read, after the devices dropped): the readback failed with {e}, but its signal semaphores \
                 are {signals:?}"
            ));
        }
    }
}
