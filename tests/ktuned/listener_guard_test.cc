#include "frontends/ktuned/listener_guard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <utility>

#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

TEST(ListenerGuardTest, ServableAddressesPass) {
  for (const char* ok : {"unix:///run/ktune/ktuned.sock", "unix:ktuned.sock", "unix-abstract:kt",
                         "127.0.0.1:50051", "0.0.0.0:0", "localhost:65535", "[::1]:50051",
                         "[::]:1", "ipv4:127.0.0.1:9", "dns:///cache.local:443"}) {
    EXPECT_TRUE(CheckListenAddress(ok).ok()) << ok << ": " << CheckListenAddress(ok);
  }
}

TEST(ListenerGuardTest, AddressesGrpcWouldMisreadAreRefusedSayingWhy) {
  const std::pair<const char*, const char*> bad[] = {
      {"127.0.0.1:99999", "port '99999' is not a number from 0 to 65535"},
      {"[::1]:70000", "port '70000'"},
      {"127.0.0.1:abc", "port 'abc'"},
      {"127.0.0.1:", "port ''"},
      {"unix://", "unix:// needs an absolute path"},
      {"unix://relative", "unix:// needs an absolute path"},
      {"unix:", "unix: needs a socket path"},
      {"unix-abstract:", "needs a name"},
      {"garbage", "no port"},
      {":50051", "no host"},
      {"::1:50051", "needs brackets"},
      {"[::1]50051", "expected [V6ADDRESS]:PORT"},
      {"http://host:80", "not a listen address"},
  };
  for (const auto& [address, why] : bad) {
    EXPECT_THAT(CheckListenAddress(address),
                testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(why)))
        << address;
  }
}

TEST(ListenerGuardTest, ReachOfEachKindOfAddress) {
  EXPECT_EQ(ReachOf("unix:///run/ktune/ktuned.sock"), ListenerReach::kOwner);
  EXPECT_EQ(ReachOf("unix:relative.sock"), ListenerReach::kOwner);
  EXPECT_EQ(ReachOf("unix-abstract:ktuned"), ListenerReach::kAbstract);
  for (const char* loopback : {"127.0.0.1:50051", "127.1.2.3:0", "localhost:50051",
                               "LOCALHOST:1", "[::1]:50051", "ipv4:127.0.0.1:1"}) {
    EXPECT_EQ(ReachOf(loopback), ListenerReach::kLoopback) << loopback;
  }
  for (const char* network : {"0.0.0.0:50051", "[::]:50051", ":50051", "10.0.0.5:50051",
                              "ktune.example.com:50051", "127.0.0.1.evil.com:1",
                              "127.0.0.256:1", "[::1:50051", "vsock:3:5000"}) {
    EXPECT_EQ(ReachOf(network), ListenerReach::kNetwork) << network;
  }
}

TEST(ListenerGuardTest, ExposedListenersNeedTlsOrAToken) {
  EXPECT_TRUE(IsUnguardedExposure("0.0.0.0:50051", /*tls=*/false, /*token=*/false));
  EXPECT_TRUE(IsUnguardedExposure("unix-abstract:k", false, false));
  EXPECT_FALSE(IsUnguardedExposure("0.0.0.0:50051", /*tls=*/true, false));
  EXPECT_FALSE(IsUnguardedExposure("0.0.0.0:50051", false, /*token=*/true));
  EXPECT_FALSE(IsUnguardedExposure("unix-abstract:k", false, /*token=*/true));
  EXPECT_FALSE(IsUnguardedExposure("127.0.0.1:50051", false, false));
  EXPECT_FALSE(IsUnguardedExposure("unix:///tmp/k.sock", false, false));
}

}  // namespace
}  // namespace ktune
