// What the driver says about one GPU (v1::DeviceInfo), and the device-model key that
// entries are shared by.
//
// Pure functions over a loaded Driver; call them from the thread that holds the context.
#ifndef KTUNE_SERVER_GPU_DEVICE_INFO_H_
#define KTUNE_SERVER_GPU_DEVICE_INFO_H_

#include <string>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"

namespace ktune {

class Driver;  // server/gpu/driver.h; kept out so <cuda.h> stays out of this header

// Every field of DeviceInfo for the visible GPU `ordinal`. kUnavailable if there is no
// such GPU.
absl::StatusOr<v1::DeviceInfo> QueryDeviceInfo(Driver* driver, int ordinal);

// The key a device model's entries are stored under, built only from what changes the
// best kernel: name, compute capability, SM count, memory bus width, peak memory clock and
// memory size rounded to whole GiB, e.g. "NVIDIA H200|sm_90|132sm|6144bit|2619MHz|140GiB".
// Two GPUs of one model give the same key; UUID and driver version never enter it.
std::string DeviceModelKey(const v1::DeviceInfo& info);

// "GPU-8c7e1f2a-...": the UUID as nvidia-smi prints it.
std::string FormatGpuUuid(const unsigned char bytes[16]);

}  // namespace ktune

#endif  // KTUNE_SERVER_GPU_DEVICE_INFO_H_
