// add_rmsnorm: the residual add fused with RMSNorm over a row-major [tokens, hidden] matrix:
//   r[t, i]        = round_T(x[t, i] + residual[t, i])     (written back into residual)
//   out[t, i]      = r[t, i] * rsqrt(mean_i(r[t, :]^2) + eps) * weight[i]
// with float accumulation for every element type. The norm reads r as stored (rounded to
// the element type), as torch and vLLM do. The candidate kernel and its reference; the
// manifest (add_rmsnorm.textproto) gives their launch geometry and arguments.
//
// Device code only, compiled by NVRTC with -DKTUNE_MAX_THREADS=... -DKTUNE_MIN_BLOCKS=...
#include "ktune/row.cuh"

namespace ktune_add_rmsnorm {

/// Vectors each thread keeps in flight per pass when the row is not cached (CACHE == 0).
constexpr int kUncachedUnroll = 4;
static_assert(kUncachedUnroll >= 2, "kUncachedUnroll must be at least 2 (the tail is kU - 1)");

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

/// One edge element of a row (ktune/edges.cuh): x and residual at linear index i, loaded
/// by Load and kept as loaded (converted next to the load, the conversion would wait out its
/// latency before the row's vector loads); Finish stores their sum rounded to T into
/// residual and returns it as a float.
template <typename T>
struct Edge {
  long long i = 0;
  T x{};
  T residual{};

  __device__ __forceinline__ void Load(const T* __restrict__ xs, const T* __restrict__ rs,
                                       long long at) {
    i = at;
    x = xs[at];
    residual = rs[at];
  }
  __device__ __forceinline__ float Finish(T* __restrict__ rs) const {
    const T r = ktune::FromFloat<T>(ktune::ToFloat(x) + ktune::ToFloat(residual));
    rs[i] = r;
    return ktune::ToFloat(r);
  }
};

}  // namespace ktune_add_rmsnorm

/// Fused residual add + RMSNorm of each row: residual[r, :] = x[r, :] + residual[r, :]
/// (rounded to T), out[r, i] = residual[r, i] * rsqrt(sum_i(residual[r, i]^2) / hidden + eps)
/// * weight[i], float accumulation. x and residual are read once from DRAM when CACHE > 0.
///   T, BLOCK, VEC, ROWS_PER_WARP: as ktune::RowKernel (ktune/row.cuh): the element type,
///                  threads per block, elements per vector access, and a row per block (0,
///                  grid = tokens) or per warp (1, grid = ceil(tokens / (BLOCK / 32))).
///   CACHE:         0: the new residual is re-read for the scale pass (its own writes, mostly
///                  L2 hits); C > 0: each thread keeps its C vectors of r in registers.
///                  Needs hidden <= threads_per_row * VEC * C.
///   PREFETCH_W:    0: with CACHE > 0, each weight vector is loaded after the reduction,
///                  where it is used; 1: this thread's C weight vectors are loaded before x
///                  and residual, so all three loads' latencies overlap (C more vectors of
///                  registers). 1 only with CACHE > 0.
///   EDGE:          0: rows are whole aligned vectors (hidden % VEC == 0); 1: any hidden
///                  (ktune/edges.cuh; weight read shifted); 2: as 1, 16-byte vectors whose
///                  body starts on a 128-byte line (up to 9 * VEC - 1 edge elements).
///   PER_SHIFT:     with EDGE: 0: the weight read shifted by one body whose loads find the
///                  shift at run time; 1: the body compiled once per shift (VEC copies,
///                  ktune::WithShift), so the shifts' word selects fold away.
/// REQUIRES: hidden % VEC == 0 unless EDGE; x, residual, weight, out aligned to VEC *
/// sizeof(T) bytes; no two of x, residual, weight, out overlap (__restrict__); 1 <= hidden.
template <typename T, int BLOCK, int VEC, int ROWS_PER_WARP, int CACHE, int PREFETCH_W, int EDGE,
          int PER_SHIFT>
__global__ void KTUNE_LAUNCH_BOUNDS
    add_rmsnorm_kernel(const T* __restrict__ x, T* __restrict__ residual,
                       const T* __restrict__ weight, T* __restrict__ out, int tokens,
                       int hidden, float eps) {
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh
  using K = ktune::RowKernel<T, BLOCK, VEC, ROWS_PER_WARP, CACHE, PREFETCH_W>;
  using Vec = typename K::Vec;
  constexpr int kThreadsPerRow = K::kThreadsPerRow;
  static_assert(PER_SHIFT == 0 || EDGE > 0, "PER_SHIFT is for EDGE > 0");

  const int t = K::Lane();
  const long long row = K::Row();
  if (row >= tokens) return;

  const long long row_start = row * hidden;
  // The vectors start `head` elements into the row (and into weight, where that is not
  // aligned: EDGE reads it shifted).
  const ktune::RowEdges<VEC, EDGE> edges(row_start, hidden);
  const T* __restrict__ x_row = x + row_start + edges.head;
  T* __restrict__ res_row = residual + row_start + edges.head;
  T* __restrict__ out_row = out + row_start + edges.head;
  const T* __restrict__ w_row = weight + edges.head;
  const int num_vec = edges.num_vec;
  // This thread's edge element: x and residual loaded here, beside the row's vectors; r =
  // x + residual rounded and stored (Edge::Finish) only once the vectors' loads are issued.
  // Stored up front, it held those loads back (they might alias residual[i] as far as the
  // compiler knows), so the row's first warp waited out a DRAM latency for one element.
  // Its weight is loaded where the edge is stored, at the end, the form timed on the H200
  // (35.9 us at 4096 x 4097; loaded up front and converted at once, as one release had it,
  // the edge threads' warps waited out a DRAM latency before the row's vector loads: 39.9).
  ktune_add_rmsnorm::Edge<T> edge;
  if constexpr (EDGE) {
    if (edges.Has(t)) edge.Load(x, residual, row_start + edges.Column(t));
  }
  float re = 0.f;

  float sumsq = 0.f;
  float inv_rms;
  ktune::WithShift<VEC, EDGE, PER_SHIFT>(edges.head % VEC, [&](auto shift) {
    constexpr int kShift = decltype(shift)::value;
    if constexpr (CACHE > 0) {
      // Vector c of this thread is row vector c * kThreadsPerRow + t: coalesced per c.
      const ktune::RowVectors<PREFETCH_W, CACHE, kThreadsPerRow, VEC, T, kShift> w(w_row, t,
                                                                                 num_vec);
      sumsq = w.ZeroAfterLoads(num_vec >> 31);  // exactly 0.f; see RowVectors
      Vec cache[CACHE];
      ktune_add_rmsnorm::AddRowVectors<CACHE, kThreadsPerRow>(x_row, res_row, t, num_vec, cache,
                                                              &sumsq);
      if constexpr (EDGE) {
        if (edges.Has(t)) re = edge.Finish(residual);
        sumsq = fmaf(re, re, sumsq);
      }
      inv_rms = rsqrtf(ktune::RowSum<BLOCK, ROWS_PER_WARP>(sumsq) / hidden + eps);
      ktune::ScaleRowVectors(cache, w, out_row, t, num_vec, inv_rms);
    } else {
      // Per thread: chunks of kU vectors (all 2 * kU loads of a chunk in flight), then the
      // fewer than kU left. Each thread re-reads in the second pass only what it stored itself
      // in the first, so program order makes the new residual visible without a barrier.
      constexpr int kU = ktune_add_rmsnorm::kUncachedUnroll;
      constexpr int kChunk = kThreadsPerRow * kU;
      using Weights = ktune::RowVectors<0, kU, kThreadsPerRow, VEC, T, kShift>;
      using TailWeights = ktune::RowVectors<0, kU - 1, kThreadsPerRow, VEC, T, kShift>;
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
      if constexpr (EDGE) {
        if (edges.Has(t)) re = edge.Finish(residual);
        sumsq = fmaf(re, re, sumsq);
      }
      inv_rms = rsqrtf(ktune::RowSum<BLOCK, ROWS_PER_WARP>(sumsq) / hidden + eps);
      v = t;
#pragma unroll 1
      for (; v + (kU - 1) * kThreadsPerRow < num_vec; v += kChunk) {
        Vec r[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          r[u] = ktune::LoadVector<VEC>(res_row + (v + u * kThreadsPerRow) * VEC);
        }
        ktune::ScaleRowVectors(r, Weights(w_row, v, num_vec), out_row, v, num_vec, inv_rms);
      }
      if (v < num_vec) {
        Vec r[kU - 1];
        ktune::LoadRowVectors<kU - 1, kThreadsPerRow>(res_row, v, num_vec, r);
        ktune::ScaleRowVectors(r, TailWeights(w_row, v, num_vec), out_row, v, num_vec, inv_rms);
      }
    }
  });
  if constexpr (EDGE) {
    if (edges.Has(t)) {
      const int col = edges.Column(t);
      out[row_start + col] = ktune::FromFloat<T>(re * inv_rms * ktune::ToFloat(weight[col]));
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
  const auto set_inv_rms = [&](double total) {
    inv_rms = static_cast<float>(1.0 / sqrt(total / hidden + static_cast<double>(eps)));
  };
  ktune::ReferenceReduce<kReferenceThreads>(sum, partial, 0.0, ktune::AddDoubles, set_inv_rms);
  for (int i = threadIdx.x; i < hidden; i += kReferenceThreads) {
    out_row[i] = ktune::FromFloat<T>(ktune::ToFloat(res_row[i]) * inv_rms *
                                     ktune::ToFloat(weight[i]));
  }
}
