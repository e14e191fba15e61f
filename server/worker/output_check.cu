// The worker's output check on the GPU: a candidate's output buffer against the reference's,
// element by element, with the pass rule of ElementPasses (host_buffers.h) and the summary
// CompareBuffers gives (mismatches, the largest |got - want|, the first mismatch's index).
// The host compare read every output back and decoded it element by element: at 10^7-10^8
// elements a buffer that was most of a candidate's measurement, once per candidate.
//
// Compiled to PTX by NVRTC when ktune is built (embed_ptx_main.cc) and JIT-compiled by the
// driver when the worker first checks, so the worker needs no compiler. No includes: what it
// needs it writes itself. The double arithmetic is the host's, one rounding per operation
// (__dmul_rn and __dadd_rn, never a fused multiply-add), so both sides pass and fail the same
// elements.

// The element types, as the worker numbers them for its kernels (kernel_dtype.h); both fp8
// formats decode through their table.
enum : int { kF32 = 0, kF16 = 1, kBF16 = 2, kI32 = 3, kF8E4M3 = 4, kF8E5M2 = 5 };

struct CheckResult {
  unsigned long long mismatches;
  unsigned long long max_abs_bits;  // a non-negative double's bits order as its value does
  unsigned long long first_index;   // the lowest mismatching index; all ones when none
};

__device__ __forceinline__ bool IsNan(double d) {
  const unsigned long long b = static_cast<unsigned long long>(__double_as_longlong(d));
  return (b & 0x7FF0000000000000ull) == 0x7FF0000000000000ull && (b & 0x000FFFFFFFFFFFFFull);
}
__device__ __forceinline__ bool IsInf(double d) {
  const unsigned long long b = static_cast<unsigned long long>(__double_as_longlong(d));
  return (b & 0x7FFFFFFFFFFFFFFFull) == 0x7FF0000000000000ull;
}
__device__ __forceinline__ double Abs(double d) {
  return __longlong_as_double(__double_as_longlong(d) & 0x7FFFFFFFFFFFFFFFll);
}

// Element i of `p` exactly, as a double. fp8 goes through `table` (its 256 values as the
// host decodes them), so the two sides agree on every encoding, NaNs included.
__device__ __forceinline__ double Decode(const void* p, unsigned long long i, int type,
                                         const double* table) {
  switch (type) {
    case kF32:
      return static_cast<const float*>(p)[i];
    case kF16: {
      const unsigned short h = static_cast<const unsigned short*>(p)[i];
      float f;
      asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
      return f;
    }
    case kBF16:
      return __int_as_float(static_cast<int>(static_cast<const unsigned short*>(p)[i]) << 16);
    case kI32:
      return static_cast<const int*>(p)[i];
    default:
      return table[static_cast<const unsigned char*>(p)[i]];
  }
}

// Grid-stride over n elements; one atomic of each kind per warp. REQUIRES: *result was set
// to {0, 0, all ones} before the launch; blockDim.x a multiple of 32.
extern "C" __global__ void ktune_check_outputs(const void* got, const void* want,
                                               unsigned long long n, int type, double atol,
                                               double rtol, const double* table,
                                               CheckResult* result) {
  unsigned long long mismatches = 0, first = ~0ull;
  double max_abs = 0;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const double g = Decode(got, i, type, table);
    const double w = Decode(want, i, type, table);
    bool pass;
    if (IsNan(g) || IsNan(w)) {
      pass = IsNan(g) && IsNan(w);
    } else if (IsInf(g) || IsInf(w)) {
      pass = g == w;
    } else {
      pass = Abs(__dadd_rn(g, -w)) <= __dadd_rn(atol, __dmul_rn(rtol, Abs(w)));
    }
    double err = Abs(__dadd_rn(g, -w));
    if (IsNan(err) || IsInf(err)) err = pass ? 0.0 : __longlong_as_double(0x7FF0000000000000ll);
    max_abs = err > max_abs ? err : max_abs;
    if (!pass) {
      if (mismatches++ == 0) first = i;  // a thread's indices only grow
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    mismatches += __shfl_down_sync(0xFFFFFFFFu, mismatches, offset);
    const double other_max = __shfl_down_sync(0xFFFFFFFFu, max_abs, offset);
    max_abs = other_max > max_abs ? other_max : max_abs;
    const unsigned long long other_first = __shfl_down_sync(0xFFFFFFFFu, first, offset);
    first = other_first < first ? other_first : first;
  }
  if (threadIdx.x % 32 == 0) {
    if (mismatches > 0) {
      atomicAdd(&result->mismatches, mismatches);
      atomicMin(&result->first_index, first);
    }
    if (max_abs > 0) {
      atomicMax(&result->max_abs_bits,
                static_cast<unsigned long long>(__double_as_longlong(max_abs)));
    }
  }
}
