// The host side of a problem's buffers: fresh random inputs generated per Fill from a seed
// and encoded to the buffer's element type, the poison written to outputs before every run,
// and the check of a candidate's outputs against the reference's.
//
// Needs no driver, so CI tests all of it. Pure functions, thread-safe; GenerateFill and
// CompareBuffers spread large buffers over std::thread::hardware_concurrency() threads of
// their own.
#ifndef KTUNE_SERVER_WORKER_HOST_BUFFERS_H_
#define KTUNE_SERVER_WORKER_HOST_BUFFERS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ktune/v1/manifest.pb.h"
#include "server/base/dtype.h"

namespace ktune {

// IEEE binary16 and bfloat16 from float, rounding to nearest, ties to even (as the CUDA
// intrinsics __float2half_rn and __float2bfloat16_rn do). Overflow gives infinity; a NaN
// stays a (quiet) NaN of the same sign. Written by hand because C++17 has neither type.
uint16_t FloatToHalf(float f);
uint16_t FloatToBf16(float f);
// Exact.
float HalfToFloat(uint16_t h);
float Bf16ToFloat(uint16_t b);

// Writes `value` as one element of `dtype` (DTypeSize(dtype) bytes at `out`). Float types
// round through float to nearest even (fp8 saturating to its finite max: server/base/fp8.h);
// i32 rounds to nearest and saturates, NaN giving 0.
void EncodeElement(DType dtype, double value, void* out);
// The element of `dtype` at `in`, exactly, as a double.
double DecodeElement(DType dtype, const void* in);

// The seed of the buffer that is argument `arg_index` of a problem seeded with
// `problem_seed`: each buffer gets its own stream, and a restarted worker regenerates the
// same bytes.
inline uint64_t BufferSeed(uint64_t problem_seed, int arg_index) {
  return problem_seed + static_cast<uint64_t>(arg_index);
}

// kInvalidArgument, saying why, for a fill GenerateFill refuses (see below).
absl::Status ValidateFill(const v1::Fill& fill);

// `count` elements of `dtype` filled per `fill` (UNIFORM in [lo, hi), NORMAL with mean lo
// and standard deviation hi, CONSTANT lo, ZERO), a pure function of its arguments: the same
// bytes on every run and thread count (NORMAL goes through libm's log/sin/cos, so two hosts
// with different C libraries may differ in the last bit). For i32, UNIFORM draws floor(lo + (hi -
// lo) * u) and NORMAL rounds. kInvalidArgument for KIND_UNSPECIFIED, UNIFORM without lo < hi,
// NORMAL with a negative deviation, or a negative count. The GPU makes the same bytes for
// every kind but NORMAL (device_buffers.h).
absl::StatusOr<std::string> GenerateFill(DType dtype, int64_t count, const v1::Fill& fill,
                                         uint64_t seed);

// A digest of a buffer's bytes, what a problem's reference outputs are known by: two 64-bit
// sums over the buffer's 8-byte words (little-endian, the last one zero-padded), word j adding
// DigestTerm(w, j, 0) to the first and DigestTerm(w, j, 1) to the second, written as 48 hex
// digits with the byte count. Sums, so any split of the words over threads or GPU blocks
// gives the same value: the GPU computes it where the outputs are (device_buffers.h) instead
// of reading them back (SHA-256 on the host was 30 ms of a core per 64 MiB, plus the copy).
// Not a cryptographic hash: it tells a worker that reproduces a reference's outputs from
// one that does not.
std::string OutputDigest(absl::string_view bytes);
// One word's term: SplitMix64's finalizer of w xor the finalizer of (j, lane).
uint64_t DigestTerm(uint64_t word, uint64_t j, int lane);
// The digest's text from its sums and the byte count.
std::string FormatDigest(uint64_t sum0, uint64_t sum1, uint64_t bytes);

// Outputs are filled with this 32-bit pattern (cuMemsetD32) before every run, so an element
// a kernel never writes cannot pass: all ones for the float types (NaN in f32, two NaNs in
// f16/bf16, four in f8e4m3/f8e5m2), INT32_MIN for i32. The buffer must be allocated in whole 32-bit words.
uint32_t PoisonWord(DType dtype);
// `bytes` bytes of that pattern, for the host side and tests.
std::string PoisonBytes(DType dtype, size_t bytes);

// Whether a candidate element passes: |got - want| <= atol + rtol * |want|, and a NaN or
// infinity passes only where the reference has the same value (NaN for NaN, the same
// signed infinity).
bool ElementPasses(double got, double want, double atol, double rtol);

struct Comparison {
  int64_t elements = 0;
  int64_t mismatches = 0;
  // The largest |got - want|; +infinity when a non-finite value did not match.
  double max_abs_error = 0;
  // The first (lowest-index) mismatch; -1 when there is none.
  int64_t first_index = -1;
  double first_got = 0;
  double first_want = 0;
};

// Compares two buffers of `dtype` element by element with ElementPasses. A trailing
// partial element is ignored. REQUIRES: got.size() == want.size().
Comparison CompareBuffers(DType dtype, absl::string_view got, absl::string_view want, double atol,
                          double rtol);

// "out[17]: got nan, want 1.75 (allowed |got - want| <= 0.0275); 4096 of 4096 elements
// differ, max |got - want| inf". REQUIRES: c.mismatches > 0.
std::string DescribeMismatch(absl::string_view buffer_name, const Comparison& c, double atol,
                             double rtol);

}  // namespace ktune

#endif  // KTUNE_SERVER_WORKER_HOST_BUFFERS_H_
