/* Native kernels for cpu-sim in C: the kernel library ABI of driver-cpu-sim/kernel-abi, as a C
 * runtime's code generator would emit it. Binding memory is touched with relaxed atomics, as the
 * ABI asks. */
#include <stdint.h>

typedef struct {
  uint32_t workgroup_id[3], workgroup_count[3], workgroup_size[3];
  const uint32_t *constants;
  uint32_t constant_count;
  uint8_t *const *bindings;
  const uint64_t *binding_lengths;
  uint32_t binding_count;
} KernelArgs;
typedef struct {
  const char *name;
  uint32_t workgroup_size[3];
  uint32_t binding_count, constant_count;
  int32_t (*function)(const KernelArgs *);
} KernelEntry;
typedef struct {
  uint32_t abi_version;
  uint32_t count;
  const KernelEntry *entries;
} KernelTable;

#define THREADS 64

/* fill_index(out; base, n): out[i] = base + i for the workgroup's 64 elements below n. */
static int32_t fill_index(const KernelArgs *args) {
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
static int32_t add(const KernelArgs *args) {
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

/* Always fails: its dispatch fails, and so do the execute's signals. */
static int32_t trap(const KernelArgs *args) {
  (void)args;
  return 7;
}

static const KernelEntry ENTRIES[] = {
    {"fill_index", {THREADS, 1, 1}, 1, 2, fill_index},
    {"add", {THREADS, 1, 1}, 2, 2, add},
    {"trap", {1, 1, 1}, 0, 0, trap},
};
static const KernelTable TABLE = {1, 3, ENTRIES};

const KernelTable *hal_cpu_sim_kernel_table(void) { return &TABLE; }
