// Does a host-to-host copy on a stream block the calling thread behind earlier stream work? Build and run on a
// GPU machine: nvcc -O2 -o h2h bench/probes/h2h_probe.cu -lcuda && ./h2h (results in docs/conformance.md).
#include <cuda.h>
#include <cstdio>
#include <chrono>
#define CK(x) do { CUresult r = (x); if (r) { const char* s; cuGetErrorString(r, &s); printf("%s: %s\n", #x, s); return 1; } } while (0)
__global__ void spin(unsigned long long ns) { unsigned long long s, n; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(s)); do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(n)); } while (n - s < ns); }
static double ms(std::chrono::steady_clock::time_point a) { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count(); }
int main() {
  CK(cuInit(0)); CUdevice d; CK(cuDeviceGet(&d, 0)); CUcontext c; CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
  CUstream st; CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  void *a, *b; size_t n = 1 << 16;
  CK(cuMemHostAlloc(&a, n, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)); CK(cuMemHostAlloc(&b, n, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr da, db; CK(cuMemHostGetDevicePointer(&da, a, 0)); CK(cuMemHostGetDevicePointer(&db, b, 0));
  printf("host %p dev %llx same=%d\n", a, (unsigned long long)da, (void*)da == a);
  CUgraph g; CK(cuGraphCreate(&g, 0)); CUgraphNode node; CUDA_MEMCPY3D m = {};
  m.srcMemoryType = CU_MEMORYTYPE_HOST; m.srcHost = a; m.dstMemoryType = CU_MEMORYTYPE_HOST; m.dstHost = b; m.WidthInBytes = n; m.Height = 1; m.Depth = 1;
  CK(cuGraphAddMemcpyNode(&node, g, nullptr, 0, &m, c)); CUgraphExec ge; CK(cuGraphInstantiate(&ge, g, 0));
  for (int mode = 0; mode < 5; mode++) {
    ((char*)a)[0] = 7 + mode; ((char*)b)[0] = 0;
    spin<<<1, 1, 0, (cudaStream_t)st>>>(200000000ull);  // 200 ms
    auto t = std::chrono::steady_clock::now();
    const char* what = "";
    if (mode == 0) { what = "cuMemcpyAsync(unified)"; CK(cuMemcpyAsync((CUdeviceptr)b, (CUdeviceptr)a, n, st)); }
    if (mode == 1) { what = "cuMemcpyDtoDAsync(mapped)"; CK(cuMemcpyDtoDAsync(db, da, n, st)); }
    if (mode == 2) { what = "cuMemcpy2DAsync(DEVICE types)"; CUDA_MEMCPY2D p = {}; p.srcMemoryType = CU_MEMORYTYPE_DEVICE; p.srcDevice = da; p.dstMemoryType = CU_MEMORYTYPE_DEVICE; p.dstDevice = db; p.WidthInBytes = n; p.Height = 1; CK(cuMemcpy2DAsync(&p, st)); }
    if (mode == 4) { what = "cuGraphLaunch(H2H memcpy node)"; CK(cuGraphLaunch(ge, st)); }
    if (mode == 3) { what = "cuMemsetD32Async(host)"; CK(cuMemsetD32Async(db, 0x01010101, n / 4, st)); }
    double call = ms(t);
    CK(cuStreamSynchronize(st));
    printf("%-32s call %.3f ms, total %.1f ms, b[0]=%d\n", what, call, ms(t), ((char*)b)[0]);
  }
  return 0;
}
