// Device helpers shared by ktune's kernel templates: element type <-> float conversions,
// an aligned vector of N elements for wide loads and stores, and warp/block sum reductions.
//
// Device code only. NVRTC compiles it with `--include-path=<kernel_templates>/include`, so a
// template writes `#include "ktune/common.cuh"`. It includes nothing but <cuda_fp16.h> and
// <cuda_bf16.h> (shipped with the toolkit, found on NVRTC's include path): no host headers,
// no <cstdint>. Every helper is a pure function of its arguments (the block reduction also
// of its block's threads), so any number of blocks may run them at once.
//
// Compile-time knobs are template arguments, documented with `///` and checked with
// static_assert where they are declared, CUB style.
#ifndef KTUNE_COMMON_CUH_
#define KTUNE_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ktune/grid_dependency.cuh"

// ktune passes both with -D on every compile; a template that is compiled without them
// would silently get no launch bounds, so stop here instead.
#if !defined(KTUNE_MAX_THREADS) || !defined(KTUNE_MIN_BLOCKS)
#error "ktune defines KTUNE_MAX_THREADS and KTUNE_MIN_BLOCKS (-D) on every compile"
#endif

namespace ktune {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Tiny stand-ins for <type_traits>, which NVRTC does not reliably ship.
template <typename A, typename B>
constexpr bool kIsSame = false;
template <typename A>
constexpr bool kIsSame<A, A> = true;
template <bool C, typename A, typename B>
struct Conditional {
  using type = A;
};
template <typename A, typename B>
struct Conditional<false, A, B> {
  using type = B;
};

// --- Element types ----------------------------------------------------------------------

/// True for the element types ktune's dtypes map to: float (f32), __half (f16),
/// __nv_bfloat16 (bf16).
template <typename T>
constexpr bool kIsElementType =
    kIsSame<T, float> || kIsSame<T, __half> || kIsSame<T, __nv_bfloat16>;

// Exact widening to float.
__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

// Narrowing from float, round to nearest even (the same rounding as torch's .to(dtype)).
template <typename T>
__device__ __forceinline__ T FromFloat(float v) {
  static_assert(sizeof(T) == 0, "FromFloat: T must be float, __half or __nv_bfloat16");
  return T();
}
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// --- Aligned vectors --------------------------------------------------------------------

/// N consecutive elements of T, aligned to their whole size, so that one load or store
/// moves them all (16 bytes: LDG.E.128 / STG.E.128).
///   T: float, __half or __nv_bfloat16.
///   N: elements per vector; 1, 2, 4 or 8, and N * sizeof(T) at most 16 bytes (the widest
///      access one thread can make).
/// The elements are kept as raw 32-bit words (one 16-bit word for a single 16-bit element),
/// two 16-bit elements to a word. An array of __half or __nv_bfloat16 would be split by the
/// compiler into one 32-bit register per element; packed words halve the registers a
/// template that keeps vectors in flight (or a whole row cached) needs. Read and write the
/// elements through VectorToFloat and FloatToVector.
template <typename T, int N>
struct alignas(sizeof(T) * N) AlignedVector {
  static_assert(kIsElementType<T>, "T must be float, __half or __nv_bfloat16");
  static_assert(N == 1 || N == 2 || N == 4 || N == 8, "N must be 1, 2, 4 or 8");
  static_assert(sizeof(T) * N <= 16, "N * sizeof(T) must be at most 16 bytes");

  static constexpr int kBytes = static_cast<int>(sizeof(T)) * N;
  using Word = typename Conditional<(kBytes >= 4), unsigned int, unsigned short>::type;
  static constexpr int kWords = kBytes >= 4 ? kBytes / 4 : 1;

  Word words[kWords];
};

/// The checks every candidate kernel makes on its element type, block and vector, as one
/// constant expression: `static_assert(ktune::KernelParamsOk<T, BLOCK, VEC>());` first in the
/// kernel. T float, __half or __nv_bfloat16; BLOCK a multiple of the warp size within
/// KTUNE_MAX_THREADS; VEC (default 1) elements of T in one access of 1, 2, 4 or 8 elements
/// and at most 16 bytes.
template <typename T, int BLOCK, int VEC = 1>
__device__ constexpr bool KernelParamsOk() {
  static_assert(kIsElementType<T>, "T must be float, __half or __nv_bfloat16");
  static_assert(BLOCK % kWarpSize == 0, "BLOCK must be a multiple of the warp size");
  static_assert(BLOCK <= KTUNE_MAX_THREADS, "BLOCK must not exceed KTUNE_MAX_THREADS");
  static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "VEC must be 1, 2, 4 or 8");
  static_assert(VEC * sizeof(T) <= 16, "VEC * sizeof(T) must be at most 16 bytes");
  return true;
}

// Loads N elements at p. REQUIRES: p is aligned to N * sizeof(T) bytes.
template <int N, typename T>
__device__ __forceinline__ AlignedVector<T, N> LoadVector(const T* p) {
  return *reinterpret_cast<const AlignedVector<T, N>*>(p);
}

/// LoadVector through the read-only data path (ld.global.nc), which a load from a pointer
/// the compiler cannot trace to a __restrict__ const kernel argument does not get by itself.
/// REQUIRES: as LoadVector, 4, 8 or 16 bytes, and no thread of the kernel writes p[0 .. N-1].
template <int N, typename T>
__device__ __forceinline__ AlignedVector<T, N> LoadReadOnlyVector(const T* p) {
  using V = AlignedVector<T, N>;
  V v;
  if constexpr (V::kBytes == 16) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    v.words[0] = u.x;
    v.words[1] = u.y;
    v.words[2] = u.z;
    v.words[3] = u.w;
  } else if constexpr (V::kBytes == 8) {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    v.words[0] = u.x;
    v.words[1] = u.y;
  } else {
    static_assert(V::kBytes == 4, "LoadReadOnlyVector: 4, 8 or 16 bytes");
    v.words[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
  }
  return v;
}

// Stores N elements at p. REQUIRES: p is aligned to N * sizeof(T) bytes.
template <int N, typename T>
__device__ __forceinline__ void StoreVector(T* p, const AlignedVector<T, N>& v) {
  *reinterpret_cast<AlignedVector<T, N>*>(p) = v;
}

// Widens every element of v into f (element 0 is the lowest-addressed, the low half of
// word 0, as in memory: little-endian).
template <typename T, int N>
__device__ __forceinline__ void VectorToFloat(const AlignedVector<T, N>& v, float (&f)[N]) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = __uint_as_float(v.words[i]);
  } else if constexpr (N == 1) {
    if constexpr (kIsSame<T, __half>) {
      f[0] = __half2float(__ushort_as_half(v.words[0]));
    } else {
      f[0] = __uint_as_float(static_cast<unsigned int>(v.words[0]) << 16);
    }
  } else {
#pragma unroll
    for (int w = 0; w < N / 2; ++w) {
      const unsigned int word = v.words[w];
      if constexpr (kIsSame<T, __half>) {
        f[2 * w] = __half2float(__ushort_as_half(static_cast<unsigned short>(word & 0xffffu)));
        f[2 * w + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(word >> 16)));
      } else {
        // A bf16 is the high half of the float with the same value.
        f[2 * w] = __uint_as_float(word << 16);
        f[2 * w + 1] = __uint_as_float(word & 0xffff0000u);
      }
    }
  }
}

// Narrows f into a vector, round to nearest even, two elements at a time for 16-bit types
// (one F2FP instruction per pair on sm_80+).
template <typename T, int N>
__device__ __forceinline__ AlignedVector<T, N> FloatToVector(const float (&f)[N]) {
  AlignedVector<T, N> v;
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < N; ++i) v.words[i] = __float_as_uint(f[i]);
  } else if constexpr (N == 1) {
    if constexpr (kIsSame<T, __half>) {
      v.words[0] = __half_as_ushort(__float2half_rn(f[0]));
    } else {
      v.words[0] = __bfloat16_as_ushort(__float2bfloat16_rn(f[0]));
    }
  } else {
#pragma unroll
    for (int w = 0; w < N / 2; ++w) {
      unsigned int lo;
      unsigned int hi;
      if constexpr (kIsSame<T, __half>) {
        const __half2 p = __floats2half2_rn(f[2 * w], f[2 * w + 1]);
        lo = __half_as_ushort(__low2half(p));
        hi = __half_as_ushort(__high2half(p));
      } else {
        const __nv_bfloat162 p = __floats2bfloat162_rn(f[2 * w], f[2 * w + 1]);
        lo = __bfloat16_as_ushort(__low2bfloat16(p));
        hi = __bfloat16_as_ushort(__high2bfloat16(p));
      }
      v.words[w] = lo | (hi << 16);
    }
  }
  return v;
}

// --- Reductions -------------------------------------------------------------------------

/// Sum of v over each aligned group of WIDTH lanes of the warp (lanes [0, WIDTH),
/// [WIDTH, 2 * WIDTH), ...); every lane gets its group's sum, bit-identical across the
/// group (a xor butterfly adds the same pairs in the same order on every lane).
///   WIDTH: lanes per group; a power of two from 1 to 32.
/// REQUIRES: all 32 lanes of the warp call it (full-mask shuffles).
template <int WIDTH = kWarpSize>
__device__ __forceinline__ float WarpReduceSum(float v) {
  static_assert(WIDTH >= 1 && WIDTH <= kWarpSize && (WIDTH & (WIDTH - 1)) == 0,
                "WIDTH must be a power of two from 1 to the warp size");
#pragma unroll
  for (int offset = WIDTH / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

/// Sum of v over the BLOCK threads of a 1-D block; every thread gets the same value.
///   BLOCK: threads per block (== blockDim.x); a multiple of the warp size, at most 1024,
///          and BLOCK / 32 a power of two.
/// Shared memory: BLOCK / 32 floats (none when BLOCK == 32), one slot per warp, written by
/// distinct warps and read as broadcasts, so no bank conflicts.
/// REQUIRES: every thread of the block calls it (it has a __syncthreads()). Like CUB's
/// collectives, a second call in the same kernel needs a __syncthreads() before it, since
/// the per-warp slots are reused.
template <int BLOCK>
__device__ __forceinline__ float BlockReduceSum(float v) {
  static_assert(BLOCK % kWarpSize == 0, "BLOCK must be a multiple of the warp size");
  static_assert(BLOCK >= kWarpSize && BLOCK <= 1024, "BLOCK must be from 32 to 1024");
  constexpr int kWarps = BLOCK / kWarpSize;
  static_assert((kWarps & (kWarps - 1)) == 0, "BLOCK / 32 must be a power of two");

  v = WarpReduceSum(v);
  if constexpr (kWarps == 1) {
    return v;
  } else {
    __shared__ float warp_sums[kWarps];
    const int lane = threadIdx.x % kWarpSize;
    if (lane == 0) warp_sums[threadIdx.x / kWarpSize] = v;
    __syncthreads();
    // Each aligned group of kWarps lanes holds all kWarps partials and reduces them, so
    // every lane of every warp ends with the total without a second broadcast.
    return WarpReduceSum<kWarps>(warp_sums[lane % kWarps]);
  }
}

/// The reference kernels' reduction, deterministic by construction: each of the N threads
/// of a warp puts its double `v` in partial[threadIdx.x]; thread 0 alone folds the N partials
/// in thread order, total = combine(total, partial[k]) from `init`, and hands the total to
/// done(total) (e.g. a store to a __shared__ that every thread reads after the call).
/// REQUIRES: threads 0 .. N - 1 of one warp call it, N <= 32; partial holds N doubles that
/// no thread reads or writes between the calls but through this function.
template <int N, typename Combine, typename Done>
__device__ __forceinline__ void ReferenceReduce(double v, double* partial, double init,
                                                Combine combine, Done done) {
  static_assert(N >= 1 && N <= kWarpSize, "N must be from 1 to 32");
  partial[threadIdx.x] = v;
  __syncwarp();
  if (threadIdx.x == 0) {
    double total = init;
    for (int k = 0; k < N; ++k) total = combine(total, partial[k]);
    done(total);
  }
  __syncwarp();
}

// The combine of ReferenceReduce for a sum.
__device__ __forceinline__ double AddDoubles(double a, double b) { return a + b; }

}  // namespace ktune

#endif  // KTUNE_COMMON_CUH_
