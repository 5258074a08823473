// The kernels of kernels.c for CUDA, with the same ABI (one pointer per binding, then each 32-bit
// constant): `nvcc -ptx -arch=sm_80 kernels.cu -o kernels.ptx` (scripts/device/run.sh capi does it).
#include <stdint.h>

extern "C" __global__ void fill_index(uint32_t *out, uint32_t base, uint32_t n) {
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = base + i;
}

extern "C" __global__ void add(const uint32_t *a, uint32_t *b, uint32_t c, uint32_t n) {
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i] + c;
}

extern "C" __global__ void trap() { asm("trap;"); }
