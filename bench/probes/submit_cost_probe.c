// Probe: what each driver call a submission is made of costs the host, enqueued back to back on one
// stream (a chain, as the quick bench's chained rows), and what the cheapest completion mark is.
// Build and run on the GPU machine: gcc -O2 submit_cost_probe.c -I/usr/local/cuda/include
// -L/usr/local/cuda/lib64 -lcuda -o sc && ./sc [ORDINAL].
// Each pattern: 7 rounds of 4000 ops after a warm-up, each round ended by a stream synchronize;
// printed: us per op over the whole round (median, range) and us per op spent in the enqueue
// calls alone (median).
#include "probe_common.h"
#include <string.h>
#define EVENTS 512
static CUfunction touch; static CUstream s; static CUevent ev[EVENTS]; static CUgraphExec ge, ge_rec;
static CUgraphNode rec_node; static CUdeviceptr out, word_dev; static unsigned value = 7; static void* tp[2];
static CUmemoryPool pool; static unsigned long long seq; static int next_ev;
static CUevent take(void) { CUevent e = ev[next_ev]; next_ev = (next_ev + 1) % EVENTS; return e; }
static void op(int pattern) {
  switch (pattern) {
    case 0: CK(cuGraphLaunch(ge, s)); break;
    case 1: CK(cuGraphLaunch(ge, s)); CK(cuEventRecord(take(), s)); break;
    case 2: CK(cuGraphExecEventRecordNodeSetEvent(ge_rec, rec_node, take())); CK(cuGraphLaunch(ge_rec, s)); break;
    case 3: CK(cuGraphLaunch(ge, s)); CK(cuStreamWriteValue64(s, word_dev, ++seq, 0)); break;
    case 4: CK(cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, s, tp, 0)); break;
    case 5: CK(cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, s, tp, 0)); CK(cuEventRecord(take(), s)); break;
    case 6: CK(cuEventRecord(take(), s)); break;
    case 7: { CUevent prev = ev[(next_ev + EVENTS - 1) % EVENTS]; CK(cuStreamWaitEvent(s, prev, 0));
              CK(cuGraphLaunch(ge, s)); CK(cuEventRecord(take(), s)); break; }
    case 8: { CUdeviceptr p; CK(cuMemAllocFromPoolAsync(&p, 4096, pool, s)); CK(cuMemFreeAsync(p, s)); break; }
    case 9: { CUdeviceptr p; CK(cuMemAllocFromPoolAsync(&p, 4096, pool, s)); CK(cuEventRecord(take(), s));
              CK(cuMemFreeAsync(p, s)); CK(cuEventRecord(take(), s)); break; }
    case 10: CK(cuEventQuery(ev[0])); break;
    case 11: CK(cuGraphLaunch(ge_rec, s)); break;
  }
}
static const char* NAMES[] = {
  "graph launch", "graph launch + record", "set record node's event + graph launch",
  "graph launch + write value64", "kernel launch", "kernel launch + record", "record alone",
  "wait last event + graph launch + record", "alloc async + free async (4 KiB)",
  "alloc + record + free + record", "query of a complete event", "graph launch (record node, same event)"};
static int cmp(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y; }
int main(int argc, char** argv) {
  int ord = argc > 1 ? atoi(argv[1]) : 0;
  CK(cuInit(0)); CUdevice dev; CK(cuDeviceGet(&dev, ord)); CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  char name[256]; CK(cuDeviceGetName(name, sizeof name, dev)); int drv; CK(cuDriverGetVersion(&drv));
  printf("device %d: %s, driver API %d\n", ord, name, drv);
  CUmodule mod; CK(cuModuleLoadData(&mod, TOUCH_PTX)); CK(cuModuleGetFunction(&touch, mod, "touch"));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < EVENTS; i++) CK(cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING));
  CK(cuMemAlloc(&out, 4096)); tp[0] = &out; tp[1] = &value;
  void* host; CK(cuMemHostAlloc(&host, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)); memset(host, 0, 64);
  CK(cuMemHostGetDevicePointer(&word_dev, host, 0));
  CK(cuDeviceGetDefaultMemPool(&pool, dev));
  CUgraph g; CK(cuGraphCreate(&g, 0));
  CUDA_KERNEL_NODE_PARAMS kp = {0}; kp.func = touch; kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1; kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1; kp.kernelParams = tp;
  CUgraphNode kn; CK(cuGraphAddKernelNode(&kn, g, 0, 0, &kp)); CK(cuGraphInstantiate(&ge, g, 0));
  CUgraph g2; CK(cuGraphCreate(&g2, 0)); CUgraphNode kn2;
  CK(cuGraphAddKernelNode(&kn2, g2, 0, 0, &kp)); CK(cuGraphAddEventRecordNode(&rec_node, g2, &kn2, 1, ev[0])); CK(cuGraphInstantiate(&ge_rec, g2, 0));
  CK(cuEventRecord(ev[0], s)); CK(cuStreamSynchronize(s));
  int order[] = {0, 1, 2, 11, 3, 7, 4, 5, 6, 10, 8, 9};
  int n = 4000;
  printf("%-44s %22s %10s\n", "pattern", "us/op (range)", "enqueue");
  for (int k = 0; k < (int)(sizeof order / sizeof order[0]); k++) {
    int p = order[k];
    double total[7], enq[7];
    for (int w = 0; w < 500; w++) op(p);
    CK(cuStreamSynchronize(s));
    for (int r = 0; r < 7; r++) {
      double a = now_us();
      for (int i = 0; i < n; i++) op(p);
      double b = now_us();
      CK(cuStreamSynchronize(s));
      double c = now_us();
      total[r] = (c - a) / n; enq[r] = (b - a) / n;
    }
    qsort(total, 7, sizeof total[0], cmp); qsort(enq, 7, sizeof enq[0], cmp);
    printf("%-44s %7.3f (%.3f-%.3f) %10.3f\n", NAMES[p], total[3], total[0], total[6], enq[3]);
  }
  return 0;
}
