// Probe: what a one-dispatch round trip (enqueue, then a host wait) costs by how it is enqueued and
// how the host learns of completion, alone and beside a thread querying another event every 2 us.
// Build and run on the GPU machine (bench/probes/README.md): gcc -O2 round_trip_probe.c
// -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda -lpthread -o rt && ./rt [ORDINAL].
// us per round trip, medians of 5 rounds of 3000.
#include "probe_common.h"
#include <pthread.h>
#include <string.h>
static CUcontext ctx; static CUfunction touch; static CUstream s; static CUevent ev, ev_other; static CUgraphExec ge, ge_rec;
static CUdeviceptr out; static unsigned value = 7; static void* tp[2];
static volatile unsigned long long* word; static CUdeviceptr word_dev; static unsigned long long seq;
static volatile int stop_poller; static volatile int poll_mode;
static void* poller(void* arg) {
  (void)arg; CK(cuCtxSetCurrent(ctx));
  while (!stop_poller) {
    if (poll_mode == 1) { cuEventQuery(ev_other); }
    double t = now_us(); while (now_us() - t < 2.0) {}
  }
  return 0;
}
static void launch(int graph) { if (graph) CK(cuGraphLaunch(ge, s)); else CK(cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, s, tp, 0)); }
static void spin_query(CUevent e) { CUresult r; while ((r = cuEventQuery(e)) == CUDA_ERROR_NOT_READY) {} CK(r); }
static double run(int pattern, int n) {
  double a = now_us();
  for (int i = 0; i < n; i++) {
    switch (pattern) {
      case 0: launch(0); CK(cuStreamSynchronize(s)); break;
      case 1: launch(1); CK(cuStreamSynchronize(s)); break;
      case 2: launch(0); CK(cuEventRecord(ev, s)); CK(cuEventSynchronize(ev)); break;
      case 3: launch(1); CK(cuEventRecord(ev, s)); CK(cuEventSynchronize(ev)); break;
      case 4: launch(0); CK(cuEventRecord(ev, s)); spin_query(ev); break;
      case 5: launch(1); CK(cuEventRecord(ev, s)); spin_query(ev); break;
      case 6: CK(cuGraphLaunch(ge_rec, s)); CK(cuEventSynchronize(ev)); break;
      case 7: launch(1); seq++; CK(cuStreamWriteValue64(s, word_dev, seq, 0)); while (*word < seq) {} break;
      case 8: launch(1); CK(cuEventRecord(ev, s)); CK(cuStreamSynchronize(s)); break;
      case 9: launch(1); CK(cuEventRecord(ev, s)); seq++; CK(cuStreamWriteValue64(s, word_dev, seq, 0)); while (*word < seq) {} break;
    }
  }
  return (now_us() - a) / n;
}
static const char* NAMES[] = {"launch + stream sync", "graph + stream sync", "launch + record + event sync",
  "graph + record + event sync", "launch + record + spin query", "graph + record + spin query",
  "graph with record node + event sync", "graph + write word + spin memory", "graph + record + stream sync",
  "graph + record + write word + spin memory"};
static int cmp(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y; }
int main(int argc, char** argv) {
  int ord = argc > 1 ? atoi(argv[1]) : 0;
  CK(cuInit(0)); CUdevice dev; CK(cuDeviceGet(&dev, ord)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CUmodule mod; CK(cuModuleLoadData(&mod, TOUCH_PTX)); CK(cuModuleGetFunction(&touch, mod, "touch"));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING)); CK(cuEventCreate(&ev_other, CU_EVENT_DISABLE_TIMING));
  CK(cuMemAlloc(&out, 4096)); tp[0] = &out; tp[1] = &value;
  void* host; CK(cuMemHostAlloc(&host, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)); memset(host, 0, 64);
  word = host; CK(cuMemHostGetDevicePointer(&word_dev, host, 0));
  CUgraph g; CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED)); launch(0); CK(cuStreamEndCapture(s, &g)); CK(cuGraphInstantiate(&ge, g, 0));
  CUgraph g2; CK(cuGraphCreate(&g2, 0));
  CUDA_KERNEL_NODE_PARAMS kp = {0}; kp.func = touch; kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1; kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1; kp.kernelParams = tp;
  CUgraphNode kn, rn; CK(cuGraphAddKernelNode(&kn, g2, 0, 0, &kp)); CK(cuGraphAddEventRecordNode(&rn, g2, &kn, 1, ev)); CK(cuGraphInstantiate(&ge_rec, g2, 0));
  CK(cuEventRecord(ev_other, s)); CK(cuStreamSynchronize(s));
  pthread_t th; int with_poller = 0;
  for (int phase = 0; phase < 2; phase++) {
    if (phase == 1) { poll_mode = 1; stop_poller = 0; pthread_create(&th, 0, poller, 0); with_poller = 1; }
    printf("%s\n", phase ? "-- with a second thread querying another event every 2 us" : "-- alone");
    for (int p = 0; p < 10; p++) {
      double r[5]; run(p, 300);
      for (int k = 0; k < 5; k++) r[k] = run(p, 3000);
      qsort(r, 5, sizeof r[0], cmp);
      printf("%-44s %7.2f (%.2f-%.2f)\n", NAMES[p], r[2], r[0], r[4]);
    }
  }
  if (with_poller) { stop_poller = 1; pthread_join(th, 0); }
  return 0;
}
