// A fake of the CUDA driver table (client/lib/cuda_api.h) for client tests that need no
// GPU: one context per thread (kContext once a test sets current_context, none until then;
// CtxPushCurrent/PopCurrent move it), modules and functions as handles to interned names,
// launches recorded in Driver() with their kernel's name and stream.
//
// Thread-safety: Driver()'s records are guarded by its mutex; current_context is per thread.
#ifndef KTUNE_TESTS_CLIENT_FAKE_CUDA_API_H_
#define KTUNE_TESTS_CLIENT_FAKE_CUDA_API_H_

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "client/lib/cuda_api.h"

namespace ktune::testing {

// What the fake driver saw. Its entry points are plain functions, as CudaApi wants, so
// they keep their state here.
struct FakeDriver {
  std::mutex mu;
  std::deque<std::string> names;  // function handles point at these
  std::vector<std::string> launched;
  std::vector<void*> streams;
  // Per launch, the first kFirstParams kernel parameters read as 64-bit values (a device
  // address, or a scalar in its low bytes). REQUIRES: every kernel launched has that many.
  static constexpr int kFirstParams = 3;
  std::vector<std::vector<uint64_t>> params;
  // Per launch: whether it was launched programmatically (cuLaunchKernelEx with the
  // programmatic-stream-serialization attribute set).
  std::vector<bool> programmatic;

  // Forgets every launch recorded (a test's own start).
  void ClearLaunches() {
    std::lock_guard<std::mutex> lock(mu);
    launched.clear();
    streams.clear();
    params.clear();
    programmatic.clear();
  }
  int modules_loaded = 0;
  int modules_unloaded = 0;
};
inline FakeDriver& Driver() {
  static FakeDriver* const driver = new FakeDriver();
  return *driver;
}
inline void* const kContext = reinterpret_cast<void*>(0xC0);

inline void RecordLaunch(void* function, void* stream, void** params, bool programmatic) {
  std::lock_guard<std::mutex> lock(Driver().mu);
  Driver().launched.push_back(*static_cast<std::string*>(function));
  Driver().streams.push_back(stream);
  std::vector<uint64_t> values;
  for (int i = 0; i < FakeDriver::kFirstParams; ++i) {
    values.push_back(*static_cast<const uint64_t*>(params[i]));
  }
  Driver().params.push_back(std::move(values));
  Driver().programmatic.push_back(programmatic);
}
inline thread_local client::CuContext current_context = nullptr;

inline client::CudaApi FakeApi() {
  using namespace ::ktune::client;  // NOLINT(build/namespaces): the driver ABI's names
  CudaApi api{};
  api.Init = [](unsigned) { return kCudaSuccess; };
  api.CtxGetCurrent = [](CuContext* c) {
    *c = current_context;
    return kCudaSuccess;
  };
  api.CtxPushCurrent = [](CuContext c) {
    current_context = c;
    return kCudaSuccess;
  };
  api.CtxPopCurrent = [](CuContext* c) {
    *c = current_context;
    current_context = nullptr;
    return kCudaSuccess;
  };
  api.ModuleLoadData = [](CuModule* m, const void*) {
    std::lock_guard<std::mutex> lock(Driver().mu);
    *m = reinterpret_cast<CuModule>(static_cast<uintptr_t>(++Driver().modules_loaded));
    return kCudaSuccess;
  };
  api.ModuleUnload = [](CuModule) {
    std::lock_guard<std::mutex> lock(Driver().mu);
    ++Driver().modules_unloaded;
    return kCudaSuccess;
  };
  api.ModuleGetFunction = [](CuFunction* f, CuModule, const char* name) {
    std::lock_guard<std::mutex> lock(Driver().mu);
    Driver().names.emplace_back(name);
    *f = &Driver().names.back();
    return kCudaSuccess;
  };
  api.FuncSetAttribute = [](CuFunction, int, int) { return kCudaSuccess; };
  api.LaunchKernel = [](CuFunction f, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, CuStream stream, void** params, void**) {
    RecordLaunch(f, stream, params, false);
    return kCudaSuccess;
  };
  // Records the launch as programmatic when its one attribute asks for it, as the driver
  // would take it; an attribute list of another shape is an error here.
  api.LaunchKernelEx = [](const CuLaunchConfig* config, CuFunction f, void** params, void**) {
    if (config->num_attrs != 1 || config->attrs == nullptr ||
        config->attrs[0].id != kLaunchAttributeProgrammaticStreamSerialization) {
      return 1;  // CUDA_ERROR_INVALID_VALUE
    }
    RecordLaunch(f, config->stream, params,
                 config->attrs[0].value.programmatic_stream_serialization_allowed != 0);
    return kCudaSuccess;
  };
  api.GetErrorName = [](CuResult, const char** name) {
    *name = "CUDA_ERROR_FAKE";
    return kCudaSuccess;
  };
  api.GetErrorString = [](CuResult, const char** text) {
    *text = "fake";
    return kCudaSuccess;
  };
  return api;
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_CLIENT_FAKE_CUDA_API_H_
