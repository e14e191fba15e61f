// rope: rotary position embedding applied in place to q [tokens, heads, head_dim] and
// k [tokens, kv_heads, head_dim] (row-major, two tensors); the math and the device code are
// ktune/rope.cuh's, shared with rope_qkv (q and k inside fused qkv rows). The candidate
// kernel and its reference; the manifest (rope.textproto) gives their launch geometry and
// arguments.
//
// Device code only, compiled by NVRTC with -DKTUNE_MAX_THREADS=... -DKTUNE_MIN_BLOCKS=...
#include "ktune/common.cuh"
#include "ktune/rope.cuh"

/// Rotary embedding in place on q and k (ktune/rope.cuh has the math).
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
/// choice (ktune_rope::Run).
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
  ktune_rope::Run<BLOCK, VEC_BYTES, UNROLL, GRID_STRIDE>(
      ktune_rope::Rows<T>{q, k, static_cast<long long>(heads) * head_dim,
                          static_cast<long long>(kv_heads) * head_dim},
      cos_sin, positions, tokens, heads, kv_heads, head_dim, interleaved);
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
  ktune_rope::Reference(ktune_rope::Rows<T>{q, k, static_cast<long long>(heads) * head_dim,
                                             static_cast<long long>(kv_heads) * head_dim},
                        cos_sin, positions, tokens, heads, kv_heads, head_dim, interleaved);
}
