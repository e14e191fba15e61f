// Per-kernel resource use (registers, shared/constant/local memory, stack, spills) read
// from ptxas's verbose report, which NVRTC leaves in the program log when compiling with
// -Xptxas=-v.
//
// Parsing the log, rather than asking the driver (cuFuncGetAttribute) after loading the
// cubin, gives these figures at compile time on any host, GPU or not: occupancy can be
// estimated, spilling candidates reported and a hopeless candidate pruned before it ever
// reaches a device. The report's format is not a stable contract, so the parser is
// lenient: lines and fields it does not recognise are skipped, never an error.
//
// Pure functions; thread-safe.
#ifndef KTUNE_SERVER_COMPILE_PTXAS_INFO_H_
#define KTUNE_SERVER_COMPILE_PTXAS_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ktune {

// What ptxas reported for one entry function. Sizes are bytes; a figure ptxas did not
// report stays 0.
struct KernelResources {
  std::string mangled_name;  // e.g. "_Z3rmsI13__nv_bfloat16Li256ELi4EEvPKT_S3_PS1_if"
  std::string arch;          // e.g. "sm_90"
  int64_t registers = 0;     // per thread
  int64_t barriers = 0;      // named barriers used
  int64_t static_smem = 0;   // static shared memory per block ("smem")
  int64_t const_bytes = 0;   // user constant bank, "cmem[0]" (kernel parameters live there)
  int64_t local_bytes = 0;   // local memory per thread ("lmem")
  int64_t stack_frame = 0;   // per thread
  int64_t spill_stores = 0;  // per thread
  int64_t spill_loads = 0;   // per thread
  double ptxas_ms = 0;       // ptxas's own "Compile time", milliseconds
};

// Returns one record per "Compiling entry function" line in `log`, in order, each filled
// from the lines that follow it up to the next entry function. Lines it does not know
// (front-end warnings, "bytes gmem", device functions' reports) are ignored, so an
// unfamiliar log gives fewer figures but never fails a compile.
std::vector<KernelResources> ParsePtxasInfo(absl::string_view log);

}  // namespace ktune

#endif  // KTUNE_SERVER_COMPILE_PTXAS_INFO_H_
