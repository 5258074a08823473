/* The cpu-sim driver's native kernel ABI, for kernel libraries written in C. Written by hand to
 * match the #[repr(C)] types of driver-cpu-sim/kernel-abi (cpu_sim_kernel_abi); the C suite checks
 * every size and offset against them (hal-c/tests/c_suite.rs). See docs/c-api.md.
 *
 * A kernel library is a shared library that exports hal_cpu_sim_kernel_table; thal_executable_load
 * with THAL_EXECUTABLE_KIND_SHARED_LIBRARY on cpu-sim loads it:
 *
 *   static int32_t fill(const thal_kernel_args_t *args) { ... return 0; }
 *   static const thal_kernel_entry_t ENTRIES[] = {{"fill", {64, 1, 1}, 1, 2, fill}};
 *   static const thal_kernel_table_t TABLE = {THAL_KERNEL_ABI_VERSION, 1, ENTRIES};
 *   THAL_KERNEL_EXPORT const thal_kernel_table_t *hal_cpu_sim_kernel_table(void) { return &TABLE; }
 */
#ifndef THAL_KERNEL_H
#define THAL_KERNEL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes (a table states it in abi_version). Version 2 adds
 * set_error; cpu-sim also loads version-1 tables, whose functions do not use it. */
#define THAL_KERNEL_ABI_VERSION 2

/* The name of the symbol a kernel library exports. */
#define THAL_KERNEL_TABLE_SYMBOL "hal_cpu_sim_kernel_table"

/* The longest failure message (in bytes) cpu-sim keeps from set_error; the rest is cut. */
#define THAL_KERNEL_MAX_ERROR_MESSAGE 4096

/* Makes hal_cpu_sim_kernel_table visible when the library is built with -fvisibility=hidden. */
#if defined(__GNUC__) || defined(__clang__)
#define THAL_KERNEL_EXPORT __attribute__((visibility("default")))
#else
#define THAL_KERNEL_EXPORT
#endif

/* What one call of a kernel function receives: one workgroup of a dispatch. Valid only during the
 * call; workgroups of one dispatch may run at once on several threads. */
typedef struct thal_kernel_args_t {
  uint32_t workgroup_id[3];    /* this workgroup's id in the grid */
  uint32_t workgroup_count[3]; /* the grid size */
  uint32_t workgroup_size[3];  /* the entry point's declared workgroup size */
  const uint32_t *constants;   /* constant_count 32-bit constants */
  uint32_t constant_count;
  /* binding_count buffers: binding_lengths[i] bytes at bindings[i]. Memory other workgroups, the
   * host or the driver may touch at once is accessed with __atomic_load_n/__atomic_store_n and
   * __ATOMIC_RELAXED. */
  uint8_t *const *bindings;
  const uint64_t *binding_lengths;
  uint32_t binding_count;
  /* Version 2. Sets this call's failure message (a NUL-terminated string, copied; the last one set
   * counts): call args->set_error(args, "...") on the calling thread, then return nonzero. The
   * dispatch's error reads "kernel '<name>' failed (status <s>): <message>". */
  void (*set_error)(const struct thal_kernel_args_t *args, const char *message);
  void *error_context; /* cpu-sim's state for set_error: leave it alone */
} thal_kernel_args_t;

/* A kernel: runs one workgroup; returns 0 on success, anything else fails the dispatch. It must not
 * unwind (no C++ exception may leave it). */
typedef int32_t (*thal_kernel_fn)(const thal_kernel_args_t *args);

/* One kernel of a table. */
typedef struct thal_kernel_entry_t {
  const char *name;           /* NUL-terminated UTF-8, unique in its table */
  uint32_t workgroup_size[3]; /* threads per workgroup in x, y, z; each nonzero */
  uint32_t binding_count;     /* buffer bindings a dispatch passes */
  uint32_t constant_count;    /* 32-bit constants a dispatch passes */
  thal_kernel_fn function;    /* never NULL */
} thal_kernel_entry_t;

/* The table a kernel library exports; it, its entries and their names stay valid and unchanged
 * while the library is loaded. */
typedef struct thal_kernel_table_t {
  uint32_t abi_version; /* THAL_KERNEL_ABI_VERSION (or 1 for functions that do not use set_error) */
  uint32_t count;       /* number of entries */
  const thal_kernel_entry_t *entries;
} thal_kernel_table_t;

/* The one symbol a kernel library exports. */
const thal_kernel_table_t *hal_cpu_sim_kernel_table(void);

#ifdef __cplusplus
}
#endif

#endif /* THAL_KERNEL_H */
