#include "client/lib/cuda_api.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "server/base/cuda_result.h"

namespace ktune::client {
namespace {

absl::StatusOr<const CudaApi*> Load() {
  // RTLD_LOCAL: an inference server that already loaded the driver gets the same handle.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("no CUDA driver: dlopen libcuda.so.1: ", dlerror()));
  }
  static CudaApi api;
  absl::Status missing;
  auto resolve = [&](auto& fn, const char* symbol) {
    void* p = dlsym(lib, symbol);
    if (p == nullptr && missing.ok()) {
      missing = absl::UnavailableError(
          absl::StrCat("no usable CUDA driver: libcuda.so.1 lacks ", symbol));
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  resolve(api.Init, "cuInit");
  resolve(api.CtxGetCurrent, "cuCtxGetCurrent");
  resolve(api.CtxPushCurrent, "cuCtxPushCurrent_v2");
  resolve(api.CtxPopCurrent, "cuCtxPopCurrent_v2");
  resolve(api.ModuleLoadData, "cuModuleLoadData");
  resolve(api.ModuleUnload, "cuModuleUnload");
  resolve(api.ModuleGetFunction, "cuModuleGetFunction");
  resolve(api.FuncSetAttribute, "cuFuncSetAttribute");
  resolve(api.LaunchKernel, "cuLaunchKernel");
  resolve(api.GetErrorName, "cuGetErrorName");
  resolve(api.GetErrorString, "cuGetErrorString");
  if (!missing.ok()) return missing;
  // Optional (CUDA 12.0+): only artifacts with tensor maps need it, and LoadedKernel::Load
  // refuses those when it is null.
  api.TensorMapEncodeTiled = reinterpret_cast<decltype(api.TensorMapEncodeTiled)>(
      dlsym(lib, "cuTensorMapEncodeTiled"));
  // Optional too: without it, programmatic launches are plain ones.
  api.LaunchKernelEx =
      reinterpret_cast<decltype(api.LaunchKernelEx)>(dlsym(lib, "cuLaunchKernelEx"));
  if (absl::Status s = CheckCu(api, api.Init(0), "cuInit"); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("no usable CUDA driver: ", s.message()));
  }
  return &api;
}

}  // namespace

absl::StatusOr<const CudaApi*> LoadCudaApi() {
  static const absl::StatusOr<const CudaApi*>* const loaded =
      new absl::StatusOr<const CudaApi*>(Load());
  return *loaded;
}

absl::Status CheckCu(const CudaApi& api, CuResult result, absl::string_view call) {
  if (result == kCudaSuccess) return absl::OkStatus();
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.GetErrorName == nullptr || api.GetErrorName(result, &name) != kCudaSuccess ||
      name == nullptr) {
    name = "CUDA_ERROR_UNKNOWN_CODE";
  }
  if (api.GetErrorString == nullptr || api.GetErrorString(result, &text) != kCudaSuccess ||
      text == nullptr) {
    text = "no description";
  }
  const std::string message = absl::StrCat(call, ": ", name, " (", result, ": ", text, ")");
  return absl::Status(CudaResultCode(result), message);
}

}  // namespace ktune::client
