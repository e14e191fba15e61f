#include "server/compile/nvrtc_compiler.h"

#include <dlfcn.h>
#include <nvrtc.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/file.h"
#include "server/base/status_macros.h"
#include "server/compile/cache_key.h"

namespace ktune {
namespace {

// Every NVRTC call goes through here, so an error names the call and NVRTC's reason.
absl::Status NvrtcCheck(nvrtcResult r, const char* call) {
  if (r == NVRTC_SUCCESS) return absl::OkStatus();
  std::string msg = absl::StrCat(call, ": ", nvrtcGetErrorString(r));
  if (r == NVRTC_ERROR_OUT_OF_MEMORY) return absl::ResourceExhaustedError(msg);
  if (r == NVRTC_ERROR_INVALID_OPTION || r == NVRTC_ERROR_INVALID_INPUT ||
      r == NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID) {
    return absl::InvalidArgumentError(msg);
  }
  return absl::InternalError(msg);
}
#define KTUNE_NVRTC(call) NvrtcCheck((call), #call)

// Owns one nvrtcProgram (jitify's ScopedNvrtcProgramDestroyer).
class ProgramHandle {
 public:
  ProgramHandle() = default;
  ~ProgramHandle() {
    if (prog_ != nullptr) nvrtcDestroyProgram(&prog_);
  }
  ProgramHandle(const ProgramHandle&) = delete;
  ProgramHandle& operator=(const ProgramHandle&) = delete;
  nvrtcProgram* out() { return &prog_; }
  nvrtcProgram get() const { return prog_; }

 private:
  nvrtcProgram prog_ = nullptr;
};

std::string FindCudaInclude(const std::string& configured, std::vector<std::string>* tried) {
  std::vector<std::string> candidates;
  if (!configured.empty()) {
    candidates.push_back(configured);
  } else {
    for (const char* env : {"CUDA_HOME", "CUDA_PATH"}) {
      if (const char* v = std::getenv(env); v != nullptr && *v != '\0') {
        candidates.push_back(absl::StrCat(v, "/include"));
      }
    }
    candidates.push_back("/usr/local/cuda/include");
  }
  for (const std::string& c : candidates) {
    tried->push_back(c);
    if (::access(absl::StrCat(c, "/cuda_fp16.h").c_str(), R_OK) == 0) return c;
  }
  return "";
}

// The name of the file NVRTC was loaded from, links resolved ("libnvrtc.so.13.0.88"): it
// carries the build, which nvrtcVersion (major.minor) does not.
std::string NvrtcLibraryName() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) == 0 || info.dli_fname == nullptr) {
    return "unknown";
  }
  char resolved[PATH_MAX];
  std::string path = realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
  return path.substr(path.find_last_of('/') + 1);
}

class NvrtcCompiler : public Compiler {
 public:
  NvrtcCompiler(std::vector<std::string> fixed_options, std::string identity)
      : fixed_options_(std::move(fixed_options)), identity_(std::move(identity)) {}

  absl::StatusOr<CompileResult> Compile(const CompileRequest& request) override;
  std::string Identity() const override { return identity_; }
  std::string Version() const override { return NvrtcVersionString(); }

 private:
  const std::vector<std::string> fixed_options_;
  const std::string identity_;
};

absl::StatusOr<CompileResult> NvrtcCompiler::Compile(const CompileRequest& request) {
  if (request.name_expressions.empty()) {
    return absl::InvalidArgumentError("compile request: no name expression");
  }
  bool real_arch = false;
  for (const std::string& o : request.options) {
    real_arch |= o.rfind("--gpu-architecture=sm_", 0) == 0 || o.rfind("-arch=sm_", 0) == 0;
  }
  if (!real_arch) {
    return absl::InvalidArgumentError(
        "compile request: options must name a real architecture (--gpu-architecture=sm_XY) "
        "so NVRTC emits a cubin");
  }

  const auto start = std::chrono::steady_clock::now();
  CompileResult result;
  result.key = CompileCacheKey(request, identity_);
  ProgramHandle prog;
  KTUNE_RETURN_IF_ERROR(KTUNE_NVRTC(nvrtcCreateProgram(prog.out(), request.source.c_str(),
                                                       request.source_name.c_str(), 0, nullptr,
                                                       nullptr)));
  for (const std::string& name : request.name_expressions) {
    KTUNE_RETURN_IF_ERROR(KTUNE_NVRTC(nvrtcAddNameExpression(prog.get(), name.c_str())));
  }
  std::vector<const char*> argv;
  for (const std::string& o : fixed_options_) argv.push_back(o.c_str());
  for (const std::string& o : request.options) argv.push_back(o.c_str());
  const nvrtcResult compiled =
      nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());

  size_t log_size = 0;
  KTUNE_RETURN_IF_ERROR(KTUNE_NVRTC(nvrtcGetProgramLogSize(prog.get(), &log_size)));
  std::string log(log_size, '\0');
  if (log_size > 0) KTUNE_RETURN_IF_ERROR(KTUNE_NVRTC(nvrtcGetProgramLog(prog.get(), log.data())));
  while (!log.empty() && log.back() == '\0') log.pop_back();
  result.log = std::move(log);

  if (compiled == NVRTC_ERROR_COMPILATION) {
    // The candidate's own failure: a result, not an error.
    result.ok = false;
  } else {
    KTUNE_RETURN_IF_ERROR(NvrtcCheck(compiled, "nvrtcCompileProgram"));
    size_t cubin_size = 0;
    KTUNE_RETURN_IF_ERROR(KTUNE_NVRTC(nvrtcGetCUBINSize(prog.get(), &cubin_size)));
    result.cubin.resize(cubin_size);
    if (cubin_size > 0) {
      KTUNE_RETURN_IF_ERROR(KTUNE_NVRTC(nvrtcGetCUBIN(prog.get(), result.cubin.data())));
    }
    const std::vector<KernelResources> resources = ParsePtxasInfo(result.log);
    for (const std::string& name : request.name_expressions) {
      const char* lowered = nullptr;
      KTUNE_RETURN_IF_ERROR(
          KTUNE_NVRTC(nvrtcGetLoweredName(prog.get(), name.c_str(), &lowered)));
      CompiledKernel k;
      k.name_expression = name;
      k.lowered_name = lowered;
      for (const KernelResources& r : resources) {
        if (r.mangled_name == k.lowered_name) k.resources = r;
      }
      result.kernels.push_back(std::move(k));
    }
    result.ok = true;
  }
  result.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace

std::string NvrtcVersionString() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return absl::StrCat(major, ".", minor);
}

absl::StatusOr<std::unique_ptr<Compiler>> NewNvrtcCompiler(const NvrtcOptions& options) {
  std::vector<std::string> tried;
  const std::string cuda_include = FindCudaInclude(options.cuda_include_dir, &tried);
  if (cuda_include.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA toolkit headers (cuda_fp16.h) found; looked in ",
                     absl::StrJoin(tried, ", "), "; set CUDA_HOME"));
  }
  // -Xptxas=-v: ptxas reports registers, spills and shared memory into the log, so a
  // candidate's resource use is known without a GPU.
  // -minimal leaves out what device code for ktune never uses (textures, device-side
  // runtime calls and launches): the same machine code for every shipped candidate, 7 %
  // faster per compile on a 2-core build machine and 17 % on the 16-core GPU host
  // (bench/RESULTS.md). Automatic PCH (--pch) helped the 16-core host more but slowed the
  // 2-core machine and needs a folder of state: the caller turns it on (options.pch_dir;
  // the engine does where the compile pool has many threads).
  // -default-device: templates are device code only, and NVRTC (13.0) takes the call
  // operator of a generic lambda (`[&](auto shift) {...}`, ktune::WithShift's bodies) for a
  // host function and refuses it without this flag (an explicit __device__ on a lambda is
  // refused too); code that compiled without it compiles to the same machine code.
  std::vector<std::string> fixed = {"-std=c++17", "-Xptxas=-v", "-minimal", "-default-device"};
  // The identity leaves out where things are (folders differ between hosts and installs)
  // and keeps what they are: the NVRTC build (the toolkit headers ship with it), the
  // headers' bytes and the options.
  std::vector<std::string> identity = {absl::StrCat("nvrtc ", NvrtcVersionString()),
                                       NvrtcLibraryName(), absl::StrJoin(fixed, " ")};
  for (const std::string& dir : options.include_dirs) {
    fixed.push_back(absl::StrCat("--include-path=", dir));
    KTUNE_ASSIGN_OR_RETURN(std::string digest, DigestFolder(dir));
    identity.push_back(absl::StrCat("headers ", digest));
  }
  fixed.push_back(absl::StrCat("--include-path=", cuda_include));
  for (const std::string& o : options.extra_options) {
    fixed.push_back(o);
    identity.push_back(o);
  }
  if (!options.pch_dir.empty()) {
    fixed.push_back("--pch");
    fixed.push_back(absl::StrCat("--pch-dir=", options.pch_dir));
  }
  return std::unique_ptr<Compiler>(
      new NvrtcCompiler(std::move(fixed), absl::StrJoin(identity, "|")));
}

}  // namespace ktune
