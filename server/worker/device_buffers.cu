// A problem's buffer contents made and fingerprinted where they live, on the GPU: the fill
// GenerateFill makes on the host (host_buffers.h), bit for bit, and OutputDigest's sums.
// On the host, filling a problem's inputs and uploading them, then reading the reference's
// outputs back to digest them, was most of SetProblem at 10^8 elements and more (1 s for a
// 16384 x 28672 silu_and_mul on the H100 host, with the compile pool busy beside it).
//
// Compiled to PTX by NVRTC when ktune is built (embed_ptx_main.cc) and JIT-compiled by the
// driver when the worker first sets a problem, so the worker needs no compiler. No includes:
// what it needs it writes itself, and the host's conversions are written again here because
// this file cannot include them. The double arithmetic is the host's, one rounding per
// operation (__dmul_rn and __dadd_rn, never a fused multiply-add).

// The element types, as the worker numbers them for its kernels (kernel_dtype.h).
enum : int { kF32 = 0, kF16 = 1, kBF16 = 2, kI32 = 3, kF8E4M3 = 4, kF8E5M2 = 5 };

// SplitMix64's finalizer, as host_buffers.cc's Mix.
__device__ __forceinline__ unsigned long long Mix(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// FloatToHalf of host_buffers.cc: round to nearest even, overflow to infinity, quiet NaNs.
__device__ unsigned short FloatToHalf(float f) {
  const unsigned x = __float_as_uint(f);
  const unsigned short sign = static_cast<unsigned short>((x >> 16) & 0x8000u);
  const unsigned a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<unsigned short>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return static_cast<unsigned short>(sign | 0x7C00u);
  if (a >= 0x38800000u) {
    unsigned h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3FFu);
    const unsigned rem = a & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<unsigned short>(sign | h);
  }
  if (a <= 0x33000000u) return sign;
  const unsigned e = a >> 23;
  const unsigned m = (a & 0x7FFFFFu) | 0x800000u;
  const unsigned shift = 126u - e;
  unsigned h = m >> shift;
  const unsigned rem = m & ((1u << shift) - 1u);
  const unsigned half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return static_cast<unsigned short>(sign | h);
}

// FloatToBf16 of host_buffers.cc.
__device__ __forceinline__ unsigned short FloatToBf16(float f) {
  unsigned x = __float_as_uint(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<unsigned short>((x >> 16) | 0x0040u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<unsigned short>(x >> 16);
}

// FloatToFp8 of fp8.cc: round to nearest even in exact double steps, saturating.
__device__ unsigned char FloatToFp8(float f, int man, int bias, double max_value,
                                    unsigned max_bits) {
  const unsigned sign = (__float_as_uint(f) >> 31) ? 0x80u : 0u;
  if (f != f) return static_cast<unsigned char>(sign | 0x7Fu);
  const double a = fabs(static_cast<double>(f));
  const int emin = 1 - bias;
  if (a >= max_value) return static_cast<unsigned char>(sign | max_bits);
  if (a == 0) return static_cast<unsigned char>(sign);
  const int e = ilogb(a) > emin ? ilogb(a) : emin;
  const double quantum = ldexp(1.0, e - man);
  const double q = rint(a / quantum);  // a power-of-two divide: exact before the rounding
  const double v = q * quantum;
  if (v >= max_value) return static_cast<unsigned char>(sign | max_bits);
  if (v < ldexp(1.0, emin)) return static_cast<unsigned char>(sign | static_cast<unsigned>(q));
  const int ev = ilogb(v);
  const int mant = static_cast<int>(ldexp(v, man - ev)) - (1 << man);
  return static_cast<unsigned char>(sign | ((ev + bias) << man) | mant);
}

// EncodeElement of host_buffers.cc: element i of `out` from `v`.
__device__ __forceinline__ void Store(void* out, unsigned long long i, int type, double v) {
  switch (type) {
    case kF32:
      static_cast<float*>(out)[i] = __double2float_rn(v);
      return;
    case kF16:
      static_cast<unsigned short*>(out)[i] = FloatToHalf(__double2float_rn(v));
      return;
    case kBF16:
      static_cast<unsigned short*>(out)[i] = FloatToBf16(__double2float_rn(v));
      return;
    case kI32: {
      int r = 0;
      if (v == v) {
        const double n = rint(v);
        r = n >= 2147483647.0 ? 2147483647 : n <= -2147483648.0 ? (-2147483647 - 1) : static_cast<int>(n);
      }
      static_cast<int*>(out)[i] = r;
      return;
    }
    case kF8E4M3:
      static_cast<unsigned char*>(out)[i] = FloatToFp8(__double2float_rn(v), 3, 7, 448.0, 0x7Eu);
      return;
    default:
      static_cast<unsigned char*>(out)[i] = FloatToFp8(__double2float_rn(v), 2, 15, 57344.0, 0x7Bu);
      return;
  }
}

// GenerateFill's UNIFORM (uniform != 0) or CONSTANT lo (ZERO: lo 0) over n elements:
// element i of a UNIFORM fill draws Mix(Mix(seed) + i), as the host does.
extern "C" __global__ void ktune_fill(void* out, unsigned long long n, int type,
                                      unsigned long long seed, double lo, double hi,
                                      int uniform) {
  const unsigned long long key = Mix(seed);
  const double span = __dadd_rn(hi, -lo);
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    double v = lo;
    if (uniform) {
      const double unit = __dmul_rn(__ull2double_rn(Mix(key + i) >> 11), 0x1.0p-53);
      v = __dadd_rn(lo, __dmul_rn(span, unit));
      if (type == kI32) v = floor(v);
    }
    Store(out, i, type, v);
  }
}

// OutputDigest's two sums over `bytes` bytes at p (8-byte aligned), added into sums[0..1]:
// word j adds Mix(w ^ Mix(2 j + lane)) to sums[lane], the last word zero-padded.
// REQUIRES: sums zeroed before the launch; blockDim.x a multiple of 32.
extern "C" __global__ void ktune_digest(const unsigned char* p, unsigned long long bytes,
                                        unsigned long long* sums) {
  const unsigned long long words = (bytes + 7) / 8;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long s0 = 0, s1 = 0;
  for (unsigned long long j = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < words; j += stride) {
    unsigned long long w = 0;
    if (8 * j + 8 <= bytes) {
      w = reinterpret_cast<const unsigned long long*>(p)[j];
    } else {
      for (unsigned long long b = 8 * j; b < bytes; ++b) {
        w |= static_cast<unsigned long long>(p[b]) << (8 * (b - 8 * j));
      }
    }
    s0 += Mix(w ^ Mix(2 * j));
    s1 += Mix(w ^ Mix(2 * j + 1));
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    s0 += __shfl_down_sync(0xFFFFFFFFu, s0, offset);
    s1 += __shfl_down_sync(0xFFFFFFFFu, s1, offset);
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(&sums[0], s0);
    atomicAdd(&sums[1], s1);
  }
}
