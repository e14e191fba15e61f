#include "client/lib/loaded_kernel.h"

#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/lib/cuda_api.h"
#include "server/base/dtype.h"
#include "server/base/status_macros.h"
#include "server/base/tensor_map.h"

namespace ktune::client {

// One CUmodule in one context, shared by every LoadedKernel of that (context, sha256).
struct LoadedKernel::Module {
  const CudaApi* api = nullptr;
  CuContext context = nullptr;
  CuModule module = nullptr;

  absl::Mutex mu;
  struct Function {
    CuFunction handle = nullptr;
    uint32_t max_dynamic_shared = kDefaultMaxDynamicSharedBytes;  // as raised so far
  };
  std::map<std::string, Function> functions ABSL_GUARDED_BY(mu);

  // The function `name`, its dynamic shared memory limit raised to at least
  // `shared_bytes` (never lowered: other LoadedKernels may rely on a higher one).
  absl::StatusOr<CuFunction> GetFunction(const std::string& name, uint32_t shared_bytes) {
    absl::MutexLock lock(&mu);
    auto it = functions.find(name);
    if (it == functions.end()) {
      CuFunction f = nullptr;
      absl::Status s = CheckCu(*api, api->ModuleGetFunction(&f, module, name.c_str()),
                               absl::StrCat("cuModuleGetFunction(", name, ")"));
      if (!s.ok()) {
        return absl::Status(s.code() == absl::StatusCode::kNotFound
                                ? absl::StatusCode::kNotFound
                                : s.code(),
                            absl::StrCat("the cubin has no kernel '", name, "': ", s.message()));
      }
      it = functions.emplace(name, Function{f}).first;
    }
    if (shared_bytes > it->second.max_dynamic_shared) {
      KTUNE_RETURN_IF_ERROR(CheckCu(
          *api,
          api->FuncSetAttribute(it->second.handle, kFuncAttributeMaxDynamicSharedSizeBytes,
                                static_cast<int>(shared_bytes)),
          absl::StrCat("cuFuncSetAttribute(", name,
                       ", MAX_DYNAMIC_SHARED_SIZE_BYTES, ", shared_bytes, ")")));
      it->second.max_dynamic_shared = shared_bytes;
    }
    return it->second.handle;
  }

  ~Module() {
    if (module == nullptr) return;
    // cuModuleUnload acts in the current context: make the module's current if needed.
    // Errors are dropped: a destructor has no one to tell.
    CuContext current = nullptr;
    const bool is_current =
        api->CtxGetCurrent(&current) == kCudaSuccess && current == context;
    if (is_current) {
      api->ModuleUnload(module);
    } else if (api->CtxPushCurrent(context) == kCudaSuccess) {
      api->ModuleUnload(module);
      CuContext popped = nullptr;
      api->CtxPopCurrent(&popped);
    }
  }
};

namespace {

// Args of the largest shipped launch (gemm's 10) with room: Launch keeps them on the stack.
constexpr size_t kInlineArgs = 16;
// A call's device addresses by arg index (0 for scalars), on the stack.
using Addresses = absl::InlinedVector<CuDevicePtr, kInlineArgs>;

// A tensor map encoded from a call's pointer, aligned as CUtensorMap (the driver wants 64
// bytes, CUDA 13's header declares 128; C++17's aligned new honours it).
struct alignas(kTensorMapAlignment) EncodedMap {
  unsigned char bytes[kTensorMapBytes];
};

// `buffers` checked against the args (one entry each; buffers non-null and on their
// alignment) into `addresses`.
absl::Status CheckBuffers(const std::vector<KernelArg>& args, const std::vector<void*>& buffers,
                          Addresses* addresses) {
  if (buffers.size() != args.size()) {
    return absl::InvalidArgumentError(absl::StrCat("buffers: ", buffers.size(),
                                                   " given; the kernel has ", args.size(),
                                                   " args (nullptr for scalars)"));
  }
  addresses->assign(args.size(), 0);
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].is_buffer) continue;
    if (buffers[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffers: '", args[i].name, "' (arg ", i, ") is null"));
    }
    const CuDevicePtr address = reinterpret_cast<CuDevicePtr>(buffers[i]);
    (*addresses)[i] = address;
    // A kernel's vector access at a misaligned address faults, and the fault ends the
    // whole context: refuse the call instead (a view at an odd element offset, say).
    const int align = args[i].alignment;
    if (align > 1 && address % static_cast<CuDevicePtr>(align) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "buffers: '", args[i].name, "' (arg ", i, ") at 0x", absl::Hex(address), " is not ",
          align, "-byte aligned, as the kernel needs"));
    }
  }
  return absl::OkStatus();
}

// The tensor-map args `map_args` encoded into (*maps)[i] from this call's `addresses`.
absl::Status EncodeMaps(const CudaApi& api, const std::vector<KernelArg>& args,
                        const std::vector<size_t>& map_args, const Addresses& addresses,
                        std::vector<EncodedMap>* maps) {
  for (size_t i : map_args) {
    const TensorMapArg& t = args[i].tensor_map;
    const CuDevicePtr base = addresses[static_cast<size_t>(t.buffer_arg)];
    if (base % 16 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "buffers: '", t.buffer, "' is not 16-byte aligned, as its tensor map needs"));
    }
    std::optional<DType> dtype = ParseDType(t.dtype);
    std::vector<uint64_t> dims(t.dims.begin(), t.dims.end());
    std::vector<uint64_t> strides(t.strides.begin(), t.strides.end());
    strides.push_back(0);  // never an empty array
    std::vector<uint32_t> box(t.box.begin(), t.box.end());
    std::vector<uint32_t> element_strides(t.element_strides.begin(), t.element_strides.end());
    const CuResult result = api.TensorMapEncodeTiled(
        (*maps)[i].bytes, TensorMapDataType(dtype ? *dtype : DType::kF32),
        static_cast<uint32_t>(dims.size()), reinterpret_cast<void*>(base), dims.data(),
        strides.data(), box.data(), element_strides.data(), t.interleave, t.swizzle,
        t.l2_promotion, t.oob_fill);
    if (result != kCudaSuccess) {  // the message is built only for a failure
      return CheckCu(api, result, absl::StrCat("cuTensorMapEncodeTiled(", args[i].name, ")"));
    }
  }
  return absl::OkStatus();
}

// The process-wide memo of loaded modules.
class ModuleCache {
 public:
  template <typename ModuleT>
  absl::StatusOr<std::shared_ptr<ModuleT>> GetOrLoad(const CudaApi* api, CuContext context,
                                                     const std::string& sha256,
                                                     const std::string& cubin) {
    absl::MutexLock lock(&mu_);
    const auto key = std::make_pair(context, sha256);
    if (auto it = entries_.find(key); it != entries_.end()) {
      if (std::shared_ptr<void> alive = it->second.lock()) {
        return std::static_pointer_cast<ModuleT>(alive);
      }
    }
    // Loads under the lock: two threads asking for one new cubin load it once.
    CuModule handle = nullptr;
    KTUNE_RETURN_IF_ERROR(
        CheckCu(*api, api->ModuleLoadData(&handle, cubin.data()), "cuModuleLoadData"));
    auto module = std::make_shared<ModuleT>();
    module->api = api;
    module->context = context;
    module->module = handle;
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second.expired() ? entries_.erase(it) : std::next(it);
    }
    entries_[key] = module;
    return module;
  }

 private:
  absl::Mutex mu_;
  std::map<std::pair<CuContext, std::string>, std::weak_ptr<void>> entries_
      ABSL_GUARDED_BY(mu_);
};

ModuleCache& Cache() {
  static ModuleCache* const cache = new ModuleCache();
  return *cache;
}

absl::Status ValidateArtifact(const KernelArtifact& a) {
  KTUNE_RETURN_IF_ERROR(VerifyArtifact(a));
  if (a.cubin.empty()) return absl::InvalidArgumentError("artifact: empty cubin");
  if (a.launches.empty()) return absl::InvalidArgumentError("artifact: no launches");
  for (size_t i = 0; i < a.launches.size(); ++i) {
    const KernelLaunch& l = a.launches[i];
    const std::string where = absl::StrCat("launches[", i, "] (", l.lowered_name, ")");
    if (l.lowered_name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": empty lowered_name"));
    }
    if (l.grid.size() != 3 || l.block.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": grid and block need 3 values, have ",
                                                     l.grid.size(), " and ", l.block.size()));
    }
    for (int d = 0; d < 3; ++d) {
      if (l.grid[d] == 0 || l.block[d] == 0) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": zero grid or block dimension"));
      }
    }
    for (int32_t arg : l.args) {
      if (arg < 0 || static_cast<size_t>(arg) >= a.args.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": arg index ", arg, " outside the artifact's ", a.args.size(), " args"));
      }
    }
  }
  return absl::OkStatus();
}

// LoadOptions::programmatic when unset: KTUNE_PROGRAMMATIC_LAUNCH=1 launches the artifact's
// programmatic launches so, 0 plainly. Unset too, plainly: until a GPU has measured what it
// gains a decode step and checked chains of ktune's kernels launched so
// (deploy/gpu-host/run.sh's programmatic stage). The Python client's default is the same.
constexpr bool kProgrammaticLaunchDefault = false;

bool ProgrammaticLaunchFromEnvironment() {
  const char* v = std::getenv("KTUNE_PROGRAMMATIC_LAUNCH");
  return v == nullptr ? kProgrammaticLaunchDefault : std::strcmp(v, "1") == 0;
}

absl::StatusOr<uint64_t> ScalarBytes(const KernelArg& arg) {
  uint64_t bits = 0;
  if (arg.scalar_type == "i32") {
    const int32_t v = static_cast<int32_t>(arg.int_value);
    std::memcpy(&bits, &v, sizeof(v));
  } else if (arg.scalar_type == "i64") {
    const int64_t v = arg.int_value;
    std::memcpy(&bits, &v, sizeof(v));
  } else if (arg.scalar_type == "f32") {
    const float v = static_cast<float>(arg.number);
    std::memcpy(&bits, &v, sizeof(v));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("args: scalar '", arg.name, "' has type '",
                                                   arg.scalar_type,
                                                   "'; expected i32, i64 or f32"));
  }
  return bits;
}

// The server's description of a tensor map, for CheckTensorMap.
absl::StatusOr<TensorMapDesc> ToDesc(const TensorMapArg& t) {
  TensorMapDesc d;
  std::optional<DType> dtype = ParseDType(t.dtype);
  if (!dtype) return absl::InvalidArgumentError(absl::StrCat("dtype: unknown '", t.dtype, "'"));
  d.dtype = *dtype;
  d.buffer = t.buffer;
  d.buffer_arg = t.buffer_arg;
  d.dims = t.dims;
  d.strides = t.strides;
  d.box = t.box;
  d.element_strides = t.element_strides;
  d.swizzle = t.swizzle;
  d.interleave = t.interleave;
  d.l2_promotion = t.l2_promotion;
  d.oob_fill = t.oob_fill;
  return d;
}

// A tensor-map arg must cover a buffer arg of the artifact and obey the driver's rules
// against that buffer's size.
absl::Status CheckTensorMapArg(const KernelArtifact& a, size_t i) {
  const KernelArg& arg = a.args[i];
  const TensorMapArg& t = arg.tensor_map;
  const std::string where = absl::StrCat("args[", i, "] (", arg.name, ").tensor_map");
  if (t.buffer_arg < 0 || static_cast<size_t>(t.buffer_arg) >= a.args.size() ||
      !a.args[static_cast<size_t>(t.buffer_arg)].is_buffer) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".buffer_arg: ", t.buffer_arg, " is not a buffer arg"));
  }
  const KernelArg& buffer = a.args[static_cast<size_t>(t.buffer_arg)];
  absl::StatusOr<TensorMapDesc> desc = ToDesc(t);
  absl::Status s = desc.status();
  if (s.ok()) {
    std::optional<DType> dtype = ParseDType(buffer.dtype);
    s = CheckTensorMap(*desc, dtype ? buffer.count * DTypeSize(*dtype) : -1);
  }
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ".", s.message()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LoadedKernel>> LoadedKernel::Load(const KernelArtifact& artifact,
                                                                 const LoadOptions& options) {
  // The artifact's checks come first: a bad artifact is named before a missing driver.
  KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<LoadedKernel> kernel, Prepare(artifact));
  KTUNE_ASSIGN_OR_RETURN(const CudaApi* api, LoadCudaApi());
  KTUNE_RETURN_IF_ERROR(kernel->LoadInto(artifact, *api, options));
  return kernel;
}

absl::StatusOr<std::unique_ptr<LoadedKernel>> LoadedKernel::Load(const KernelArtifact& artifact,
                                                                 const CudaApi& api,
                                                                 const LoadOptions& options) {
  KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<LoadedKernel> kernel, Prepare(artifact));
  KTUNE_RETURN_IF_ERROR(kernel->LoadInto(artifact, api, options));
  return kernel;
}

absl::StatusOr<std::unique_ptr<LoadedKernel>> LoadedKernel::Prepare(
    const KernelArtifact& artifact) {
  KTUNE_RETURN_IF_ERROR(ValidateArtifact(artifact));
  std::unique_ptr<LoadedKernel> kernel(new LoadedKernel());
  kernel->args_ = artifact.args;
  kernel->scalar_values_.assign(artifact.args.size(), 0);
  std::vector<bool> launched(artifact.args.size(), false);
  for (const KernelLaunch& l : artifact.launches) {
    for (int32_t a : l.args) launched[static_cast<size_t>(a)] = true;
  }
  for (size_t i = 0; i < artifact.args.size(); ++i) {
    if (artifact.args[i].is_buffer) {
      const int align = artifact.args[i].alignment;
      if (align < 0 || align > 256 || (align & (align - 1)) != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "args[", i, "] ('", artifact.args[i].name, "').alignment: ", align,
            " is not a power of two in 1..256 (0: unchecked)"));
      }
      continue;
    }
    if (artifact.args[i].scalar_type == "tensor_map") {
      if (!launched[i]) continue;
      KTUNE_RETURN_IF_ERROR(CheckTensorMapArg(artifact, i));
      kernel->map_args_.push_back(i);
      continue;
    }
    KTUNE_ASSIGN_OR_RETURN(kernel->scalar_values_[i], ScalarBytes(artifact.args[i]));
  }
  return kernel;
}

absl::Status LoadedKernel::LoadInto(const KernelArtifact& artifact, const CudaApi& cuda,
                                    const LoadOptions& options) {
  const CudaApi* api = &cuda;
  if (!map_args_.empty() && api->TensorMapEncodeTiled == nullptr) {
    return absl::UnavailableError(
        "the artifact takes a tensor map and this CUDA driver has no cuTensorMapEncodeTiled "
        "(CUDA 12.0 or later is needed)");
  }
  CuContext context = nullptr;
  KTUNE_RETURN_IF_ERROR(CheckCu(*api, api->CtxGetCurrent(&context), "cuCtxGetCurrent"));
  if (context == nullptr) {
    return absl::FailedPreconditionError(
        "no current CUDA context on this thread; make the inference server's context current "
        "(cuCtxSetCurrent, or any CUDA runtime call after cudaSetDevice) before "
        "LoadedKernel::Load");
  }
  KTUNE_ASSIGN_OR_RETURN(module_, Cache().GetOrLoad<Module>(api, context, artifact.cubin_sha256,
                                                            artifact.cubin));
  // Without cuLaunchKernelEx (a driver before CUDA 12) every launch is plain.
  const bool programmatic = options.programmatic.value_or(ProgrammaticLaunchFromEnvironment()) &&
                            api->LaunchKernelEx != nullptr;
  for (const KernelLaunch& l : artifact.launches) {
    ResolvedLaunch r;
    KTUNE_ASSIGN_OR_RETURN(r.function, module_->GetFunction(l.lowered_name, l.shared_bytes));
    for (int d = 0; d < 3; ++d) {
      r.grid[d] = l.grid[d];
      r.block[d] = l.block[d];
    }
    r.shared_bytes = l.shared_bytes;
    r.args = l.args;
    r.programmatic = l.programmatic && programmatic;
    launches_.push_back(std::move(r));
  }
  return absl::OkStatus();
}

LoadedKernel::~LoadedKernel() = default;

void* LoadedKernel::context() const { return module_->context; }

absl::Status LoadedKernel::Launch(void* stream, const std::vector<void*>& buffers) const {
  Addresses addresses;
  KTUNE_RETURN_IF_ERROR(CheckBuffers(args_, buffers, &addresses));
  const CudaApi& api = *module_->api;
  CuContext current = nullptr;
  KTUNE_RETURN_IF_ERROR(CheckCu(api, api.CtxGetCurrent(&current), "cuCtxGetCurrent"));
  if (current != module_->context) {
    return absl::FailedPreconditionError(
        "Launch: the kernel's CUDA context is not current on this thread");
  }
  std::vector<EncodedMap> maps(map_args_.empty() ? 0 : args_.size());
  KTUNE_RETURN_IF_ERROR(EncodeMaps(api, args_, map_args_, addresses, &maps));
  absl::InlinedVector<void*, kInlineArgs> params;
  for (size_t n = 0; n < launches_.size(); ++n) {
    const ResolvedLaunch& l = launches_[n];
    params.clear();
    for (int32_t a : l.args) {
      // The driver only reads through these pointers.
      if (args_[a].scalar_type == "tensor_map") {
        params.push_back(maps[a].bytes);
        continue;
      }
      params.push_back(args_[a].is_buffer ? static_cast<void*>(&addresses[a])
                                          : const_cast<uint64_t*>(&scalar_values_[a]));
    }
    KTUNE_RETURN_IF_ERROR(Enqueue(l, n, stream, params.data()));
  }
  return absl::OkStatus();
}

absl::Status LoadedKernel::Enqueue(const ResolvedLaunch& l, size_t n, void* stream,
                                   void** params) const {
  const CudaApi& api = *module_->api;
  CuResult result;
  if (l.programmatic) {
    CuLaunchAttribute attr{};
    attr.id = kLaunchAttributeProgrammaticStreamSerialization;
    attr.value.programmatic_stream_serialization_allowed = 1;
    const CuLaunchConfig config{l.grid[0],  l.grid[1],      l.grid[2], l.block[0], l.block[1],
                                l.block[2], l.shared_bytes, stream,    &attr,      1};
    result = api.LaunchKernelEx(&config, l.function, params, nullptr);
  } else {
    result = api.LaunchKernel(l.function, l.grid[0], l.grid[1], l.grid[2], l.block[0],
                              l.block[1], l.block[2], l.shared_bytes, stream, params, nullptr);
  }
  if (result == kCudaSuccess) return absl::OkStatus();  // no message built per launch
  return CheckCu(api, result,
                 absl::StrCat(l.programmatic ? "cuLaunchKernelEx" : "cuLaunchKernel", "(launch ",
                              n, ")"));
}

absl::Status LoadedKernel::Launch(void* stream,
                                  const std::map<std::string, void*>& buffers) const {
  std::vector<void*> by_index(args_.size(), nullptr);
  size_t used = 0;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (!args_[i].is_buffer) continue;
    auto it = buffers.find(args_[i].name);
    if (it == buffers.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffers: no buffer named '", args_[i].name, "'"));
    }
    by_index[i] = it->second;
    ++used;
  }
  if (used != buffers.size()) {
    for (const auto& [name, ptr] : buffers) {
      bool known = false;
      for (const KernelArg& a : args_) known = known || (a.is_buffer && a.name == name);
      if (!known) {
        return absl::InvalidArgumentError(
            absl::StrCat("buffers: '", name, "' is not a buffer arg of this kernel"));
      }
    }
  }
  return Launch(stream, by_index);
}

}  // namespace ktune::client
