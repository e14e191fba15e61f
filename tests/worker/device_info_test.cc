// The device-model key is a stored key: pinned by a golden string.
#include "server/worker/device_info.h"

#include <gtest/gtest.h>

#include "ktune/v1/worker.pb.h"

namespace ktune {
namespace {

// An H200 as its driver describes it (the GPU test host's).
v1::DeviceInfo H200() {
  v1::DeviceInfo d;
  d.set_ordinal(0);
  d.set_name("NVIDIA H200");
  d.set_cc_major(9);
  d.set_cc_minor(0);
  d.set_sm_count(132);
  d.set_l2_bytes(62914560);
  d.set_memory_bus_bits(6144);
  d.set_memory_clock_khz(2619000);
  d.set_total_memory_bytes(150754820096);  // 143771 MiB
  d.set_max_threads_per_sm(2048);
  d.set_max_threads_per_block(1024);
  d.set_max_shared_per_block_optin(232448);
  d.set_registers_per_sm(65536);
  d.set_uuid("GPU-8c7e1f2a-0000-1111-2222-333344445555");
  d.set_driver_version("13.0");
  return d;
}

TEST(DeviceModelKeyTest, Golden) {
  EXPECT_EQ(DeviceModelKey(H200()), "NVIDIA H200|sm_90|132sm|6144bit|2619MHz|140GiB");
}

TEST(DeviceModelKeyTest, TwoGpusOfOneModelShareIt) {
  v1::DeviceInfo other = H200();
  other.set_ordinal(3);
  other.set_uuid("GPU-00000000-aaaa-bbbb-cccc-dddddddddddd");
  other.set_driver_version("13.1");
  other.set_total_memory_bytes(H200().total_memory_bytes() - (int64_t{64} << 20));
  other.set_memory_clock_khz(2619200);
  EXPECT_EQ(DeviceModelKey(other), DeviceModelKey(H200()));
}

TEST(DeviceModelKeyTest, WhatChangesTheBestKernelChangesIt) {
  v1::DeviceInfo d = H200();
  d.set_sm_count(114);
  EXPECT_NE(DeviceModelKey(d), DeviceModelKey(H200()));
  d = H200();
  d.set_cc_minor(1);
  EXPECT_EQ(DeviceModelKey(d), "NVIDIA H200|sm_91|132sm|6144bit|2619MHz|140GiB");
  d = H200();
  d.set_memory_bus_bits(5120);
  EXPECT_NE(DeviceModelKey(d), DeviceModelKey(H200()));
  d = H200();
  d.set_total_memory_bytes(int64_t{80} << 30);
  EXPECT_EQ(DeviceModelKey(d), "NVIDIA H200|sm_90|132sm|6144bit|2619MHz|80GiB");
}

TEST(FormatGpuUuidTest, AsNvidiaSmiPrintsIt) {
  const unsigned char bytes[16] = {0x8c, 0x7e, 0x1f, 0x2a, 0x01, 0x23, 0x45, 0x67,
                                   0x89, 0xab, 0xcd, 0xef, 0x00, 0x11, 0x22, 0xff};
  EXPECT_EQ(FormatGpuUuid(bytes), "GPU-8c7e1f2a-0123-4567-89ab-cdef001122ff");
}

}  // namespace
}  // namespace ktune
