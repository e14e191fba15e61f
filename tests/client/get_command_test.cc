// `ktune get` (frontends/ktune/get_command.cc), the built program run against a fake ktuned.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "tests/client/fake_ktune_service.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/subprocess.h"

namespace ktune::client {
namespace {

using ::ktune::testing::FakeKtuned;
using ::testing::HasSubstr;

struct ProgramRun {
  int exit_code = -1;
  std::string output;  // stdout, then stderr
};

// Runs the built ktune with `args` to completion, hermetic (tests/testing/subprocess.h).
ProgramRun RunKtune(const std::vector<std::string>& args) {
  ::ktune::testing::Subprocess ktune(KTUNE_BINARY_DIR "/bin/ktune", args,
                                     ::ktune::testing::NewTempDir());
  ProgramRun run;
  run.exit_code = ktune.Wait();
  run.output = ktune.Stdout() + ktune.Stderr();
  return run;
}

v1::KernelArtifact Artifact() {
  v1::KernelArtifact a;
  ::ktune::testing::SetCubin(a, "fake cubin bytes");
  v1::KernelLaunch* l = a.add_launches();
  l->set_lowered_name("_Z6kernelPf");
  for (uint32_t g : {64u, 1u, 1u}) l->add_grid(g);
  for (uint32_t b : {256u, 1u, 1u}) l->add_block(b);
  l->add_args(0);
  l->add_args(1);
  v1::KernelArg* x = a.add_args();
  x->set_name("x");
  x->set_is_buffer(true);
  x->set_dtype("f32");
  x->set_count(16384);
  v1::KernelArg* n = a.add_args();
  n->set_name("n");
  n->set_scalar_type("i32");
  n->set_int_value(16384);
  (*a.mutable_params())["BLOCK"] = 256;
  a.mutable_knobs()->set_target("sm_90");
  a.mutable_metrics()->set_time_ns(2500);
  a.mutable_metrics()->set_gbps(1234.5);
  a.set_provenance(v1::EXACT);
  a.set_device_model("NVIDIA H200");
  a.set_template_id("scale");
  a.set_dtype("f32");
  (*a.mutable_shape())["n"] = 16384;
  a.set_nvrtc_version("12.8");
  return a;
}

TEST(GetCommandTest, PrintsTheArtifactAndWritesTheCubin) {
  FakeKtuned daemon;
  v1::GetKernelRequest seen;
  daemon.service().get_kernel = [&](grpc::ServerContext*, const v1::GetKernelRequest& req,
                                    v1::GetKernelResponse* resp) {
    seen = req;
    *resp->mutable_artifact() = Artifact();
    return grpc::Status::OK;
  };
  ASSERT_TRUE(daemon.Start());
  const std::string out = daemon.dir() + "/k.cubin";
  ProgramRun run = RunKtune({"get", "scale", "--dtype", "f32", "--shape", "n=16384", "--policy",
                               "fallback", "--daemon", daemon.target(), "--token", "tok", "--out",
                               out});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("provenance:  exact"));
  EXPECT_THAT(run.output, HasSubstr("NVIDIA H200 scale f32 n=16384"));
  EXPECT_THAT(run.output, HasSubstr("BLOCK=256"));
  EXPECT_THAT(run.output, HasSubstr("2.50 us"));
  EXPECT_THAT(run.output, HasSubstr("1234.50 GB/s"));
  EXPECT_THAT(run.output, HasSubstr("_Z6kernelPf grid 64x1x1 block 256x1x1 smem 0 args(x,n)"));
  EXPECT_EQ(seen.template_id(), "scale");
  EXPECT_EQ(seen.policy(), v1::FALLBACK);
  EXPECT_EQ(seen.shape().at("n"), 16384);
  EXPECT_THAT(daemon.service().authorizations(), ::testing::ElementsAre("Bearer tok"));
  std::ifstream file(out, std::ios::binary);
  std::stringstream bytes;
  bytes << file.rdbuf();
  EXPECT_EQ(bytes.str(), "fake cubin bytes");
  std::remove(out.c_str());
}

TEST(GetCommandTest, ExitStatuses) {
  FakeKtuned daemon;
  daemon.service().get_kernel = [](grpc::ServerContext*, const v1::GetKernelRequest&,
                                   v1::GetKernelResponse*) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no entry for scale f32 n=1");
  };
  ASSERT_TRUE(daemon.Start());
  ProgramRun miss = RunKtune({"get", "scale", "--dtype", "f32", "--shape", "n=1", "--daemon", daemon.target()});
  EXPECT_EQ(miss.exit_code, 2) << miss.output;
  EXPECT_THAT(miss.output, HasSubstr("ktune: no entry for scale f32 n=1"));

  ProgramRun bad_policy =
      RunKtune({"get", "scale", "--dtype", "f32", "--shape", "n=1", "--policy", "fast",
                "--daemon", daemon.target()});
  EXPECT_EQ(bad_policy.exit_code, 2) << bad_policy.output;
  EXPECT_THAT(bad_policy.output, HasSubstr("--policy"));

  ProgramRun bad_shape = RunKtune({"get", "scale", "--dtype", "f32", "--shape", "n", "--daemon", daemon.target()});
  EXPECT_EQ(bad_shape.exit_code, 2) << bad_shape.output;

  ProgramRun absent = RunKtune({"get", "scale", "--dtype", "f32", "--shape", "n=1", "--daemon",
                                 "unix://" + daemon.dir() + "/absent.sock"});
  EXPECT_EQ(absent.exit_code, 1) << absent.output;
  EXPECT_THAT(absent.output, HasSubstr("is unavailable"));
}

}  // namespace
}  // namespace ktune::client
