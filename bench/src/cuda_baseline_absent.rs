//! The raw-CUDA baselines in a build without the `cuda` feature: [`RawCuda`] has no values and
//! [`RawCuda::new`] says why, so the workloads compile unchanged and never reach a CUDA row (no
//! `cuda` driver is registered to give them a CUDA device).

use std::time::Duration;

use hal::{Buffer, Device, Error, Result};

/// The raw-CUDA baselines, absent from this build: no value of this type exists.
#[derive(Debug)]
pub enum RawCuda {}

impl RawCuda {
    /// Always `Unavailable`: this build has no CUDA.
    pub fn new(_ordinal: usize, _streams: usize, _graph_kernels: &[usize]) -> Result<Self> {
        Err(Error::unavailable(
            "the raw-CUDA baselines are not built in (the bench was built without its `cuda` feature)",
        ))
    }

    /// See the CUDA build's `share_data`.
    pub fn share_data(&self, _device: &Device) -> Result<Buffer> {
        match *self {}
    }

    /// Streams in use (never called: no value exists).
    pub fn stream_count(&self) -> usize {
        match *self {}
    }

    /// See the CUDA build's `record_chain`.
    pub fn record_chain(&self, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the CUDA build's `launch_record_chain`.
    pub fn launch_record_chain(&self, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the CUDA build's `launches`.
    pub fn launches(&self, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the CUDA build's `ping_pong`.
    pub fn ping_pong(&self, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the CUDA build's `cross_ping_pong`.
    pub fn cross_ping_pong(&self, _peer: &RawCuda, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the CUDA build's `fan_out_in`.
    pub fn fan_out_in(&self, _consumers: usize, _rounds: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the CUDA build's `launch_sync`.
    pub fn launch_sync(&self, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the CUDA build's `graph_chain`.
    pub fn graph_chain(&self, _kernels: usize, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the CUDA build's `graph_record_chain`.
    pub fn graph_record_chain(&self, _kernels: usize, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the CUDA build's `graph_sync`.
    pub fn graph_sync(&self, _kernels: usize, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the CUDA build's `alloc_free_async`.
    pub fn alloc_free_async(&self, _size: usize, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the CUDA build's `alloc_free_async_recorded`.
    pub fn alloc_free_async_recorded(&self, _size: usize, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the CUDA build's `threaded_chains`.
    pub fn threaded_chains(&self, _threads: usize, _shared: bool, _ops: u64) -> Result<Duration> {
        match *self {}
    }

    /// See the CUDA build's `add_thread_graphs`.
    pub fn add_thread_graphs(&mut self, _threads: usize) -> Result<()> {
        match *self {}
    }

    /// See the CUDA build's `threaded_graph_chains`.
    pub fn threaded_graph_chains(&self, _threads: usize, _shared: bool, _ops: u64) -> Result<Duration> {
        match *self {}
    }
}
