// The tests' minimal template: out = 2 * x.
#include <cuda_bf16.h>

template <typename T, int BLOCK, int VEC>
__global__ void KTUNE_LAUNCH_BOUNDS
    tiny(const T* __restrict__ x, T* __restrict__ out, int n) {
  const long long base = (static_cast<long long>(blockIdx.x) * BLOCK + threadIdx.x) * VEC;
#pragma unroll
  for (int v = 0; v < VEC; ++v) {
    if (base + v < n) out[base + v] = static_cast<T>(2.0f * static_cast<float>(x[base + v]));
  }
}

template <typename T>
__global__ void KTUNE_LAUNCH_BOUNDS
    tiny_ref(const T* __restrict__ x, T* __restrict__ out, int n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<T>(2.0f * static_cast<float>(x[i]));
}
