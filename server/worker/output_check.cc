#include "server/worker/output_check.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "server/base/status_macros.h"
#include "server/worker/kernel_dtype.h"
#include "server/worker/output_check_ptx.h"

namespace ktune {
namespace {

// output_check.cu's CheckResult.
struct CheckResult {
  unsigned long long mismatches;
  unsigned long long max_abs_bits;
  unsigned long long first_index;
};

}  // namespace

absl::StatusOr<OutputCheck> OutputCheck::Load(Driver* driver, int sm_count) {
  OutputCheck c;
  c.driver_ = driver;
  c.blocks_ = std::max(1, sm_count) * 8;
  KTUNE_ASSIGN_OR_RETURN(c.module_, Module::Load(driver, kOutputCheckPtx));
  KTUNE_ASSIGN_OR_RETURN(c.function_, c.module_.Function("ktune_check_outputs"));
  KTUNE_ASSIGN_OR_RETURN(c.result_, DeviceMemory::Allocate(driver, sizeof(CheckResult)));
  // The host's own decoding of every fp8 byte, so both sides read NaNs and saturation alike.
  std::vector<double> tables(512);
  for (int v = 0; v < 256; ++v) {
    const uint8_t byte = static_cast<uint8_t>(v);
    tables[v] = DecodeElement(DType::kF8E4M3, &byte);
    tables[256 + v] = DecodeElement(DType::kF8E5M2, &byte);
  }
  KTUNE_ASSIGN_OR_RETURN(c.fp8_tables_,
                         DeviceMemory::Allocate(driver, tables.size() * sizeof(double)));
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, MemcpyHtoD, c.fp8_tables_.ptr(), tables.data(),
                                 tables.size() * sizeof(double)));
  return c;
}

absl::StatusOr<Comparison> OutputCheck::Compare(DType dtype, CUdeviceptr got, CUdeviceptr want,
                                                size_t count, double atol, double rtol,
                                                CUstream stream) {
  CUdeviceptr result = result_.ptr();
  // {0 mismatches, max 0, first index all ones}.
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemsetD32Async, result, 0u, 4, stream));
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemsetD32Async, result + 16, 0xFFFFFFFFu, 2, stream));
  unsigned long long n = count;
  int type = KernelTypeCode(dtype);
  CUdeviceptr table = fp8_tables_.ptr() + (dtype == DType::kF8E5M2 ? 256 * sizeof(double) : 0);
  void* params[] = {&got, &want, &n, &type, &atol, &rtol, &table, &result};
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, LaunchKernel, function_, static_cast<unsigned>(blocks_),
                                 1, 1, 256, 1, 1, 0, stream, params, nullptr));
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, StreamSynchronize, stream));
  CheckResult r;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemcpyDtoH, &r, result, sizeof(r)));
  Comparison c;
  c.elements = static_cast<int64_t>(count);
  c.mismatches = static_cast<int64_t>(r.mismatches);
  std::memcpy(&c.max_abs_error, &r.max_abs_bits, sizeof(double));
  if (c.mismatches > 0) {
    const size_t size = static_cast<size_t>(DTypeSize(dtype));
    const size_t at = r.first_index * size;
    unsigned char g[8] = {}, w[8] = {};
    KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemcpyDtoH, g, got + at, size));
    KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver_, MemcpyDtoH, w, want + at, size));
    c.first_index = static_cast<int64_t>(r.first_index);
    c.first_got = DecodeElement(dtype, g);
    c.first_want = DecodeElement(dtype, w);
  }
  return c;
}

}  // namespace ktune
