/* The timeline HAL from C: open cpu-sim, write a buffer on one queue, copy it on another (submitted
 * first: it waits on a semaphore), read it back into host memory, run a host call, and print how a
 * failure reads. Build and run from the repository root (docs/c-api.md):
 *
 *   cargo build --release -p timeline-hal-c && cc -Ihal-c/include examples-c/hello.c \
 *     -Ltarget/release -lthal -Wl,-rpath,$PWD/target/release -o hello && ./hello
 *
 * or against the installed library (hal-c/install.sh), through pkg-config or CMake (CMakeLists.txt):
 *
 *   cc examples-c/hello.c $(pkg-config --cflags --libs thal) -o hello && ./hello
 */
#include <stdio.h>
#include <stdlib.h>
#include <thal.h>

/* Print a failed call's status and exit (a real runtime would hand the status up instead). */
static void check(thal_status_t status, const char *what) {
  if (!status) return;
  fprintf(stderr, "%s: %s: %s\n", what, thal_status_code_name(thal_status_code(status)), thal_status_message(status));
  thal_status_free(status);
  exit(1);
}

/* Runs on a HAL thread once the copy is done. */
static thal_status_t announce(void *user_data) {
  printf("host call: %s\n", (const char *)user_data);
  return NULL;
}

int main(void) {
  thal_device_t *device = NULL;
  thal_queue_t *q0 = NULL, *q1 = NULL;
  check(thal_device_create("cpu-sim", 0, &device), "open cpu-sim");
  check(thal_device_queue(device, 0, &q0), "queue 0");
  check(thal_device_queue(device, 1, &q1), "queue 1");

  thal_buffer_params_t params = {sizeof params, THAL_MEMORY_TYPE_DEVICE_LOCAL,
                                 THAL_BUFFER_USAGE_TRANSFER_SOURCE | THAL_BUFFER_USAGE_TRANSFER_TARGET};
  thal_buffer_t *a = NULL, *b = NULL;
  check(thal_buffer_allocate(device, &params, 16, &a), "allocate a");
  check(thal_buffer_allocate(device, &params, 16, &b), "allocate b");
  thal_semaphore_t *timeline = NULL;
  check(thal_semaphore_create(device, 0, &timeline), "semaphore");

  /* Semaphore lists are (count, semaphores[], values[]). */
  uint64_t one = 1, two = 2, three = 3;
  thal_semaphore_list_t at1 = {1, &timeline, &one}, at2 = {1, &timeline, &two}, at3 = {1, &timeline, &three};

  /* Submitted first, runs second: queue 1 copies a to b once queue 0's write signals 1. */
  check(thal_queue_copy(q1, &at1, a, 0, b, 0, 16, &at2), "copy");
  check(thal_queue_host_call(q1, &at2, announce, "the copy is done", &at3, 0), "host call");
  const char text[16] = "hello from C!";
  check(thal_queue_update(q0, NULL, text, sizeof text, a, 0, &at1), "update");

  thal_readback_t *readback = NULL;
  char back[16];
  check(thal_queue_read(q1, &at3, b, 0, sizeof back, NULL, &readback), "read");
  check(thal_readback_wait(readback, thal_now_ns() + 5000000000LL, back, sizeof back), "readback");
  printf("read back: %s\n", back);

  /* A failure is a value: it travels to everything waiting, code and message intact. */
  check(thal_semaphore_fail(timeline, thal_status_make(THAL_STATUS_CANCELLED, "the request was cancelled")), "fail");
  thal_status_t status = thal_semaphore_wait(timeline, 4, THAL_TIME_INFINITE_FUTURE);
  printf("wait after fail: %s: %s\n", thal_status_code_name(thal_status_code(status)), thal_status_message(status));
  thal_status_free(status);

  thal_readback_release(readback);
  thal_semaphore_release(timeline);
  thal_buffer_release(a);
  thal_buffer_release(b);
  thal_queue_release(q0);
  thal_queue_release(q1);
  thal_device_release(device);
  return 0;
}
