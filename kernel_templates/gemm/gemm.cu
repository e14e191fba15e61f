// GEMM of a linear layer: out[m, n] = scale_x * scale_w * sum_k x[m, k] * w[n, k], x and w
// row-major (w as nn.Linear keeps its weight, out_features x in_features), float
// accumulation, out rounded once. 16-bit inputs write their own type; fp8 inputs write bf16.
// The scales are 1-element float buffers (per-tensor scales, as fp8 quantisation produces
// them; pass 1.0 for an unscaled product).
//
// gemm_wgmma_kernel is the Hopper path (sm_90a only): a persistent, warp-specialised kernel.
// Warpgroup 0 is the producer: one thread walks this block's tiles and issues bulk tensor
// copies (TMA) of A and B tiles into a ring of STAGES shared-memory slots, each slot
// guarded by a `full` mbarrier (completes when its bytes have landed) and an `empty` one
// (completes when every consumer has finished reading it). Warpgroups 1..BM/64 are the
// consumers: each multiplies its 64 rows of the A tile by the B tile with wgmma straight
// from shared memory, keeping one group of wgmmas in flight while releasing the slot before
// it, and writes its accumulators out while the producer already fills the slots of the
// next tile.
//
// The kernel multiplies C[p, q] = A[p, :] . B[q, :] with A and B both K-major, which both
// operands of a linear layer are. SWAP picks which is which: SWAP 0 has A = x (p over m)
// and B = w (q over n), the natural choice when m is large; SWAP 1 has A = w and B = x, so
// wgmma's fixed 64-row side runs over the weight's n rows and its free side (BN, as small
// as 8) over the few rows of x a decode step has: a tile then wastes nothing on m = 1..256.
//
// SPLIT_K > 1 divides K between SPLIT_K blocks per output tile. Each writes its float
// partial tile to `partial`; the last of them to finish (counted with an atomic per tile in
// `counters`) adds the SPLIT_K partials in slice order (deterministic whichever finishes
// last), scales, rounds and writes out, and sets its counter back to 0, so the counters are
// zero again after every complete run. One launch: no second kernel for the reduction.
#include <cuda_fp8.h>

#include "ktune/common.cuh"
#include "ktune/tma.cuh"
#include "ktune/wgmma.cuh"

namespace gemm {

/// The output element type for input type T: T itself for 16-bit inputs, bf16 for fp8.
template <typename T>
struct Out {
  using type = T;
};
template <>
struct Out<__nv_fp8_e4m3> {
  using type = __nv_bfloat16;
};
template <>
struct Out<__nv_fp8_e5m2> {
  using type = __nv_bfloat16;
};

__device__ __forceinline__ float ToFloatAny(float v) { return v; }
__device__ __forceinline__ float ToFloatAny(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloatAny(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToFloatAny(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
__device__ __forceinline__ float ToFloatAny(__nv_fp8_e5m2 v) { return static_cast<float>(v); }

/// Where tile `t` of a block's walk lies: its row of tiles over p, its column over q, and its
/// slice of K. The SPLIT_K slices of one tile are neighbours in t, so they run at the same
/// time; (p, q) tiles go in groups of GROUP rows of tiles, column by column inside a group,
/// so that blocks running together share A rows and B rows in L2.
struct TileCoord {
  int p;
  int q;
  int split;
};

template <int SPLIT_K, int GROUP>
__device__ __forceinline__ TileCoord TileAt(int t, int tiles_p, int tiles_q) {
  TileCoord c;
  c.split = t % SPLIT_K;
  const int pq = t / SPLIT_K;
  const int per_group = GROUP * tiles_q;
  const int first_p = (pq / per_group) * GROUP;
  const int rows = min(tiles_p - first_p, GROUP);
  const int within = pq % per_group;
  c.p = first_p + within % rows;
  c.q = within / rows;
  return c;
}

/// The consumer warpgroups' own barrier (id 1; __syncthreads is 0), so the producer never
/// waits on an epilogue.
template <int THREADS>
__device__ __forceinline__ void ConsumerSync() {
  asm volatile("bar.sync 1, %0;" ::"n"(THREADS) : "memory");
}

/// Two values of C at (pi, qi) and (pi, qi + 1) in an [m, n] row-major array (SWAP: C is
/// out transposed, so C[pi, qi] is at qi * n + pi). Skips what lies outside rows_p x rows_q;
/// one 2-element store where both are inside, adjacent and aligned (SWAP 0, n even).
template <typename V>
__device__ __forceinline__ void StoreTwo(V* p, float a, float b);
template <>
__device__ __forceinline__ void StoreTwo(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
template <>
__device__ __forceinline__ void StoreTwo(__half* p, float a, float b) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b);
}
template <>
__device__ __forceinline__ void StoreTwo(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}

template <int SWAP, typename V>
__device__ __forceinline__ void StorePair(V* c, int pi, int qi, int rows_p, int rows_q, int n,
                                          float a, float b) {
  if (pi >= rows_p || qi >= rows_q) return;
  if (SWAP) {
    c[static_cast<long long>(qi) * n + pi] = ktune::FromFloat<V>(a);
    if (qi + 1 < rows_q) c[static_cast<long long>(qi + 1) * n + pi] = ktune::FromFloat<V>(b);
  } else if (qi + 1 < rows_q && n % 2 == 0) {
    StoreTwo(c + static_cast<long long>(pi) * n + qi, a, b);
  } else {
    c[static_cast<long long>(pi) * n + qi] = ktune::FromFloat<V>(a);
    if (qi + 1 < rows_q) c[static_cast<long long>(pi) * n + qi + 1] = ktune::FromFloat<V>(b);
  }
}

/// Adds the float partials at the places StorePair writes to a and b (L2 reads: other blocks
/// wrote them).
template <int SWAP>
__device__ __forceinline__ void LoadPair(const float* c, int pi, int qi, int rows_p, int rows_q,
                                         int n, float& a, float& b) {
  if (pi >= rows_p || qi >= rows_q) return;
  const long long i0 = SWAP ? static_cast<long long>(qi) * n + pi
                            : static_cast<long long>(pi) * n + qi;
  const long long i1 = SWAP ? i0 + n : i0 + 1;
  a += __ldcg(c + i0);
  if (qi + 1 < rows_q) b += __ldcg(c + i1);
}

/// d += a * b for one m16n8k16 tile: a the 4 A registers and b the 2 B registers as
/// ldmatrix loads them, d the 4 float accumulators of this lane.
template <typename T>
__device__ __forceinline__ void Mma16816(float (&d)[4], const unsigned (&a)[4],
                                         const unsigned (&b)[2]) {
  if constexpr (ktune::kIsSame<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

}  // namespace gemm

// Clusters and the bulk copies exist from sm_90 on: the portable kernel below compiles for
// sm_80 without this one (the manifest never names it for such targets).
#if __CUDA_ARCH__ >= 900
/// Hopper GEMM, described at the top of this file.
///   T:       __nv_bfloat16, __half, __nv_fp8_e4m3 or __nv_fp8_e5m2 (x and w).
///   BM:      rows of A per tile, 64 per consumer warpgroup (64 or 128).
///   BN:      rows of B per tile, wgmma's N: a multiple of 8 up to 256 (ktune::Wgmma).
///   STAGES:  shared-memory slots of (BM + BN) rows x 128 bytes of K each: the copies that
///            can be in flight ahead of the math.
///   SPLIT_K: blocks that share one output tile, each a slice of K (1: no split).
///   GROUP:   rows of tiles walked together (1: row by row).
///   SWAP:    0: A = x, B = w; 1: A = w, B = x (see above).
///   CLUSTER: blocks per thread-block cluster (1, 2 or 4). The blocks of a cluster take
///            neighbouring tiles along n, which share their rows of x: each block copies
///            1 / CLUSTER of the x tile and multicasts it to all, so L2 serves x once per
///            cluster instead of once per block. The x tile's rows divided by CLUSTER must be
///            a multiple of 8 (the swizzle's row group).
/// tm_a and tm_b are 2-D maps (K innermost) over A's and B's buffers, box (128 bytes of K,
/// BM or BN rows; x's rows divided by CLUSTER), 128-byte swizzle, zero fill: rows and K
/// beyond the matrix read as 0.
template <typename T, int BM, int BN, int STAGES, int SPLIT_K, int GROUP, int SWAP, int CLUSTER>
__global__ void KTUNE_LAUNCH_BOUNDS __cluster_dims__(CLUSTER, 1, 1)
gemm_wgmma_kernel(const __grid_constant__ ktune::TensorMap tm_a,
                  const __grid_constant__ ktune::TensorMap tm_b, typename gemm::Out<T>::type* out,
                  float* __restrict__ partial, int* __restrict__ counters,
                  const float* __restrict__ scale_x, const float* __restrict__ scale_w, int m,
                  int n, int k) {
  using TOut = typename gemm::Out<T>::type;
  using gemm::TileCoord;
  static_assert(BM == 64 || BM == 128, "BM: 64 rows per consumer warpgroup, 1 or 2 of them");
  static_assert(STAGES >= 2, "STAGES: at least two slots, or copies never overlap math");
  static_assert(SPLIT_K >= 1 && GROUP >= 1, "SPLIT_K and GROUP are at least 1");
  static_assert(CLUSTER == 1 || CLUSTER == 2 || CLUSTER == 4, "CLUSTER: 1, 2 or 4 blocks");
  constexpr int kConsumers = BM / 64;
  constexpr int kConsumerThreads = 128 * kConsumers;
  constexpr int kRowBytes = 128;  // K bytes per row of a slot: one swizzle span
  constexpr int kBK = kRowBytes / sizeof(T);
  constexpr int kSlotA = BM * kRowBytes;
  constexpr int kSlotB = BN * kRowBytes;
  constexpr int kAcc = BN / 2;
  constexpr bool kPromote = sizeof(T) == 1;
  // x is A without SWAP and B with it; its slice per block of the cluster.
  constexpr int kXRows = SWAP ? BN : BM;
  constexpr int kXSlice = kXRows / CLUSTER;
  static_assert(kXSlice % 8 == 0, "CLUSTER: x's tile rows / CLUSTER must be a multiple of 8");

  // Slots need 1024-byte alignment for the swizzle; the runtime only promises 16.
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
  unsigned char* slots_a = smem;
  unsigned char* slots_b = smem + STAGES * kSlotA;
  unsigned long long* full = reinterpret_cast<unsigned long long*>(slots_b + STAGES * kSlotB);
  unsigned long long* empty = full + STAGES;
  __shared__ int last_of_tile;

  const int rows_p = SWAP ? n : m;
  const int rows_q = SWAP ? m : n;
  const int tiles_p = (rows_p + BM - 1) / BM;
  const int tiles_q = (rows_q + BN - 1) / BN;
  // The cluster walks units of CLUSTER neighbouring tiles along n (p with SWAP, q without).
  const int units_p = SWAP ? (tiles_p + CLUSTER - 1) / CLUSTER : tiles_p;
  const int units_q = SWAP ? tiles_q : (tiles_q + CLUSTER - 1) / CLUSTER;
  const int units = units_p * units_q * SPLIT_K;
  const int kblocks = (k + kBK - 1) / kBK;
  const int warpgroup = threadIdx.x / 128;
  const int rank = CLUSTER > 1 ? static_cast<int>(ktune::ClusterRank()) : 0;
  const int cluster = blockIdx.x / CLUSTER;
  const int clusters = gridDim.x / CLUSTER;
  // This block's tile of a unit.
  auto tile_of = [&](int u) {
    TileCoord c = gemm::TileAt<SPLIT_K, GROUP>(u, units_p, units_q);
    if (SWAP) {
      c.p = c.p * CLUSTER + rank;
    } else {
      c.q = c.q * CLUSTER + rank;
    }
    return c;
  };

  if (threadIdx.x == 0) {
    ktune::PrefetchTensorMap(&tm_a);
    ktune::PrefetchTensorMap(&tm_b);
    for (int s = 0; s < STAGES; ++s) {
      ktune::MbarrierInit(&full[s], 1);
      // Every consumer of every block in the cluster frees a slot: the slot is refilled by
      // copies that land in all of them.
      ktune::MbarrierInit(&empty[s], kConsumers * CLUSTER);
    }
    ktune::FenceMbarrierInit();
  }
  if constexpr (CLUSTER > 1) {
    ktune::ClusterSync();
  } else {
    __syncthreads();
  }

  if (warpgroup == 0) {
    // Producer. Only its first thread works; the others leave their registers to the
    // consumers (setmaxnreg needs the cap at entry that min_blocks 1 gives).
    if constexpr (kConsumers == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      unsigned char* slots_x = SWAP ? slots_b : slots_a;
      unsigned char* slots_w = SWAP ? slots_a : slots_b;
      const ktune::TensorMap* tm_x = SWAP ? &tm_b : &tm_a;
      const ktune::TensorMap* tm_w = SWAP ? &tm_a : &tm_b;
      constexpr int kSlotX = SWAP ? kSlotB : kSlotA;
      constexpr int kSlotW = SWAP ? kSlotA : kSlotB;
      constexpr int kWRows = SWAP ? BM : BN;
      int slot = 0;
      unsigned phase = 0;
      for (int u = cluster; u < units; u += clusters) {
        const TileCoord c = tile_of(u);
        const int tile_x = SWAP ? c.q : c.p;
        const int tile_w = SWAP ? c.p : c.q;
        const int kb_end = (c.split + 1) * kblocks / SPLIT_K;
        for (int kb = c.split * kblocks / SPLIT_K; kb < kb_end; ++kb) {
          ktune::MbarrierWait(&empty[slot], phase ^ 1);
          ktune::MbarrierArriveExpectTx(&full[slot], kSlotA + kSlotB);
          ktune::TmaLoad2d(slots_w + slot * kSlotW, tm_w, kb * kBK, tile_w * kWRows, &full[slot]);
          if constexpr (CLUSTER == 1) {
            ktune::TmaLoad2d(slots_x + slot * kSlotX, tm_x, kb * kBK, tile_x * kXRows,
                             &full[slot]);
          } else {
            ktune::TmaLoad2dMulticast(slots_x + slot * kSlotX + rank * kXSlice * kRowBytes,
                                      tm_x, kb * kBK, tile_x * kXRows + rank * kXSlice,
                                      &full[slot], (1 << CLUSTER) - 1);
          }
          if (++slot == STAGES) {
            slot = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    // Consumers.
    if constexpr (kConsumers == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int consumer = warpgroup - 1;
    const int tid = threadIdx.x % 128;
    const float scale = scale_x[0] * scale_w[0];
    // Frees a slot in every block of the cluster (one thread per warpgroup).
    auto release = [&](int s) {
      if (tid != 0) return;
      if constexpr (CLUSTER == 1) {
        ktune::MbarrierArrive(&empty[s]);
      } else {
#pragma unroll
        for (int r = 0; r < CLUSTER; ++r) ktune::MbarrierArriveCluster(&empty[s], r);
      }
    };
    float acc[kAcc];
    int slot = 0;
    unsigned phase = 0;
    for (int u = cluster; u < units; u += clusters) {
      const TileCoord c = tile_of(u);
      const int kb_end = (c.split + 1) * kblocks / SPLIT_K;
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
      int prev_slot = -1;
      for (int kb = c.split * kblocks / SPLIT_K; kb < kb_end; ++kb) {
        ktune::MbarrierWait(&full[slot], phase);
        const unsigned long long desc_a =
            ktune::WgmmaDescSw128(slots_a + slot * kSlotA + consumer * 64 * kRowBytes);
        const unsigned long long desc_b = ktune::WgmmaDescSw128(slots_b + slot * kSlotB);
        if constexpr (kPromote) {
          // fp8: the tensor cores keep fewer mantissa bits than float while they accumulate
          // (a 4096-long sum drifts by ~1e-3 of its size), so each slot's product is summed
          // apart and added to the float accumulators here. Waiting for the group before the
          // add costs the overlap of this warpgroup's slots; the other consumer fills in.
          float part[kAcc];
          ktune::WgmmaFence();
#pragma unroll
          for (int kk = 0; kk < kRowBytes / ktune::kWgmmaKBytes; ++kk) {
            ktune::Wgmma<T, BN>(part, desc_a + 2 * kk, desc_b + 2 * kk, kk > 0);
          }
          ktune::WgmmaCommit();
          ktune::WgmmaWait<0>();
          ktune::WgmmaFenceOperands(part);
          release(slot);
#pragma unroll
          for (int i = 0; i < kAcc; ++i) acc[i] += part[i];
        } else {
          ktune::WgmmaFence();
#pragma unroll
          for (int kk = 0; kk < kRowBytes / ktune::kWgmmaKBytes; ++kk) {
            // + 2 per step: the descriptor counts 16-byte units.
            ktune::Wgmma<T, BN>(acc, desc_a + 2 * kk, desc_b + 2 * kk, 1);
          }
          ktune::WgmmaCommit();
          // The group before this one is done: its slot can be refilled.
          ktune::WgmmaWait<1>();
          ktune::WgmmaFenceOperands(acc);
          if (prev_slot >= 0) release(prev_slot);
          prev_slot = slot;
        }
        if (++slot == STAGES) {
          slot = 0;
          phase ^= 1;
        }
      }
      ktune::WgmmaWait<0>();
      ktune::WgmmaFenceOperands(acc);
      if (prev_slot >= 0) release(prev_slot);
      // A cluster's last unit may hang past n: such a block only fed its x slice.
      if (c.p >= tiles_p || c.q >= tiles_q) continue;

      // Epilogue. Thread tid holds, for j < BN / 8 and h < 2, row r + 8 h (r = 16 * warp +
      // lane / 4 of its 64) at columns 8 j + 2 (lane % 4) and the one after:
      // acc[4 j + 2 h] and acc[4 j + 2 h + 1].
      const int row0 = c.p * BM + consumer * 64 + 16 * (tid / 32) + (tid % 32) / 4;
      const int col0 = c.q * BN + 2 * (tid % 4);
      if constexpr (SPLIT_K == 1) {
#pragma unroll
        for (int i = 0; i < kAcc; i += 2) {
          gemm::StorePair<SWAP>(out, row0 + 8 * ((i / 2) % 2), col0 + 8 * (i / 4), rows_p,
                                rows_q, n, acc[i] * scale, acc[i + 1] * scale);
        }
      } else {
        float* slice = partial + static_cast<long long>(c.split) * m * n;
#pragma unroll
        for (int i = 0; i < kAcc; i += 2) {
          gemm::StorePair<SWAP>(slice, row0 + 8 * ((i / 2) % 2), col0 + 8 * (i / 4), rows_p,
                                rows_q, n, acc[i], acc[i + 1]);
        }
        __threadfence();
        gemm::ConsumerSync<kConsumerThreads>();
        const int tile = c.p * tiles_q + c.q;
        if (threadIdx.x == 128) {
          const int before = atomicAdd(&counters[tile], 1);
          last_of_tile = before == SPLIT_K - 1;
          if (last_of_tile) counters[tile] = 0;
        }
        gemm::ConsumerSync<kConsumerThreads>();
        if (last_of_tile) {
          __threadfence();
#pragma unroll
          for (int i = 0; i < kAcc; i += 2) {
            const int pi = row0 + 8 * ((i / 2) % 2), qi = col0 + 8 * (i / 4);
            float a = 0.f, b = 0.f;
            for (int s = 0; s < SPLIT_K; ++s) {
              gemm::LoadPair<SWAP>(partial + static_cast<long long>(s) * m * n, pi, qi, rows_p,
                                   rows_q, n, a, b);
            }
            gemm::StorePair<SWAP>(out, pi, qi, rows_p, rows_q, n, a * scale, b * scale);
          }
        }
      }
    }
  }
  // No block may leave while another of its cluster can still copy into its slots or
  // arrive on its barriers.
  if constexpr (CLUSTER > 1) ktune::ClusterSync();
}
#endif  // __CUDA_ARCH__ >= 900

/// The portable path (sm_80 and later, f16/bf16): mma.sync tensor cores fed from shared
/// memory that cp.async fills STAGES K-steps ahead; serves GPUs without wgmma, the plain
/// sm_90 target, and rows whose length is not a multiple of 16 bytes (TMA cannot read
/// those: this kernel then copies element by element). 4 warps in a 2 x 2 grid, each
/// computing (BM / 2) x (BN / 2) of the tile with m16n8k16 mmas.
///   T:      __nv_bfloat16 or __half.
///   BM, BN: the block's tile of out (rows of x, rows of w): 64 or 128, and 32, 64 or 128.
///   STAGES: K-steps of 32 in flight (2 to 4).
template <typename T, int BM, int BN, int STAGES>
__global__ void KTUNE_LAUNCH_BOUNDS gemm_mma_kernel(const T* __restrict__ x,
                                                    const T* __restrict__ w,
                                                    T* __restrict__ out,
                                                    const float* __restrict__ scale_x,
                                                    const float* __restrict__ scale_w, int m,
                                                    int n, int k) {
  static_assert(ktune::kIsSame<T, __half> || ktune::kIsSame<T, __nv_bfloat16>,
                "gemm_mma_kernel: T must be f16 or bf16");
  static_assert((BM == 64 || BM == 128) && (BN == 32 || BN == 64 || BN == 128),
                "gemm_mma_kernel: BM 64 or 128, BN 32, 64 or 128");
  static_assert(STAGES >= 2 && STAGES <= 4, "gemm_mma_kernel: STAGES 2 to 4");
  constexpr int kBK = 32;
  // Rows padded by 16 bytes: 80-byte rows put ldmatrix's 8 row addresses in 8 different
  // 16-byte bank groups (no conflicts) and keep every row 16-byte aligned.
  constexpr int kLd = kBK + 8;
  constexpr int kWM = BM / 2, kWN = BN / 2;  // a warp's tile
  constexpr int kMI = kWM / 16, kNI = kWN / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* xs = reinterpret_cast<T*>(smem_raw);  // [STAGES][BM][kLd]
  T* ws = xs + STAGES * BM * kLd;           // [STAGES][BN][kLd]

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int warp_m = warp / 2, warp_n = warp % 2;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int ksteps = (k + kBK - 1) / kBK;
  // 16-byte copies need every row to start 16-byte aligned: k a multiple of 8.
  const bool vec = k % 8 == 0;

  // Stages K-step `ks` of x's and w's rows into slot `slot`; zeros outside the matrices.
  auto stage = [&](int ks, int slot) {
    const int k0 = ks * kBK;
    auto copy_rows = [&](const T* src, int rows, int row0, int limit, T* dst) {
      for (int c = tid; c < rows * (kBK / 8); c += 128) {
        const int r = c / (kBK / 8), kc = (c % (kBK / 8)) * 8;
        const int gr = row0 + r, gk = k0 + kc;
        T* d = dst + r * kLd + kc;
        if (vec) {
          const bool inside = gr < limit && gk < k;
          const T* g = inside ? src + static_cast<long long>(gr) * k + gk : src;
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(
                           ktune::SmemAddress(d)),
                       "l"(g), "r"(inside ? 16 : 0)
                       : "memory");
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            d[e] = gr < limit && gk + e < k ? src[static_cast<long long>(gr) * k + gk + e]
                                            : ktune::FromFloat<T>(0.f);
          }
        }
      }
    };
    copy_rows(x, BM, m0, m, xs + slot * BM * kLd);
    copy_rows(w, BN, n0, n, ws + slot * BN * kLd);
  };

  float acc[kMI][kNI][4];
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

  // Prologue: STAGES - 1 steps in flight (empty groups past the end keep the count right).
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ksteps) stage(s, s);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  for (int ks = 0; ks < ksteps; ++ks) {
    asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2) : "memory");
    __syncthreads();
    // Refill the slot read one step ago (every warp has passed the barrier above).
    const int next = ks + STAGES - 1;
    if (next < ksteps) stage(next, next % STAGES);
    asm volatile("cp.async.commit_group;" ::: "memory");

    const T* xt = xs + (ks % STAGES) * BM * kLd;
    const T* wt = ws + (ks % STAGES) * BN * kLd;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      unsigned a[kMI][4], b[kNI][2];
#pragma unroll
      for (int i = 0; i < kMI; ++i) {
        const T* p = xt + (warp_m * kWM + i * 16 + lane % 16) * kLd + kk + (lane / 16) * 8;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3])
                     : "r"(ktune::SmemAddress(p)));
      }
#pragma unroll
      for (int j = 0; j < kNI; ++j) {
        const T* p = wt + (warp_n * kWN + j * 8 + lane % 8) * kLd + kk + ((lane / 8) % 2) * 8;
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                     : "=r"(b[j][0]), "=r"(b[j][1])
                     : "r"(ktune::SmemAddress(p)));
      }
#pragma unroll
      for (int i = 0; i < kMI; ++i)
#pragma unroll
        for (int j = 0; j < kNI; ++j) gemm::Mma16816<T>(acc[i][j], a[i], b[j]);
    }
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");

  const float scale = scale_x[0] * scale_w[0];
#pragma unroll
  for (int i = 0; i < kMI; ++i) {
#pragma unroll
    for (int j = 0; j < kNI; ++j) {
      const int row = m0 + warp_m * kWM + i * 16 + lane / 4;
      const int col = n0 + warp_n * kWN + j * 8 + 2 * (lane % 4);
      gemm::StorePair<0>(out, row, col, m, n, n, acc[i][j][0] * scale, acc[i][j][1] * scale);
      gemm::StorePair<0>(out, row + 8, col, m, n, n, acc[i][j][2] * scale,
                         acc[i][j][3] * scale);
    }
  }
}

/// The reference: one output per thread, x and w staged through 16 x 16 shared-memory tiles,
/// products summed in float in k order. Plain on purpose; never tuned.
template <typename T>
__global__ void KTUNE_LAUNCH_BOUNDS gemm_reference(const T* __restrict__ x,
                                                   const T* __restrict__ w,
                                                   typename gemm::Out<T>::type* __restrict__ out,
                                                   const float* __restrict__ scale_x,
                                                   const float* __restrict__ scale_w, int m,
                                                   int n, int k) {
  __shared__ float xs[16][17];
  __shared__ float ws[16][17];
  const int row = blockIdx.y * 16 + threadIdx.y;  // over m
  const int col = blockIdx.x * 16 + threadIdx.x;  // over n
  float sum = 0.f;
  for (int k0 = 0; k0 < k; k0 += 16) {
    const int xr = blockIdx.y * 16 + threadIdx.y, wr = blockIdx.x * 16 + threadIdx.y;
    const int kc = k0 + threadIdx.x;
    xs[threadIdx.y][threadIdx.x] =
        xr < m && kc < k ? gemm::ToFloatAny(x[static_cast<long long>(xr) * k + kc]) : 0.f;
    ws[threadIdx.y][threadIdx.x] =
        wr < n && kc < k ? gemm::ToFloatAny(w[static_cast<long long>(wr) * k + kc]) : 0.f;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 16; ++i) sum += xs[threadIdx.y][i] * ws[threadIdx.x][i];
    __syncthreads();
  }
  if (row < m && col < n) {
    out[static_cast<long long>(row) * n + col] =
        ktune::FromFloat<typename gemm::Out<T>::type>(sum * scale_x[0] * scale_w[0]);
  }
}
