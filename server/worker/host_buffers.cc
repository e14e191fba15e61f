#include "server/worker/host_buffers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/base/fp8.h"

namespace ktune {
namespace {

uint32_t FloatBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

float BitsFloat(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Runs fn(begin, end) over [0, n) in chunks of at least `grain` items, on up to
// hardware_concurrency threads (the calling thread takes the first chunk).
template <typename Fn>
void ParallelFor(int64_t n, int64_t grain, const Fn& fn) {
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t parts =
      std::max<int64_t>(1, std::min<int64_t>(hw, n / std::max<int64_t>(1, grain)));
  if (parts <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t step = (n + parts - 1) / parts;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(parts - 1));
  for (int64_t p = 1; p < parts; ++p) {
    const int64_t begin = std::min(n, p * step);
    const int64_t end = std::min(n, begin + step);
    threads.emplace_back([&fn, begin, end] { fn(begin, end); });
  }
  fn(int64_t{0}, std::min(n, step));
  for (std::thread& t : threads) t.join();
}

// SplitMix64's finalizer: decorrelates the seeds of neighbouring chunks.
uint64_t Mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) from the top 53 bits. Written out (like the Box-Muller below) because
// std::uniform_real_distribution and std::normal_distribution are not specified bit for bit
// across standard libraries, and a restarted worker must reproduce the reference's digest.
double Unit(std::mt19937_64& gen) { return static_cast<double>(gen() >> 11) * 0x1.0p-53; }

// NORMAL elements are generated in chunks, each from its own mt19937_64 seeded from the
// buffer's seed and the chunk's index: deterministic whatever the number of threads.
constexpr int64_t kFillChunk = int64_t{1} << 16;

constexpr double kTwoPi = 6.283185307179586476925286766559;

}  // namespace

namespace {

// fn(encode) with encode(double value, void* out) writing one element of `dtype` as
// EncodeElement does, the dtype resolved once instead of per element.
template <typename Fn>
void WithElementType(DType dtype, const Fn& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn([](double v, void* out) {
        const float f = static_cast<float>(v);
        std::memcpy(out, &f, 4);
      });
    case DType::kF16:
      return fn([](double v, void* out) {
        const uint16_t h = FloatToHalf(static_cast<float>(v));
        std::memcpy(out, &h, 2);
      });
    case DType::kBF16:
      return fn([](double v, void* out) {
        const uint16_t b = FloatToBf16(static_cast<float>(v));
        std::memcpy(out, &b, 2);
      });
    default:  // i32 and fp8: as EncodeElement
      return fn([dtype](double v, void* out) { EncodeElement(dtype, v, out); });
  }
}

}  // namespace

uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) {  // NaN: keep the top payload bits, make it quiet
    return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  }
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: infinity
  if (a >= 0x38800000u) {                                              // >= 2^-14: a normal half
    uint32_t h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3FFu);
    const uint32_t rem = a & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
    return static_cast<uint16_t>(sign | h);
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25: zero (2^-25 itself ties to even zero)
  // A subnormal half, in units of 2^-24: the float is m * 2^(e - 150), so m >> (126 - e).
  const uint32_t e = a >> 23;  // 102..112
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14..24
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  if (e == 0x1Fu) return BitsFloat(sign | 0x7F800000u | (m << 13));
  if (e == 0) {
    const float v = std::ldexp(static_cast<float>(m), -24);  // exact
    return sign ? -v : v;
  }
  return BitsFloat(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t FloatToBf16(float f) {
  uint32_t x = FloatBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  x += 0x7FFFu + ((x >> 16) & 1u);  // round to nearest even; overflow reaches infinity
  return static_cast<uint16_t>(x >> 16);
}

float Bf16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

void EncodeElement(DType dtype, double value, void* out) {
  switch (dtype) {
    case DType::kF32: {
      const float f = static_cast<float>(value);
      std::memcpy(out, &f, 4);
      return;
    }
    case DType::kF16: {
      const uint16_t h = FloatToHalf(static_cast<float>(value));
      std::memcpy(out, &h, 2);
      return;
    }
    case DType::kBF16: {
      const uint16_t b = FloatToBf16(static_cast<float>(value));
      std::memcpy(out, &b, 2);
      return;
    }
    case DType::kF8E4M3:
      *static_cast<uint8_t*>(out) = FloatToFp8E4M3(static_cast<float>(value));
      return;
    case DType::kF8E5M2:
      *static_cast<uint8_t*>(out) = FloatToFp8E5M2(static_cast<float>(value));
      return;
    case DType::kI32: {
      int32_t i = 0;
      if (!std::isnan(value)) {
        const double r = std::nearbyint(value);
        i = r >= 2147483647.0    ? std::numeric_limits<int32_t>::max()
            : r <= -2147483648.0 ? std::numeric_limits<int32_t>::min()
                                 : static_cast<int32_t>(r);
      }
      std::memcpy(out, &i, 4);
      return;
    }
  }
}

double DecodeElement(DType dtype, const void* in) {
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, in, 4);
      return f;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, in, 2);
      return HalfToFloat(h);
    }
    case DType::kBF16: {
      uint16_t b;
      std::memcpy(&b, in, 2);
      return Bf16ToFloat(b);
    }
    case DType::kI32: {
      int32_t i;
      std::memcpy(&i, in, 4);
      return i;
    }
    case DType::kF8E4M3:
      return Fp8E4M3ToFloat(*static_cast<const uint8_t*>(in));
    case DType::kF8E5M2:
      return Fp8E5M2ToFloat(*static_cast<const uint8_t*>(in));
  }
  return 0;
}

absl::Status ValidateFill(const v1::Fill& fill) {
  const double lo = fill.lo(), hi = fill.hi();
  switch (fill.kind()) {
    case v1::Fill::UNIFORM:
      if (!(lo < hi)) {
        return absl::InvalidArgumentError(
            absl::StrCat("UNIFORM fill needs lo < hi, got [", lo, ", ", hi, ")"));
      }
      return absl::OkStatus();
    case v1::Fill::NORMAL:
      if (!(hi >= 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("NORMAL fill needs a standard deviation (hi) >= 0, got ", hi));
      }
      return absl::OkStatus();
    case v1::Fill::CONSTANT:
    case v1::Fill::ZERO:
    case v1::Fill::ZERO_ONCE:
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError("fill kind is unspecified");
  }
}

absl::StatusOr<std::string> GenerateFill(DType dtype, int64_t count, const v1::Fill& fill,
                                         uint64_t seed) {
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("negative count ", count));
  if (absl::Status valid = ValidateFill(fill); !valid.ok()) return valid;
  const double lo = fill.lo(), hi = fill.hi();
  const int64_t size = DTypeSize(dtype);
  std::string bytes(static_cast<size_t>(count * size), '\0');
  if (fill.kind() == v1::Fill::ZERO || fill.kind() == v1::Fill::ZERO_ONCE) return bytes;
  char* data = bytes.data();
  if (fill.kind() == v1::Fill::CONSTANT) {
    char one[4];
    EncodeElement(dtype, lo, one);
    for (int64_t i = 0; i < count; ++i) std::memcpy(data + i * size, one, size);
    return bytes;
  }
  const bool integer = dtype == DType::kI32;
  const int64_t chunks = (count + kFillChunk - 1) / kFillChunk;
  if (fill.kind() == v1::Fill::UNIFORM) {
    // Element i draws Mix(key + i): a counter, with no generator state to carry, so the
    // loop is a few integer operations an element (an mt19937_64 draw per element took
    // 15 ns of a core, most of SetProblem's time at 10^8 elements and more).
    const uint64_t key = Mix(seed);
    ParallelFor(chunks, 4, [&](int64_t begin, int64_t end) {
      const int64_t first = begin * kFillChunk, last = std::min(count, end * kFillChunk);
      WithElementType(dtype, [&](auto encode) {
        for (int64_t i = first; i < last; ++i) {
          const uint64_t r = Mix(key + static_cast<uint64_t>(i));
          double v = lo + (hi - lo) * (static_cast<double>(r >> 11) * 0x1.0p-53);
          if (integer) v = std::floor(v);
          encode(v, data + i * size);
        }
      });
    });
    return bytes;
  }
  // NORMAL, Box-Muller: two values per pair of uniforms, each chunk from its own generator.
  ParallelFor(chunks, 4, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      std::mt19937_64 gen(Mix(seed ^ Mix(static_cast<uint64_t>(c))));
      const int64_t first = c * kFillChunk;
      const int64_t last = std::min(count, first + kFillChunk);
      for (int64_t i = first; i < last;) {
        const double u1 = 1.0 - Unit(gen);  // (0, 1]: log is finite
        const double u2 = Unit(gen);
        const double r = std::sqrt(-2.0 * std::log(u1));
        const double z[2] = {r * std::cos(kTwoPi * u2), r * std::sin(kTwoPi * u2)};
        for (int k = 0; k < 2 && i < last; ++k, ++i) {
          EncodeElement(dtype, lo + hi * z[k], data + i * size);
        }
      }
    }
  });
  return bytes;
}

uint64_t DigestTerm(uint64_t word, uint64_t j, int lane) {
  return Mix(word ^ Mix(2 * j + static_cast<uint64_t>(lane)));
}

std::string FormatDigest(uint64_t sum0, uint64_t sum1, uint64_t bytes) {
  return absl::StrFormat("%016x%016x%016x", sum0, sum1, bytes);
}

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "OutputDigest reads words as the GPU does");

std::string OutputDigest(absl::string_view bytes) {
  const int64_t words = static_cast<int64_t>((bytes.size() + 7) / 8);
  std::mutex mu;
  uint64_t sums[2] = {0, 0};
  ParallelFor(words, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    uint64_t part[2] = {0, 0};
    for (int64_t j = begin; j < end; ++j) {
      // Little-endian, as the GPU reads it; the last word zero-padded.
      uint64_t w = 0;
      const size_t at = static_cast<size_t>(j) * 8;
      std::memcpy(&w, bytes.data() + at, std::min<size_t>(8, bytes.size() - at));
      for (int lane = 0; lane < 2; ++lane) {
        part[lane] += DigestTerm(w, static_cast<uint64_t>(j), lane);
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    sums[0] += part[0];
    sums[1] += part[1];
  });
  return FormatDigest(sums[0], sums[1], bytes.size());
}

uint32_t PoisonWord(DType dtype) { return dtype == DType::kI32 ? 0x80000000u : 0xFFFFFFFFu; }

std::string PoisonBytes(DType dtype, size_t bytes) {
  const uint32_t word = PoisonWord(dtype);
  std::string out(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) {
    out[i] = static_cast<char>((word >> (8 * (i % 4))) & 0xFF);  // little-endian, as the GPU
  }
  return out;
}

bool ElementPasses(double got, double want, double atol, double rtol) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (std::isinf(got) || std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

Comparison CompareBuffers(DType dtype, absl::string_view got, absl::string_view want, double atol,
                          double rtol) {
  const int64_t size = DTypeSize(dtype);
  const int64_t n = static_cast<int64_t>(std::min(got.size(), want.size())) / size;
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  constexpr int64_t kGrain = int64_t{1} << 18;  // below this, a thread costs more than it saves
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(hw, n / kGrain));
  std::vector<Comparison> partial(static_cast<size_t>(parts));
  const int64_t step = (n + parts - 1) / std::max<int64_t>(1, parts);
  ParallelFor(parts, 1, [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      Comparison& c = partial[static_cast<size_t>(p)];
      const int64_t begin = std::min(n, p * step), end = std::min(n, begin + step);
      for (int64_t i = begin; i < end; ++i) {
        const double g = DecodeElement(dtype, got.data() + i * size);
        const double w = DecodeElement(dtype, want.data() + i * size);
        const bool pass = ElementPasses(g, w, atol, rtol);
        double err = std::fabs(g - w);
        if (pass && !std::isfinite(err)) err = 0;  // NaN for NaN, inf for the same inf
        if (!pass && !std::isfinite(err)) err = std::numeric_limits<double>::infinity();
        c.max_abs_error = std::max(c.max_abs_error, err);
        if (!pass) {
          if (c.mismatches++ == 0) {
            c.first_index = i;
            c.first_got = g;
            c.first_want = w;
          }
        }
      }
      c.elements = end - begin;
    }
  });
  Comparison total;
  for (const Comparison& c : partial) {  // in index order: the first mismatch comes first
    total.elements += c.elements;
    total.max_abs_error = std::max(total.max_abs_error, c.max_abs_error);
    if (c.mismatches > 0 && total.first_index < 0) {
      total.first_index = c.first_index;
      total.first_got = c.first_got;
      total.first_want = c.first_want;
    }
    total.mismatches += c.mismatches;
  }
  return total;
}

std::string DescribeMismatch(absl::string_view buffer_name, const Comparison& c, double atol,
                             double rtol) {
  return absl::StrCat(
      buffer_name, "[", c.first_index, "]: got ", c.first_got, ", want ", c.first_want,
      " (allowed |got - want| <= ", atol + rtol * std::fabs(c.first_want), "); ", c.mismatches,
      " of ", c.elements, " elements differ, max |got - want| ", c.max_abs_error);
}

}  // namespace ktune
