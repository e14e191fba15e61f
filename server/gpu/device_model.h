// The device-model key that tuned entries are stored and shared under.
//
// A pure function; thread-safe. Kept apart from server/worker/device_info.h, which needs
// the driver, so the tuning loop can name a device model without linking the worker's code.
#ifndef KTUNE_SERVER_GPU_DEVICE_MODEL_H_
#define KTUNE_SERVER_GPU_DEVICE_MODEL_H_

#include <string>

#include "ktune/v1/worker.pb.h"

namespace ktune {

// The key a device model's entries are stored under, built only from what changes the
// best kernel: name, compute capability, SM count, memory bus width, peak memory clock and
// memory size rounded to whole GiB, e.g. "NVIDIA H200|sm_90|132sm|6144bit|2619MHz|140GiB".
// Two GPUs of one model give the same key; UUID and driver version never enter it.
std::string DeviceModelKey(const v1::DeviceInfo& info);

}  // namespace ktune

#endif  // KTUNE_SERVER_GPU_DEVICE_MODEL_H_
