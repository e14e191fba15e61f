// Hopper's warpgroup matrix multiply-accumulate (wgmma) for kernel templates: shared-memory
// matrix descriptors, the fences that order it, and one call per (element type, N).
//
// Device code only; wgmma exists on sm_90a alone (not plain sm_90, not later chips), so a
// template that includes this must exclude every other target in its manifest. All 128
// threads of a warpgroup (4 consecutive warps, the first at a warp index divisible by 4)
// execute each of these together.
#ifndef KTUNE_WGMMA_CUH_
#define KTUNE_WGMMA_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "ktune/common.cuh"
#include "ktune/tma.cuh"
#include "ktune/wgmma_ops.cuh"

namespace ktune {

/// The descriptor of a K-major tile in shared memory laid out as the copy engine writes it
/// with 128-byte swizzle (rows of 128 bytes of K, 8-row groups of 1024 bytes one after the
/// other; the tile 1024-byte aligned), in its two 32-bit halves. The high word is the same
/// for every such tile: the stride offset (the 1024 bytes between 8-row groups, in 16-byte
/// units) and the 128-byte swizzle mode (bit 62). The low word holds the start address in
/// 16-byte units (14 bits, which hold every shared-memory address) and the leading-dimension
/// offset, unused by swizzled K-major layouts (1). Stepping K inside the 128-byte row, or to
/// another slot of a ring, is adding its bytes >> 4 to the low word: 32-bit adds that never
/// carry into the high one; the hardware applies the swizzle to the address it forms.
constexpr unsigned kWgmmaDescSw128Hi = (1024u >> 4) | (1u << 30);
__device__ __forceinline__ unsigned WgmmaDescSw128Lo(unsigned smem_addr) {
  return ((smem_addr & 0x3FFFF) >> 4) | (1u << 16);
}
__device__ __forceinline__ unsigned long long WgmmaDesc(unsigned lo, unsigned hi) {
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

/// Orders this warpgroup's register and shared-memory accesses before the wgmmas that follow.
__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
/// Closes the wgmmas issued since the last commit into one group.
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
/// Waits until at most N committed groups are still running.
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/// Keeps the compiler from moving accesses of an accumulator across a wgmma wait: the
/// hardware writes the registers asynchronously, which the compiler cannot see.
template <int R>
__device__ __forceinline__ void WgmmaFenceOperands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/// Bytes of K one wgmma consumes: 16 elements of a 16-bit type, 32 of an 8-bit one, 8 of
/// tf32 (a float's 32 bits, of which wgmma reads the top 19: it truncates the low 13).
constexpr int kWgmmaKBytes = 32;

#define KTUNE_WGMMA_TYPED(N)                                                                \
  if constexpr (BN == N) {                                                                  \
    if constexpr (kIsSame<T, __nv_bfloat16>) {                                             \
      KTUNE_WGMMA_N##N(d, desc_a, desc_b, scale_d,                                          \
                       "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16", ", 0, 0"); \
    } else if constexpr (kIsSame<T, __half>) {                                             \
      KTUNE_WGMMA_N##N(d, desc_a, desc_b, scale_d,                                          \
                       "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16", ", 0, 0");   \
    } else if constexpr (kIsSame<T, float>) {                                              \
      KTUNE_WGMMA_N##N(d, desc_a, desc_b, scale_d,                                          \
                       "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32", "");       \
    } else if constexpr (kIsSame<T, __nv_fp8_e4m3>) {                                      \
      KTUNE_WGMMA_N##N(d, desc_a, desc_b, scale_d,                                          \
                       "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3", "");      \
    } else {                                                                                \
      KTUNE_WGMMA_N##N(d, desc_a, desc_b, scale_d,                                          \
                       "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e5m2.e5m2", "");      \
    }                                                                                       \
  }

/// True for the element types wgmma multiplies here (both operands the same type; float
/// as tf32).
template <typename T>
constexpr bool kIsWgmmaType = kIsSame<T, __nv_bfloat16> || kIsSame<T, __half> ||
                              kIsSame<T, __nv_fp8_e4m3> || kIsSame<T, __nv_fp8_e5m2> ||
                              kIsSame<T, float>;

/// d (64 x BN, float) = A (64 x 32 bytes of K) * B (BN x 32 bytes of K)^T + (scale_d ? d : 0),
/// both operands K-major in shared memory, asynchronously: the result is in d only after
/// WgmmaCommit and a WgmmaWait that covers it.
///   T:  __nv_bfloat16, __half, __nv_fp8_e4m3, __nv_fp8_e5m2, or float (multiplied as tf32:
///       each operand's low 13 bits are dropped, not rounded).
///   BN: one of KTUNE_WGMMA_NS (a multiple of 8 up to 256).
template <typename T, int BN>
__device__ __forceinline__ void Wgmma(float (&d)[BN / 2], unsigned long long desc_a,
                                      unsigned long long desc_b, int scale_d) {
  static_assert(kIsWgmmaType<T>, "Wgmma: T must be bf16, f16, fp8 e4m3, fp8 e5m2 or float");
  static_assert(BN == 8 || BN == 16 || BN == 24 || BN == 32 || BN == 48 || BN == 64 ||
                    BN == 96 || BN == 128 || BN == 192 || BN == 256,
                "Wgmma: BN must be one of KTUNE_WGMMA_NS");
  KTUNE_WGMMA_TYPED(8)
  KTUNE_WGMMA_TYPED(16)
  KTUNE_WGMMA_TYPED(24)
  KTUNE_WGMMA_TYPED(32)
  KTUNE_WGMMA_TYPED(48)
  KTUNE_WGMMA_TYPED(64)
  KTUNE_WGMMA_TYPED(96)
  KTUNE_WGMMA_TYPED(128)
  KTUNE_WGMMA_TYPED(192)
  KTUNE_WGMMA_TYPED(256)
}

#undef KTUNE_WGMMA_TYPED

}  // namespace ktune

#endif  // KTUNE_WGMMA_CUH_
