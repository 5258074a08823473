//! Words through which a HAL queue's stream and another library's CUDA stream order their work on
//! the device, with no host wait between.
//!
//! A word is 8 bytes of pinned, device-mapped host memory. One side writes a ticket into it
//! (`cuStreamWriteValue64`, after its earlier work), the other waits until the word reaches the
//! ticket (`cuStreamWaitValue64`, `GEQ`). Each word's tickets only grow, and a word is handed out
//! again only once both sides are past their use of it: the HAL side's operation has retired and an
//! event recorded on the foreign stream right after its part has completed. So a late write never
//! moves a word backwards under a newer waiter.
//!
//! Whatever happens to the HAL side (its waits failed, the device is dropped), the lease writes its
//! ticket from the host when it ends: nothing on either stream waits forever on the HAL. The
//! memory outlives every use the foreign stream has queued: pages are freed only once the events
//! of all their words completed; a device dropped while a foreign stream still has a use queued
//! (behind work that never finishes) waits for it a bounded time and then leaves the page
//! allocated rather than free memory a stream will touch (logged).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUdeviceptr, CUevent, CUevent_flags, CUstream};
use hal::Result;
use hal::driver::{get_mut, lock};

use crate::sys::context::{Bound, Context};
use crate::sys::result;

/// Words per page (one 4 KiB page of pinned memory).
const WORDS_PER_PAGE: usize = 512;

/// How long dropping a device waits for foreign streams to pass their queued uses of its words.
const TEARDOWN_WAIT: Duration = Duration::from_secs(2);

/// One page of words.
struct Page {
    host: *mut u64,
    device: CUdeviceptr,
    context: Arc<Context>,
}

// SAFETY: the page is pinned memory owned by this value and freed once, in `Drop`; its words are
// read and written on the host only through atomics.
unsafe impl Send for Page {}
// SAFETY: see `Send`.
unsafe impl Sync for Page {}

impl Page {
    fn allocate(context: &Arc<Context>, bound: &Bound<'_>) -> Result<Page> {
        let flags = cudarc::driver::sys::CU_MEMHOSTALLOC_DEVICEMAP | cudarc::driver::sys::CU_MEMHOSTALLOC_PORTABLE;
        let host = result::mem_host_alloc(bound, WORDS_PER_PAGE * 8, flags)?.cast::<u64>();
        // SAFETY: `WORDS_PER_PAGE` aligned words of pinned memory just allocated, used by nothing yet.
        unsafe { std::ptr::write_bytes(host, 0, WORDS_PER_PAGE) };
        match result::mem_host_get_device_pointer(bound, host.cast()) {
            Ok(device) => Ok(Page { host, device, context: context.clone() }),
            Err(e) => {
                // SAFETY: allocated above, used by nothing yet.
                let _ = unsafe { result::mem_free_host(bound, host.cast()) };
                Err(e.context("a page of interop words"))
            }
        }
    }

    fn word(&self, index: usize) -> &AtomicU64 {
        debug_assert!(index < WORDS_PER_PAGE);
        // SAFETY: `index` is in the page, whose words are 8-byte aligned pinned memory living as
        // long as `self`; the device writes them whole (64-bit stream writes).
        unsafe { AtomicU64::from_ptr(self.host.add(index)) }
    }

    fn device_address(&self, index: usize) -> CUdeviceptr {
        self.device + 8 * index as CUdeviceptr
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        let Ok(bound) = self.context.bind() else { return };
        // SAFETY: freed once, here: every lease of its words ended and every foreign use of them
        // completed (the pool drops a page only then; otherwise it leaks it on purpose).
        if let Err(e) = unsafe { result::mem_free_host(&bound, self.host.cast()) } {
            tracing::debug!(%e, "freeing a page of interop words failed");
        }
    }
}

/// A word and where it is.
struct Slot {
    page: Arc<Page>,
    index: usize,
    /// The last ticket handed out for it.
    ticket: u64,
}

/// A lease whose foreign part may still be queued: its slot is free once `event` completed.
struct Retiring {
    slot: Slot,
    event: CUevent,
}

#[derive(Default)]
struct State {
    pages: Vec<Arc<Page>>,
    free: Vec<Slot>,
    retiring: VecDeque<Retiring>,
    spare_events: Vec<CUevent>,
    /// Every lease not yet ended, for teardown.
    live: Vec<Weak<LeaseCore>>,
}

/// A device's words.
pub(crate) struct WordSlots {
    context: Arc<Context>,
    state: Mutex<State>,
}

// SAFETY: the CUevents are driver handles owned by the state, used under its lock or after being
// taken out of it; the driver's event functions are thread-safe.
unsafe impl Send for WordSlots {}
// SAFETY: see `Send`.
unsafe impl Sync for WordSlots {}

impl WordSlots {
    /// No words yet: the first lease allocates a page.
    pub(crate) fn new(context: &Arc<Context>) -> Arc<WordSlots> {
        Arc::new(WordSlots { context: context.clone(), state: Mutex::new(State::default()) })
    }

    /// A word with a fresh ticket, and an event to record on the foreign stream after its part.
    pub(crate) fn lease(self: &Arc<Self>, bound: &Bound<'_>) -> Result<Lease> {
        let mut state = lock(&self.state);
        self.recycle(bound, &mut state);
        let slot = match state.free.pop() {
            Some(slot) => slot,
            None => {
                let page = Arc::new(Page::allocate(&self.context, bound)?);
                state.pages.push(page.clone());
                state.free.extend((1..WORDS_PER_PAGE).map(|index| Slot { page: page.clone(), index, ticket: 0 }));
                Slot { page, index: 0, ticket: 0 }
            }
        };
        let event = match state.spare_events.pop() {
            Some(event) => event,
            None => match result::event_create(bound, CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) {
                Ok(event) => event,
                Err(e) => {
                    state.free.push(slot);
                    return Err(e.context("an event for an interop word"));
                }
            },
        };
        let core = Arc::new(LeaseCore {
            page: slot.page,
            index: slot.index,
            ticket: slot.ticket + 1,
            released_early: AtomicBool::new(false),
            ended: AtomicBool::new(false),
        });
        state.live.retain(|lease| lease.strong_count() > 0);
        state.live.push(Arc::downgrade(&core));
        Ok(Lease { slots: self.clone(), event, core })
    }

    /// Frees the slots whose foreign use completed, oldest first, stopping at the first that has
    /// not: foreign streams run their parts in about the order the leases ended, and one query per
    /// lease keeps a busy pool from querying every retiring word at every lease (each query takes
    /// a driver lock the submitting threads need).
    fn recycle(&self, bound: &Bound<'_>, state: &mut State) {
        while let Some(oldest) = state.retiring.front() {
            // A fault or an error reads as "not yet": the slot stays out of use, never reused early.
            if !result::event_query(bound, oldest.event).unwrap_or(false) {
                break;
            }
            if let Some(Retiring { slot, event }) = state.retiring.pop_front() {
                state.free.push(slot);
                state.spare_events.push(event);
            }
        }
    }

    /// Dropping the device: writes the ticket of every lease not yet ended, so no HAL stream waits
    /// on a foreign stream that will never write (the scheduler drains the streams next). A lease
    /// whose word had not reached its ticket says so ([`Lease::released_early`]).
    pub(crate) fn release_all(&self) {
        let live: Vec<Arc<LeaseCore>> = lock(&self.state).live.iter().filter_map(Weak::upgrade).collect();
        for core in live {
            if !core.ended.load(Ordering::Acquire) && !core.reached() {
                core.released_early.store(true, Ordering::Release);
                core.write_ticket();
            }
        }
    }
}

impl Drop for WordSlots {
    fn drop(&mut self) {
        let state = std::mem::take(get_mut(&mut self.state));
        let Ok(bound) = self.context.bind() else {
            std::mem::forget(state.pages);
            return;
        };
        let deadline = Instant::now() + TEARDOWN_WAIT;
        let mut pending = state.retiring;
        let mut events = state.spare_events;
        loop {
            // An error (a faulted context) reads as complete: nothing will run on it any more.
            let (done, waiting): (VecDeque<Retiring>, VecDeque<Retiring>) =
                pending.into_iter().partition(|retiring| result::event_query(&bound, retiring.event).unwrap_or(true));
            events.extend(done.into_iter().map(|retiring| retiring.event));
            pending = waiting;
            if pending.is_empty() || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        events.extend(pending.iter().map(|retiring| retiring.event));
        for event in events {
            // SAFETY: each event is owned by this pool and destroyed once; a pending one may still be
            // recorded on a foreign stream, which CUDA allows (it releases it once complete).
            let _ = unsafe { result::event_destroy(&bound, event) };
        }
        if !pending.is_empty() {
            tracing::error!(
                queued = pending.len(),
                "a device was dropped while foreign CUDA streams still had uses of its interop words queued \
                 (behind work that did not finish in {TEARDOWN_WAIT:?}): their pages stay allocated"
            );
            std::mem::forget(state.pages);
        }
    }
}

/// What a lease and the pool's teardown share: the word, its ticket, and how the lease ended.
pub(crate) struct LeaseCore {
    page: Arc<Page>,
    index: usize,
    ticket: u64,
    /// Teardown wrote the ticket before either side did.
    released_early: AtomicBool,
    /// The lease ended (its ticket is written).
    ended: AtomicBool,
}

impl LeaseCore {
    fn reached(&self) -> bool {
        self.page.word(self.index).load(Ordering::Acquire) >= self.ticket
    }

    /// Writes the ticket from the host (the other side's write, if still queued, writes the same).
    fn write_ticket(&self) {
        self.page.word(self.index).fetch_max(self.ticket, Ordering::AcqRel);
    }
}

/// One use of a word: the ticket the writing side writes and the waiting side waits for, and the
/// event recorded on the foreign stream after its part. Ending it (drop) writes the ticket from the
/// host, so a side still waiting is released, and retires the word until the event completes.
pub(crate) struct Lease {
    slots: Arc<WordSlots>,
    event: CUevent,
    core: Arc<LeaseCore>,
}

// SAFETY: the event is a driver handle this lease owns until it hands it back to the pool.
unsafe impl Send for Lease {}
// SAFETY: see `Send`.
unsafe impl Sync for Lease {}

impl Lease {
    /// The word's device address.
    pub(crate) fn address(&self) -> CUdeviceptr {
        self.core.page.device_address(self.core.index)
    }

    /// The ticket of this use.
    pub(crate) fn ticket(&self) -> u64 {
        self.core.ticket
    }

    /// Records the lease's event on `foreign` (after its part there).
    pub(crate) fn record_on(&self, bound: &Bound<'_>, foreign: CUstream) -> Result<()> {
        result::event_record(bound, self.event, foreign)
    }

    /// Whether the word reached the ticket (a side wrote it, or the host did).
    pub(crate) fn reached(&self) -> bool {
        self.core.reached()
    }

    /// Whether teardown released the word before either side wrote it.
    pub(crate) fn released_early(&self) -> bool {
        self.core.released_early.load(Ordering::Acquire)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Release whichever side still waits.
        self.core.write_ticket();
        self.core.ended.store(true, Ordering::Release);
        let slot = Slot { page: self.core.page.clone(), index: self.core.index, ticket: self.core.ticket };
        lock(&self.slots.state).retiring.push_back(Retiring { slot, event: self.event });
    }
}
