// softmax over the last dim of a row-major [rows, cols] matrix:
//   out[r, j] = exp(x[r, j] - max_j x[r, :]) / sum_j exp(x[r, j] - max_j x[r, :])
// with float accumulation for every element type, written either in the element type (out)
// or in float (out_f32), by a launch-wide flag. The candidate kernels and their reference;
// the manifest (softmax.textproto) gives their launch geometry and arguments.
//
// Four candidate kernels, by how a row's max and sum are found:
//   softmax_kernel          one block (or one warp) per row: the row cached in registers
//                           (one DRAM read), or online max/sum then a second pass;
//   softmax_cluster_kernel  SPLIT blocks of a thread-block cluster per row (sm_90+), each
//                           caching a slice in registers, max and sum exchanged through
//                           distributed shared memory: rows too long for one SM, one read;
//   softmax_partial_kernel, softmax_finish_kernel
//                           SPLIT blocks per row over two launches: partial online (max,
//                           sum) per slice into a scratch buffer, then each block combines
//                           them and writes its slice (re-read from L2): few rows.
//
// Device code only, compiled by NVRTC with -DKTUNE_MAX_THREADS=... -DKTUNE_MIN_BLOCKS=...
#include "ktune/common.cuh"
#include "ktune/edges.cuh"

namespace ktune_softmax {

/// Vectors each thread keeps in flight per pass when the row is not cached (CACHE == 0).
constexpr int kUncachedUnroll = 4;
static_assert(kUncachedUnroll >= 1, "kUncachedUnroll must be at least 1");

constexpr float kLog2e = 1.4426950408889634f;

// -inf, without <cmath>'s INFINITY (NVRTC compiles without host headers).
__device__ __forceinline__ float NegInf() { return -__int_as_float(0x7f800000); }

// e^(v - max) as 2^(v * log2(e) - max * log2(e)): one FFMA and one MUFU.EX2.
__device__ __forceinline__ float ExpShifted(float v, float max_log2e) {
  return exp2f(fmaf(v, kLog2e, -max_log2e));
}

template <int WIDTH = ktune::kWarpSize>
__device__ __forceinline__ float WarpReduceMax(float v) {
#pragma unroll
  for (int offset = WIDTH / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(ktune::kFullMask, v, offset));
  }
  return v;
}

// Block `part` of the SPLIT blocks that share a row of num_vec vectors: vectors [begin,
// end), ceil(num_vec / SPLIT) each (the last may have fewer, or none).
struct Slice {
  int begin;
  int end;
};
template <int SPLIT>
__device__ __forceinline__ Slice SliceOf(int num_vec, int part) {
  const int per = (num_vec + SPLIT - 1) / SPLIT;
  const int begin = part * per;
  return {begin, min(num_vec, begin + per)};
}

// A running softmax denominator: sum of e^(v - m) over the values seen, m their max.
// m = -inf, s = 0 for none.
struct MaxSum {
  float m;
  float s;
};

// The state of both halves' values. Two empty halves stay empty (no -inf - -inf).
__device__ __forceinline__ MaxSum Combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == NegInf()) return {m, 0.f};
  return {m, a.s * exp2f((a.m - m) * kLog2e) + b.s * exp2f((b.m - m) * kLog2e)};
}

template <int WIDTH = ktune::kWarpSize>
__device__ __forceinline__ MaxSum WarpCombine(MaxSum v) {
#pragma unroll
  for (int offset = WIDTH / 2; offset > 0; offset /= 2) {
    MaxSum o;
    o.m = __shfl_xor_sync(ktune::kFullMask, v.m, offset);
    o.s = __shfl_xor_sync(ktune::kFullMask, v.s, offset);
    v = Combine(v, o);
  }
  return v;
}

// Max / sum / combine over the threads of a row (a warp, or the whole block). `slots` is
// BLOCK / 32 shared floats (two arrays for MaxSum) that no other reduction uses.
// REQUIRES: every thread of the row calls it.

// The warp-level reductions RowReduce takes: Warp<WIDTH>(v) over WIDTH lanes.
struct MaxOp {
  template <int WIDTH>
  static __device__ __forceinline__ float Warp(float v) { return WarpReduceMax<WIDTH>(v); }
};
struct SumOp {
  template <int WIDTH>
  static __device__ __forceinline__ float Warp(float v) { return ktune::WarpReduceSum<WIDTH>(v); }
};

template <typename Op, int BLOCK, int ROWS_PER_WARP>
__device__ __forceinline__ float RowReduce(float v, float* slots) {
  v = Op::template Warp<ktune::kWarpSize>(v);
  if constexpr (ROWS_PER_WARP || BLOCK == ktune::kWarpSize) {
    return v;
  } else {
    constexpr int kWarps = BLOCK / ktune::kWarpSize;
    const int lane = threadIdx.x % ktune::kWarpSize;
    if (lane == 0) slots[threadIdx.x / ktune::kWarpSize] = v;
    __syncthreads();
    return Op::template Warp<kWarps>(slots[lane % kWarps]);
  }
}

template <int BLOCK, int ROWS_PER_WARP>
__device__ __forceinline__ float RowMax(float v, float* slots) {
  return RowReduce<MaxOp, BLOCK, ROWS_PER_WARP>(v, slots);
}

template <int BLOCK, int ROWS_PER_WARP>
__device__ __forceinline__ float RowSum(float v, float* slots) {
  return RowReduce<SumOp, BLOCK, ROWS_PER_WARP>(v, slots);
}

template <int BLOCK, int ROWS_PER_WARP>
__device__ __forceinline__ MaxSum RowCombine(MaxSum v, float* m_slots, float* s_slots) {
  v = WarpCombine(v);
  if constexpr (ROWS_PER_WARP || BLOCK == ktune::kWarpSize) {
    return v;
  } else {
    constexpr int kWarps = BLOCK / ktune::kWarpSize;
    const int lane = threadIdx.x % ktune::kWarpSize;
    if (lane == 0) {
      m_slots[threadIdx.x / ktune::kWarpSize] = v.m;
      s_slots[threadIdx.x / ktune::kWarpSize] = v.s;
    }
    __syncthreads();
    return WarpCombine<kWarps>({m_slots[lane % kWarps], s_slots[lane % kWarps]});
  }
}

// Adds one vector to a running (max, sum): the max moves once per vector, so VEC + 1
// exponentials per VEC values.
template <typename T, int VEC>
__device__ __forceinline__ MaxSum Accumulate(const ktune::AlignedVector<T, VEC>& v, MaxSum acc) {
  float f[VEC];
  ktune::VectorToFloat(v, f);
  float vm = f[0];
#pragma unroll
  for (int k = 1; k < VEC; ++k) vm = fmaxf(vm, f[k]);
  const float m = fmaxf(acc.m, vm);
  const float m_log2e = m * kLog2e;
  // acc.m = -inf (nothing yet) scales the 0 sum by 2^-inf = 0.
  float s = acc.s * exp2f(fmaf(acc.m, kLog2e, -m_log2e));
#pragma unroll
  for (int k = 0; k < VEC; ++k) s += ExpShifted(f[k], m_log2e);
  return {m, s};
}

// Writes e^(v - max) / sum for one vector at row vector idx: into out_row in T, or into
// out32_row in float when write_f32 (a launch-wide flag: a uniform branch).
template <typename T, int VEC>
__device__ __forceinline__ void WriteVector(const ktune::AlignedVector<T, VEC>& v,
                                            float max_log2e, float inv_sum, T* __restrict__ out_row,
                                            float* __restrict__ out32_row, int idx,
                                            int write_f32) {
  float f[VEC];
  ktune::VectorToFloat(v, f);
#pragma unroll
  for (int k = 0; k < VEC; ++k) f[k] = ExpShifted(f[k], max_log2e) * inv_sum;
  if (write_f32) {
    // At most 16 bytes per store: VEC = 8 floats are two.
    constexpr int kF = VEC < 4 ? VEC : 4;
#pragma unroll
    for (int h = 0; h < VEC / kF; ++h) {
      float part[kF];
#pragma unroll
      for (int k = 0; k < kF; ++k) part[k] = f[h * kF + k];
      ktune::StoreVector<kF>(out32_row + idx * VEC + h * kF, ktune::FloatToVector<float>(part));
    }
  } else {
    ktune::StoreVector<VEC>(out_row + idx * VEC, ktune::FloatToVector<T>(f));
  }
}

// Writes e^(v - max) / sum of one edge element (ktune/edges.cuh) at column col of the row.
template <typename T>
__device__ __forceinline__ void WriteElement(float v, float max_log2e, float inv_sum,
                                             T* __restrict__ out_row,
                                             float* __restrict__ out32_row, int col,
                                             int write_f32) {
  const float y = ExpShifted(v, max_log2e) * inv_sum;
  if (write_f32) {
    out32_row[col] = y;
  } else {
    out_row[col] = ktune::FromFloat<T>(y);
  }
}

// An edge element from ktune::EdgeElement as a float, once the row's vector loads are
// issued; -inf, which adds nothing to a max or a sum, where thread t takes none.
template <typename T, int VEC, int EDGE>
__device__ __forceinline__ float EdgeValue(const ktune::RowEdges<VEC, EDGE>& edges, T loaded,
                                           int t) {
  return edges.Has(t) ? ktune::ToFloat(loaded) : NegInf();
}

// The (max, sum) of the edge value from EdgeValue: empty for -inf.
__device__ __forceinline__ MaxSum EdgeMaxSum(float v) {
  return v == NegInf() ? MaxSum{NegInf(), 0.f} : MaxSum{v, 1.f};
}

// Loads the vectors begin + t + c * STRIDE (c < N) below end into v[c] (all loads issued
// before any is used); the others are left undefined and never read.
template <int N, int STRIDE, int VEC, typename T>
__device__ __forceinline__ void LoadSlice(const T* __restrict__ row, int first, int end,
                                          ktune::AlignedVector<T, VEC> (&v)[N]) {
#pragma unroll
  for (int c = 0; c < N; ++c) {
    const int idx = first + c * STRIDE;
    v[c] = idx < end ? ktune::LoadVector<VEC>(row + idx * VEC) : ktune::AlignedVector<T, VEC>{};
  }
}

template <typename T, int VEC, int N, int STRIDE>
__device__ __forceinline__ float SliceMax(const ktune::AlignedVector<T, VEC> (&v)[N], int first,
                                          int end) {
  float m = NegInf();
#pragma unroll
  for (int c = 0; c < N; ++c) {
    if (first + c * STRIDE < end) {
      float f[VEC];
      ktune::VectorToFloat(v[c], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) m = fmaxf(m, f[k]);
    }
  }
  return m;
}

template <typename T, int VEC, int N, int STRIDE>
__device__ __forceinline__ float SliceSum(const ktune::AlignedVector<T, VEC> (&v)[N], int first,
                                          int end, float max_log2e) {
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < N; ++c) {
    if (first + c * STRIDE < end) {
      float f[VEC];
      ktune::VectorToFloat(v[c], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) s += ExpShifted(f[k], max_log2e);
    }
  }
  return s;
}

// Online (max, sum) of this thread's vectors first, first + STRIDE, ... below end, kU loads
// in flight per step.
template <int STRIDE, int VEC, typename T>
__device__ __forceinline__ MaxSum OnlineSlice(const T* __restrict__ row, int first, int end) {
  constexpr int kU = kUncachedUnroll;
  MaxSum acc = {NegInf(), 0.f};
#pragma unroll 1
  for (int v = first; v < end; v += STRIDE * kU) {
    ktune::AlignedVector<T, VEC> xv[kU];
    LoadSlice<kU, STRIDE>(row, v, end, xv);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (v + u * STRIDE < end) acc = Accumulate(xv[u], acc);
    }
  }
  return acc;
}

// Writes this thread's vectors first, first + STRIDE, ... below end, re-reading x.
template <int STRIDE, int VEC, typename T>
__device__ __forceinline__ void WriteSlice(const T* __restrict__ row, int first, int end,
                                           float max_log2e, float inv_sum,
                                           T* __restrict__ out_row, float* __restrict__ out32_row,
                                           int write_f32) {
  constexpr int kU = kUncachedUnroll;
#pragma unroll 1
  for (int v = first; v < end; v += STRIDE * kU) {
    ktune::AlignedVector<T, VEC> xv[kU];
    LoadSlice<kU, STRIDE>(row, v, end, xv);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int idx = v + u * STRIDE;
      if (idx < end) WriteVector(xv[u], max_log2e, inv_sum, out_row, out32_row, idx, write_f32);
    }
  }
}

// --- Thread-block clusters (sm_90+): distributed shared memory -------------------------

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Every thread of every block of the cluster arrives and waits; the release/acquire pair
// orders shared-memory writes before the barrier with peers' reads after it.
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void ClusterArrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void ClusterWait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The float at `p` (this block's shared memory) in the shared memory of cluster block `rank`.
__device__ __forceinline__ float LoadPeerShared(const float* p, unsigned rank) {
  const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}
#endif

}  // namespace ktune_softmax

/// Softmax of each row, one block (ROWS_PER_WARP = 0) or one warp (1) per row.
///   T:             float, __half or __nv_bfloat16.
///   BLOCK:         threads per block (== blockDim.x); a multiple of 32 with BLOCK / 32 a
///                  power of two, at most KTUNE_MAX_THREADS.
///   VEC:           elements per vector access; 1, 2, 4 or 8 with VEC * sizeof(T) <= 16.
///   ROWS_PER_WARP: 0: grid = rows; 1: BLOCK / 32 rows per block, grid = ceil(rows / (BLOCK
///                  / 32)), shuffles only.
///   CACHE:         0: online (max, sum) in one read, then a second read writes (mostly L2
///                  hits); C > 0: each thread keeps its C vectors of the row in registers:
///                  exact max, then the sum, then the output, one DRAM read. Needs cols <=
///                  threads_per_row * VEC * C.
///   EDGE:          0: rows are whole aligned vectors (cols % VEC == 0); 1: any cols, the
///                  row's unaligned head and tail elements taken one per thread beside the
///                  vectors (ktune/edges.cuh); 2: as 1, the vectors (16-byte) from the
///                  row's first 128-byte line, up to 9 * VEC - 1 edge elements (BLOCK >=
///                  9 * VEC, a row per block).
/// write_f32: 0: out (T) is written, out_f32 untouched; 1: out_f32 (float) is written, out
/// untouched.
/// REQUIRES: cols % VEC == 0 unless EDGE; x, out, out_f32 aligned to 16 bytes; the outputs
/// overlap nothing (__restrict__); 1 <= cols.
template <typename T, int BLOCK, int VEC, int ROWS_PER_WARP, int CACHE, int EDGE>
__global__ void KTUNE_LAUNCH_BOUNDS
    softmax_kernel(const T* __restrict__ x, T* __restrict__ out, float* __restrict__ out_f32,
                   int rows, int cols, int write_f32) {
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh
  static_assert(ktune::KernelParamsOk<T, BLOCK, VEC>());
  static_assert(ROWS_PER_WARP == 0 || ROWS_PER_WARP == 1, "ROWS_PER_WARP must be 0 or 1");
  static_assert(CACHE >= 0 && CACHE <= 32, "CACHE must be from 0 to 32 vectors");
  namespace sm = ktune_softmax;
  constexpr int kThreadsPerRow = ROWS_PER_WARP ? ktune::kWarpSize : BLOCK;
  constexpr int kRowsPerBlock = ROWS_PER_WARP ? BLOCK / ktune::kWarpSize : 1;
  constexpr int kSlots = BLOCK / ktune::kWarpSize;
  __shared__ float slots_a[kSlots];
  __shared__ float slots_b[kSlots];

  const int t = threadIdx.x % kThreadsPerRow;
  const long long row =
      static_cast<long long>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreadsPerRow;
  // Uniform over the threads of a row, so no thread that stays skips a shuffle or barrier.
  if (row >= rows) return;
  const long long row_start = row * cols;
  const T* __restrict__ x_row = x + row_start;
  T* __restrict__ out_row = out + (write_f32 ? 0 : row_start);
  float* __restrict__ out32_row = out_f32 + (write_f32 ? row_start : 0);
  // The vectors start `head` elements into the row, in x and in either output alike.
  const ktune::RowEdges<VEC, EDGE> edges(row_start, cols);
  const int num_vec = edges.num_vec;
  const T* __restrict__ x_body = x_row + edges.head;
  T* __restrict__ out_body = out_row + edges.head;
  float* __restrict__ out32_body = out32_row + edges.head;
  const T x_edge = ktune::EdgeElement(edges, x_row, t);

  float m_log2e;
  float inv_sum;
  float xe;
  if constexpr (CACHE > 0) {
    ktune::AlignedVector<T, VEC> cache[CACHE];
    sm::LoadSlice<CACHE, kThreadsPerRow>(x_body, t, num_vec, cache);
    xe = sm::EdgeValue(edges, x_edge, t);
    float mine = sm::SliceMax<T, VEC, CACHE, kThreadsPerRow>(cache, t, num_vec);
    if constexpr (EDGE) mine = fmaxf(mine, xe);  // (not folded for EDGE = 0: NaN rules)
    const float m = sm::RowMax<BLOCK, ROWS_PER_WARP>(mine, slots_a);
    m_log2e = m * sm::kLog2e;
    float partial = sm::SliceSum<T, VEC, CACHE, kThreadsPerRow>(cache, t, num_vec, m_log2e);
    if constexpr (EDGE) partial += sm::ExpShifted(xe, m_log2e);
    inv_sum = 1.f / sm::RowSum<BLOCK, ROWS_PER_WARP>(partial, slots_b);
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
      const int idx = t + c * kThreadsPerRow;
      if (idx < num_vec) {
        sm::WriteVector(cache[c], m_log2e, inv_sum, out_body, out32_body, idx, write_f32);
      }
    }
  } else {
    sm::MaxSum mine = sm::OnlineSlice<kThreadsPerRow, VEC>(x_body, t, num_vec);
    xe = sm::EdgeValue(edges, x_edge, t);
    if constexpr (EDGE) mine = sm::Combine(mine, sm::EdgeMaxSum(xe));
    const sm::MaxSum ms = sm::RowCombine<BLOCK, ROWS_PER_WARP>(mine, slots_a, slots_b);
    m_log2e = ms.m * sm::kLog2e;
    inv_sum = 1.f / ms.s;
    sm::WriteSlice<kThreadsPerRow, VEC>(x_body, t, num_vec, m_log2e, inv_sum, out_body,
                                        out32_body, write_f32);
  }
  if constexpr (EDGE) {
    if (edges.Has(t)) {
      sm::WriteElement(xe, m_log2e, inv_sum, out_row, out32_row, edges.Column(t), write_f32);
    }
  }
}

/// Softmax of each row by a cluster of SPLIT blocks (grid = rows * SPLIT; blocks row * SPLIT
/// ... row * SPLIT + SPLIT - 1 form one cluster): block k caches row vectors [k * per, (k +
/// 1) * per), per = ceil(cols / VEC / SPLIT), in registers; the blocks' maxima, then their
/// sums, are exchanged through distributed shared memory. One DRAM read of rows longer than
/// one SM's registers hold. sm_90 and later.
///   BLOCK, VEC, CACHE, EDGE: as softmax_kernel's (one row per block; block 0 of the
///   cluster takes the edge elements); SPLIT: 2, 4 or 8 (the portable cluster sizes). Needs
///   cols <= SPLIT * BLOCK * VEC * CACHE.
template <typename T, int BLOCK, int VEC, int CACHE, int SPLIT, int EDGE>
__global__ void __cluster_dims__(SPLIT, 1, 1) KTUNE_LAUNCH_BOUNDS
    softmax_cluster_kernel(const T* __restrict__ x, T* __restrict__ out,
                           float* __restrict__ out_f32, int rows, int cols, int write_f32) {
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh
  static_assert(ktune::KernelParamsOk<T, BLOCK, VEC>());
  static_assert(CACHE >= 1 && CACHE <= 32, "CACHE must be from 1 to 32 vectors");
  static_assert(SPLIT == 2 || SPLIT == 4 || SPLIT == 8, "SPLIT must be 2, 4 or 8");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace sm = ktune_softmax;
  constexpr int kSlots = BLOCK / ktune::kWarpSize;
  __shared__ float slots_a[kSlots];
  __shared__ float slots_b[kSlots];
  __shared__ float block_max;
  __shared__ float block_sum;

  // grid = rows * SPLIT exactly, so every block has a row and no thread leaves early: all
  // must reach the cluster barriers.
  const long long row = blockIdx.x / SPLIT;
  const int part = static_cast<int>(blockIdx.x % SPLIT);  // == %cluster_ctarank
  const long long row_start = row * cols;
  const T* __restrict__ x_row = x + row_start;
  T* __restrict__ out_row = out + (write_f32 ? 0 : row_start);
  float* __restrict__ out32_row = out_f32 + (write_f32 ? row_start : 0);
  const ktune::RowEdges<VEC, EDGE> edges(row_start, cols);
  const sm::Slice slice = sm::SliceOf<SPLIT>(edges.num_vec, part);
  const int begin = slice.begin;
  const int end = slice.end;
  const int first = begin + static_cast<int>(threadIdx.x);
  const bool takes_edge = part == 0 && edges.Has(threadIdx.x);
  const T x_edge = takes_edge ? x_row[edges.Column(threadIdx.x)] : T{};
  const T* __restrict__ x_body = x_row + edges.head;

  ktune::AlignedVector<T, VEC> cache[CACHE];
  sm::LoadSlice<CACHE, BLOCK>(x_body, first, end, cache);
  float mine = sm::SliceMax<T, VEC, CACHE, BLOCK>(cache, first, end);
  const float xe = takes_edge ? ktune::ToFloat(x_edge) : sm::NegInf();
  if constexpr (EDGE) mine = fmaxf(mine, xe);  // (not folded for EDGE = 0: NaN rules)
  const float local_max = sm::RowMax<BLOCK, 0>(mine, slots_a);
  if (threadIdx.x == 0) block_max = local_max;
  sm::ClusterSync();
  float m = sm::NegInf();
#pragma unroll
  for (int k = 0; k < SPLIT; ++k) m = fmaxf(m, sm::LoadPeerShared(&block_max, k));
  const float m_log2e = m * sm::kLog2e;
  float partial = sm::SliceSum<T, VEC, CACHE, BLOCK>(cache, first, end, m_log2e);
  if constexpr (EDGE) partial += sm::ExpShifted(xe, m_log2e);
  const float local_sum = sm::RowSum<BLOCK, 0>(partial, slots_b);
  if (threadIdx.x == 0) block_sum = local_sum;
  sm::ClusterSync();
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < SPLIT; ++k) s += sm::LoadPeerShared(&block_sum, k);
  // Done reading the peers' shared memory; they may leave once everyone has arrived. The
  // writes below overlap the wait.
  sm::ClusterArrive();
  const float inv_sum = 1.f / s;
#pragma unroll
  for (int c = 0; c < CACHE; ++c) {
    const int idx = first + c * BLOCK;
    if (idx < end) {
      sm::WriteVector(cache[c], m_log2e, inv_sum, out_row + edges.head,
                      out32_row + edges.head, idx, write_f32);
    }
  }
  if constexpr (EDGE) {
    if (takes_edge) {
      sm::WriteElement(xe, m_log2e, inv_sum, out_row, out32_row, edges.Column(threadIdx.x),
                       write_f32);
    }
  }
  sm::ClusterWait();
#else
  __trap();  // the manifest launches it only on sm_90 and later
#endif
}

/// First of two launches with SPLIT blocks per row (grid = rows * SPLIT): block k finds the
/// online (max, sum) of row vectors [k * per, (k + 1) * per), per = ceil(cols / VEC /
/// SPLIT), and stores it at partial[2 * (row * SPLIT + k)] (max, then sum).
///   BLOCK, VEC, EDGE: as softmax_kernel's (one row per block; block 0 of a row takes the
///   edge elements); SPLIT: 2 to 32.
/// REQUIRES: partial holds 2 * rows * SPLIT floats.
template <typename T, int BLOCK, int VEC, int SPLIT, int EDGE>
__global__ void KTUNE_LAUNCH_BOUNDS
    softmax_partial_kernel(const T* __restrict__ x, float* __restrict__ partial, int rows,
                           int cols) {
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh
  static_assert(ktune::KernelParamsOk<T, BLOCK, VEC>());
  static_assert(SPLIT >= 2 && SPLIT <= ktune::kWarpSize, "SPLIT must be from 2 to 32");
  namespace sm = ktune_softmax;
  constexpr int kSlots = BLOCK / ktune::kWarpSize;
  __shared__ float slots_a[kSlots];
  __shared__ float slots_b[kSlots];

  const long long row = blockIdx.x / SPLIT;
  const int part = static_cast<int>(blockIdx.x % SPLIT);
  if (row >= rows) return;
  const T* __restrict__ x_row = x + row * cols;
  const ktune::RowEdges<VEC, EDGE> edges(row * cols, cols);
  const sm::Slice slice = sm::SliceOf<SPLIT>(edges.num_vec, part);
  // Block 0's edge element, loaded before the slice's vectors.
  const T x_edge = part == 0 ? ktune::EdgeElement(edges, x_row, threadIdx.x) : T{};
  sm::MaxSum mine = sm::OnlineSlice<BLOCK, VEC>(
      x_row + edges.head, slice.begin + static_cast<int>(threadIdx.x), slice.end);
  if constexpr (EDGE) {
    if (part == 0) {
      mine = sm::Combine(mine, sm::EdgeMaxSum(sm::EdgeValue(edges, x_edge, threadIdx.x)));
    }
  }
  const sm::MaxSum ms = sm::RowCombine<BLOCK, 0>(mine, slots_a, slots_b);
  if (threadIdx.x == 0) {
    partial[2 * blockIdx.x] = ms.m;
    partial[2 * blockIdx.x + 1] = ms.s;
  }
}

/// Second of the two launches (same grid): every warp combines the row's SPLIT partials
/// (one per lane), then block k writes row vectors [k * per, (k + 1) * per), re-reading x
/// (an L2 hit when the launch's rows fit in L2, which is what this variant is for).
///   As softmax_partial_kernel's (block 0 of a row writes the edge elements); write_f32 as
///   softmax_kernel's.
template <typename T, int BLOCK, int VEC, int SPLIT, int EDGE>
__global__ void KTUNE_LAUNCH_BOUNDS
    softmax_finish_kernel(const T* __restrict__ x, const float* __restrict__ partial,
                          T* __restrict__ out, float* __restrict__ out_f32, int rows, int cols,
                          int write_f32) {
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh
  static_assert(ktune::KernelParamsOk<T, BLOCK, VEC>());
  static_assert(SPLIT >= 2 && SPLIT <= ktune::kWarpSize, "SPLIT must be from 2 to 32");
  namespace sm = ktune_softmax;

  const long long row = blockIdx.x / SPLIT;
  const int part = static_cast<int>(blockIdx.x % SPLIT);
  if (row >= rows) return;
  const int lane = threadIdx.x % ktune::kWarpSize;
  sm::MaxSum mine = {sm::NegInf(), 0.f};
  if (lane < SPLIT) {
    mine.m = partial[2 * (row * SPLIT + lane)];
    mine.s = partial[2 * (row * SPLIT + lane) + 1];
  }
  const sm::MaxSum ms = sm::WarpCombine(mine);

  const long long row_start = row * cols;
  const ktune::RowEdges<VEC, EDGE> edges(row_start, cols);
  const sm::Slice slice = sm::SliceOf<SPLIT>(edges.num_vec, part);
  const T* __restrict__ x_row = x + row_start;
  T* __restrict__ out_row = out + (write_f32 ? 0 : row_start);
  float* __restrict__ out32_row = out_f32 + (write_f32 ? row_start : 0);
  const float m_log2e = ms.m * sm::kLog2e;
  const float inv_sum = 1.f / ms.s;
  // The edge element is loaded before the slice's vectors, so its latency overlaps theirs
  // instead of following the slice's stores; kept in T until then (converted next to the
  // load, the conversion waited out its latency before the slice's first vector load).
  const bool takes_edge = EDGE && part == 0 && edges.Has(threadIdx.x);
  const int edge_col = edges.Column(threadIdx.x);
  T xe{};
  if constexpr (EDGE) {
    if (takes_edge) xe = x_row[edge_col];
  }
  sm::WriteSlice<BLOCK, VEC>(x_row + edges.head, slice.begin + static_cast<int>(threadIdx.x),
                             slice.end, m_log2e, inv_sum, out_row + edges.head,
                             out32_row + edges.head, write_f32);
  if constexpr (EDGE) {
    if (takes_edge) {
      sm::WriteElement(ktune::ToFloat(xe), m_log2e, inv_sum, out_row, out32_row, edge_col,
                       write_f32);
    }
  }
}

/// The reference: one row per block of 32 threads, in double: the max (exact), then each
/// thread sums exp(x - max) over a strided slice and thread 0 adds the 32 partials in order;
/// out = exp(x - max) / sum rounded to float, then to T unless write_f32. Launched with grid
/// = rows, block = 32 (manifest).
///   T: float, __half or __nv_bfloat16.
template <typename T>
__global__ void KTUNE_LAUNCH_BOUNDS
    softmax_reference(const T* __restrict__ x, T* __restrict__ out, float* __restrict__ out_f32,
                      int rows, int cols, int write_f32) {
  static_assert(ktune::kIsElementType<T>, "T must be float, __half or __nv_bfloat16");
  constexpr int kReferenceThreads = 32;
  __shared__ double partial[kReferenceThreads];
  __shared__ double row_max;
  __shared__ double row_sum;

  const long long row = blockIdx.x;
  if (row >= rows || threadIdx.x >= kReferenceThreads) return;
  const T* x_row = x + row * cols;

  double m = ktune_softmax::NegInf();
  for (int j = threadIdx.x; j < cols; j += kReferenceThreads) {
    m = fmax(m, static_cast<double>(ktune::ToFloat(x_row[j])));
  }
  ktune::ReferenceReduce<kReferenceThreads>(
      m, partial, ktune_softmax::NegInf(), [](double a, double b) { return fmax(a, b); },
      [&](double total) { row_max = total; });
  double s = 0.0;
  for (int j = threadIdx.x; j < cols; j += kReferenceThreads) {
    s += exp(static_cast<double>(ktune::ToFloat(x_row[j])) - row_max);
  }
  __syncwarp();  // everyone has read row_max's neighbours in partial before it is overwritten
  ktune::ReferenceReduce<kReferenceThreads>(s, partial, 0.0, ktune::AddDoubles,
                                            [&](double total) { row_sum = total; });
  for (int j = threadIdx.x; j < cols; j += kReferenceThreads) {
    const float v =
        static_cast<float>(exp(static_cast<double>(ktune::ToFloat(x_row[j])) - row_max) / row_sum);
    if (write_f32) {
      out_f32[row * cols + j] = v;
    } else {
      out[row * cols + j] = ktune::FromFloat<T>(v);
    }
  }
}
