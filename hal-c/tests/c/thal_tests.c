/* The C API's tests, written against include/thal.h alone. Usage: thal_tests DRIVER KERNELS TEST|all
 * (KERNELS: kernels.c built as a cpu-sim kernel library, or kernels.cu compiled to a .ptx file for
 * cuda). Exit 0: passed. */
#include "thal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *driver_name;
static const char *kernels_path;
/* Set by a test that cannot run here (no device of its driver), with the reason. */
static char not_run[512];

#define FAIL(...)                                        \
  do {                                                   \
    fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);      \
    fprintf(stderr, __VA_ARGS__);                        \
    fprintf(stderr, "\n");                               \
    exit(1);                                             \
  } while (0)

/* The call must succeed; otherwise print its status and fail. */
#define OK(call)                                                                              \
  do {                                                                                        \
    thal_status_t s_ = (call);                                                                \
    if (s_) FAIL("%s: %s: %s", #call, thal_status_code_name(thal_status_code(s_)), thal_status_message(s_)); \
  } while (0)

#define CHECK(cond)                       \
  do {                                    \
    if (!(cond)) FAIL("check failed: %s", #cond); \
  } while (0)

/* The call must fail with `code` and a message containing `text`; the status is freed. */
static void expect_status(thal_status_t s, thal_status_code_t code, const char *text, const char *what, int line) {
  if (thal_status_code(s) != code || !strstr(thal_status_message(s), text)) {
    fprintf(stderr, "%s:%d: %s: expected %s containing '%s', got %s: %s\n", __FILE__, line, what,
            thal_status_code_name(code), text, thal_status_code_name(thal_status_code(s)), thal_status_message(s));
    exit(1);
  }
  thal_status_free(s);
}
#define EXPECT(call, code, text) expect_status((call), (code), (text), #call, __LINE__)

static thal_buffer_params_t host_params(void) {
  thal_buffer_params_t p = {sizeof(thal_buffer_params_t), THAL_MEMORY_TYPE_HOST_VISIBLE | THAL_MEMORY_TYPE_HOST_COHERENT,
                            THAL_BUFFER_USAGE_TRANSFER_SOURCE | THAL_BUFFER_USAGE_TRANSFER_TARGET |
                                THAL_BUFFER_USAGE_DISPATCH_STORAGE | THAL_BUFFER_USAGE_MAPPING};
  return p;
}

static thal_buffer_t *host_buffer(thal_device_t *device, uint64_t size) {
  thal_buffer_params_t p = host_params();
  thal_buffer_t *buffer = NULL;
  OK(thal_buffer_allocate(device, &p, size, &buffer));
  return buffer;
}

static thal_device_t *open_device(void) {
  thal_device_t *device = NULL;
  OK(thal_device_create(driver_name, 0, &device));
  return device;
}

static thal_semaphore_t *semaphore(thal_device_t *device) {
  thal_semaphore_t *s = NULL;
  OK(thal_semaphore_create(device, 0, &s));
  return s;
}

static int ends_with(const char *text, const char *suffix) {
  size_t n = strlen(text), m = strlen(suffix);
  return n >= m && strcmp(text + n - m, suffix) == 0;
}

/* The kernels of kernels.c (cpu-sim library), kernels.cu compiled to PTX (a path ending .ptx), or
 * kernels.wgsl compiled to SPIR-V (a path ending .spv: fill_index only). */
static thal_executable_t *load_kernels(thal_device_t *device) {
  thal_executable_t *executable = NULL;
  int ptx = ends_with(kernels_path, ".ptx"), spirv = ends_with(kernels_path, ".spv");
  if (!ptx && !spirv) {
    OK(thal_executable_load_library(device, kernels_path, &executable));
    return executable;
  }
  FILE *f = fopen(kernels_path, "rb");
  if (!f) FAIL("cannot open %s", kernels_path);
  static char bytes[1 << 20];
  size_t length = fread(bytes, 1, sizeof bytes - 1, f);
  fclose(f);
  thal_entry_point_t entries[3] = {
      {"fill_index", {64, 1, 1}, 1, 2}, {"add", {64, 1, 1}, 2, 2}, {"trap", {1, 1, 1}, 0, 0}};
  thal_executable_params_t params = {sizeof params, THAL_EXECUTABLE_FORMAT_PTX, bytes, length + 1, entries, 3};
  if (spirv) {
    params.format = THAL_EXECUTABLE_FORMAT_SPIRV;
    params.data_length = length;
    params.entry_point_count = 1;
  }
  OK(thal_executable_load_bytes(device, &params, &executable));
  return executable;
}

static int is_cpu_sim(void) { return strcmp(driver_name, "cpu-sim") == 0; }

/* A one-pair semaphore list (the arrays live in the caller's `pair`). */
typedef struct {
  thal_semaphore_t *semaphore;
  uint64_t value;
  thal_semaphore_list_t list;
} pair_t;
static const thal_semaphore_list_t *one(pair_t *pair, thal_semaphore_t *s, uint64_t value) {
  pair->semaphore = s;
  pair->value = value;
  pair->list.count = 1;
  pair->list.semaphores = &pair->semaphore;
  pair->list.values = &pair->value;
  return &pair->list;
}

/* ---- tests ---- */

static void test_statuses_and_handles(void) {
  CHECK(thal_api_version() == (THAL_API_VERSION_MAJOR << 16 | THAL_API_VERSION_MINOR << 8 | THAL_API_VERSION_PATCH));
  CHECK(strlen(thal_version_string()) > 0);
  CHECK(thal_status_code(NULL) == THAL_STATUS_OK && strcmp(thal_status_message(NULL), "") == 0);

  size_t drivers = 0;
  int found = 0;
  OK(thal_driver_count(&drivers));
  for (size_t i = 0; i < drivers; i++) {
    const char *name = NULL;
    OK(thal_driver_name(i, &name));
    found |= strcmp(name, "cpu-sim") == 0;
  }
  CHECK(found);
  EXPECT(thal_driver_name(drivers, &(const char *){NULL}), THAL_STATUS_OUT_OF_RANGE, "driver index");
  thal_device_t *none = (thal_device_t *)1;
  EXPECT(thal_device_create("no-such-driver", 0, &none), THAL_STATUS_UNAVAILABLE, "no-such-driver");
  CHECK(none == NULL); /* a failed create leaves NULL */

  thal_device_t *device = open_device();
  thal_buffer_t *buffer = host_buffer(device, 64);
  thal_queue_t *queue = NULL;
  EXPECT(thal_device_queue(device, 1000, &queue), THAL_STATUS_OUT_OF_RANGE, "1000");
  OK(thal_device_queue(device, 0, &queue));

  /* NULL, wrong-kind and NULL-out arguments are refused, naming the argument. */
  EXPECT(thal_queue_barrier(NULL, NULL, NULL), THAL_STATUS_INVALID_ARGUMENT, "'queue': a NULL thal_queue_t");
  EXPECT(thal_queue_barrier((thal_queue_t *)buffer, NULL, NULL), THAL_STATUS_INVALID_ARGUMENT,
         "is a thal_buffer_t, not a thal_queue_t");
  EXPECT(thal_device_queue(device, 0, NULL), THAL_STATUS_INVALID_ARGUMENT, "NULL out-pointer");
  pair_t p;
  EXPECT(thal_queue_barrier(queue, NULL, one(&p, (thal_semaphore_t *)queue, 1)), THAL_STATUS_INVALID_ARGUMENT,
         "signals.semaphores[0]");

  /* A versioned struct from a caller compiled against a smaller one is refused. */
  thal_buffer_params_t old = host_params();
  old.struct_size = sizeof(size_t);
  thal_buffer_t *refused = NULL;
  EXPECT(thal_buffer_allocate(device, &old, 64, &refused), THAL_STATUS_INVALID_ARGUMENT, "struct_size");

  /* Statuses: clone outlives the original; made statuses keep code and message. */
  thal_status_t made = thal_status_make(THAL_STATUS_ABORTED, "made in C");
  thal_status_t copy = thal_status_clone(made);
  thal_status_free(made);
  CHECK(thal_status_code(copy) == THAL_STATUS_ABORTED && strcmp(thal_status_message(copy), "made in C") == 0);
  thal_status_free(copy);
  CHECK(thal_status_make(THAL_STATUS_OK, "ignored") == NULL);
  CHECK(strcmp(thal_status_code_name(THAL_STATUS_DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED") == 0);

  /* retain/release count: two releases after one retain free the buffer. */
  OK(thal_buffer_retain(buffer));
  OK(thal_buffer_release(buffer));
  uint64_t size = 0;
  OK(thal_buffer_size(buffer, &size));
  CHECK(size == 64);
  OK(thal_buffer_release(buffer));
  OK(thal_queue_release(queue));
  OK(thal_device_release(device));
  OK(thal_device_release(NULL));
}

/* Queue 1's work is submitted before queue 0's work it depends on (wait-before-signal): a kernel
 * fills A on queue 0, queue 1 adds 5 into B, and a readback lands in caller memory. */
static void test_two_queue_pipeline_out_of_order(void) {
  enum { N = 1000 };
  thal_device_t *device = open_device();
  thal_queue_t *q0 = NULL, *q1 = NULL;
  OK(thal_device_queue(device, 0, &q0));
  OK(thal_device_queue(device, 1, &q1));
  thal_executable_t *kernels = load_kernels(device);
  uint32_t fill_index = 0, add = 0;
  OK(thal_executable_entry_point(kernels, "fill_index", &fill_index));
  OK(thal_executable_entry_point(kernels, "add", &add));
  EXPECT(thal_executable_entry_point(kernels, "missing", &add), THAL_STATUS_NOT_FOUND, "missing");
  thal_buffer_t *a = host_buffer(device, N * 4), *b = host_buffer(device, N * 4);
  thal_semaphore_t *t0 = semaphore(device), *t1 = semaphore(device);

  uint32_t groups[3] = {(N + 63) / 64, 1, 1};
  uint32_t add_constants[2] = {5, N}, fill_constants[2] = {100, N};
  thal_binding_ref_t ab[2] = {{a, 0, 0, THAL_WHOLE_LENGTH}, {b, 0, 0, THAL_WHOLE_LENGTH}};
  thal_command_buffer_t *second = NULL, *first = NULL;
  OK(thal_command_buffer_create(device, THAL_COMMAND_BUFFER_MODE_ONE_SHOT, &second));
  OK(thal_command_buffer_dispatch(second, kernels, add, groups, add_constants, 2, ab, 2));
  OK(thal_command_buffer_end(second));
  OK(thal_command_buffer_create(device, THAL_COMMAND_BUFFER_MODE_ONE_SHOT, &first));
  OK(thal_command_buffer_dispatch(first, kernels, fill_index, groups, fill_constants, 2, ab, 1));
  OK(thal_command_buffer_end(first));

  pair_t w, s;
  thal_readback_t *readback = NULL;
  OK(thal_queue_read(q1, one(&w, t1, 1), b, 0, N * 4, NULL, &readback));
  OK(thal_queue_execute(q1, one(&w, t0, 1), second, one(&s, t1, 1)));
  uint64_t value = 99;
  OK(thal_semaphore_query(t1, &value));
  CHECK(value == 0); /* nothing ran yet: queue 0 has no work */
  OK(thal_queue_execute(q0, NULL, first, one(&s, t0, 1)));

  uint32_t out[N];
  EXPECT(thal_readback_wait(readback, THAL_TIME_INFINITE_FUTURE, out, 4), THAL_STATUS_INVALID_ARGUMENT, "4 bytes");
  OK(thal_readback_wait(readback, THAL_TIME_INFINITE_FUTURE, out, sizeof out));
  for (uint32_t i = 0; i < N; i++)
    if (out[i] != 105 + i) FAIL("out[%u] = %u, expected %u", i, out[i], 105 + i);
  OK(thal_semaphore_query(t0, &value));
  CHECK(value == 1);

  thal_readback_release(readback);
  thal_command_buffer_release(first);
  thal_command_buffer_release(second);
  thal_semaphore_release(t0);
  thal_semaphore_release(t1);
  thal_buffer_release(a);
  thal_buffer_release(b);
  thal_executable_release(kernels);
  thal_queue_release(q0);
  thal_queue_release(q1);
  thal_device_release(device);
}

static thal_status_t failing_call(void *user_data) {
  return thal_status_make(THAL_STATUS_DATA_LOSS, (const char *)user_data);
}

/* A failure's status and message reach C through every path: a semaphore failed from C, a failed
 * wait down a chain across queues, a readback, a failing host call, and a kernel's failure. */
static void test_failure_propagation(void) {
  thal_device_t *device = open_device();
  thal_queue_t *q0 = NULL, *q1 = NULL;
  OK(thal_device_queue(device, 0, &q0));
  OK(thal_device_queue(device, 1, &q1));
  thal_buffer_t *buffer = host_buffer(device, 16);
  thal_semaphore_t *input = semaphore(device), *mid = semaphore(device), *done = semaphore(device);
  pair_t w, s;
  OK(thal_queue_fill(q0, one(&w, input, 1), buffer, 0, 16, 7, 1, one(&s, mid, 1)));
  OK(thal_queue_copy(q1, one(&w, mid, 1), buffer, 0, buffer, 8, 8, one(&s, done, 1)));
  thal_readback_t *readback = NULL;
  OK(thal_queue_read(q1, one(&w, done, 1), buffer, 0, 16, NULL, &readback));

  OK(thal_semaphore_fail(input, thal_status_make(THAL_STATUS_CANCELLED, "the request was cancelled")));
  EXPECT(thal_semaphore_wait(done, 1, THAL_TIME_INFINITE_FUTURE), THAL_STATUS_CANCELLED, "the request was cancelled");
  uint64_t value = 0;
  EXPECT(thal_semaphore_query(mid, &value), THAL_STATUS_CANCELLED, "the request was cancelled");
  EXPECT(thal_semaphore_signal(done, 2), THAL_STATUS_CANCELLED, "the request was cancelled");
  uint8_t bytes[16];
  EXPECT(thal_readback_wait(readback, THAL_TIME_INFINITE_FUTURE, bytes, 16), THAL_STATUS_CANCELLED,
         "the request was cancelled");
  OK(thal_buffer_read(buffer, 0, bytes, 16));
  for (int i = 0; i < 16; i++) CHECK(bytes[i] == 0); /* the fill never ran */
  EXPECT(thal_semaphore_fail(done, NULL), THAL_STATUS_INVALID_ARGUMENT, "OK (NULL) status");

  /* A host call's status fails its signals; an IREE code the HAL lacks keeps its name. */
  thal_semaphore_t *called = semaphore(device);
  OK(thal_queue_host_call(q0, NULL, failing_call, "checksum mismatch", one(&s, called, 1), 0));
  EXPECT(thal_semaphore_wait(called, 1, THAL_TIME_INFINITE_FUTURE), THAL_STATUS_DATA_LOSS, "checksum mismatch");
  thal_semaphore_t *exists = semaphore(device);
  OK(thal_semaphore_fail(exists, thal_status_make(THAL_STATUS_ALREADY_EXISTS, "a twin")));
  EXPECT(thal_semaphore_wait(exists, 1, THAL_TIME_INFINITE_PAST), THAL_STATUS_FAILED_PRECONDITION,
         "ALREADY_EXISTS: a twin");

  /* A kernel that returns nonzero fails the execute with ABORTED naming the entry point and the
   * message it set. */
  if (is_cpu_sim()) { /* on a GPU a trap ends the context; cpu-sim keeps going */
    thal_executable_t *kernels = load_kernels(device);
    uint32_t trap = 0;
    OK(thal_executable_entry_point(kernels, "trap", &trap));
    thal_command_buffer_t *cb = NULL;
    OK(thal_command_buffer_create(device, THAL_COMMAND_BUFFER_MODE_ONE_SHOT, &cb));
    uint32_t one_group[3] = {1, 1, 1};
    OK(thal_command_buffer_dispatch(cb, kernels, trap, one_group, NULL, 0, NULL, 0));
    OK(thal_command_buffer_end(cb));
    thal_semaphore_t *faulted = semaphore(device);
    OK(thal_queue_execute(q0, NULL, cb, one(&s, faulted, 1)));
    EXPECT(thal_semaphore_wait(faulted, 1, THAL_TIME_INFINITE_FUTURE), THAL_STATUS_ABORTED,
           "kernel 'trap' failed (status 7): the trap was hit");
    thal_semaphore_release(faulted);
    thal_command_buffer_release(cb);
    thal_executable_release(kernels);
  }
  /* A library that cannot be opened names its path. */
  thal_executable_t *missing = NULL;
  if (is_cpu_sim())
    EXPECT(thal_executable_load_library(device, "/nonexistent/libkernels.so", &missing), THAL_STATUS_UNAVAILABLE,
           "/nonexistent/libkernels.so");

  thal_readback_release(readback);
  thal_semaphore_release(exists);
  thal_semaphore_release(called);
  thal_semaphore_release(input);
  thal_semaphore_release(mid);
  thal_semaphore_release(done);
  thal_buffer_release(buffer);
  thal_queue_release(q0);
  thal_queue_release(q1);
  thal_device_release(device);
}

typedef struct {
  thal_queue_t *queue;
  thal_buffer_t *buffer;
  thal_semaphore_t *timeline;
} reentry_t;

/* Runs on a HAL thread: signals from the host and submits more work, through the C API. The host signal
 * comes first: the fill may finish (and signal 2) before this function returns. */
static thal_status_t submit_from_callback(void *user_data) {
  reentry_t *r = (reentry_t *)user_data;
  thal_status_t status = thal_semaphore_signal(r->timeline, 1);
  if (status) return status;
  pair_t s;
  status = thal_queue_fill(r->queue, NULL, r->buffer, 0, 16, 0x2A, 1, one(&s, r->timeline, 2));
  if (status) return status;
  uint64_t value = 0;
  status = thal_semaphore_query(r->timeline, &value);
  if (status) return status;
  return value >= 1 ? NULL : thal_status_make(THAL_STATUS_INTERNAL, "the host signal to 1 was not seen");
}

static void test_host_call_calls_back_into_the_api(void) {
  thal_device_t *device = open_device();
  reentry_t r = {NULL, host_buffer(device, 16), semaphore(device)};
  OK(thal_device_queue(device, 0, &r.queue));
  thal_semaphore_t *called = semaphore(device);
  pair_t s;
  OK(thal_queue_host_call(r.queue, NULL, submit_from_callback, &r, one(&s, called, 1), THAL_HOST_CALL_NON_BLOCKING));
  OK(thal_semaphore_wait(called, 1, THAL_TIME_INFINITE_FUTURE));
  OK(thal_semaphore_wait(r.timeline, 2, THAL_TIME_INFINITE_FUTURE));
  uint8_t bytes[16];
  OK(thal_buffer_read(r.buffer, 0, bytes, 16));
  for (int i = 0; i < 16; i++) CHECK(bytes[i] == 0x2A);
  EXPECT(thal_queue_host_call(r.queue, NULL, NULL, NULL, NULL, 0), THAL_STATUS_INVALID_ARGUMENT, "NULL host call");
  EXPECT(thal_queue_host_call(r.queue, NULL, submit_from_callback, &r, NULL, 0x80), THAL_STATUS_INVALID_ARGUMENT,
         "0x80");
  thal_semaphore_release(called);
  thal_semaphore_release(r.timeline);
  thal_buffer_release(r.buffer);
  thal_queue_release(r.queue);
  thal_device_release(device);
}

typedef struct {
  thal_device_t *device;
  thal_queue_t *queue;
  thal_buffer_t *buffer;
  int releases;
} teardown_t;

/* Gives up the last references to the device, its queue and a buffer from the device's own thread. */
static thal_status_t release_everything(void *user_data) {
  teardown_t *t = (teardown_t *)user_data;
  thal_status_t s = thal_buffer_release(t->buffer);
  if (!s) s = thal_queue_release(t->queue);
  if (!s) s = thal_device_release(t->device);
  t->releases = 3;
  return s;
}

static void count_release(void *user_data) { __atomic_fetch_add((int *)user_data, 1, __ATOMIC_SEQ_CST); }

static void test_teardown_from_a_callback(void) {
  teardown_t t = {open_device(), NULL, NULL, 0};
  OK(thal_device_queue(t.device, 0, &t.queue));
  t.buffer = host_buffer(t.device, 64);
  /* Imported memory: its release callback runs exactly once, after the last user let it go. */
  static uint32_t lent[256];
  int imported_releases = 0;
  thal_buffer_params_t p = host_params();
  thal_buffer_t *imported = NULL;
  OK(thal_buffer_import_host_memory(t.device, &p, lent, sizeof lent, count_release, &imported_releases, &imported));
  thal_semaphore_t *done = semaphore(t.device);
  pair_t w, s;
  OK(thal_queue_fill(t.queue, NULL, imported, 0, sizeof lent, 9, 4, one(&s, done, 1)));
  OK(thal_buffer_release(imported)); /* the queued fill keeps it */
  OK(thal_queue_host_call(t.queue, one(&w, done, 1), release_everything, &t, one(&s, done, 2), 0));
  OK(thal_semaphore_wait(done, 2, THAL_TIME_INFINITE_FUTURE));
  CHECK(t.releases == 3);
  CHECK(lent[0] == 9 && lent[255] == 9);
  /* The device may finish closing after the signal; the import is released within a bound. */
  thal_time_t deadline = thal_now_ns() + 5000000000LL;
  while (__atomic_load_n(&imported_releases, __ATOMIC_SEQ_CST) == 0 && thal_now_ns() < deadline) {
    thal_semaphore_wait(done, 3, thal_now_ns() + 1000000); /* sleeps 1 ms (DEADLINE_EXCEEDED) */
  }
  CHECK(imported_releases == 1);
  thal_semaphore_release(done);

  /* A refused import runs its release at once. */
  int refused_releases = 0;
  thal_device_t *device = open_device();
  thal_buffer_params_t device_only = {sizeof device_only, THAL_MEMORY_TYPE_DEVICE_LOCAL, THAL_BUFFER_USAGE_TRANSFER_TARGET};
  EXPECT(thal_buffer_import_host_memory(device, &device_only, lent, sizeof lent, count_release, &refused_releases,
                                        &imported),
         THAL_STATUS_INVALID_ARGUMENT, "host-visible");
  CHECK(refused_releases == 1 && imported == NULL);
  EXPECT(thal_buffer_import_host_memory(device, &p, NULL, 64, count_release, &refused_releases, &imported),
         THAL_STATUS_INVALID_ARGUMENT, "NULL memory");
  CHECK(refused_releases == 2);
  thal_device_release(device);
}

/* One reusable command buffer recorded against slots runs with different buffers per execute. */
static void test_binding_tables(void) {
  enum { N = 256 };
  thal_device_t *device = open_device();
  thal_queue_t *queue = NULL;
  OK(thal_device_queue(device, 0, &queue));
  thal_executable_t *kernels = load_kernels(device);
  uint32_t add = 0;
  OK(thal_executable_entry_point(kernels, "add", &add));
  thal_command_buffer_t *cb = NULL;
  OK(thal_command_buffer_create(device, THAL_COMMAND_BUFFER_MODE_REUSABLE, &cb));
  thal_buffer_ref_t slot0 = {NULL, 0}, slot1 = {NULL, 1};
  OK(thal_command_buffer_fill(cb, slot0, 0, N * 4, 3, 4));
  OK(thal_command_buffer_barrier(cb));
  uint32_t groups[3] = {N / 64, 1, 1}, ten[2] = {10, N};
  thal_binding_ref_t bindings[2] = {{NULL, 0, 0, N * 4}, {NULL, 1, 0, N * 4}};
  OK(thal_command_buffer_dispatch(cb, kernels, add, groups, ten, 2, bindings, 2));
  OK(thal_command_buffer_barrier(cb));
  uint32_t marker = 0xABCD;
  OK(thal_command_buffer_update(cb, slot1, 0, &marker, 4));
  /* The copy reads what the update wrote: without a barrier they may run together. */
  OK(thal_command_buffer_barrier(cb));
  OK(thal_command_buffer_copy(cb, slot1, 0, slot1, 4 * (N - 1), 4));
  thal_binding_ref_t whole_slot = {NULL, 0, 0, THAL_WHOLE_LENGTH};
  EXPECT(thal_command_buffer_dispatch(cb, kernels, add, groups, ten, 2, &whole_slot, 1), THAL_STATUS_INVALID_ARGUMENT,
         "THAL_WHOLE_LENGTH");
  OK(thal_command_buffer_end(cb));
  EXPECT(thal_command_buffer_barrier(cb), THAL_STATUS_FAILED_PRECONDITION, "");

  thal_buffer_t *in[2] = {host_buffer(device, N * 4), host_buffer(device, N * 4)};
  thal_buffer_t *out[2] = {host_buffer(device, N * 4), host_buffer(device, N * 4)};
  thal_semaphore_t *done = semaphore(device);
  pair_t s;
  EXPECT(thal_queue_execute(queue, NULL, cb, one(&s, done, 1)), THAL_STATUS_INVALID_ARGUMENT, "binding slots");
  for (int i = 0; i < 2; i++) {
    thal_buffer_binding_t table[2] = {{in[i], 0, THAL_WHOLE_LENGTH}, {out[i], 0, THAL_WHOLE_LENGTH}};
    OK(thal_queue_execute_with_bindings(queue, NULL, cb, table, 2, one(&s, done, (uint64_t)i + 1)));
  }
  thal_buffer_binding_t short_table[1] = {{in[0], 0, THAL_WHOLE_LENGTH}};
  EXPECT(thal_queue_execute_with_bindings(queue, NULL, cb, short_table, 1, one(&s, done, 3)),
         THAL_STATUS_INVALID_ARGUMENT, "the table has 1 entries");
  OK(thal_semaphore_wait(done, 2, THAL_TIME_INFINITE_FUTURE));
  for (int i = 0; i < 2; i++) {
    uint32_t values[N];
    OK(thal_buffer_read(out[i], 0, values, sizeof values));
    CHECK(values[0] == 0xABCD && values[N - 1] == 0xABCD);
    for (int j = 1; j < N - 1; j++) CHECK(values[j] == 13);
  }
  for (int i = 0; i < 2; i++) {
    thal_buffer_release(in[i]);
    thal_buffer_release(out[i]);
  }
  thal_semaphore_release(done);
  thal_command_buffer_release(cb);
  thal_executable_release(kernels);
  thal_queue_release(queue);
  thal_device_release(device);
}

typedef struct {
  thal_semaphore_t *semaphore;
  uint64_t value;
  thal_status_code_t code;
} waiter_t;

static void *wait_on(void *arg) {
  waiter_t *w = (waiter_t *)arg;
  thal_status_t s = thal_semaphore_wait(w->semaphore, w->value, thal_now_ns() + 20000000000LL);
  w->code = thal_status_code(s);
  thal_status_free(s);
  return NULL;
}

/* Eight threads wait on one semaphore (and a list) with deadlines; the host signals, then fails it. */
static void test_waits_from_several_threads(void) {
  enum { THREADS = 8 };
  thal_device_t *device = open_device();
  thal_semaphore_t *timeline = semaphore(device);
  thal_semaphore_t *host = NULL;
  OK(thal_semaphore_create_host(0, &host));
  EXPECT(thal_semaphore_wait(timeline, 1, THAL_TIME_INFINITE_PAST), THAL_STATUS_DEADLINE_EXCEEDED, "");
  thal_time_t before = thal_now_ns();
  EXPECT(thal_semaphore_wait(timeline, 1, before + 20000000), THAL_STATUS_DEADLINE_EXCEEDED, "");
  CHECK(thal_now_ns() - before >= 20000000);

  pthread_t threads[THREADS];
  waiter_t waiters[THREADS];
  for (int i = 0; i < THREADS; i++) {
    waiters[i].semaphore = timeline;
    waiters[i].value = i < THREADS / 2 ? 1 : 2; /* half are released by the signal, half by the failure */
    waiters[i].code = 99;
    CHECK(pthread_create(&threads[i], NULL, wait_on, &waiters[i]) == 0);
  }
  OK(thal_semaphore_signal(timeline, 1));
  thal_semaphore_t *both[2] = {timeline, host};
  uint64_t values[2] = {1, 5};
  thal_semaphore_list_t list = {2, both, values};
  OK(thal_semaphore_wait_list(THAL_WAIT_MODE_ANY, &list, THAL_TIME_INFINITE_FUTURE));
  EXPECT(thal_semaphore_wait_list(THAL_WAIT_MODE_ALL, &list, THAL_TIME_INFINITE_PAST), THAL_STATUS_DEADLINE_EXCEEDED, "");
  EXPECT(thal_semaphore_wait_list(7, &list, THAL_TIME_INFINITE_PAST), THAL_STATUS_INVALID_ARGUMENT, "wait mode 7");
  for (int i = 0; i < THREADS / 2; i++) {
    CHECK(pthread_join(threads[i], NULL) == 0);
    CHECK(waiters[i].code == THAL_STATUS_OK);
  }
  /* Waiters for 2, started or not yet, all get the failure. */
  OK(thal_semaphore_fail(timeline, thal_status_make(THAL_STATUS_ABORTED, "shutting down")));
  for (int i = THREADS / 2; i < THREADS; i++) {
    CHECK(pthread_join(threads[i], NULL) == 0);
    CHECK(waiters[i].code == THAL_STATUS_ABORTED);
  }
  thal_semaphore_release(host);
  thal_semaphore_release(timeline);
  thal_device_release(device);
}

/* A subspan is a buffer over part of its parent, which it keeps alive. */
static void test_subspans(void) {
  thal_device_t *device = open_device();
  thal_buffer_t *parent = host_buffer(device, 64), *span = NULL, *refused = NULL;
  EXPECT(thal_buffer_subspan(parent, 48, 32, &refused), THAL_STATUS_OUT_OF_RANGE, "");
  CHECK(refused == NULL);
  OK(thal_buffer_subspan(parent, 16, 32, &span));
  OK(thal_buffer_release(parent));
  uint32_t words[8] = {1, 2, 3, 4, 5, 6, 7, 8}, back[16] = {0};
  OK(thal_buffer_write(span, 0, words, sizeof words));
  EXPECT(thal_buffer_write(span, 4, words, sizeof words), THAL_STATUS_OUT_OF_RANGE, "");
  OK(thal_buffer_read(span, 0, back, sizeof words));
  CHECK(memcmp(words, back, sizeof words) == 0);
  thal_buffer_release(span);
  thal_device_release(device);
}

/* The device's report as data: its texts, limits and lists, as `hal devices` prints them; the
 * snapshot outlives the device, and bad indices, fields and struct sizes are refused. */
static void test_device_info(void) {
  thal_device_t *device = open_device();
  thal_device_info_t *info = NULL;
  OK(thal_device_query_info(device, &info));
  char name[256];
  OK(thal_device_name(device, name, sizeof name, NULL));
  size_t queues = 0;
  OK(thal_device_queue_count(device, &queues));
  OK(thal_device_release(device)); /* the snapshot stands alone */

  const char *text = NULL, *driver = NULL, *stable_id = NULL;
  OK(thal_device_info_text(info, THAL_DEVICE_INFO_NAME, &text));
  CHECK(strcmp(text, name) == 0);
  OK(thal_device_info_text(info, THAL_DEVICE_INFO_DRIVER, &driver));
  CHECK(strcmp(driver, driver_name) == 0);
  OK(thal_device_info_text(info, THAL_DEVICE_INFO_STABLE_ID, &stable_id));
  CHECK(strlen(stable_id) > 0);
  EXPECT(thal_device_info_text(info, 3, &text), THAL_STATUS_INVALID_ARGUMENT, "'field' 3");

  thal_device_limits_t limits;
  memset(&limits, 0, sizeof limits);
  limits.struct_size = sizeof limits;
  OK(thal_device_info_limits(info, &limits));
  CHECK(limits.struct_size == sizeof limits && limits.ordinal == 0 && limits.queue_count == queues);
  CHECK(limits.max_allocation_size > 0 && limits.max_binding_length > 0 && limits.max_workgroup_threads > 0);
  CHECK(limits.binding_alignment >= 1);
  CHECK(limits.max_workgroup_size[0] > 0 && limits.max_workgroup_count[0] > 0);
  CHECK(limits.memory_type_count > 0 && limits.executable_kind_count > 0);
  thal_device_limits_t old;
  memset(&old, 0, sizeof old);
  old.struct_size = sizeof(size_t);
  EXPECT(thal_device_info_limits(info, &old), THAL_STATUS_INVALID_ARGUMENT, "struct_size");

  int host_visible = 0;
  for (size_t i = 0; i < limits.memory_type_count; i++) {
    uint32_t bits = 0;
    OK(thal_device_info_memory_type(info, i, &bits));
    host_visible |= (bits & THAL_MEMORY_TYPE_HOST_VISIBLE) != 0;
  }
  CHECK(host_visible);
  int loads_libraries = 0;
  for (size_t i = 0; i < limits.executable_kind_count; i++) {
    const char *kind = NULL;
    OK(thal_device_info_executable_kind(info, i, &kind));
    loads_libraries |= strcmp(kind, "shared-library") == 0;
  }
  CHECK(loads_libraries == is_cpu_sim());
  int has_threads = 0;
  for (size_t i = 0; i < limits.property_count; i++) {
    const char *key = NULL, *value = NULL;
    OK(thal_device_info_property(info, i, &key, &value));
    CHECK(strlen(key) > 0 && value != NULL);
    has_threads |= strcmp(key, "workgroup_threads") == 0 && atoi(value) > 0;
  }
  CHECK(has_threads == is_cpu_sim());
  EXPECT(thal_device_info_property(info, limits.property_count, &text, &text), THAL_STATUS_OUT_OF_RANGE,
         "property index");
  EXPECT(thal_device_info_memory_type(info, limits.memory_type_count, &(uint32_t){0}), THAL_STATUS_OUT_OF_RANGE,
         "memory type index");
  EXPECT(thal_device_info_limits((thal_device_info_t *)driver, &limits), THAL_STATUS_INVALID_ARGUMENT, "");
  OK(thal_device_info_retain(info));
  OK(thal_device_info_release(info));
  OK(thal_device_info_release(info));
}

/* A profiling session records each queue operation and each dispatch, on thal_now_ns's clock; the
 * session's misuse is refused. */
static void test_profiling(void) {
  enum { N = 256 };
  thal_device_t *device = open_device();
  thal_queue_t *queue = NULL;
  OK(thal_device_queue(device, 0, &queue));
  thal_executable_t *kernels = load_kernels(device);
  uint32_t fill_index = 0;
  OK(thal_executable_entry_point(kernels, "fill_index", &fill_index));
  thal_buffer_t *a = host_buffer(device, N * 4);
  thal_semaphore_t *done = semaphore(device);
  thal_profile_t *profile = (thal_profile_t *)1;

  EXPECT(thal_device_end_profiling(device, &profile), THAL_STATUS_FAILED_PRECONDITION, "");
  CHECK(profile == NULL);
  thal_profile_params_t nothing = {sizeof nothing, 0, 0, 0};
  EXPECT(thal_device_begin_profiling(device, &nothing), THAL_STATUS_INVALID_ARGUMENT, "records nothing");
  thal_profile_params_t backwards = {sizeof backwards, THAL_PROFILE_DISPATCHES, 3, 1};
  EXPECT(thal_device_begin_profiling(device, &backwards), THAL_STATUS_INVALID_ARGUMENT, "command_begin 3");
  thal_profile_params_t everything = {sizeof everything, THAL_PROFILE_QUEUE_OPERATIONS | THAL_PROFILE_DISPATCHES,
                                      0, 0};
  thal_time_t before = thal_now_ns();
  OK(thal_device_begin_profiling(device, &everything));
  EXPECT(thal_device_begin_profiling(device, &everything), THAL_STATUS_FAILED_PRECONDITION, "");

  uint32_t groups[3] = {N / 64, 1, 1}, constants[2] = {7, N};
  thal_binding_ref_t binding = {a, 0, 0, THAL_WHOLE_LENGTH};
  thal_command_buffer_t *commands = NULL;
  OK(thal_command_buffer_create(device, THAL_COMMAND_BUFFER_MODE_ONE_SHOT, &commands));
  OK(thal_command_buffer_dispatch(commands, kernels, fill_index, groups, constants, 2, &binding, 1));
  OK(thal_command_buffer_end(commands));
  pair_t p;
  OK(thal_queue_execute(queue, NULL, commands, one(&p, done, 1)));
  OK(thal_queue_fill(queue, NULL, a, 0, 16, 0, 4, one(&p, done, 2)));
  OK(thal_semaphore_wait(done, 2, THAL_TIME_INFINITE_FUTURE));
  OK(thal_device_end_profiling(device, &profile));
  thal_time_t after = thal_now_ns();

  thal_profile_summary_t summary;
  memset(&summary, 0, sizeof summary);
  summary.struct_size = sizeof summary;
  OK(thal_profile_summary(profile, &summary));
  CHECK(summary.queue_operation_count == 2 && summary.dispatch_count == 1);
  CHECK(summary.clock_method != NULL);
  const char *expected[2] = {"execute", "fill"};
  for (size_t i = 0; i < 2; i++) {
    thal_queue_operation_timing_t op;
    memset(&op, 0, sizeof op);
    op.struct_size = sizeof op;
    OK(thal_profile_queue_operation(profile, i, &op));
    if (strcmp(op.operation, expected[i]) != 0) FAIL("operation %zu is %s, expected %s", i, op.operation, expected[i]);
    CHECK(op.queue == 0 && before <= op.start_ns && op.start_ns <= op.end_ns && op.end_ns <= after);
  }
  thal_dispatch_timing_t dispatch;
  memset(&dispatch, 0, sizeof dispatch);
  dispatch.struct_size = sizeof dispatch;
  OK(thal_profile_dispatch(profile, 0, &dispatch));
  CHECK(strcmp(dispatch.entry_point, "fill_index") == 0 && dispatch.command_index == 0);
  CHECK(dispatch.workgroups[0] == N / 64 && dispatch.workgroups[1] == 1 && dispatch.workgroups[2] == 1);
  CHECK(before <= dispatch.start_ns && dispatch.start_ns <= dispatch.end_ns && dispatch.end_ns <= after);
  EXPECT(thal_profile_dispatch(profile, 1, &dispatch), THAL_STATUS_OUT_OF_RANGE, "dispatch record 1");
  dispatch.struct_size = 8;
  EXPECT(thal_profile_dispatch(profile, 0, &dispatch), THAL_STATUS_INVALID_ARGUMENT, "struct_size");
  EXPECT(thal_profile_summary((thal_profile_t *)device, &summary), THAL_STATUS_INVALID_ARGUMENT,
         "is a thal_device_t, not a thal_profile_t");
  OK(thal_profile_release(profile));
  EXPECT(thal_device_collect_profile(device, &profile), THAL_STATUS_FAILED_PRECONDITION, "");

  thal_command_buffer_release(commands);
  thal_semaphore_release(done);
  thal_buffer_release(a);
  thal_executable_release(kernels);
  thal_queue_release(queue);
  thal_device_release(device);
}

/* SPIR-V goes through the executable entry point: a device that loads it (vulkan) runs fill_index
 * from it, one that does not refuses it naming the format. Not run without a device of the driver. */
static void test_spirv_executables(void) {
  enum { N = 1000 };
  size_t devices = 0;
  thal_status_t s = thal_driver_device_count(driver_name, &devices);
  if (s || devices == 0) {
    snprintf(not_run, sizeof not_run, "driver %s has no device here: %s", driver_name,
             s ? thal_status_message(s) : "none listed");
    thal_status_free(s);
    return;
  }
  thal_device_t *device = open_device();
  thal_device_info_t *info = NULL;
  OK(thal_device_query_info(device, &info));
  thal_device_limits_t limits;
  memset(&limits, 0, sizeof limits);
  limits.struct_size = sizeof limits;
  OK(thal_device_info_limits(info, &limits));
  int loads_spirv = 0;
  for (size_t i = 0; i < limits.executable_kind_count; i++) {
    const char *kind = NULL;
    OK(thal_device_info_executable_kind(info, i, &kind));
    loads_spirv |= strcmp(kind, "spirv") == 0;
  }
  thal_device_info_release(info);
  if (!loads_spirv) {
    static const uint32_t header[5] = {0x07230203, 0x00010300, 0, 1, 0};
    thal_entry_point_t entry = {"fill_index", {64, 1, 1}, 1, 2};
    thal_executable_params_t params = {sizeof params, THAL_EXECUTABLE_FORMAT_SPIRV, header, sizeof header, &entry, 1};
    thal_executable_t *executable = NULL;
    EXPECT(thal_executable_load_bytes(device, &params, &executable), THAL_STATUS_UNIMPLEMENTED, "SPIR-V");
    CHECK(executable == NULL);
    thal_device_release(device);
    return;
  }

  thal_queue_t *queue = NULL;
  OK(thal_device_queue(device, 0, &queue));
  thal_executable_t *kernels = load_kernels(device);
  uint32_t fill_index = 99;
  OK(thal_executable_entry_point(kernels, "fill_index", &fill_index));
  CHECK(fill_index == 0);
  thal_buffer_t *out = host_buffer(device, N * 4);
  thal_semaphore_t *done = semaphore(device);
  uint32_t groups[3] = {(N + 63) / 64, 1, 1}, constants[2] = {100, N};
  thal_binding_ref_t binding = {out, 0, 0, THAL_WHOLE_LENGTH};
  thal_command_buffer_t *commands = NULL;
  OK(thal_command_buffer_create(device, THAL_COMMAND_BUFFER_MODE_ONE_SHOT, &commands));
  OK(thal_command_buffer_dispatch(commands, kernels, fill_index, groups, constants, 2, &binding, 1));
  OK(thal_command_buffer_end(commands));
  pair_t p;
  OK(thal_queue_execute(queue, NULL, commands, one(&p, done, 1)));
  OK(thal_semaphore_wait(done, 1, THAL_TIME_INFINITE_FUTURE));
  uint32_t values[N];
  OK(thal_buffer_read(out, 0, values, sizeof values));
  for (uint32_t i = 0; i < N; i++)
    if (values[i] != 100 + i) FAIL("values[%u] = %u, expected %u", i, values[i], 100 + i);

  thal_command_buffer_release(commands);
  thal_semaphore_release(done);
  thal_buffer_release(out);
  thal_executable_release(kernels);
  thal_queue_release(queue);
  thal_device_release(device);
}

/* Collectives: ranks on their own devices, each driven by its own thread, all-reduce a buffer in
 * place; misuse of channels and arguments is refused. */
enum { RANKS = 3, ELEMENTS = 64 };
typedef struct {
  thal_device_t *device;
  const thal_channel_id_t *id;
  size_t rank;
} rank_t;

static void *all_reduce_rank(void *arg) {
  rank_t *r = arg;
  thal_channel_t *channel = NULL;
  OK(thal_channel_create(r->device, r->id, r->rank, RANKS, &channel));
  size_t rank = 99, count = 0;
  OK(thal_channel_rank(channel, &rank, &count));
  CHECK(rank == r->rank && count == RANKS);
  thal_queue_t *queue = NULL;
  OK(thal_device_queue(r->device, 0, &queue));
  thal_buffer_t *buffer = host_buffer(r->device, ELEMENTS * 4);
  uint32_t values[ELEMENTS];
  for (uint32_t i = 0; i < ELEMENTS; i++) values[i] = (uint32_t)(r->rank + 1) * 100 + i;
  OK(thal_buffer_write(buffer, 0, values, sizeof values));
  thal_semaphore_t *done = semaphore(r->device);
  thal_collective_args_t args;
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.op = THAL_COLLECTIVE_ALL_REDUCE;
  args.reduce = THAL_REDUCE_SUM;
  args.element_type = THAL_ELEMENT_TYPE_U32;
  args.count = ELEMENTS;
  args.send = (thal_buffer_binding_t){buffer, 0, THAL_WHOLE_LENGTH};
  args.recv = args.send;
  pair_t p;
  OK(thal_queue_collective(queue, NULL, channel, &args, one(&p, done, 1)));
  OK(thal_semaphore_wait(done, 1, thal_now_ns() + 10000000000ll));
  OK(thal_buffer_read(buffer, 0, values, sizeof values));
  for (uint32_t i = 0; i < ELEMENTS; i++)
    if (values[i] != 600 + RANKS * i) FAIL("rank %zu: values[%u] = %u, expected %u", r->rank, i, values[i], 600 + RANKS * i);
  thal_semaphore_release(done);
  thal_buffer_release(buffer);
  thal_queue_release(queue);
  thal_channel_release(channel);
  return NULL;
}

static void test_collectives(void) {
  thal_device_t *devices[RANKS];
  /* NCCL (the cuda driver) takes one GPU per rank: rank i on ordinal i. cpu-sim's ranks share one. */
  int per_gpu = strcmp(driver_name, "cuda") == 0;
  if (per_gpu) {
    size_t count = 0;
    OK(thal_driver_device_count(driver_name, &count));
    if (count < RANKS) {
      snprintf(not_run, sizeof not_run, "NCCL takes one GPU per rank: %d ranks, %zu GPU(s) here", RANKS, count);
      return;
    }
  }
  for (int i = 0; i < RANKS; i++) {
    devices[i] = NULL;
    OK(thal_device_create(driver_name, per_gpu ? (size_t)i : 0, &devices[i]));
  }
  thal_channel_id_t id;
  OK(thal_device_create_channel_id(devices[0], &id));

  /* Refusals, before any rank joins. */
  thal_channel_t *channel = (thal_channel_t *)1;
  EXPECT(thal_channel_create(devices[0], &id, RANKS, RANKS, &channel), THAL_STATUS_INVALID_ARGUMENT,
         "rank 3 of a channel of 3 ranks");
  CHECK(channel == NULL);
  EXPECT(thal_channel_create(devices[0], NULL, 0, RANKS, &channel), THAL_STATUS_INVALID_ARGUMENT, "'id'");
  EXPECT(thal_channel_release((thal_channel_t *)devices[0]), THAL_STATUS_INVALID_ARGUMENT,
         "is a thal_device_t, not a thal_channel_t");
  thal_channel_id_t lonely;
  OK(thal_device_create_channel_id(devices[0], &lonely));
  OK(thal_channel_create(devices[0], &lonely, 0, 1, &channel));
  thal_queue_t *queue = NULL;
  OK(thal_device_queue(devices[0], 0, &queue));
  thal_collective_args_t args;
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.op = 42;
  EXPECT(thal_queue_collective(queue, NULL, channel, &args, NULL), THAL_STATUS_INVALID_ARGUMENT, "args.op 42");
  args.op = THAL_COLLECTIVE_ALL_REDUCE;
  args.element_type = 77;
  EXPECT(thal_queue_collective(queue, NULL, channel, &args, NULL), THAL_STATUS_INVALID_ARGUMENT,
         "args.element_type 77");
  args.struct_size = 8;
  EXPECT(thal_queue_collective(queue, NULL, channel, &args, NULL), THAL_STATUS_INVALID_ARGUMENT, "struct_size");
  thal_channel_t *elsewhere = NULL;
  OK(thal_device_create_channel_id(devices[1], &lonely));
  OK(thal_channel_create(devices[1], &lonely, 0, 1, &elsewhere));
  args.struct_size = sizeof args;
  args.op = THAL_COLLECTIVE_BARRIER;
  args.element_type = THAL_ELEMENT_TYPE_U8;
  EXPECT(thal_queue_collective(queue, NULL, elsewhere, &args, NULL), THAL_STATUS_INVALID_ARGUMENT, "was made on");
  pair_t p;
  thal_semaphore_t *barrier = semaphore(devices[0]);
  OK(thal_queue_collective(queue, NULL, channel, &args, one(&p, barrier, 1)));
  OK(thal_semaphore_wait(barrier, 1, thal_now_ns() + 10000000000ll));
  thal_semaphore_release(barrier);
  thal_channel_release(elsewhere);
  thal_channel_release(channel);
  thal_queue_release(queue);

  /* The all-reduce, each rank on its own thread. */
  pthread_t threads[RANKS];
  rank_t ranks[RANKS];
  for (int i = 0; i < RANKS; i++) {
    ranks[i] = (rank_t){devices[i], &id, (size_t)i};
    CHECK(pthread_create(&threads[i], NULL, all_reduce_rank, &ranks[i]) == 0);
  }
  for (int i = 0; i < RANKS; i++) CHECK(pthread_join(threads[i], NULL) == 0);
  for (int i = 0; i < RANKS; i++) thal_device_release(devices[i]);
}

/* A mapping's pointer reads and writes the buffer's bytes until unmap, keeps the buffer alive, and is
 * refused where the buffer cannot be mapped, with the reason. */
static void test_host_mappings(void) {
  thal_device_t *device = open_device();
  thal_queue_t *queue = NULL;
  OK(thal_device_queue(device, 0, &queue));
  thal_semaphore_t *done = semaphore(device);
  thal_buffer_t *buffer = host_buffer(device, 64);
  pair_t p;
  OK(thal_queue_fill(queue, NULL, buffer, 0, 64, 0xabababab, 4, one(&p, done, 1)));
  OK(thal_semaphore_wait(done, 1, THAL_TIME_INFINITE_FUTURE));

  void *data = NULL;
  thal_mapping_t *mapping = NULL;
  OK(thal_buffer_map(buffer, 16, 32, &data, &mapping));
  OK(thal_buffer_release(buffer)); /* the mapping keeps it */
  size_t length = 0;
  OK(thal_mapping_length(mapping, &length));
  CHECK(length == 32 && data != NULL);
  uint8_t *bytes = data;
  CHECK(bytes[0] == 0xab && bytes[31] == 0xab);
  for (int i = 0; i < 32; i++) bytes[i] = (uint8_t)i;
  CHECK(bytes[5] == 5 && bytes[31] == 31);
  EXPECT(thal_buffer_unmap((thal_mapping_t *)queue), THAL_STATUS_INVALID_ARGUMENT, "not a thal_mapping_t");
  OK(thal_buffer_unmap(mapping));
  OK(thal_buffer_unmap(NULL));

  /* Refusals: a range past the end, NULL out-pointers, memory the host cannot see. */
  thal_buffer_t *other = host_buffer(device, 64);
  mapping = (thal_mapping_t *)1;
  EXPECT(thal_buffer_map(other, 48, 32, &data, &mapping), THAL_STATUS_OUT_OF_RANGE, "");
  CHECK(mapping == NULL && data == NULL);
  EXPECT(thal_buffer_map(other, 0, 8, NULL, &mapping), THAL_STATUS_INVALID_ARGUMENT, "'data'");
  EXPECT(thal_buffer_map(other, 0, 8, &data, NULL), THAL_STATUS_INVALID_ARGUMENT, "'out'");
  thal_buffer_params_t no_mapping = host_params();
  no_mapping.usage &= ~THAL_BUFFER_USAGE_MAPPING;
  thal_buffer_t *unmappable = NULL;
  OK(thal_buffer_allocate(device, &no_mapping, 64, &unmappable));
  EXPECT(thal_buffer_map(unmappable, 0, 8, &data, &mapping), THAL_STATUS_PERMISSION_DENIED, "MAPPING");
  thal_buffer_release(unmappable);
  thal_buffer_params_t device_local = {sizeof device_local, THAL_MEMORY_TYPE_DEVICE_LOCAL,
                                       THAL_BUFFER_USAGE_TRANSFER_TARGET};
  OK(thal_buffer_allocate(device, &device_local, 64, &unmappable));
  EXPECT(thal_buffer_map(unmappable, 0, 8, &data, &mapping), THAL_STATUS_PERMISSION_DENIED,
         "is not HOST_VISIBLE and cannot be mapped");
  thal_buffer_release(unmappable);

  /* Bytes written through a mapping are what queue work reads. */
  OK(thal_buffer_map(other, 0, 64, &data, &mapping));
  memset(data, 0x5a, 64);
  thal_readback_t *readback = NULL;
  OK(thal_queue_read(queue, NULL, other, 8, 4, one(&p, done, 3), &readback));
  uint8_t back[4] = {0};
  OK(thal_readback_wait(readback, THAL_TIME_INFINITE_FUTURE, back, sizeof back));
  CHECK(back[0] == 0x5a && back[3] == 0x5a);
  thal_readback_release(readback);
  OK(thal_buffer_unmap(mapping));
  OK(thal_buffer_read(other, 60, back, sizeof back));
  CHECK(back[0] == 0x5a && back[3] == 0x5a);
  /* A mapping at an offset starts there. */
  OK(thal_buffer_map(other, 8, 4, &data, &mapping));
  memcpy(data, (uint8_t[4]){1, 2, 3, 4}, 4);
  OK(thal_buffer_unmap(mapping));
  uint8_t around[6] = {0};
  OK(thal_buffer_read(other, 7, around, sizeof around));
  CHECK(around[0] == 0x5a && around[1] == 1 && around[4] == 4 && around[5] == 0x5a);
  thal_buffer_release(other);
  /* Memory kept for reuse after the releases goes back; a later allocation starts zeroed. */
  OK(thal_device_trim(device));
  EXPECT(thal_device_trim(NULL), THAL_STATUS_INVALID_ARGUMENT, "'device': a NULL thal_device_t");
  other = host_buffer(device, 64);
  OK(thal_buffer_read(other, 0, back, sizeof back));
  CHECK(back[0] == 0 && back[3] == 0);
  thal_buffer_release(other);
  thal_semaphore_release(done);
  thal_queue_release(queue);
  thal_device_release(device);
}

/* A transient buffer lives between its alloca's and dealloca's signals; an indirect dispatch takes
 * its workgroup count from a buffer written by earlier queue work. */
static void test_transient_buffers_and_indirect_dispatch(void) {
  enum { N = 512 };
  thal_device_t *device = open_device();
  thal_queue_t *queue = NULL;
  OK(thal_device_queue(device, 0, &queue));
  thal_executable_t *kernels = load_kernels(device);
  uint32_t fill_index = 0;
  OK(thal_executable_entry_point(kernels, "fill_index", &fill_index));
  thal_semaphore_t *t = semaphore(device);
  pair_t w, s;
  thal_buffer_params_t p = {sizeof p, THAL_MEMORY_TYPE_DEVICE_LOCAL,
                            THAL_BUFFER_USAGE_TRANSFER_SOURCE | THAL_BUFFER_USAGE_TRANSFER_TARGET |
                                THAL_BUFFER_USAGE_DISPATCH_STORAGE};
  thal_buffer_t *transient = NULL, *result = host_buffer(device, N * 4), *count = host_buffer(device, 12);
  OK(thal_queue_alloca(queue, NULL, &p, N * 4, one(&s, t, 1), &transient));
  uint32_t grid[3] = {N / 64, 1, 1};
  OK(thal_queue_update(queue, one(&w, t, 1), grid, sizeof grid, count, 0, one(&s, t, 2)));

  thal_command_buffer_t *cb = NULL;
  OK(thal_command_buffer_create(device, THAL_COMMAND_BUFFER_MODE_ONE_SHOT, &cb));
  uint32_t constants[2] = {7, N};
  thal_binding_ref_t out = {transient, 0, 0, THAL_WHOLE_LENGTH};
  thal_buffer_ref_t count_ref = {count, 0};
  OK(thal_command_buffer_dispatch_indirect(cb, kernels, fill_index, count_ref, 0, constants, 2, &out, 1));
  OK(thal_command_buffer_barrier(cb));
  thal_buffer_ref_t from = {transient, 0}, to = {result, 0};
  OK(thal_command_buffer_copy(cb, from, 0, to, 0, N * 4));
  OK(thal_command_buffer_end(cb));
  OK(thal_queue_execute(queue, one(&w, t, 2), cb, one(&s, t, 3)));
  OK(thal_queue_dealloca(queue, one(&w, t, 3), transient, one(&s, t, 4)));
  EXPECT(thal_queue_dealloca(queue, one(&w, t, 3), transient, one(&s, t, 5)), THAL_STATUS_FAILED_PRECONDITION, "");
  EXPECT(thal_queue_dealloca(queue, NULL, result, one(&s, t, 5)), THAL_STATUS_INVALID_ARGUMENT, "");
  OK(thal_semaphore_wait(t, 4, THAL_TIME_INFINITE_FUTURE));
  uint32_t values[N];
  OK(thal_buffer_read(result, 0, values, sizeof values));
  for (uint32_t i = 0; i < N; i++)
    if (values[i] != 7 + i) FAIL("values[%u] = %u, expected %u", i, values[i], 7 + i);
  thal_command_buffer_release(cb);
  thal_buffer_release(transient);
  thal_buffer_release(result);
  thal_buffer_release(count);
  thal_semaphore_release(t);
  thal_executable_release(kernels);
  thal_queue_release(queue);
  thal_device_release(device);
}

/* ---- handle checks ---- */

/* A call on a released handle fails naming it released. */
#define STALE(call, kind) EXPECT(call, THAL_STATUS_INVALID_ARGUMENT, "is a released " kind)

/* Each kind's handle is released and a new object of the kind made, likely where the old one was;
 * every call on the stale handle is refused and leaves the new object as it was: its value stays,
 * and one release (its only reference) ends it. Many rounds make the reuse certain. */
static void test_stale_handles(void) {
  enum { ROUNDS = 1000, DEVICE_ROUNDS = 16 };
  thal_device_t *device = open_device();
  thal_queue_t *queue = NULL;
  OK(thal_device_queue(device, 0, &queue));
  pair_t p;
  uint64_t value = 0;
  uint32_t word = 0x12345678, back = 0;
  for (int round = 0; round < ROUNDS; round++) {
    thal_semaphore_t *old_semaphore = semaphore(device), *fresh_semaphore = NULL;
    OK(thal_semaphore_release(old_semaphore));
    OK(thal_semaphore_create(device, 7, &fresh_semaphore));
    EXPECT(thal_semaphore_release(old_semaphore), THAL_STATUS_INVALID_ARGUMENT,
           "argument 'semaphore' (0x");
    STALE(thal_semaphore_release(old_semaphore), "thal_semaphore_t");
    STALE(thal_semaphore_retain(old_semaphore), "thal_semaphore_t");
    STALE(thal_semaphore_signal(old_semaphore, 9), "thal_semaphore_t");
    STALE(thal_semaphore_query(old_semaphore, &value), "thal_semaphore_t");
    STALE(thal_semaphore_wait(old_semaphore, 1, THAL_TIME_INFINITE_PAST), "thal_semaphore_t");
    STALE(thal_semaphore_fail(old_semaphore, thal_status_make(THAL_STATUS_ABORTED, "stale")), "thal_semaphore_t");
    EXPECT(thal_semaphore_wait_list(THAL_WAIT_MODE_ALL, one(&p, old_semaphore, 1), THAL_TIME_INFINITE_PAST),
           THAL_STATUS_INVALID_ARGUMENT, "'list.semaphores[0]'");
    EXPECT(thal_queue_barrier(queue, NULL, one(&p, old_semaphore, 1)), THAL_STATUS_INVALID_ARGUMENT,
           "'signals.semaphores[0]'");
    OK(thal_semaphore_query(fresh_semaphore, &value));
    CHECK(value == 7);
    OK(thal_semaphore_signal(fresh_semaphore, 8));
    OK(thal_semaphore_wait(fresh_semaphore, 8, THAL_TIME_INFINITE_PAST));
    OK(thal_semaphore_release(fresh_semaphore));
    STALE(thal_semaphore_query(fresh_semaphore, &value), "thal_semaphore_t");

    thal_buffer_t *old_buffer = host_buffer(device, 64), *fresh_buffer = NULL, *span = NULL;
    OK(thal_buffer_release(old_buffer));
    fresh_buffer = host_buffer(device, 128);
    OK(thal_buffer_write(fresh_buffer, 0, &word, sizeof word));
    STALE(thal_buffer_release(old_buffer), "thal_buffer_t");
    STALE(thal_buffer_retain(old_buffer), "thal_buffer_t");
    STALE(thal_buffer_size(old_buffer, &value), "thal_buffer_t");
    STALE(thal_buffer_write(old_buffer, 0, &back, sizeof back), "thal_buffer_t");
    STALE(thal_buffer_read(old_buffer, 0, &back, sizeof back), "thal_buffer_t");
    STALE(thal_buffer_subspan(old_buffer, 0, 16, &span), "thal_buffer_t");
    void *data = NULL;
    thal_mapping_t *mapping = NULL;
    STALE(thal_buffer_map(old_buffer, 0, 16, &data, &mapping), "thal_buffer_t");
    EXPECT(thal_queue_fill(queue, NULL, old_buffer, 0, 4, 0, 1, NULL), THAL_STATUS_INVALID_ARGUMENT, "'target'");
    CHECK(span == NULL && mapping == NULL);
    OK(thal_buffer_size(fresh_buffer, &value));
    CHECK(value == 128);
    OK(thal_buffer_read(fresh_buffer, 0, &back, sizeof back));
    CHECK(back == word);

    OK(thal_buffer_map(fresh_buffer, 0, 16, &data, &mapping));
    OK(thal_buffer_unmap(mapping));
    thal_mapping_t *old_mapping = mapping;
    OK(thal_buffer_map(fresh_buffer, 0, 32, &data, &mapping));
    size_t length = 0;
    STALE(thal_mapping_length(old_mapping, &length), "thal_mapping_t");
    STALE(thal_buffer_unmap(old_mapping), "thal_mapping_t");
    OK(thal_mapping_length(mapping, &length));
    CHECK(length == 32 && *(uint32_t *)data == word);
    OK(thal_buffer_unmap(mapping));

    thal_readback_t *old_readback = NULL, *readback = NULL;
    OK(thal_queue_read(queue, NULL, fresh_buffer, 0, sizeof back, NULL, &old_readback));
    OK(thal_readback_release(old_readback));
    OK(thal_queue_read(queue, NULL, fresh_buffer, 0, sizeof back, NULL, &readback));
    STALE(thal_readback_wait(old_readback, THAL_TIME_INFINITE_FUTURE, &back, sizeof back), "thal_readback_t");
    STALE(thal_readback_retain(old_readback), "thal_readback_t");
    STALE(thal_readback_release(old_readback), "thal_readback_t");
    back = 0;
    OK(thal_readback_wait(readback, THAL_TIME_INFINITE_FUTURE, &back, sizeof back));
    CHECK(back == word);
    OK(thal_readback_release(readback));
    OK(thal_buffer_release(fresh_buffer));
    STALE(thal_buffer_size(fresh_buffer, &value), "thal_buffer_t");

    thal_command_buffer_t *old_commands = NULL, *commands = NULL;
    OK(thal_command_buffer_create(device, THAL_COMMAND_BUFFER_MODE_ONE_SHOT, &old_commands));
    OK(thal_command_buffer_release(old_commands));
    OK(thal_command_buffer_create(device, THAL_COMMAND_BUFFER_MODE_ONE_SHOT, &commands));
    STALE(thal_command_buffer_release(old_commands), "thal_command_buffer_t");
    STALE(thal_command_buffer_retain(old_commands), "thal_command_buffer_t");
    STALE(thal_command_buffer_barrier(old_commands), "thal_command_buffer_t");
    STALE(thal_command_buffer_end(old_commands), "thal_command_buffer_t");
    STALE(thal_queue_execute(queue, NULL, old_commands, NULL), "thal_command_buffer_t");
    OK(thal_command_buffer_barrier(commands));
    OK(thal_command_buffer_end(commands));
    OK(thal_command_buffer_release(commands));
    STALE(thal_command_buffer_end(commands), "thal_command_buffer_t");

    thal_queue_t *old_queue = NULL, *fresh_queue = NULL;
    OK(thal_device_queue(device, 0, &old_queue));
    OK(thal_queue_release(old_queue));
    OK(thal_device_queue(device, 0, &fresh_queue));
    STALE(thal_queue_release(old_queue), "thal_queue_t");
    STALE(thal_queue_retain(old_queue), "thal_queue_t");
    STALE(thal_queue_barrier(old_queue, NULL, NULL), "thal_queue_t");
    STALE(thal_queue_flush(old_queue), "thal_queue_t");
    OK(thal_queue_barrier(fresh_queue, NULL, NULL));
    OK(thal_queue_release(fresh_queue));
    STALE(thal_queue_flush(fresh_queue), "thal_queue_t");

    thal_device_info_t *old_info = NULL, *info = NULL;
    const char *text = NULL;
    OK(thal_device_query_info(device, &old_info));
    OK(thal_device_info_release(old_info));
    OK(thal_device_query_info(device, &info));
    STALE(thal_device_info_release(old_info), "thal_device_info_t");
    STALE(thal_device_info_retain(old_info), "thal_device_info_t");
    STALE(thal_device_info_text(old_info, THAL_DEVICE_INFO_DRIVER, &text), "thal_device_info_t");
    OK(thal_device_info_text(info, THAL_DEVICE_INFO_DRIVER, &text));
    CHECK(strcmp(text, driver_name) == 0);
    OK(thal_device_info_release(info));
  }

  /* Devices: fewer rounds, each opens a device. */
  for (int round = 0; round < DEVICE_ROUNDS; round++) {
    thal_device_t *old_device = open_device(), *fresh_device = NULL;
    OK(thal_device_release(old_device));
    fresh_device = open_device();
    size_t queues = 0;
    thal_semaphore_t *refused = NULL;
    STALE(thal_device_release(old_device), "thal_device_t");
    STALE(thal_device_retain(old_device), "thal_device_t");
    STALE(thal_device_queue_count(old_device, &queues), "thal_device_t");
    STALE(thal_device_trim(old_device), "thal_device_t");
    STALE(thal_semaphore_create(old_device, 0, &refused), "thal_device_t");
    CHECK(refused == NULL);
    OK(thal_device_queue_count(fresh_device, &queues));
    CHECK(queues > 0);
    OK(thal_device_release(fresh_device));
    STALE(thal_device_queue_count(fresh_device, &queues), "thal_device_t");
  }
  OK(thal_queue_release(queue));
  OK(thal_device_release(device));
  STALE(thal_device_release(device), "thal_device_t");
}

/* Values that were never handles, and handles of another kind, are refused without touching any
 * object. */
static void test_forged_handles(void) {
  thal_device_t *device = open_device();
  thal_semaphore_t *s = semaphore(device);
  thal_buffer_t *buffer = host_buffer(device, 64);
  uint64_t value = 0;
  EXPECT(thal_semaphore_query((thal_semaphore_t *)0x1234, &value), THAL_STATUS_INVALID_ARGUMENT,
         "argument 'semaphore' (0x1234) is never a handle of this library; a thal_semaphore_t was expected");
  EXPECT(thal_semaphore_release((thal_semaphore_t *)0x1234), THAL_STATUS_INVALID_ARGUMENT, "never a handle");
  EXPECT(thal_semaphore_retain((thal_semaphore_t *)UINTPTR_MAX), THAL_STATUS_INVALID_ARGUMENT, "never a handle");
  EXPECT(thal_semaphore_signal((thal_semaphore_t *)&value, 1), THAL_STATUS_INVALID_ARGUMENT, "never a handle");
  EXPECT(thal_semaphore_query((thal_semaphore_t *)buffer, &value), THAL_STATUS_INVALID_ARGUMENT,
         "is a thal_buffer_t, not a thal_semaphore_t");
  EXPECT(thal_semaphore_release((thal_semaphore_t *)buffer), THAL_STATUS_INVALID_ARGUMENT,
         "is a thal_buffer_t, not a thal_semaphore_t");
  EXPECT(thal_buffer_release((thal_buffer_t *)device), THAL_STATUS_INVALID_ARGUMENT,
         "is a thal_device_t, not a thal_buffer_t");
  EXPECT(thal_device_release((thal_device_t *)s), THAL_STATUS_INVALID_ARGUMENT,
         "is a thal_semaphore_t, not a thal_device_t");

  /* Arbitrary integers (a fixed-seed generator). */
  uint64_t x = 0x9e3779b97f4a7c15u;
  for (int i = 0; i < 10000; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    thal_semaphore_t *forged = (thal_semaphore_t *)(uintptr_t)x;
    EXPECT(thal_semaphore_query(forged, &value), THAL_STATUS_INVALID_ARGUMENT, "thal_semaphore_t");
    EXPECT(thal_semaphore_release(forged), THAL_STATUS_INVALID_ARGUMENT, "thal_semaphore_t");
  }
  /* The live handle with any one bit changed (no other semaphore is live here). */
  for (unsigned bit = 0; bit < 8 * sizeof(uintptr_t); bit++) {
    thal_semaphore_t *forged = (thal_semaphore_t *)((uintptr_t)s ^ ((uintptr_t)1 << bit));
    EXPECT(thal_semaphore_release(forged), THAL_STATUS_INVALID_ARGUMENT, "thal_semaphore_t");
  }

  /* The objects the forged calls named are untouched, each with its one reference. */
  OK(thal_semaphore_query(s, &value));
  CHECK(value == 0);
  OK(thal_buffer_size(buffer, &value));
  CHECK(value == 64);
  OK(thal_semaphore_release(s));
  OK(thal_buffer_release(buffer));
  OK(thal_device_release(device));
  STALE(thal_semaphore_query(s, &value), "thal_semaphore_t");
  STALE(thal_buffer_size(buffer, &value), "thal_buffer_t");
  STALE(thal_device_trim(device), "thal_device_t");
}

enum { SHARED_ROUNDS = 2000 };

/* Retains, uses and releases the shared semaphore, over and over. */
static void *retain_use_release(void *arg) {
  thal_semaphore_t *shared = (thal_semaphore_t *)arg;
  for (int i = 0; i < SHARED_ROUNDS; i++) {
    OK(thal_semaphore_retain(shared));
    uint64_t value = 0;
    OK(thal_semaphore_query(shared, &value));
    CHECK(value <= SHARED_ROUNDS);
    thal_status_t s = thal_semaphore_wait(shared, value, THAL_TIME_INFINITE_PAST);
    CHECK(s == NULL);
    OK(thal_semaphore_release(shared));
  }
  return NULL;
}

/* Signals the shared semaphore up to SHARED_ROUNDS. */
static void *signal_up(void *arg) {
  for (uint64_t v = 1; v <= SHARED_ROUNDS; v++) OK(thal_semaphore_signal((thal_semaphore_t *)arg, v));
  return NULL;
}

/* Waits for the shared semaphore's last value, holding a reference of its own. */
static void *wait_for_last(void *arg) {
  thal_semaphore_t *shared = (thal_semaphore_t *)arg;
  OK(thal_semaphore_retain(shared));
  OK(thal_semaphore_wait(shared, SHARED_ROUNDS, THAL_TIME_INFINITE_FUTURE));
  OK(thal_semaphore_release(shared));
  return NULL;
}

/* Creates and releases semaphores of its own, checking that each released one is refused while
 * other threads create and release theirs. */
static void *churn(void *arg) {
  (void)arg;
  thal_semaphore_t *stale = NULL;
  for (uint64_t i = 0; i < SHARED_ROUNDS; i++) {
    thal_semaphore_t *mine = NULL;
    OK(thal_semaphore_create_host(i, &mine));
    if (stale) {
      STALE(thal_semaphore_release(stale), "thal_semaphore_t");
      STALE(thal_semaphore_query(stale, &(uint64_t){0}), "thal_semaphore_t");
    }
    uint64_t value = 0;
    OK(thal_semaphore_query(mine, &value));
    CHECK(value == i);
    OK(thal_semaphore_release(mine));
    stale = mine;
  }
  return NULL;
}

/* Threads retain and release one semaphore while others signal it, wait on it and churn
 * semaphores of their own; afterwards it has exactly the one reference it started with. */
static void test_retain_release_from_threads(void) {
  enum { RETAINERS = 8, CHURNERS = 2 };
  thal_device_t *device = open_device();
  thal_semaphore_t *shared = semaphore(device);
  pthread_t retainers[RETAINERS], churners[CHURNERS], signaler, waiter;
  for (int i = 0; i < RETAINERS; i++) CHECK(pthread_create(&retainers[i], NULL, retain_use_release, shared) == 0);
  for (int i = 0; i < CHURNERS; i++) CHECK(pthread_create(&churners[i], NULL, churn, NULL) == 0);
  CHECK(pthread_create(&waiter, NULL, wait_for_last, shared) == 0);
  CHECK(pthread_create(&signaler, NULL, signal_up, shared) == 0);
  for (int i = 0; i < RETAINERS; i++) CHECK(pthread_join(retainers[i], NULL) == 0);
  for (int i = 0; i < CHURNERS; i++) CHECK(pthread_join(churners[i], NULL) == 0);
  CHECK(pthread_join(signaler, NULL) == 0);
  CHECK(pthread_join(waiter, NULL) == 0);
  uint64_t value = 0;
  OK(thal_semaphore_query(shared, &value));
  CHECK(value == SHARED_ROUNDS);
  OK(thal_semaphore_release(shared));
  STALE(thal_semaphore_query(shared, &value), "thal_semaphore_t");
  STALE(thal_semaphore_release(shared), "thal_semaphore_t");
  OK(thal_device_release(device));
}

static const struct {
  const char *name;
  void (*run)(void);
} TESTS[] = {
    {"statuses_and_handles", test_statuses_and_handles},
    {"two_queue_pipeline_out_of_order", test_two_queue_pipeline_out_of_order},
    {"failure_propagation", test_failure_propagation},
    {"host_call_calls_back_into_the_api", test_host_call_calls_back_into_the_api},
    {"teardown_from_a_callback", test_teardown_from_a_callback},
    {"binding_tables", test_binding_tables},
    {"waits_from_several_threads", test_waits_from_several_threads},
    {"subspans", test_subspans},
    {"host_mappings", test_host_mappings},
    {"device_info", test_device_info},
    {"profiling", test_profiling},
    {"spirv_executables", test_spirv_executables},
    {"collectives", test_collectives},
    {"transient_buffers_and_indirect_dispatch", test_transient_buffers_and_indirect_dispatch},
    {"stale_handles", test_stale_handles},
    {"forged_handles", test_forged_handles},
    {"retain_release_from_threads", test_retain_release_from_threads},
};

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s DRIVER KERNELS TEST|all\n", argv[0]);
    return 2;
  }
  driver_name = argv[1];
  kernels_path = argv[2];
  int ran = 0;
  for (size_t i = 0; i < sizeof TESTS / sizeof TESTS[0]; i++) {
    if (strcmp(argv[3], "all") != 0 && strcmp(argv[3], TESTS[i].name) != 0) continue;
    not_run[0] = 0;
    TESTS[i].run();
    if (not_run[0])
      printf("not run %s: %s\n", TESTS[i].name, not_run);
    else
      printf("ok %s\n", TESTS[i].name);
    ran++;
  }
  if (!ran) {
    fprintf(stderr, "no test named %s\n", argv[3]);
    return 2;
  }
  return 0;
}
