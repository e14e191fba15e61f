// GEMM of a linear layer: out[m, n] = scale_x * scale_w * sum_k x[m, k] * w[n, k], x and w
// row-major (w as nn.Linear keeps its weight, out_features x in_features), float
// accumulation, out rounded once. 16-bit and f32 inputs write their own type; fp8 inputs
// write bf16. f32 runs on tf32 tensor cores three times over (3xTF32: a float's error, not
// tf32's), on both paths.
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
// next tile: straight from the registers, or (EPI 1, gemm_wgmma_tma_out_kernel) through
// shared memory with TMA stores that drain while the consumer multiplies its next tile,
// 5-6 % faster at prefill sizes on the H200. Two consumers taking 64-row tiles in turns
// (ping-pong, so that one multiplies while the other writes out) measured 1.15-1.8x slower
// than two sharing a 128-row tile: each 64-row tile reads the whole B tile again, and L2
// ran at 83 % of its throughput against 52 %. f32 (3xTF32) adds a third barrier per slot,
// `ready`: the producer warpgroup's other three warps write the landed slot's rests (what
// wgmma's tf32 leaves of each float) beside it, and the consumers wait for those instead.
//
// The kernel multiplies C[p, q] = A[p, :] . B[q, :] with A and B both K-major, which both
// operands of a linear layer are. SWAP picks which is which: SWAP 0 has A = x (p over m)
// and B = w (q over n), the natural choice when m is large; SWAP 1 has A = w and B = x, so
// wgmma's fixed 64-row side runs over the weight's n rows and its free side (BN, as small
// as 8) over the few rows of x a decode step has: a tile then wastes nothing on m = 1..256.
//
// SPLIT_K > 1 divides K between SPLIT_K blocks per output tile. Each writes its float
// partial tile to `partial` in fragment order, not as a matrix: tile t's slice s is a region
// of BM x BN floats where consumer thread i's accumulators lie as float4s i, i + threads,
// ..., so every store and load is a coalesced 16-byte access with no index math or bounds
// checks (with the partials as an [m, n] matrix, each thread's 8-byte pairs spread over its
// rows, the same kernels took 1.1-2.3x as long at m = 1..128 on the H200). The last of a
// tile's blocks to finish (counted with an atomic per tile in `counters`) reads the slices
// back in slice order into its accumulators (its own too, so the sum needs no second set of
// registers and is the same whichever block finishes last), scales, rounds and writes out,
// and sets its counter back to 0, so the counters are zero again after every complete run.
// One launch: no second kernel for the reduction.
//
// TAIL 1 splits only the last, partial wave of a persistent walk: when the tiles are not a
// whole number of waves (qkv at m = 1024 in 128 x 256 tiles: 192 tiles on 132 SMs, the
// second wave 60 tiles long), the tiles of that wave are divided along K between the blocks
// it would leave idle, as split-K's are, and reduced the same way. The whole waves pay
// nothing for it; the last wave takes 1 / (splits) of a tile's time plus the reduction
// instead of a whole tile's.
//
// Below the Hopper path: gemm_mma_kernel, the portable tensor-core path, and
// gemm_rows_kernel, the few-rows path for decode steps (CUDA cores streaming w once; no
// tensor-core tile to pad, no 3xTF32 for f32).
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

/// An unsigned integer of N bytes: an element's bits, copied without converting.
template <int N>
struct BitsOf;
template <>
struct BitsOf<1> {
  using type = unsigned char;
};
template <>
struct BitsOf<2> {
  using type = unsigned short;
};
template <>
struct BitsOf<4> {
  using type = unsigned;
};

__device__ __forceinline__ float ToFloatAny(float v) { return v; }
__device__ __forceinline__ float ToFloatAny(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloatAny(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToFloatAny(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
__device__ __forceinline__ float ToFloatAny(__nv_fp8_e5m2 v) { return static_cast<float>(v); }

/// Where one piece of a block's walk lies: its tile's row of tiles over p and column over q,
/// which of the tile's `splits` slices of K it sums, and (split tiles only) `slot`, the
/// index of the tile's counter and of its first region of partials.
struct TileCoord {
  int p;
  int q;
  int split;
  int splits;
  int slot;
};

/// Tile `pq` of a walk: (p, q) tiles go in groups of GROUP rows of tiles, column by column
/// inside a group, so that blocks running together share A rows and B rows in L2.
template <int GROUP>
__device__ __forceinline__ void TileAt(int pq, int tiles_p, int tiles_q, TileCoord& c) {
  const int per_group = GROUP * tiles_q;
  const int first_p = (pq / per_group) * GROUP;
  const int rows = min(tiles_p - first_p, GROUP);
  const int within = pq % per_group;
  c.p = first_p + within % rows;
  c.q = within / rows;
}

/// The consumer warpgroups' own barrier (id 1; __syncthreads is 0), so the producer never
/// waits on an epilogue.
template <int THREADS>
__device__ __forceinline__ void ConsumerSync() {
  asm volatile("bar.sync 1, %0;" ::"n"(THREADS) : "memory");
}

/// Whether this block is the last of the `splits` blocks of its tile to get here, each
/// having written its partials first (the portable and few-rows paths' split-K; called by
/// every thread of the block). Counts arrivals in counters[tile] and sets it back to 0 for
/// the next run; the last block may read every block's partials once this returns.
__device__ __forceinline__ bool LastOfTile(int* counters, int tile, int splits) {
  __shared__ int last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int before = atomicAdd(&counters[tile], 1);
    last = before == splits - 1;
    if (last) counters[tile] = 0;  // zero again for the next run
  }
  __syncthreads();
  const bool is_last = last;
  if (is_last) __threadfence();
  return is_last;
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

/// a and b rounded to V and packed into 32 bits, a in the low half (the lower address).
template <typename V>
__device__ __forceinline__ unsigned PackTwo(float a, float b);
template <>
__device__ __forceinline__ unsigned PackTwo<__nv_bfloat16>(float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const unsigned*>(&v);
}
template <>
__device__ __forceinline__ unsigned PackTwo<__half>(float a, float b) {
  const __half2 v = __floats2half2_rn(a, b);
  return *reinterpret_cast<const unsigned*>(&v);
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

/// d += a * b for one m16n8k8 tile of f32 to float precision on tf32 tensor cores (3xTF32):
/// each float is split into a tf32 part and the tf32 rounding of what that part left out,
/// and the three products that matter are summed, the small ones first (the dropped
/// small x small product is 2^-22 of the whole). tf32 alone keeps 10 mantissa bits, an
/// error of ~1e-3 that a float GEMM's callers do not expect; this keeps ~21. An infinite
/// input (or one within a tf32 rounding of FLT_MAX) leaves a NaN rest, so such products come
/// out NaN where a float GEMM gives inf.
// d += a * b in one mma.sync of SHAPE on KIND elements, accumulating in place.
#define KTUNE_GEMM_MMA(SHAPE, KIND)                                                         \
  asm volatile("mma.sync.aligned." SHAPE ".row.col.f32." KIND "." KIND ".f32 "              \
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"            \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                             \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

__device__ __forceinline__ unsigned Tf32(float v) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ void MmaTf32(float (&d)[4], const unsigned (&a)[4],
                                        const unsigned (&b)[2]) {
  KTUNE_GEMM_MMA("m16n8k8", "tf32");
}
__device__ __forceinline__ void MmaTf32x3(float (&d)[4], const unsigned (&a)[4],
                                          const unsigned (&b)[2]) {
  unsigned a_hi[4], a_lo[4], b_hi[2], b_lo[2];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float v = __uint_as_float(a[r]);
    a_hi[r] = Tf32(v);
    a_lo[r] = Tf32(v - __uint_as_float(a_hi[r]));
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float v = __uint_as_float(b[r]);
    b_hi[r] = Tf32(v);
    b_lo[r] = Tf32(v - __uint_as_float(b_hi[r]));
  }
  // The three products are summed into zeros and added to d in float: the tensor core's
  // accumulate truncates instead of rounding, and into a running sum of a long K that bias
  // adds up (measured on an H100 at k = 4112, |out| ~ 42: up to 0.0108 low with the products
  // accumulated into d in place, 10x the manifest's tolerance, every error of one sign).
  // Truncating within 8 products costs ~2^-23 of their small sum; the add into d rounds to
  // nearest.
  float p[4] = {0.f, 0.f, 0.f, 0.f};
  MmaTf32(p, a_lo, b_hi);
  MmaTf32(p, a_hi, b_lo);
  MmaTf32(p, a_hi, b_hi);
#pragma unroll
  for (int r = 0; r < 4; ++r) d[r] += p[r];
}

/// d += a * b for one mma of 32 bytes of K (m16n8k16 of 16-bit elements, m16n8k32 of fp8,
/// m16n8k8 of f32 as 3xTF32): a the 4 A registers and b the 2 B registers as ldmatrix loads
/// them, d the 4 float accumulators of this lane. fp8's product goes into zeros and is then
/// added in float, as the Hopper path adds each slot's: wgmma keeps fewer mantissa bits than
/// float while it accumulates fp8, and mma.sync is not assumed to keep more.
template <typename T>
__device__ __forceinline__ void MmaSync(float (&d)[4], const unsigned (&a)[4],
                                        const unsigned (&b)[2]) {
  if constexpr (ktune::kIsSame<T, float>) {
    MmaTf32x3(d, a, b);  // ptxas splits each fragment once, not once per tile it feeds
  } else if constexpr (ktune::kIsSame<T, __nv_bfloat16>) {
    KTUNE_GEMM_MMA("m16n8k16", "bf16");
  } else if constexpr (ktune::kIsSame<T, __half>) {
    KTUNE_GEMM_MMA("m16n8k16", "f16");
  } else {
    float p[4];
#define KTUNE_GEMM_FP8_MMA(KIND)                                                            \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." KIND "." KIND ".f32 "               \
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};"        \
               : "=f"(p[0]), "=f"(p[1]), "=f"(p[2]), "=f"(p[3])                             \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.f))
    if constexpr (ktune::kIsSame<T, __nv_fp8_e4m3>) {
      KTUNE_GEMM_FP8_MMA("e4m3");
    } else {
      static_assert(ktune::kIsSame<T, __nv_fp8_e5m2>, "MmaSync: f32, f16, bf16, e4m3 or e5m2");
      KTUNE_GEMM_FP8_MMA("e5m2");
    }
#undef KTUNE_GEMM_FP8_MMA
#pragma unroll
    for (int r = 0; r < 4; ++r) d[r] += p[r];
  }
}
#undef KTUNE_GEMM_MMA

}  // namespace gemm

// Clusters and the bulk copies exist from sm_90 on: the portable kernel below compiles for
// sm_80 without these (the manifest never names them for such targets).
#if __CUDA_ARCH__ >= 900
namespace gemm {

/// The pieces of one instance of the Hopper path; the params are gemm_wgmma_kernel's (below)
/// plus EPI: 0 writes out from the accumulators, 1 through shared memory with TMA stores.
template <typename T, int BM, int BN, int STAGES, int SPLIT_K, int GROUP, int SWAP, int CLUSTER,
          int SHARE_W, int EPI, int TAIL>
struct Hopper {
  using TOut = typename Out<T>::type;
  static_assert(BM == 64 || BM == 128, "BM: 64 rows per consumer warpgroup, 1 or 2 of them");
  static_assert(STAGES >= 2, "STAGES: at least two slots, or copies never overlap math");
  static_assert(SPLIT_K >= 1 && GROUP >= 1, "SPLIT_K and GROUP are at least 1");
  static_assert(CLUSTER == 1 || CLUSTER == 2 || CLUSTER == 4, "CLUSTER: 1, 2 or 4 blocks");
  static_assert(EPI == 0 || (SWAP == 0 && SPLIT_K == 1 && BN % 64 == 0),
                "EPI 1: out in row-major chunks of 64 columns, no SWAP, no split-K");
  static_assert(TAIL == 0 || (TAIL == 1 && SPLIT_K == 1),
                "TAIL: 0 or 1, and only without split-K (which splits every tile already)");
  static constexpr int kConsumers = BM / 64;
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kRowBytes = 128;  // K bytes per row of a slot: one swizzle span
  static constexpr int kBK = kRowBytes / sizeof(T);
  static constexpr int kSlotA = BM * kRowBytes;
  static constexpr int kSlotB = BN * kRowBytes;
  static constexpr int kAcc = BN / 2;
  // f32 as 3xTF32: wgmma reads a float operand's top 19 bits (tf32; it drops the low 13), so
  // each landed slot also gets the rests of its floats (v less those bits, rounded to tf32)
  // in a second ring kRestBytes past the first, written by the producer warpgroup's three
  // idle warps (kRestThreads), which then mark the slot `ready` for the consumers; these sum
  // rest x big + big x rest + big x big (the rest x rest term is 2^-20 of a product at most).
  static constexpr bool kTf32x3 = ktune::kIsSame<T, float>;
  static constexpr int kRestBytes = kTf32x3 ? STAGES * (kSlotA + kSlotB) : 0;
  static constexpr int kRestThreads = 96;
  static_assert(!kTf32x3 || EPI == 0, "f32: EPI 1 stages 2-byte outputs only");
  static constexpr bool kPromote = sizeof(T) != 2;
  // fp8 and f32 sum a slot apart from the accumulators (Mainloop below): in kParts pieces of
  // BN / kParts columns, each waited for and added before the next is issued. At BN 256 two
  // halves, so the partial is 64 floats beside the 128 accumulators (192 registers, as BN
  // 192 needs whole); the B tile, and with it the copies per output, is then the largest.
  static constexpr int kParts = kPromote && BN > 192 ? 2 : 1;
  static constexpr int kPart = kAcc / kParts;
  static_assert(BN % kParts == 0 && (BN / kParts) % 8 == 0, "BN / kParts: wgmma's N");
  // The blocks of a cluster take neighbouring tiles along p, sharing B's tile, or along q,
  // sharing A's. x is A without SWAP and B with it; SHARE_W shares w instead of x.
  static constexpr bool kAlongP = SWAP ? !SHARE_W : SHARE_W;
  static constexpr int kSlice = (kAlongP ? BN : BM) / CLUSTER;
  static_assert(kSlice % 8 == 0,
                "CLUSTER: the shared tile's rows / CLUSTER must be a multiple of 8");
  // EPI 1 stages out through two chunks per warp of 16 rows x 128 bytes (64 columns),
  // 128-byte swizzled: a TMA store drains one while the warp fills the other. Each warp
  // stores its own rows, so no warp waits for another.
  static constexpr int kChunkBytes = 16 * 128;
  static constexpr int kStagingBytes = EPI ? kConsumers * 4 * 2 * kChunkBytes : 0;

  /// Where this block's tiles lie and which pieces of them it takes. A unit is CLUSTER
  /// neighbouring tiles, one per block of the cluster; the clusters walk the pieces of the
  /// units in turn (`stride` of them at a time: one wave): each unit whole, or in SPLIT_K
  /// slices of K, or (TAIL) the units of the last, partial wave in `tail_split` slices.
  struct Walk {
    int tiles_p, tiles_q, units_p, units_q, kblocks, rank, first, stride;
    int pieces;      // the walk's length
    int whole;       // TAIL: units walked whole (the full waves'); the rest are split
    int tail_split;  // TAIL: slices per unit of the last wave (1: none split)

    __device__ Walk(int m, int n, int k) {
      const int rows_p = SWAP ? n : m;
      const int rows_q = SWAP ? m : n;
      tiles_p = (rows_p + BM - 1) / BM;
      tiles_q = (rows_q + BN - 1) / BN;
      units_p = kAlongP ? (tiles_p + CLUSTER - 1) / CLUSTER : tiles_p;
      units_q = kAlongP ? tiles_q : (tiles_q + CLUSTER - 1) / CLUSTER;
      kblocks = (k + kBK - 1) / kBK;
      rank = CLUSTER > 1 ? static_cast<int>(ktune::ClusterRank()) : 0;
      first = blockIdx.x / CLUSTER;
      stride = gridDim.x / CLUSTER;
      const int units = units_p * units_q;
      pieces = units * SPLIT_K;
      whole = units;
      tail_split = 1;
      if constexpr (TAIL) {
        // As many slices as the last wave leaves clusters idle for, each at least one K slot,
        // their partials (tail units x CLUSTER tiles x slices, BM x BN floats each) within
        // the buffer the manifest gives `partial`: min(8 (m + 127) (n + 127), 4 Mi) floats.
        const int tail = units % stride;
        const long long room = min(8ll * (m + 127) * (n + 127), 4194304ll) / (BM * BN);
        long long s = tail > 0 ? stride / tail : 1;
        s = min(s, static_cast<long long>(kblocks));
        if (tail > 0) s = min(s, room / (static_cast<long long>(tail) * CLUSTER));
        if (units > stride && s >= 2) {
          tail_split = static_cast<int>(s);
          whole = units - tail;
          pieces = whole + tail * tail_split;
        }
      }
    }
    /// This block's tile of piece u. A cluster's last unit may hang past the matrix: such a
    /// block only copies its slice of the shared tile (zeros) and writes nothing.
    __device__ TileCoord Tile(int u) const {
      TileCoord c;
      int unit;
      if constexpr (TAIL) {
        if (u < whole) {
          unit = u;
          c.split = 0;
          c.splits = 1;
          c.slot = 0;
        } else {
          // The slices of one tail unit are neighbours in u, so they run side by side.
          const int v = u - whole;
          unit = whole + v / tail_split;
          c.split = v % tail_split;
          c.splits = tail_split;
          c.slot = (v / tail_split) * CLUSTER + rank;
        }
      } else {
        unit = u / SPLIT_K;
        c.split = u % SPLIT_K;
        c.splits = SPLIT_K;
      }
      TileAt<GROUP>(unit, units_p, units_q, c);
      if (kAlongP) {
        c.p = c.p * CLUSTER + rank;
      } else {
        c.q = c.q * CLUSTER + rank;
      }
      if constexpr (!TAIL) c.slot = c.p * tiles_q + c.q;
      return c;
    }
    __device__ int KBegin(const TileCoord& c) const { return c.split * kblocks / c.splits; }
    __device__ int KEnd(const TileCoord& c) const { return (c.split + 1) * kblocks / c.splits; }
    __device__ bool Inside(const TileCoord& c) const { return c.p < tiles_p && c.q < tiles_q; }
  };

  /// The producer's one working thread: copies every K slot of every tile of the walk into
  /// the ring, the shared operand's slice multicast to the whole cluster.
  static __device__ __forceinline__ void Produce(const Walk& w, const ktune::TensorMap* tm_a,
                                                 const ktune::TensorMap* tm_b,
                                                 unsigned char* slots_a, unsigned char* slots_b,
                                                 unsigned long long* full,
                                                 unsigned long long* empty) {
    constexpr unsigned short kMask = (1 << CLUSTER) - 1;
    int slot = 0;
    unsigned phase = 0;
    for (int u = w.first; u < w.pieces; u += w.stride) {
      const TileCoord c = w.Tile(u);
      for (int kb = w.KBegin(c); kb < w.KEnd(c); ++kb) {
        ktune::MbarrierWait(&empty[slot], phase ^ 1);
        ktune::MbarrierArriveExpectTx(&full[slot], kSlotA + kSlotB);
        unsigned char* a = slots_a + slot * kSlotA;
        unsigned char* b = slots_b + slot * kSlotB;
        if constexpr (CLUSTER == 1) {
          ktune::TmaLoad2d(b, tm_b, kb * kBK, c.q * BN, &full[slot]);
          ktune::TmaLoad2d(a, tm_a, kb * kBK, c.p * BM, &full[slot]);
        } else if constexpr (kAlongP) {
          ktune::TmaLoad2d(a, tm_a, kb * kBK, c.p * BM, &full[slot]);
          ktune::TmaLoad2dMulticast(b + w.rank * kSlice * kRowBytes, tm_b, kb * kBK,
                                    c.q * BN + w.rank * kSlice, &full[slot], kMask);
        } else {
          ktune::TmaLoad2d(b, tm_b, kb * kBK, c.q * BN, &full[slot]);
          ktune::TmaLoad2dMulticast(a + w.rank * kSlice * kRowBytes, tm_a, kb * kBK,
                                    c.p * BM + w.rank * kSlice, &full[slot], kMask);
        }
        if (++slot == STAGES) {
          slot = 0;
          phase ^= 1;
        }
      }
    }
  }

  /// The producer thread's work before the kernel before this one has finished (see
  /// ktune/grid_dependency.cuh): the weight's boxes of this block's first STAGES slots pulled
  /// into L2, so the ring's first fill after GridDependencyWait reads L2, not DRAM. Only w's:
  /// x is usually that kernel's output, still being written. The same boxes Produce copies
  /// (the block's own slice of a multicast operand).
  static __device__ __forceinline__ void PrefetchWeight(const Walk& w,
                                                        const ktune::TensorMap* tm_a,
                                                        const ktune::TensorMap* tm_b) {
    if (w.first >= w.pieces) return;
    const TileCoord c = w.Tile(w.first);
    if (!w.Inside(c)) return;
    // The weight is A with SWAP, B without; its box is a slice when the cluster shares it.
    constexpr bool kSliced = CLUSTER > 1 && (SWAP ? !kAlongP : kAlongP);
    const int row = SWAP ? c.p * BM : c.q * BN;
    const int first_row = kSliced ? row + w.rank * kSlice : row;
    const int end = min(w.KEnd(c), w.KBegin(c) + STAGES);
    for (int kb = w.KBegin(c); kb < end; ++kb) {
      ktune::TmaPrefetchL2(SWAP ? tm_a : tm_b, kb * kBK, first_row);
    }
  }

  static __device__ __forceinline__ void Advance(int& slot, unsigned& phase) {
    if (++slot == STAGES) {
      slot = 0;
      phase ^= 1;
    }
  }

  /// Where a consumer finds its slots: the shared addresses of the barriers, and the low
  /// words of its wgmma descriptors of slot 0 (its 64 rows of A, all of B). Slot s's are these
  /// plus s slots' bytes (in 16-byte units for the descriptors), formed once per kernel so
  /// that the mainloop only adds.
  struct Ring {
    unsigned full, empty, a, b;
    __device__ unsigned Full(int slot) const { return full + 8 * slot; }
    __device__ unsigned Empty(int slot) const { return empty + 8 * slot; }
    __device__ unsigned A(int slot) const { return a + slot * (kSlotA >> 4); }
    /// B's rows from `row` on.
    __device__ unsigned B(int slot, int row) const {
      return b + slot * (kSlotB >> 4) + row * (kRowBytes >> 4);
    }
  };

  /// Frees a slot in every block of the cluster (one thread per consumer warpgroup).
  static __device__ __forceinline__ void Release(unsigned empty, int tid) {
    if (tid != 0) return;
    if constexpr (CLUSTER == 1) {
      ktune::MbarrierArrive(empty);
    } else {
#pragma unroll
      for (int r = 0; r < CLUSTER; ++r) ktune::MbarrierArriveCluster(empty, r);
    }
  }

  /// Issues one slot's wgmmas (K steps of 32 bytes) from the descriptors' low words a and b
  /// into d as one committed group: d = A . B + (accumulate ? d : 0). The slot must have
  /// landed (f32: its rests written too).
  template <int N>
  static __device__ __forceinline__ void Issue(float (&d)[N / 2], unsigned a, unsigned b,
                                               bool accumulate) {
    constexpr unsigned kRest = kRestBytes >> 4;  // the rests' ring, in descriptor units
    const auto desc = [](unsigned lo) { return ktune::WgmmaDesc(lo, ktune::kWgmmaDescSw128Hi); };
    ktune::WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < kRowBytes / ktune::kWgmmaKBytes; ++kk) {
      // + 2 per step: the descriptor counts 16-byte units.
      const unsigned ak = a + 2 * kk, bk = b + 2 * kk;
      if constexpr (kTf32x3) {
        // The small products first, into a sum that starts at this slot (kPromote).
        ktune::Wgmma<T, N>(d, desc(ak + kRest), desc(bk), accumulate || kk > 0);
        ktune::Wgmma<T, N>(d, desc(ak), desc(bk + kRest), 1);
        ktune::Wgmma<T, N>(d, desc(ak), desc(bk), 1);
      } else {
        ktune::Wgmma<T, N>(d, desc(ak), desc(bk), accumulate || kk > 0);
      }
    }
    ktune::WgmmaCommit();
  }

  /// f32's rest of v: v less the top 19 bits wgmma reads (an exact float), rounded to tf32.
  static __device__ __forceinline__ float Rest(float v) {
    return __uint_as_float(Tf32(v - __uint_as_float(__float_as_uint(v) & 0xFFFFE000u)));
  }

  /// Writes the rests of `bytes` of a landed slot's floats at `big` to big + kRestBytes
  /// (the same offsets, so the same swizzled layout), thread t of kRestThreads.
  static __device__ __forceinline__ void WriteRests(unsigned char* big, int bytes, int t) {
    const float4* from = reinterpret_cast<const float4*>(big);
    float4* to = reinterpret_cast<float4*>(big + kRestBytes);
    for (int i = t; i < bytes / 16; i += kRestThreads) {
      const float4 v = from[i];
      to[i] = make_float4(Rest(v.x), Rest(v.y), Rest(v.z), Rest(v.w));
    }
  }

  /// f32: the producer warpgroup's threads 32..127 (t = 0..95) follow the producer's walk,
  /// writing each slot's rests once its copies have landed, then arriving on its `ready`
  /// barrier, which the consumers wait for instead of `full`. A slot is copied into again
  /// only after every consumer released it, so its rests are never overwritten in use.
  static __device__ __forceinline__ void Rests(const Walk& w, unsigned char* slots_a,
                                               unsigned char* slots_b, unsigned long long* full,
                                               unsigned long long* ready, int t) {
    int slot = 0;
    unsigned phase = 0;
    for (int u = w.first; u < w.pieces; u += w.stride) {
      const TileCoord c = w.Tile(u);
      for (int kb = w.KBegin(c); kb < w.KEnd(c); ++kb) {
        ktune::MbarrierWait(&full[slot], phase);
        WriteRests(slots_a + slot * kSlotA, kSlotA, t);
        WriteRests(slots_b + slot * kSlotB, kSlotB, t);
        // wgmma reads shared memory through the async proxy: these writes must reach it.
        ktune::FenceProxyAsyncShared();
        ktune::MbarrierArrive(ktune::SmemAddress(&ready[slot]));
        Advance(slot, phase);
      }
    }
  }

  /// acc = this consumer's 64 rows of A . B over K slots [kb_begin, kb_end), read from the
  /// ring as they land; `slot` and `phase` carry on from tile to tile.
  ///
  /// fp8: the tensor cores keep fewer mantissa bits than float while they accumulate (a
  /// 4096-long sum drifts by ~1e-3 of its size); f32: their accumulate truncates (the
  /// portable path's MmaTf32x3 says what that did over a long K). So each slot's product is
  /// summed apart, waited for and added to the float accumulators before the next slot is
  /// issued (the other consumer's wgmmas fill the gap); at BN 256 in two pieces of 128
  /// columns, each waited for and added before the next is issued. Whether the next slot has
  /// landed is asked while a slot's wgmmas run, so that after the adds the next issue
  /// follows at once. Two partials alternating, so that one slot's wgmmas would run while
  /// the one before is added, cannot be written: ptxas serializes every wgmma of a kernel
  /// that reads accumulators while another group is in flight (its warning C7514).
  static __device__ __forceinline__ void Mainloop(int kb_begin, int kb_end, const Ring& r,
                                                  int tid, int& slot, unsigned& phase,
                                                  float (&acc)[kAcc]) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
    if constexpr (kPromote) {
      float part[kPart];
      bool landed = false;
      for (int kb = kb_begin; kb < kb_end; ++kb) {
        if (!landed) ktune::MbarrierWait(r.Full(slot), phase);
        int next = slot;
        unsigned next_phase = phase;
        Advance(next, next_phase);
#pragma unroll
        for (int h = 0; h < kParts; ++h) {
          Issue<BN / kParts>(part, r.A(slot), r.B(slot, h * (BN / kParts)), false);
          if (h == kParts - 1) {
            landed = kb + 1 < kb_end && ktune::MbarrierTest(r.Full(next), next_phase);
          }
          ktune::WgmmaWait<0>();
          ktune::WgmmaFenceOperands(part);
          if (h == kParts - 1) Release(r.Empty(slot), tid);
          // Piece h's columns are fragments j + h BN / (8 kParts), so its accumulators
          // follow the pieces before it.
#pragma unroll
          for (int i = 0; i < kPart; ++i) acc[h * kPart + i] += part[i];
        }
        slot = next;
        phase = next_phase;
      }
    } else {
      int prev = -1;
      for (int kb = kb_begin; kb < kb_end; ++kb) {
        ktune::MbarrierWait(r.Full(slot), phase);
        Issue<BN>(acc, r.A(slot), r.B(slot, 0), true);
        // The group before this one is done: its slot can be refilled.
        ktune::WgmmaWait<1>();
        ktune::WgmmaFenceOperands(acc);
        if (prev >= 0) Release(r.Empty(prev), tid);
        prev = slot;
        Advance(slot, phase);
      }
      ktune::WgmmaWait<0>();
      ktune::WgmmaFenceOperands(acc);
      if (prev >= 0) Release(r.Empty(prev), tid);
    }
  }

  // Thread tid of a consumer holds, for j < BN / 8 and h < 2, row r + 8 h of its 64 (r = 16 *
  // warp + lane / 4) at columns 8 j + 2 (lane % 4) and the one after: acc[4 j + 2 h] and
  // acc[4 j + 2 h + 1]. Row0 and Col0 are the first of them in C.
  static __device__ __forceinline__ int Row0(const TileCoord& c, int consumer, int tid) {
    return c.p * BM + consumer * 64 + 16 * (tid / 32) + (tid % 32) / 4;
  }
  static __device__ __forceinline__ int Col0(const TileCoord& c, int tid) {
    return c.q * BN + 2 * (tid % 4);
  }

  /// Writes acc * scale to out straight from the registers.
  static __device__ __forceinline__ void StoreDirect(const TileCoord& c, int consumer, int tid,
                                                     const float (&acc)[kAcc], TOut* out,
                                                     int m, int n, float scale) {
    const int row0 = Row0(c, consumer, tid), col0 = Col0(c, tid);
    const int rows_p = SWAP ? n : m, rows_q = SWAP ? m : n;
#pragma unroll
    for (int i = 0; i < kAcc; i += 2) {
      StorePair<SWAP>(out, row0 + 8 * ((i / 2) % 2), col0 + 8 * (i / 4), rows_p, rows_q, n,
                      acc[i] * scale, acc[i + 1] * scale);
    }
  }

  /// A split tile (split-K, or TAIL's last wave): writes this slice's float partials in
  /// fragment order (each consumer thread's kAcc accumulators as float4s, thread-interleaved:
  /// coalesced 16-byte stores and loads, no index math). Returns false in every block of the
  /// tile but the last to finish; that one gets acc = 0 + the slices in slice order, all read
  /// back (its own too: the same sum whichever block is last, and no second set of kAcc
  /// registers, so it holds at BN 256 too), and sets the tile's counter back to 0.
  static __device__ __forceinline__ bool ReduceSplits(const TileCoord& c, int consumer, int tid,
                                                      float (&acc)[kAcc], float* partial,
                                                      int* counters, int* last_of_tile) {
    static_assert(kAcc % 4 == 0, "split fragments are float4s");
    constexpr int kVec = kAcc / 4;
    const int thread = consumer * 128 + tid;
    const auto region = [&](int split) {
      return reinterpret_cast<float4*>(partial) +
             (static_cast<long long>(c.slot) * c.splits + split) * kConsumerThreads * kVec;
    };
    {
      float4* mine = region(c.split);
#pragma unroll
      for (int v = 0; v < kVec; ++v) {
        mine[v * kConsumerThreads + thread] =
            make_float4(acc[4 * v], acc[4 * v + 1], acc[4 * v + 2], acc[4 * v + 3]);
      }
    }
    __threadfence();
    ConsumerSync<kConsumerThreads>();
    if (threadIdx.x == 128) {
      const int before = atomicAdd(&counters[c.slot], 1);
      *last_of_tile = before == c.splits - 1;
      if (*last_of_tile) counters[c.slot] = 0;
    }
    ConsumerSync<kConsumerThreads>();
    if (!*last_of_tile) return false;
    __threadfence();
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
    for (int s = 0; s < c.splits; ++s) {
      const float4* slice = region(s);
#pragma unroll
      for (int v = 0; v < kVec; ++v) {
        const float4 f = __ldcg(slice + v * kConsumerThreads + thread);
        acc[4 * v] += f.x;
        acc[4 * v + 1] += f.y;
        acc[4 * v + 2] += f.z;
        acc[4 * v + 3] += f.w;
      }
    }
    return true;
  }

  /// EPI 1: each warp writes its 16 rows of acc * scale into its staging chunks, 64 columns
  /// at a time, and has its first lane store each with TMA, which clips at the matrix's
  /// edges. The warp goes on to its next tile while the last stores drain; `chunks` counts
  /// the chunks it has stored, so it alternates buffers across tiles too.
  static __device__ __forceinline__ void StoreTma(const TileCoord& c, int consumer, int tid,
                                                  const float (&acc)[kAcc],
                                                  const ktune::TensorMap* tm_out,
                                                  unsigned char* staging, int m, int n,
                                                  float scale, int& chunks) {
    const int warp = tid / 32, lane = tid % 32;
    const int row = c.p * BM + consumer * 64 + 16 * warp;
    if (row >= m) return;
#pragma unroll
    for (int ch = 0; ch < BN / 64; ++ch) {
      const int col = c.q * BN + ch * 64;
      if (col >= n) break;
      unsigned char* buf = staging + ((consumer * 4 + warp) * 2 + (chunks & 1)) * kChunkBytes;
      // The store that last read this buffer (two chunks ago) must be done reading it.
      if (lane == 0) ktune::BulkWaitGroupRead<1>();
      __syncwarp();
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = 4 * (ch * 8 + jj) + 2 * h;
          const int r = lane / 4 + 8 * h;
          // 128-byte swizzle: 16-byte unit jj of row r sits at unit jj ^ (r % 8), which also
          // spreads the warp's 8 rows of one store over all 32 banks.
          unsigned char* p = buf + r * 128 + ((jj ^ (r % 8)) << 4) + 4 * (lane % 4);
          *reinterpret_cast<unsigned*>(p) = PackTwo<TOut>(acc[i] * scale, acc[i + 1] * scale);
        }
      }
      ktune::FenceProxyAsyncShared();
      __syncwarp();
      if (lane == 0) {
        ktune::TmaStore2d(tm_out, buf, col, row);
        ktune::BulkCommitGroup();
      }
      ++chunks;
    }
  }

  static __device__ __forceinline__ void Run(const ktune::TensorMap* tm_a,
                                             const ktune::TensorMap* tm_b,
                                             const ktune::TensorMap* tm_out, TOut* out,
                                             float* partial, int* counters,
                                             const float* scale_x, const float* scale_w, int m,
                                             int n, int k) {
    // Slots and staging need 1024-byte alignment for the swizzle; the runtime promises 16.
    // Rounded up by an offset from smem_raw, not by a pointer made of an integer: the
    // compiler then knows it is shared memory, and the epilogue's staging writes are STS
    // (a generic ST each, from the integer's pointer).
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem =
        smem_raw + ((1024 - reinterpret_cast<unsigned long long>(smem_raw) % 1024) % 1024);
    unsigned char* slots_a = smem;
    unsigned char* slots_b = smem + STAGES * kSlotA;
    unsigned char* staging = slots_b + STAGES * kSlotB + kRestBytes;
    unsigned long long* full = reinterpret_cast<unsigned long long*>(staging + kStagingBytes);
    unsigned long long* empty = full + STAGES;
    unsigned long long* ready = empty + STAGES;  // f32 only
    __shared__ int last_of_tile;
    const Walk w(m, n, k);
    ktune::GridDependencyLaunch();

    if (threadIdx.x == 0) {
      ktune::PrefetchTensorMap(tm_a);
      ktune::PrefetchTensorMap(tm_b);
      if (EPI) ktune::PrefetchTensorMap(tm_out);
      for (int s = 0; s < STAGES; ++s) {
        ktune::MbarrierInit(&full[s], 1);
        // Every consumer of every block in the cluster frees a slot: the slot is refilled by
        // copies that land in all of them.
        ktune::MbarrierInit(&empty[s], kConsumers * CLUSTER);
        if constexpr (kTf32x3) ktune::MbarrierInit(&ready[s], kRestThreads);
      }
      ktune::FenceMbarrierInit();
    }
    if constexpr (CLUSTER > 1) {
      ktune::ClusterSync();
    } else {
      __syncthreads();
    }
    // Nothing above touched global memory; from here on the inputs must be ready.
    if (threadIdx.x == 0) PrefetchWeight(w, tm_a, tm_b);
    ktune::GridDependencyWait();

    // Read from lane 0, so the compiler knows every thread of a warp takes the same branch
    // below (a warpgroup is four whole warps).
    const int warpgroup = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
    if (warpgroup == 0) {
      // Producer. Its first thread copies, and with f32 its warps 1-3 write the rests; all
      // leave their registers to the consumers (setmaxnreg needs the cap at entry that
      // min_blocks 1 gives).
      if constexpr (kConsumers == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
      if (threadIdx.x == 0) {
        Produce(w, tm_a, tm_b, slots_a, slots_b, full, empty);
      } else if constexpr (kTf32x3) {
        if (threadIdx.x >= 32) Rests(w, slots_a, slots_b, full, ready, threadIdx.x - 32);
      }
    } else {
      if constexpr (kConsumers == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
      const int consumer = warpgroup - 1;
      const int tid = threadIdx.x % 128;
      const Ring ring{
          ktune::SmemAddress(kTf32x3 ? ready : full), ktune::SmemAddress(empty),
          ktune::WgmmaDescSw128Lo(ktune::SmemAddress(slots_a + consumer * 64 * kRowBytes)),
          ktune::WgmmaDescSw128Lo(ktune::SmemAddress(slots_b))};
      const float scale = scale_x[0] * scale_w[0];
      float acc[kAcc];
      int slot = 0, chunks = 0;
      unsigned phase = 0;
      for (int u = w.first; u < w.pieces; u += w.stride) {
        const TileCoord c = w.Tile(u);
        Mainloop(w.KBegin(c), w.KEnd(c), ring, tid, slot, phase, acc);
        if (!w.Inside(c)) continue;
        if (c.splits > 1 &&
            !ReduceSplits(c, consumer, tid, acc, partial, counters, &last_of_tile)) {
          continue;
        }
        if constexpr (EPI == 1) {
          StoreTma(c, consumer, tid, acc, tm_out, staging, m, n, scale, chunks);
        } else {
          StoreDirect(c, consumer, tid, acc, out, m, n, scale);
        }
      }
      // Shared memory must outlive the stores that read it.
      if (EPI && tid % 32 == 0) ktune::BulkWaitGroup<0>();
    }
    // No block may leave while another of its cluster can still copy into its slots or
    // arrive on its barriers.
    if constexpr (CLUSTER > 1) ktune::ClusterSync();
  }
};

}  // namespace gemm

/// Hopper GEMM, described at the top of this file.
///   T:       __nv_bfloat16, __half, __nv_fp8_e4m3, __nv_fp8_e5m2 or float (3xTF32; not with
///            EPI 1) (x and w).
///   BM:      rows of A per tile, 64 per consumer warpgroup (64 or 128).
///   BN:      rows of B per tile, wgmma's N: a multiple of 8 up to 256 (ktune::Wgmma).
///   STAGES:  shared-memory slots of (BM + BN) rows x 128 bytes of K each: the copies that
///            can be in flight ahead of the math.
///   SPLIT_K: blocks that share one output tile, each a slice of K (1: no split).
///   GROUP:   rows of tiles walked together (1: row by row).
///   SWAP:    0: A = x, B = w; 1: A = w, B = x (see above).
///   CLUSTER: blocks per thread-block cluster (1, 2 or 4). The blocks of a cluster take
///            neighbouring tiles that share one operand's tile: each block copies 1 / CLUSTER
///            of it and multicasts it to all, so L2 serves it once per cluster instead of
///            once per block. The shared tile's rows divided by CLUSTER must be a multiple of
///            8 (the swizzle's row group).
///   SHARE_W: 0: the cluster shares x's tile (neighbours along n); 1: w's (neighbours along
///            m), the larger saving where w's tile is the larger one.
///   TAIL:    1: the tiles of the walk's last, partial wave are split along K between the
///            blocks that wave would leave idle (without SPLIT_K); 0: every tile whole.
/// tm_a and tm_b are 2-D maps (K innermost) over A's and B's buffers, box (128 bytes of K,
/// BM or BN rows; the shared operand's rows divided by CLUSTER), 128-byte swizzle, zero
/// fill: rows and K beyond the matrix read as 0. partial and counters are split-K's and
/// TAIL's scratch: min(8 (m + 127) (n + 127), 4 Mi) floats, and 4096 ints zeroed once.
template <typename T, int BM, int BN, int STAGES, int SPLIT_K, int GROUP, int SWAP, int CLUSTER,
          int SHARE_W, int TAIL>
__global__ void KTUNE_LAUNCH_BOUNDS __cluster_dims__(CLUSTER, 1, 1)
gemm_wgmma_kernel(const __grid_constant__ ktune::TensorMap tm_a,
                  const __grid_constant__ ktune::TensorMap tm_b, typename gemm::Out<T>::type* out,
                  float* __restrict__ partial, int* __restrict__ counters,
                  const float* __restrict__ scale_x, const float* __restrict__ scale_w, int m,
                  int n, int k) {
  gemm::Hopper<T, BM, BN, STAGES, SPLIT_K, GROUP, SWAP, CLUSTER, SHARE_W, 0, TAIL>::Run(
      &tm_a, &tm_b, nullptr, out, partial, counters, scale_x, scale_w, m, n, k);
}

/// gemm_wgmma_kernel (SWAP 0, no split-K) with out written through shared memory by TMA
/// stores, which overlap the consumer's next tile: tm_out is a 2-D map over out (n
/// innermost), box 64 x 16 (a warp's rows), 128-byte swizzle; n * 2 bytes must be a
/// multiple of 16. BN is a multiple of 64. partial and counters serve TAIL 1 only.
template <typename T, int BM, int BN, int STAGES, int GROUP, int CLUSTER, int SHARE_W, int TAIL>
__global__ void KTUNE_LAUNCH_BOUNDS __cluster_dims__(CLUSTER, 1, 1)
gemm_wgmma_tma_out_kernel(const __grid_constant__ ktune::TensorMap tm_a,
                          const __grid_constant__ ktune::TensorMap tm_b,
                          const __grid_constant__ ktune::TensorMap tm_out,
                          float* __restrict__ partial, int* __restrict__ counters,
                          const float* __restrict__ scale_x, const float* __restrict__ scale_w,
                          int m, int n, int k) {
  gemm::Hopper<T, BM, BN, STAGES, 1, GROUP, 0, CLUSTER, SHARE_W, 1, TAIL>::Run(
      &tm_a, &tm_b, &tm_out, nullptr, partial, counters, scale_x, scale_w, m, n, k);
}
#endif  // __CUDA_ARCH__ >= 900

/// The portable path: mma.sync tensor cores fed from shared memory that cp.async fills
/// STAGES K-steps ahead: f16/bf16 and f32 from sm_80, fp8 from sm_89 (Ada; Hopper's plain
/// sm_90 target; Blackwell). Serves GPUs without wgmma, the plain sm_90 target, and rows
/// whose length is not a multiple of 16 bytes (TMA cannot read those: this kernel then
/// copies element by element). 4 warps in a 2 x 2 grid, each computing (BM / 2) x (BN / 2)
/// of the tile with m16n8k16 mmas (m16n8k32 for fp8, m16n8k8 of tf32 for f32). A K-step is
/// 64 bytes of each row (16 f32, 32 16-bit or 64 fp8 elements); one mma takes 32 of them, so
/// every width shares the copies, the shared-memory layout and ldmatrix's addressing, all in
/// bytes (ldmatrix moves 16-bit lanes, which for 4-byte elements lands each float where
/// m16n8k8's tf32 fragments want it).
///   T:      float, __nv_bfloat16, __half, __nv_fp8_e4m3 or __nv_fp8_e5m2.
///   BM, BN: the block's tile of out (rows of x, rows of w): 64 or 128, and 32, 64 or 128.
///   STAGES: K-steps of 64 bytes in flight (2 to 4).
///   SPLIT_K: blocks per output tile (blockIdx.z), each summing a contiguous 1/SPLIT_K of the
///            K-steps. A block works through one 64-byte step at a time, so a long K on few
///            tiles is bound by the steps' latency, not by bandwidth (f32 at m = 1, 6144 x
///            4096 on the H200: 192 blocks, 256 steps each, 445 GB/s). Partials are reduced
///            as the Hopper path's are (header above): fragment order, the last block of a
///            tile adds the slices in slice order; fragments whose rows are all past m are
///            neither written nor read, so a decode step's partials are a few rows' worth.
template <typename T, int BM, int BN, int STAGES, int SPLIT_K>
__global__ void KTUNE_LAUNCH_BOUNDS gemm_mma_kernel(const T* __restrict__ x,
                                                    const T* __restrict__ w,
                                                    typename gemm::Out<T>::type* __restrict__ out,
                                                    float* __restrict__ partial,
                                                    int* __restrict__ counters,
                                                    const float* __restrict__ scale_x,
                                                    const float* __restrict__ scale_w, int m,
                                                    int n, int k) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 2 || sizeof(T) == 1,
                "gemm_mma_kernel: f32, 16-bit or fp8 elements");
  static_assert((BM == 64 || BM == 128) && (BN == 32 || BN == 64 || BN == 128),
                "gemm_mma_kernel: BM 64 or 128, BN 32, 64 or 128");
  static_assert(STAGES >= 2 && STAGES <= 4, "gemm_mma_kernel: STAGES 2 to 4");
  static_assert(SPLIT_K >= 1, "gemm_mma_kernel: SPLIT_K at least 1");
  constexpr int kStepBytes = 64;   // of each row per K-step
  constexpr int kMmaBytes = 32;    // of each row per mma: k16 of 16-bit, k32 of fp8
  constexpr int kChunk = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte copy
  constexpr int kBK = kStepBytes / static_cast<int>(sizeof(T));  // elements per K-step
  // Rows padded by 16 bytes: 80-byte rows put ldmatrix's 8 row addresses in 8 different
  // 16-byte bank groups (no conflicts) and keep every row 16-byte aligned.
  constexpr int kLdBytes = kStepBytes + 16;
  constexpr int kWM = BM / 2, kWN = BN / 2;  // a warp's tile
  constexpr int kMI = kWM / 16, kNI = kWN / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* xs = smem_raw;                        // [STAGES][BM][kLdBytes]
  unsigned char* ws = xs + STAGES * BM * kLdBytes;     // [STAGES][BN][kLdBytes]
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int warp_m = warp / 2, warp_n = warp % 2;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  // This block's K-steps [ks_begin, ks_end): a slice of them with SPLIT_K, possibly empty
  // (the last slices when the steps do not divide evenly); an empty slice adds zeros.
  const int ksteps_all = (k + kBK - 1) / kBK;
  const int per_split = (ksteps_all + SPLIT_K - 1) / SPLIT_K;
  const int ks_begin = min(static_cast<int>(blockIdx.z) * per_split, ksteps_all);
  const int ks_end = min(ks_begin + per_split, ksteps_all);
  // 16-byte copies need every row to start 16-byte aligned.
  const bool vec = k % kChunk == 0;

  // Stages K-step `ks` of x's and w's rows into slot `slot`; zeros outside the matrices.
  auto stage = [&](int ks, int slot) {
    const int k0 = ks * kBK;
    auto copy_rows = [&](const T* src, int rows, int row0, int limit, unsigned char* dst) {
      for (int c = tid; c < rows * (kStepBytes / 16); c += 128) {
        const int r = c / (kStepBytes / 16), byte = (c % (kStepBytes / 16)) * 16;
        const int gr = row0 + r, gk = k0 + byte / static_cast<int>(sizeof(T));
        unsigned char* d = dst + r * kLdBytes + byte;
        if (vec) {
          const bool inside = gr < limit && gk < k;
          const T* g = inside ? src + static_cast<long long>(gr) * k + gk : src;
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(
                           ktune::SmemAddress(d)),
                       "l"(g), "r"(inside ? 16 : 0)
                       : "memory");
        } else {
          // Element by element as raw bits, zero outside (ktune::FromFloat knows no fp8).
          using Bits = typename gemm::BitsOf<sizeof(T)>::type;
          const Bits* bits = reinterpret_cast<const Bits*>(src);
#pragma unroll
          for (int e = 0; e < kChunk; ++e) {
            const bool in = gr < limit && gk + e < k;
            reinterpret_cast<Bits*>(d)[e] = in ? bits[static_cast<long long>(gr) * k + gk + e] : 0;
          }
        }
      }
    };
    copy_rows(x, BM, m0, m, xs + slot * BM * kLdBytes);
    copy_rows(w, BN, n0, n, ws + slot * BN * kLdBytes);
  };

  float acc[kMI][kNI][4];
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

  // Prologue: STAGES - 1 steps in flight (empty groups past the end keep the count right).
  // Slots go by the step's place in this block's slice.
  for (int s = 0; s < STAGES - 1; ++s) {
    if (ks_begin + s < ks_end) stage(ks_begin + s, s);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  for (int ks = ks_begin; ks < ks_end; ++ks) {
    const int slot = (ks - ks_begin) % STAGES;
    asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2) : "memory");
    __syncthreads();
    // Refill the slot read one step ago (every warp has passed the barrier above).
    const int next = ks + STAGES - 1;
    if (next < ks_end) stage(next, (next - ks_begin) % STAGES);
    asm volatile("cp.async.commit_group;" ::: "memory");

    const unsigned char* xt = xs + slot * BM * kLdBytes;
    const unsigned char* wt = ws + slot * BN * kLdBytes;
#pragma unroll
    for (int kb = 0; kb < kStepBytes; kb += kMmaBytes) {
      // ldmatrix's 8 x 8 matrices of 16-bit lanes are 8 rows x 16 bytes: the same
      // fragments for m16n8k16 of 16-bit and m16n8k32 of 8-bit elements.
      unsigned a[kMI][4], b[kNI][2];
#pragma unroll
      for (int i = 0; i < kMI; ++i) {
        const unsigned char* p =
            xt + (warp_m * kWM + i * 16 + lane % 16) * kLdBytes + kb + (lane / 16) * 16;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3])
                     : "r"(ktune::SmemAddress(p)));
      }
#pragma unroll
      for (int j = 0; j < kNI; ++j) {
        const unsigned char* p =
            wt + (warp_n * kWN + j * 8 + lane % 8) * kLdBytes + kb + ((lane / 8) % 2) * 16;
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                     : "=r"(b[j][0]), "=r"(b[j][1])
                     : "r"(ktune::SmemAddress(p)));
      }
#pragma unroll
      for (int i = 0; i < kMI; ++i)
#pragma unroll
        for (int j = 0; j < kNI; ++j) gemm::MmaSync<T>(acc[i][j], a[i], b[j]);
    }
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");

  if constexpr (SPLIT_K > 1) {
    // Fragment (i, j) of this thread holds rows m0 + warp_m kWM + 16 i + lane / 4 and 8
    // below; both past m when the first is.
    const auto live = [&](int i) { return m0 + warp_m * kWM + i * 16 + lane / 4 < m; };
    const int tile = blockIdx.y * gridDim.x + blockIdx.x;
    const auto region = [&](int split) {
      return reinterpret_cast<float4*>(partial) +
             (static_cast<long long>(tile) * SPLIT_K + split) * (kMI * kNI * 128);
    };
    float4* mine = region(blockIdx.z);
#pragma unroll
    for (int i = 0; i < kMI; ++i) {
      if (!live(i)) continue;
#pragma unroll
      for (int j = 0; j < kNI; ++j) {
        mine[(i * kNI + j) * 128 + tid] =
            make_float4(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]);
      }
    }
    if (!gemm::LastOfTile(counters, tile, SPLIT_K)) return;
#pragma unroll
    for (int i = 0; i < kMI; ++i) {
      if (!live(i)) continue;
#pragma unroll
      for (int j = 0; j < kNI; ++j) {
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int sp = 0; sp < SPLIT_K; ++sp) {
          const float4 f = __ldcg(region(sp) + (i * kNI + j) * 128 + tid);
          sum.x += f.x;
          sum.y += f.y;
          sum.z += f.z;
          sum.w += f.w;
        }
        acc[i][j][0] = sum.x;
        acc[i][j][1] = sum.y;
        acc[i][j][2] = sum.z;
        acc[i][j][3] = sum.w;
      }
    }
  }

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

namespace gemm {

/// The elements of 16 loaded bytes as floats: 4 f32, 8 f16/bf16 (ktune::VectorToFloat) or
/// 16 fp8 (which ktune's vectors do not hold), exactly.
template <typename T>
__device__ __forceinline__ void Widen(const uint4& v, float (&f)[16 / sizeof(T)]) {
  if constexpr (sizeof(T) == 1) {
    // Two at a time through f16 (cvt.rn.f16x2.e4m3x2 / e5m2x2 on sm_89+).
    constexpr __nv_fp8_interpretation_t kKind =
        ktune::kIsSame<T, __nv_fp8_e4m3> ? __NV_E4M3 : __NV_E5M2;
    const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>(words[i / 2] >> (16 * (i % 2))), kKind);
      const float2 p = __half22float2(__half2(raw));
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  } else {
    ktune::AlignedVector<T, 16 / sizeof(T)> a;
    a.words[0] = v.x;
    a.words[1] = v.y;
    a.words[2] = v.z;
    a.words[3] = v.w;
    ktune::VectorToFloat(a, f);
  }
}

/// 16 bytes of w, read once: no L1 allocation, so the streamed weight does not evict x,
/// which every warp of the SM reads again. Not volatile, so the compiler may hoist a step's
/// loads above the previous step's FMAs.
__device__ __forceinline__ uint4 LoadOnce(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

/// Sums each of a warp's V values (a power of two) over its 32 lanes. V >= 32: lane L is
/// left the sums of values [L c, (L + 1) c) in vals[0 .. c), c = V / 32, after five halving
/// exchanges (each lane sends the half it gives up and adds the half it keeps: V - c
/// shuffles in all, where a butterfly per value takes 5 V). V < 32: the halving runs until
/// one value is left, then butterflies; lane L then holds the sum of value L / (32 / V).
template <int V, int S = 0>
__device__ __forceinline__ void WarpReduceScatter(float (&vals)[V], int lane) {
  static_assert(V >= 1 && (V & (V - 1)) == 0, "V: a power of two");
  if constexpr (S < 5) {
    constexpr int kOffset = 16 >> S;
    constexpr int kCount = V >> S;  // values still held
    if constexpr (kCount >= 2) {
      constexpr int kHalf = kCount / 2;
      const bool upper = (lane & kOffset) != 0;
#pragma unroll
      for (int j = 0; j < kHalf; ++j) {
        const float send = upper ? vals[j] : vals[j + kHalf];
        const float keep = upper ? vals[j + kHalf] : vals[j];
        vals[j] = keep + __shfl_xor_sync(0xffffffffu, send, kOffset);
      }
    } else {
      vals[0] += __shfl_xor_sync(0xffffffffu, vals[0], kOffset);
    }
    WarpReduceScatter<V, S + 1>(vals, lane);
  }
}

}  // namespace gemm

/// The few-rows path: CUDA-core FMAs in float, for the m of a decode step (any GPU). The
/// product is bound by reading w once, so each warp streams RW rows of w with 16-byte loads
/// (its 32 lanes side by side along K, several loads in flight per lane) and multiplies
/// every element by RX rows of x, read through L1, where the block's other warps and the
/// SM's other blocks find them; then each warp sums its lanes' RW x RX partial sums. A
/// block is 4 warps, 4 RW rows of w; blocks walk x's rows in chunks of RX with the chunk
/// index fastest, so the blocks that read the same rows of w run together and all but the
/// first find them in L2. No tensor cores, so f32 keeps a float's precision (cuBLAS's fp32
/// GEMM and 3xTF32 are both slower than streaming w at m = 1..16 on the H100) and fp8 runs
/// on sm_89 and later.
///   T:       float, __half, __nv_bfloat16, __nv_fp8_e4m3 or __nv_fp8_e5m2.
///   RX:      rows of x per block (1, 2, 4, 8, 16 or 32): a thread keeps RW x RX float sums.
///   RW:      rows of w per warp (1, 2, 4 or 8).
///   SPLIT_K: blocks per output tile (blockIdx.y), each a contiguous 1 / SPLIT_K of K's
///            16-byte vectors; reduced as the other paths' (the last block of a tile adds the
///            slices in slice order), the partials as [tile][split][warp][RW x RX] floats.
/// REQUIRES: k * sizeof(T) % 16 == 0 (every row 16-byte aligned); grid.x = ceil(m / RX) x
/// ceil(n / (4 RW)), block 128; SPLIT_K > 1: grid.x <= 4096 counters, zero at entry.
template <typename T, int RX, int RW, int SPLIT_K>
__global__ void KTUNE_LAUNCH_BOUNDS gemm_rows_kernel(const T* __restrict__ x,
                                                     const T* __restrict__ w,
                                                     typename gemm::Out<T>::type* __restrict__ out,
                                                     float* __restrict__ partial,
                                                     int* __restrict__ counters,
                                                     const float* __restrict__ scale_x,
                                                     const float* __restrict__ scale_w, int m,
                                                     int n, int k) {
  static_assert(RX >= 1 && RX <= 32 && (RX & (RX - 1)) == 0,
                "gemm_rows_kernel: RX 1, 2, 4, 8, 16 or 32");
  static_assert(RW == 1 || RW == 2 || RW == 4 || RW == 8, "gemm_rows_kernel: RW 1, 2, 4 or 8");
  static_assert(SPLIT_K >= 1, "gemm_rows_kernel: SPLIT_K at least 1");
  constexpr int kWarps = 4;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte load
  // Vectors of K per lane per step: 4 loads of w (64 bytes) in flight whatever RW, but at
  // most 32 of x, whose loads the compiler hoists too (f32 with 32 rows of x and 4 steps
  // spilled 80 bytes).
  constexpr int kWSteps = RW >= 4 ? 1 : 4 / RW;
  constexpr int kSteps = kWSteps < 32 / RX ? kWSteps : 32 / RX;
  constexpr int kVals = RW * RX;  // sums per thread, and per warp after the reduction
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int chunks = (m + RX - 1) / RX;
  const int x0 = (blockIdx.x % chunks) * RX;
  const int rows_x = min(RX, m - x0);  // rows of x this block has (uniform)
  const int w0 = (blockIdx.x / chunks * kWarps + warp) * RW;
  const int kv = k / kVec;  // 16-byte vectors per row
  const int per_split = (kv + SPLIT_K - 1) / SPLIT_K;
  const int v_begin = SPLIT_K == 1 ? 0 : min(static_cast<int>(blockIdx.y) * per_split, kv);
  const int v_end = SPLIT_K == 1 ? kv : min(v_begin + per_split, kv);

  // Rows of w past n read row n - 1 (valid memory, sums dropped): no branch in the loop.
  const uint4* wr[RW];
#pragma unroll
  for (int r = 0; r < RW; ++r) {
    wr[r] = reinterpret_cast<const uint4*>(w) + static_cast<long long>(min(w0 + r, n - 1)) * kv;
  }
  const uint4* xr = reinterpret_cast<const uint4*>(x) + static_cast<long long>(x0) * kv;

  float acc[kVals];
#pragma unroll
  for (int i = 0; i < kVals; ++i) acc[i] = 0.f;

  // acc[i RW + r] += x row i . w row r over one 16-byte vector at v of each (by x's row
  // first, so a warp's sums of one row of out lie side by side for the stores).
  const auto multiply = [&](const uint4 (&wv)[RW], int v) {
    float wf[RW][kVec];
#pragma unroll
    for (int r = 0; r < RW; ++r) gemm::Widen<T>(wv[r], wf[r]);
#pragma unroll
    for (int i = 0; i < RX; ++i) {
      if (i < rows_x) {
        float xf[kVec];
        gemm::Widen<T>(__ldg(xr + static_cast<long long>(i) * kv + v), xf);
#pragma unroll
        for (int r = 0; r < RW; ++r) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[i * RW + r] = fmaf(wf[r][e], xf[e], acc[i * RW + r]);
        }
      }
    }
  };

  int v = v_begin + lane;
#pragma unroll 1
  for (; v + (kSteps - 1) * 32 < v_end; v += kSteps * 32) {
    uint4 wv[kSteps][RW];
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
#pragma unroll
      for (int r = 0; r < RW; ++r) wv[s][r] = gemm::LoadOnce(wr[r] + v + 32 * s);
    }
#pragma unroll
    for (int s = 0; s < kSteps; ++s) multiply(wv[s], v + 32 * s);
  }
#pragma unroll 1
  for (; v < v_end; v += 32) {
    uint4 wv[RW];
#pragma unroll
    for (int r = 0; r < RW; ++r) wv[r] = gemm::LoadOnce(wr[r] + v);
    multiply(wv, v);
  }

  gemm::WarpReduceScatter<kVals>(acc, lane);
  // Lane `lane` now holds the sums of values [lane c, lane c + c) (c = kVals / 32), or with
  // fewer than 32 values that of value lane / (32 / kVals), kept by the first lane of each.
  constexpr int kHeld = kVals >= 32 ? kVals / 32 : 1;
  constexpr int kSpread = kVals >= 32 ? 1 : 32 / kVals;  // lanes per value held
  const int first = kVals >= 32 ? lane * kHeld : lane / kSpread;
  const bool holder = lane % kSpread == 0;

  if constexpr (SPLIT_K > 1) {
    const int tile = blockIdx.x;
    const auto region = [&](int split) {
      return partial + ((static_cast<long long>(tile) * SPLIT_K + split) * kWarps + warp) * kVals;
    };
    if (holder) {
#pragma unroll
      for (int j = 0; j < kHeld; ++j) region(blockIdx.y)[first + j] = acc[j];
    }
    if (!gemm::LastOfTile(counters, tile, SPLIT_K)) return;
    if (holder) {
#pragma unroll
      for (int j = 0; j < kHeld; ++j) {
        float sum = 0.f;
        for (int sp = 0; sp < SPLIT_K; ++sp) sum += __ldcg(region(sp) + first + j);
        acc[j] = sum;
      }
    }
  }

  if (!holder) return;
  const float scale = scale_x[0] * scale_w[0];
#pragma unroll
  for (int j = 0; j < kHeld; ++j) {
    const int idx = first + j;  // x row idx / RW, w row idx % RW
    const int row = x0 + idx / RW, col = w0 + idx % RW;
    if (row < m && col < n) {
      out[static_cast<long long>(row) * n + col] =
          ktune::FromFloat<typename gemm::Out<T>::type>(acc[j] * scale);
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
