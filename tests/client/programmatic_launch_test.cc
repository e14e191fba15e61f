// LoadedKernel's programmatic launches, against the fake driver table: a launch the artifact
// marks programmatic goes through cuLaunchKernelEx with the programmatic-stream-serialization
// attribute, any other through cuLaunchKernel, where KTUNE_PROGRAMMATIC_LAUNCH=1; unset (the
// default for now), 0, or a driver without cuLaunchKernelEx launch everything plainly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "client/lib/ktune_client.h"
#include "client/lib/loaded_kernel.h"
#include "client/lib/proto_convert.h"
#include "tests/client/fake_cuda_api.h"
#include "tests/client/fake_ktune_service.h"

namespace ktune::client {
namespace {

using ::ktune::testing::current_context;
using ::ktune::testing::Driver;
using ::ktune::testing::FakeApi;
using ::ktune::testing::kContext;
using ::ktune::testing::SetCubin;
using ::testing::ElementsAre;

// Two launches over x, out and a scalar n: "first" marked programmatic, "second" not, as a
// daemon sends them.
KernelArtifact TwoLaunches() {
  v1::KernelArtifact a;
  SetCubin(a, "cubin of two launches");
  for (const char* name : {"first", "second"}) {
    v1::KernelLaunch* l = a.add_launches();
    l->set_lowered_name(name);
    for (uint32_t g : {4u, 1u, 1u}) l->add_grid(g);
    for (uint32_t b : {128u, 1u, 1u}) l->add_block(b);
    for (int i : {0, 1, 2}) l->add_args(i);
    l->set_programmatic(std::string(name) == "first");
  }
  for (const char* name : {"x", "out"}) {
    v1::KernelArg* arg = a.add_args();
    arg->set_name(name);
    arg->set_is_buffer(true);
    arg->set_dtype("f32");
    arg->set_count(64);
  }
  v1::KernelArg* n = a.add_args();
  n->set_name("n");
  n->set_scalar_type("i32");
  n->set_int_value(64);
  return ArtifactFromProto(a);
}

class ProgrammaticLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("KTUNE_PROGRAMMATIC_LAUNCH", "1", 1);
    current_context = kContext;
    Driver().ClearLaunches();
  }
  void TearDown() override {
    current_context = nullptr;
    unsetenv("KTUNE_PROGRAMMATIC_LAUNCH");
  }
  // Loads TwoLaunches through `api`, launches it once on a stream and returns what the
  // driver saw, launch by launch: whether each was programmatic.
  std::vector<bool> LaunchOnce(const CudaApi& api, const LoadOptions& options = {}) {
    absl::StatusOr<std::unique_ptr<LoadedKernel>> k =
        LoadedKernel::Load(TwoLaunches(), api, options);
    EXPECT_TRUE(k.ok()) << k.status();
    if (!k.ok()) return {};
    void* stream = reinterpret_cast<void*>(0x5);
    const absl::Status s = (*k)->Launch(
        stream, {reinterpret_cast<void*>(0x1000), reinterpret_cast<void*>(0x2000), nullptr});
    EXPECT_TRUE(s.ok()) << s;
    std::lock_guard<std::mutex> lock(Driver().mu);
    EXPECT_THAT(Driver().launched, ElementsAre("first", "second"));
    EXPECT_THAT(Driver().streams, ElementsAre(stream, stream));
    // Both saw the call's buffers and scalar, whichever entry point launched them.
    EXPECT_THAT(Driver().params, ElementsAre(ElementsAre(0x1000, 0x2000, 64),
                                             ElementsAre(0x1000, 0x2000, 64)));
    return Driver().programmatic;
  }
};

TEST_F(ProgrammaticLaunchTest, TheMarkedLaunchGoesThroughLaunchKernelExWithTheAttribute) {
  EXPECT_THAT(LaunchOnce(FakeApi()), ElementsAre(true, false));
}

TEST_F(ProgrammaticLaunchTest, TheEnvironmentDecidesForKernelsLoadedAfter) {
  setenv("KTUNE_PROGRAMMATIC_LAUNCH", "0", 1);
  EXPECT_THAT(LaunchOnce(FakeApi()), ElementsAre(false, false));
}

TEST_F(ProgrammaticLaunchTest, UnsetItIsOffUntilMeasuredOnAGpu) {
  unsetenv("KTUNE_PROGRAMMATIC_LAUNCH");
  EXPECT_THAT(LaunchOnce(FakeApi()), ElementsAre(false, false));
}

TEST_F(ProgrammaticLaunchTest, TheLoadOptionsOverrideTheEnvironment) {
  LoadOptions on, off;
  on.programmatic = true;
  off.programmatic = false;
  unsetenv("KTUNE_PROGRAMMATIC_LAUNCH");
  EXPECT_THAT(LaunchOnce(FakeApi(), on), ElementsAre(true, false));
  setenv("KTUNE_PROGRAMMATIC_LAUNCH", "1", 1);
  Driver().ClearLaunches();
  EXPECT_THAT(LaunchOnce(FakeApi(), off), ElementsAre(false, false));
}

TEST_F(ProgrammaticLaunchTest, ADriverWithoutLaunchKernelExLaunchesPlainly) {
  CudaApi api = FakeApi();
  api.LaunchKernelEx = nullptr;  // a driver before CUDA 12
  EXPECT_THAT(LaunchOnce(api), ElementsAre(false, false));
}

}  // namespace
}  // namespace ktune::client
