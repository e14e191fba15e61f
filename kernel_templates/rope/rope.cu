// rope: rotary position embedding applied in place to q [tokens, heads, head_dim] and
// k [tokens, kv_heads, head_dim] (row-major), full rotary (rot_dim = head_dim), with the
// angles of token t read from cos_sin [max_pos, head_dim] (f32) at row positions[t]:
// cos_sin[p, i] = cos(p * theta_i) for i < head_dim / 2 and sin(p * theta_i) at
// head_dim / 2 + i. Per head vector x of length d = head_dim, pair i < d / 2 rotates
//   neox (interleaved = 0):        (x[i], x[i + d/2])
//   GPT-J (interleaved = 1):       (x[2i], x[2i + 1])
// as (a, b) -> (a * cos_i - b * sin_i, b * cos_i + a * sin_i), float math. The candidate
// kernel and its reference; the manifest (rope.textproto) gives their launch geometry and
// arguments.
//
// Device code only, compiled by NVRTC with -DKTUNE_MAX_THREADS=... -DKTUNE_MIN_BLOCKS=...
#include "ktune/common.cuh"

namespace ktune_rope {

// N consecutive floats at p into f, in 16-byte (or narrower, N < 4) loads.
// REQUIRES: p is aligned to min(N, 4) * 4 bytes.
template <int N>
__device__ __forceinline__ void LoadFloats(const float* __restrict__ p, float (&f)[N]) {
  constexpr int kPer = N < 4 ? N : 4;
#pragma unroll
  for (int c = 0; c < N / kPer; ++c) {
    const ktune::AlignedVector<float, kPer> v = ktune::LoadVector<kPer>(p + c * kPer);
    float part[kPer];
    ktune::VectorToFloat(v, part);
#pragma unroll
    for (int i = 0; i < kPer; ++i) f[c * kPer + i] = part[i];
  }
}

// (a, b) -> (a * c - b * s, b * c + a * s), the reference's order.
__device__ __forceinline__ void Rotate(float& a, float& b, float c, float s) {
  const float ra = a * c - b * s;
  const float rb = b * c + a * s;
  a = ra;
  b = rb;
}

// One unit: VEC pairs of one head vector, in registers. lo/hi are the two VEC-element
// vectors the unit covers: neox: x[c * VEC ...] and x[d/2 + c * VEC ...] (pair j is
// (lo[j], hi[j])); interleaved: x[2 * c * VEC ...] and the VEC elements after (pair j is
// elements 2j and 2j + 1 of lo then hi).
template <typename T, int VEC>
struct Unit {
  T* lo_ptr;
  T* hi_ptr;
  ktune::AlignedVector<T, VEC> lo;
  ktune::AlignedVector<T, VEC> hi;
  float cos[VEC];
  float sin[VEC];
};

// Where unit `c` (0 <= c < head_dim / 2 / VEC) of head `r` of token `token` lives
// (r < heads: q's head r, else k's head r - heads), and its loads, all issued here.
template <bool INTERLEAVED, int VEC, typename T>
__device__ __forceinline__ void LoadUnit(T* __restrict__ q, T* __restrict__ k,
                                         const float* __restrict__ cos_sin,
                                         const int* __restrict__ positions, long long token,
                                         int r, int c, int heads, int kv_heads, int head_dim,
                                         Unit<T, VEC>& u) {
  const int half = head_dim / 2;
  T* head = r < heads ? q + (token * heads + r) * head_dim
                      : k + (token * kv_heads + (r - heads)) * head_dim;
  if constexpr (INTERLEAVED) {
    u.lo_ptr = head + 2 * c * VEC;
    u.hi_ptr = u.lo_ptr + VEC;
  } else {
    u.lo_ptr = head + c * VEC;
    u.hi_ptr = u.lo_ptr + half;
  }
  u.lo = ktune::LoadVector<VEC>(u.lo_ptr);
  u.hi = ktune::LoadVector<VEC>(u.hi_ptr);
  const float* row = cos_sin + static_cast<long long>(positions[token]) * head_dim + c * VEC;
  LoadFloats<VEC>(row, u.cos);
  LoadFloats<VEC>(row + half, u.sin);
}

template <bool INTERLEAVED, int VEC, typename T>
__device__ __forceinline__ void RotateAndStoreUnit(const Unit<T, VEC>& u) {
  float lo[VEC];
  float hi[VEC];
  ktune::VectorToFloat(u.lo, lo);
  ktune::VectorToFloat(u.hi, hi);
  if constexpr (INTERLEAVED) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      float* e = j < VEC / 2 ? lo : hi;  // pair j is elements 2j, 2j + 1 of lo ++ hi
      const int at = (2 * j) % VEC;
      if constexpr (VEC == 1) {
        Rotate(lo[0], hi[0], u.cos[0], u.sin[0]);
      } else {
        Rotate(e[at], e[at + 1], u.cos[j], u.sin[j]);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) Rotate(lo[j], hi[j], u.cos[j], u.sin[j]);
  }
  ktune::StoreVector<VEC>(u.lo_ptr, ktune::FloatToVector<T>(lo));
  ktune::StoreVector<VEC>(u.hi_ptr, ktune::FloatToVector<T>(hi));
}

// The units first + i * BLOCK (i < UNROLL) that are below `units`, unit g being unit
// g % chunks of head row g / chunks of the tokens from `token0` on (rows_per_token rows a
// token: q's heads, then k's). All loads of the UNROLL units are in flight before the
// first rotation.
template <bool INTERLEAVED, int BLOCK, int VEC, int UNROLL, typename T>
__device__ __forceinline__ void Units(T* __restrict__ q, T* __restrict__ k,
                                      const float* __restrict__ cos_sin,
                                      const int* __restrict__ positions, long long token0,
                                      unsigned first, unsigned units, int heads, int kv_heads,
                                      int head_dim) {
  const unsigned chunks = static_cast<unsigned>(head_dim / 2 / VEC);
  const unsigned rows_per_token = static_cast<unsigned>(heads + kv_heads);
  Unit<T, VEC> u[UNROLL];
#pragma unroll
  for (int i = 0; i < UNROLL; ++i) {
    const unsigned g = first + i * BLOCK;
    if (g < units) {
      const unsigned row = g / chunks;
      const unsigned token = row / rows_per_token;
      LoadUnit<INTERLEAVED, VEC>(q, k, cos_sin, positions, token0 + token,
                                 static_cast<int>(row - token * rows_per_token),
                                 static_cast<int>(g - row * chunks), heads, kv_heads, head_dim,
                                 u[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < UNROLL; ++i) {
    if (first + i * BLOCK < units) RotateAndStoreUnit<INTERLEAVED>(u[i]);
  }
}

template <bool INTERLEAVED, int BLOCK, int VEC, int UNROLL, int GRID_STRIDE, typename T>
__device__ __forceinline__ void Rope(T* __restrict__ q, T* __restrict__ k,
                                     const float* __restrict__ cos_sin,
                                     const int* __restrict__ positions, int tokens, int heads,
                                     int kv_heads, int head_dim) {
  constexpr unsigned kTile = BLOCK * UNROLL;
  const unsigned units_per_token =
      static_cast<unsigned>(heads + kv_heads) * static_cast<unsigned>(head_dim / 2 / VEC);
  if constexpr (GRID_STRIDE == 0) {
    Units<INTERLEAVED, BLOCK, VEC, UNROLL>(q, k, cos_sin, positions, blockIdx.x,
                                           blockIdx.y * kTile + threadIdx.x, units_per_token,
                                           heads, kv_heads, head_dim);
  } else {
    // All tokens' units as one range: fewer than 2^31 (manifest), so no tile start wraps.
    const unsigned units = static_cast<unsigned>(tokens) * units_per_token;
#pragma unroll 1
    for (unsigned tile = blockIdx.x; tile * kTile < units; tile += gridDim.x) {
      Units<INTERLEAVED, BLOCK, VEC, UNROLL>(q, k, cos_sin, positions, 0,
                                             tile * kTile + threadIdx.x, units, heads, kv_heads,
                                             head_dim);
    }
  }
}

}  // namespace ktune_rope

/// Rotary embedding in place on q and k (see the top of this file for the math).
///   T:           float, __half or __nv_bfloat16 (q and k); cos_sin is float.
///   BLOCK:       threads per block (== blockDim.x); a multiple of 32, at most
///                KTUNE_MAX_THREADS.
///   VEC_BYTES:   bytes per vector access of q and k, 2, 4, 8 or 16 and at least sizeof(T);
///                a unit of work is VEC = VEC_BYTES / sizeof(T) pairs (two vectors).
///   UNROLL:      units per thread per tile (a tile is BLOCK * UNROLL units); 1 to 8.
///   GRID_STRIDE: 0: grid = [tokens, tiles per token], one tile of one token per block;
///                1: each block walks all tokens' units as one range, tile by tile, with
///                stride gridDim.x tiles (grid.y = 1); tokens * units per token < 2^31.
/// `interleaved` (0: neox, 1: GPT-J) is the caller's choice of semantics, not a tuning
/// choice: both bodies are compiled, specialised, and one is picked per launch by a uniform
/// branch.
/// REQUIRES: head_dim % (2 * VEC) == 0; q, k aligned to VEC_BYTES and cos_sin to 16 bytes
/// (cudaMalloc gives 256); 0 <= positions[t] < rows of cos_sin; q, k, cos_sin and
/// positions do not overlap.
template <typename T, int BLOCK, int VEC_BYTES, int UNROLL, int GRID_STRIDE>
__global__ void KTUNE_LAUNCH_BOUNDS rope_kernel(T* __restrict__ q, T* __restrict__ k,
                                                const float* __restrict__ cos_sin,
                                                const int* __restrict__ positions, int tokens,
                                                int heads, int kv_heads, int head_dim,
                                                int interleaved) {
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh
  static_assert(ktune::KernelParamsOk<T, BLOCK>());
  static_assert(VEC_BYTES == 2 || VEC_BYTES == 4 || VEC_BYTES == 8 || VEC_BYTES == 16,
                "VEC_BYTES must be 2, 4, 8 or 16");
  static_assert(VEC_BYTES >= sizeof(T), "VEC_BYTES must hold at least one element");
  static_assert(UNROLL >= 1 && UNROLL <= 8, "UNROLL must be from 1 to 8");
  static_assert(GRID_STRIDE == 0 || GRID_STRIDE == 1, "GRID_STRIDE must be 0 or 1");
  constexpr int VEC = VEC_BYTES / static_cast<int>(sizeof(T));

  if (interleaved) {
    ktune_rope::Rope<true, BLOCK, VEC, UNROLL, GRID_STRIDE>(q, k, cos_sin, positions, tokens,
                                                           heads, kv_heads, head_dim);
  } else {
    ktune_rope::Rope<false, BLOCK, VEC, UNROLL, GRID_STRIDE>(q, k, cos_sin, positions, tokens,
                                                            heads, kv_heads, head_dim);
  }
}

/// The reference: one token per 32-thread block, each thread a strided slice of the token's
/// (head, pair) list, q's heads then k's; the rotation in double from the loaded values,
/// rounded to T once. Launched with grid = tokens, block = 32 (manifest), so it fits under
/// any KTUNE_MAX_THREADS.
///   T: float, __half or __nv_bfloat16.
template <typename T>
__global__ void KTUNE_LAUNCH_BOUNDS rope_reference(T* __restrict__ q, T* __restrict__ k,
                                                   const float* __restrict__ cos_sin,
                                                   const int* __restrict__ positions,
                                                   int tokens, int heads, int kv_heads,
                                                   int head_dim, int interleaved) {
  static_assert(ktune::kIsElementType<T>, "T must be float, __half or __nv_bfloat16");
  const long long t = blockIdx.x;
  if (t >= tokens) return;
  const int half = head_dim / 2;
  const float* row = cos_sin + static_cast<long long>(positions[t]) * head_dim;
  const int pairs = (heads + kv_heads) * half;
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int r = p / half;
    const int i = p % half;
    T* x = r < heads ? q + (t * heads + r) * head_dim : k + (t * kv_heads + r - heads) * head_dim;
    T* a = interleaved ? x + 2 * i : x + i;
    T* b = interleaved ? x + 2 * i + 1 : x + half + i;
    const double av = ktune::ToFloat(*a);
    const double bv = ktune::ToFloat(*b);
    const double c = row[i];
    const double s = row[half + i];
    *a = ktune::FromFloat<T>(static_cast<float>(av * c - bv * s));
    *b = ktune::FromFloat<T>(static_cast<float>(bv * c + av * s));
  }
}
