// The NVRTC implementation of Compiler: the only code in ktune that includes <nvrtc.h>.
//
// Thread-safe: each Compile creates its own nvrtcProgram.
#ifndef KTUNE_SERVER_COMPILE_NVRTC_COMPILER_H_
#define KTUNE_SERVER_COMPILE_NVRTC_COMPILER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/compile/compiler.h"

namespace ktune {

struct NvrtcOptions {
  // Folders for #include "..." beside the CUDA toolkit's (e.g. kernel_templates/include).
  std::vector<std::string> include_dirs;
  // The toolkit's include folder (cuda_fp16.h, cuda_bf16.h). Empty: $CUDA_HOME/include,
  // $CUDA_PATH/include, then /usr/local/cuda/include, the first holding cuda_fp16.h.
  std::string cuda_include_dir;
  // Options added to every compile, after ktune's own (-std=c++17, -Xptxas=-v, -minimal).
  std::vector<std::string> extra_options;
  // NVRTC's automatic precompiled headers (--pch) kept in this existing folder; empty: off.
  // The machine code is the same either way (compared kernel by kernel on the GPU host), so
  // it is not part of Identity(): cubins cached with it and without it serve each other.
  std::string pch_dir;
};

// kFailedPrecondition if no CUDA include folder is found; the message says where it looked.
absl::StatusOr<std::unique_ptr<Compiler>> NewNvrtcCompiler(const NvrtcOptions& options);

// "13.0", from nvrtcVersion.
std::string NvrtcVersionString();

}  // namespace ktune

#endif  // KTUNE_SERVER_COMPILE_NVRTC_COMPILER_H_
