// layernorm: over a row-major [tokens, hidden] matrix,
//   mean[t] = sum_i x[t, i] / hidden
//   var[t]  = sum_i (x[t, i] - mean[t])^2 / hidden            (two passes: never E[x^2] - mean^2)
//   out[t, i] = (x[t, i] - mean[t]) * rsqrt(var[t] + eps) * weight[i] (+ bias[i] if has_bias)
// with float accumulation for every element type. The candidate kernel and its reference; the
// manifest (layernorm.textproto) gives their launch geometry and arguments.
//
// Device code only, compiled by NVRTC with -DKTUNE_MAX_THREADS=... -DKTUNE_MIN_BLOCKS=...
#include "ktune/common.cuh"

namespace ktune_layernorm {

/// Vectors each thread keeps in flight per pass when the row is not cached (CACHE == 0).
constexpr int kUncachedUnroll = 4;
static_assert(kUncachedUnroll >= 1, "kUncachedUnroll must be at least 1");

// The row's sum from each thread's partial; every thread of the row gets the same value.
// REQUIRES (one row per block): a __syncthreads() between two calls (BlockReduceSum reuses
// its slots).
template <int BLOCK, int ROWS_PER_WARP>
__device__ __forceinline__ float RowSum(float partial) {
  if constexpr (ROWS_PER_WARP) {
    return ktune::WarpReduceSum(partial);
  } else {
    return ktune::BlockReduceSum<BLOCK>(partial);
  }
}

template <typename T, int VEC>
__device__ __forceinline__ float AddSum(const ktune::AlignedVector<T, VEC>& v, float acc) {
  float f[VEC];
  ktune::VectorToFloat(v, f);
#pragma unroll
  for (int k = 0; k < VEC; ++k) acc += f[k];
  return acc;
}

template <typename T, int VEC>
__device__ __forceinline__ float AddSquaredDeviations(const ktune::AlignedVector<T, VEC>& v,
                                                      float mean, float acc) {
  float f[VEC];
  ktune::VectorToFloat(v, f);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const float d = f[k] - mean;
    acc = fmaf(d, d, acc);
  }
  return acc;
}

// out = (x - mean) * inv_std * w (+ b), elementwise, in this order (the reference's).
template <typename T, int VEC>
__device__ __forceinline__ ktune::AlignedVector<T, VEC> Normalize(
    const ktune::AlignedVector<T, VEC>& xv, const T* __restrict__ weight,
    const T* __restrict__ bias, int has_bias, int idx, float mean, float inv_std) {
  float xf[VEC];
  float wf[VEC];
  ktune::VectorToFloat(xv, xf);
  ktune::VectorToFloat(ktune::LoadVector<VEC>(weight + idx * VEC), wf);
  float of[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) of[k] = (xf[k] - mean) * inv_std * wf[k];
  if (has_bias) {
    float bf[VEC];
    ktune::VectorToFloat(ktune::LoadVector<VEC>(bias + idx * VEC), bf);
#pragma unroll
    for (int k = 0; k < VEC; ++k) of[k] += bf[k];
  }
  return ktune::FloatToVector<T>(of);
}

}  // namespace ktune_layernorm

/// LayerNorm of each row: out[r, i] = (x[r, i] - mean) * rsqrt(var + eps) * weight[i]
/// (+ bias[i] when has_bias), mean and var (biased, over hidden) by two passes in float:
/// the sum, then the sum of squared deviations from the mean.
///   T:             float, __half or __nv_bfloat16.
///   BLOCK:         threads per block (== blockDim.x); a multiple of 32 with BLOCK / 32 a
///                  power of two, at most KTUNE_MAX_THREADS.
///   VEC:           elements per vector access; 1, 2, 4 or 8 with VEC * sizeof(T) <= 16.
///   ROWS_PER_WARP: 0: one row per block (grid = tokens); 1: one row per warp, BLOCK / 32
///                  rows per block (grid = ceil(tokens / (BLOCK / 32))).
///   CACHE:         0: the row is read three times (sum, deviations, output; the last two
///                  mostly L2 hits); C > 0: each thread keeps its C vectors of the row in
///                  registers, so x is read once. Needs hidden <= threads_per_row * VEC * C.
/// has_bias: 0 or 1, the same for the whole launch (bias is not read when 0).
/// REQUIRES: hidden % VEC == 0; x, weight, bias, out aligned to VEC * sizeof(T) bytes; out
/// overlaps none of the inputs (__restrict__); 1 <= hidden.
template <typename T, int BLOCK, int VEC, int ROWS_PER_WARP, int CACHE>
__global__ void KTUNE_LAUNCH_BOUNDS
    layernorm_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                     const T* __restrict__ bias, T* __restrict__ out, int tokens, int hidden,
                     int has_bias, float eps) {
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
  T* __restrict__ out_row = out + row_start;
  const int num_vec = hidden / VEC;
  const float inv_hidden = 1.f / hidden;

  if constexpr (CACHE > 0) {
    // Vector c of this thread is row vector c * kThreadsPerRow + t: coalesced per c. All C
    // loads are issued before any is used; vectors past the row are zeros and skipped.
    Vec cache[CACHE];
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
      const int idx = t + c * kThreadsPerRow;
      cache[c] = idx < num_vec ? ktune::LoadVector<VEC>(x_row + idx * VEC) : Vec{};
    }
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < CACHE; ++c) sum = ktune_layernorm::AddSum(cache[c], sum);
    const float mean = ktune_layernorm::RowSum<BLOCK, ROWS_PER_WARP>(sum) * inv_hidden;
    float sq = 0.f;
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
      if (t + c * kThreadsPerRow < num_vec) {
        sq = ktune_layernorm::AddSquaredDeviations(cache[c], mean, sq);
      }
    }
    if constexpr (!ROWS_PER_WARP) __syncthreads();  // BlockReduceSum's slots are reused
    const float inv_std =
        rsqrtf(ktune_layernorm::RowSum<BLOCK, ROWS_PER_WARP>(sq) * inv_hidden + eps);
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
      const int idx = t + c * kThreadsPerRow;
      if (idx < num_vec) {
        ktune::StoreVector<VEC>(out_row + idx * VEC,
                                ktune_layernorm::Normalize(cache[c], weight, bias, has_bias,
                                                           idx, mean, inv_std));
      }
    }
  } else {
    // Three passes over the row, kU vectors per thread in flight per step (bounds-checked:
    // this variant is for rows longer than any cache, where the checks are noise).
    constexpr int kU = ktune_layernorm::kUncachedUnroll;
    constexpr int kChunk = kThreadsPerRow * kU;
    float sum = 0.f;
#pragma unroll 1
    for (int v = t; v < num_vec; v += kChunk) {
      Vec xv[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int idx = v + u * kThreadsPerRow;
        xv[u] = idx < num_vec ? ktune::LoadVector<VEC>(x_row + idx * VEC) : Vec{};
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) sum = ktune_layernorm::AddSum(xv[u], sum);
    }
    const float mean = ktune_layernorm::RowSum<BLOCK, ROWS_PER_WARP>(sum) * inv_hidden;
    float sq = 0.f;
#pragma unroll 1
    for (int v = t; v < num_vec; v += kChunk) {
      Vec xv[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int idx = v + u * kThreadsPerRow;
        if (idx < num_vec) xv[u] = ktune::LoadVector<VEC>(x_row + idx * VEC);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (v + u * kThreadsPerRow < num_vec) {
          sq = ktune_layernorm::AddSquaredDeviations(xv[u], mean, sq);
        }
      }
    }
    if constexpr (!ROWS_PER_WARP) __syncthreads();  // BlockReduceSum's slots are reused
    const float inv_std =
        rsqrtf(ktune_layernorm::RowSum<BLOCK, ROWS_PER_WARP>(sq) * inv_hidden + eps);
#pragma unroll 1
    for (int v = t; v < num_vec; v += kChunk) {
      Vec xv[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int idx = v + u * kThreadsPerRow;
        if (idx < num_vec) xv[u] = ktune::LoadVector<VEC>(x_row + idx * VEC);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int idx = v + u * kThreadsPerRow;
        if (idx < num_vec) {
          ktune::StoreVector<VEC>(out_row + idx * VEC,
                                  ktune_layernorm::Normalize(xv[u], weight, bias, has_bias, idx,
                                                             mean, inv_std));
        }
      }
    }
  }
}

/// The reference: one row per block of 32 threads. Two passes in double: each thread sums
/// a strided slice, thread 0 adds the 32 partials in order and gives the mean; then the same
/// for the squared deviations from it. mean and 1/sqrt(var + eps) are rounded to float once;
/// the output (x - mean) * inv_std * weight (+ bias) is in float in the candidates' order.
/// Launched with grid = tokens, block = 32 (manifest).
///   T: float, __half or __nv_bfloat16.
template <typename T>
__global__ void KTUNE_LAUNCH_BOUNDS
    layernorm_reference(const T* __restrict__ x, const T* __restrict__ weight,
                        const T* __restrict__ bias, T* __restrict__ out, int tokens, int hidden,
                        int has_bias, float eps) {
  static_assert(ktune::kIsElementType<T>, "T must be float, __half or __nv_bfloat16");
  constexpr int kReferenceThreads = 32;
  __shared__ double partial[kReferenceThreads];
  __shared__ double mean_d;
  __shared__ float mean_f;
  __shared__ float inv_std;

  const long long row = blockIdx.x;
  if (row >= tokens || threadIdx.x >= kReferenceThreads) return;
  const T* x_row = x + row * hidden;
  T* out_row = out + row * hidden;

  double sum = 0.0;
  for (int i = threadIdx.x; i < hidden; i += kReferenceThreads) sum += ktune::ToFloat(x_row[i]);
  partial[threadIdx.x] = sum;
  __syncwarp();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int k = 0; k < kReferenceThreads; ++k) total += partial[k];
    mean_d = total / hidden;
    mean_f = static_cast<float>(mean_d);
  }
  __syncwarp();
  double sq = 0.0;
  for (int i = threadIdx.x; i < hidden; i += kReferenceThreads) {
    const double d = ktune::ToFloat(x_row[i]) - mean_d;
    sq += d * d;
  }
  __syncwarp();  // everyone has read mean_d before partial is overwritten
  partial[threadIdx.x] = sq;
  __syncwarp();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int k = 0; k < kReferenceThreads; ++k) total += partial[k];
    inv_std = static_cast<float>(1.0 / sqrt(total / hidden + static_cast<double>(eps)));
  }
  __syncwarp();
  for (int i = threadIdx.x; i < hidden; i += kReferenceThreads) {
    float v = (ktune::ToFloat(x_row[i]) - mean_f) * inv_std * ktune::ToFloat(weight[i]);
    if (has_bias) v += ktune::ToFloat(bias[i]);
    out_row[i] = ktune::FromFloat<T>(v);
  }
}
