// Row helpers shared by ktune's row-wise normalization templates (rmsnorm, add_rmsnorm,
// layernorm): where a thread's row lies (a row per block or a row per warp), the row's
// reduction, strided vector loads of a row into registers, the row-length affine vectors
// (weight, bias) either prefetched into registers or loaded where used, and the RMS scale.
//
// Device code only, included after nothing but "ktune/common.cuh" (which it includes); the
// same rules hold: no host headers, every helper a pure function of its arguments (the
// reduction also of its row's threads), so any number of blocks may run them at once.
//
// The layout every helper assumes: the row is hidden / VEC vectors; thread t of a row
// (t < threads_per_row) owns the row vectors t, t + threads_per_row, t + 2 * threads_per_row,
// ..., so each step u of a strided loop is one coalesced access by the row's threads. A row
// that is no whole number of aligned vectors (EDGE = 1 or 2) has that layout over its body,
// and its head and tail elements go one per thread (ktune/edges.cuh); the row-length vectors
// (weight, bias) are then read shifted (the SHIFT argument of LoadVectorAt, from the
// kernel's WithShift), since the body starts mid-vector in them.
#ifndef KTUNE_ROW_CUH_
#define KTUNE_ROW_CUH_

#include "ktune/common.cuh"
#include "ktune/edges.cuh"

namespace ktune {

/// The compile-time shape of a row-wise kernel, its knobs checked once here.
///   T:             float, __half or __nv_bfloat16.
///   BLOCK:         threads per block (== blockDim.x); a multiple of 32 with BLOCK / 32 a
///                  power of two, at most KTUNE_MAX_THREADS.
///   VEC:           elements per vector access; 1, 2, 4 or 8 with VEC * sizeof(T) <= 16.
///   ROWS_PER_WARP: 0: one row per block, reduced by all BLOCK threads (grid = tokens);
///                  1: one row per warp, BLOCK / 32 rows per block, warp shuffles only.
///   CACHE:         vectors of the row each thread keeps in registers, 0 to 32.
///   PREFETCH_W:    0, 1 or 2: also keep this thread's weight (and bias) vectors, loaded
///                  with the row's, in registers (1) or shared memory (2, RowVectors); only
///                  with CACHE > 0.
template <typename T, int BLOCK, int VEC, int ROWS_PER_WARP, int CACHE, int PREFETCH_W>
struct RowKernel {
  static_assert(KernelParamsOk<T, BLOCK, VEC>());
  static_assert(ROWS_PER_WARP == 0 || ROWS_PER_WARP == 1, "ROWS_PER_WARP must be 0 or 1");
  static_assert(CACHE >= 0 && CACHE <= 32, "CACHE must be from 0 to 32 vectors");
  static_assert(PREFETCH_W >= 0 && PREFETCH_W <= 2, "PREFETCH_W must be 0, 1 or 2");
  static_assert(PREFETCH_W == 0 || CACHE > 0, "PREFETCH_W needs CACHE > 0");

  using Vec = AlignedVector<T, VEC>;
  static constexpr int kThreadsPerRow = ROWS_PER_WARP ? kWarpSize : BLOCK;
  static constexpr int kRowsPerBlock = ROWS_PER_WARP ? BLOCK / kWarpSize : 1;

  // This thread's index within its row, in [0, kThreadsPerRow).
  __device__ __forceinline__ static int Lane() { return threadIdx.x % kThreadsPerRow; }

  // This thread's row. Uniform over the threads of a row (a warp, or the whole block), so
  // a kernel that returns when it is past the last row skips no shuffle or barrier that a
  // thread which stays needs.
  __device__ __forceinline__ static long long Row() {
    return static_cast<long long>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  }
};

/// The row's sum of each thread's partial; every thread of the row gets the same value.
/// REQUIRES: every thread of the row calls it; with ROWS_PER_WARP == 0, a __syncthreads()
/// between two calls (BlockReduceSum reuses its slots).
template <int BLOCK, int ROWS_PER_WARP>
__device__ __forceinline__ float RowSum(float partial) {
  if constexpr (ROWS_PER_WARP) {
    return WarpReduceSum(partial);
  } else {
    return BlockReduceSum<BLOCK>(partial);
  }
}

/// Loads the row vectors first + u * STRIDE (u < N) that are below num_vec into v[u], and
/// zeros for the others (which add nothing to a sum). All N loads are issued before any is
/// used, and every v[u] is defined on every path, so nothing stays live across an
/// enclosing loop.
/// REQUIRES: row lies as SHIFT says (LoadVectorAt; 0: aligned to VEC * sizeof(T) bytes).
template <int N, int STRIDE, int SHIFT = 0, int VEC, typename T>
__device__ __forceinline__ void LoadRowVectors(const T* __restrict__ row, int first,
                                               int num_vec, AlignedVector<T, VEC> (&v)[N]) {
#pragma unroll
  for (int u = 0; u < N; ++u) {
    const int idx = first + u * STRIDE;
    v[u] = idx < num_vec ? LoadVectorAt<VEC, SHIFT>(row + idx * VEC) : AlignedVector<T, VEC>{};
  }
}

/// Loads this thread's N vectors (first = t, stride STRIDE) of row `row` of x, laid out as
/// `edges` cuts it, into v; returns its edge element (EdgeElement), loaded first.
template <int N, int STRIDE, int VEC, int EDGE, typename T>
__device__ __forceinline__ float LoadCachedRow(const RowEdges<VEC, EDGE>& edges,
                                               const T* __restrict__ x, long long row,
                                               int hidden, int t, AlignedVector<T, VEC> (&v)[N]) {
  const long long start = row * hidden;
  const T xe = EdgeElement(edges, x + start, t);
  LoadRowVectors<N, STRIDE>(x + start + edges.head, t, edges.num_vec, v);
  return ToFloat(xe);
}

/// The rows of a block that normalizes REUSE_W rows with one load of the row-length vectors
/// (weight, bias), kept in registers or shared memory (RowVectors). Those vectors are read
/// shifted when rows are not whole aligned vectors (EDGE = 1), and the shift, which costs
/// more instructions than the load itself, depends only on where the row's body starts:
/// rows r and r + VEC start at the same place within a vector (r * hidden and
/// (r + VEC) * hidden differ by a multiple of VEC), so block b takes rows
///   phase + VEC * (group * REUSE_W + j),  j < REUSE_W,  phase = b % VEC, group = b / VEC,
/// which share one cut, and grid = ceil(tokens / (VEC * REUSE_W)) * VEC blocks cover every
/// row once. REUSE_W == 1: row b (grid = tokens), the one-row-per-block kernel unchanged.
/// EDGE is the cut's (RowEdges): with EDGE 2 (bodies from a 128-byte line) the cut repeats
/// every RowEdges::kAlign = 8 * VEC rows instead, and that period stands for VEC above.
/// For a row per block only (ROWS_PER_WARP == 0).
template <int VEC, int REUSE_W, int EDGE>
struct RowGroup {
  static_assert(REUSE_W >= 1 && REUSE_W <= 16, "REUSE_W must be from 1 to 16");
  // Rows that share a cut.
  static constexpr int kPeriod = RowEdges<VEC, EDGE>::kAlign;
  static constexpr int kStep = REUSE_W == 1 ? 1 : kPeriod;  // rows between two of the block's

  /// Runs body(row, vectors, edge) on each of the block's rows below `tokens`, first to last:
  /// vectors and edge are this thread's N vectors (stride STRIDE) and edge element of the
  /// row (LoadCachedRow). A barrier separates two rows (a row per block reduces through
  /// BlockReduceSum, whose slots the next row reuses), and the next row's loads are issued
  /// before body runs on this one: one row at a time per block, a block's rows would
  /// otherwise have fewer loads in flight than as many one-row blocks have.
  /// REQUIRES: first == First() < tokens; every thread of the block calls.
  template <int N, int STRIDE, typename T, typename Body>
  __device__ __forceinline__ static void ForEachCachedRow(const RowEdges<VEC, EDGE>& edges,
                                                          const T* __restrict__ x, int hidden,
                                                          int t, long long first, int tokens,
                                                          Body&& body) {
    AlignedVector<T, VEC> cache[N];
    float xe = LoadCachedRow<N, STRIDE>(edges, x, first, hidden, t, cache);
#pragma unroll 1
    for (int j = 0; j < REUSE_W; ++j) {
      const long long row = first + j * kStep;  // j * kStep <= 16 * 64
      AlignedVector<T, VEC> next[REUSE_W > 1 ? N : 1];
      float next_xe = 0.f;
      if constexpr (REUSE_W > 1) {
        if (row >= tokens) break;  // uniform over the block
        if (j > 0) __syncthreads();
        if (j + 1 < REUSE_W && row + kStep < tokens) {
          next_xe = LoadCachedRow<N, STRIDE>(edges, x, row + kStep, hidden, t, next);
        }
      }
      body(row, cache, xe);
      if constexpr (REUSE_W > 1) {
        xe = next_xe;
#pragma unroll
        for (int c = 0; c < N; ++c) cache[c] = next[c];
      }
    }
  }

  /// The block's first row (uniform over the block).
  __device__ __forceinline__ static long long First() {
    if constexpr (REUSE_W == 1) {
      return blockIdx.x;
    } else {
      return static_cast<long long>(blockIdx.x / kPeriod) * kPeriod * REUSE_W +
             blockIdx.x % kPeriod;
    }
  }
};

/// A thread's vectors first + u * STRIDE (u < N) of a row-length vector that every row reads
/// (weight, bias). PREFETCH == 1: all loaded into registers when constructed, so that their
/// DRAM latency overlaps the row's own loads instead of following the reduction; costs N
/// vectors of registers. PREFETCH == 2: loaded the same way, then kept in this thread's
/// slots of a shared-memory array instead of registers (`staging`, N * STRIDE vectors,
/// slot u * STRIDE + first): for a block that uses them for several rows (REUSE_W), where
/// holding weight, bias and the row's cache in registers took 113 of them and a quarter of
/// the warps an SM can hold (measured). Each thread reads back only its own slots, so no
/// barrier is needed, and a warp's 16-byte slots are consecutive: no bank conflicts.
/// PREFETCH == 0: only the address is kept, and At loads the vector where it is used (after
/// the reduction; mostly an L1/L2 hit, since every row reads it). Either way At(u) returns
/// the same values.
/// REQUIRES: p lies as SHIFT says (LoadVectorAt: 0 aligned to VEC * sizeof(T) bytes, else
/// in an array based on such a boundary, each vector loaded shifted); At(u) only
/// for first + u * STRIDE < num_vec; `load` false (a vector the kernel never reads, e.g. an
/// absent bias) only if At is never called; PREFETCH == 2: staging != nullptr, first <
/// STRIDE, and no other RowVectors of the block shares `staging`.
template <int PREFETCH, int N, int STRIDE, int VEC, typename T, int SHIFT = 0>
class RowVectors {
 public:
  static_assert(PREFETCH >= 0 && PREFETCH <= 2, "PREFETCH must be 0, 1 or 2");

  __device__ __forceinline__ RowVectors(const T* __restrict__ p, int first, int num_vec,
                                        bool load = true,
                                        AlignedVector<T, VEC>* staging = nullptr)
      : p_(p), first_(first), staging_(staging) {
    if constexpr (PREFETCH) {
      if (load) {
        LoadRowVectors<N, STRIDE, SHIFT>(p, first, num_vec, v_);
      } else {
#pragma unroll
        for (int u = 0; u < N; ++u) v_[u] = AlignedVector<T, VEC>{};
      }
    }
    if constexpr (PREFETCH == 2) {
#pragma unroll
      for (int u = 0; u < N; ++u) staging_[u * STRIDE + first_] = v_[u];
    }
  }

  /// +0.f, computed from every prefetched vector (0.f at once without PREFETCH), for a
  /// sum to start from. ptxas schedules loads by its own heuristics: without a use, it
  /// issues the prefetched loads only after the row's first sums, which wait for the row's
  /// loads, so the two latencies add up again (seen in sm_90 SASS). Starting the row's sum
  /// from this value makes every prefetched load an input of it, so all are issued with
  /// the row's. REQUIRES: zero == 0 at run time (pass a value ptxas cannot fold, e.g.
  /// num_vec >> 31 with num_vec >= 1); then the result is exactly +0.f.
  __device__ __forceinline__ float ZeroAfterLoads(int zero) const {
    if constexpr (PREFETCH == 1) {
      unsigned int bits = 0;
#pragma unroll
      for (int u = 0; u < N; ++u) bits |= v_[u].words[0];
      return __uint_as_float(bits & static_cast<unsigned int>(zero));
    } else {
      return 0.f;  // PREFETCH 2: the stores into staging already wait for every load
    }
  }

  __device__ __forceinline__ AlignedVector<T, VEC> At(int u) const {
    if constexpr (PREFETCH == 1) {
      return v_[u];
    } else if constexpr (PREFETCH == 2) {
      return staging_[u * STRIDE + first_];
    } else {
      return LoadVectorAt<VEC, SHIFT>(p_ + (first_ + u * STRIDE) * VEC);
    }
  }

 private:
  const T* __restrict__ p_;
  int first_;
  AlignedVector<T, VEC>* staging_;
  AlignedVector<T, VEC> v_[PREFETCH ? N : 1];
};

/// acc plus the squares of v's elements, in element order.
template <typename T, int VEC>
__device__ __forceinline__ float SumOfSquares(const AlignedVector<T, VEC>& v, float acc) {
  float f[VEC];
  VectorToFloat(v, f);
#pragma unroll
  for (int k = 0; k < VEC; ++k) acc = fmaf(f[k], f[k], acc);
  return acc;
}

/// x * inv_rms * w elementwise, in this order (the RMSNorm references').
template <typename T, int VEC>
__device__ __forceinline__ AlignedVector<T, VEC> ScaleByRms(const AlignedVector<T, VEC>& xv,
                                                            const AlignedVector<T, VEC>& wv,
                                                            float inv_rms) {
  float xf[VEC];
  float wf[VEC];
  VectorToFloat(xv, xf);
  VectorToFloat(wv, wf);
  float of[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) of[k] = xf[k] * inv_rms * wf[k];
  return FloatToVector<T>(of);
}

/// out = x * inv_rms * weight for the row vectors first + u * STRIDE (u < N) below num_vec,
/// x already in registers (x[u] is row vector first + u * STRIDE), weight's vectors from w
/// (built with the same first).
/// REQUIRES: out_row aligned to VEC * sizeof(T) bytes.
template <int N, int STRIDE, int VEC, typename T, int PREFETCH, int SHIFT>
__device__ __forceinline__ void ScaleRowVectors(const AlignedVector<T, VEC> (&x)[N],
                                                const RowVectors<PREFETCH, N, STRIDE, VEC, T, SHIFT>& w,
                                                T* __restrict__ out_row, int first,
                                                int num_vec, float inv_rms) {
#pragma unroll
  for (int u = 0; u < N; ++u) {
    const int idx = first + u * STRIDE;
    if (idx < num_vec) StoreVector<VEC>(out_row + idx * VEC, ScaleByRms(x[u], w.At(u), inv_rms));
  }
}

}  // namespace ktune

#endif  // KTUNE_ROW_CUH_
