#include "server/worker/driver.h"

#include <dlfcn.h>

#include <optional>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/base/cuda_result.h"
#include "server/base/status_macros.h"

namespace ktune {
namespace {

constexpr char kCudaResultPayload[] = "type.ktune.dev/cuda-result";

// server/base/cuda_result.h numbers CUresult without <cuda.h>; these pin it to the header.
static_assert(static_cast<int>(CUDA_ERROR_INVALID_VALUE) == kCudaErrorInvalidValue);
static_assert(static_cast<int>(CUDA_ERROR_OUT_OF_MEMORY) == kCudaErrorOutOfMemory);
static_assert(static_cast<int>(CUDA_ERROR_NOT_INITIALIZED) == kCudaErrorNotInitialized);
static_assert(static_cast<int>(CUDA_ERROR_DEINITIALIZED) == kCudaErrorDeinitialized);
static_assert(static_cast<int>(CUDA_ERROR_STUB_LIBRARY) == kCudaErrorStubLibrary);
static_assert(static_cast<int>(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER) ==
              kCudaErrorCallRequiresNewerDriver);
static_assert(static_cast<int>(CUDA_ERROR_DEVICE_UNAVAILABLE) == kCudaErrorDeviceUnavailable);
static_assert(static_cast<int>(CUDA_ERROR_NO_DEVICE) == kCudaErrorNoDevice);
static_assert(static_cast<int>(CUDA_ERROR_INVALID_DEVICE) == kCudaErrorInvalidDevice);
static_assert(static_cast<int>(CUDA_ERROR_DEVICE_NOT_LICENSED) == kCudaErrorDeviceNotLicensed);
static_assert(static_cast<int>(CUDA_ERROR_INVALID_IMAGE) == kCudaErrorInvalidImage);
static_assert(static_cast<int>(CUDA_ERROR_INVALID_CONTEXT) == kCudaErrorInvalidContext);
static_assert(static_cast<int>(CUDA_ERROR_NO_BINARY_FOR_GPU) == kCudaErrorNoBinaryForGpu);
static_assert(static_cast<int>(CUDA_ERROR_ECC_UNCORRECTABLE) == kCudaErrorEccUncorrectable);
static_assert(static_cast<int>(CUDA_ERROR_INVALID_PTX) == kCudaErrorInvalidPtx);
static_assert(static_cast<int>(CUDA_ERROR_NVLINK_UNCORRECTABLE) == kCudaErrorNvlinkUncorrectable);
static_assert(static_cast<int>(CUDA_ERROR_UNSUPPORTED_PTX_VERSION) ==
              kCudaErrorUnsupportedPtxVersion);
static_assert(static_cast<int>(CUDA_ERROR_CONTAINED) == kCudaErrorContained);
static_assert(static_cast<int>(CUDA_ERROR_INVALID_HANDLE) == kCudaErrorInvalidHandle);
static_assert(static_cast<int>(CUDA_ERROR_NOT_FOUND) == kCudaErrorNotFound);
static_assert(static_cast<int>(CUDA_ERROR_ILLEGAL_ADDRESS) == kCudaErrorIllegalAddress);
static_assert(static_cast<int>(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES) ==
              kCudaErrorLaunchOutOfResources);
static_assert(static_cast<int>(CUDA_ERROR_LAUNCH_TIMEOUT) == kCudaErrorLaunchTimeout);
static_assert(static_cast<int>(CUDA_ERROR_CONTEXT_IS_DESTROYED) == kCudaErrorContextIsDestroyed);
static_assert(static_cast<int>(CUDA_ERROR_ASSERT) == kCudaErrorAssert);
static_assert(static_cast<int>(CUDA_ERROR_HARDWARE_STACK_ERROR) == kCudaErrorHardwareStackError);
static_assert(static_cast<int>(CUDA_ERROR_ILLEGAL_INSTRUCTION) == kCudaErrorIllegalInstruction);
static_assert(static_cast<int>(CUDA_ERROR_MISALIGNED_ADDRESS) == kCudaErrorMisalignedAddress);
static_assert(static_cast<int>(CUDA_ERROR_INVALID_ADDRESS_SPACE) == kCudaErrorInvalidAddressSpace);
static_assert(static_cast<int>(CUDA_ERROR_INVALID_PC) == kCudaErrorInvalidPc);
static_assert(static_cast<int>(CUDA_ERROR_LAUNCH_FAILED) == kCudaErrorLaunchFailed);
static_assert(static_cast<int>(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) ==
              kCudaErrorCooperativeLaunchTooLarge);
static_assert(static_cast<int>(CUDA_ERROR_TENSOR_MEMORY_LEAK) == kCudaErrorTensorMemoryLeak);
static_assert(static_cast<int>(CUDA_ERROR_NOT_PERMITTED) == kCudaErrorNotPermitted);
static_assert(static_cast<int>(CUDA_ERROR_NOT_SUPPORTED) == kCudaErrorNotSupported);
static_assert(static_cast<int>(CUDA_ERROR_SYSTEM_NOT_READY) == kCudaErrorSystemNotReady);
static_assert(static_cast<int>(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH) ==
              kCudaErrorSystemDriverMismatch);
static_assert(static_cast<int>(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE) ==
              kCudaErrorCompatNotSupportedOnDevice);
static_assert(static_cast<int>(CUDA_ERROR_EXTERNAL_DEVICE) == kCudaErrorExternalDevice);
static_assert(static_cast<int>(CUDA_ERROR_INVALID_CLUSTER_SIZE) == kCudaErrorInvalidClusterSize);
static_assert(static_cast<int>(CUDA_ERROR_UNKNOWN) == kCudaErrorUnknown);

// Resolves `name` into `*fn`; kUnavailable naming the symbol when the driver lacks it.
template <typename Fn>
absl::Status Resolve(void* lib, const char* name, Fn* fn) {
  dlerror();
  void* sym = dlsym(lib, name);
  if (sym == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(
        absl::StrCat("no CUDA driver: dlsym ", name, ": ", why != nullptr ? why : "not found"));
  }
  *fn = reinterpret_cast<Fn>(sym);
  return absl::OkStatus();
}

// The first of `names` the driver has.
template <typename Fn>
absl::Status ResolveAny(void* lib, std::initializer_list<const char*> names, Fn* fn) {
  absl::Status first;
  for (const char* name : names) {
    absl::Status s = Resolve(lib, name, fn);
    if (s.ok()) return s;
    if (first.ok()) first = s;
  }
  return first;
}

}  // namespace

bool IsStickyCudaError(CUresult r) { return IsStickyCudaResult(r); }

CUresult CudaResultOf(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kCudaResultPayload);
  int value = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &value)) return CUDA_SUCCESS;
  return static_cast<CUresult>(value);
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  absl::Status out(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

absl::StatusOr<Driver*> Driver::Get() {
  // Loaded once; the library stays open and the Driver alive until the process exits.
  static const absl::StatusOr<Driver*>* const driver = new absl::StatusOr<Driver*>(Load());
  return *driver;
}

absl::StatusOr<Driver*> Driver::Load() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(absl::StrCat("no CUDA driver: dlopen libcuda.so.1: ",
                                               why != nullptr ? why : "unknown error"));
  }
  auto* d = new Driver();  // never freed: the driver outlives every handle
  DriverApi& a = d->api_;
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuInit", &a.Init));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuDriverGetVersion", &a.DriverGetVersion));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuDeviceGetCount", &a.DeviceGetCount));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuDeviceGet", &a.DeviceGet));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuDeviceGetName", &a.DeviceGetName));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuDeviceGetAttribute", &a.DeviceGetAttribute));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuDeviceTotalMem_v2", &a.DeviceTotalMem));
  KTUNE_RETURN_IF_ERROR(
      ResolveAny(lib, {"cuDeviceGetUuid_v2", "cuDeviceGetUuid"}, &a.DeviceGetUuid));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuDevicePrimaryCtxRetain", &a.DevicePrimaryCtxRetain));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuDevicePrimaryCtxRelease_v2", &a.DevicePrimaryCtxRelease));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuCtxSetCurrent", &a.CtxSetCurrent));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuCtxSynchronize", &a.CtxSynchronize));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuModuleLoadData", &a.ModuleLoadData));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuModuleUnload", &a.ModuleUnload));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuModuleGetFunction", &a.ModuleGetFunction));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuFuncGetAttribute", &a.FuncGetAttribute));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuFuncSetAttribute", &a.FuncSetAttribute));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                                &a.OccupancyMaxActiveBlocksPerMultiprocessor));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuLaunchKernel", &a.LaunchKernel));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuMemAlloc_v2", &a.MemAlloc));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuMemFree_v2", &a.MemFree));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuMemcpyHtoD_v2", &a.MemcpyHtoD));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuMemcpyDtoH_v2", &a.MemcpyDtoH));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuMemcpyDtoD_v2", &a.MemcpyDtoD));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuMemcpyDtoDAsync_v2", &a.MemcpyDtoDAsync));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuMemsetD8_v2", &a.MemsetD8));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuMemsetD32_v2", &a.MemsetD32));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuMemsetD32Async", &a.MemsetD32Async));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuMemGetInfo_v2", &a.MemGetInfo));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuMemHostAlloc", &a.MemHostAlloc));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuMemHostGetDevicePointer_v2", &a.MemHostGetDevicePointer));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuMemFreeHost", &a.MemFreeHost));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuStreamCreate", &a.StreamCreate));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuStreamDestroy_v2", &a.StreamDestroy));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuStreamSynchronize", &a.StreamSynchronize));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuEventCreate", &a.EventCreate));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuEventDestroy_v2", &a.EventDestroy));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuEventRecord", &a.EventRecord));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuEventSynchronize", &a.EventSynchronize));
  // CUDA 12.8 added cuEventElapsedTime_v2 (and CUDA 13's header maps the name to it);
  // older drivers have only the plain one. Same signature.
  KTUNE_RETURN_IF_ERROR(
      ResolveAny(lib, {"cuEventElapsedTime_v2", "cuEventElapsedTime"}, &a.EventElapsedTime));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuGetErrorName", &a.GetErrorName));
  KTUNE_RETURN_IF_ERROR(Resolve(lib, "cuGetErrorString", &a.GetErrorString));
  // Optional: only TMA kernels need it, and the rest of ktune runs on older drivers.
  if (!Resolve(lib, "cuTensorMapEncodeTiled", &a.TensorMapEncodeTiled).ok()) {
    a.TensorMapEncodeTiled = nullptr;
  }

  if (absl::Status s = KTUNE_CU(d, Init, 0); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("no usable CUDA device: ", s.message()));
  }
  int version = 0;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(d, DriverGetVersion, &version));
  d->version_ = absl::StrCat(version / 1000, ".", (version % 1000) / 10);
  return d;
}

absl::Status Driver::Check(CUresult result, absl::string_view call) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  if (IsStickyCudaError(result)) MarkPoisoned();
  absl::Status s(CudaResultCode(result), absl::StrCat(call, ": ", Describe(result)));
  s.SetPayload(kCudaResultPayload, absl::Cord(absl::StrCat(static_cast<int>(result))));
  return s;
}

std::string Driver::Describe(CUresult result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api_.GetErrorName == nullptr || api_.GetErrorName(result, &name) != CUDA_SUCCESS ||
      name == nullptr) {
    return absl::StrCat("CUDA error ", static_cast<int>(result));
  }
  if (api_.GetErrorString(result, &text) != CUDA_SUCCESS || text == nullptr) return name;
  return absl::StrCat(name, " (", text, ")");
}

// ---- PrimaryContext ------------------------------------------------------------------

absl::StatusOr<PrimaryContext> PrimaryContext::Retain(Driver* driver, int ordinal) {
  int count = 0;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, DeviceGetCount, &count));
  if (ordinal < 0 || ordinal >= count) {
    return absl::UnavailableError(
        absl::StrCat("no GPU with ordinal ", ordinal, ": ", count, " visible"));
  }
  PrimaryContext c;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, DeviceGet, &c.device_, ordinal));
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, DevicePrimaryCtxRetain, &c.context_, c.device_));
  c.driver_ = driver;
  c.ordinal_ = ordinal;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, CtxSetCurrent, c.context_));
  return c;
}

PrimaryContext& PrimaryContext::operator=(PrimaryContext&& other) noexcept {
  if (this != &other) {
    Reset();
    driver_ = std::exchange(other.driver_, nullptr);
    device_ = std::exchange(other.device_, 0);
    context_ = std::exchange(other.context_, nullptr);
    ordinal_ = std::exchange(other.ordinal_, -1);
  }
  return *this;
}

void PrimaryContext::Reset() {
  if (driver_ != nullptr && context_ != nullptr && !driver_->poisoned()) {
    driver_->api().CtxSetCurrent(nullptr);
    driver_->api().DevicePrimaryCtxRelease(device_);  // errors ignored: nothing to do
  }
  driver_ = nullptr;
  context_ = nullptr;
}

// ---- DeviceMemory --------------------------------------------------------------------

absl::StatusOr<DeviceMemory> DeviceMemory::Allocate(Driver* driver, size_t bytes) {
  DeviceMemory m;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, MemAlloc, &m.ptr_, bytes == 0 ? 1 : bytes));
  m.driver_ = driver;
  m.bytes_ = bytes;
  return m;
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    driver_ = std::exchange(other.driver_, nullptr);
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceMemory::Reset() {
  if (driver_ != nullptr && ptr_ != 0 && !driver_->poisoned()) driver_->api().MemFree(ptr_);
  driver_ = nullptr;
  ptr_ = 0;
  bytes_ = 0;
}

// ---- MappedHostMemory ----------------------------------------------------------------

absl::StatusOr<MappedHostMemory> MappedHostMemory::Allocate(Driver* driver, size_t bytes) {
  MappedHostMemory m;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, MemHostAlloc, &m.host_, bytes == 0 ? 1 : bytes,
                                 CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  m.driver_ = driver;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, MemHostGetDevicePointer, &m.device_, m.host_, 0));
  return m;
}

MappedHostMemory& MappedHostMemory::operator=(MappedHostMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    driver_ = std::exchange(other.driver_, nullptr);
    host_ = std::exchange(other.host_, nullptr);
    device_ = std::exchange(other.device_, 0);
  }
  return *this;
}

void MappedHostMemory::Reset() {
  if (driver_ != nullptr && host_ != nullptr && !driver_->poisoned()) driver_->api().MemFreeHost(host_);
  driver_ = nullptr;
  host_ = nullptr;
  device_ = 0;
}

// ---- Module --------------------------------------------------------------------------

absl::StatusOr<Module> Module::Load(Driver* driver, const std::string& image) {
  if (image.empty()) return absl::InvalidArgumentError("empty cubin");
  Module m;
  // std::string keeps a terminating NUL, which the driver wants should the image be PTX.
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, ModuleLoadData, &m.module_, image.c_str()));
  m.driver_ = driver;
  return m;
}

absl::StatusOr<CUfunction> Module::Function(const std::string& lowered_name) const {
  CUfunction f = nullptr;
  absl::Status s = KTUNE_CU(driver_, ModuleGetFunction, &f, module_, lowered_name.c_str());
  if (CudaResultOf(s) == CUDA_ERROR_NOT_FOUND) {
    return absl::NotFoundError(absl::StrCat("no kernel named '", lowered_name, "' in the cubin"));
  }
  KTUNE_RETURN_IF_ERROR(s);
  return f;
}

Module& Module::operator=(Module&& other) noexcept {
  if (this != &other) {
    Reset();
    driver_ = std::exchange(other.driver_, nullptr);
    module_ = std::exchange(other.module_, nullptr);
  }
  return *this;
}

void Module::Reset() {
  if (driver_ != nullptr && module_ != nullptr && !driver_->poisoned()) {
    driver_->api().ModuleUnload(module_);
  }
  driver_ = nullptr;
  module_ = nullptr;
}

// ---- Stream --------------------------------------------------------------------------

absl::StatusOr<Stream> Stream::Create(Driver* driver) {
  Stream s;
  // A blocking stream (CU_STREAM_DEFAULT): work on it is ordered with the legacy default
  // stream, where cuMemcpyHtoD/cuMemsetD8 and friends run, so a launch never overtakes the
  // fill before it.
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, StreamCreate, &s.stream_, CU_STREAM_DEFAULT));
  s.driver_ = driver;
  return s;
}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    Reset();
    driver_ = std::exchange(other.driver_, nullptr);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Stream::Reset() {
  if (driver_ != nullptr && stream_ != nullptr && !driver_->poisoned()) {
    driver_->api().StreamDestroy(stream_);
  }
  driver_ = nullptr;
  stream_ = nullptr;
}

// ---- Event ---------------------------------------------------------------------------

absl::StatusOr<Event> Event::Create(Driver* driver) {
  Event e;
  // Blocking sync: the worker waits on events between samples; spinning would steal a
  // core from the comparison threads for nothing.
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, EventCreate, &e.event_, CU_EVENT_BLOCKING_SYNC));
  e.driver_ = driver;
  return e;
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    Reset();
    driver_ = std::exchange(other.driver_, nullptr);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::Reset() {
  if (driver_ != nullptr && event_ != nullptr && !driver_->poisoned()) {
    driver_->api().EventDestroy(event_);
  }
  driver_ = nullptr;
  event_ = nullptr;
}

}  // namespace ktune
