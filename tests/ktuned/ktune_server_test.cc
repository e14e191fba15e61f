// ktuned's service end to end: a real gRPC server on a unix socket in a temporary folder,
// over the test template "tiny", a FakeCompiler, a FakeGpu and a SQLite file.
#include "frontends/ktuned/ktune_server.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ktune/v1/ktune.grpc.pb.h"
#include "server/base/sha256.h"
#include "server/store/store_testing.h"
#include "tests/templates/template_fixture.h"
#include "tests/testing/fake_remote_tier.h"
#include "tests/testing/fakes.h"
#include "tests/testing/raw_call.h"
#include "tests/testing/status_matchers.h"

namespace ktune {
namespace {

using ::ktune::testing::kKtuneMethods;
using ::ktune::testing::kUnparsableBytes;
using ::ktune::testing::OkMeasurement;
using ::ktune::testing::RawCall;
using ::ktune::testing::RawReply;
using ::testing::HasSubstr;
using ::testing::Not;

// A FakeGpu whose memory size the test picks (0: the fake's own).
class SizedFakeGpu : public testing::FakeGpu {
 public:
  int64_t memory_bytes = 0;
  absl::StatusOr<v1::DeviceInfo> Info() override {
    absl::StatusOr<v1::DeviceInfo> info = FakeGpu::Info();
    if (info.ok() && memory_bytes > 0) info->set_total_memory_bytes(memory_bytes);
    return info;
  }
};

struct Reply {
  grpc::Status status;
  v1::GetKernelResponse response;
};

class KtuneServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::NewTempDir();
    db_ = dir_ + "/ktune.db";
    socket_ = dir_ + "/run/ktuned.sock";
    auto registry = LoadTemplateRegistry(testing::TestTemplatesDir());
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = *std::move(registry);
  }
  void TearDown() override { Stop(); }

  void Start() {
    auto store = store::OpenSqliteStore(db_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    ServerOptions o;
    o.listen = "unix://" + socket_;
    o.registry = registry_.get();
    o.store = store_.get();
    o.compiler = &compiler_;
    o.compile_threads = 2;
    o.token = token_;
    o.fleet = fleet_;
    o.gpu_factory = [this](int ordinal) -> absl::StatusOr<std::unique_ptr<Gpu>> {
      if (ordinal > 0) return absl::NotFoundError("no such GPU");
      auto gpu = std::make_unique<SizedFakeGpu>();
      gpu->memory_bytes = memory_bytes_;
      gpu->info_status = gpu_status_;
      gpu->script = [this](const std::string& name) { return script_(name); };
      gpu_ = gpu.get();
      return gpu;
    };
    auto server = StartKtuneServer(std::move(o));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel("unix://" + socket_, grpc::InsecureChannelCredentials());
    stub_ = v1::Ktune::NewStub(channel_);
  }
  void Stop() {
    stub_.reset();
    channel_.reset();
    if (server_) server_->Shutdown();
    server_.reset();
    store_.reset();
  }

  void Authorize(grpc::ClientContext* ctx, const std::string& token) {
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  }

  Reply Get(const v1::GetKernelRequest& req, absl::Duration deadline = absl::Seconds(20),
            const std::string& token = "") {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    Authorize(&ctx, token.empty() ? token_ : token);
    Reply r;
    r.status = stub_->GetKernel(&ctx, req, &r.response);
    return r;
  }
  static v1::GetKernelRequest Req(int64_t n, v1::Policy policy) {
    v1::GetKernelRequest r;
    r.set_template_id("tiny");
    r.set_dtype("f32");
    (*r.mutable_shape())["n"] = n;
    r.set_policy(policy);
    return r;
  }
  // All events of a Tune stream, and its status.
  grpc::Status TuneAll(const v1::TuneRequest& req, std::vector<v1::TuneEvent>* events) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
    Authorize(&ctx, token_);
    auto reader = stub_->Tune(&ctx, req);
    v1::TuneEvent e;
    while (reader->Read(&e)) events->push_back(e);
    return reader->Finish();
  }
  bool ListTemplatesWorks() {
    grpc::ClientContext ctx;
    Authorize(&ctx, token_);
    v1::ListTemplatesResponse resp;
    return stub_->ListTemplates(&ctx, {}, &resp).ok() && resp.templates_size() == 1;
  }
  // Every candidate takes `each` on the fake GPU.
  void SlowCandidates(absl::Duration each) {
    script_ = [each](const std::string&) {
      absl::SleepFor(each);
      return OkMeasurement(1000);
    };
  }
  // GetKernels over `keys`, and its status.
  grpc::Status GetMany(const std::vector<v1::GetKernelRequest>& keys,
                       v1::GetKernelsResponse* response,
                       absl::Duration deadline = absl::Seconds(20)) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    Authorize(&ctx, token_);
    v1::GetKernelsRequest req;
    for (const v1::GetKernelRequest& k : keys) *req.add_requests() = k;
    return stub_->GetKernels(&ctx, req, response);
  }
  // Polls CACHE_ONLY until it hits (a background job finished) or 10 s pass.
  Reply WaitForHit(int64_t n) {
    Reply r;
    for (int i = 0; i < 1000; ++i) {
      r = Get(Req(n, v1::CACHE_ONLY));
      if (r.status.ok()) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return r;
  }

  std::string dir_, db_, socket_, token_;
  std::unique_ptr<TemplateRegistry> registry_;
  std::unique_ptr<store::Store> store_;
  testing::FakeCompiler compiler_;
  std::function<v1::Measurement(const std::string&)> script_ = [](const std::string&) {
    return OkMeasurement(1000);
  };
  absl::Status gpu_status_;
  fleet::FleetTier* fleet_ = nullptr;  // the test's, when it wants one
  int64_t memory_bytes_ = 0;
  SizedFakeGpu* gpu_ = nullptr;
  std::unique_ptr<KtuneServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Ktune::Stub> stub_;
};

TEST_F(KtuneServerTest, MissThenTuneThenHit) {
  Start();
  struct stat st;
  ASSERT_EQ(stat(socket_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((dir_ + "/run").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  Reply miss = Get(Req(1000, v1::CACHE_ONLY));
  EXPECT_EQ(miss.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(miss.status.error_message(), HasSubstr("no entry for tiny f32 n=1000"));

  Reply tuned = Get(Req(1000, v1::TUNE));
  ASSERT_TRUE(tuned.status.ok()) << tuned.status.error_message();
  const v1::KernelArtifact& a = tuned.response.artifact();
  EXPECT_GT(tuned.response.tuning_job_id(), 0);
  EXPECT_EQ(a.provenance(), v1::EXACT);
  EXPECT_FALSE(a.cubin().empty());
  EXPECT_EQ(a.cubin_sha256(), Sha256Hex(a.cubin()));
  ASSERT_EQ(a.launches_size(), 1);
  EXPECT_THAT(a.launches(0).lowered_name(), HasSubstr("tiny<float"));
  EXPECT_EQ(a.launches(0).grid_size(), 3);
  EXPECT_EQ(a.launches(0).block_size(), 3);
  EXPECT_THAT(a.launches(0).args(), ::testing::ElementsAre(0, 1, 2));
  ASSERT_EQ(a.args_size(), 3);
  EXPECT_EQ(a.args(0).name(), "x");
  EXPECT_TRUE(a.args(0).is_buffer());
  EXPECT_EQ(a.args(0).count(), 1000);
  EXPECT_EQ(a.args(0).role(), v1::Buffer::INPUT);
  EXPECT_EQ(a.args(2).name(), "count");
  EXPECT_EQ(a.args(2).scalar_type(), "i32");
  EXPECT_EQ(a.args(2).int_value(), 1000);
  EXPECT_EQ(a.params().size(), 2u);
  EXPECT_THAT(a.knobs().target(), HasSubstr("sm_90"));
  EXPECT_EQ(a.metrics().time_ns(), 1000);
  EXPECT_EQ(a.template_id(), "tiny");
  EXPECT_EQ(a.dtype(), "f32");
  EXPECT_EQ(a.shape().at("n"), 1000);
  EXPECT_THAT(a.device_model(), HasSubstr("Fake GPU"));
  EXPECT_EQ(a.nvrtc_version(), "13.0");
  EXPECT_EQ(a.template_source_hash(), (*registry_->Get("tiny"))->source_hash());
  EXPECT_FALSE(a.stale());
  EXPECT_GT(a.entry_id(), 0);

  Reply hit = Get(Req(1000, v1::CACHE_ONLY));
  ASSERT_TRUE(hit.status.ok()) << hit.status.error_message();
  EXPECT_EQ(hit.response.artifact().cubin_sha256(), a.cubin_sha256());
  EXPECT_EQ(hit.response.artifact().entry_id(), a.entry_id());
  EXPECT_GT(hit.response.artifact().created_unix_ms(), 0);
  EXPECT_EQ(hit.response.tuning_job_id(), 0);

  // The other calls see it.
  grpc::ClientContext ctx;
  v1::ListEntriesRequest lreq;
  lreq.set_template_id("tiny");
  v1::ListEntriesResponse entries;
  ASSERT_TRUE(stub_->ListEntries(&ctx, lreq, &entries).ok());
  ASSERT_EQ(entries.entries_size(), 1);
  EXPECT_EQ(entries.entries(0).entry_id(), a.entry_id());
  EXPECT_FALSE(entries.entries(0).stale());
  // The speed-up's baseline, as GetKernel gives it.
  EXPECT_GT(a.metrics().default_time_ns(), 0);
  EXPECT_EQ(entries.entries(0).metrics().default_time_ns(), a.metrics().default_time_ns());
  grpc::ClientContext ctx2;
  v1::ListEntriesRequest stale_only;
  stale_only.set_stale_only(true);
  ASSERT_TRUE(stub_->ListEntries(&ctx2, stale_only, &entries).ok());
  EXPECT_EQ(entries.entries_size(), 0);
  grpc::ClientContext ctx3;
  v1::GetDevicesResponse devices;
  ASSERT_TRUE(stub_->GetDevices(&ctx3, {}, &devices).ok());
  EXPECT_FALSE(devices.compile_only());
  ASSERT_EQ(devices.devices_size(), 1);
  EXPECT_EQ(devices.devices(0).model_key(), a.device_model());
  EXPECT_TRUE(devices.devices(0).healthy());
  EXPECT_EQ(devices.devices(0).copy_gbps(), 4000);
}

// Hits are served from ktuned's artifact cache, which must never outlive a change to the
// file: another process deleting or corrupting the entry is seen by the very next call.
TEST_F(KtuneServerTest, RepeatedHitsSeeChangesMadeByOtherProcesses) {
  Start();
  Reply tuned = Get(Req(1000, v1::TUNE));
  ASSERT_TRUE(tuned.status.ok()) << tuned.status.error_message();
  for (int i = 0; i < 3; ++i) {
    for (v1::Policy p : {v1::CACHE_ONLY, v1::TUNE, v1::FALLBACK}) {
      Reply hit = Get(Req(1000, p));
      ASSERT_TRUE(hit.status.ok()) << hit.status.error_message();
      EXPECT_EQ(hit.response.artifact().cubin_sha256(), tuned.response.artifact().cubin_sha256());
      EXPECT_EQ(hit.response.artifact().entry_id(), tuned.response.artifact().entry_id());
      EXPECT_EQ(hit.response.tuning_job_id(), 0);
    }
  }
  // Another connection (as `ktune cache import` would be) overwrites the cubin: the next hit
  // reads the row again, and its sha256 check refuses it.
  ASSERT_OK(store::ExecSqlForTesting(db_, "UPDATE entries SET cubin = x'00'"));
  Reply corrupt = Get(Req(1000, v1::CACHE_ONLY));
  EXPECT_EQ(corrupt.status.error_code(), grpc::StatusCode::DATA_LOSS)
      << corrupt.status.error_message();
  ASSERT_OK(store::ExecSqlForTesting(db_, "DELETE FROM entries"));
  Reply gone = Get(Req(1000, v1::CACHE_ONLY));
  EXPECT_EQ(gone.status.error_code(), grpc::StatusCode::NOT_FOUND) << gone.status.error_message();
  // A new tune is served, and cached, again.
  Reply retuned = Get(Req(1000, v1::TUNE));
  ASSERT_TRUE(retuned.status.ok()) << retuned.status.error_message();
  Reply hit = Get(Req(1000, v1::CACHE_ONLY));
  ASSERT_TRUE(hit.status.ok()) << hit.status.error_message();
  EXPECT_EQ(hit.response.artifact().entry_id(), retuned.response.artifact().entry_id());
}

TEST_F(KtuneServerTest, FallbackDefaultThenBackgroundTune) {
  Start();
  Reply fb = Get(Req(1000, v1::FALLBACK));
  ASSERT_TRUE(fb.status.ok()) << fb.status.error_message();
  EXPECT_EQ(fb.response.artifact().provenance(), v1::DEFAULT);
  EXPECT_EQ(fb.response.artifact().params().at("BLOCK"), 128);  // the manifest's defaults
  EXPECT_EQ(fb.response.artifact().params().at("VEC"), 1);
  EXPECT_EQ(fb.response.artifact().metrics().time_ns(), 0);
  EXPECT_EQ(fb.response.artifact().entry_id(), 0);
  EXPECT_EQ(fb.response.artifact().cubin_sha256(), Sha256Hex(fb.response.artifact().cubin()));
  EXPECT_GT(fb.response.tuning_job_id(), 0);
  Reply hit = WaitForHit(1000);
  ASSERT_TRUE(hit.status.ok()) << hit.status.error_message();
  EXPECT_EQ(hit.response.artifact().provenance(), v1::EXACT);
}

TEST_F(KtuneServerTest, FallbackFromANeighbour) {
  Start();
  ASSERT_TRUE(Get(Req(1024, v1::TUNE)).status.ok());
  ASSERT_TRUE(Get(Req(65536, v1::TUNE)).status.ok());
  Reply fb = Get(Req(2048, v1::FALLBACK));
  ASSERT_TRUE(fb.status.ok()) << fb.status.error_message();
  const v1::KernelArtifact& a = fb.response.artifact();
  EXPECT_EQ(a.provenance(), v1::NEAREST);
  EXPECT_EQ(a.shape().at("n"), 1024);  // the neighbour's key...
  EXPECT_EQ(a.args(0).count(), 2048);  // ...bound for the request's shape
  EXPECT_EQ(a.args(2).int_value(), 2048);
  const int64_t per_block = a.params().at("BLOCK") * a.params().at("VEC");
  EXPECT_EQ(a.launches(0).grid(0), static_cast<uint32_t>((2048 + per_block - 1) / per_block));
  EXPECT_GT(fb.response.tuning_job_id(), 0);
  EXPECT_TRUE(WaitForHit(2048).status.ok());
}

TEST_F(KtuneServerTest, ConcurrentIdenticalTunesShareOneJob) {
  SlowCandidates(absl::Milliseconds(1));
  Start();
  std::vector<Reply> replies(20);
  std::vector<std::thread> threads;
  for (int i = 0; i < 20; ++i) {
    threads.emplace_back([&, i] { replies[i] = Get(Req(1000, v1::TUNE)); });
  }
  for (auto& t : threads) t.join();
  for (const Reply& r : replies) {
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.response.artifact().cubin_sha256(), replies[0].response.artifact().cubin_sha256());
    EXPECT_EQ(r.response.artifact().entry_id(), replies[0].response.artifact().entry_id());
  }
  EXPECT_EQ(gpu_->problems, 1);  // one RunTuning
}

TEST_F(KtuneServerTest, BadRequestsNameTheirField) {
  memory_bytes_ = 4 << 20;  // 4 MiB: n = 2^20 f32 needs 8 MiB of buffers
  Start();
  struct Case {
    std::string name;
    std::function<void(v1::GetKernelRequest*)> edit;
    grpc::StatusCode code;
    std::string field;
  };
  using C = grpc::StatusCode;
  const std::vector<Case> cases = {
      {"no template", [](auto* r) { r->clear_template_id(); }, C::INVALID_ARGUMENT, "template_id"},
      {"unknown template", [](auto* r) { r->set_template_id("nope"); }, C::NOT_FOUND, "template_id: unknown template 'nope'"},
      {"no dtype", [](auto* r) { r->clear_dtype(); }, C::INVALID_ARGUMENT, "dtype: required"},
      {"unknown dtype", [](auto* r) { r->set_dtype("f64"); }, C::INVALID_ARGUMENT, "dtype: unknown 'f64'"},
      {"i32 dtype", [](auto* r) { r->set_dtype("i32"); }, C::INVALID_ARGUMENT, "dtype"},
      {"dtype not the template's", [](auto* r) { r->set_dtype("f16"); }, C::INVALID_ARGUMENT, "dtype: template tiny has no dtype f16"},
      {"no shape", [](auto* r) { r->clear_shape(); }, C::INVALID_ARGUMENT, "shape: required"},
      {"missing dim", [](auto* r) { r->clear_shape(); (*r->mutable_shape())["m"] = 3; }, C::INVALID_ARGUMENT, "shape: missing dim 'n'"},
      {"unknown dim", [](auto* r) { (*r->mutable_shape())["m"] = 3; }, C::INVALID_ARGUMENT, "shape: unknown dim 'm'"},
      {"zero dim", [](auto* r) { (*r->mutable_shape())["n"] = 0; }, C::INVALID_ARGUMENT, "shape: dim 'n' = 0"},
      {"negative dim", [](auto* r) { (*r->mutable_shape())["n"] = -5; }, C::INVALID_ARGUMENT, "shape: dim 'n' = -5"},
      {"huge dim", [](auto* r) { (*r->mutable_shape())["n"] = int64_t{1} << 40; }, C::INVALID_ARGUMENT, "shape: dim 'n'"},
      {"int64 max dim", [](auto* r) { (*r->mutable_shape())["n"] = std::numeric_limits<int64_t>::max(); }, C::INVALID_ARGUMENT, "shape: dim 'n'"},
      {"buffers too large", [](auto* r) { (*r->mutable_shape())["n"] = 1 << 20; }, C::INVALID_ARGUMENT, "shape: the buffers need"},
      {"gpu out of range", [](auto* r) { r->set_gpu(1); }, C::INVALID_ARGUMENT, "gpu: ordinal 1 out of range"},
      {"negative gpu", [](auto* r) { r->set_gpu(-1); }, C::INVALID_ARGUMENT, "gpu: ordinal -1"},
      {"policy out of range", [](auto* r) { r->set_policy(static_cast<v1::Policy>(7)); }, C::INVALID_ARGUMENT, "policy: unknown value 7"},
  };
  int checked = 0;
  for (const Case& c : cases) {
    v1::GetKernelRequest req = Req(1000, v1::CACHE_ONLY);
    c.edit(&req);
    Reply r = Get(req);
    EXPECT_EQ(r.status.error_code(), c.code) << c.name << ": " << r.status.error_message();
    EXPECT_THAT(r.status.error_message(), HasSubstr(c.field)) << c.name;
    EXPECT_TRUE(ListTemplatesWorks()) << "after " << c.name;
    ++checked;
  }
  struct TuneCase {
    std::string name;
    std::function<void(v1::TuneRequest*)> edit;
    std::string field;
  };
  const std::vector<TuneCase> tune_cases = {
      {"negative budget", [](auto* r) { r->set_budget(-1); }, "budget: must be >= 0"},
      {"unknown strategy", [](auto* r) { r->set_strategy("annealing"); }, "strategy: unknown strategy 'annealing'"},
      {"no template", [](auto* r) { r->clear_template_id(); }, "template_id: required"},
      {"no shape", [](auto* r) { r->clear_shape(); }, "shape: required"},
      {"gpu out of range", [](auto* r) { r->set_gpu(3); }, "gpu: ordinal 3"},
  };
  for (const TuneCase& c : tune_cases) {
    v1::TuneRequest req;
    req.set_template_id("tiny");
    req.set_dtype("f32");
    (*req.mutable_shape())["n"] = 1000;
    c.edit(&req);
    std::vector<v1::TuneEvent> events;
    grpc::Status s = TuneAll(req, &events);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.name << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.field)) << c.name;
    EXPECT_TRUE(events.empty()) << c.name;
    EXPECT_TRUE(ListTemplatesWorks()) << "after " << c.name;
    ++checked;
  }
  EXPECT_GE(checked, 20);
  EXPECT_EQ(gpu_->problems, 0);
}

TEST_F(KtuneServerTest, TokenIsRequired) {
  token_ = "s3cret";
  Start();
  {
    grpc::ClientContext ctx;
    v1::GetKernelResponse resp;
    grpc::Status s = stub_->GetKernel(&ctx, Req(1000, v1::CACHE_ONLY), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(s.error_message(), HasSubstr("authorization"));
  }
  Reply wrong = Get(Req(1000, v1::CACHE_ONLY), absl::Seconds(5), "guess");
  EXPECT_EQ(wrong.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(wrong.status.error_message(), HasSubstr("wrong bearer token"));
  {
    grpc::ClientContext ctx;
    v1::ListTemplatesResponse resp;
    EXPECT_EQ(stub_->ListTemplates(&ctx, {}, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    v1::TuneRequest req;
    grpc::ClientContext ctx;
    auto reader = stub_->Tune(&ctx, req);
    v1::TuneEvent e;
    EXPECT_FALSE(reader->Read(&e));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  Reply right = Get(Req(1000, v1::CACHE_ONLY));
  EXPECT_EQ(right.status.error_code(), grpc::StatusCode::NOT_FOUND);  // past the check
  // The scheme is case-insensitive (it used to have to be "Bearer"); the token is not.
  for (const char* scheme : {"bearer", "BEARER"}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", absl::StrCat(scheme, " s3cret"));
    v1::GetKernelResponse resp;
    EXPECT_EQ(stub_->GetKernel(&ctx, Req(1000, v1::CACHE_ONLY), &resp).error_code(),
              grpc::StatusCode::NOT_FOUND)
        << scheme;
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer S3CRET");
    v1::GetKernelResponse resp;
    EXPECT_EQ(stub_->GetKernel(&ctx, Req(1000, v1::CACHE_ONLY), &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
}

// gRPC's own handlers used to answer these UNIMPLEMENTED with an empty message, the token
// check skipped: the caller could not tell a bad request from a missing method.
TEST_F(KtuneServerTest, UnparsableRequestsAreInvalidArgumentNamingTheirType) {
  Start();
  for (const auto& [method, request] : kKtuneMethods) {
    RawReply r = RawCall(channel_, method, kUnparsableBytes);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method << ": " << r.status.error_message();
    EXPECT_THAT(r.status.error_message(),
                HasSubstr(absl::StrCat(method, ": the request bytes do not parse as ", request)));
    EXPECT_EQ(r.answers, 0) << method;
  }
  // It goes on serving, the same raw path included: no bytes are an empty request.
  EXPECT_TRUE(ListTemplatesWorks());
  EXPECT_EQ(Get(Req(1000, v1::CACHE_ONLY)).status.error_code(), grpc::StatusCode::NOT_FOUND);
  RawReply empty = RawCall(channel_, "/ktune.v1.Ktune/ListTemplates", "");
  EXPECT_TRUE(empty.status.ok()) << empty.status.error_message();
  EXPECT_EQ(empty.answers, 1);
}

TEST_F(KtuneServerTest, UnparsableRequestsWithoutTheTokenAreUnauthenticated) {
  token_ = "s3cret";
  Start();
  for (const auto& [method, request] : kKtuneMethods) {
    for (const char* token : {"", "guess"}) {
      RawReply r = RawCall(channel_, method, kUnparsableBytes, token);
      EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << method << " token '" << token << "': " << r.status.error_message();
      EXPECT_THAT(r.status.error_message(), Not(HasSubstr("parse")));
    }
    RawReply r = RawCall(channel_, method, kUnparsableBytes, token_);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method << ": " << r.status.error_message();
  }
}

TEST_F(KtuneServerTest, RestartKeepsEntries) {
  Start();
  Reply tuned = Get(Req(1000, v1::TUNE));
  ASSERT_TRUE(tuned.status.ok()) << tuned.status.error_message();
  Stop();
  Start();
  Reply hit = Get(Req(1000, v1::CACHE_ONLY));
  ASSERT_TRUE(hit.status.ok()) << hit.status.error_message();
  EXPECT_EQ(hit.response.artifact().cubin_sha256(), tuned.response.artifact().cubin_sha256());
  EXPECT_EQ(gpu_->problems, 0);  // the new GPU never tuned
}

TEST_F(KtuneServerTest, TuneStreamsProgressThenTheArtifact) {
  SlowCandidates(absl::Milliseconds(2));
  Start();
  v1::TuneRequest req;
  req.set_template_id("tiny");
  req.set_dtype("f32");
  (*req.mutable_shape())["n"] = 1000;
  req.set_strategy("random");
  req.set_budget(10);
  std::vector<v1::TuneEvent> events;
  grpc::Status s = TuneAll(req, &events);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_GE(events.size(), 2u);
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    ASSERT_TRUE(events[i].has_progress()) << i;
    EXPECT_EQ(events[i].progress().total(), 10);
    EXPECT_GT(events[i].progress().job_id(), 0);
    EXPECT_EQ(events[i].progress().last_outcome(), "ok");
  }
  EXPECT_EQ(events[events.size() - 2].progress().done(), 10);
  ASSERT_TRUE(events.back().has_artifact());
  EXPECT_EQ(events.back().artifact().provenance(), v1::EXACT);

  // Fresh entry, no force: just the artifact.
  events.clear();
  ASSERT_TRUE(TuneAll(req, &events).ok());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].has_artifact());
  EXPECT_EQ(gpu_->problems, 1);
  // force: a new job.
  req.set_force(true);
  events.clear();
  ASSERT_TRUE(TuneAll(req, &events).ok());
  EXPECT_GE(events.size(), 2u);
  EXPECT_EQ(gpu_->problems, 2);
}

TEST_F(KtuneServerTest, DeadlinePassesWhileTheJobGoesOn) {
  SlowCandidates(absl::Milliseconds(3));
  Start();
  const absl::Time start = absl::Now();
  Reply r = Get(Req(1000, v1::TUNE), absl::Milliseconds(50));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << r.status.error_message();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_TRUE(ListTemplatesWorks());
  Reply hit = WaitForHit(1000);  // the job finished without its caller
  ASSERT_TRUE(hit.status.ok()) << hit.status.error_message();
  EXPECT_EQ(gpu_->problems, 1);
}

TEST_F(KtuneServerTest, WithoutAGpuLookupsAndFallbackWork) {
  Start();
  ASSERT_TRUE(Get(Req(1000, v1::TUNE)).status.ok());
  Stop();
  gpu_status_ = absl::UnavailableError("no CUDA driver: dlopen libcuda.so.1 failed");
  Start();
  EXPECT_TRUE(server_->compile_only());
  Reply tune = Get(Req(2000, v1::TUNE));
  EXPECT_EQ(tune.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(tune.status.error_message(), HasSubstr("no CUDA driver"));
  Reply hit = Get(Req(1000, v1::CACHE_ONLY));
  ASSERT_TRUE(hit.status.ok()) << hit.status.error_message();
  EXPECT_EQ(hit.response.artifact().provenance(), v1::EXACT);
  Reply fb = Get(Req(2000, v1::FALLBACK));
  ASSERT_TRUE(fb.status.ok()) << fb.status.error_message();
  EXPECT_EQ(fb.response.artifact().provenance(), v1::NEAREST);
  EXPECT_EQ(fb.response.tuning_job_id(), 0);  // nothing to tune on
  std::vector<v1::TuneEvent> events;
  v1::TuneRequest req;
  req.set_template_id("tiny");
  req.set_dtype("f32");
  (*req.mutable_shape())["n"] = 2000;
  EXPECT_EQ(TuneAll(req, &events).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  grpc::ClientContext ctx;
  v1::GetDevicesResponse devices;
  ASSERT_TRUE(stub_->GetDevices(&ctx, {}, &devices).ok());
  EXPECT_TRUE(devices.compile_only());
  ASSERT_EQ(devices.devices_size(), 1);
  EXPECT_FALSE(devices.devices(0).healthy());
  EXPECT_THAT(devices.devices(0).status(), HasSubstr("no CUDA driver"));
}

TEST_F(KtuneServerTest, EmptyStoreWithoutAGpuCompilesTheDefault) {
  gpu_status_ = absl::UnavailableError("no CUDA driver");
  Start();
  EXPECT_EQ(Get(Req(1000, v1::CACHE_ONLY)).status.error_code(), grpc::StatusCode::NOT_FOUND);
  Reply fb = Get(Req(1000, v1::FALLBACK));
  ASSERT_TRUE(fb.status.ok()) << fb.status.error_message();
  EXPECT_EQ(fb.response.artifact().provenance(), v1::DEFAULT);
  EXPECT_EQ(fb.response.artifact().knobs().target(), "sm_90");
}

// With a fleet tier: winners are published, GetDevices reports the tier's counters, and an
// outage fails no call (a miss is NOT_FOUND, as without a tier) and shows as degraded.
TEST_F(KtuneServerTest, GetDevicesReportsTheFleetTierAndAnOutageFailsNothing) {
  auto state = std::make_shared<testing::FakeTierState>();
  fleet::FleetOptions fo;
  fo.host_id = "daemon-1";
  fo.log = [](const std::string&) {};
  fleet::FleetTier tier(std::make_unique<testing::FakeRemoteTier>(state), fo);
  fleet_ = &tier;
  Start();
  ASSERT_TRUE(Get(Req(1000, v1::TUNE)).status.ok());
  auto devices = [this] {
    grpc::ClientContext ctx;
    v1::GetDevicesResponse r;
    EXPECT_TRUE(stub_->GetDevices(&ctx, {}, &r).ok());
    return r;
  };
  v1::GetDevicesResponse d = devices();
  ASSERT_TRUE(d.has_fleet());
  EXPECT_EQ(d.fleet().remote(), "fake://tier");
  EXPECT_EQ(d.fleet().host_id(), "daemon-1");
  EXPECT_EQ(d.fleet().publishes(), 1);
  EXPECT_GE(d.fleet().misses(), 1);  // the TUNE's lookup, and the job's before it tunes
  EXPECT_FALSE(d.fleet().degraded());
  EXPECT_EQ(state->Records(), 1u);

  state->SetDown(true);
  const Reply miss = Get(Req(2000, v1::CACHE_ONLY));
  EXPECT_EQ(miss.status.error_code(), grpc::StatusCode::NOT_FOUND) << miss.status.error_message();
  EXPECT_TRUE(Get(Req(1000, v1::CACHE_ONLY)).status.ok());  // the local store serves
  EXPECT_TRUE(Get(Req(3000, v1::TUNE)).status.ok());         // tunes alone
  d = devices();
  EXPECT_TRUE(d.fleet().degraded());
  EXPECT_EQ(d.fleet().queued(), 1);
  EXPECT_TRUE(server_->serving());
  Stop();
}

// GetKernels answers each key as GetKernel would, in order, with its own status: a bad or
// missing key fails alone, naming its index and field.
TEST_F(KtuneServerTest, GetKernelsAnswersEachKeyWithItsOwnStatus) {
  Start();
  ASSERT_TRUE(Get(Req(1000, v1::TUNE)).status.ok());
  v1::GetKernelRequest bad_dtype = Req(1000, v1::CACHE_ONLY);
  bad_dtype.set_dtype("f64");
  v1::GetKernelRequest missing_dim = Req(1000, v1::FALLBACK);
  missing_dim.clear_shape();
  (*missing_dim.mutable_shape())["m"] = 3;
  v1::GetKernelRequest unknown = Req(1000, v1::CACHE_ONLY);
  unknown.set_template_id("nope");
  const std::vector<v1::GetKernelRequest> keys = {
      Req(1000, v1::CACHE_ONLY), Req(5000, v1::CACHE_ONLY), bad_dtype, Req(2000, v1::FALLBACK),
      missing_dim, unknown, Req(1000, v1::FALLBACK)};
  v1::GetKernelsResponse resp;
  grpc::Status s = GetMany(keys, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.results_size(), 7);
  const v1::KernelResult& hit = resp.results(0);
  EXPECT_EQ(hit.code(), grpc::StatusCode::OK) << hit.message();
  EXPECT_EQ(hit.response().artifact().provenance(), v1::EXACT);
  EXPECT_EQ(hit.response().artifact().cubin_sha256(),
            Sha256Hex(hit.response().artifact().cubin()));
  EXPECT_EQ(resp.results(1).code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(resp.results(1).message(), HasSubstr("requests[1]: no entry for tiny f32 n=5000"));
  EXPECT_FALSE(resp.results(1).has_response());
  EXPECT_EQ(resp.results(2).code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(resp.results(2).message(), HasSubstr("requests[2].dtype: unknown 'f64'"));
  const v1::KernelResult& fb = resp.results(3);
  ASSERT_EQ(fb.code(), grpc::StatusCode::OK) << fb.message();
  EXPECT_EQ(fb.response().artifact().provenance(), v1::NEAREST);
  EXPECT_EQ(fb.response().artifact().args(0).count(), 2000);
  EXPECT_GT(fb.response().tuning_job_id(), 0);
  EXPECT_EQ(resp.results(4).code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(resp.results(4).message(), HasSubstr("requests[4].shape: missing dim 'n'"));
  EXPECT_EQ(resp.results(5).code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(resp.results(5).message(),
              HasSubstr("requests[5].template_id: unknown template 'nope'"));
  EXPECT_EQ(resp.results(6).code(), grpc::StatusCode::OK) << resp.results(6).message();
  EXPECT_EQ(resp.results(6).response().artifact().entry_id(), hit.response().artifact().entry_id());
  for (const v1::KernelResult& r : resp.results()) EXPECT_FALSE(r.retry());
  // The FALLBACK key's background job lands as it would from GetKernel.
  EXPECT_TRUE(WaitForHit(2000).status.ok());
}

TEST_F(KtuneServerTest, GetKernelsRefusesABatchItCannotTake) {
  token_ = "s3cret";
  Start();
  v1::GetKernelsResponse resp;
  grpc::Status empty = GetMany({}, &resp);
  EXPECT_EQ(empty.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(empty.error_message(), HasSubstr("requests: empty"));
  std::vector<v1::GetKernelRequest> many(v1::MAX_KERNELS_PER_CALL + 1,
                                         Req(1000, v1::CACHE_ONLY));
  grpc::Status too_many = GetMany(many, &resp);
  EXPECT_EQ(too_many.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_many.error_message(), HasSubstr("requests: 257 keys; at most 256"));
  many.pop_back();
  grpc::Status full = GetMany(many, &resp);
  ASSERT_TRUE(full.ok()) << full.error_message();
  ASSERT_EQ(resp.results_size(), v1::MAX_KERNELS_PER_CALL);
  EXPECT_EQ(resp.results(255).code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(resp.results(255).message(), HasSubstr("requests[255]: "));
  {
    grpc::ClientContext ctx;  // no token
    v1::GetKernelsRequest req;
    *req.add_requests() = Req(1000, v1::CACHE_ONLY);
    EXPECT_EQ(stub_->GetKernels(&ctx, req, &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(gpu_->problems, 0);
}

// A batch whose TUNE key outlasts the caller's deadline fails as a whole with
// DEADLINE_EXCEEDED; the job goes on.
TEST_F(KtuneServerTest, GetKernelsDeadlinePassesWhileTheJobGoesOn) {
  SlowCandidates(absl::Milliseconds(3));
  Start();
  v1::GetKernelsResponse resp;
  grpc::Status s = GetMany({Req(1000, v1::CACHE_ONLY), Req(1000, v1::TUNE)}, &resp,
                           absl::Milliseconds(50));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_TRUE(WaitForHit(1000).status.ok());
}

}  // namespace
}  // namespace ktune
