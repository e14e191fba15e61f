// rmsnorm: out[t, i] = x[t, i] * rsqrt(mean_i(x[t, :]^2) + eps) * weight[i] over a
// row-major [tokens, hidden] matrix, with float accumulation for every element type. The
// candidate kernel and its reference; the manifest (rmsnorm.textproto) gives their launch
// geometry and arguments.
//
// Device code only, compiled by NVRTC with -DKTUNE_MAX_THREADS=... -DKTUNE_MIN_BLOCKS=...
#include "ktune/row.cuh"

namespace ktune_rmsnorm {

/// Vectors each thread keeps in flight per pass when the row is not cached (CACHE == 0).
constexpr int kUncachedUnroll = 4;
static_assert(kUncachedUnroll >= 2, "kUncachedUnroll must be at least 2 (the tail is kU - 1)");

}  // namespace ktune_rmsnorm

/// RMSNorm of each row of x: out[r, i] = x[r, i] * rsqrt(sum_i(x[r, i]^2) / hidden + eps) *
/// weight[i], float accumulation, one pass over x from DRAM when CACHE > 0.
///   T, BLOCK, VEC, ROWS_PER_WARP: as ktune::RowKernel (ktune/row.cuh): the element type,
///                  threads per block, elements per vector access, and a row per block (0,
///                  grid = tokens) or per warp (1, grid = ceil(tokens / (BLOCK / 32))).
///   CACHE:         0: the row is read twice (sum of squares, then scale; the second read
///                  mostly hits L2); C > 0: each thread keeps its C vectors of the row in
///                  registers between the passes, so x is read once. Needs
///                  hidden <= threads_per_row * VEC * C (threads_per_row = 32 or BLOCK).
///   PREFETCH_W:    0: with CACHE > 0, each weight vector is loaded after the reduction,
///                  where it is used; 1: this thread's C weight vectors are loaded together
///                  with x, before the reduction, so the two loads' latencies overlap (C more
///                  vectors of registers); 2: loaded once per block and kept in shared
///                  memory for its REUSE_W rows. 1 and 2 only with CACHE > 0.
///   EDGE:          0: rows are whole aligned vectors (hidden % VEC == 0); 1: any hidden, the
///                  row's unaligned head and tail elements one per thread beside the vectors,
///                  weight read shifted (ktune/edges.cuh); 2: as 1, 16-byte vectors whose
///                  body starts on a 128-byte line (up to 9 * VEC - 1 edge elements).
///   REUSE_W:       rows per block that share one (shifted) load of the weight, kept in
///                  registers (ktune::RowGroup: rows VEC apart, 8 * VEC with EDGE 2, which
///                  share the cut); 1: a
///                  row per block (or per warp). > 1 only with a row per block, CACHE > 0 and
///                  PREFETCH_W.
///   PER_SHIFT:     with EDGE: 0: the weight read shifted by one body whose loads find the
///                  shift at run time; 1: the body compiled once per shift (VEC copies,
///                  ktune::WithShift), so the shifts' word selects fold away.
/// REQUIRES: hidden % VEC == 0 unless EDGE; x, weight, out aligned to VEC * sizeof(T) bytes
/// (cudaMalloc gives 256); out does not overlap x or weight (__restrict__); 1 <= hidden;
/// tokens * hidden elements in x and out.
template <typename T, int BLOCK, int VEC, int ROWS_PER_WARP, int CACHE, int PREFETCH_W, int EDGE,
          int REUSE_W, int PER_SHIFT>
__global__ void KTUNE_LAUNCH_BOUNDS
    rmsnorm_kernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ out,
                   int tokens, int hidden, float eps) {
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

  // The vectors start `head` elements into the row (and into weight, where that is not
  // aligned: EDGE reads it shifted); the same for each of the block's rows.
  const ktune::RowEdges<VEC, EDGE> edges(first_row * hidden, hidden);
  const T* __restrict__ w_row = weight + edges.head;
  const int num_vec = edges.num_vec;
  // The row's edge element that this thread takes (if any), scaled and stored; its weight is
  // loaded here, once for all of the block's rows.
  T w_edge{};
  if constexpr (EDGE) w_edge = ktune::EdgeElement(edges, weight, t);
  const auto store_edge = [&](long long row_start, float xe, float inv_rms) {
    if constexpr (EDGE) {
      if (edges.Has(t)) {
        out[row_start + edges.Column(t)] =
            ktune::FromFloat<T>(xe * inv_rms * ktune::ToFloat(w_edge));
      }
    }
  };

  // PREFETCH_W 2: the block's staging of the weight (each thread its own slots); declared
  // out here, since each of WithShift's bodies would have an array of its own.
  __shared__ Vec staged[PREFETCH_W == 2 ? CACHE * kThreadsPerRow : 1];

  ktune::WithShift<VEC, EDGE, PER_SHIFT>(edges.head % VEC, [&](auto shift) {
    constexpr int kShift = decltype(shift)::value;
    if constexpr (CACHE > 0) {
      // Vector c of this thread is row vector c * kThreadsPerRow + t: coalesced per c.
      const ktune::RowVectors<PREFETCH_W, CACHE, kThreadsPerRow, VEC, T, kShift> w(
          w_row, t, num_vec, true, staged);
      // With REUSE_W > 1, the next row's vectors are loaded before this one's reductions.
      Group::template ForEachCachedRow<CACHE, kThreadsPerRow>(
          edges, x, hidden, t, first_row, tokens,
          [&](long long row, const Vec (&cache)[CACHE], float xe) {
        const long long row_start = row * hidden;
        T* __restrict__ out_row = out + row_start + edges.head;
        float sumsq = w.ZeroAfterLoads(num_vec >> 31);  // exactly 0.f; see RowVectors
        if constexpr (EDGE) sumsq = fmaf(xe, xe, sumsq);
#pragma unroll
        for (int c = 0; c < CACHE; ++c) sumsq = ktune::SumOfSquares(cache[c], sumsq);
        const float inv_rms = rsqrtf(ktune::RowSum<BLOCK, ROWS_PER_WARP>(sumsq) / hidden + eps);
        ktune::ScaleRowVectors(cache, w, out_row, t, num_vec, inv_rms);
        store_edge(row_start, xe, inv_rms);
      });
    } else {
      // Per thread: chunks of kU vectors with no bounds checks while a whole chunk is in the
      // row, then the fewer than kU left, all loads of a chunk in flight at once.
      constexpr int kU = ktune_rmsnorm::kUncachedUnroll;
      constexpr int kChunk = kThreadsPerRow * kU;
      const long long row_start = first_row * hidden;
      const T* __restrict__ x_row = x + row_start + edges.head;
      T* __restrict__ out_row = out + row_start + edges.head;
      // The edge element is loaded with the row's first vectors and added after them (ToFloat
      // waits for the load).
      const T x_edge = ktune::EdgeElement(edges, x + row_start, t);
      float sumsq = 0.f;
      int v = t;
#pragma unroll 1
      for (; v + (kU - 1) * kThreadsPerRow < num_vec; v += kChunk) {
        Vec xv[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          xv[u] = ktune::LoadVector<VEC>(x_row + (v + u * kThreadsPerRow) * VEC);
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) sumsq = ktune::SumOfSquares(xv[u], sumsq);
      }
      if (v < num_vec) {
        Vec xv[kU - 1];
        ktune::LoadRowVectors<kU - 1, kThreadsPerRow>(x_row, v, num_vec, xv);
#pragma unroll
        for (int u = 0; u < kU - 1; ++u) sumsq = ktune::SumOfSquares(xv[u], sumsq);
      }
      const float xe = ktune::ToFloat(x_edge);
      if constexpr (EDGE) sumsq = fmaf(xe, xe, sumsq);
      const float inv_rms = rsqrtf(ktune::RowSum<BLOCK, ROWS_PER_WARP>(sumsq) / hidden + eps);
      v = t;
#pragma unroll 1
      for (; v + (kU - 1) * kThreadsPerRow < num_vec; v += kChunk) {
        Vec xv[kU];
        Vec wv[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          xv[u] = ktune::LoadVector<VEC>(x_row + (v + u * kThreadsPerRow) * VEC);
          wv[u] = ktune::LoadVectorAt<VEC, kShift>(w_row + (v + u * kThreadsPerRow) * VEC);
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          ktune::StoreVector<VEC>(out_row + (v + u * kThreadsPerRow) * VEC,
                                  ktune::ScaleByRms(xv[u], wv[u], inv_rms));
        }
      }
      if (v < num_vec) {
        Vec xv[kU - 1];
        ktune::LoadRowVectors<kU - 1, kThreadsPerRow>(x_row, v, num_vec, xv);
        ktune::ScaleRowVectors(xv, ktune::RowVectors<0, kU - 1, kThreadsPerRow, VEC, T, kShift>(
                                       w_row, v, num_vec),
                               out_row, v, num_vec, inv_rms);
      }
      store_edge(row_start, xe, inv_rms);
    }
  });
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
  const auto set_inv_rms = [&](double total) {
    inv_rms = static_cast<float>(1.0 / sqrt(total / hidden + static_cast<double>(eps)));
  };
  ktune::ReferenceReduce<kReferenceThreads>(sum, partial, 0.0, ktune::AddDoubles, set_inv_rms);
  for (int i = threadIdx.x; i < hidden; i += kReferenceThreads) {
    out_row[i] = ktune::FromFloat<T>(ktune::ToFloat(x_row[i]) * inv_rms *
                                     ktune::ToFloat(weight[i]));
  }
}
