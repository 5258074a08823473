//! IREE's queue pools on a thal device (cpu-sim), through IREE's own API: the backend exists for
//! each of the device's queues and for none past them; a pool block freed by one queue's dealloca
//! and reused by another queue is not handed over before that dealloca ran; without the caller's
//! leave to wait, such a block is `RESOURCE_EXHAUSTED` and stays in the pool; on one queue, reuse
//! follows the queue's order without that leave; a dealloca's signals never wait for an earlier
//! dealloca of its queue.

mod common;

use std::ptr::null_mut;

use common::iree_device::{Opened, open, query, release, semaphore, timeout, with_lists};
use hal::StatusCode;
use hal_iree::eerie_sys::runtime as sys;

/// `iree_hal_memory_fixed_block_allocator_options_t` (not in the bindings).
#[repr(C)]
struct FixedBlockOptions {
    block_size: u64,
    block_count: u32,
    frontier_capacity: u16,
}

/// `iree_hal_fixed_block_pool_options_t` (not in the bindings).
#[repr(C)]
struct FixedBlockPoolOptions {
    block_allocator_options: FixedBlockOptions,
    budget_limit: u64,
    trace_name: sys::iree_string_view_t,
}

unsafe extern "C" {
    fn iree_hal_fixed_block_pool_create(
        options: FixedBlockPoolOptions,
        slab_provider: *mut sys::iree_hal_slab_provider_t,
        notification: *mut sys::iree_async_notification_t,
        epoch_query: sys::iree_hal_pool_epoch_query_t,
        host_allocator: sys::iree_allocator_t,
        out_pool: *mut *mut sys::iree_hal_pool_t,
    ) -> sys::iree_status_t;
}

const BLOCK: u64 = 4096;
const ALLOW_WAIT: u64 = sys::iree_hal_alloca_flag_bits_t_IREE_HAL_ALLOCA_FLAG_ALLOW_POOL_WAIT_FRONTIER as u64;

/// A cpu-sim device in a device group (queue pools need one), and the group's frontier tracker.
struct Grouped {
    opened: Opened,
    group: *mut sys::iree_hal_device_group_t,
    tracker: *mut sys::iree_async_frontier_tracker_t,
}

impl Drop for Grouped {
    fn drop(&mut self) {
        // SAFETY: the test's own references.
        unsafe {
            sys::iree_hal_device_group_release(self.group);
            sys::iree_async_frontier_tracker_release(self.tracker);
        }
    }
}

fn grouped() -> Grouped {
    let opened = open("thal-cpu-sim");
    let (mut tracker, mut group) = (null_mut(), null_mut());
    let options =
        sys::iree_async_frontier_tracker_options_t { axis_table_capacity: 64, session_epoch: 1, machine_index: 0 };
    // SAFETY: IREE's creation functions with writable outputs and the live device.
    unsafe {
        hal_iree::check(sys::iree_async_frontier_tracker_create(options, hal_iree::system_allocator(), &mut tracker))
            .expect("a frontier tracker");
        hal_iree::check(sys::iree_hal_device_group_create_from_device(
            opened.device,
            tracker,
            hal_iree::system_allocator(),
            &mut group,
        ))
        .expect("a device group");
    }
    Grouped { opened, group, tracker }
}

fn backend(device: &Grouped, affinity: u64) -> Result<sys::iree_hal_queue_pool_backend_t, hal::Error> {
    let mut backend = sys::iree_hal_queue_pool_backend_t::default();
    // SAFETY: a live device and a writable output.
    unsafe {
        hal_iree::check(sys::iree_hal_device_query_queue_pool_backend(device.opened.device, affinity, &mut backend))
    }
    .map(|()| backend)
}

/// A pool of one block of [`BLOCK`] bytes with no epoch query (reuse is decided by frontiers alone).
fn one_block_pool(device: &Grouped) -> *mut sys::iree_hal_pool_t {
    block_pool(device, 1)
}

/// A pool of `blocks` blocks of [`BLOCK`] bytes with no epoch query.
fn block_pool(device: &Grouped, blocks: u32) -> *mut sys::iree_hal_pool_t {
    let backend = backend(device, 1).expect("queue 0 has a pool backend");
    let options = FixedBlockPoolOptions {
        block_allocator_options: FixedBlockOptions { block_size: BLOCK, block_count: blocks, frontier_capacity: 2 },
        budget_limit: 0,
        trace_name: sys::iree_string_view_t { data: std::ptr::null(), size: 0 },
    };
    let mut pool = null_mut();
    let no_query = sys::iree_hal_pool_epoch_query_t { fn_: None, user_data: null_mut() };
    // SAFETY: the device's live backend objects and a writable output.
    unsafe {
        hal_iree::check(iree_hal_fixed_block_pool_create(
            options,
            backend.slab_provider,
            backend.notification,
            no_query,
            hal_iree::system_allocator(),
            &mut pool,
        ))
    }
    .expect("a fixed-block pool");
    pool
}

fn params() -> sys::iree_hal_buffer_params_t {
    sys::iree_hal_buffer_params_t {
        usage: sys::iree_hal_buffer_usage_bits_t_IREE_HAL_BUFFER_USAGE_TRANSFER
            | sys::iree_hal_buffer_usage_bits_t_IREE_HAL_BUFFER_USAGE_DISPATCH_STORAGE
            | sys::iree_hal_buffer_usage_bits_t_IREE_HAL_BUFFER_USAGE_MAPPING_SCOPED,
        access: sys::iree_hal_memory_access_bits_t_IREE_HAL_MEMORY_ACCESS_ALL as u16,
        type_: sys::iree_hal_memory_type_bits_t_IREE_HAL_MEMORY_TYPE_DEVICE_LOCAL,
        ..Default::default()
    }
}

/// `queue_alloca` of one block on `queue` from `pool`, signalling `signal` = 1 when usable.
fn alloca(
    device: &Grouped,
    queue: u32,
    pool: *mut sys::iree_hal_pool_t,
    flags: u64,
    signal: *mut sys::iree_hal_semaphore_t,
) -> Result<*mut sys::iree_hal_buffer_t, hal::Error> {
    let mut buffer = null_mut();
    let empty = sys::iree_hal_semaphore_list_t { count: 0, semaphores: null_mut(), payload_values: null_mut() };
    let (mut s, mut v) = ([signal], [1u64]);
    let signals = common::iree_device::list(&mut s, &mut v);
    // SAFETY: a live device, pool and semaphore lists; a writable output.
    let status = unsafe {
        sys::iree_hal_device_queue_alloca(
            device.opened.device,
            1u64 << queue,
            empty,
            signals,
            pool,
            params(),
            BLOCK as usize,
            flags,
            &mut buffer,
        )
    };
    // SAFETY: the call's status, ours to give up.
    unsafe { hal_iree::check(status) }.map(|()| buffer)
}

/// `queue_dealloca` of `buffer` on `queue` once `gate` reaches 1, signalling `done` = 1.
fn dealloca(
    device: &Grouped,
    queue: u32,
    buffer: *mut sys::iree_hal_buffer_t,
    gate: *mut sys::iree_hal_semaphore_t,
    done: *mut sys::iree_hal_semaphore_t,
) {
    with_lists((gate, 1), (done, 1), |waits, signals| {
        // SAFETY: a live device, buffer and lists.
        unsafe { sys::iree_hal_device_queue_dealloca(device.opened.device, 1u64 << queue, waits, signals, buffer, 0) }
    })
    .expect("the dealloca is submitted");
}

fn wait(semaphore: *mut sys::iree_hal_semaphore_t, ms: i64) -> Result<(), hal::Error> {
    // SAFETY: a live semaphore.
    unsafe { hal_iree::check(sys::iree_hal_semaphore_wait(semaphore, 1, timeout(ms), 0)) }
}

fn signal(semaphore: *mut sys::iree_hal_semaphore_t) {
    // SAFETY: a live semaphore.
    unsafe { hal_iree::check(sys::iree_hal_semaphore_signal(semaphore, 1, std::ptr::null())) }.expect("a host signal");
}

fn release_buffer(buffer: *mut sys::iree_hal_buffer_t) {
    // SAFETY: the test's own reference.
    unsafe { sys::iree_hal_buffer_release(buffer) };
}

/// Writes `value` over the first word of `buffer` on `queue` after `after` and reads it back.
fn fill_and_read(
    device: &Grouped,
    queue: u32,
    buffer: *mut sys::iree_hal_buffer_t,
    after: *mut sys::iree_hal_semaphore_t,
    value: u32,
) -> u32 {
    let filled = semaphore(&device.opened, 0);
    with_lists((after, 1), (filled, 1), |waits, signals| {
        // SAFETY: a live device, buffer and lists; the pattern outlives the call (copied).
        unsafe {
            sys::iree_hal_device_queue_fill(
                device.opened.device,
                1u64 << queue,
                waits,
                signals,
                buffer,
                0,
                4,
                (&raw const value).cast(),
                4,
                0,
            )
        }
    })
    .expect("the fill is submitted");
    wait(filled, 10_000).expect("the fill ran");
    let mut read = 0u32;
    // SAFETY: a live, host-mappable buffer (cpu-sim's memory) of at least 4 bytes.
    unsafe { hal_iree::check(sys::iree_hal_buffer_map_read(buffer, 0, (&raw mut read).cast(), 4)) }
        .expect("the buffer maps");
    release(&[filled]);
    read
}

#[test]
fn the_backend_exists_for_each_queue_and_none_past_them() {
    let device = grouped();
    for queue in 0..4 {
        let backend = backend(&device, 1u64 << queue).expect("a cpu-sim queue has a pool backend");
        assert!(!backend.slab_provider.is_null() && !backend.notification.is_null());
        assert!(backend.epoch_query.fn_.is_some());
    }
    for affinity in [1u64 << 4, 1u64 << 40, 0] {
        let error = backend(&device, affinity).expect_err("no queue there");
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
        assert!(error.message().contains(&format!("{affinity:#x}")), "{error}");
    }
}

#[test]
fn a_block_reused_on_another_queue_is_handed_over_after_its_dealloca_ran() {
    let device = grouped();
    let pool = one_block_pool(&device);
    let [first, gate, freed, second] = [0; 4].map(|_| semaphore(&device.opened, 0));
    let buffer = alloca(&device, 0, pool, 0, first).expect("the pool's block");
    wait(first, 10_000).expect("the first alloca ran");
    assert_eq!(fill_and_read(&device, 0, buffer, first, 0x1111_1111), 0x1111_1111);
    // Freed on queue 0 once `gate` is signalled: until then, queue 0's work may still use it.
    dealloca(&device, 0, buffer, gate, freed);
    release_buffer(buffer);
    let reused = alloca(&device, 1, pool, ALLOW_WAIT, second).expect("the block, with a wait for its dealloca");
    let early = wait(second, 100).expect_err("handed over before its dealloca ran");
    assert_eq!(early.code(), StatusCode::DeadlineExceeded, "{early}");
    assert_eq!(query(second).expect("a live semaphore"), 0);
    signal(gate);
    wait(freed, 10_000).expect("the dealloca ran");
    wait(second, 10_000).expect("the second alloca ran after it");
    assert_eq!(fill_and_read(&device, 1, reused, second, 0x2222_2222), 0x2222_2222);
    release_buffer(reused);
    release(&[first, gate, freed, second]);
    // SAFETY: the test's pool, no reservation left (the second buffer was never deallocated: its
    // destruction gave the block back).
    unsafe { sys::iree_hal_pool_release(pool) };
}

#[test]
fn without_leave_to_wait_a_block_in_use_elsewhere_is_resource_exhausted_and_stays_in_the_pool() {
    let device = grouped();
    let pool = one_block_pool(&device);
    let [first, gate, freed, refused, second] = [0; 5].map(|_| semaphore(&device.opened, 0));
    let buffer = alloca(&device, 0, pool, 0, first).expect("the pool's block");
    dealloca(&device, 0, buffer, gate, freed);
    release_buffer(buffer);
    let error = alloca(&device, 2, pool, 0, refused).expect_err("a wait the caller did not allow");
    assert_eq!(error.code(), StatusCode::ResourceExhausted, "{error}");
    assert!(error.message().contains("ALLOW_POOL_WAIT_FRONTIER"), "{error}");
    assert_eq!(query(refused).expect("a live semaphore"), 0);
    // The refused reservation went back: the block is there for a caller that may wait.
    let reused = alloca(&device, 2, pool, ALLOW_WAIT, second).expect("the block is still in the pool");
    signal(gate);
    wait(second, 10_000).expect("the alloca ran after the dealloca");
    release_buffer(reused);
    release(&[first, gate, freed, refused, second]);
    // SAFETY: the test's pool.
    unsafe { sys::iree_hal_pool_release(pool) };
}

#[test]
fn on_one_queue_reuse_follows_the_queue_order_without_leave_to_wait() {
    let device = grouped();
    let pool = one_block_pool(&device);
    let [first, gate, freed, second] = [0; 4].map(|_| semaphore(&device.opened, 0));
    let buffer = alloca(&device, 3, pool, 0, first).expect("the pool's block");
    dealloca(&device, 3, buffer, gate, freed);
    release_buffer(buffer);
    let reused = alloca(&device, 3, pool, 0, second).expect("the same queue's block, in its order");
    let early = wait(second, 100).expect_err("ran ahead of the queue's dealloca");
    assert_eq!(early.code(), StatusCode::DeadlineExceeded, "{early}");
    signal(gate);
    wait(second, 10_000).expect("the alloca ran after the dealloca");
    assert_eq!(fill_and_read(&device, 3, reused, second, 0x3333_3333), 0x3333_3333);
    release_buffer(reused);
    release(&[first, gate, freed, second]);
    // SAFETY: the test's pool.
    unsafe { sys::iree_hal_pool_release(pool) };
}

#[test]
fn a_dealloca_behind_a_held_one_of_its_queue_still_signals() {
    let device = grouped();
    let pool = block_pool(&device, 2);
    let [first, second, gate, open, freed_first, freed_second] = [0; 6].map(|_| semaphore(&device.opened, 0));
    let a = alloca(&device, 0, pool, 0, first).expect("a block");
    let b = alloca(&device, 0, pool, 0, second).expect("another block");
    wait(first, 10_000).expect("the first alloca ran");
    wait(second, 10_000).expect("the second alloca ran");
    signal(open);
    // The first dealloca waits for `gate`; the second, on the same queue, for nothing.
    dealloca(&device, 0, a, gate, freed_first);
    dealloca(&device, 0, b, open, freed_second);
    wait(freed_second, 10_000).expect("the second dealloca's signal does not wait for the first dealloca");
    assert_eq!(query(freed_first).expect("a live semaphore"), 0);
    signal(gate);
    wait(freed_first, 10_000).expect("the first dealloca ran");
    release_buffer(a);
    release_buffer(b);
    release(&[first, second, gate, open, freed_first, freed_second]);
    // SAFETY: the test's pool.
    unsafe { sys::iree_hal_pool_release(pool) };
}
