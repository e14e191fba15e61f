// What a CUDA driver result means to ktune: the absl::StatusCode it becomes and whether it
// poisons the context. One table for both sides of the driver: ktune-worker
// (server/worker/driver.cc) and the client library's LoadedKernel (client/lib/cuda_api.cc),
// so the same CUresult is the same code wherever it surfaces.
//
// CUresult is an int here: base does not include <cuda.h> (only server/worker does, and it
// pins these values against the header with static_asserts).
//
// Thread-safety: pure functions.
#ifndef KTUNE_SERVER_BASE_CUDA_RESULT_H_
#define KTUNE_SERVER_BASE_CUDA_RESULT_H_

#include "absl/status/status.h"

namespace ktune {

// The CUresult values the table names, as <cuda.h> numbers them.
enum CudaResultValue : int {
  kCudaErrorInvalidValue = 1,
  kCudaErrorOutOfMemory = 2,
  kCudaErrorNotInitialized = 3,
  kCudaErrorDeinitialized = 4,
  kCudaErrorStubLibrary = 34,
  kCudaErrorCallRequiresNewerDriver = 36,
  kCudaErrorDeviceUnavailable = 46,
  kCudaErrorNoDevice = 100,
  kCudaErrorInvalidDevice = 101,
  kCudaErrorDeviceNotLicensed = 102,
  kCudaErrorInvalidImage = 200,
  kCudaErrorInvalidContext = 201,
  kCudaErrorNoBinaryForGpu = 209,
  kCudaErrorEccUncorrectable = 214,
  kCudaErrorInvalidPtx = 218,
  kCudaErrorNvlinkUncorrectable = 220,
  kCudaErrorUnsupportedPtxVersion = 222,
  kCudaErrorContained = 226,
  kCudaErrorInvalidHandle = 400,
  kCudaErrorNotFound = 500,
  kCudaErrorIllegalAddress = 700,
  kCudaErrorLaunchOutOfResources = 701,
  kCudaErrorLaunchTimeout = 702,
  kCudaErrorContextIsDestroyed = 709,
  kCudaErrorAssert = 710,
  kCudaErrorHardwareStackError = 714,
  kCudaErrorIllegalInstruction = 715,
  kCudaErrorMisalignedAddress = 716,
  kCudaErrorInvalidAddressSpace = 717,
  kCudaErrorInvalidPc = 718,
  kCudaErrorLaunchFailed = 719,
  kCudaErrorCooperativeLaunchTooLarge = 720,
  kCudaErrorTensorMemoryLeak = 721,
  kCudaErrorNotPermitted = 800,
  kCudaErrorNotSupported = 801,
  kCudaErrorSystemNotReady = 802,
  kCudaErrorSystemDriverMismatch = 803,
  kCudaErrorCompatNotSupportedOnDevice = 804,
  kCudaErrorExternalDevice = 911,
  kCudaErrorInvalidClusterSize = 912,
  kCudaErrorUnknown = 999,
};

// True iff `result` leaves the context unusable: every later call fails the same way and
// only a new process recovers (a device-side fault, an uncorrectable ECC error, ...).
bool IsStickyCudaResult(int result);

// The most specific code for a failed driver call: kInternal for sticky errors and for
// anything unlisted, kResourceExhausted for memory and launch resources, kUnavailable for
// no usable device or driver, kInvalidArgument for bad values and images, kNotFound for a
// missing symbol, kFailedPrecondition for a missing context or a refused operation.
// REQUIRES: result != 0 (CUDA_SUCCESS).
absl::StatusCode CudaResultCode(int result);

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_CUDA_RESULT_H_
