// gemv: the decode-time matrix product y[b, n] = sum_k W[n, k] * x[b, k] for a small batch,
// W [N, K] row-major, x [batch, K], y [batch, N], float accumulation for every element type.
// The candidate kernel, split-K's reduction kernel and the reference; the manifest
// (gemv.textproto) gives their launch geometry and arguments.
//
// Memory-bound on W: each element of W is used batch times, so the kernels stream W once
// with 16-byte loads, several in flight per thread. Two candidate kernels:
//   gemv_kernel      CUDA cores: each thread keeps ROWS x BATCH float accumulators and
//                    re-reads x's vectors for each step (from L1);
//   gemv_mma_kernel  tensor cores (f16/bf16, sm_80+): W's rows are the A operand and the
//                    batch the 8 columns of B of mma.m16n8k16 with float accumulation, so
//                    one x vector serves 16 rows and no CUDA-core FMA touches W.
//
// Device code only, compiled by NVRTC with -DKTUNE_MAX_THREADS=... -DKTUNE_MIN_BLOCKS=...
#include "ktune/common.cuh"

namespace ktune_gemv {

// 16 bytes of W that are read once: ld.global.nc with no L1 allocation, so the streamed
// matrix does not evict x, which every row reads again.
template <int N, typename T>
__device__ __forceinline__ ktune::AlignedVector<T, N> LoadStreaming(const T* p) {
  ktune::AlignedVector<T, N> v;
  if constexpr (sizeof(T) * N == 16) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.words[0]), "=r"(v.words[1]), "=r"(v.words[2]), "=r"(v.words[3])
                 : "l"(p));
  } else {
    v = ktune::LoadVector<N>(p);
  }
  return v;
}

// acc[r][b] += dot(w[r], x[b]) over the VEC elements of one vector, for the ROWS rows and
// the first `batch` of the BATCH batch rows.
template <int ROWS, int BATCH, int VEC, typename T>
__device__ __forceinline__ void Accumulate(const ktune::AlignedVector<T, VEC> (&w)[ROWS],
                                           const ktune::AlignedVector<T, VEC> (&x)[BATCH],
                                           int batch, float (&acc)[ROWS][BATCH]) {
  float wf[ROWS][VEC];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) ktune::VectorToFloat(w[r], wf[r]);
#pragma unroll
  for (int b = 0; b < BATCH; ++b) {
    if (b < batch) {
      float xf[VEC];
      ktune::VectorToFloat(x[b], xf);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[r][b] = fmaf(wf[r][e], xf[e], acc[r][b]);
      }
    }
  }
}

// W and x fragments of one mma step as 32-bit words (two 16-bit elements each).
struct Words4 {
  unsigned int w[4];
};

// 16 bytes at p as four words, or zeros when !valid (nothing is loaded).
template <bool kStreaming, typename T>
__device__ __forceinline__ Words4 LoadWords(const T* p, bool valid) {
  Words4 r = {{0u, 0u, 0u, 0u}};
  if (valid) {
    const ktune::AlignedVector<T, 8> v =
        kStreaming ? LoadStreaming<8>(p) : ktune::LoadVector<8>(p);
#pragma unroll
    for (int i = 0; i < 4; ++i) r.w[i] = v.words[i];
  }
  return r;
}

// d += A B for one m16n8k16 tile: A's four words, B's two, four float accumulators.
template <typename T>
__device__ __forceinline__ void Mma16816(float (&d)[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (ktune::kIsSame<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, "
        "%7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
#else
  __trap();  // the manifest chooses this kernel only on sm_80 and later
#endif
}

}  // namespace ktune_gemv

/// y = W x for a small batch (or, SPLIT_K > 1, the partial sums of K slices), float
/// accumulation.
///   T:       float, __half or __nv_bfloat16 (W, x, y).
///   BLOCK:   threads per block (== blockDim.x); a multiple of TPR, at most
///            KTUNE_MAX_THREADS.
///   TPR:     threads per row group: the TPR threads of a group (an aligned part of a
///            warp; 4, 8, 16 or 32) share the group's rows, each taking every TPR-th vector
///            of the K slice, and end with a warp-shuffle reduction.
///   ROWS:    rows per group (1, 2 or 4): each x vector loaded is used for ROWS rows of W;
///            a block covers BLOCK / TPR * ROWS consecutive rows.
///   VEC_BYTES: bytes per load of W and x, 2, 4, 8 or 16 and at least sizeof(T) (16: one
///            LDG.128 that skips L1); VEC = VEC_BYTES / sizeof(T) elements.
///   UNROLL:  vectors per thread per row in flight per step (ROWS * UNROLL loads of W).
///   SPLIT_K: 1: grid.y = 1, y is written directly; S > 1: grid.y = S, block (x, s) sums the
///            s-th of S slices of K (ceil(K / VEC / S) vectors each) and writes
///            partial[(s * batch + b) * N + n] in float; gemv_splitk_reduce then sums the
///            S partials into y.
///   BATCH:   batch rows the kernel is compiled for (registers: ROWS * BATCH accumulators);
///            rows b >= batch are skipped by uniform branches.
/// REQUIRES: 1 <= batch <= BATCH; K % VEC == 0; W, x, y aligned to VEC_BYTES (cudaMalloc
/// gives 256); y and partial do not overlap W or x; partial holds SPLIT_K * batch * N
/// floats when SPLIT_K > 1.
template <typename T, int BLOCK, int TPR, int ROWS, int VEC_BYTES, int UNROLL, int SPLIT_K,
          int BATCH>
__global__ void KTUNE_LAUNCH_BOUNDS gemv_kernel(const T* __restrict__ w, const T* __restrict__ x,
                                                T* __restrict__ y, float* __restrict__ partial,
                                                int n_rows, int k_cols, int batch) {
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh
  static_assert(ktune::KernelParamsOk<T, BLOCK>());
  static_assert(TPR == 4 || TPR == 8 || TPR == 16 || TPR == 32, "TPR must be 4, 8, 16 or 32");
  static_assert(ROWS == 1 || ROWS == 2 || ROWS == 4, "ROWS must be 1, 2 or 4");
  static_assert(VEC_BYTES == 2 || VEC_BYTES == 4 || VEC_BYTES == 8 || VEC_BYTES == 16,
                "VEC_BYTES must be 2, 4, 8 or 16");
  static_assert(VEC_BYTES >= sizeof(T), "VEC_BYTES must hold at least one element");
  static_assert(UNROLL >= 1 && UNROLL <= 8, "UNROLL must be from 1 to 8");
  static_assert(SPLIT_K >= 1 && SPLIT_K <= 16, "SPLIT_K must be from 1 to 16");
  static_assert(BATCH >= 1 && BATCH <= 8, "BATCH must be from 1 to 8");
  constexpr int VEC = VEC_BYTES / static_cast<int>(sizeof(T));
  using Vec = ktune::AlignedVector<T, VEC>;
  constexpr int kRowsPerBlock = BLOCK / TPR * ROWS;

  const int t = threadIdx.x % TPR;
  const int row0 = blockIdx.x * kRowsPerBlock + threadIdx.x / TPR * ROWS;
  // Rows past N load row N - 1 (valid memory, results dropped), so the group's shuffles
  // stay full-warp without a branch around them.
  const T* w_row[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int n = row0 + r < n_rows ? row0 + r : n_rows - 1;
    w_row[r] = w + static_cast<long long>(n) * k_cols;
  }

  const int num_vec = k_cols / VEC;
  const int per_split = (num_vec + SPLIT_K - 1) / SPLIT_K;
  const int v_begin = SPLIT_K == 1 ? 0 : blockIdx.y * per_split;
  const int v_end = SPLIT_K == 1 ? num_vec : min(num_vec, v_begin + per_split);

  float acc[ROWS][BATCH];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
#pragma unroll
    for (int b = 0; b < BATCH; ++b) acc[r][b] = 0.f;
  }

  // Steps of UNROLL vectors per row with no bounds checks while the whole step is inside
  // the slice, all ROWS * UNROLL loads of W issued before the first FMA.
  int v = v_begin + t;
#pragma unroll 1
  for (; v + (UNROLL - 1) * TPR < v_end; v += UNROLL * TPR) {
    Vec wv[UNROLL][ROWS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        wv[u][r] = ktune_gemv::LoadStreaming<VEC>(w_row[r] + (v + u * TPR) * VEC);
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      Vec xv[BATCH];
#pragma unroll
      for (int b = 0; b < BATCH; ++b) {
        if (b < batch) xv[b] = ktune::LoadVector<VEC>(x + static_cast<long long>(b) * k_cols + (v + u * TPR) * VEC);
      }
      ktune_gemv::Accumulate<ROWS, BATCH, VEC>(wv[u], xv, batch, acc);
    }
  }
  // The fewer than UNROLL vectors left, one at a time.
#pragma unroll 1
  for (; v < v_end; v += TPR) {
    Vec wv[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) wv[r] = ktune_gemv::LoadStreaming<VEC>(w_row[r] + v * VEC);
    Vec xv[BATCH];
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      if (b < batch) xv[b] = ktune::LoadVector<VEC>(x + static_cast<long long>(b) * k_cols + v * VEC);
    }
    ktune_gemv::Accumulate<ROWS, BATCH, VEC>(wv, xv, batch, acc);
  }

#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
#pragma unroll
    for (int b = 0; b < BATCH; ++b) acc[r][b] = ktune::WarpReduceSum<TPR>(acc[r][b]);
  }
  if (t != 0) return;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int n = row0 + r;
    if (n >= n_rows) break;
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      if (b >= batch) break;
      if constexpr (SPLIT_K == 1) {
        y[static_cast<long long>(b) * n_rows + n] = ktune::FromFloat<T>(acc[r][b]);
      } else {
        partial[(static_cast<long long>(blockIdx.y) * batch + b) * n_rows + n] = acc[r][b];
      }
    }
  }
}

/// y = W x on tensor cores (or, SPLIT_K > 1, the partial sums of K slices), float
/// accumulation: each mma.m16n8k16 multiplies 16 rows of W (A, row-major) by x's batch rows
/// as the 8 columns of B, rows b >= batch being zeros.
///
/// Layout. Lane l of a warp is in group g = l / 4 with q = l % 4. mma's fragments give lane
/// (g, q) A's rows g and g + 8 at k = 2q, 2q + 1, 2q + 8, 2q + 9, B's column g at the same
/// k, and the outputs (rows g, g + 8; columns 2q, 2q + 1). A dot product does not depend on
/// the order of k, so each lane loads 8 *consecutive* elements (16 bytes) of rows g and
/// g + 8 and of x's row g at columns 32 c + 8 q of a 32-column chunk c, and feeds them to
/// two mma steps as k = {2q, 2q + 1, 2q + 8, 2q + 9} <- elements {0, 1, 2, 3} and {4, 5,
/// 6, 7}: A and B agree on that order, which is all the product needs.
///
///   T:       __half or __nv_bfloat16.
///   BLOCK:   threads per block, BLOCK / 32 warps: the warps share the block's 16 * ROWS
///            rows and take every (BLOCK / 32)-th chunk of the K slice, then add their
///            accumulators through shared memory in warp order.
///   ROWS:    16-row tiles per block (1, 2 or 4): each x load serves 16 * ROWS rows.
///   UNROLL:  chunks per warp per step: 2 * ROWS * UNROLL loads of W (16 bytes) in flight.
///   SPLIT_K: as gemv_kernel's, in chunks of 32 columns.
/// REQUIRES: 1 <= batch <= 8; K % 8 == 0; W, x, y aligned to 16 bytes; as gemv_kernel's.
template <typename T, int BLOCK, int ROWS, int UNROLL, int SPLIT_K>
__global__ void KTUNE_LAUNCH_BOUNDS gemv_mma_kernel(const T* __restrict__ w,
                                                    const T* __restrict__ x, T* __restrict__ y,
                                                    float* __restrict__ partial, int n_rows,
                                                    int k_cols, int batch) {
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh
  static_assert(ktune::kIsSame<T, __half> || ktune::kIsSame<T, __nv_bfloat16>,
                "T must be __half or __nv_bfloat16");
  static_assert(ktune::KernelParamsOk<T, BLOCK>());
  static_assert(ROWS == 1 || ROWS == 2 || ROWS == 4, "ROWS must be 1, 2 or 4");
  static_assert(UNROLL >= 1 && UNROLL <= 8, "UNROLL must be from 1 to 8");
  static_assert(SPLIT_K >= 1 && SPLIT_K <= 16, "SPLIT_K must be from 1 to 16");
  constexpr int kWarps = BLOCK / ktune::kWarpSize;
  constexpr int kChunk = 32;  // columns per chunk: 4 lanes x 8 elements
  __shared__ float sums[kWarps > 1 ? kWarps - 1 : 1][ROWS][4][ktune::kWarpSize];

  const int warp = threadIdx.x / ktune::kWarpSize;
  const int lane = threadIdx.x % ktune::kWarpSize;
  const int g = lane / 4;
  const int q = lane % 4;
  const int row_base = blockIdx.x * 16 * ROWS;
  // Rows past N read row N - 1 (valid memory, results dropped): every lane takes part in
  // every mma.
  const T* lo[ROWS];
  const T* hi[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int n_lo = min(row_base + 16 * r + g, n_rows - 1);
    const int n_hi = min(row_base + 16 * r + g + 8, n_rows - 1);
    lo[r] = w + static_cast<long long>(n_lo) * k_cols + 8 * q;
    hi[r] = w + static_cast<long long>(n_hi) * k_cols + 8 * q;
  }
  const bool has_x = g < batch;
  const T* x_row = x + static_cast<long long>(has_x ? g : 0) * k_cols + 8 * q;

  const int num_chunks = (k_cols + kChunk - 1) / kChunk;
  const int per_split = (num_chunks + SPLIT_K - 1) / SPLIT_K;
  const int c_begin = SPLIT_K == 1 ? 0 : blockIdx.y * per_split;
  const int c_end = SPLIT_K == 1 ? num_chunks : min(num_chunks, c_begin + per_split);

  float acc[ROWS][4];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[r][i] = 0.f;
  }

#pragma unroll 1
  for (int c = c_begin + warp; c < c_end; c += kWarps * UNROLL) {
    ktune_gemv::Words4 wl[UNROLL][ROWS];
    ktune_gemv::Words4 wh[UNROLL][ROWS];
    ktune_gemv::Words4 xv[UNROLL];
    // Every load of the step before the first mma. A lane's 8 elements lie wholly inside K
    // or wholly past it (K % 8 == 0); past it, W and x are zeros.
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int cu = c + u * kWarps;
      const int col = cu * kChunk;
      const bool valid = cu < c_end && col + 8 * q < k_cols;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        wl[u][r] = ktune_gemv::LoadWords<true>(lo[r] + col, valid);
        wh[u][r] = ktune_gemv::LoadWords<true>(hi[r] + col, valid);
      }
      xv[u] = ktune_gemv::LoadWords<false>(x_row + col, valid && has_x);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        ktune_gemv::Mma16816<T>(acc[r], wl[u][r].w[0], wh[u][r].w[0], wl[u][r].w[1],
                                wh[u][r].w[1], xv[u].w[0], xv[u].w[1]);
        ktune_gemv::Mma16816<T>(acc[r], wl[u][r].w[2], wh[u][r].w[2], wl[u][r].w[3],
                                wh[u][r].w[3], xv[u].w[2], xv[u].w[3]);
      }
    }
  }

  // Warps 1.. hand their accumulators to warp 0, which adds them in warp order.
  if constexpr (kWarps > 1) {
    if (warp > 0) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int i = 0; i < 4; ++i) sums[warp - 1][r][i][lane] = acc[r][i];
      }
    }
    __syncthreads();
    if (warp > 0) return;
#pragma unroll 1
    for (int v = 0; v < kWarps - 1; ++v) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[r][i] += sums[v][r][i][lane];
      }
    }
  }
  // acc[r][i]: row row_base + 16 r + g + 8 (i / 2), batch row 2 q + i % 2.
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int n = row_base + 16 * r + g + 8 * (i / 2);
      const int b = 2 * q + i % 2;
      if (n < n_rows && b < batch) {
        if constexpr (SPLIT_K == 1) {
          y[static_cast<long long>(b) * n_rows + n] = ktune::FromFloat<T>(acc[r][i]);
        } else {
          partial[(static_cast<long long>(blockIdx.y) * batch + b) * n_rows + n] = acc[r][i];
        }
      }
    }
  }
}

/// Split-K's second pass: y[i] = sum_s partial[s * count + i] over s < SPLIT_K, in order,
/// rounded to T, for i < count = batch * N (y and each partial slice are [batch, N]).
/// Launched with one thread per element.
///   T: float, __half or __nv_bfloat16. SPLIT_K: 2 to 16.
template <typename T, int SPLIT_K>
__global__ void KTUNE_LAUNCH_BOUNDS gemv_splitk_reduce(const float* __restrict__ partial,
                                                       T* __restrict__ y, int count) {
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh
  static_assert(ktune::kIsElementType<T>, "T must be float, __half or __nv_bfloat16");
  static_assert(SPLIT_K >= 2 && SPLIT_K <= 16, "SPLIT_K must be from 2 to 16");
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  float sum = 0.f;
#pragma unroll
  for (int s = 0; s < SPLIT_K; ++s) sum += partial[static_cast<long long>(s) * count + i];
  y[i] = ktune::FromFloat<T>(sum);
}

/// The reference: one output y[b, n] per 32-thread block (grid = [N, batch]), each thread a
/// strided slice of K summed in double, thread 0 adding the 32 partials in order and
/// rounding to T once. 32 threads, so it fits under any KTUNE_MAX_THREADS.
///   T: float, __half or __nv_bfloat16.
template <typename T>
__global__ void KTUNE_LAUNCH_BOUNDS gemv_reference(const T* __restrict__ w,
                                                   const T* __restrict__ x, T* __restrict__ y,
                                                   int n_rows, int k_cols, int batch) {
  static_assert(ktune::kIsElementType<T>, "T must be float, __half or __nv_bfloat16");
  constexpr int kThreads = 32;
  __shared__ double partial[kThreads];
  const long long n = blockIdx.x;
  const long long b = blockIdx.y;
  if (n >= n_rows || b >= batch || threadIdx.x >= kThreads) return;
  double sum = 0.0;
  for (int k = threadIdx.x; k < k_cols; k += kThreads) {
    sum += static_cast<double>(ktune::ToFloat(w[n * k_cols + k])) *
           static_cast<double>(ktune::ToFloat(x[b * k_cols + k]));
  }
  partial[threadIdx.x] = sum;
  __syncwarp();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int i = 0; i < kThreads; ++i) total += partial[i];
    y[b * n_rows + n] = ktune::FromFloat<T>(static_cast<float>(total));
  }
}
