#include "server/base/echo.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ktune {
namespace {

using ::testing::EndsWith;
using ::testing::StartsWith;

TEST(EchoTest, ShortInputIsQuotedWhole) {
  EXPECT_EQ(Echo("rmsnorm"), "'rmsnorm'");
  EXPECT_EQ(Echo(std::string("a\nb\0z", 5)), "'a\\nb\\x00z'");
}

TEST(EchoTest, LongInputIsCutWithItsLength) {
  const std::string e = Echo(std::string(100000, 'x'));
  EXPECT_LT(e.size(), 130u);
  EXPECT_THAT(e, StartsWith("'xxxx"));
  EXPECT_THAT(e, EndsWith("...' (100000 bytes)"));
}

TEST(ClipTest, LongTextKeepsItsHeadAndSaysHowMuchWasCut) {
  EXPECT_EQ(Clip("short log"), "short log");
  const std::string c = Clip(std::string(10000, 'e'));
  EXPECT_LT(c.size(), 2100u);
  EXPECT_THAT(c, EndsWith("[... 7952 more bytes]"));
}

}  // namespace
}  // namespace ktune
