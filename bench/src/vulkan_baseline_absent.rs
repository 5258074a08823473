//! The raw-Vulkan baselines in a build without the `vulkan` feature: [`RawVulkan`] has no values
//! and [`RawVulkan::new`] says why, so the workloads compile unchanged and never reach a Vulkan row
//! (no `vulkan` driver is registered to give them a Vulkan device).

use std::time::Duration;

use hal::{Error, Result};

/// The raw-Vulkan baselines, absent from this build: no value of this type exists.
#[derive(Debug)]
pub enum RawVulkan {}

impl RawVulkan {
    /// Always `Unavailable`: this build has no Vulkan.
    pub fn new(_ordinal: usize, _spirv: &[u8], _dispatch_counts: &[usize]) -> Result<RawVulkan> {
        Err(Error::unavailable(
            "the raw-Vulkan baselines are not built in (the bench was built without its `vulkan` feature)",
        ))
    }

    /// See the Vulkan build's `chain`.
    pub fn chain(&self, _dispatches: usize, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the Vulkan build's `chain_calls`.
    pub fn chain_calls(&self, _dispatches: usize, _submissions: u64, _calls: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the Vulkan build's `independent`.
    pub fn independent(&self, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the Vulkan build's `ping_pong`.
    pub fn ping_pong(&self, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the Vulkan build's `ping_pong_ordered`.
    pub fn ping_pong_ordered(&self, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the Vulkan build's `round_trip`.
    pub fn round_trip(&self, _dispatches: usize, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the Vulkan build's `deferred_release_gated`.
    pub fn deferred_release_gated(&self, _blocked_waiter: bool, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the Vulkan build's `deferred_release`.
    pub fn deferred_release(&self, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the Vulkan build's `deferred_release_polled`.
    pub fn deferred_release_polled(&self, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the Vulkan build's `add_thread_buffers`.
    pub fn add_thread_buffers(&mut self, _threads: usize) -> Result<()> {
        match *self {}
    }

    /// See the Vulkan build's `distinct_queues`.
    pub fn distinct_queues(&self) -> usize {
        match *self {}
    }

    /// See the Vulkan build's `threaded_chains`.
    pub fn threaded_chains(&self, _threads: usize, _shared: bool, _ops: u64) -> Result<Duration> {
        match *self {}
    }
}
