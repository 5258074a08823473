//! Profiling with timestamp queries. A profiled submission gets a query pool: a timestamp when its
//! commands start and one when they end, and one before and after each selected dispatch (the
//! barrier between commands makes "before" the dispatch's start). Device ticks are put on the host's
//! clock by an anchor: a timestamp written by a tiny submission whose host time is bracketed by the
//! submit call and the fence wait.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;
use hal::Result;

use crate::error::from_vk;
use crate::gpu::Gpu;
use crate::one_shot;

/// A device time (ns) and the host instant it corresponds to.
#[derive(Clone, Copy, Debug)]
pub struct ClockAnchor {
    device_ns: f64,
    host: Instant,
    /// Half the host bracket around the anchor's timestamp.
    pub uncertainty: Duration,
    period_ns: f64,
}

impl ClockAnchor {
    /// Measures an anchor on `gpu`'s first queue.
    pub fn measure(gpu: &Arc<Gpu>) -> Result<ClockAnchor> {
        let pool = QueryPool::new(gpu, 1)?;
        let (before, after) = one_shot::run(gpu, "clock anchor", |cmd| {
            // SAFETY: the command buffer is recording; the pool is ours and holds one query.
            unsafe {
                gpu.device.cmd_reset_query_pool(cmd, pool.pool, 0, 1);
                gpu.device.cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, pool.pool, 0);
            }
        })?;
        let ticks = pool.results(1)?[0];
        let period_ns = f64::from(gpu.physical.limits.timestamp_period);
        let half = (after - before) / 2;
        Ok(ClockAnchor { device_ns: ticks as f64 * period_ns, host: before + half, uncertainty: half, period_ns })
    }

    /// The host instant of device timestamp `ticks`.
    pub fn host_time(&self, ticks: u64) -> Instant {
        let offset = ticks as f64 * self.period_ns - self.device_ns;
        if offset >= 0.0 {
            self.host + Duration::from_nanos(offset as u64)
        } else {
            self.host.checked_sub(Duration::from_nanos((-offset) as u64)).unwrap_or(self.host)
        }
    }
}

/// A query pool of timestamps, destroyed when dropped.
pub struct QueryPool {
    gpu: Arc<Gpu>,
    pub(crate) pool: vk::QueryPool,
}

impl QueryPool {
    /// A pool of `count` timestamp queries.
    pub fn new(gpu: &Arc<Gpu>, count: u32) -> Result<QueryPool> {
        let info = vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(count.max(1));
        // SAFETY: a valid create info; destroyed in `Drop`.
        let pool = unsafe { gpu.device.create_query_pool(&info, None) }.map_err(|e| from_vk("vkCreateQueryPool", e))?;
        Ok(QueryPool { gpu: gpu.clone(), pool })
    }

    /// The first `count` timestamps, in ticks (the submission that wrote them completed).
    pub fn results(&self, count: u32) -> Result<Vec<u64>> {
        let mut out = vec![0u64; count as usize];
        // SAFETY: the queries were written by a completed submission; `out` has `count` slots.
        unsafe {
            self.gpu.device.get_query_pool_results(
                self.pool,
                0,
                &mut out,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(|e| from_vk("vkGetQueryPoolResults", e))?;
        Ok(out)
    }
}

impl Drop for QueryPool {
    fn drop(&mut self) {
        // SAFETY: the submission that used the pool completed before its in-flight entry dropped.
        unsafe { self.gpu.device.destroy_query_pool(self.pool, None) };
    }
}

/// The timestamps of one profiled submission: query 0 and 1 frame the whole submission, then two
/// per selected dispatch, with its command index.
pub struct SubmissionTiming {
    pub(crate) pool: QueryPool,
    pub(crate) dispatches: Vec<usize>,
}

impl SubmissionTiming {
    /// How many queries the pool holds.
    pub fn query_count(&self) -> u32 {
        2 + 2 * self.dispatches.len() as u32
    }
}
