// The C entry point of the CTS test binary: `tests/iree_cts.rs` calls it once, from its `main`, after
// it has registered whichever drivers it brings (ours, with the `thal` feature) into IREE's default
// driver registry.

#ifndef THAL_IREE_CTS_ENTRY_H_
#define THAL_IREE_CTS_ENTRY_H_

#ifdef __cplusplus
extern "C" {
#endif

// What to test. Every string is NUL-terminated and borrowed for the call only; NULL means "the default".
typedef struct thal_iree_cts_options_t {
  // The IREE driver whose default device every case runs on ("local-sync", "thal-cpu-sim", ...).
  const char* driver_name;
  // Comma-separated capability tags (see backends.cc), replacing the driver's own list.
  const char* tags;
  // The executable format the device loads (default: "embedded-elf-" IREE_ARCH).
  const char* executable_format;
  // A directory of compiled CTS executables (`executable_test.bin`, ...) in that format. NULL: the
  // executable suites are not instantiated at all.
  const char* testdata_dir;
} thal_iree_cts_options_t;

// Called once per gtest test suite that ran, after the run, with its case counts.
typedef void (*thal_iree_cts_suite_report_fn)(void* user_data, const char* suite_name, int passed, int failed,
                                              int skipped);

// Registers IREE's built-in drivers, the backend for `options->driver_name`, instantiates the suites,
// runs GoogleTest with `argc`/`argv` (gtest and IREE flags are honoured) and reports per suite.
// Returns 0 when every case that ran passed or skipped, 1 when one failed, 2 when the run could not
// start (unknown driver, unreadable testdata). Must be called at most once per process.
int thal_iree_cts_main(const thal_iree_cts_options_t* options, int argc, char** argv,
                       thal_iree_cts_suite_report_fn report, void* user_data);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // THAL_IREE_CTS_ENTRY_H_
