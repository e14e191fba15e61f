// rmsnorm: out[t, i] = x[t, i] * rsqrt(mean_i(x[t, :]^2) + eps) * weight[i] over a
// row-major [tokens, hidden] matrix, with float accumulation for every element type. The
// candidate kernel and its reference; the manifest (rmsnorm.textproto) gives their launch
// geometry and arguments.
//
// Device code only, compiled by NVRTC with -DKTUNE_MAX_THREADS=... -DKTUNE_MIN_BLOCKS=...
#include "ktune/common.cuh"

namespace ktune_rmsnorm {

/// Vectors each thread keeps in flight per pass when the row is not cached (CACHE == 0).
constexpr int kUncachedUnroll = 4;
static_assert(kUncachedUnroll >= 2, "kUncachedUnroll must be at least 2 (the tail is kU - 1)");

// The row's sum of squares from each thread's partial; every thread of the row gets the
// same value.
template <int BLOCK, int ROWS_PER_WARP>
__device__ __forceinline__ float RowSum(float partial) {
  if constexpr (ROWS_PER_WARP) {
    return ktune::WarpReduceSum(partial);
  } else {
    return ktune::BlockReduceSum<BLOCK>(partial);
  }
}

template <typename T, int VEC>
__device__ __forceinline__ float SumOfSquares(const ktune::AlignedVector<T, VEC>& v,
                                              float acc) {
  float f[VEC];
  ktune::VectorToFloat(v, f);
#pragma unroll
  for (int k = 0; k < VEC; ++k) acc = fmaf(f[k], f[k], acc);
  return acc;
}

// out = x * inv_rms * w elementwise, in this order (the reference's).
template <typename T, int VEC>
__device__ __forceinline__ ktune::AlignedVector<T, VEC> Scale(
    const ktune::AlignedVector<T, VEC>& xv, const ktune::AlignedVector<T, VEC>& wv,
    float inv_rms) {
  float xf[VEC];
  float wf[VEC];
  ktune::VectorToFloat(xv, xf);
  ktune::VectorToFloat(wv, wf);
  float of[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) of[k] = xf[k] * inv_rms * wf[k];
  return ktune::FloatToVector<T>(of);
}

// Loads the row vectors first + u * STRIDE (u < N) that are below num_vec into v[u], and
// zeros for the others (which add nothing to a sum of squares). All N loads are issued
// before any is used, and every v[u] is defined on every path, so nothing stays live
// across an enclosing loop.
template <int N, int STRIDE, int VEC, typename T>
__device__ __forceinline__ void LoadRowVectors(const T* __restrict__ row, int first,
                                               int num_vec,
                                               ktune::AlignedVector<T, VEC> (&v)[N]) {
#pragma unroll
  for (int u = 0; u < N; ++u) {
    const int idx = first + u * STRIDE;
    v[u] = idx < num_vec ? ktune::LoadVector<VEC>(row + idx * VEC)
                         : ktune::AlignedVector<T, VEC>{};
  }
}

// out = x * inv_rms * weight for the row vectors first + u * STRIDE (u < N) below num_vec,
// x already in registers. The weight (hidden elements, read by every row) is mostly an L1/L2
// hit; it is loaded per vector and the compiler schedules those loads, rather than forcing
// all N into registers at once beside the N of x.
template <int N, int STRIDE, int VEC, typename T>
__device__ __forceinline__ void ScaleRowVectors(const ktune::AlignedVector<T, VEC> (&x)[N],
                                                const T* __restrict__ weight,
                                                T* __restrict__ out_row, int first,
                                                int num_vec, float inv_rms) {
#pragma unroll
  for (int u = 0; u < N; ++u) {
    const int idx = first + u * STRIDE;
    if (idx < num_vec) {
      ktune::StoreVector<VEC>(out_row + idx * VEC,
                              Scale(x[u], ktune::LoadVector<VEC>(weight + idx * VEC), inv_rms));
    }
  }
}

}  // namespace ktune_rmsnorm

/// RMSNorm of each row of x: out[r, i] = x[r, i] * rsqrt(sum_i(x[r, i]^2) / hidden + eps) *
/// weight[i], float accumulation, one pass over x from DRAM when CACHE > 0.
///   T:             float, __half or __nv_bfloat16.
///   BLOCK:         threads per block (== blockDim.x); a multiple of 32 with BLOCK / 32 a
///                  power of two, at most KTUNE_MAX_THREADS.
///   VEC:           elements per vector access; 1, 2, 4 or 8 with VEC * sizeof(T) <= 16.
///   ROWS_PER_WARP: 0: one row per block, its BLOCK threads reduce it (grid = tokens);
///                  1: one row per warp, BLOCK / 32 rows per block, warp-shuffle reduction
///                  only (grid = ceil(tokens / (BLOCK / 32))).
///   CACHE:         0: the row is read twice (sum of squares, then scale; the second read
///                  mostly hits L2); C > 0: each thread keeps its C vectors of the row in
///                  registers between the passes, so x is read once. Needs
///                  hidden <= threads_per_row * VEC * C (threads_per_row = 32 or BLOCK).
/// REQUIRES: hidden % VEC == 0 (so every row start is VEC-aligned); x, weight, out aligned to
/// VEC * sizeof(T) bytes (cudaMalloc gives 256); out does not overlap x or weight
/// (__restrict__); 1 <= hidden; tokens * hidden elements in x and out.
template <typename T, int BLOCK, int VEC, int ROWS_PER_WARP, int CACHE>
__global__ void KTUNE_LAUNCH_BOUNDS
    rmsnorm_kernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ out,
                   int tokens, int hidden, float eps) {
  static_assert(ktune::kIsElementType<T>, "T must be float, __half or __nv_bfloat16");
  static_assert(BLOCK % ktune::kWarpSize == 0, "BLOCK must be a multiple of the warp size");
  static_assert(BLOCK <= KTUNE_MAX_THREADS, "BLOCK must not exceed KTUNE_MAX_THREADS");
  static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "VEC must be 1, 2, 4 or 8");
  static_assert(VEC * sizeof(T) <= 16, "VEC * sizeof(T) must be at most 16 bytes");
  static_assert(ROWS_PER_WARP == 0 || ROWS_PER_WARP == 1, "ROWS_PER_WARP must be 0 or 1");
  static_assert(CACHE >= 0 && CACHE <= 32, "CACHE must be from 0 to 32 vectors");

  using Vec = ktune::AlignedVector<T, VEC>;
  constexpr int kThreadsPerRow = ROWS_PER_WARP ? ktune::kWarpSize : BLOCK;
  constexpr int kRowsPerBlock = ROWS_PER_WARP ? BLOCK / ktune::kWarpSize : 1;

  const int t = threadIdx.x % kThreadsPerRow;
  const long long row =
      static_cast<long long>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  // Uniform over the threads of a row (a warp, or the whole block), so no thread that
  // stays skips a shuffle or barrier it needs.
  if (row >= tokens) return;

  const long long row_start = row * hidden;
  const T* __restrict__ x_row = x + row_start;
  T* __restrict__ out_row = out + row_start;
  const int num_vec = hidden / VEC;

  float sumsq = 0.f;
  if constexpr (CACHE > 0) {
    // Vector c of this thread is row vector c * kThreadsPerRow + t: coalesced per c.
    Vec cache[CACHE];
    ktune_rmsnorm::LoadRowVectors<CACHE, kThreadsPerRow>(x_row, t, num_vec, cache);
#pragma unroll
    for (int c = 0; c < CACHE; ++c) sumsq = ktune_rmsnorm::SumOfSquares(cache[c], sumsq);
    const float inv_rms =
        rsqrtf(ktune_rmsnorm::RowSum<BLOCK, ROWS_PER_WARP>(sumsq) / hidden + eps);
    ktune_rmsnorm::ScaleRowVectors<CACHE, kThreadsPerRow>(cache, weight, out_row, t, num_vec,
                                                          inv_rms);
  } else {
    // Per thread: chunks of kU vectors with no bounds checks while a whole chunk is in the
    // row, then the fewer than kU left, all loads of a chunk in flight at once.
    constexpr int kU = ktune_rmsnorm::kUncachedUnroll;
    constexpr int kChunk = kThreadsPerRow * kU;
    int v = t;
#pragma unroll 1
    for (; v + (kU - 1) * kThreadsPerRow < num_vec; v += kChunk) {
      Vec xv[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        xv[u] = ktune::LoadVector<VEC>(x_row + (v + u * kThreadsPerRow) * VEC);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) sumsq = ktune_rmsnorm::SumOfSquares(xv[u], sumsq);
    }
    if (v < num_vec) {
      Vec xv[kU - 1];
      ktune_rmsnorm::LoadRowVectors<kU - 1, kThreadsPerRow>(x_row, v, num_vec, xv);
#pragma unroll
      for (int u = 0; u < kU - 1; ++u) sumsq = ktune_rmsnorm::SumOfSquares(xv[u], sumsq);
    }
    const float inv_rms =
        rsqrtf(ktune_rmsnorm::RowSum<BLOCK, ROWS_PER_WARP>(sumsq) / hidden + eps);
    v = t;
#pragma unroll 1
    for (; v + (kU - 1) * kThreadsPerRow < num_vec; v += kChunk) {
      Vec xv[kU];
      Vec wv[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        xv[u] = ktune::LoadVector<VEC>(x_row + (v + u * kThreadsPerRow) * VEC);
        wv[u] = ktune::LoadVector<VEC>(weight + (v + u * kThreadsPerRow) * VEC);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        ktune::StoreVector<VEC>(out_row + (v + u * kThreadsPerRow) * VEC,
                                ktune_rmsnorm::Scale(xv[u], wv[u], inv_rms));
      }
    }
    if (v < num_vec) {
      Vec xv[kU - 1];
      ktune_rmsnorm::LoadRowVectors<kU - 1, kThreadsPerRow>(x_row, v, num_vec, xv);
      ktune_rmsnorm::ScaleRowVectors<kU - 1, kThreadsPerRow>(xv, weight, out_row, v, num_vec,
                                                             inv_rms);
    }
  }
}

/// The reference: one row per block of kReferenceThreads (32) threads, each summing a
/// strided slice of the row in double; thread 0 adds the 32 partials in order. 32 threads,
/// so it fits under any KTUNE_MAX_THREADS a candidate is compiled with. Launched with
/// grid = tokens, block = 32 (manifest). The scale is computed in double and rounded to
/// float once; the product x * inv_rms * weight is in float in the candidates' order.
///   T: float, __half or __nv_bfloat16.
template <typename T>
__global__ void KTUNE_LAUNCH_BOUNDS
    rmsnorm_reference(const T* __restrict__ x, const T* __restrict__ weight,
                      T* __restrict__ out, int tokens, int hidden, float eps) {
  static_assert(ktune::kIsElementType<T>, "T must be float, __half or __nv_bfloat16");
  constexpr int kReferenceThreads = 32;
  __shared__ double partial[kReferenceThreads];
  __shared__ float inv_rms;

  const long long row = blockIdx.x;
  if (row >= tokens || threadIdx.x >= kReferenceThreads) return;
  const T* x_row = x + row * hidden;
  T* out_row = out + row * hidden;

  double sum = 0.0;
  for (int i = threadIdx.x; i < hidden; i += kReferenceThreads) {
    const double v = ktune::ToFloat(x_row[i]);
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncwarp();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int k = 0; k < kReferenceThreads; ++k) total += partial[k];
    inv_rms = static_cast<float>(1.0 / sqrt(total / hidden + static_cast<double>(eps)));
  }
  __syncwarp();
  for (int i = threadIdx.x; i < hidden; i += kReferenceThreads) {
    out_row[i] = ktune::FromFloat<T>(ktune::ToFloat(x_row[i]) * inv_rms *
                                     ktune::ToFloat(weight[i]));
  }
}
