//! What the Vulkan test binaries built on ctest share: the driver's fixture
//! (`driver_vulkan::cts::fixture`) with the tests' policy where Vulkan is not usable, and children
//! that run one test in a process of its own.

// Each test binary uses a part of it.
#![allow(dead_code)]

use ctest::Fixture;

/// Set to `1` where a Vulkan device must be present: the tests then fail instead of not running.
pub const REQUIRE_VULKAN_ENV: &str = "HAL_REQUIRE_VULKAN";

/// Whether [`REQUIRE_VULKAN_ENV`] is `1`.
pub fn vulkan_required() -> bool {
    std::env::var(REQUIRE_VULKAN_ENV).is_ok_and(|v| v == "1")
}

/// ctest's fixture on Vulkan device 0 (`driver_vulkan::cts::fixture(0)`). Where Vulkan is not
/// usable: that fixture, not available and naming the reason, or a panic under
/// [`REQUIRE_VULKAN_ENV`]` = 1`.
pub fn vulkan_fixture() -> Fixture {
    let fixture = driver_vulkan::cts::fixture(0);
    if let Some(notice) = fixture.unavailable()
        && vulkan_required()
    {
        panic!("{REQUIRE_VULKAN_ENV}=1 but the Vulkan tests cannot run: {notice}");
    }
    fixture
}

/// Runs `test` of this test binary alone in a child process with `env` set, and fails unless it
/// ran and passed (for a test that needs a process of its own: its own environment, or no other
/// test's devices beside it).
pub fn run_in_child(test: &str, env: &[(&str, &str)]) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = std::process::Command::new(exe)
        .args([test, "--exact", "--include-ignored", "--nocapture"])
        .envs(env.iter().copied())
        .output()
        .expect("run this test binary");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the child did not run: {text}");
}

/// Holds a HAL queue's later work on the device, not on the host: the queue waits for a Vulkan
/// timeline semaphore that only [`DeviceGate::open`] signals (from the host), and the work behind
/// it is issued to Vulkan while it waits. Lavapipe cannot hold a kernel spinning on a gate buffer
/// (it ends such spins within milliseconds); this holds on every device.
pub struct DeviceGate {
    native: driver_vulkan::interop::VulkanHandles,
    semaphore: ash::vk::Semaphore,
    passed: hal::Semaphore,
    open: bool,
}

impl DeviceGate {
    /// Closes a gate on `queue`: its later work waits, on the device, for [`DeviceGate::open`]
    /// (or for `passed`, which the queue signals to 1 once the gate opened).
    pub fn on(device: &hal::Device, queue: &hal::Queue) -> DeviceGate {
        use ash::vk::{self, Handle};
        // SAFETY: the gate makes one semaphore on these handles and destroys it before they drop.
        let native = unsafe { driver_vulkan::interop::handles(device) }.expect("the Vulkan handles");
        let mut kind = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: a valid create info; destroyed by `drop`, once nothing waits on it.
        let semaphore = unsafe { native.device().create_semaphore(&info, None) }.expect("vkCreateSemaphore");
        let passed = device.create_semaphore(0).expect("a semaphore");
        let timepoint = hal::ExternalTimepoint::VulkanTimeline { semaphore: semaphore.as_raw(), value: 1 };
        let signal = [hal::SemaphoreValue::new(&passed, 1)];
        // SAFETY: the semaphore lives until the queue's wait for it completed (`drop` waits).
        unsafe { queue.wait_external(&[], timepoint, &signal) }.expect("wait_external");
        DeviceGate { native, semaphore, passed, open: false }
    }

    /// The semaphore the queue signals to 1 once the gate opened.
    pub fn passed(&self) -> &hal::Semaphore {
        &self.passed
    }

    /// Opens the gate (`vkSignalSemaphore`); a second call does nothing.
    pub fn open(&mut self) {
        self.signal().expect("vkSignalSemaphore");
    }

    /// Signals the semaphore to 1 unless that was done: `open` and `drop`.
    fn signal(&mut self) -> ash::prelude::VkResult<()> {
        if std::mem::replace(&mut self.open, true) {
            return Ok(());
        }
        let info = ash::vk::SemaphoreSignalInfo::default().semaphore(self.semaphore).value(1);
        // SAFETY: a live timeline semaphore at 0 that nothing else signals.
        unsafe { self.native.device().signal_semaphore(&info) }
    }
}

impl Drop for DeviceGate {
    /// Opens the gate if it is closed, waits until the queue passed it, then destroys the
    /// semaphore; a queue that never passes it (a device lost) leaks it rather than destroy a
    /// semaphore a submission may still wait on.
    fn drop(&mut self) {
        if self.signal().is_err() {
            return;
        }
        let passed = self.passed.wait(1, hal::Timeout::After(std::time::Duration::from_secs(60)));
        if passed.is_ok() {
            // SAFETY: the one submission waiting on it completed (it signalled `passed`).
            unsafe { self.native.device().destroy_semaphore(self.semaphore, None) };
        }
    }
}

/// A seedable xorshift64* stream for the randomized tests: the same seed draws the same
/// operations (the SPIR-V mutants, the binding-table stress).
pub struct Rng(u64);

impl Rng {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// The seed a randomized test runs with: `env`'s value where it is set, else one from the clock.
/// The test prints it, so a failure can be replayed.
pub fn seed_from(env: &str) -> u64 {
    match std::env::var(env) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| panic!("{env}='{text}' is not a whole number")),
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64),
    }
}
