// A template whose candidates fail in every way a kernel can, for the GPU tests: the tuner
// must record each one with its outcome, keep the worker alive, and still pick MODE 0.
//
// MODE: 0 correct (out = 2 * x), 1 out-of-bounds write, 2 __trap(), 3 misaligned 16-byte
// load, 4 endless loop, 5 launched with more threads than its launch bounds allow,
// 6 a wrong result.

template <int MODE>
__global__ void __launch_bounds__(MODE == 5 ? 64 : KTUNE_MAX_THREADS, KTUNE_MIN_BLOCKS)
    faulty(const float* __restrict__ x, float* __restrict__ out, int n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (MODE == 1 && i == 0) {
    // Far past any allocation: the driver reports CUDA_ERROR_ILLEGAL_ADDRESS.
    out[1ll << 40] = 1.0f;
  }
  if (MODE == 2 && i == 0) __trap();
  if (MODE == 3 && i == 0) {
    // x + 1 is 4-byte aligned, not 16: CUDA_ERROR_MISALIGNED_ADDRESS.
    const float4 v = *reinterpret_cast<const float4*>(x + 1);
    out[0] = v.x + v.y + v.z + v.w;
  }
  if (MODE == 4) {
    // Inputs lie in [-1, 1), so this never ends; volatile keeps the compiler from
    // proving that.
    const volatile float* vx = x;
    while (vx[0] != 12345.0f) {
    }
  }
  if (i < n) out[i] = (MODE == 6 ? 2.01f : 2.0f) * x[i];
}

__global__ void KTUNE_LAUNCH_BOUNDS
    faulty_reference(const float* __restrict__ x, float* __restrict__ out, int n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * x[i];
}
