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
//! of all their words completed. A device dropped while a foreign stream still has a use queued
//! (behind work that has not finished) does not wait for it: its pages are freed later, once that
//! use has run ([`outstanding_foreign_uses`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use cudarc::driver::sys::{CUdeviceptr, CUevent, CUevent_flags, CUstream};
use hal::Result;
use hal::driver::{get_mut, lock};

use crate::sys::context::{Bound, Context};
use crate::sys::result;

/// Words per page (one 4 KiB page of pinned memory).
const WORDS_PER_PAGE: usize = 512;

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
    /// A page of words allocated now. Pinned host allocations synchronize the device (work on
    /// the legacy default stream included), so the first page is taken at device creation: a
    /// lease while another library's stream is busy (PyTorch's default stream running) then takes
    /// no page and does not block the host until that stream drains. Only more than a page of
    /// uses in flight at once allocates again.
    pub(crate) fn new(context: &Arc<Context>) -> Result<Arc<WordSlots>> {
        reap_orphans();
        let page = Arc::new(Page::allocate(context, &context.bind()?)?);
        let free = (0..WORDS_PER_PAGE).rev().map(|index| Slot { page: page.clone(), index, ticket: 0 }).collect();
        let state = State { pages: vec![page], free, ..State::default() };
        Ok(Arc::new(WordSlots { context: context.clone(), state: Mutex::new(state) }))
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
        let orphan = Orphan { context: self.context.clone(), _pages: state.pages, pending: state.retiring };
        let Ok(bound) = self.context.bind() else {
            // No context to free anything in: the memory goes with the process.
            std::mem::forget(orphan);
            return;
        };
        for event in state.spare_events {
            // SAFETY: a spare event is owned by this pool, recorded on nothing, destroyed once.
            let _ = unsafe { result::event_destroy(&bound, event) };
        }
        // Not freed here even when no use is pending: freeing pinned memory synchronizes the whole
        // GPU, so a device dropped while another library's stream is busy would wait for it.
        lock(&ORPHANS).push(orphan);
    }
}

/// The pages of dropped devices whose words a foreign stream still has a use of queued (behind
/// work that had not finished when the device was dropped), with the events that say when those
/// uses have run, and the pages of every other dropped device. Each is freed once its events
/// completed: checked whenever a CUDA device is created, and by [`outstanding_foreign_uses`];
/// never on a lease or at a device's drop, since freeing pinned memory synchronizes the whole GPU
/// and would block a submission or a teardown on whatever another library has queued. So dropping
/// a device never waits for a foreign stream, and never frees memory one will still write.
static ORPHANS: Mutex<Vec<Orphan>> = Mutex::new(Vec::new());

/// What a dropped device's words left behind.
struct Orphan {
    context: Arc<Context>,
    /// Held, never read: the pages live until the orphan is dropped.
    _pages: Vec<Arc<Page>>,
    pending: VecDeque<Retiring>,
}

// SAFETY: the CUevents are driver handles owned by the orphan, used only under `ORPHANS`' lock;
// the driver's event functions are thread-safe.
unsafe impl Send for Orphan {}

/// Frees what dropped devices left behind once the foreign uses queued on it have run; the number
/// of uses still queued.
fn reap_orphans() -> usize {
    let mut orphans = lock(&ORPHANS);
    orphans.retain_mut(|orphan| {
        let Ok(bound) = orphan.context.bind() else { return true };
        while let Some(oldest) = orphan.pending.front() {
            // An error (a faulted context) reads as run: nothing will run on it any more.
            if !result::event_query(&bound, oldest.event).unwrap_or(true) {
                break;
            }
            if let Some(retiring) = orphan.pending.pop_front() {
                // SAFETY: owned by the orphan, its recorded use complete, destroyed once.
                let _ = unsafe { result::event_destroy(&bound, retiring.event) };
            }
        }
        // Emptied: dropping it frees its pages (the last references to them).
        !orphan.pending.is_empty()
    });
    orphans.iter().map(|orphan| orphan.pending.len()).sum()
}

/// How many uses of dropped devices' interop words foreign CUDA streams still have queued: their
/// memory stays allocated until those uses have run, and is freed by the first call of this, or
/// the first CUDA device created, after that (a dropped device's pages wait for that too). 0 once every foreign stream that was given a timepoint has
/// passed it.
pub fn outstanding_foreign_uses() -> usize {
    reap_orphans()
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
