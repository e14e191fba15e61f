// add_rmsnorm: the residual add fused with RMSNorm over a row-major [tokens, hidden] matrix:
//   r[t, i]        = round_T(x[t, i] + residual[t, i])     (written back into residual)
//   out[t, i]      = r[t, i] * rsqrt(mean_i(r[t, :]^2) + eps) * weight[i]
// with float accumulation for every element type. The norm reads r as stored (rounded to
// the element type), as torch and vLLM do. The candidate kernel and its reference; the
// manifest (add_rmsnorm.textproto) gives their launch geometry and arguments.
//
// Device code only, compiled by NVRTC with -DKTUNE_MAX_THREADS=... -DKTUNE_MIN_BLOCKS=...
#include "ktune/common.cuh"

namespace ktune_add_rmsnorm {

/// Vectors each thread keeps in flight per pass when the row is not cached (CACHE == 0).
constexpr int kUncachedUnroll = 4;
static_assert(kUncachedUnroll >= 2, "kUncachedUnroll must be at least 2 (the tail is kU - 1)");

template <int BLOCK, int ROWS_PER_WARP>
__device__ __forceinline__ float RowSum(float partial) {
  if constexpr (ROWS_PER_WARP) {
    return ktune::WarpReduceSum(partial);
  } else {
    return ktune::BlockReduceSum<BLOCK>(partial);
  }
}

// r = round_T(x + residual), elementwise; adds the squares of the rounded r to *sumsq.
template <typename T, int VEC>
__device__ __forceinline__ ktune::AlignedVector<T, VEC> AddResidual(
    const ktune::AlignedVector<T, VEC>& xv, const ktune::AlignedVector<T, VEC>& rv,
    float* sumsq) {
  float xf[VEC];
  float rf[VEC];
  ktune::VectorToFloat(xv, xf);
  ktune::VectorToFloat(rv, rf);
#pragma unroll
  for (int k = 0; k < VEC; ++k) rf[k] += xf[k];
  const ktune::AlignedVector<T, VEC> sum = ktune::FloatToVector<T>(rf);
  // The square of what is stored, not of the float sum.
  float sf[VEC];
  ktune::VectorToFloat(sum, sf);
#pragma unroll
  for (int k = 0; k < VEC; ++k) *sumsq = fmaf(sf[k], sf[k], *sumsq);
  return sum;
}

// out = r * inv_rms * w elementwise, in this order (the reference's).
template <typename T, int VEC>
__device__ __forceinline__ ktune::AlignedVector<T, VEC> Scale(
    const ktune::AlignedVector<T, VEC>& rv, const ktune::AlignedVector<T, VEC>& wv,
    float inv_rms) {
  float rf[VEC];
  float wf[VEC];
  ktune::VectorToFloat(rv, rf);
  ktune::VectorToFloat(wv, wf);
  float of[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) of[k] = rf[k] * inv_rms * wf[k];
  return ktune::FloatToVector<T>(of);
}

// For the row vectors first + u * STRIDE (u < N) below num_vec: loads x and residual, stores
// r = x + residual into residual and keeps it in r[u] (zeros past the row, which add nothing
// to the sum of squares). All 2N loads are issued before any store.
template <int N, int STRIDE, int VEC, typename T>
__device__ __forceinline__ void AddRowVectors(const T* __restrict__ x_row, T* __restrict__ res_row,
                                              int first, int num_vec,
                                              ktune::AlignedVector<T, VEC> (&r)[N],
                                              float* sumsq) {
  ktune::AlignedVector<T, VEC> xv[N];
#pragma unroll
  for (int u = 0; u < N; ++u) {
    const int idx = first + u * STRIDE;
    const bool in = idx < num_vec;
    xv[u] = in ? ktune::LoadVector<VEC>(x_row + idx * VEC) : ktune::AlignedVector<T, VEC>{};
    r[u] = in ? ktune::LoadVector<VEC>(res_row + idx * VEC) : ktune::AlignedVector<T, VEC>{};
  }
#pragma unroll
  for (int u = 0; u < N; ++u) {
    const int idx = first + u * STRIDE;
    r[u] = AddResidual(xv[u], r[u], sumsq);
    if (idx < num_vec) ktune::StoreVector<VEC>(res_row + idx * VEC, r[u]);
  }
}

// out = r * inv_rms * weight for the row vectors first + u * STRIDE (u < N) below num_vec,
// r already in registers; weight (read by every row, an L1/L2 hit) is loaded per vector.
template <int N, int STRIDE, int VEC, typename T>
__device__ __forceinline__ void ScaleRowVectors(const ktune::AlignedVector<T, VEC> (&r)[N],
                                                const T* __restrict__ weight,
                                                T* __restrict__ out_row, int first,
                                                int num_vec, float inv_rms) {
#pragma unroll
  for (int u = 0; u < N; ++u) {
    const int idx = first + u * STRIDE;
    if (idx < num_vec) {
      ktune::StoreVector<VEC>(out_row + idx * VEC,
                              Scale(r[u], ktune::LoadVector<VEC>(weight + idx * VEC), inv_rms));
    }
  }
}

}  // namespace ktune_add_rmsnorm

/// Fused residual add + RMSNorm of each row: residual[r, :] = x[r, :] + residual[r, :]
/// (rounded to T), out[r, i] = residual[r, i] * rsqrt(sum_i(residual[r, i]^2) / hidden + eps)
/// * weight[i], float accumulation. x and residual are read once from DRAM when CACHE > 0.
///   T:             float, __half or __nv_bfloat16.
///   BLOCK:         threads per block (== blockDim.x); a multiple of 32 with BLOCK / 32 a
///                  power of two, at most KTUNE_MAX_THREADS.
///   VEC:           elements per vector access; 1, 2, 4 or 8 with VEC * sizeof(T) <= 16.
///   ROWS_PER_WARP: 0: one row per block, its BLOCK threads reduce it (grid = tokens);
///                  1: one row per warp, BLOCK / 32 rows per block (grid =
///                  ceil(tokens / (BLOCK / 32))).
///   CACHE:         0: the new residual is re-read for the scale pass (its own writes, mostly
///                  L2 hits); C > 0: each thread keeps its C vectors of r in registers.
///                  Needs hidden <= threads_per_row * VEC * C.
/// REQUIRES: hidden % VEC == 0; x, residual, weight, out aligned to VEC * sizeof(T) bytes;
/// no two of x, residual, weight, out overlap (__restrict__); 1 <= hidden.
template <typename T, int BLOCK, int VEC, int ROWS_PER_WARP, int CACHE>
__global__ void KTUNE_LAUNCH_BOUNDS
    add_rmsnorm_kernel(const T* __restrict__ x, T* __restrict__ residual,
                       const T* __restrict__ weight, T* __restrict__ out, int tokens,
                       int hidden, float eps) {
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
  // Uniform over the threads of a row, so no thread that stays skips a shuffle or barrier.
  if (row >= tokens) return;

  const long long row_start = row * hidden;
  const T* __restrict__ x_row = x + row_start;
  T* __restrict__ res_row = residual + row_start;
  T* __restrict__ out_row = out + row_start;
  const int num_vec = hidden / VEC;

  float sumsq = 0.f;
  if constexpr (CACHE > 0) {
    // Vector c of this thread is row vector c * kThreadsPerRow + t: coalesced per c.
    Vec cache[CACHE];
    ktune_add_rmsnorm::AddRowVectors<CACHE, kThreadsPerRow>(x_row, res_row, t, num_vec, cache,
                                                            &sumsq);
    const float inv_rms =
        rsqrtf(ktune_add_rmsnorm::RowSum<BLOCK, ROWS_PER_WARP>(sumsq) / hidden + eps);
    ktune_add_rmsnorm::ScaleRowVectors<CACHE, kThreadsPerRow>(cache, weight, out_row, t,
                                                              num_vec, inv_rms);
  } else {
    // Per thread: chunks of kU vectors (all 2 * kU loads of a chunk in flight), then the
    // fewer than kU left. Each thread re-reads in the second pass only what it stored itself
    // in the first, so program order makes the new residual visible without a barrier.
    constexpr int kU = ktune_add_rmsnorm::kUncachedUnroll;
    constexpr int kChunk = kThreadsPerRow * kU;
    int v = t;
#pragma unroll 1
    for (; v + (kU - 1) * kThreadsPerRow < num_vec; v += kChunk) {
      Vec r[kU];
      ktune_add_rmsnorm::AddRowVectors<kU, kThreadsPerRow>(x_row, res_row, v, num_vec, r,
                                                           &sumsq);
    }
    if (v < num_vec) {
      Vec r[kU - 1];
      ktune_add_rmsnorm::AddRowVectors<kU - 1, kThreadsPerRow>(x_row, res_row, v, num_vec, r,
                                                               &sumsq);
    }
    const float inv_rms =
        rsqrtf(ktune_add_rmsnorm::RowSum<BLOCK, ROWS_PER_WARP>(sumsq) / hidden + eps);
    v = t;
#pragma unroll 1
    for (; v + (kU - 1) * kThreadsPerRow < num_vec; v += kChunk) {
      Vec r[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        r[u] = ktune::LoadVector<VEC>(res_row + (v + u * kThreadsPerRow) * VEC);
      }
      ktune_add_rmsnorm::ScaleRowVectors<kU, kThreadsPerRow>(r, weight, out_row, v, num_vec,
                                                             inv_rms);
    }
    if (v < num_vec) {
      Vec r[kU - 1];
#pragma unroll
      for (int u = 0; u < kU - 1; ++u) {
        const int idx = v + u * kThreadsPerRow;
        r[u] = idx < num_vec ? ktune::LoadVector<VEC>(res_row + idx * VEC) : Vec{};
      }
      ktune_add_rmsnorm::ScaleRowVectors<kU - 1, kThreadsPerRow>(r, weight, out_row, v,
                                                                 num_vec, inv_rms);
    }
  }
}

/// The reference: one row per block of 32 threads. Each thread adds and stores its strided
/// slice of the row (r rounded to T), summing the stored values' squares in double; thread
/// 0 adds the 32 partials in order and rounds 1/rms to float once; each thread then scales
/// the r it stored, x * inv_rms * weight in float in the candidates' order. Launched with
/// grid = tokens, block = 32 (manifest).
///   T: float, __half or __nv_bfloat16.
template <typename T>
__global__ void KTUNE_LAUNCH_BOUNDS
    add_rmsnorm_reference(const T* __restrict__ x, T* __restrict__ residual,
                          const T* __restrict__ weight, T* __restrict__ out, int tokens,
                          int hidden, float eps) {
  static_assert(ktune::kIsElementType<T>, "T must be float, __half or __nv_bfloat16");
  constexpr int kReferenceThreads = 32;
  __shared__ double partial[kReferenceThreads];
  __shared__ float inv_rms;

  const long long row = blockIdx.x;
  if (row >= tokens || threadIdx.x >= kReferenceThreads) return;
  const T* x_row = x + row * hidden;
  T* res_row = residual + row * hidden;
  T* out_row = out + row * hidden;

  double sum = 0.0;
  for (int i = threadIdx.x; i < hidden; i += kReferenceThreads) {
    const T r = ktune::FromFloat<T>(ktune::ToFloat(x_row[i]) + ktune::ToFloat(res_row[i]));
    res_row[i] = r;
    const double v = ktune::ToFloat(r);
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
    out_row[i] = ktune::FromFloat<T>(ktune::ToFloat(res_row[i]) * inv_rms *
                                     ktune::ToFloat(weight[i]));
  }
}
