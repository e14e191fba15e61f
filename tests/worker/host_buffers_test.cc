#include "server/worker/host_buffers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/testing/fills.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::MakeFill;
using ::ktune::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

uint32_t Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}

float FromBits(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

std::vector<double> Decode(DType dtype, const std::string& bytes) {
  std::vector<double> out;
  const int64_t size = DTypeSize(dtype);
  for (size_t i = 0; i + size <= bytes.size(); i += size) {
    out.push_back(DecodeElement(dtype, bytes.data() + i));
  }
  return out;
}

// ---- Conversions ---------------------------------------------------------------------

TEST(HalfTest, RoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);  // largest finite
  // Ties: 1 + 2^-11 lies halfway between 1 (even) and 1 + 2^-10 (odd).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // 1 + 3 * 2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  // Just above a tie rounds up.
  EXPECT_EQ(FloatToHalf(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3C01);
  // Overflow: 65520 is the tie between 65504 and "65536", which rounds to infinity.
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-1e10f), 0xFC00);
}

TEST(HalfTest, Subnormals) {
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie with 0: even
  EXPECT_EQ(FloatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(1.5f * std::ldexp(1.0f, -24)), 0x0002);  // tie 1|2: even
  EXPECT_EQ(FloatToHalf(2.5f * std::ldexp(1.0f, -24)), 0x0002);  // tie 2|3: even
  EXPECT_EQ(FloatToHalf(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1023.0f, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  // Rounding up from the largest subnormal reaches the smallest normal.
  EXPECT_EQ(FloatToHalf(std::ldexp(1023.75f, -24)), 0x0400);
  EXPECT_EQ(FloatToHalf(1e-30f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_FLOAT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_FLOAT_EQ(HalfToFloat(0x83FF), -std::ldexp(1023.0f, -24));
}

TEST(HalfTest, InfinityAndNan) {
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xFC00);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  // A signalling NaN whose payload lives only in the low bits must stay a NaN.
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(FromBits(0x7F800001u)))));
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7C00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
}

TEST(HalfTest, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
}

#ifdef __FLT16_MAX__
// GCC's _Float16 rounds to nearest even (libgcc's __truncsfhf2): an independent oracle.
TEST(HalfTest, MatchesCompilerFloat16) {
  auto check = [](uint32_t bits) {
    const float f = FromBits(bits);
    const _Float16 want = static_cast<_Float16>(f);
    uint16_t want_bits;
    std::memcpy(&want_bits, &want, 2);
    const uint16_t got = FloatToHalf(f);
    if (std::isnan(f)) return (got & 0x7C00) == 0x7C00 && (got & 0x3FF) != 0;
    return got == want_bits;
  };
  // A spread of every exponent and mantissa pattern, plus every tie of the half grid.
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 4099) {
    ASSERT_TRUE(check(static_cast<uint32_t>(bits))) << std::hex << bits;
  }
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const uint32_t mid = Bits(HalfToFloat(static_cast<uint16_t>(h))) + 0x1000;  // normal ties
    ASSERT_TRUE(check(mid)) << std::hex << h;
    ASSERT_TRUE(check(mid | 0x80000000u)) << std::hex << h;
  }
}
#endif

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(-1.0f), 0xBF80);
  // bf16 keeps 7 mantissa bits: 1 + 2^-8 is a tie between 1 (even) and 1 + 2^-7.
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // 1 + 3 * 2^-8: a tie between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(FloatToBf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3F81);
  EXPECT_EQ(FloatToBf16(FromBits(0x3F80FFFFu)), 0x3F81);
  // Largest float rounds past bf16's largest finite (0x7F7F) to infinity.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(FloatToBf16(FromBits(0x7F7F7FFFu)), 0x7F7F);
}

TEST(Bf16Test, SubnormalsInfinityNan) {
  EXPECT_EQ(FloatToBf16(FromBits(0x00000001u)), 0x0000);
  EXPECT_EQ(FloatToBf16(FromBits(0x00008000u)), 0x0000);  // tie: even
  EXPECT_EQ(FloatToBf16(FromBits(0x00018000u)), 0x0002);  // tie: even
  EXPECT_EQ(FloatToBf16(FromBits(0x00010000u)), 0x0001);  // exact subnormal
  EXPECT_EQ(FloatToBf16(FromBits(0x807FFFFFu)), 0x8080);  // rounds up into the normals
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload is only in the low 16 bits must not become infinity.
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(FromBits(0x7F800001u)))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(FromBits(0xFF800001u)))));
}

TEST(Bf16Test, EveryBf16RoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBf16(f), b) << std::hex << b;
  }
}

TEST(ElementTest, EncodeDecode) {
  char buf[4];
  EncodeElement(DType::kF32, 0.1, buf);
  EXPECT_EQ(DecodeElement(DType::kF32, buf), static_cast<double>(0.1f));
  EncodeElement(DType::kBF16, 3.0, buf);
  EXPECT_EQ(DecodeElement(DType::kBF16, buf), 3.0);
  EncodeElement(DType::kF16, -0.5, buf);
  EXPECT_EQ(DecodeElement(DType::kF16, buf), -0.5);
  EncodeElement(DType::kI32, 2.5, buf);  // nearest, ties to even
  EXPECT_EQ(DecodeElement(DType::kI32, buf), 2.0);
  EncodeElement(DType::kI32, -7.6, buf);
  EXPECT_EQ(DecodeElement(DType::kI32, buf), -8.0);
  EncodeElement(DType::kI32, 1e12, buf);
  EXPECT_EQ(DecodeElement(DType::kI32, buf), 2147483647.0);
}

// ---- Fills ---------------------------------------------------------------------------

TEST(FillTest, DeterministicPerSeedAndDifferentAcrossSeeds) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
    SCOPED_TRACE(DTypeName(t));
    for (const v1::Fill& fill :
         {MakeFill(v1::Fill::UNIFORM, -1, 1), MakeFill(v1::Fill::NORMAL, 0, 10)}) {
      // Big enough for several chunks on several threads.
      ASSERT_OK_AND_ASSIGN(std::string a, GenerateFill(t, 300001, fill, 42));
      ASSERT_OK_AND_ASSIGN(std::string b, GenerateFill(t, 300001, fill, 42));
      ASSERT_OK_AND_ASSIGN(std::string c, GenerateFill(t, 300001, fill, 43));
      EXPECT_EQ(a.size(), 300001u * DTypeSize(t));
      EXPECT_EQ(a, b);
      EXPECT_NE(a, c);
      // A prefix is the same whatever the count: chunks do not depend on the length.
      ASSERT_OK_AND_ASSIGN(std::string prefix, GenerateFill(t, 1000, fill, 42));
      EXPECT_EQ(prefix, a.substr(0, prefix.size()));
    }
  }
}

TEST(Fp8BufferTest, FillsAreRoundedToTheFormat) {
  for (DType t : {DType::kF8E4M3, DType::kF8E5M2}) {
    SCOPED_TRACE(DTypeName(t));
    EXPECT_EQ(DTypeSize(t), 1);
    ASSERT_OK_AND_ASSIGN(std::string bytes,
                         GenerateFill(t, 10000, MakeFill(v1::Fill::UNIFORM, -1, 1), 3));
    ASSERT_EQ(bytes.size(), 10000u);
    std::vector<double> v = Decode(t, bytes);
    int64_t zeros = 0, negative = 0;
    for (double x : v) {
      ASSERT_GE(x, -1.0);
      ASSERT_LE(x, 1.0);
      zeros += x == 0;
      negative += x < 0;
    }
    EXPECT_LT(zeros, 200);
    EXPECT_NEAR(static_cast<double>(negative) / v.size(), 0.5, 0.03);
    // NORMAL with a wide deviation saturates instead of making infinities or NaNs.
    ASSERT_OK_AND_ASSIGN(bytes, GenerateFill(t, 10000, MakeFill(v1::Fill::NORMAL, 0, 1e5), 4));
    for (double x : Decode(t, bytes)) ASSERT_TRUE(std::isfinite(x));
    // Each element is the encoding of its own decoding: values of the format.
    for (size_t i = 0; i < bytes.size(); ++i) {
      char again;
      EncodeElement(t, DecodeElement(t, &bytes[i]), &again);
      ASSERT_EQ(again, bytes[i]) << i;
    }
  }
}

TEST(Fp8BufferTest, CompareAndPoison) {
  const std::string want = {0x38, 0x40};  // e4m3: 1, 2
  const std::string got = {0x39, 0x40};   // 1.125, 2
  Comparison c = CompareBuffers(DType::kF8E4M3, got, want, 0.1, 0);
  EXPECT_EQ(c.elements, 2);
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_EQ(c.first_index, 0);
  EXPECT_EQ(CompareBuffers(DType::kF8E4M3, got, want, 0.125, 0).mismatches, 0);
  // The poison is NaN in both formats, so an unwritten element never passes.
  const std::string poison = PoisonBytes(DType::kF8E5M2, 4);
  EXPECT_EQ(CompareBuffers(DType::kF8E5M2, poison, std::string(4, 0x3C), 1e9, 1e9).mismatches, 4);
  EXPECT_EQ(CompareBuffers(DType::kF8E4M3, poison, want + want, 1e9, 1e9).mismatches, 4);
}

// The digest of a problem's outputs: a pure function of the bytes, however the words are
// split over threads, that sees one changed byte anywhere, a swap of two words, and the
// length; written as the GPU writes it (device_buffers_gpu_test checks the two agree).
TEST(OutputDigestTest, OneValuePerContents) {
  std::string bytes((size_t{16} << 20) * 2 + 3, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  const std::string d = OutputDigest(bytes);
  EXPECT_THAT(d, MatchesRegex("[0-9a-f]{48}"));
  EXPECT_EQ(OutputDigest(bytes), d);
  for (size_t at : {size_t{0}, (size_t{16} << 20) - 1, size_t{16} << 20, bytes.size() - 1}) {
    std::string changed = bytes;
    changed[at] ^= 1;
    EXPECT_NE(OutputDigest(changed), d) << at;
  }
  std::string swapped = bytes;
  std::swap_ranges(swapped.begin(), swapped.begin() + 8, swapped.begin() + 8);
  EXPECT_NE(OutputDigest(swapped), d);
  EXPECT_NE(OutputDigest(bytes.substr(0, bytes.size() - 1)), d);
  EXPECT_NE(OutputDigest(""), OutputDigest(std::string(1, '\0')));
}

// The rule written out for nine bytes: two words, the second zero-padded, little-endian.
TEST(OutputDigestTest, SumsOfWordTerms) {
  const std::string bytes = "\x01\x02\x03\x04\x05\x06\x07\x08\x09";
  const uint64_t w0 = 0x0807060504030201ull, w1 = 0x09;
  EXPECT_EQ(OutputDigest(bytes),
            FormatDigest(DigestTerm(w0, 0, 0) + DigestTerm(w1, 1, 0),
                         DigestTerm(w0, 0, 1) + DigestTerm(w1, 1, 1), 9));
  EXPECT_EQ(OutputDigest(""), std::string(48, '0'));
  EXPECT_EQ(FormatDigest(1, 2, 3), "000000000000000100000000000000020000000000000003");
}

TEST(FillTest, BufferSeedsDiffer) {
  EXPECT_NE(BufferSeed(7, 0), BufferSeed(7, 1));
  EXPECT_EQ(BufferSeed(7, 2), BufferSeed(7, 2));
}

TEST(FillTest, UniformStaysInRangeAndIsNeverAllZero) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(t));
    ASSERT_OK_AND_ASSIGN(std::string bytes,
                         GenerateFill(t, 100000, MakeFill(v1::Fill::UNIFORM, -1, 1), 1));
    const std::vector<double> v = Decode(t, bytes);
    double sum = 0;
    int64_t zeros = 0, negative = 0;
    for (double x : v) {
      ASSERT_GE(x, -1.0);
      ASSERT_LE(x, 1.0);  // rounding to bf16/f16 may reach hi
      sum += x;
      zeros += x == 0;
      negative += x < 0;
    }
    EXPECT_LT(zeros, 1000);
    EXPECT_NEAR(sum / v.size(), 0.0, 0.02);
    EXPECT_NEAR(static_cast<double>(negative) / v.size(), 0.5, 0.02);
  }
  // Even a narrow range far from zero.
  ASSERT_OK_AND_ASSIGN(std::string bytes,
                       GenerateFill(DType::kBF16, 64, MakeFill(v1::Fill::UNIFORM, 0.5, 0.6), 9));
  for (double x : Decode(DType::kBF16, bytes)) EXPECT_NE(x, 0.0);
}

TEST(FillTest, NormalHasItsMeanAndDeviation) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(t));
    ASSERT_OK_AND_ASSIGN(std::string bytes,
                         GenerateFill(t, 200000, MakeFill(v1::Fill::NORMAL, 3, 2), 5));
    const std::vector<double> v = Decode(t, bytes);
    double sum = 0, sq = 0;
    int64_t zeros = 0;
    for (double x : v) {
      ASSERT_TRUE(std::isfinite(x));
      sum += x;
      sq += x * x;
      zeros += x == 0;
    }
    const double mean = sum / v.size();
    EXPECT_NEAR(mean, 3.0, 0.03);
    EXPECT_NEAR(std::sqrt(sq / v.size() - mean * mean), 2.0, 0.03);
    EXPECT_LT(zeros, 100);
  }
}

TEST(FillTest, IntegerFills) {
  ASSERT_OK_AND_ASSIGN(std::string bytes,
                       GenerateFill(DType::kI32, 10000, MakeFill(v1::Fill::UNIFORM, -3, 3), 2));
  std::vector<int> seen(6, 0);
  for (double x : Decode(DType::kI32, bytes)) {
    ASSERT_EQ(x, std::floor(x));
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 3);  // hi is exclusive
    ++seen[static_cast<size_t>(x + 3)];
  }
  for (int n : seen) EXPECT_GT(n, 1300);
}

TEST(FillTest, ConstantAndZero) {
  ASSERT_OK_AND_ASSIGN(std::string c,
                       GenerateFill(DType::kBF16, 5, MakeFill(v1::Fill::CONSTANT, 1.5), 0));
  EXPECT_EQ(Decode(DType::kBF16, c), std::vector<double>(5, 1.5));
  ASSERT_OK_AND_ASSIGN(std::string z, GenerateFill(DType::kF32, 5, MakeFill(v1::Fill::ZERO), 0));
  EXPECT_EQ(z, std::string(20, '\0'));
  ASSERT_OK_AND_ASSIGN(std::string empty,
                       GenerateFill(DType::kF32, 0, MakeFill(v1::Fill::UNIFORM, 0, 1), 0));
  EXPECT_TRUE(empty.empty());
}

TEST(FillTest, RejectsBadFills) {
  EXPECT_THAT(GenerateFill(DType::kF32, 4, MakeFill(v1::Fill::KIND_UNSPECIFIED), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unspecified")));
  EXPECT_THAT(GenerateFill(DType::kF32, 4, MakeFill(v1::Fill::UNIFORM, 1, 1), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lo < hi")));
  EXPECT_THAT(GenerateFill(DType::kF32, 4, MakeFill(v1::Fill::NORMAL, 0, -1), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("deviation")));
  EXPECT_THAT(GenerateFill(DType::kF32, -1, MakeFill(v1::Fill::ZERO), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
}

// ---- Poison and comparison ----------------------------------------------------------

TEST(PoisonTest, PoisonNeverPasses) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
    SCOPED_TRACE(DTypeName(t));
    ASSERT_OK_AND_ASSIGN(std::string want,
                         GenerateFill(t, 4096, MakeFill(v1::Fill::UNIFORM, -100, 100), 3));
    const std::string poison = PoisonBytes(t, want.size());
    const Comparison c = CompareBuffers(t, poison, want, 1e-2, 1e-2);
    EXPECT_EQ(c.elements, 4096);
    EXPECT_EQ(c.mismatches, 4096);
    EXPECT_EQ(c.first_index, 0);
    if (t != DType::kI32) {
      EXPECT_TRUE(std::isnan(c.first_got));
      EXPECT_TRUE(std::isinf(c.max_abs_error));
    } else {
      EXPECT_EQ(c.first_got, -2147483648.0);
    }
  }
  EXPECT_EQ(PoisonWord(DType::kF32), 0xFFFFFFFFu);
  EXPECT_EQ(PoisonBytes(DType::kI32, 4), std::string("\0\0\0\x80", 4));
}

TEST(CompareTest, ToleranceEdges) {
  // |got - want| <= atol + rtol * |want|, inclusive.
  EXPECT_TRUE(ElementPasses(1.5, 1.0, 0.25, 0.25));
  EXPECT_FALSE(ElementPasses(1.5 + 1e-9, 1.0, 0.25, 0.25));
  EXPECT_TRUE(ElementPasses(-2.0, -2.5, 0.0, 0.2));  // rtol scales with |want|
  EXPECT_FALSE(ElementPasses(-2.0, -2.6, 0.0, 0.2));
  EXPECT_TRUE(ElementPasses(0.0, 0.0, 0.0, 0.0));
  EXPECT_FALSE(ElementPasses(1e-30, 0.0, 0.0, 0.5));  // zero tolerance at zero: exact only
}

TEST(CompareTest, NanAndInfinity) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(ElementPasses(nan, 1.0, 1e9, 1e9));  // NaN never passes for a number
  EXPECT_FALSE(ElementPasses(1.0, nan, 1e9, 1e9));
  EXPECT_TRUE(ElementPasses(nan, nan, 0, 0));
  EXPECT_TRUE(ElementPasses(inf, inf, 0, 0));
  EXPECT_FALSE(ElementPasses(-inf, inf, 1e9, 1e9));
  EXPECT_FALSE(ElementPasses(inf, 1e300, 1e9, 1e9));
  EXPECT_FALSE(ElementPasses(1e300, inf, 1e9, 1e9));
  EXPECT_FALSE(ElementPasses(nan, inf, 1e9, 1e9));
}

TEST(CompareTest, FirstMismatchCountsAndMaxErrorAcrossThreads) {
  const int64_t n = int64_t{3} << 20;  // several comparison chunks
  ASSERT_OK_AND_ASSIGN(std::string want,
                       GenerateFill(DType::kF32, n, MakeFill(v1::Fill::UNIFORM, 1, 2), 11));
  std::string got = want;
  auto set = [&](int64_t i, float v) { std::memcpy(got.data() + i * 4, &v, 4); };
  auto at = [&](int64_t i) {
    float v;
    std::memcpy(&v, want.data() + i * 4, 4);
    return v;
  };
  // Within tolerance everywhere first.
  set(5, at(5) + 0.001f);
  Comparison ok = CompareBuffers(DType::kF32, got, want, 0.01, 0);
  EXPECT_EQ(ok.mismatches, 0);
  EXPECT_EQ(ok.first_index, -1);
  EXPECT_NEAR(ok.max_abs_error, 0.001, 1e-6);
  EXPECT_EQ(ok.elements, n);
  // Mismatches in the last chunk and in the middle: the first reported is the lowest index.
  set(n - 1, at(n - 1) + 5);
  set(n / 2 + 7, at(n / 2 + 7) - 0.5f);
  Comparison bad = CompareBuffers(DType::kF32, got, want, 0.01, 0);
  EXPECT_EQ(bad.mismatches, 2);
  EXPECT_EQ(bad.first_index, n / 2 + 7);
  EXPECT_FLOAT_EQ(static_cast<float>(bad.first_got), at(n / 2 + 7) - 0.5f);
  EXPECT_FLOAT_EQ(static_cast<float>(bad.first_want), at(n / 2 + 7));
  EXPECT_NEAR(bad.max_abs_error, 5.0, 1e-5);
  // One NaN makes the error infinite.
  set(3, std::numeric_limits<float>::quiet_NaN());
  Comparison nan = CompareBuffers(DType::kF32, got, want, 0.01, 0);
  EXPECT_EQ(nan.mismatches, 3);
  EXPECT_EQ(nan.first_index, 3);
  EXPECT_TRUE(std::isinf(nan.max_abs_error));
}

TEST(CompareTest, Bf16WithinItsTolerance) {
  // bf16 outputs of 2 * x computed in float and rounded pass bf16's usual 1e-2.
  ASSERT_OK_AND_ASSIGN(std::string x,
                       GenerateFill(DType::kBF16, 1000, MakeFill(v1::Fill::UNIFORM, -1, 1), 4));
  std::string want(x.size(), '\0'), got(x.size(), '\0');
  for (size_t i = 0; i < 1000; ++i) {
    const double v = DecodeElement(DType::kBF16, x.data() + 2 * i);
    EncodeElement(DType::kBF16, 2 * v, want.data() + 2 * i);
    EncodeElement(DType::kBF16, 2 * v * (1 + 1e-3), got.data() + 2 * i);
  }
  EXPECT_EQ(CompareBuffers(DType::kBF16, got, want, 1e-2, 1e-2).mismatches, 0);
  EXPECT_GT(CompareBuffers(DType::kBF16, x, want, 1e-2, 1e-2).mismatches, 900);
}

TEST(CompareTest, DescribesTheFirstMismatch) {
  Comparison c;
  c.elements = 4096;
  c.mismatches = 10;
  c.first_index = 17;
  c.first_got = 3.5;
  c.first_want = 1.75;
  c.max_abs_error = 4;
  EXPECT_EQ(DescribeMismatch("out", c, 0.01, 0.01),
            "out[17]: got 3.5, want 1.75 (allowed |got - want| <= 0.0275); 10 of 4096 "
            "elements differ, max |got - want| 4");
}

}  // namespace
}  // namespace ktune
