// What the driver says about one GPU (v1::DeviceInfo).
//
// Pure functions over a loaded Driver; call them from the thread that holds the context.
#ifndef KTUNE_SERVER_WORKER_DEVICE_INFO_H_
#define KTUNE_SERVER_WORKER_DEVICE_INFO_H_

#include <string>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"
#include "server/gpu/device_model.h"

namespace ktune {

class Driver;  // server/worker/driver.h; kept out so <cuda.h> stays out of this header

// Every field of DeviceInfo for the visible GPU `ordinal`. kUnavailable if there is no
// such GPU.
absl::StatusOr<v1::DeviceInfo> QueryDeviceInfo(Driver* driver, int ordinal);

// "GPU-8c7e1f2a-...": the UUID as nvidia-smi prints it.
std::string FormatGpuUuid(const unsigned char bytes[16]);

}  // namespace ktune

#endif  // KTUNE_SERVER_WORKER_DEVICE_INFO_H_
