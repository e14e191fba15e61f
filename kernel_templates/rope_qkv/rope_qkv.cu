// rope_qkv: rotary position embedding applied in place to the q and k parts of fused qkv
// rows [tokens, (heads + 2 * kv_heads) * head_dim] (each row q's heads, then k's, then v's,
// as a fused QKV projection writes them; v is neither read nor written). The same rotation
// as the rope template's (ktune/rope.cuh has the math and the device code), without the
// copies that would make q and k tensors of their own. The candidate kernel and its
// reference; the manifest (rope_qkv.textproto) gives their launch geometry and arguments.
//
// Device code only, compiled by NVRTC with -DKTUNE_MAX_THREADS=... -DKTUNE_MIN_BLOCKS=...
#include "ktune/common.cuh"
#include "ktune/rope.cuh"

namespace ktune_rope {

/// Where q's and k's heads lie in fused qkv rows.
template <typename T>
__device__ __forceinline__ Rows<T> FusedRows(T* qkv, int heads, int kv_heads, int head_dim) {
  const long long row = static_cast<long long>(heads + 2 * kv_heads) * head_dim;
  return Rows<T>{qkv, qkv + static_cast<long long>(heads) * head_dim, row, row};
}

}  // namespace ktune_rope

/// Rotary embedding in place on the q and k parts of qkv's rows; the params are the rope
/// template's (rope_kernel's comment).
/// REQUIRES: head_dim % (2 * VEC) == 0; qkv aligned to VEC_BYTES and cos_sin to 16 bytes
/// (cudaMalloc gives 256); 0 <= positions[t] < rows of cos_sin; qkv, cos_sin and positions do
/// not overlap.
template <typename T, int BLOCK, int VEC_BYTES, int UNROLL, int GRID_STRIDE>
__global__ void KTUNE_LAUNCH_BOUNDS rope_qkv_kernel(T* __restrict__ qkv,
                                                    const float* __restrict__ cos_sin,
                                                    const int* __restrict__ positions,
                                                    int tokens, int heads, int kv_heads,
                                                    int head_dim, int interleaved) {
  ktune::GridDependencyBegin();  // programmatic launch: see ktune/grid_dependency.cuh
  ktune_rope::Run<BLOCK, VEC_BYTES, UNROLL, GRID_STRIDE>(
      ktune_rope::FusedRows(qkv, heads, kv_heads, head_dim), cos_sin, positions, tokens, heads,
      kv_heads, head_dim, interleaved);
}

/// The reference: one token per 32-thread block, the rotation in double (rope_reference's
/// work over fused rows). Launched with grid = tokens, block = 32 (manifest).
///   T: float, __half or __nv_bfloat16.
template <typename T>
__global__ void KTUNE_LAUNCH_BOUNDS rope_qkv_reference(T* __restrict__ qkv,
                                                       const float* __restrict__ cos_sin,
                                                       const int* __restrict__ positions,
                                                       int tokens, int heads, int kv_heads,
                                                       int head_dim, int interleaved) {
  ktune_rope::Reference(ktune_rope::FusedRows(qkv, heads, kv_heads, head_dim), cos_sin,
                        positions, tokens, heads, kv_heads, head_dim, interleaved);
}
