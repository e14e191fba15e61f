// The OCP fp8 formats of <cuda_fp8.h> (__nv_fp8_e4m3, __nv_fp8_e5m2) to and from float, for
// the host side of fp8 buffers (fills, comparisons, references). Written by hand because C++17
// has no such types.
//
// Pure functions; thread-safe.
#ifndef KTUNE_SERVER_BASE_FP8_H_
#define KTUNE_SERVER_BASE_FP8_H_

#include <cstdint>

namespace ktune {

// From float, rounding to nearest, ties to even, and saturating: a value (or infinity)
// beyond the finite max gives the max of its sign (448 for e4m3, 57344 for e5m2), as
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) does. NaN gives NaN (0x7F / 0xFF: e4m3 has
// no infinity; for e5m2 these are NaNs too).
uint8_t FloatToFp8E4M3(float f);
uint8_t FloatToFp8E5M2(float f);
// Exact.
float Fp8E4M3ToFloat(uint8_t b);
float Fp8E5M2ToFloat(uint8_t b);

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_FP8_H_
