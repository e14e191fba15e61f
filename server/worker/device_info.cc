#include "server/worker/device_info.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "server/worker/driver.h"

namespace ktune {
namespace {

absl::StatusOr<int> Attribute(Driver* driver, CUdevice device, CUdevice_attribute attribute) {
  int value = 0;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, DeviceGetAttribute, &value, attribute, device));
  return value;
}

}  // namespace

std::string FormatGpuUuid(const unsigned char b[16]) {
  char out[64];
  std::snprintf(out, sizeof(out),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return out;
}

absl::StatusOr<v1::DeviceInfo> QueryDeviceInfo(Driver* driver, int ordinal) {
  int count = 0;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, DeviceGetCount, &count));
  if (ordinal < 0 || ordinal >= count) {
    return absl::UnavailableError(
        absl::StrCat("no GPU with ordinal ", ordinal, ": ", count, " visible"));
  }
  CUdevice dev = 0;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, DeviceGet, &dev, ordinal));

  v1::DeviceInfo info;
  info.set_ordinal(ordinal);
  char name[256] = {};
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, DeviceGetName, name, sizeof(name) - 1, dev));
  info.set_name(name);
  auto attr = [&](CUdevice_attribute a) { return Attribute(driver, dev, a); };
  KTUNE_ASSIGN_OR_RETURN(int cc_major, attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR));
  KTUNE_ASSIGN_OR_RETURN(int cc_minor, attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
  KTUNE_ASSIGN_OR_RETURN(int sms, attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
  KTUNE_ASSIGN_OR_RETURN(int l2, attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE));
  KTUNE_ASSIGN_OR_RETURN(int bus, attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH));
  KTUNE_ASSIGN_OR_RETURN(int mem_khz, attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE));
  KTUNE_ASSIGN_OR_RETURN(int threads_sm, attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR));
  KTUNE_ASSIGN_OR_RETURN(int threads_block, attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
  KTUNE_ASSIGN_OR_RETURN(int smem_optin,
                         attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
  KTUNE_ASSIGN_OR_RETURN(int regs_sm, attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR));
  size_t total = 0;
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, DeviceTotalMem, &total, dev));
  CUuuid uuid{};
  KTUNE_RETURN_IF_ERROR(KTUNE_CU(driver, DeviceGetUuid, &uuid, dev));

  info.set_cc_major(cc_major);
  info.set_cc_minor(cc_minor);
  info.set_sm_count(sms);
  info.set_l2_bytes(l2);
  info.set_memory_bus_bits(bus);
  info.set_memory_clock_khz(mem_khz);
  info.set_total_memory_bytes(static_cast<int64_t>(total));
  info.set_max_threads_per_sm(threads_sm);
  info.set_max_threads_per_block(threads_block);
  info.set_max_shared_per_block_optin(smem_optin);
  info.set_registers_per_sm(regs_sm);
  info.set_uuid(FormatGpuUuid(reinterpret_cast<const unsigned char*>(uuid.bytes)));
  info.set_driver_version(driver->version());
  return info;
}


}  // namespace ktune
