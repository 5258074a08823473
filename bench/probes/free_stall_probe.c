// Probe: which driver calls made by one thread wait for a long kernel on another stream, and
// whether they stall a third thread's launches meanwhile. A 100 ms sleep kernel runs on stream S1;
// 5 ms later thread B makes call X on its own, while thread C launches a kernel + records an event
// on stream S2 every 0.1 ms for 20 ms (all streams non-blocking). Prints X's time and C's slowest
// launch + record. Build and run on the GPU machine: gcc -O2 free_stall_probe.c
// -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda -lpthread -o fs && ./fs
#include "probe_common.h"
#include <pthread.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static const char* PTX =
".version 7.8\n.target sm_80\n.address_size 64\n"
".visible .entry touch(.param .u64 out)\n{\n .reg .b64 %rd<3>;\n ld.param.u64 %rd1, [out];\n"
" cvta.to.global.u64 %rd2, %rd1;\n st.global.u32 [%rd2], 1;\n ret;\n}\n"
".visible .entry sleep_ns(.param .u64 ns)\n{\n .reg .b64 %rd<5>;\n .reg .pred %p;\n ld.param.u64 %rd1, [ns];\n"
" mov.u64 %rd2, %globaltimer;\nL: mov.u64 %rd3, %globaltimer;\n sub.u64 %rd4, %rd3, %rd2;\n"
" setp.lt.u64 %p, %rd4, %rd1;\n @%p bra L;\n ret;\n}\n";
static CUcontext ctx; static CUfunction touch, sleeper; static CUstream s1, s2, s3; static CUevent ev;
static CUdeviceptr out; static CUmemoryPool pool; static CUmodule spare_mod;
static void* spare_host; static CUdeviceptr spare_dev, spare_pool; static char hostbuf[4096];
static volatile int which; static double x_ms;
static const char* NAMES[] = {"nothing", "cuMemFree (cuMemAlloc)", "cuMemFreeHost", "cuModuleUnload",
  "cuMemFreeAsync (cuMemAlloc) on idle S3 + sync", "cuMemFreeAsync (pool) on idle S3 + S3 sync",
  "cuMemAlloc 1 MiB", "cuMemHostAlloc 1 MiB", "cuMemsetD8 (sync)", "cuMemcpyHtoD (sync)",
  "cuMemAllocFromPoolAsync on S3 + S3 sync", "cuEventCreate + Destroy", "cuStreamCreate + Destroy",
  "cuModuleLoadData", "cuMemHostUnregister (malloc + register)", "cuMemFreeAsync (host pool) on S3 + sync",
  "cuLibraryLoadData", "cuLibraryUnload", "cuMemFreeAsync (cuMemAlloc) on the legacy stream",
  "cuMemAllocFromPoolAsync (host pool) on S3 + sync", "cuLibraryLoadData + GetKernel + KernelGetFunction",
  "the same + first launch on S3", "cuGraphExecDestroy + cuGraphDestroy (1 kernel)"};
#define NX 23
static CUgraph spare_graph; static CUgraphExec spare_exec;
static CUmemoryPool host_pool; static int have_host_pool; static CUlibrary spare_lib;
static void prepare(int x) {
  switch (x) {
    case 1: case 4: CK(cuMemAlloc(&spare_dev, 1 << 20)); break;
    case 2: CK(cuMemHostAlloc(&spare_host, 1 << 20, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)); break;
    case 3: CK(cuModuleLoadData(&spare_mod, PTX)); break;
    case 5: CK(cuMemAllocFromPoolAsync(&spare_pool, 1 << 20, pool, s3)); CK(cuStreamSynchronize(s3)); break;
    case 8: case 9: CK(cuMemAlloc(&spare_dev, 4096)); break;
    case 14: spare_host = malloc(1 << 20); CK(cuMemHostRegister(spare_host, 1 << 20, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE)); break;
    case 15: if (have_host_pool) { CK(cuMemAllocFromPoolAsync(&spare_pool, 1 << 20, host_pool, s3)); CK(cuStreamSynchronize(s3)); ((volatile char*)spare_pool)[0] = 1; } break;
    case 17: CK(cuLibraryLoadData(&spare_lib, PTX, 0, 0, 0, 0, 0, 0)); break;
    case 18: CK(cuMemAlloc(&spare_dev, 1 << 20)); break;
    case 22: {
      CUDA_KERNEL_NODE_PARAMS p = {0}; void* kp[1] = {&out}; CUgraphNode node;
      p.func = touch; p.gridDimX = p.gridDimY = p.gridDimZ = 1; p.blockDimX = p.blockDimY = p.blockDimZ = 1; p.kernelParams = kp;
      CK(cuGraphCreate(&spare_graph, 0)); CK(cuGraphAddKernelNode(&node, spare_graph, 0, 0, &p));
      CK(cuGraphInstantiate(&spare_exec, spare_graph, 0)); CK(cuGraphLaunch(spare_exec, s2)); CK(cuStreamSynchronize(s2)); break; }
  }
}
static void call_x(int x) {
  switch (x) {
    case 1: CK(cuMemFree(spare_dev)); break;
    case 2: CK(cuMemFreeHost(spare_host)); break;
    case 3: CK(cuModuleUnload(spare_mod)); break;
    case 4: { CUresult r = cuMemFreeAsync(spare_dev, s3); if (r != CUDA_SUCCESS) { printf("  cuMemFreeAsync of cuMemAlloc memory: error %d\n", r); cuMemFree(spare_dev); } else CK(cuStreamSynchronize(s3)); break; }
    case 5: CK(cuMemFreeAsync(spare_pool, s3)); CK(cuStreamSynchronize(s3)); break;
    case 6: { CUdeviceptr p; CK(cuMemAlloc(&p, 1 << 20)); spare_dev = p; break; }
    case 7: { void* h; CK(cuMemHostAlloc(&h, 1 << 20, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)); spare_host = h; break; }
    case 8: CK(cuMemsetD8(spare_dev, 0, 4096)); break;
    case 9: CK(cuMemcpyHtoD(spare_dev, hostbuf, 4096)); break;
    case 10: { CUdeviceptr p; CK(cuMemAllocFromPoolAsync(&p, 1 << 20, pool, s3)); CK(cuStreamSynchronize(s3)); spare_pool = p; break; }
    case 11: { CUevent e; CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING)); CK(cuEventDestroy(e)); break; }
    case 12: { CUstream st; CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING)); CK(cuStreamDestroy(st)); break; }
    case 13: { CUmodule m; CK(cuModuleLoadData(&m, PTX)); spare_mod = m; break; }
    case 14: CK(cuMemHostUnregister(spare_host)); break;
    case 15: if (have_host_pool) { CK(cuMemFreeAsync(spare_pool, s3)); CK(cuStreamSynchronize(s3)); } break;
    case 16: { CUlibrary l; CK(cuLibraryLoadData(&l, PTX, 0, 0, 0, 0, 0, 0)); spare_lib = l; break; }
    case 17: CK(cuLibraryUnload(spare_lib)); break;
    case 18: CK(cuMemFreeAsync(spare_dev, 0)); break;
    case 19: if (have_host_pool) { CUdeviceptr p; CK(cuMemAllocFromPoolAsync(&p, 1 << 20, host_pool, s3)); CK(cuStreamSynchronize(s3)); spare_pool = p; } break;
    case 22: CK(cuGraphExecDestroy(spare_exec)); CK(cuGraphDestroy(spare_graph)); break;
    case 20: case 21: {
      CUlibrary l; CUkernel k; CUfunction f; CK(cuLibraryLoadData(&l, PTX, 0, 0, 0, 0, 0, 0)); spare_lib = l;
      CK(cuLibraryGetKernel(&k, l, "touch")); CK(cuKernelGetFunction(&f, k));
      if (x == 21) { void* kp[1] = {&out}; CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s3, kp, 0)); }
      break; }
  }
}
static void cleanup(int x) {  // after the sleep ended (the context is idle)
  switch (x) {
    case 6: case 8: case 9: CK(cuMemFree(spare_dev)); break;
    case 7: CK(cuMemFreeHost(spare_host)); break;
    case 10: CK(cuMemFreeAsync(spare_pool, s3)); CK(cuStreamSynchronize(s3)); break;
    case 13: CK(cuModuleUnload(spare_mod)); break;
    case 14: free(spare_host); break;
    case 16: case 20: case 21: CK(cuLibraryUnload(spare_lib)); break;
    case 19: if (have_host_pool) { CK(cuMemFreeAsync(spare_pool, s3)); CK(cuStreamSynchronize(s3)); } break;
  }
}
static void* thread_b(void* arg) {
  (void)arg; CK(cuCtxSetCurrent(ctx)); usleep(5000);
  double t = now(); call_x(which); x_ms = now() - t; return 0;
}
int main(void) {
  CK(cuInit(0)); CUdevice dev; CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CUmodule mod; CK(cuModuleLoadData(&mod, PTX)); CK(cuModuleGetFunction(&touch, mod, "touch"));
  CK(cuModuleGetFunction(&sleeper, mod, "sleep_ns"));
  CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING)); CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING)); CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  CK(cuDeviceGetDefaultMemPool(&pool, dev)); CK(cuMemAlloc(&out, 64));
  {
    CUmemPoolProps props = {0};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED; props.location.type = CU_MEM_LOCATION_TYPE_HOST; props.location.id = 0;
    CUresult r = cuMemPoolCreate(&host_pool, &props);
    have_host_pool = r == CUDA_SUCCESS;
    if (have_host_pool) {
      CUmemAccessDesc d = {0}; d.location.type = CU_MEM_LOCATION_TYPE_DEVICE; d.location.id = 0; d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      r = cuMemPoolSetAccess(host_pool, &d, 1); printf("host pool access for the device: %d\n", r);
      CUdeviceptr p; CK(cuMemAllocFromPoolAsync(&p, 4096, host_pool, s3)); CK(cuStreamSynchronize(s3));
      ((volatile unsigned*)p)[0] = 5; void* kp[1] = {&p};
      CK(cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, s3, kp, 0)); CK(cuStreamSynchronize(s3));
      printf("host pool: host wrote 5, kernel wrote %u\n", ((volatile unsigned*)p)[0]);
      CK(cuMemFreeAsync(p, s3)); CK(cuStreamSynchronize(s3));
    } else printf("no host memory pool: %d\n", r);
  }
  { size_t f0, f1, f2, t; CUdeviceptr big; CK(cuMemGetInfo(&f0, &t)); CK(cuMemAlloc(&big, 1ull << 32)); CK(cuMemGetInfo(&f1, &t));
    CK(cuMemFreeAsync(big, s3)); CK(cuMemGetInfo(&f2, &t));
    { size_t f3; CK(cuStreamSynchronize(s3)); CK(cuMemGetInfo(&f3, &t)); printf("after a sync of S3: free MiB %zu\n", f3 >> 20); }
    printf("cuMemAlloc 4 GiB, cuMemFreeAsync on idle S3 (no sync): free MiB %zu -> %zu -> %zu\n", f0 >> 20, f1 >> 20, f2 >> 20);
    double t0 = now(); int ok = 0;
    for (int i = 0; i < 64; i++) { if (cuMemAlloc(&big, 16ull << 30) != CUDA_SUCCESS) break; if (cuMemFreeAsync(big, s3) != CUDA_SUCCESS) break; ok++; }
    printf("64 x (cuMemAlloc 16 GiB + cuMemFreeAsync, no sync): %d done in %.1f ms\n", ok, now() - t0);
    CK(cuStreamSynchronize(s3)); t0 = now(); ok = 0;
    for (int i = 0; i < 64; i++) { if (cuMemAlloc(&big, 16ull << 30) != CUDA_SUCCESS) break; if (cuMemFreeAsync(big, s3) != CUDA_SUCCESS) break; CK(cuStreamSynchronize(s3)); ok++; }
    printf("64 x (cuMemAlloc 16 GiB + cuMemFreeAsync + sync): %d done in %.1f ms\n", ok, now() - t0); }
  void* tp[1] = {&out}; unsigned long long ns = 100000000ull; void* sp[1] = {&ns};
  printf("%-45s %10s %14s %14s\n", "call X (thread B, 5 ms into a 100 ms kernel)", "X ms", "C max launch ms", "C launches");
  for (int round = 0; round < 2; round++)
    for (int x = 0; x < NX; x++) {
      prepare(x); which = x; x_ms = 0;
      CK(cuLaunchKernel(sleeper, 1, 1, 1, 1, 1, 1, 0, s1, sp, 0));
      pthread_t b; pthread_create(&b, 0, thread_b, 0);
      usleep(6000);  // C starts 1 ms after B's call
      double worst = 0, start = now(); int n = 0;
      while (now() - start < 20.0) {
        double t = now(); CK(cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, s2, tp, 0)); CK(cuEventRecord(ev, s2));
        double d = now() - t; if (d > worst) worst = d; n++; usleep(100);
      }
      pthread_join(b, 0); CK(cuCtxSynchronize()); cleanup(x);
      printf("%-45s %10.3f %14.3f %14d\n", NAMES[x], x_ms, worst, n);
    }
  return 0;
}
