#include "server/base/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ktune {
namespace {

// Every fp8 value, decoded, re-encodes to itself (NaNs to a NaN), and every code decodes as
// its format says.
TEST(Fp8Test, DecodeEncodeRoundTripsEveryCode) {
  for (int b = 0; b < 256; ++b) {
    const uint8_t code = static_cast<uint8_t>(b);
    const float e4 = Fp8E4M3ToFloat(code);
    if (std::isnan(e4)) {
      EXPECT_TRUE((code & 0x7F) == 0x7F) << b;
      EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(FloatToFp8E4M3(e4))));
    } else {
      EXPECT_EQ(FloatToFp8E4M3(e4), code) << b << " " << e4;
    }
    const float e5 = Fp8E5M2ToFloat(code);
    if (std::isnan(e5)) {
      EXPECT_TRUE(std::isnan(Fp8E5M2ToFloat(FloatToFp8E5M2(e5))));
    } else if (std::isinf(e5)) {
      EXPECT_EQ(code & 0x7F, 0x7C) << b;
    } else {
      EXPECT_EQ(FloatToFp8E5M2(e5), code) << b << " " << e5;
    }
  }
}

TEST(Fp8Test, KnownValues) {
  EXPECT_EQ(Fp8E4M3ToFloat(0x7E), 448.0f);   // e4m3's finite max
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(Fp8E4M3ToFloat(0x38), 1.0f);
  EXPECT_EQ(Fp8E5M2ToFloat(0x7B), 57344.0f);  // e5m2's finite max
  EXPECT_EQ(Fp8E5M2ToFloat(0x3C), 1.0f);
  EXPECT_EQ(Fp8E5M2ToFloat(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(FloatToFp8E4M3(-2.0f), 0xC0);
  EXPECT_EQ(FloatToFp8E4M3(0.0f), 0x00);
  EXPECT_EQ(FloatToFp8E4M3(-0.0f), 0x80);
}

TEST(Fp8Test, RoundsToNearestEven) {
  // e4m3 near 1: steps of 1/8. 1 + 1/16 ties to 1 (even), 1 + 3/16 ties to 1.25.
  EXPECT_EQ(Fp8E4M3ToFloat(FloatToFp8E4M3(1.0625f)), 1.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(FloatToFp8E4M3(1.1875f)), 1.25f);
  EXPECT_EQ(Fp8E4M3ToFloat(FloatToFp8E4M3(1.07f)), 1.125f);
  // e5m2 near 1: steps of 1/4. 1.125 ties to 1, 1.375 ties to 1.5.
  EXPECT_EQ(Fp8E5M2ToFloat(FloatToFp8E5M2(1.125f)), 1.0f);
  EXPECT_EQ(Fp8E5M2ToFloat(FloatToFp8E5M2(1.375f)), 1.5f);
  // A carry into the exponent: 1.9375 is between 1.875 and 2 (tie, to even 2).
  EXPECT_EQ(Fp8E4M3ToFloat(FloatToFp8E4M3(1.9375f)), 2.0f);
  // Subnormals round in steps of the smallest subnormal (2^-9 for e4m3).
  EXPECT_EQ(Fp8E4M3ToFloat(FloatToFp8E4M3(std::ldexp(1.5f, -9))), std::ldexp(2.0f, -9));
  EXPECT_EQ(Fp8E4M3ToFloat(FloatToFp8E4M3(std::ldexp(1.0f, -11))), 0.0f);  // below half: zero
}

TEST(Fp8Test, SaturatesToTheFiniteMax) {
  EXPECT_EQ(Fp8E4M3ToFloat(FloatToFp8E4M3(1000.0f)), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(FloatToFp8E4M3(-1e30f)), -448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(FloatToFp8E4M3(std::numeric_limits<float>::infinity())), 448.0f);
  EXPECT_EQ(Fp8E5M2ToFloat(FloatToFp8E5M2(1e6f)), 57344.0f);
  EXPECT_EQ(Fp8E5M2ToFloat(FloatToFp8E5M2(-std::numeric_limits<float>::infinity())), -57344.0f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(FloatToFp8E4M3(std::nanf("")))));
  EXPECT_TRUE(std::isnan(Fp8E5M2ToFloat(FloatToFp8E5M2(std::nanf("")))));
}

}  // namespace
}  // namespace ktune
