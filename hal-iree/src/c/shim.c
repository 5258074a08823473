// The parts of IREE's runtime that Rust cannot reach through the bindings: inline helpers, and the
// local-executable header (not bound), which the cpu-sim dispatch path calls once per workgroup.

#include <stdint.h>
#include <string.h>

#include "iree/async/semaphore.h"
#include "iree/hal/api.h"
#include "iree/hal/local/executable_library.h"
#include "iree/hal/local/local_executable.h"

void thal_iree_resource_initialize(const void* vtable, iree_hal_resource_t* resource) {
  iree_hal_resource_initialize(vtable, resource);
}

iree_status_t thal_iree_make_status(iree_status_code_t code, const char* message, size_t length) {
  return iree_make_status(code, "%.*s", (int)length, message);
}

iree_status_t thal_iree_async_semaphore_layout(iree_host_size_t base_size, iree_host_size_t* out_frontier_offset,
                                               iree_host_size_t* out_total_size) {
  return iree_async_semaphore_layout(base_size, 0, out_frontier_offset, out_total_size);
}

uint64_t thal_iree_failure_value(iree_status_t status) { return iree_hal_status_as_semaphore_failure(status); }

// What a dispatch of export `ordinal` needs to know before it runs: its ABI counts and the bytes of
// workgroup-local memory its static declaration asks for.
typedef struct {
  uint32_t constant_count;
  uint32_t binding_count;
  uint32_t local_memory_bytes;
} thal_iree_export_info_t;

iree_status_t thal_iree_export_info(iree_hal_executable_t* executable, uint32_t ordinal,
                                    thal_iree_export_info_t* out_info) {
  iree_hal_local_executable_t* local = (iree_hal_local_executable_t*)executable;
  if (ordinal >= local->export_count) {
    return iree_make_status(IREE_STATUS_OUT_OF_RANGE, "export %u of an executable with %u exports", ordinal,
                            (uint32_t)local->export_count);
  }
  memset(out_info, 0, sizeof(*out_info));
  if (local->dispatch_attrs) {
    const iree_hal_executable_dispatch_attrs_v0_t* attrs = &local->dispatch_attrs[ordinal];
    out_info->constant_count = attrs->constant_count;
    out_info->binding_count = attrs->binding_count;
    out_info->local_memory_bytes = attrs->local_memory_pages * IREE_HAL_EXECUTABLE_WORKGROUP_LOCAL_MEMORY_PAGE_SIZE;
  }
  return iree_ok_status();
}

uint32_t thal_iree_export_count(iree_hal_executable_t* executable) {
  return (uint32_t)((iree_hal_local_executable_t*)executable)->export_count;
}

// One workgroup of a dispatch: the state IREE's CPU executables read, then the call.
typedef struct {
  uint32_t workgroup_size[3];
  uint32_t workgroup_count[3];
  uint32_t workgroup_id[3];
  const uint32_t* constants;
  uint32_t constant_count;
  void* const* binding_ptrs;
  const size_t* binding_lengths;
  uint32_t binding_count;
  void* local_memory;
  uint32_t local_memory_size;
  uint32_t max_concurrency;
  uint32_t worker_id;
} thal_iree_workgroup_t;

iree_status_t thal_iree_run_workgroup(iree_hal_executable_t* executable, uint32_t ordinal,
                                      const thal_iree_workgroup_t* wg) {
  iree_hal_executable_dispatch_state_v0_t dispatch_state;
  memset(&dispatch_state, 0, sizeof(dispatch_state));
  dispatch_state.workgroup_size_x = wg->workgroup_size[0];
  dispatch_state.workgroup_size_y = wg->workgroup_size[1];
  dispatch_state.workgroup_size_z = (uint16_t)wg->workgroup_size[2];
  dispatch_state.workgroup_count_x = wg->workgroup_count[0];
  dispatch_state.workgroup_count_y = wg->workgroup_count[1];
  dispatch_state.workgroup_count_z = (uint16_t)wg->workgroup_count[2];
  dispatch_state.max_concurrency = wg->max_concurrency;
  dispatch_state.constant_count = wg->constant_count;
  dispatch_state.constants = wg->constants;
  dispatch_state.binding_count = wg->binding_count;
  dispatch_state.binding_ptrs = wg->binding_ptrs;
  dispatch_state.binding_lengths = wg->binding_lengths;

  iree_hal_executable_workgroup_state_v0_t workgroup_state;
  memset(&workgroup_state, 0, sizeof(workgroup_state));
  workgroup_state.workgroup_id_x = wg->workgroup_id[0];
  workgroup_state.workgroup_id_y = wg->workgroup_id[1];
  workgroup_state.workgroup_id_z = (uint16_t)wg->workgroup_id[2];
  workgroup_state.processor_id = wg->worker_id;
  workgroup_state.local_memory = wg->local_memory;
  workgroup_state.local_memory_size = wg->local_memory_size;
  return iree_hal_local_executable_issue_call((iree_hal_local_executable_t*)executable, ordinal, &dispatch_state,
                                              &workgroup_state, wg->worker_id);
}

iree_status_code_t thal_iree_status_code(iree_status_t status) { return iree_status_code(status); }

// The status's text as IREE formats it ("CODE; message"), in `buffer` (truncated to fit); gives up
// the status.
void thal_iree_status_consume(iree_status_t status, char* buffer, size_t capacity) {
  iree_host_size_t length = 0;
  if (capacity == 0) {
    iree_status_ignore(status);
    return;
  }
  buffer[0] = 0;
  if (!iree_status_format(status, capacity - 1, buffer, &length)) length = 0;
  buffer[length < capacity ? length : capacity - 1] = 0;
  iree_status_ignore(status);
}


iree_status_t thal_iree_status_clone(iree_status_t status) { return iree_status_clone(status); }

iree_allocator_t thal_iree_system_allocator(void) { return iree_allocator_system(); }

#include "iree/base/internal/arena.h"
#include "iree/hal/utils/deferred_command_buffer.h"

// A block pool for deferred command buffers' arenas (the type is not bound: it lives here).
iree_arena_block_pool_t* thal_iree_block_pool_create(iree_allocator_t host_allocator) {
  iree_arena_block_pool_t* pool = NULL;
  if (!iree_status_is_ok(iree_allocator_malloc(host_allocator, sizeof(*pool), (void**)&pool))) return NULL;
  iree_arena_block_pool_initialize(32 * 1024, host_allocator, pool);
  return pool;
}

void thal_iree_block_pool_destroy(iree_arena_block_pool_t* pool, iree_allocator_t host_allocator) {
  if (!pool) return;
  iree_arena_block_pool_deinitialize(pool);
  iree_allocator_free(host_allocator, pool);
}

// The failure an async semaphore holds (owned by it), or NULL.
iree_status_t thal_iree_semaphore_failure(iree_async_semaphore_t* semaphore) {
  return (iree_status_t)iree_atomic_load(&semaphore->failure_status, iree_memory_order_acquire);
}

#include "iree/hal/utils/file_registry.h"

// A HAL file over an IREE file handle (a host allocation becomes a memory file whose storage is a
// buffer the device allocator imports; a descriptor, a file of the proactor's).
iree_status_t thal_iree_file_from_handle(iree_hal_allocator_t* device_allocator, iree_hal_queue_affinity_t affinity,
                                         iree_hal_memory_access_t access, iree_io_file_handle_t* handle,
                                         iree_async_proactor_t* proactor, iree_allocator_t host_allocator,
                                         iree_hal_file_t** out_file) {
  return iree_hal_file_from_handle(device_allocator, affinity, access, handle, proactor, host_allocator, out_file);
}

#include "iree/hal/memory/slab_provider.h"

// A slab provider whose slabs are the HAL's buffers (`src/queue_pool.rs`): IREE's pools (TLSF,
// fixed-block, pass-through) place queue allocations in them. Each hook calls back into Rust with
// the owner pointer it was created with; `drop_owner` runs once, when the provider is destroyed.
typedef struct {
  iree_status_t (*acquire)(void* owner, iree_device_size_t min_length, iree_hal_slab_t* out_slab);
  void (*release)(void* owner, const iree_hal_slab_t* slab);
  iree_status_t (*wrap)(void* owner, const iree_hal_slab_t* slab, iree_device_size_t offset,
                        iree_device_size_t length, iree_hal_buffer_params_t params,
                        iree_hal_buffer_release_callback_t release_callback, iree_hal_buffer_t** out_buffer);
  void (*properties)(void* owner, iree_hal_memory_type_t* out_memory_type, iree_hal_buffer_usage_t* out_usage);
  void (*drop_owner)(void* owner);
} thal_iree_slab_hooks_t;

typedef struct {
  iree_hal_slab_provider_t base;
  thal_iree_slab_hooks_t hooks;
  void* owner;
  iree_allocator_t host_allocator;
} thal_iree_slab_provider_t;

static thal_iree_slab_provider_t* thal_slab_provider_cast(const iree_hal_slab_provider_t* provider) {
  return (thal_iree_slab_provider_t*)provider;
}

static void thal_slab_provider_destroy(iree_hal_slab_provider_t* base) {
  thal_iree_slab_provider_t* provider = thal_slab_provider_cast(base);
  provider->hooks.drop_owner(provider->owner);
  iree_allocator_free(provider->host_allocator, provider);
}

static iree_status_t thal_slab_provider_acquire(iree_hal_slab_provider_t* base, iree_device_size_t min_length,
                                                iree_hal_slab_t* out_slab) {
  thal_iree_slab_provider_t* provider = thal_slab_provider_cast(base);
  return provider->hooks.acquire(provider->owner, min_length, out_slab);
}

static void thal_slab_provider_release(iree_hal_slab_provider_t* base, const iree_hal_slab_t* slab) {
  thal_iree_slab_provider_t* provider = thal_slab_provider_cast(base);
  provider->hooks.release(provider->owner, slab);
}

static iree_status_t thal_slab_provider_wrap(iree_hal_slab_provider_t* base, const iree_hal_slab_t* slab,
                                             iree_device_size_t offset, iree_device_size_t length,
                                             iree_hal_buffer_params_t params,
                                             iree_hal_buffer_release_callback_t release_callback,
                                             iree_hal_buffer_t** out_buffer) {
  thal_iree_slab_provider_t* provider = thal_slab_provider_cast(base);
  return provider->hooks.wrap(provider->owner, slab, offset, length, params, release_callback, out_buffer);
}

// Slabs are committed when the HAL allocates them: nothing to fault in, nothing cached to trim.
static void thal_slab_provider_prefault(iree_hal_slab_provider_t* base, iree_hal_slab_t* slab) {}
static void thal_slab_provider_trim(iree_hal_slab_provider_t* base, iree_hal_slab_provider_trim_flags_t flags) {}
static void thal_slab_provider_query_stats(const iree_hal_slab_provider_t* base,
                                           iree_hal_slab_provider_visited_set_t* visited,
                                           iree_hal_slab_provider_stats_t* out_stats) {
  iree_hal_slab_provider_visited(visited, base);
}

static void thal_slab_provider_query_properties(const iree_hal_slab_provider_t* base,
                                                iree_hal_memory_type_t* out_memory_type,
                                                iree_hal_buffer_usage_t* out_supported_usage) {
  thal_iree_slab_provider_t* provider = thal_slab_provider_cast(base);
  provider->hooks.properties(provider->owner, out_memory_type, out_supported_usage);
}

static const iree_hal_slab_provider_vtable_t thal_slab_provider_vtable = {
    .destroy = thal_slab_provider_destroy,
    .acquire_slab = thal_slab_provider_acquire,
    .release_slab = thal_slab_provider_release,
    .wrap_buffer = thal_slab_provider_wrap,
    .prefault = thal_slab_provider_prefault,
    .trim = thal_slab_provider_trim,
    .query_stats = thal_slab_provider_query_stats,
    .query_properties = thal_slab_provider_query_properties,
};

// A slab provider over `hooks` and `owner` (one reference, the caller's). On failure `drop_owner`
// has run.
iree_status_t thal_iree_slab_provider_create(const thal_iree_slab_hooks_t* hooks, void* owner,
                                             iree_allocator_t host_allocator,
                                             iree_hal_slab_provider_t** out_provider) {
  *out_provider = NULL;
  thal_iree_slab_provider_t* provider = NULL;
  iree_status_t status = iree_allocator_malloc(host_allocator, sizeof(*provider), (void**)&provider);
  if (!iree_status_is_ok(status)) {
    hooks->drop_owner(owner);
    return status;
  }
  iree_hal_slab_provider_initialize(&thal_slab_provider_vtable, &provider->base);
  provider->hooks = *hooks;
  provider->owner = owner;
  provider->host_allocator = host_allocator;
  *out_provider = &provider->base;
  return iree_ok_status();
}

void thal_iree_slab_provider_release(iree_hal_slab_provider_t* provider) {
  iree_hal_slab_provider_release(provider);
}

