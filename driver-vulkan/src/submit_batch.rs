//! Submissions a stream's submit thread has built but not yet handed to `vkQueueSubmit`: while
//! more items wait in its queue, the thread gathers them (up to [`SUBMIT_BATCH_ENV`]) into one
//! call. One call each bound a dependent chain on NVIDIA's driver (the submit thread spent about
//! 8 us a submission inside it); gathering halved the time per submission on an H200.
//!
//! A value is *issued* (other streams may submit waits on it) only once its call returned, so the
//! thread hands the gathered batch over before anything that could block: waiting for another
//! stream's value to be issued (that stream may be waiting for one of ours), waiting on the host
//! for a value, host-side work, and sleeping for new items.

use std::sync::Arc;
use std::time::Instant;

use ash::vk;
use hal::{Error, Result};
use smallvec::SmallVec;

use crate::error::from_vk;
use crate::interop::external::Point;
use crate::stream::{Item, StreamShared, SubmitList};

/// Items one `vkQueueSubmit` takes at most (default [`DEFAULT_SUBMIT_BATCH`]; `1`: one call per
/// item).
pub const SUBMIT_BATCH_ENV: &str = "HAL_VULKAN_SUBMIT_BATCH";

/// The default of [`SUBMIT_BATCH_ENV`]; batches this size need no heap allocation.
pub const DEFAULT_SUBMIT_BATCH: usize = 16;

/// One submission's arrays, owned until the call.
pub(crate) struct Entry {
    pub(crate) waits: SubmitList<vk::Semaphore>,
    pub(crate) wait_values: SubmitList<u64>,
    pub(crate) stages: SubmitList<vk::PipelineStageFlags>,
    pub(crate) signals: SubmitList<vk::Semaphore>,
    pub(crate) signal_values: SubmitList<u64>,
    pub(crate) cmd: Option<vk::CommandBuffer>,
    /// An embedder's value it signals, settled once submitted.
    pub(crate) external_signal: Option<Arc<Point>>,
    /// The work whose `in_flight` entry goes if the call fails.
    pub(crate) in_flight: Option<u64>,
    /// The item it submits, kept to fail it if the call fails (set by the submit thread once the
    /// item's issue returned).
    pub(crate) item: Option<Item>,
    pub(crate) value: u64,
}

/// The gathered submissions of one stream, in stream order.
pub(crate) struct Batch {
    entries: Vec<Entry>,
    limit: usize,
}

impl Batch {
    /// An empty batch of at most `limit` items (at least one).
    pub(crate) fn new(limit: usize) -> Batch {
        let limit = limit.max(1);
        Batch { entries: Vec::with_capacity(limit), limit }
    }

    /// Adds a built submission.
    pub(crate) fn push(&mut self, entry: Entry) {
        self.entries.push(entry);
    }

    /// Hands the item to the entry its issue just added: whether there was one (otherwise its
    /// issue finished it on the host).
    pub(crate) fn attach(&mut self, item: Item) -> std::result::Result<(), Item> {
        match self.entries.last_mut() {
            Some(entry) if entry.value == item.value && entry.item.is_none() => {
                entry.item = Some(item);
                Ok(())
            }
            _ => Err(item),
        }
    }

    /// Whether nothing is gathered.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether it holds as many items as one call takes.
    pub(crate) fn is_full(&self) -> bool {
        self.entries.len() >= self.limit
    }

    /// Submits everything gathered in one `vkQueueSubmit`, then marks the values issued. If the
    /// call fails, each item fails as a single submission's failure does (its value is still
    /// reached, from the host, after the ones before it).
    pub(crate) fn flush(&mut self, stream: &StreamShared) {
        if self.entries.is_empty() {
            return;
        }
        let result = self.submit(stream);
        let last = self.entries.last().map_or(0, |entry| entry.value);
        match result {
            Ok(()) => {
                for entry in self.entries.drain(..) {
                    if let Some(point) = &entry.external_signal {
                        point.set_settled();
                    }
                }
                stream.timeline.set_issued(last);
            }
            Err(e) => {
                for entry in self.entries.drain(..) {
                    if let Some(id) = entry.in_flight {
                        // Never submitted: the entry (and its command buffer) can go now.
                        drop(stream.forget_in_flight(id));
                    }
                    match entry.item {
                        Some(item) => crate::stream::fail_item(stream, &item, e.clone()),
                        None => stream.timeline.set_issued(entry.value),
                    }
                }
            }
        }
    }

    fn submit(&self, stream: &StreamShared) -> Result<()> {
        let mut timelines: SmallVec<[vk::TimelineSemaphoreSubmitInfo<'_>; DEFAULT_SUBMIT_BATCH]> = self
            .entries
            .iter()
            .map(|entry| {
                vk::TimelineSemaphoreSubmitInfo::default()
                    .wait_semaphore_values(&entry.wait_values)
                    .signal_semaphore_values(&entry.signal_values)
            })
            .collect();
        let submits: SmallVec<[vk::SubmitInfo<'_>; DEFAULT_SUBMIT_BATCH]> = self
            .entries
            .iter()
            .zip(timelines.iter_mut())
            .map(|(entry, timeline)| {
                vk::SubmitInfo::default()
                    .wait_semaphores(&entry.waits)
                    .wait_dst_stage_mask(&entry.stages)
                    .command_buffers(entry.cmd.as_slice())
                    .signal_semaphores(&entry.signals)
                    .push_next(timeline)
            })
            .collect();
        let asked = Instant::now();
        let queue = stream.lock_queue();
        let started = Instant::now();
        stream.counts().waited_for_queue(started - asked);
        // SAFETY: the queue is locked; every wait's signal was issued before (see the stream
        // module's docs), but an embedder's, which the embedder issues (`crate::interop`); each
        // command buffer is recorded and its resources are held in `in_flight` until completion;
        // the arrays the infos point at live in `self.entries` through the call.
        let result = unsafe { stream.gpu.device.queue_submit(*queue, &submits, vk::Fence::null()) };
        stream.counts().submitted(started.elapsed());
        drop(queue);
        result.map_err(|e| from_vk("vkQueueSubmit", e))
    }
}

/// [`SUBMIT_BATCH_ENV`]'s value; `InvalidArgument` naming one that is not a count of at least 1.
pub(crate) fn limit_from_env() -> Result<usize> {
    match std::env::var(SUBMIT_BATCH_ENV) {
        Err(_) => Ok(DEFAULT_SUBMIT_BATCH),
        Ok(text) if text.trim().is_empty() => Ok(DEFAULT_SUBMIT_BATCH),
        Ok(text) => match text.trim().parse::<usize>() {
            Ok(limit) if limit >= 1 => Ok(limit),
            _ => Err(Error::invalid_argument(format!(
                "vulkan: {SUBMIT_BATCH_ENV}='{text}' is not a number of submissions of at least 1"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(value: u64) -> Entry {
        Entry {
            waits: SubmitList::new(),
            wait_values: SubmitList::new(),
            stages: SubmitList::new(),
            signals: SubmitList::new(),
            signal_values: SubmitList::new(),
            cmd: None,
            external_signal: None,
            in_flight: None,
            item: None,
            value,
        }
    }

    #[test]
    fn an_item_attaches_only_to_the_entry_its_issue_added() {
        let mut batch = Batch::new(2);
        assert!(batch.is_empty());
        // Nothing gathered: the item finished on the host.
        assert!(batch.attach(Item::for_test(4)).is_err());
        batch.push(entry(5));
        assert!(batch.attach(Item::for_test(5)).is_ok());
        // Its entry has its item already, and a later item's issue added nothing.
        assert!(batch.attach(Item::for_test(6)).is_err());
        assert!(!batch.is_full());
        batch.push(entry(6));
        assert!(batch.is_full());
    }

    #[test]
    fn the_limit_is_at_least_one() {
        assert!(!Batch::new(0).is_full());
        let mut one = Batch::new(0);
        one.push(entry(1));
        assert!(one.is_full());
    }

    #[test]
    fn the_limit_reads_a_count_and_names_a_bad_value() {
        // SAFETY: this test alone uses this variable.
        unsafe { std::env::set_var(SUBMIT_BATCH_ENV, "4") };
        assert_eq!(limit_from_env().unwrap(), 4);
        for bad in ["0", "many"] {
            // SAFETY: as above.
            unsafe { std::env::set_var(SUBMIT_BATCH_ENV, bad) };
            let e = limit_from_env().unwrap_err();
            assert!(e.to_string().contains(&format!("{SUBMIT_BATCH_ENV}='{bad}'")), "{e}");
        }
        // SAFETY: as above.
        unsafe { std::env::remove_var(SUBMIT_BATCH_ENV) };
        assert_eq!(limit_from_env().unwrap(), DEFAULT_SUBMIT_BATCH);
    }
}
