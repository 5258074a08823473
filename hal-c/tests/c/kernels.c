/* Native kernels for cpu-sim in C: the kernel library ABI of thal_kernel.h, as a C runtime's code
 * generator would emit it. Binding memory is touched with relaxed atomics, as the ABI asks. */
#include <thal_kernel.h>

#define THREADS 64

/* fill_index(out; base, n): out[i] = base + i for the workgroup's 64 elements below n. */
static int32_t fill_index(const thal_kernel_args_t *args) {
  uint32_t *out = (uint32_t *)args->bindings[0];
  uint64_t n = args->constants[1];
  if (args->binding_lengths[0] / 4 < n) return 1;
  for (uint32_t t = 0; t < THREADS; t++) {
    uint64_t i = (uint64_t)args->workgroup_id[0] * THREADS + t;
    if (i < n) __atomic_store_n(&out[i], args->constants[0] + (uint32_t)i, __ATOMIC_RELAXED);
  }
  return 0;
}

/* add(a, b; c, n): b[i] = a[i] + c for the workgroup's 64 elements below n. */
static int32_t add(const thal_kernel_args_t *args) {
  const uint32_t *a = (const uint32_t *)args->bindings[0];
  uint32_t *b = (uint32_t *)args->bindings[1];
  uint64_t n = args->constants[1];
  if (args->binding_lengths[0] / 4 < n || args->binding_lengths[1] / 4 < n) return 1;
  for (uint32_t t = 0; t < THREADS; t++) {
    uint64_t i = (uint64_t)args->workgroup_id[0] * THREADS + t;
    if (i < n) {
      uint32_t v = __atomic_load_n(&a[i], __ATOMIC_RELAXED);
      __atomic_store_n(&b[i], v + args->constants[0], __ATOMIC_RELAXED);
    }
  }
  return 0;
}

/* Always fails, with a message: its dispatch fails, and so do the execute's signals. */
static int32_t trap(const thal_kernel_args_t *args) {
  args->set_error(args, "the trap was hit");
  return 7;
}

static const thal_kernel_entry_t ENTRIES[] = {
    {"fill_index", {THREADS, 1, 1}, 1, 2, fill_index},
    {"add", {THREADS, 1, 1}, 2, 2, add},
    {"trap", {1, 1, 1}, 0, 0, trap},
};
static const thal_kernel_table_t TABLE = {THAL_KERNEL_ABI_VERSION, 3, ENTRIES};

THAL_KERNEL_EXPORT const thal_kernel_table_t *hal_cpu_sim_kernel_table(void) { return &TABLE; }
