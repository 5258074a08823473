// Probe: what a device-side wait for a host-written word (`cuStreamWaitValue64` on pinned host
// memory, CUDA's analogue of a host-signalled Vulkan timeline) would give a semaphore only the host
// signals, and what it risks.
// 1. Release latency: a one-kernel graph enqueued behind the wait, then the host writes the word and
//    spins on an event recorded after the kernel; against the host launching the graph only after
//    its "signal" (what the HAL does without a device-side gate). us, median and range of 2000.
// 2. Whether a stream blocked in such a wait holds back other streams: with N non-blocking streams
//    (N up to 64), stream 0 waits for the word, and every other stream launches the kernel and
//    records an event; after 200 ms, how many of those events are still not complete (work held
//    back behind a wait it does not depend on). CUDA maps streams onto a limited number of hardware
//    queues (CUDA_DEVICE_MAX_CONNECTIONS, printed), so such a hold-back would turn a host signal
//    that depends on another stream's work into a deadlock.
// Build and run on the GPU machine (bench/probes/README.md): gcc -O2 host_gate_probe.c
// -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda -o hg && ./hg [ORDINAL].
#include "probe_common.h"
#include <string.h>

#define ROUNDS 2000
#define MAX_STREAMS 64

static CUfunction touch; static CUdeviceptr out; static unsigned value = 7; static void* tp[2];
static volatile unsigned long long* word; static CUdeviceptr word_dev;

static int cmp(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y; }
static void spin_us(double us) { double t = now_us(); while (now_us() - t < us) {} }
static void spin_query(CUevent e) { CUresult r; while ((r = cuEventQuery(e)) == CUDA_ERROR_NOT_READY) {} CK(r); }
static void report(const char* name, double* t) {
  qsort(t, ROUNDS, sizeof *t, cmp);
  printf("%-58s median %6.2f us  p10 %6.2f  p90 %6.2f\n", name, t[ROUNDS / 2], t[ROUNDS / 10], t[ROUNDS * 9 / 10]);
}

int main(int argc, char** argv) {
  int ord = argc > 1 ? atoi(argv[1]) : 0;
  CUcontext ctx; CUdevice dev;
  CK(cuInit(0)); CK(cuDeviceGet(&dev, ord)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  const char* conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  printf("CUDA_DEVICE_MAX_CONNECTIONS=%s\n", conn ? conn : "(unset: the driver's default)");
  CUmodule mod; CK(cuModuleLoadData(&mod, TOUCH_PTX)); CK(cuModuleGetFunction(&touch, mod, "touch"));
  CK(cuMemAlloc(&out, 4096)); tp[0] = &out; tp[1] = &value;
  void* host; CK(cuMemHostAlloc(&host, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)); memset(host, 0, 64);
  word = host; CK(cuMemHostGetDevicePointer(&word_dev, host, 0));

  CUstream s[MAX_STREAMS]; CUevent ev[MAX_STREAMS];
  for (int i = 0; i < MAX_STREAMS; i++) { CK(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING)); CK(cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING)); }
  CUgraph g; CUgraphExec ge;
  CK(cuStreamBeginCapture(s[0], CU_STREAM_CAPTURE_MODE_RELAXED));
  CK(cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, s[0], tp, 0));
  CK(cuStreamEndCapture(s[0], &g)); CK(cuGraphInstantiate(&ge, g, 0));
  CK(cuGraphLaunch(ge, s[0])); CK(cuStreamSynchronize(s[0]));

  // 1. Release latency.
  static double gated[ROUNDS], launched[ROUNDS];
  unsigned long long seq = 0;
  for (int i = 0; i < ROUNDS; i++) {
    seq++;
    CK(cuStreamWaitValue64(s[0], word_dev, seq, CU_STREAM_WAIT_VALUE_GEQ));
    CK(cuGraphLaunch(ge, s[0])); CK(cuEventRecord(ev[0], s[0]));
    spin_us(20);  // the wait is on the device, polling the word
    double t = now_us();
    __atomic_store_n(word, seq, __ATOMIC_RELEASE);
    spin_query(ev[0]);
    gated[i] = now_us() - t;
  }
  for (int i = 0; i < ROUNDS; i++) {
    spin_us(20);
    double t = now_us();
    CK(cuGraphLaunch(ge, s[0])); CK(cuEventRecord(ev[0], s[0]));
    spin_query(ev[0]);
    launched[i] = now_us() - t;
  }
  report("host writes the word; graph waited on the device", gated);
  report("host launches the graph after its signal", launched);

  // 2. Hold-back of unrelated streams.
  int counts[] = {2, 4, 8, 9, 16, 17, 32, 33, 64};
  for (unsigned c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    int n = counts[c];
    seq++;
    CK(cuStreamWaitValue64(s[0], word_dev, seq, CU_STREAM_WAIT_VALUE_GEQ));
    for (int j = 1; j < n; j++) { CK(cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, s[j], tp, 0)); CK(cuEventRecord(ev[j], s[j])); }
    double t = now_us();
    int held = n - 1;
    while (held > 0 && now_us() - t < 200000) {
      held = 0;
      for (int j = 1; j < n; j++) { CUresult r = cuEventQuery(ev[j]); if (r == CUDA_ERROR_NOT_READY) held++; else CK(r); }
    }
    __atomic_store_n(word, seq, __ATOMIC_RELEASE);
    for (int j = 0; j < n; j++) CK(cuStreamSynchronize(s[j]));
    printf("%2d streams, stream 0 waiting on the word: %2d of the other %2d held back after 200 ms\n", n, held, n - 1);
  }
  return 0;
}
