// The few CUDA driver entry points LoadedKernel needs, loaded at run time with
// dlopen("libcuda.so.1"), declared WITHOUT <cuda.h>.
//
// Why not server/worker/driver.h: it includes <cuda.h> (only server/worker may), lives in
// ktune_worker_lib with the worker's session code, and lacks cuCtxGetCurrent and
// cuCtxPush/PopCurrent, which a library loading into its caller's context needs. The
// handful of types below are the driver ABI's own: CUresult and CUdevice are int,
// CUcontext/CUmodule/CUfunction/CUstream pointers to opaque structs, CUdeviceptr a 64-bit
// integer; the enum values used are pinned here by name.
//
// Thread-safety: LoadCudaApi() is safe from any thread; the CudaApi it returns is
// immutable and lives until the process exits.
#ifndef KTUNE_CLIENT_LIB_CUDA_API_H_
#define KTUNE_CLIENT_LIB_CUDA_API_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ktune::client {

using CuResult = int;        // CUresult
using CuContext = void*;     // CUcontext
using CuModule = void*;      // CUmodule
using CuFunction = void*;    // CUfunction
using CuStream = void*;      // CUstream
using CuDevicePtr = uint64_t;  // CUdeviceptr (unsigned long long)

inline constexpr CuResult kCudaSuccess = 0;
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
inline constexpr int kFuncAttributeMaxDynamicSharedSizeBytes = 8;
// Above this, a kernel must opt in to more dynamic shared memory.
inline constexpr uint32_t kDefaultMaxDynamicSharedBytes = 48 * 1024;
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
inline constexpr int kLaunchAttributeProgrammaticStreamSerialization = 6;

// CUlaunchAttribute: an id, padding to 8 bytes, and a 64-byte union of values (the
// programmatic attribute's value is an int, programmaticStreamSerializationAllowed).
struct CuLaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int programmatic_stream_serialization_allowed;
  } value;
};
static_assert(sizeof(CuLaunchAttribute) == 72, "CUlaunchAttribute is 72 bytes");

// CUlaunchConfig, field for field.
struct CuLaunchConfig {
  unsigned grid_x, grid_y, grid_z;
  unsigned block_x, block_y, block_z;
  unsigned shared_bytes;
  CuStream stream;
  CuLaunchAttribute* attrs;
  unsigned num_attrs;
};
static_assert(sizeof(CuLaunchConfig) == 56, "CUlaunchConfig is 56 bytes");

// Member names drop the `cu` prefix and are resolved by their exact (unversioned) symbols.
struct CudaApi {
  CuResult (*Init)(unsigned int flags);
  CuResult (*CtxGetCurrent)(CuContext* context);
  CuResult (*CtxPushCurrent)(CuContext context);  // _v2
  CuResult (*CtxPopCurrent)(CuContext* context);  // _v2
  CuResult (*ModuleLoadData)(CuModule* module, const void* image);
  CuResult (*ModuleUnload)(CuModule module);
  CuResult (*ModuleGetFunction)(CuFunction* function, CuModule module, const char* name);
  CuResult (*FuncSetAttribute)(CuFunction function, int attribute, int value);
  CuResult (*LaunchKernel)(CuFunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                           unsigned block_x, unsigned block_y, unsigned block_z,
                           unsigned shared_bytes, CuStream stream, void** params, void** extra);
  // cuLaunchKernelEx (CUDA 12.0 and later; null on older drivers, and then every launch
  // goes through LaunchKernel): what launches a kernel programmatically.
  CuResult (*LaunchKernelEx)(const CuLaunchConfig* config, CuFunction f, void** params,
                             void** extra);
  CuResult (*GetErrorName)(CuResult error, const char** name);
  CuResult (*GetErrorString)(CuResult error, const char** text);
  // cuTensorMapEncodeTiled (CUDA 12.0 and later; null on older drivers). `map` points at
  // 128 bytes aligned to at least 64 (CUtensorMap); the enums are passed as their int values
  // (CUtensorMapDataType, CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
  // CUtensorMapFloatOOBfill), which manifest.proto's TensorMap enums carry.
  CuResult (*TensorMapEncodeTiled)(void* map, int data_type, uint32_t rank, void* global,
                                   const uint64_t* dims, const uint64_t* strides,
                                   const uint32_t* box, const uint32_t* element_strides,
                                   int interleave, int swizzle, int l2_promotion, int oob_fill);
};

// Loads libcuda.so.1 once per process and calls cuInit(0). kUnavailable with the reason
// ("no CUDA driver: dlopen libcuda.so.1: ...", a missing symbol, cuInit's error) otherwise;
// the same answer every call.
absl::StatusOr<const CudaApi*> LoadCudaApi();

// OK for success; otherwise "<call>: CUDA_ERROR_X (text)" with the code ktune-worker gives
// the same result (CudaResultCode in server/base/cuda_result.h).
absl::Status CheckCu(const CudaApi& api, CuResult result, absl::string_view call);

}  // namespace ktune::client

#endif  // KTUNE_CLIENT_LIB_CUDA_API_H_
