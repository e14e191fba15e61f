// elementwise: out[i] = alpha * x[i] + beta * y[i] (axpby) over n elements, computed in
// float for every element type. The candidate kernel and its reference; the manifest
// (elementwise.textproto) gives their launch geometry and arguments.
//
// Device code only, compiled by NVRTC with -DKTUNE_MAX_THREADS=... -DKTUNE_MIN_BLOCKS=...
#include "ktune/common.cuh"

namespace ktune_elementwise {

// out[k] = alpha * x[k] + beta * y[k] for the VEC elements at each pointer.
template <typename T, int VEC>
__device__ __forceinline__ void AxpbyVector(const ktune::AlignedVector<T, VEC>& xv,
                                            const ktune::AlignedVector<T, VEC>& yv,
                                            float alpha, float beta, T* __restrict__ out) {
  float xf[VEC];
  float yf[VEC];
  ktune::VectorToFloat(xv, xf);
  ktune::VectorToFloat(yv, yf);
  float of[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) of[k] = alpha * xf[k] + beta * yf[k];
  ktune::StoreVector<VEC>(out, ktune::FloatToVector<T>(of));
}

// One full tile: each of the BLOCK threads handles UNROLL vectors of VEC elements, the
// vectors u * BLOCK (u < UNROLL) after its first one, so every warp access is contiguous.
// All 2 * UNROLL loads are issued before any arithmetic. x, y, out point at the thread's
// first vector; the offsets from them are compile-time constants, so the unrolled accesses
// share one address register per operand.
template <typename T, int BLOCK, int VEC, int UNROLL>
__device__ __forceinline__ void AxpbyFullTile(const T* __restrict__ x,
                                              const T* __restrict__ y, T* __restrict__ out,
                                              float alpha, float beta) {
  using Vec = ktune::AlignedVector<T, VEC>;
  Vec xv[UNROLL];
  Vec yv[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    xv[u] = ktune::LoadVector<VEC>(x + u * BLOCK * VEC);
    yv[u] = ktune::LoadVector<VEC>(y + u * BLOCK * VEC);
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    AxpbyVector(xv[u], yv[u], alpha, beta, out + u * BLOCK * VEC);
  }
}

// The last, partial tile: the same vectors, but only the first `remaining` of the thread's
// (remaining may be <= 0), one at a time. Runs once per kernel, so it is kept simple: no
// value is defined on one path and not the other, which would make the compiler keep the
// full tile's vectors alive across the grid-stride loop.
template <typename T, int BLOCK, int VEC, int UNROLL>
__device__ __forceinline__ void AxpbyPartialTile(const T* __restrict__ x,
                                                 const T* __restrict__ y,
                                                 T* __restrict__ out, float alpha,
                                                 float beta, long long remaining) {
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    if (u * BLOCK < remaining) {
      AxpbyVector(ktune::LoadVector<VEC>(x + u * BLOCK * VEC),
                  ktune::LoadVector<VEC>(y + u * BLOCK * VEC), alpha, beta,
                  out + u * BLOCK * VEC);
    }
  }
}

}  // namespace ktune_elementwise

/// out[i] = alpha * x[i] + beta * y[i] for 0 <= i < n, in float.
///   T:           float, __half or __nv_bfloat16.
///   BLOCK:       threads per block (== blockDim.x); a multiple of 32, at most
///                KTUNE_MAX_THREADS.
///   VEC:         elements per vector access; 1, 2, 4 or 8 with VEC * sizeof(T) <= 16.
///   UNROLL:      vectors per thread per tile (loads in flight per operand); >= 1.
///   GRID_STRIDE: 0: one tile per block, the grid covers n (gridDim.x >= ceil(n / (BLOCK *
///                VEC * UNROLL))); 1: blocks loop over tiles with stride gridDim.x tiles, so
///                any gridDim.x >= 1 covers n.
/// The floor(n / VEC) full vectors go through vector accesses; the n % VEC < VEC trailing
/// elements are done one each by the first threads of block 0, so every n >= 1 works.
/// REQUIRES: x, y, out aligned to VEC * sizeof(T) bytes (cudaMalloc gives 256); out does not
/// overlap x or y (__restrict__); n >= 0.
template <typename T, int BLOCK, int VEC, int UNROLL, int GRID_STRIDE>
__global__ void KTUNE_LAUNCH_BOUNDS
    axpby_kernel(const T* __restrict__ x, const T* __restrict__ y, T* __restrict__ out,
                 float alpha, float beta, int n) {
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh
  static_assert(ktune::KernelParamsOk<T, BLOCK, VEC>());
  static_assert(UNROLL >= 1, "UNROLL must be at least 1");
  static_assert(GRID_STRIDE == 0 || GRID_STRIDE == 1, "GRID_STRIDE must be 0 or 1");

  constexpr long long kTileVecs = static_cast<long long>(BLOCK) * UNROLL;
  const long long num_vec = n / VEC;
  long long tile = blockIdx.x;
  const long long num_tiles = (num_vec + kTileVecs - 1) / kTileVecs;
  // Whether a tile is full is the same for the whole block, so only the last tile pays for
  // bounds checks.
  do {
    if (tile >= num_tiles) break;
    const long long offset = (tile * kTileVecs + threadIdx.x) * VEC;
    if ((tile + 1) * kTileVecs <= num_vec) {
      ktune_elementwise::AxpbyFullTile<T, BLOCK, VEC, UNROLL>(x + offset, y + offset,
                                                              out + offset, alpha, beta);
    } else {
      ktune_elementwise::AxpbyPartialTile<T, BLOCK, VEC, UNROLL>(
          x + offset, y + offset, out + offset, alpha, beta,
          num_vec - tile * kTileVecs - threadIdx.x);
    }
    tile += gridDim.x;
  } while (GRID_STRIDE);

  if constexpr (VEC > 1) {
    const long long i = num_vec * VEC + threadIdx.x;
    if (blockIdx.x == 0 && i < n) {
      out[i] = ktune::FromFloat<T>(alpha * ktune::ToFloat(x[i]) + beta * ktune::ToFloat(y[i]));
    }
  }
}

/// The reference: one thread per element, no vectors, no tuning. 32 threads per block
/// (manifest), so it fits under any KTUNE_MAX_THREADS a candidate is compiled with.
///   T: float, __half or __nv_bfloat16.
template <typename T>
__global__ void KTUNE_LAUNCH_BOUNDS
    axpby_reference(const T* __restrict__ x, const T* __restrict__ y, T* __restrict__ out,
                    float alpha, float beta, int n) {
  static_assert(ktune::kIsElementType<T>, "T must be float, __half or __nv_bfloat16");
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = ktune::FromFloat<T>(alpha * ktune::ToFloat(x[i]) + beta * ktune::ToFloat(y[i]));
  }
}
