#include "server/gpu/device_model.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace ktune {

std::string DeviceModelKey(const v1::DeviceInfo& info) {
  // The memory clock in whole MHz and the size rounded to whole GiB, so the few MiB a
  // driver version reserves differently do not split one model in two (an H200 reports
  // 143771 MiB = 140.4 GiB).
  const int64_t mhz = (info.memory_clock_khz() + 500) / 1000;
  const int64_t gib = static_cast<int64_t>(
      std::llround(static_cast<double>(info.total_memory_bytes()) / (1024.0 * 1024 * 1024)));
  return absl::StrCat(info.name(), "|sm_", info.cc_major(), info.cc_minor(), "|", info.sm_count(),
                      "sm|", info.memory_bus_bits(), "bit|", mhz, "MHz|", gib, "GiB");
}

}  // namespace ktune
