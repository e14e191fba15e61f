// layernorm: over a row-major [tokens, hidden] matrix,
//   mean[t] = sum_i x[t, i] / hidden
//   var[t]  = sum_i (x[t, i] - mean[t])^2 / hidden            (two passes: never E[x^2] - mean^2)
//   out[t, i] = (x[t, i] - mean[t]) * rsqrt(var[t] + eps) * weight[i] (+ bias[i] if has_bias)
// with float accumulation for every element type. The candidate kernel and its reference; the
// manifest (layernorm.textproto) gives their launch geometry and arguments.
//
// Device code only, compiled by NVRTC with -DKTUNE_MAX_THREADS=... -DKTUNE_MIN_BLOCKS=...
#include "ktune/row.cuh"

namespace ktune_layernorm {

/// Vectors each thread keeps in flight per pass when the row is not cached (CACHE == 0).
constexpr int kUncachedUnroll = 4;
static_assert(kUncachedUnroll >= 1, "kUncachedUnroll must be at least 1");

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

// out = (x - mean) * inv_std * w (+ b), elementwise, in this order (the reference's), for
// the vector u of weight and bias (the bias read only when has_bias).
template <int PREFETCH, int N, int STRIDE, int VEC, typename T, int SHIFT>
__device__ __forceinline__ ktune::AlignedVector<T, VEC> Normalize(
    const ktune::AlignedVector<T, VEC>& xv,
    const ktune::RowVectors<PREFETCH, N, STRIDE, VEC, T, SHIFT>& weight,
    const ktune::RowVectors<PREFETCH, N, STRIDE, VEC, T, SHIFT>& bias, int u, int has_bias,
    float mean, float inv_std) {
  float xf[VEC];
  float wf[VEC];
  ktune::VectorToFloat(xv, xf);
  ktune::VectorToFloat(weight.At(u), wf);
  float of[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) of[k] = (xf[k] - mean) * inv_std * wf[k];
  if (has_bias) {
    float bf[VEC];
    ktune::VectorToFloat(bias.At(u), bf);
#pragma unroll
    for (int k = 0; k < VEC; ++k) of[k] += bf[k];
  }
  return ktune::FloatToVector<T>(of);
}

}  // namespace ktune_layernorm

/// LayerNorm of each row: out[r, i] = (x[r, i] - mean) * rsqrt(var + eps) * weight[i]
/// (+ bias[i] when has_bias), mean and var (biased, over hidden) by two passes in float:
/// the sum, then the sum of squared deviations from the mean.
///   T, BLOCK, VEC, ROWS_PER_WARP: as ktune::RowKernel (ktune/row.cuh): the element type,
///                  threads per block, elements per vector access, and a row per block (0,
///                  grid = tokens) or per warp (1, grid = ceil(tokens / (BLOCK / 32))).
///   CACHE:         0: the row is read three times (sum, deviations, output; the last two
///                  mostly L2 hits); C > 0: each thread keeps its C vectors of the row in
///                  registers, so x is read once. Needs hidden <= threads_per_row * VEC * C.
///   PREFETCH_W:    0: with CACHE > 0, each weight (and bias) vector is loaded after the
///                  reductions, where it is used; 1: this thread's C weight vectors (and C
///                  bias vectors when has_bias) are loaded together with x, before the
///                  reductions, so the loads' latencies overlap (C or 2C more vectors of
///                  registers); 2: loaded once per block and kept in shared memory for its
///                  REUSE_W rows. 1 and 2 only with CACHE > 0.
///   EDGE:          0: rows are whole aligned vectors (hidden % VEC == 0); 1: any hidden
///                  (ktune/edges.cuh; weight and bias read shifted); 2: as 1, 16-byte
///                  vectors whose body starts on a 128-byte line (up to 71 edge elements:
///                  BLOCK >= 128, a row per block).
///   REUSE_W:       rows per block that share one (shifted) load of weight and bias, kept in
///                  registers (ktune::RowGroup: rows VEC apart, 8 * VEC with EDGE 2, which
///                  share the cut); 1:
///                  a row per block (or per warp). > 1 only with a row per block, CACHE > 0
///                  and PREFETCH_W.
///   PER_SHIFT:     with EDGE: 0: weight and bias read shifted by one body whose loads find
///                  the shift at run time; 1: the body compiled once per shift (VEC copies,
///                  ktune::WithShift), so the shifts' word selects fold away.
/// has_bias: 0 or 1, the same for the whole launch (bias is not read when 0).
/// REQUIRES: hidden % VEC == 0 unless EDGE; x, weight, bias, out aligned to VEC * sizeof(T)
/// bytes; out overlaps none of the inputs (__restrict__); 1 <= hidden.
template <typename T, int BLOCK, int VEC, int ROWS_PER_WARP, int CACHE, int PREFETCH_W, int EDGE,
          int REUSE_W, int PER_SHIFT>
__global__ void KTUNE_LAUNCH_BOUNDS
    layernorm_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                     const T* __restrict__ bias, T* __restrict__ out, int tokens, int hidden,
                     int has_bias, float eps) {
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh
  using K = ktune::RowKernel<T, BLOCK, VEC, ROWS_PER_WARP, CACHE, PREFETCH_W>;
  using Group = ktune::RowGroup<VEC, REUSE_W, EDGE>;
  static_assert(REUSE_W == 1 || (ROWS_PER_WARP == 0 && CACHE > 0 && PREFETCH_W >= 1),
                "REUSE_W > 1 needs a row per block and the weight cached (CACHE, PREFETCH_W)");
  static_assert(PREFETCH_W < 2 || REUSE_W > 1, "PREFETCH_W 2 is for REUSE_W > 1");
  static_assert(PER_SHIFT == 0 || EDGE > 0, "PER_SHIFT is for EDGE > 0");
  using Vec = typename K::Vec;
  constexpr int kThreadsPerRow = K::kThreadsPerRow;

  const int t = K::Lane();
  const long long first_row = REUSE_W == 1 ? K::Row() : Group::First();
  if (first_row >= tokens) return;

  // The vectors start `head` elements into the row (and into weight and bias, where that is
  // not aligned: EDGE reads them shifted); the same for each of the block's rows.
  const ktune::RowEdges<VEC, EDGE> edges(first_row * hidden, hidden);
  const T* __restrict__ w_row = weight + edges.head;
  const T* __restrict__ b_row = bias + edges.head;
  const int num_vec = edges.num_vec;
  const float inv_hidden = 1.f / hidden;
  // The row's edge element that this thread takes (if any), normalized and stored; its
  // weight and bias are loaded here, once for all of the block's rows.
  T w_edge{};
  T b_edge{};
  if constexpr (EDGE) {
    w_edge = ktune::EdgeElement(edges, weight, t);
    if (has_bias) b_edge = ktune::EdgeElement(edges, bias, t);
  }
  const auto store_edge = [&](long long row_start, float xe, float mean, float inv_std) {
    if constexpr (EDGE) {
      if (edges.Has(t)) {
        float o = (xe - mean) * inv_std * ktune::ToFloat(w_edge);
        if (has_bias) o += ktune::ToFloat(b_edge);
        out[row_start + edges.Column(t)] = ktune::FromFloat<T>(o);
      }
    }
  };

  // PREFETCH_W 2: the block's staging of weight and bias (each thread its own slots);
  // declared out here, since each of WithShift's bodies would have an array of its own.
  __shared__ Vec staged[PREFETCH_W == 2 ? 2 * CACHE * kThreadsPerRow : 1];

  ktune::WithShift<VEC, EDGE, PER_SHIFT>(edges.head % VEC, [&](auto shift) {
    constexpr int kShift = decltype(shift)::value;
    if constexpr (CACHE > 0) {
      // Vector c of this thread is row vector c * kThreadsPerRow + t: coalesced per c. All C
      // loads are issued before any is used; vectors past the row are zeros and skipped.
      using Affine = ktune::RowVectors<PREFETCH_W, CACHE, kThreadsPerRow, VEC, T, kShift>;
      const Affine w(w_row, t, num_vec, true, staged);
      const Affine b(b_row, t, num_vec, has_bias, staged + CACHE * kThreadsPerRow);
      // With REUSE_W > 1, the next row's vectors are loaded before this one's reductions.
      Group::template ForEachCachedRow<CACHE, kThreadsPerRow>(
          edges, x, hidden, t, first_row, tokens,
          [&](long long row, const Vec (&cache)[CACHE], float xe) {
        const long long row_start = row * hidden;
        T* __restrict__ out_row = out + row_start + edges.head;
        // Exactly 0.f (see RowVectors::ZeroAfterLoads): orders the prefetches with x's loads.
        float sum = w.ZeroAfterLoads(num_vec >> 31) + b.ZeroAfterLoads(num_vec >> 31);
        if constexpr (EDGE) sum += xe;
#pragma unroll
        for (int c = 0; c < CACHE; ++c) sum = ktune_layernorm::AddSum(cache[c], sum);
        const float mean = ktune::RowSum<BLOCK, ROWS_PER_WARP>(sum) * inv_hidden;
        float sq = 0.f;
        if (edges.Has(t)) sq = (xe - mean) * (xe - mean);
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
          if (t + c * kThreadsPerRow < num_vec) {
            sq = ktune_layernorm::AddSquaredDeviations(cache[c], mean, sq);
          }
        }
        if constexpr (!ROWS_PER_WARP) __syncthreads();  // BlockReduceSum's slots are reused
        const float inv_std = rsqrtf(ktune::RowSum<BLOCK, ROWS_PER_WARP>(sq) * inv_hidden + eps);
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
          const int idx = t + c * kThreadsPerRow;
          if (idx < num_vec) {
            ktune::StoreVector<VEC>(out_row + idx * VEC,
                                    ktune_layernorm::Normalize(cache[c], w, b, c, has_bias, mean,
                                                               inv_std));
          }
        }
        store_edge(row_start, xe, mean, inv_std);
      });
    } else {
      // Three passes over the row, kU vectors per thread in flight per step (bounds-checked:
      // this variant is for rows longer than any cache, where the checks are noise).
      constexpr int kU = ktune_layernorm::kUncachedUnroll;
      constexpr int kChunk = kThreadsPerRow * kU;
      using Affine = ktune::RowVectors<0, kU, kThreadsPerRow, VEC, T, kShift>;
      const long long row_start = first_row * hidden;
      const T* __restrict__ x_row = x + row_start + edges.head;
      T* __restrict__ out_row = out + row_start + edges.head;
      // The edge element is loaded with the row's first vectors and added after them (ToFloat
      // waits for the load).
      const T x_edge = ktune::EdgeElement(edges, x + row_start, t);
      float sum = 0.f;
#pragma unroll 1
      for (int v = t; v < num_vec; v += kChunk) {
        Vec xv[kU];
        ktune::LoadRowVectors<kU, kThreadsPerRow>(x_row, v, num_vec, xv);
#pragma unroll
        for (int u = 0; u < kU; ++u) sum = ktune_layernorm::AddSum(xv[u], sum);
      }
      const float xe = ktune::ToFloat(x_edge);
      if constexpr (EDGE) sum += xe;
      const float mean = ktune::RowSum<BLOCK, ROWS_PER_WARP>(sum) * inv_hidden;
      float sq = 0.f;
      if (edges.Has(t)) sq = (xe - mean) * (xe - mean);
#pragma unroll 1
      for (int v = t; v < num_vec; v += kChunk) {
        Vec xv[kU];
        ktune::LoadRowVectors<kU, kThreadsPerRow>(x_row, v, num_vec, xv);
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          if (v + u * kThreadsPerRow < num_vec) {
            sq = ktune_layernorm::AddSquaredDeviations(xv[u], mean, sq);
          }
        }
      }
      if constexpr (!ROWS_PER_WARP) __syncthreads();  // BlockReduceSum's slots are reused
      const float inv_std = rsqrtf(ktune::RowSum<BLOCK, ROWS_PER_WARP>(sq) * inv_hidden + eps);
#pragma unroll 1
      for (int v = t; v < num_vec; v += kChunk) {
        Vec xv[kU];
        ktune::LoadRowVectors<kU, kThreadsPerRow>(x_row, v, num_vec, xv);
        const Affine w(w_row, v, num_vec);
        const Affine b(b_row, v, num_vec);
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int idx = v + u * kThreadsPerRow;
          if (idx < num_vec) {
            ktune::StoreVector<VEC>(out_row + idx * VEC,
                                    ktune_layernorm::Normalize(xv[u], w, b, u, has_bias, mean,
                                                               inv_std));
          }
        }
      }
      store_edge(row_start, xe, mean, inv_std);
    }
  });
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
  const auto set_mean = [&](double total) {
    mean_d = total / hidden;
    mean_f = static_cast<float>(mean_d);
  };
  ktune::ReferenceReduce<kReferenceThreads>(sum, partial, 0.0, ktune::AddDoubles, set_mean);
  double sq = 0.0;
  for (int i = threadIdx.x; i < hidden; i += kReferenceThreads) {
    const double d = ktune::ToFloat(x_row[i]) - mean_d;
    sq += d * d;
  }
  __syncwarp();  // everyone has read mean_d before partial is overwritten
  const auto set_inv_std = [&](double total) {
    inv_std = static_cast<float>(1.0 / sqrt(total / hidden + static_cast<double>(eps)));
  };
  ktune::ReferenceReduce<kReferenceThreads>(sq, partial, 0.0, ktune::AddDoubles, set_inv_std);
  for (int i = threadIdx.x; i < hidden; i += kReferenceThreads) {
    float v = (ktune::ToFloat(x_row[i]) - mean_f) * inv_std * ktune::ToFloat(weight[i]);
    if (has_bias) v += ktune::ToFloat(bias[i]);
    out_row[i] = ktune::FromFloat<T>(v);
  }
}
