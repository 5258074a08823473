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
