//! What a case runs with: its device, the fixture, and short-hands for the things every case does
//! (buffers, semaphores, kernels, bounded waits that print the hang report when they expire).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hal::{
    Buffer, BufferParams, CommandBuffer, CommandBufferMode, Device, Executable, MemoryType, Queue, Semaphore,
    SemaphoreValue, StatusCode, Timeout,
};

use crate::check::{CaseError, Context, expect_code, one_line};
use crate::fixture::Fixture;
use crate::kernels::Kernel;

/// How long a case waits for something that must happen (generous: CI machines are slow).
pub const LONG: Duration = Duration::from_secs(5);

/// How long a case watches for something that must not happen yet.
pub const SHORT: Duration = Duration::from_millis(30);

/// A `SemaphoreValue`, shorter.
pub fn sv(semaphore: &Semaphore, value: u64) -> SemaphoreValue {
    SemaphoreValue::new(semaphore, value)
}

/// The context of one case run.
pub struct Cx {
    fixture: Fixture,
    device: Device,
    others: Arc<Mutex<Vec<Device>>>,
    notes: Arc<Mutex<Vec<String>>>,
}

impl Cx {
    pub(crate) fn new(
        fixture: Fixture,
        device: Device,
        others: Arc<Mutex<Vec<Device>>>,
        notes: Arc<Mutex<Vec<String>>>,
    ) -> Self {
        Cx { fixture, device, others, notes }
    }

    /// Adds a note to the case's report (shown beside PASS in the runner's table and printed by the
    /// generated test): e.g. which variant of a case ran.
    pub fn note(&self, text: impl Into<String>) {
        self.notes.lock().unwrap_or_else(|p| p.into_inner()).push(text.into());
    }

    /// The fixture (driver under test).
    pub fn fixture(&self) -> &Fixture {
        &self.fixture
    }

    /// The case's device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A second device of the same driver; its pools are leak-checked with the case's device.
    pub fn other_device(&self) -> Result<Device, CaseError> {
        let device = self.fixture.create_device().ctx("creating a second device")?;
        self.others.lock().unwrap_or_else(|p| p.into_inner()).push(device.clone());
        Ok(device)
    }

    /// `N` devices of the driver: the case's device first, then new ones (leak-checked with it). On
    /// CUDA they may share a GPU. Notes how many distinct GPUs (by name and ordinal) they are on.
    pub fn devices<const N: usize>(&self) -> Result<[Device; N], CaseError> {
        let mut devices = Vec::with_capacity(N);
        devices.push(self.device.clone());
        while devices.len() < N {
            devices.push(self.other_device()?);
        }
        let mut places: Vec<(String, usize)> =
            devices.iter().map(|d| (d.info().name.clone(), d.info().ordinal)).collect();
        places.dedup();
        self.note(format!("{N} devices on {} device ordinal(s)", places.len()));
        devices.try_into().map_err(|_| CaseError::Fail("device count".into()))
    }

    /// Queue `index` modulo the queue count, so multi-queue cases run on single-queue devices too.
    pub fn queue(&self, index: usize) -> Queue {
        let count = self.device.queue_count().max(1);
        self.device.queue(index % count).expect("an index below the queue count is valid")
    }

    /// A semaphore of the case's device at `initial`.
    pub fn sem(&self, initial: u64) -> Result<Semaphore, CaseError> {
        self.device.create_semaphore(initial).ctx("create_semaphore")
    }

    /// A host-visible, coherent buffer usable for everything (mapping included).
    pub fn host_buffer(&self, size: u64) -> Result<Buffer, CaseError> {
        self.buffer(BufferParams::host_visible(), size)
    }

    /// A device-local buffer for transfers and dispatches (not mappable).
    pub fn device_buffer(&self, size: u64) -> Result<Buffer, CaseError> {
        self.buffer(BufferParams::device_local(), size)
    }

    /// A buffer with `params`.
    pub fn buffer(&self, params: BufferParams, size: u64) -> Result<Buffer, CaseError> {
        self.device.allocate_buffer(params, size).ctx(format!("allocate_buffer({params:?}, {size})"))
    }

    /// A host-visible buffer holding `words`.
    pub fn host_buffer_u32(&self, words: &[u32]) -> Result<Buffer, CaseError> {
        let buffer = self.host_buffer((words.len() * 4) as u64)?;
        buffer.write(0, &to_bytes(words)).ctx("write through a mapping")?;
        Ok(buffer)
    }

    /// A host-visible buffer holding `values`.
    pub fn host_buffer_f32(&self, values: &[f32]) -> Result<Buffer, CaseError> {
        let words: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
        self.host_buffer_u32(&words)
    }

    /// The bytes of a host-visible buffer.
    pub fn bytes(&self, buffer: &Buffer) -> Result<Vec<u8>, CaseError> {
        buffer.read_to_vec().ctx(format!("reading buffer {} through a mapping", buffer.id()))
    }

    /// The words of a host-visible buffer.
    pub fn words(&self, buffer: &Buffer) -> Result<Vec<u32>, CaseError> {
        Ok(from_bytes(&self.bytes(buffer)?))
    }

    /// The `f32`s of a host-visible buffer.
    pub fn floats(&self, buffer: &Buffer) -> Result<Vec<f32>, CaseError> {
        Ok(self.words(buffer)?.into_iter().map(f32::from_bits).collect())
    }

    /// Loads catalogue kernel `kernel` on the case's device.
    pub fn load(&self, kernel: Kernel) -> Result<Executable, CaseError> {
        self.load_on(&self.device, kernel)
    }

    /// Loads catalogue kernel `kernel` on `device` (see [`needs_kernel`](Self::needs_kernel)).
    pub fn load_on(&self, device: &Device, kernel: Kernel) -> Result<Executable, CaseError> {
        self.needs_kernel(kernel)?;
        crate::kernels::load(self.fixture.catalogue(), device, kernel).map_err(CaseError::from)
    }

    /// Skips the case when the fixture's catalogue has no kernels at all
    /// ([`NoKernels`](crate::kernels::NoKernels): a driver that loads none): the case needs `kernel`.
    pub fn needs_kernel(&self, kernel: Kernel) -> Result<(), CaseError> {
        if self.fixture.catalogue().kinds().is_empty() {
            return Err(CaseError::Skip(format!("needs the {kernel:?} kernel; the driver loads no kernels")));
        }
        if let Some(reason) = self.fixture.catalogue().lacks(kernel) {
            return Err(CaseError::Skip(format!("the kernel catalogue has no {kernel:?} kernel: {reason}")));
        }
        Ok(())
    }

    /// A command buffer of the case's device.
    pub fn command_buffer(&self, mode: CommandBufferMode) -> Result<CommandBuffer, CaseError> {
        self.device.create_command_buffer(mode).ctx("create_command_buffer")
    }

    /// Executes `cb` on queue 0 and waits for it.
    pub fn run(&self, cb: &CommandBuffer) -> Result<(), CaseError> {
        let done = self.sem(0)?;
        self.queue(0).execute(&[], cb, &[sv(&done, 1)]).ctx("execute")?;
        self.wait(&done, 1)
    }

    /// Waits (at most [`LONG`]) for `semaphore` to reach `value`; the failure names the device's
    /// pending work.
    pub fn wait(&self, semaphore: &Semaphore, value: u64) -> Result<(), CaseError> {
        semaphore.wait(value, Timeout::After(LONG)).map_err(|e| {
            CaseError::Fail(format!(
                "waiting for semaphore {} >= {value}: {e}\n{}",
                semaphore.id(),
                self.device.report()
            ))
        })
    }

    /// Waits (at most [`LONG`]) for `semaphore` to fail with `code`; returns the failure.
    pub fn wait_failed(&self, semaphore: &Semaphore, value: u64, code: StatusCode) -> Result<hal::Error, CaseError> {
        let result = semaphore.wait(value, Timeout::After(LONG));
        if let Err(e) = &result
            && e.code() == StatusCode::DeadlineExceeded
        {
            return Err(CaseError::Fail(format!(
                "semaphore {} neither reached {value} nor failed: {e}\n{}",
                semaphore.id(),
                self.device.report()
            )));
        }
        expect_code(result, code, &format!("wait on semaphore {} >= {value}", semaphore.id()))
    }

    /// Waits (at most [`LONG`]) for `semaphore` to fail with any status; returns the failure.
    pub fn wait_any_failure(&self, semaphore: &Semaphore, value: u64) -> Result<hal::Error, CaseError> {
        match semaphore.wait(value, Timeout::After(LONG)) {
            Ok(()) => {
                Err(CaseError::Fail(format!("semaphore {} reached {value} but should have failed", semaphore.id())))
            }
            Err(e) if e.code() == StatusCode::DeadlineExceeded => Err(CaseError::Fail(format!(
                "semaphore {} neither reached {value} nor failed: {e}\n{}",
                semaphore.id(),
                self.device.report()
            ))),
            Err(e) => one_line(e, &format!("wait on semaphore {} >= {value}", semaphore.id())),
        }
    }

    /// Checks `semaphore` stays below `value`, unfailed, for [`SHORT`].
    pub fn still_pending(&self, semaphore: &Semaphore, value: u64, what: &str) -> Result<(), CaseError> {
        std::thread::sleep(SHORT);
        match semaphore.query() {
            Ok(current) if current < value => Ok(()),
            Ok(current) => Err(CaseError::Fail(format!(
                "{what}: semaphore {} reached {current} (>= {value}) too early",
                semaphore.id()
            ))),
            Err(e) => Err(CaseError::Fail(format!("{what}: semaphore {} failed unexpectedly: {e}", semaphore.id()))),
        }
    }

    /// Checks `semaphore` is at exactly `value` and not failed.
    pub fn expect_value(&self, semaphore: &Semaphore, value: u64, what: &str) -> Result<(), CaseError> {
        match semaphore.query() {
            Ok(current) if current == value => Ok(()),
            Ok(current) => {
                Err(CaseError::Fail(format!("{what}: semaphore {} is at {current}, expected {value}", semaphore.id())))
            }
            Err(e) => Err(CaseError::Fail(format!("{what}: semaphore {} failed unexpectedly: {e}", semaphore.id()))),
        }
    }

    /// Whether the device offers a memory type containing `memory_type`.
    pub fn offers(&self, memory_type: MemoryType) -> bool {
        self.device.info().memory_types.iter().any(|t| t.contains(memory_type))
    }

    /// Reads `length` bytes of any buffer (mappable or not) at `offset` with a queue read.
    pub fn queue_read(&self, buffer: &Buffer, offset: u64, length: u64) -> Result<Vec<u8>, CaseError> {
        let done = self.sem(0)?;
        let back = self.queue(0).read(&[], buffer, offset, length, &[sv(&done, 1)]).ctx("queue read")?;
        self.wait(&done, 1)?;
        back.take().ok_or_else(|| CaseError::Fail("queue read signalled but left no bytes".into()))
    }
}

/// Drops `device` on a thread of its own and fails unless the drop returns within [`LONG`]: a
/// device's teardown never hangs, whatever its queues hold.
pub fn drop_in_time(device: Device, what: &str) -> Result<(), CaseError> {
    let dropper = std::thread::spawn(move || drop(device));
    let deadline = std::time::Instant::now() + LONG;
    while !dropper.is_finished() {
        if std::time::Instant::now() >= deadline {
            return Err(CaseError::Fail(format!("dropping the device {what} hangs")));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    dropper.join().map_err(|_| CaseError::Fail(format!("dropping the device {what} panicked")))
}

/// Little-endian bytes of `words`.
pub fn to_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Little-endian words of `bytes` (a trailing partial word is dropped).
pub fn from_bytes(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// `count` bytes counting up from `start` (wrapping), distinct from zeroed or filled memory.
pub fn ramp(start: u8, count: usize) -> Vec<u8> {
    (0..count).map(|i| start.wrapping_add(i as u8)).collect()
}
