// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1"), and owning handles
// for what ktune-worker creates with it (primary context, device memory, modules, streams,
// events).
//
// The only code in ktune that includes <cuda.h>, and only for its types and enum values:
// ktune never links libcuda, so a host without a driver starts and answers kUnavailable
// (as jitify's LibCuda does). Every driver call goes through Driver::Check, which names the
// call, maps CUresult to the most specific absl::StatusCode and remembers when an error is
// sticky (the context is poisoned for good: every later call in the process fails).
//
// Thread-safety: Driver::Get() is safe from any thread and the Driver it returns is
// immutable apart from its atomic poisoned flag. The handles are thread-compatible; a CUDA
// context is current per thread, so ktune-worker makes every driver call from one thread.
#ifndef KTUNE_SERVER_WORKER_DRIVER_H_
#define KTUNE_SERVER_WORKER_DRIVER_H_

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ktune {

// The entry points ktune uses, resolved by their exact versioned symbol names (the
// `#define cuMemAlloc cuMemAlloc_v2` of <cuda.h> does not reach dlsym). Member names drop
// the `cu` prefix and the version so the macros of <cuda.h> cannot rename them.
struct DriverApi {
  CUresult (*Init)(unsigned int flags);
  CUresult (*DriverGetVersion)(int* version);
  CUresult (*DeviceGetCount)(int* count);
  CUresult (*DeviceGet)(CUdevice* device, int ordinal);
  CUresult (*DeviceGetName)(char* name, int len, CUdevice device);
  CUresult (*DeviceGetAttribute)(int* value, CUdevice_attribute attribute, CUdevice device);
  CUresult (*DeviceTotalMem)(size_t* bytes, CUdevice device);  // _v2
  CUresult (*DeviceGetUuid)(CUuuid* uuid, CUdevice device);    // _v2 or plain
  CUresult (*DevicePrimaryCtxRetain)(CUcontext* context, CUdevice device);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice device);  // _v2
  CUresult (*CtxSetCurrent)(CUcontext context);
  CUresult (*CtxSynchronize)();
  CUresult (*ModuleLoadData)(CUmodule* module, const void* image);
  CUresult (*ModuleUnload)(CUmodule module);
  CUresult (*ModuleGetFunction)(CUfunction* function, CUmodule module, const char* name);
  CUresult (*FuncGetAttribute)(int* value, CUfunction_attribute attribute, CUfunction f);
  CUresult (*FuncSetAttribute)(CUfunction f, CUfunction_attribute attribute, int value);
  CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int* blocks, CUfunction f, int block_size,
                                                        size_t dynamic_smem);
  CUresult (*LaunchKernel)(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                           unsigned block_x, unsigned block_y, unsigned block_z,
                           unsigned shared_bytes, CUstream stream, void** params, void** extra);
  CUresult (*MemAlloc)(CUdeviceptr* ptr, size_t bytes);                    // _v2
  CUresult (*MemFree)(CUdeviceptr ptr);                                    // _v2
  CUresult (*MemcpyHtoD)(CUdeviceptr dst, const void* src, size_t bytes);  // _v2
  CUresult (*MemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes);        // _v2
  CUresult (*MemcpyDtoD)(CUdeviceptr dst, CUdeviceptr src, size_t bytes);  // _v2
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                              CUstream stream);                              // _v2
  CUresult (*MemsetD8)(CUdeviceptr dst, unsigned char value, size_t count);  // _v2
  CUresult (*MemsetD32)(CUdeviceptr dst, unsigned int value, size_t count);  // _v2
  CUresult (*MemsetD32Async)(CUdeviceptr dst, unsigned int value, size_t count, CUstream stream);
  CUresult (*MemGetInfo)(size_t* free_bytes, size_t* total_bytes);  // _v2
  CUresult (*MemHostAlloc)(void** ptr, size_t bytes, unsigned int flags);
  CUresult (*MemHostGetDevicePointer)(CUdeviceptr* device, void* host, unsigned int flags);  // _v2
  CUresult (*MemFreeHost)(void* ptr);
  CUresult (*StreamCreate)(CUstream* stream, unsigned int flags);
  CUresult (*StreamDestroy)(CUstream stream);  // _v2
  CUresult (*StreamSynchronize)(CUstream stream);
  CUresult (*EventCreate)(CUevent* event, unsigned int flags);
  CUresult (*EventDestroy)(CUevent event);  // _v2
  CUresult (*EventRecord)(CUevent event, CUstream stream);
  CUresult (*EventSynchronize)(CUevent event);
  CUresult (*EventElapsedTime)(float* ms, CUevent start, CUevent end);  // _v2 or plain
  CUresult (*GetErrorName)(CUresult error, const char** name);
  CUresult (*GetErrorString)(CUresult error, const char** text);
  // CUDA 12.0 and later; null on an older driver (EncodeTensorMap then says so).
  CUresult (*TensorMapEncodeTiled)(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank,
                                   void* global, const cuuint64_t* dims,
                                   const cuuint64_t* strides, const cuuint32_t* box,
                                   const cuuint32_t* element_strides,
                                   CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                   CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob_fill);
};

// True for the errors after which the context is unusable: every later call in the
// process returns the same error, so the worker must exit and be restarted.
bool IsStickyCudaError(CUresult result);

// The CUresult a status came from (attached by Driver::Check as a payload), or
// CUDA_SUCCESS for a status that did not come from a driver call.
CUresult CudaResultOf(const absl::Status& status);

// `status` with "<context>: " before its message, keeping its code and payloads (so
// CudaResultOf still answers). OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

class Driver {
 public:
  // Loads libcuda.so.1 once per process and calls cuInit(0). kUnavailable with the reason
  // when the library or one of its symbols is missing ("no CUDA driver: dlopen
  // libcuda.so.1: ...") or when cuInit fails (no device). The same answer every call; the
  // Driver lives until the process exits.
  static absl::StatusOr<Driver*> Get();

  const DriverApi& api() const { return api_; }

  // OK for CUDA_SUCCESS; otherwise "<call>: CUDA_ERROR_X (text)" with the most specific
  // code (kResourceExhausted for out of memory and launch resources, kUnavailable for no
  // device/driver, kInvalidArgument for bad values and images, kNotFound, kInternal for
  // sticky errors and the rest) and the CUresult as a payload (CudaResultOf). A sticky
  // error marks the driver poisoned.
  absl::Status Check(CUresult result, absl::string_view call);

  // "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)".
  std::string Describe(CUresult result) const;

  // Whether a sticky error was seen: the context can run nothing more. Owning handles
  // then drop their handles without calling the driver.
  bool poisoned() const { return poisoned_.load(std::memory_order_relaxed); }
  void MarkPoisoned() { poisoned_.store(true, std::memory_order_relaxed); }

  // The CUDA version of the driver, e.g. "13.0".
  const std::string& version() const { return version_; }

 private:
  Driver() = default;
  static absl::StatusOr<Driver*> Load();

  DriverApi api_{};
  std::string version_;
  std::atomic<bool> poisoned_{false};
};

// Calls `driver->api().fn(args...)` and checks it, naming the call "cu<fn>":
//   KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, MemAlloc, &ptr, bytes));
#define KTUNE_CU(driver, fn, ...) ((driver)->Check((driver)->api().fn(__VA_ARGS__), "cu" #fn))

// The device's primary context, retained and made current on the calling thread.
class PrimaryContext {
 public:
  static absl::StatusOr<PrimaryContext> Retain(Driver* driver, int ordinal);
  PrimaryContext() = default;
  PrimaryContext(PrimaryContext&& other) noexcept { *this = std::move(other); }
  PrimaryContext& operator=(PrimaryContext&& other) noexcept;
  ~PrimaryContext() { Reset(); }

  CUdevice device() const { return device_; }
  CUcontext context() const { return context_; }
  int ordinal() const { return ordinal_; }

 private:
  void Reset();
  Driver* driver_ = nullptr;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  int ordinal_ = -1;
};

// One cuMemAlloc allocation (256-byte aligned base). REQUIRES: a current context.
class DeviceMemory {
 public:
  static absl::StatusOr<DeviceMemory> Allocate(Driver* driver, size_t bytes);
  DeviceMemory() = default;
  DeviceMemory(DeviceMemory&& other) noexcept { *this = std::move(other); }
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  ~DeviceMemory() { Reset(); }

  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return ptr_ != 0; }
  void Reset();

 private:
  Driver* driver_ = nullptr;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// Pinned host memory the GPU reads and writes through a device address of its own
// (cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP): what the host stores there the GPU sees
// without a copy.
class MappedHostMemory {
 public:
  static absl::StatusOr<MappedHostMemory> Allocate(Driver* driver, size_t bytes);
  MappedHostMemory() = default;
  MappedHostMemory(MappedHostMemory&& other) noexcept { *this = std::move(other); }
  MappedHostMemory& operator=(MappedHostMemory&& other) noexcept;
  ~MappedHostMemory() { Reset(); }

  void* host() const { return host_; }
  CUdeviceptr device() const { return device_; }
  void Reset();

 private:
  Driver* driver_ = nullptr;
  void* host_ = nullptr;
  CUdeviceptr device_ = 0;
};

// A loaded cubin.
class Module {
 public:
  static absl::StatusOr<Module> Load(Driver* driver, const std::string& image);
  Module() = default;
  Module(Module&& other) noexcept { *this = std::move(other); }
  Module& operator=(Module&& other) noexcept;
  ~Module() { Reset(); }

  // kNotFound when the cubin has no kernel of that (lowered) name.
  absl::StatusOr<CUfunction> Function(const std::string& lowered_name) const;
  void Reset();

 private:
  Driver* driver_ = nullptr;
  CUmodule module_ = nullptr;
};

class Stream {
 public:
  static absl::StatusOr<Stream> Create(Driver* driver);
  Stream() = default;
  Stream(Stream&& other) noexcept { *this = std::move(other); }
  Stream& operator=(Stream&& other) noexcept;
  ~Stream() { Reset(); }

  CUstream get() const { return stream_; }
  void Reset();

 private:
  Driver* driver_ = nullptr;
  CUstream stream_ = nullptr;
};

// An event with timing enabled.
class Event {
 public:
  static absl::StatusOr<Event> Create(Driver* driver);
  Event() = default;
  Event(Event&& other) noexcept { *this = std::move(other); }
  Event& operator=(Event&& other) noexcept;
  ~Event() { Reset(); }

  CUevent get() const { return event_; }
  void Reset();

 private:
  Driver* driver_ = nullptr;
  CUevent event_ = nullptr;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_WORKER_DRIVER_H_
