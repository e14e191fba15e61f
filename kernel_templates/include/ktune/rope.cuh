// Rotary position embedding's device code, shared by the rope template (q and k as two
// tensors) and rope_qkv (q and k inside the rows of one fused qkv tensor, as a QKV
// projection writes them). Full rotary (rot_dim = head_dim), the angles of token t read
// from cos_sin [max_pos, head_dim] (f32) at row positions[t]: cos_sin[p, i] =
// cos(p * theta_i) for i < head_dim / 2 and sin(p * theta_i) at head_dim / 2 + i. Per head
// vector x of length d = head_dim, pair i < d / 2 rotates
//   neox (interleaved = 0):        (x[i], x[i + d/2])
//   GPT-J (interleaved = 1):       (x[2i], x[2i + 1])
// as (a, b) -> (a * cos_i - b * sin_i, b * cos_i + a * sin_i), float math (the reference:
// double).
//
// Device code only; the templates' kernels include it after ktune/common.cuh.
#ifndef KTUNE_ROPE_CUH_
#define KTUNE_ROPE_CUH_

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

// Where the heads of token t lie: q's at q + t * q_row, k's at k + t * k_row, each head
// head_dim elements after the last. Separate q and k tensors have q_row = heads * head_dim
// and k_row = kv_heads * head_dim; q and k inside one fused qkv row (q's heads, k's, v's)
// have both rows (heads + 2 * kv_heads) * head_dim.
template <typename T>
struct Rows {
  T* q;
  T* k;
  long long q_row;
  long long k_row;
};

// Where unit `c` (0 <= c < head_dim / 2 / VEC) of head `r` of token `token` lives
// (r < heads: q's head r, else k's head r - heads), and its loads, all issued here.
template <bool INTERLEAVED, int VEC, typename T>
__device__ __forceinline__ void LoadUnit(const Rows<T>& rows, const float* __restrict__ cos_sin,
                                         const int* __restrict__ positions, long long token,
                                         int r, int c, int heads, int head_dim,
                                         Unit<T, VEC>& u) {
  const int half = head_dim / 2;
  T* head = r < heads ? rows.q + token * rows.q_row + static_cast<long long>(r) * head_dim
                      : rows.k + token * rows.k_row + static_cast<long long>(r - heads) * head_dim;
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
__device__ __forceinline__ void Units(const Rows<T>& rows, const float* __restrict__ cos_sin,
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
      LoadUnit<INTERLEAVED, VEC>(rows, cos_sin, positions, token0 + token,
                                 static_cast<int>(row - token * rows_per_token),
                                 static_cast<int>(g - row * chunks), heads, head_dim, u[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < UNROLL; ++i) {
    if (first + i * BLOCK < units) RotateAndStoreUnit<INTERLEAVED>(u[i]);
  }
}

template <bool INTERLEAVED, int BLOCK, int VEC, int UNROLL, int GRID_STRIDE, typename T>
__device__ __forceinline__ void Rope(const Rows<T>& rows, const float* __restrict__ cos_sin,
                                     const int* __restrict__ positions, int tokens, int heads,
                                     int kv_heads, int head_dim) {
  constexpr unsigned kTile = BLOCK * UNROLL;
  const unsigned units_per_token =
      static_cast<unsigned>(heads + kv_heads) * static_cast<unsigned>(head_dim / 2 / VEC);
  if constexpr (GRID_STRIDE == 0) {
    Units<INTERLEAVED, BLOCK, VEC, UNROLL>(rows, cos_sin, positions, blockIdx.x,
                                           blockIdx.y * kTile + threadIdx.x, units_per_token,
                                           heads, kv_heads, head_dim);
  } else {
    // All tokens' units as one range: fewer than 2^31 (manifest), so no tile start wraps.
    const unsigned units = static_cast<unsigned>(tokens) * units_per_token;
#pragma unroll 1
    for (unsigned tile = blockIdx.x; tile * kTile < units; tile += gridDim.x) {
      Units<INTERLEAVED, BLOCK, VEC, UNROLL>(rows, cos_sin, positions, 0,
                                             tile * kTile + threadIdx.x, units, heads, kv_heads,
                                             head_dim);
    }
  }
}


// A candidate kernel's whole body over `rows`: the params checked, and both pairings compiled
// and specialised, one picked per launch by a uniform branch (`interleaved` is the caller's
// choice of semantics, not a tuning choice).
template <int BLOCK, int VEC_BYTES, int UNROLL, int GRID_STRIDE, typename T>
__device__ __forceinline__ void Run(const Rows<T>& rows, const float* __restrict__ cos_sin,
                                    const int* __restrict__ positions, int tokens, int heads,
                                    int kv_heads, int head_dim, int interleaved) {
  static_assert(ktune::KernelParamsOk<T, BLOCK>());
  static_assert(VEC_BYTES == 2 || VEC_BYTES == 4 || VEC_BYTES == 8 || VEC_BYTES == 16,
                "VEC_BYTES must be 2, 4, 8 or 16");
  static_assert(VEC_BYTES >= sizeof(T), "VEC_BYTES must hold at least one element");
  static_assert(UNROLL >= 1 && UNROLL <= 8, "UNROLL must be from 1 to 8");
  static_assert(GRID_STRIDE == 0 || GRID_STRIDE == 1, "GRID_STRIDE must be 0 or 1");
  constexpr int VEC = VEC_BYTES / static_cast<int>(sizeof(T));
  if (interleaved) {
    Rope<true, BLOCK, VEC, UNROLL, GRID_STRIDE>(rows, cos_sin, positions, tokens, heads,
                                                kv_heads, head_dim);
  } else {
    Rope<false, BLOCK, VEC, UNROLL, GRID_STRIDE>(rows, cos_sin, positions, tokens, heads,
                                                 kv_heads, head_dim);
  }
}

// A reference kernel's whole body: token blockIdx.x, each thread of the block a strided
// slice of the token's (head, pair) list, q's heads then k's; the rotation in double from
// the loaded values, rounded to T once.
template <typename T>
__device__ __forceinline__ void Reference(const Rows<T>& rows, const float* __restrict__ cos_sin,
                                          const int* __restrict__ positions, int tokens,
                                          int heads, int kv_heads, int head_dim,
                                          int interleaved) {
  static_assert(ktune::kIsElementType<T>, "T must be float, __half or __nv_bfloat16");
  const long long t = blockIdx.x;
  if (t >= tokens) return;
  const int half = head_dim / 2;
  const float* row = cos_sin + static_cast<long long>(positions[t]) * head_dim;
  const int pairs = (heads + kv_heads) * half;
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int r = p / half;
    const int i = p % half;
    T* x = r < heads ? rows.q + t * rows.q_row + static_cast<long long>(r) * head_dim
                     : rows.k + t * rows.k_row + static_cast<long long>(r - heads) * head_dim;
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

}  // namespace ktune_rope

#endif  // KTUNE_ROPE_CUH_
