//! The handle table: a C handle is an integer naming a slot of its kind's table and the slot's
//! generation when the handle was made, so that a released, stale or forged handle is refused
//! whatever the allocator does with freed memory.
//!
//! A handle packs, from the low bits up: the slot index, the generation, the kind and (on 64-bit
//! targets) a magic nibble that makes an arbitrary integer unlikely to pass for a handle. The slots
//! live in chunks that double in size and are allocated once, when first needed, and never move.
//! Each slot holds the object as an `Arc`, the C reference count and the generation behind its own
//! mutex: a lookup locks only the slot it names, so calls on different handles never wait on each
//! other, and it hands out an `Arc` clone that keeps the object alive through the call even if
//! another thread drops the last C reference meanwhile. Only creating a handle and dropping the
//! last reference take the table's free-slot lock. The last release bumps the generation, so that
//! every handle made before refers to nothing, and queues the slot for reuse, oldest freed first
//! (so that reuse spreads over the free slots and each spends its generations slowly); a slot whose
//! generation would pass the handle's field is retired instead, so a generation never repeats.
//! Objects are dropped after every lock is let go: dropping one may block, or call into the
//! library from this or another thread.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use hal::{Error, Result};

/// Bits of the slot index.
const INDEX_BITS: u32 = if usize::BITS >= 64 { 24 } else { 16 };
/// Bits of the kind; kind 0 is none.
const KIND_BITS: u32 = 4;
/// Bits of the magic nibble (none where pointers are too narrow to spare them).
const MAGIC_BITS: u32 = if usize::BITS >= 64 { 4 } else { 0 };
/// Bits of the generation: 32 on 64-bit targets.
const GENERATION_BITS: u32 = usize::BITS - INDEX_BITS - KIND_BITS - MAGIC_BITS;
/// The magic nibble in place (the top bits of every handle).
const MAGIC_FIELD: usize = if MAGIC_BITS == 0 { 0 } else { 0b1010 << (usize::BITS - MAGIC_BITS) };
/// The magic nibble's bits.
const MAGIC_MASK: usize = if MAGIC_BITS == 0 { 0 } else { !0 << (usize::BITS - MAGIC_BITS) };

/// Slots one table can hold.
const MAX_SLOTS: usize = 1 << INDEX_BITS;
/// The largest kind a handle can carry.
const MAX_KIND: u8 = (1 << KIND_BITS) - 1;
/// The last generation a handle can carry; a slot released at it is retired.
const LAST_GENERATION: u64 = (1 << GENERATION_BITS) - 1;

/// log2 of the first chunk's length; each further chunk is twice the one before.
const FIRST_CHUNK_LOG2: u32 = 6;
/// The first chunk's length.
const FIRST_CHUNK: usize = 1 << FIRST_CHUNK_LOG2;
/// Chunks enough for `MAX_SLOTS` slots.
const CHUNKS: usize = ((MAX_SLOTS - 1 + FIRST_CHUNK).ilog2() - FIRST_CHUNK_LOG2 + 1) as usize;

/// The fields a handle packs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Handle {
    index: usize,
    generation: u64,
    kind: u8,
}

impl Handle {
    fn pack(self) -> usize {
        MAGIC_FIELD
            | usize::from(self.kind) << (INDEX_BITS + GENERATION_BITS)
            | (self.generation as usize) << INDEX_BITS
            | self.index
    }

    /// The fields of `value`, if it carries the magic and a kind.
    fn unpack(value: usize) -> Option<Handle> {
        if value & MAGIC_MASK != MAGIC_FIELD {
            return None;
        }
        let field = |shift: u32, bits: u32| (value >> shift) & ((1 << bits) - 1);
        let kind = field(INDEX_BITS + GENERATION_BITS, KIND_BITS) as u8;
        (kind != 0).then(|| Handle {
            index: field(0, INDEX_BITS),
            generation: field(INDEX_BITS, GENERATION_BITS) as u64,
            kind,
        })
    }
}

/// The chunk holding slot `index` and the slot's position in it.
fn position(index: usize) -> (usize, usize) {
    let biased = index + FIRST_CHUNK;
    let log2 = biased.ilog2();
    ((log2 - FIRST_CHUNK_LOG2) as usize, biased - (1 << log2))
}

/// Why a handle value was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A handle whose bits name another kind (which may itself be live, released or never made).
    OtherKind(u8),
    /// A handle of this table whose object was released.
    Released,
    /// No handle this library made has this value.
    NeverMade,
    /// A retain past the largest reference count.
    TooManyReferences,
}

/// A slot's contents, behind its mutex.
struct SlotState<T> {
    /// Bumped by the release that empties the slot; past `LAST_GENERATION` the slot is retired.
    generation: u64,
    /// The C references; 0 when empty.
    refs: usize,
    /// The object, while the slot is live.
    value: Option<Arc<T>>,
}

/// One slot: its own lock, so that lookups of different handles never contend.
struct Slot<T>(Mutex<SlotState<T>>);

impl<T> Slot<T> {
    fn new() -> Self {
        Slot(Mutex::new(SlotState { generation: 0, refs: 0, value: None }))
    }
}

/// Slots ready for reuse, and where the never-used ones start.
struct FreeSlots {
    reusable: VecDeque<usize>,
    fresh: usize,
}

/// Locks `mutex`; nothing panics while holding these locks, so a poisoned one is still consistent.
fn lock<S>(mutex: &Mutex<S>) -> MutexGuard<'_, S> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The handles of one kind of object.
pub(crate) struct Table<T> {
    kind: u8,
    name: &'static str,
    chunks: [OnceLock<Box<[Slot<T>]>>; CHUNKS],
    free: Mutex<FreeSlots>,
}

impl<T> Table<T> {
    /// An empty table of handles of kind `kind` (1 to `MAX_KIND`) named `name` in messages.
    pub(crate) const fn new(kind: u8, name: &'static str) -> Self {
        assert!(kind != 0 && kind <= MAX_KIND, "kinds are 1 to MAX_KIND");
        Table {
            kind,
            name,
            chunks: [const { OnceLock::new() }; CHUNKS],
            free: Mutex::new(FreeSlots { reusable: VecDeque::new(), fresh: 0 }),
        }
    }

    /// The C type name of this table's handles.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// A new handle to `value` with one reference; `RESOURCE_EXHAUSTED` when every slot is live or
    /// retired.
    pub(crate) fn insert(&self, value: Arc<T>) -> Result<usize> {
        let Some(index) = self.take_free_slot() else {
            return Err(Error::resource_exhausted(format!("{}: all {MAX_SLOTS} handles are in use", self.name)));
        };
        let (chunk, at) = position(index);
        let slot = &self.chunks[chunk].get().expect("a slot handed out lies in an allocated chunk")[at];
        let mut state = lock(&slot.0);
        state.refs = 1;
        state.value = Some(value);
        Ok(Handle { index, generation: state.generation, kind: self.kind }.pack())
    }

    /// A reusable slot, or the next never-used one (allocating its chunk if needed).
    fn take_free_slot(&self) -> Option<usize> {
        let mut free = lock(&self.free);
        if let Some(index) = free.reusable.pop_front() {
            return Some(index);
        }
        let index = free.fresh;
        if index == MAX_SLOTS {
            return None;
        }
        let (chunk, _) = position(index);
        self.chunks[chunk].get_or_init(|| (0..FIRST_CHUNK << chunk).map(|_| Slot::new()).collect());
        free.fresh += 1;
        Some(index)
    }

    /// The slot `value` names and the generation it carries.
    fn slot(&self, value: usize) -> Result<(&Slot<T>, Handle), Refused> {
        let handle = Handle::unpack(value).ok_or(Refused::NeverMade)?;
        if handle.kind != self.kind {
            return Err(Refused::OtherKind(handle.kind));
        }
        let (chunk, at) = position(handle.index);
        let slot = self.chunks[chunk].get().and_then(|slots| slots.get(at)).ok_or(Refused::NeverMade)?;
        Ok((slot, handle))
    }

    /// Runs `body` on the slot `value` names if `value` is its live handle.
    fn with_live<R>(
        &self,
        value: usize,
        body: impl FnOnce(&mut SlotState<T>, Handle) -> Result<R, Refused>,
    ) -> Result<R, Refused> {
        let (slot, handle) = self.slot(value)?;
        let mut state = lock(&slot.0);
        match state.value {
            Some(_) if state.generation == handle.generation => body(&mut state, handle),
            // Every generation below the slot's was handed out and then released.
            _ if handle.generation < state.generation => Err(Refused::Released),
            _ => Err(Refused::NeverMade),
        }
    }

    /// The object `value` is a live handle to, kept alive by the returned clone.
    pub(crate) fn get(&self, value: usize) -> Result<Arc<T>, Refused> {
        self.with_live(value, |state, _| state.value.clone().ok_or(Refused::NeverMade))
    }

    /// Whether `value` is a live handle of this table.
    pub(crate) fn check(&self, value: usize) -> Result<(), Refused> {
        self.with_live(value, |_, _| Ok(()))
    }

    /// Adds a C reference to the live handle `value`.
    pub(crate) fn retain(&self, value: usize) -> Result<(), Refused> {
        self.with_live(value, |state, _| {
            state.refs = state.refs.checked_add(1).ok_or(Refused::TooManyReferences)?;
            Ok(())
        })
    }

    /// Drops a C reference to the live handle `value`; the last one empties the slot, refuses the
    /// handle from then on and drops the table's `Arc` of the object (after every lock is let go).
    pub(crate) fn release(&self, value: usize) -> Result<(), Refused> {
        let emptied = self.with_live(value, |state, handle| {
            state.refs -= 1;
            if state.refs > 0 {
                return Ok(None);
            }
            state.generation += 1;
            let retired = state.generation > LAST_GENERATION;
            Ok(Some((state.value.take(), handle.index, retired)))
        })?;
        if let Some((object, index, retired)) = emptied {
            if !retired {
                lock(&self.free).reusable.push_back(index);
            }
            drop(object);
        }
        Ok(())
    }

    /// Sets the generation of slot `index`, which must be empty (to reach the retirement quickly).
    #[cfg(test)]
    fn set_generation(&self, index: usize, generation: u64) {
        let (chunk, at) = position(index);
        let mut state = lock(&self.chunks[chunk].get().expect("an allocated slot")[at].0);
        assert!(state.value.is_none(), "only an empty slot's generation is set");
        state.generation = generation;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn fields(value: usize) -> Handle {
        Handle::unpack(value).expect("a handle")
    }

    #[test]
    fn handles_round_trip_through_their_fields() {
        let handle = Handle { index: MAX_SLOTS - 1, generation: LAST_GENERATION, kind: MAX_KIND };
        assert_eq!(Handle::unpack(handle.pack()), Some(handle));
        let first = Handle { index: 0, generation: 0, kind: 1 };
        assert_ne!(first.pack(), 0);
        assert_eq!(Handle::unpack(first.pack()), Some(first));
        assert_eq!(Handle::unpack(0), None);
        assert_eq!(Handle::unpack(first.pack() & !MAGIC_MASK & !(0xf << (INDEX_BITS + GENERATION_BITS))), None);
    }

    #[test]
    fn chunk_positions_cover_every_index_once() {
        assert_eq!(position(0), (0, 0));
        assert_eq!(position(FIRST_CHUNK - 1), (0, FIRST_CHUNK - 1));
        assert_eq!(position(FIRST_CHUNK), (1, 0));
        assert_eq!(position(3 * FIRST_CHUNK - 1), (1, 2 * FIRST_CHUNK - 1));
        assert_eq!(position(3 * FIRST_CHUNK), (2, 0));
        let (last, at) = position(MAX_SLOTS - 1);
        assert_eq!(last, CHUNKS - 1);
        assert!(at < FIRST_CHUNK << last);
    }

    #[test]
    fn a_reused_slot_gets_a_new_generation_and_refuses_the_stale_handle() {
        let table = Table::new(3, "test_t");
        let stale = table.insert(Arc::new(1)).unwrap();
        table.release(stale).unwrap();
        let fresh = table.insert(Arc::new(2)).unwrap();
        assert_eq!(fields(stale).index, fields(fresh).index, "the freed slot is reused");
        assert_eq!(fields(fresh).generation, fields(stale).generation + 1);
        assert_eq!(table.get(stale), Err(Refused::Released));
        assert_eq!(table.retain(stale), Err(Refused::Released));
        assert_eq!(table.release(stale), Err(Refused::Released));
        assert_eq!(*table.get(fresh).unwrap(), 2);
        // The stale release took no reference from the new object: one release empties it.
        table.release(fresh).unwrap();
        assert_eq!(table.get(fresh), Err(Refused::Released));
    }

    #[test]
    fn forged_values_are_refused() {
        let table = Table::new(3, "test_t");
        let live = table.insert(Arc::new(1)).unwrap();
        assert_eq!(table.get(0), Err(Refused::NeverMade));
        assert_eq!(table.get(0x1234), Err(Refused::NeverMade));
        assert_eq!(table.get(live ^ 1), Err(Refused::NeverMade), "a slot never used");
        let ahead = Handle { generation: fields(live).generation + 1, ..fields(live) }.pack();
        assert_eq!(table.get(ahead), Err(Refused::NeverMade), "a generation not reached");
        let far = Handle { index: MAX_SLOTS - 1, ..fields(live) }.pack();
        assert_eq!(table.get(far), Err(Refused::NeverMade), "a chunk never allocated");
        let other = Table::<i32>::new(4, "other_t");
        assert_eq!(other.get(live), Err(Refused::OtherKind(3)));
        assert_eq!(table.check(live), Ok(()));
    }

    #[test]
    fn retain_and_release_count_references() {
        let table = Table::new(3, "test_t");
        let handle = table.insert(Arc::new(1)).unwrap();
        table.retain(handle).unwrap();
        table.retain(handle).unwrap();
        table.release(handle).unwrap();
        table.release(handle).unwrap();
        assert_eq!(*table.get(handle).unwrap(), 1);
        table.release(handle).unwrap();
        assert_eq!(table.release(handle), Err(Refused::Released));
    }

    #[test]
    fn a_slot_whose_generation_would_wrap_is_retired() {
        let table = Table::new(3, "test_t");
        let first = table.insert(Arc::new(1)).unwrap();
        table.release(first).unwrap();
        table.set_generation(fields(first).index, LAST_GENERATION);
        let last = table.insert(Arc::new(2)).unwrap();
        assert_eq!(fields(last), Handle { generation: LAST_GENERATION, ..fields(first) });
        table.release(last).unwrap();
        let next = table.insert(Arc::new(3)).unwrap();
        assert_ne!(fields(next).index, fields(last).index, "the retired slot is not reused");
        for stale in [first, last] {
            assert_eq!(table.get(stale), Err(Refused::Released));
        }
        let wrapped = Handle { generation: 0, ..fields(last) }.pack();
        assert_eq!(table.get(wrapped), Err(Refused::Released));
    }

    #[test]
    fn an_object_is_dropped_outside_the_locks() {
        static TABLE: Table<Reenters> = Table::new(5, "reenters_t");
        static HANDLE: AtomicUsize = AtomicUsize::new(0);
        static DROPPED: AtomicUsize = AtomicUsize::new(0);
        /// Uses its own slot and the free slots from its drop, which would deadlock under a lock.
        struct Reenters {
            nested: bool,
        }
        impl Drop for Reenters {
            fn drop(&mut self) {
                if self.nested {
                    return;
                }
                assert_eq!(TABLE.check(HANDLE.load(Ordering::SeqCst)), Err(Refused::Released));
                let other = TABLE.insert(Arc::new(Reenters { nested: true })).unwrap();
                TABLE.release(other).unwrap();
                DROPPED.fetch_add(1, Ordering::SeqCst);
            }
        }
        let handle = TABLE.insert(Arc::new(Reenters { nested: false })).unwrap();
        HANDLE.store(handle, Ordering::SeqCst);
        TABLE.release(handle).unwrap();
        assert_eq!(DROPPED.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn threads_retain_and_release_one_handle() {
        const THREADS: usize = 8;
        const ROUNDS: usize = 20_000;
        let table = Table::new(3, "test_t");
        let handle = table.insert(Arc::new(7)).unwrap();
        std::thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    for _ in 0..ROUNDS {
                        table.retain(handle).unwrap();
                        assert_eq!(*table.get(handle).unwrap(), 7);
                        table.release(handle).unwrap();
                    }
                });
            }
        });
        assert_eq!(table.with_live(handle, |state, _| Ok(state.refs)), Ok(1));
        table.release(handle).unwrap();
        assert_eq!(table.get(handle), Err(Refused::Released));
    }

    #[test]
    fn threads_create_and_release_without_sharing_a_live_slot() {
        const THREADS: usize = 8;
        const ROUNDS: usize = 5_000;
        let table = Table::new(3, "test_t");
        std::thread::scope(|scope| {
            for thread in 0..THREADS {
                let table = &table;
                scope.spawn(move || {
                    let mut stale = None;
                    for round in 0..ROUNDS {
                        let handle = table.insert(Arc::new((thread, round))).unwrap();
                        if let Some(stale) = stale {
                            assert_eq!(table.get(stale), Err(Refused::Released));
                            assert_eq!(table.release(stale), Err(Refused::Released));
                        }
                        assert_eq!(*table.get(handle).unwrap(), (thread, round));
                        table.release(handle).unwrap();
                        stale = Some(handle);
                    }
                });
            }
        });
        assert!(lock(&table.free).fresh <= THREADS * 2, "released slots are reused");
    }
}
