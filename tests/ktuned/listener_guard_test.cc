#include "frontends/ktuned/listener_guard.h"

#include <gtest/gtest.h>

namespace ktune {
namespace {

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
