// What the C probes in this folder share: a check that prints the failing driver call and exits,
// a microsecond clock, and the `touch(out, value)` kernel (stores `value` at `out`) as PTX.
#ifndef PROBE_COMMON_H
#define PROBE_COMMON_H
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s_; cuGetErrorString(r_, &s_); printf("FAIL %s: %d %s (line %d)\n", #x, r_, s_, __LINE__); exit(1);} } while (0)
static inline double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static const char* TOUCH_PTX =
".version 7.8\n.target sm_80\n.address_size 64\n"
".visible .entry touch(.param .u64 out, .param .u32 value)\n{\n"
" .reg .b64 %rd<3>;\n .reg .b32 %r<2>;\n"
" ld.param.u64 %rd1, [out];\n ld.param.u32 %r1, [value];\n cvta.to.global.u64 %rd2, %rd1;\n"
" st.global.u32 [%rd2], %r1;\n ret;\n}\n";
#endif
