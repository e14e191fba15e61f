#include "server/base/fp8.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ktune {
namespace {

// An fp8 format: `man` mantissa bits, exponent bias, largest finite value and its bits.
struct Fp8Format {
  int man;
  int bias;
  double max;
  uint8_t max_bits;
  uint8_t nan;  // the positive NaN
};
constexpr Fp8Format kE4M3{3, 7, 448.0, 0x7E, 0x7F};
constexpr Fp8Format kE5M2{2, 15, 57344.0, 0x7B, 0x7F};

// Exact arithmetic in double: every step scales by powers of two, and std::nearbyint rounds
// to nearest even in the default rounding mode.
uint8_t FloatToFp8(float f, const Fp8Format& fmt) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return static_cast<uint8_t>(sign | fmt.nan);
  const double a = std::fabs(static_cast<double>(f));
  const int emin = 1 - fmt.bias;  // exponent of the smallest normal
  const uint8_t max_bits = fmt.max_bits;
  if (a >= fmt.max) return static_cast<uint8_t>(sign | max_bits);  // saturate (inf too)
  if (a == 0) return sign;
  const int e = std::max(std::ilogb(a), emin);
  const double quantum = std::ldexp(1.0, e - fmt.man);
  const double q = std::nearbyint(a / quantum);  // 0 .. 2^(man+1)
  const double v = q * quantum;
  if (v >= fmt.max) return static_cast<uint8_t>(sign | max_bits);
  if (v < std::ldexp(1.0, emin)) {  // subnormal (or zero): the mantissa is q
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));
  }
  const int ev = std::ilogb(v);  // may be e + 1 after a carry
  const int mant = static_cast<int>(std::ldexp(v, fmt.man - ev)) - (1 << fmt.man);
  return static_cast<uint8_t>(sign | ((ev + fmt.bias) << fmt.man) | mant);
}

float Fp8ToFloat(uint8_t b, const Fp8Format& fmt, bool has_inf) {
  const bool neg = (b & 0x80) != 0;
  const int exp_bits = 7 - fmt.man;
  const int e = (b >> fmt.man) & ((1 << exp_bits) - 1);
  const int m = b & ((1 << fmt.man) - 1);
  double v;
  if (has_inf && e == (1 << exp_bits) - 1) {
    v = m == 0 ? std::numeric_limits<double>::infinity()
               : std::numeric_limits<double>::quiet_NaN();
  } else if (!has_inf && (b & 0x7F) == 0x7F) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - fmt.bias - fmt.man);
  } else {
    v = std::ldexp(static_cast<double>(m + (1 << fmt.man)), e - fmt.bias - fmt.man);
  }
  return static_cast<float>(neg ? -v : v);
}

}  // namespace

uint8_t FloatToFp8E4M3(float f) { return FloatToFp8(f, kE4M3); }
uint8_t FloatToFp8E5M2(float f) { return FloatToFp8(f, kE5M2); }
float Fp8E4M3ToFloat(uint8_t b) { return Fp8ToFloat(b, kE4M3, /*has_inf=*/false); }
float Fp8E5M2ToFloat(uint8_t b) { return Fp8ToFloat(b, kE5M2, /*has_inf=*/true); }

}  // namespace ktune
