// libktune_client against an in-process fake ktuned on a unix socket: every artifact field
// across the edge, integrity, status mapping, metadata, deadlines, the Tune stream, an
// absent daemon; LoadedKernel's checks that need no GPU.
#include "client/lib/ktune_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "client/lib/cuda_api.h"
#include "client/lib/loaded_kernel.h"
#include "client/lib/proto_convert.h"
#include "server/base/cuda_result.h"
#include "tests/client/fake_ktune_service.h"
#include "tests/testing/status_matchers.h"

namespace ktune::client {
namespace {

using ::ktune::testing::FakeKtuned;
using ::ktune::testing::IsOk;
using ::ktune::testing::SetCubin;
using ::ktune::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;

// Every field of `messages` together, by number, that is set in at least one of them.
std::set<int> SetFields(const std::vector<const google::protobuf::Message*>& messages) {
  std::set<int> numbers;
  for (const google::protobuf::Message* m : messages) {
    std::vector<const google::protobuf::FieldDescriptor*> fields;
    m->GetReflection()->ListFields(*m, &fields);
    for (const auto* f : fields) numbers.insert(f->number());
  }
  return numbers;
}
std::set<int> AllFields(const google::protobuf::Descriptor* d) {
  std::set<int> numbers;
  for (int i = 0; i < d->field_count(); ++i) numbers.insert(d->field(i)->number());
  return numbers;
}

// An artifact with every field set (checked by FullArtifactSetsEveryField).
v1::KernelArtifact FullArtifact() {
  v1::KernelArtifact a;
  SetCubin(a, std::string("\x7f" "ELF fake cubin\0with a nul", 25));
  v1::KernelLaunch* l = a.add_launches();
  l->set_lowered_name("_Z7rmsnormILi256EEvPKfS1_Pff");
  for (uint32_t g : {4096u, 2u, 1u}) l->add_grid(g);
  for (uint32_t b : {256u, 1u, 1u}) l->add_block(b);
  l->set_shared_bytes(65536);
  for (int i : {0, 1, 2, 3}) l->add_args(i);
  l->set_programmatic(true);
  v1::KernelLaunch* l2 = a.add_launches();
  l2->set_lowered_name("finish");
  for (uint32_t g : {1u, 1u, 1u}) l2->add_grid(g);
  for (uint32_t b : {32u, 1u, 1u}) l2->add_block(b);
  l2->add_args(2);
  v1::KernelArg* x = a.add_args();
  x->set_name("x");
  x->set_is_buffer(true);
  x->set_dtype("bf16");
  x->set_count(4096 * 8192);
  x->set_role(v1::Buffer::INPUT);
  x->set_alignment(16);
  v1::KernelArg* w = a.add_args();
  w->set_name("scratch");
  w->set_is_buffer(true);
  w->set_dtype("f32");
  w->set_count(128);
  w->set_role(v1::Buffer::SCRATCH);
  w->set_scratch_fill(v1::Fill::ZERO);
  v1::KernelArg* out = a.add_args();
  out->set_name("out");
  out->set_is_buffer(true);
  out->set_dtype("bf16");
  out->set_count(4096 * 8192);
  out->set_role(v1::Buffer::OUTPUT);
  v1::KernelArg* eps = a.add_args();
  eps->set_name("eps");
  eps->set_scalar_type("f32");
  eps->set_number(1e-6);
  eps->set_int_value(-7);
  // A tensor map over x (no launch takes it).
  v1::KernelArg* map = a.add_args();
  map->set_name("x_map");
  map->set_scalar_type("tensor_map");
  v1::BoundTensorMap* t = map->mutable_tensor_map();
  t->set_buffer("x");
  t->set_buffer_arg(0);
  t->set_dtype("bf16");
  for (int64_t d : {8192, 4096}) t->add_dims(d);
  t->add_strides(8192 * 2);
  for (int64_t b : {64, 128}) t->add_box(b);
  for (int64_t e : {1, 1}) t->add_element_strides(e);
  t->set_swizzle(v1::TensorMap::SWIZZLE_128B);
  t->set_interleave(v1::TensorMap::INTERLEAVE_NONE);
  t->set_l2_promotion(v1::TensorMap::L2_PROMOTION_256B);
  t->set_oob_fill(v1::TensorMap::OOB_FILL_NAN);
  (*a.mutable_params())["BLOCK"] = 256;
  (*a.mutable_params())["VEC"] = 8;
  a.mutable_knobs()->set_maxrregcount(64);
  a.mutable_knobs()->set_min_blocks(2);
  a.mutable_knobs()->set_fast_math(true);
  a.mutable_knobs()->set_target("sm_90a");
  v1::KernelMetrics* m = a.mutable_metrics();
  m->set_time_ns(12345.5);
  m->set_spread_ns(12.25);
  m->set_registers(40);
  m->set_spill_bytes(8);
  m->set_occupancy(0.75);
  m->set_gbps(3900.5);
  m->set_gflops(77.25);
  m->set_ceiling_fraction(0.82);
  m->set_default_time_ns(9100);
  a.set_provenance(v1::NEAREST);
  a.set_device_model("NVIDIA H200|sm_90|132");
  a.set_template_id("rmsnorm");
  a.set_dtype("bf16");
  (*a.mutable_shape())["tokens"] = 2048;
  (*a.mutable_shape())["hidden"] = 8192;
  a.set_template_source_hash("abc123");
  a.set_nvrtc_version("12.8");
  a.set_stale(true);
  a.set_entry_id(42);
  a.set_created_unix_ms(1700000000123);
  return a;
}

TEST(FullArtifactTest, SetsEveryField) {
  const v1::KernelArtifact a = FullArtifact();
  EXPECT_EQ(SetFields({&a}), AllFields(v1::KernelArtifact::descriptor()));
  EXPECT_EQ(SetFields({&a.launches(0)}), AllFields(v1::KernelLaunch::descriptor()));
  EXPECT_EQ(SetFields({&a.args(0), &a.args(1), &a.args(2), &a.args(3), &a.args(4)}),
            AllFields(v1::KernelArg::descriptor()));
  EXPECT_EQ(SetFields({&a.knobs()}), AllFields(v1::Knobs::descriptor()));
  EXPECT_EQ(SetFields({&a.metrics()}), AllFields(v1::KernelMetrics::descriptor()));
}

class ClientTest : public ::testing::Test {
 protected:
  void StartOrDie() { ASSERT_TRUE(daemon_.Start()) << "fake ktuned did not start"; }
  std::unique_ptr<KtuneClient> NewClient(ClientOptions options = {}) {
    absl::StatusOr<std::unique_ptr<KtuneClient>> c = Connect(daemon_.target(), options);
    EXPECT_OK(c.status());
    return c.ok() ? *std::move(c) : nullptr;
  }
  static KernelRequest Request() {
    KernelRequest r;
    r.template_id = "rmsnorm";
    r.dtype = "bf16";
    r.shape = {{"tokens", 4096}, {"hidden", 8192}};
    return r;
  }

  FakeKtuned daemon_;
};

TEST_F(ClientTest, GetKernelRoundTripsEveryField) {
  v1::GetKernelRequest seen;
  daemon_.service().get_kernel = [&](grpc::ServerContext*, const v1::GetKernelRequest& req,
                                     v1::GetKernelResponse* resp) {
    seen = req;
    *resp->mutable_artifact() = FullArtifact();
    resp->set_tuning_job_id(9);
    return grpc::Status::OK;
  };
  StartOrDie();
  auto client = NewClient();
  KernelRequest request = Request();
  request.policy = Policy::kFallback;
  request.gpu = 1;
  ASSERT_OK_AND_ASSIGN(KernelArtifact a, client->GetKernel(request));

  EXPECT_EQ(seen.template_id(), "rmsnorm");
  EXPECT_EQ(seen.dtype(), "bf16");
  EXPECT_EQ(seen.shape().at("tokens"), 4096);
  EXPECT_EQ(seen.shape().at("hidden"), 8192);
  EXPECT_EQ(seen.shape().size(), 2u);
  EXPECT_EQ(seen.policy(), v1::FALLBACK);
  EXPECT_EQ(seen.gpu(), 1);

  const v1::KernelArtifact p = FullArtifact();
  EXPECT_EQ(a.cubin, p.cubin());
  EXPECT_EQ(a.cubin.size(), 25u);
  EXPECT_EQ(a.cubin_sha256, p.cubin_sha256());
  ASSERT_EQ(a.launches.size(), 2u);
  EXPECT_EQ(a.launches[0].lowered_name, "_Z7rmsnormILi256EEvPKfS1_Pff");
  EXPECT_THAT(a.launches[0].grid, ElementsAre(4096u, 2u, 1u));
  EXPECT_THAT(a.launches[0].block, ElementsAre(256u, 1u, 1u));
  EXPECT_EQ(a.launches[0].shared_bytes, 65536u);
  EXPECT_THAT(a.launches[0].args, ElementsAre(0, 1, 2, 3));
  EXPECT_TRUE(a.launches[0].programmatic);
  EXPECT_FALSE(a.launches[1].programmatic);
  EXPECT_EQ(a.launches[1].lowered_name, "finish");
  EXPECT_THAT(a.launches[1].block, ElementsAre(32u, 1u, 1u));
  EXPECT_THAT(a.launches[1].args, ElementsAre(2));
  ASSERT_EQ(a.args.size(), 5u);
  EXPECT_EQ(a.args[0].name, "x");
  EXPECT_TRUE(a.args[0].is_buffer);
  EXPECT_EQ(a.args[0].dtype, "bf16");
  EXPECT_EQ(a.args[0].count, 4096 * 8192);
  EXPECT_EQ(a.args[0].role, BufferRole::kInput);
  EXPECT_EQ(a.args[0].alignment, 16);
  EXPECT_EQ(a.args[1].alignment, 0);  // unset: a daemon that predates it
  EXPECT_EQ(a.args[1].role, BufferRole::kScratch);
  EXPECT_EQ(a.args[1].scratch_fill, FillKind::kZero);
  EXPECT_EQ(a.args[2].role, BufferRole::kOutput);
  EXPECT_EQ(a.args[3].name, "eps");
  EXPECT_FALSE(a.args[3].is_buffer);
  EXPECT_EQ(a.args[3].scalar_type, "f32");
  EXPECT_DOUBLE_EQ(a.args[3].number, 1e-6);
  EXPECT_EQ(a.args[3].int_value, -7);
  EXPECT_EQ(a.args[4].scalar_type, "tensor_map");
  const TensorMapArg& t = a.args[4].tensor_map;
  EXPECT_EQ(t.buffer, "x");
  EXPECT_EQ(t.buffer_arg, 0);
  EXPECT_EQ(t.dtype, "bf16");
  EXPECT_THAT(t.dims, ElementsAre(8192, 4096));
  EXPECT_THAT(t.strides, ElementsAre(16384));
  EXPECT_THAT(t.box, ElementsAre(64, 128));
  EXPECT_THAT(t.element_strides, ElementsAre(1, 1));
  EXPECT_EQ(t.swizzle, 3);
  EXPECT_EQ(t.interleave, 0);
  EXPECT_EQ(t.l2_promotion, 3);
  EXPECT_EQ(t.oob_fill, 1);
  EXPECT_THAT(a.params, ElementsAre(Pair("BLOCK", 256), Pair("VEC", 8)));
  EXPECT_EQ(a.knobs.maxrregcount, 64);
  EXPECT_EQ(a.knobs.min_blocks, 2);
  EXPECT_TRUE(a.knobs.fast_math);
  EXPECT_EQ(a.knobs.target, "sm_90a");
  EXPECT_DOUBLE_EQ(a.metrics.time_ns, 12345.5);
  EXPECT_DOUBLE_EQ(a.metrics.spread_ns, 12.25);
  EXPECT_EQ(a.metrics.registers, 40);
  EXPECT_EQ(a.metrics.spill_bytes, 8);
  EXPECT_DOUBLE_EQ(a.metrics.occupancy, 0.75);
  EXPECT_DOUBLE_EQ(a.metrics.gbps, 3900.5);
  EXPECT_DOUBLE_EQ(a.metrics.gflops, 77.25);
  EXPECT_DOUBLE_EQ(a.metrics.ceiling_fraction, 0.82);
  EXPECT_DOUBLE_EQ(a.metrics.default_time_ns, 9100);
  EXPECT_EQ(a.provenance, Provenance::kNearest);
  EXPECT_EQ(a.device_model, "NVIDIA H200|sm_90|132");
  EXPECT_EQ(a.template_id, "rmsnorm");
  EXPECT_EQ(a.dtype, "bf16");
  EXPECT_THAT(a.shape, ElementsAre(Pair("hidden", 8192), Pair("tokens", 2048)));
  EXPECT_EQ(a.template_source_hash, "abc123");
  EXPECT_EQ(a.nvrtc_version, "12.8");
  EXPECT_TRUE(a.stale);
  EXPECT_EQ(a.entry_id, 42);
  EXPECT_EQ(a.created_unix_ms, 1700000000123);
  EXPECT_EQ(a.tuning_job_id, 9);
}

TEST_F(ClientTest, CorruptedSha256IsDataLoss) {
  daemon_.service().get_kernel = [](grpc::ServerContext*, const v1::GetKernelRequest&,
                                    v1::GetKernelResponse* resp) {
    *resp->mutable_artifact() = FullArtifact();
    resp->mutable_artifact()->mutable_cubin()->back() ^= 1;  // one flipped bit in transit
    return grpc::Status::OK;
  };
  StartOrDie();
  EXPECT_THAT(NewClient()->GetKernel(Request()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("sha256")));
}

TEST_F(ClientTest, ServerErrorsKeepCodeAndMessage) {
  grpc::Status next;
  daemon_.service().get_kernel = [&](grpc::ServerContext*, const v1::GetKernelRequest&,
                                     v1::GetKernelResponse*) { return next; };
  StartOrDie();
  auto client = NewClient();
  const std::pair<grpc::StatusCode, absl::StatusCode> codes[] = {
      {grpc::StatusCode::INVALID_ARGUMENT, absl::StatusCode::kInvalidArgument},
      {grpc::StatusCode::NOT_FOUND, absl::StatusCode::kNotFound},
      {grpc::StatusCode::FAILED_PRECONDITION, absl::StatusCode::kFailedPrecondition},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, absl::StatusCode::kResourceExhausted},
      {grpc::StatusCode::UNAUTHENTICATED, absl::StatusCode::kUnauthenticated},
      {grpc::StatusCode::PERMISSION_DENIED, absl::StatusCode::kPermissionDenied},
      {grpc::StatusCode::INTERNAL, absl::StatusCode::kInternal},
  };
  for (const auto& [grpc_code, absl_code] : codes) {
    const std::string message = "shape: missing dim 'hidden' #" + std::to_string(grpc_code);
    next = grpc::Status(grpc_code, message);
    absl::StatusOr<KernelArtifact> got = client->GetKernel(Request());
    EXPECT_EQ(got.status().code(), absl_code) << got.status();
    EXPECT_EQ(got.status().message(), message);
  }
}

TEST(StatusFromGrpcTest, MapsEveryCodeNumberForNumber) {
  EXPECT_OK(StatusFromGrpc(grpc::Status::OK));
  for (int c = 1; c <= 16; ++c) {
    absl::Status s = StatusFromGrpc(grpc::Status(static_cast<grpc::StatusCode>(c), "m"));
    EXPECT_EQ(static_cast<int>(s.code()), c);
    EXPECT_EQ(s.message(), "m");
  }
}

// LoadedKernel's driver errors carry the code ktune-worker gives the same CUresult.
TEST(CheckCuTest, CodesAreTheWorkersForEveryResult) {
  const CudaApi no_names{};  // no cuGetErrorName: the message says so, the code is the table's
  EXPECT_OK(CheckCu(no_names, kCudaSuccess, "cuInit"));
  for (int r = 1; r <= 1000; ++r) {
    absl::Status s = CheckCu(no_names, r, "cuLaunchKernel");
    EXPECT_EQ(s.code(), CudaResultCode(r)) << r;
    EXPECT_THAT(std::string(s.message()), HasSubstr("cuLaunchKernel"));
  }
  EXPECT_EQ(CheckCu(no_names, kCudaErrorNotInitialized, "cuInit").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(CheckCu(no_names, kCudaErrorInvalidContext, "cuCtxGetCurrent").code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ClientTest, BearerTokenArrivesAsMetadata) {
  daemon_.service().get_kernel = [](grpc::ServerContext*, const v1::GetKernelRequest&,
                                    v1::GetKernelResponse* resp) {
    *resp->mutable_artifact() = FullArtifact();
    return grpc::Status::OK;
  };
  daemon_.service().get_devices = [](v1::GetDevicesResponse*) { return grpc::Status::OK; };
  StartOrDie();
  ClientOptions with_token;
  with_token.bearer_token = "s3cret";
  EXPECT_OK(NewClient(with_token)->GetKernel(Request()).status());
  EXPECT_OK(NewClient(with_token)->GetDevices().status());
  EXPECT_OK(NewClient()->GetKernel(Request()).status());
  EXPECT_THAT(daemon_.service().authorizations(),
              ElementsAre("Bearer s3cret", "Bearer s3cret", ""));
}

TEST_F(ClientTest, DeadlineIsDeadlineExceeded) {
  daemon_.service().get_kernel = [](grpc::ServerContext* context, const v1::GetKernelRequest&,
                                    v1::GetKernelResponse*) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!context->IsCancelled() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return grpc::Status(grpc::StatusCode::INTERNAL, "fake: never cancelled");
  };
  StartOrDie();
  // The request's own deadline.
  KernelRequest request = Request();
  request.deadline = absl::Milliseconds(200);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(NewClient()->GetKernel(request),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // The client's default.
  ClientOptions options;
  options.default_deadline = absl::Milliseconds(200);
  EXPECT_THAT(NewClient(options)->GetKernel(Request()),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
}

TEST_F(ClientTest, TuneStreamsProgressThenTheArtifact) {
  v1::TuneRequest seen;
  daemon_.service().tune = [&](grpc::ServerContext*, const v1::TuneRequest& req,
                               grpc::ServerWriter<v1::TuneEvent>* writer) {
    seen = req;
    for (int done = 1; done <= 3; ++done) {
      v1::TuneEvent e;
      v1::TuneProgress* p = e.mutable_progress();
      p->set_job_id(5);
      p->set_done(done);
      p->set_total(3);
      p->set_elapsed_s(done * 0.5);
      p->set_eta_s(3 - done);
      (*p->mutable_best_params())["BLOCK"] = 128 * done;
      p->set_best_time_ns(1000.0 / done);
      p->set_last_outcome(done == 2 ? "wrong_result" : "ok");
      writer->Write(e);
    }
    v1::TuneEvent last;
    *last.mutable_artifact() = FullArtifact();
    writer->Write(last);
    return grpc::Status::OK;
  };
  StartOrDie();
  TuneRequest request;
  request.template_id = "rmsnorm";
  request.dtype = "f32";
  request.shape = {{"tokens", 8}, {"hidden", 1024}};
  request.gpu = 2;
  request.strategy = "random";
  request.budget = 3;
  request.force = true;
  std::vector<TuneProgress> events;
  ASSERT_OK_AND_ASSIGN(KernelArtifact a, NewClient()->Tune(request, [&](const TuneProgress& p) {
    events.push_back(p);
    return true;
  }));
  EXPECT_EQ(seen.template_id(), "rmsnorm");
  EXPECT_EQ(seen.dtype(), "f32");
  EXPECT_EQ(seen.shape().at("hidden"), 1024);
  EXPECT_EQ(seen.gpu(), 2);
  EXPECT_EQ(seen.strategy(), "random");
  EXPECT_EQ(seen.budget(), 3);
  EXPECT_TRUE(seen.force());
  ASSERT_EQ(events.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(events[i].job_id, 5);
    EXPECT_EQ(events[i].done, i + 1);
    EXPECT_EQ(events[i].total, 3);
    EXPECT_DOUBLE_EQ(events[i].elapsed_s, (i + 1) * 0.5);
    EXPECT_DOUBLE_EQ(events[i].eta_s, 2 - i);
    EXPECT_THAT(events[i].best_params, ElementsAre(Pair("BLOCK", 128 * (i + 1))));
    EXPECT_DOUBLE_EQ(events[i].best_time_ns, 1000.0 / (i + 1));
  }
  EXPECT_EQ(events[1].last_outcome, "wrong_result");
  EXPECT_EQ(a.template_id, "rmsnorm");
  EXPECT_EQ(a.cubin, FullArtifact().cubin());
}

TEST_F(ClientTest, TuneErrorsAndMissingArtifact) {
  std::atomic<int> mode{0};
  daemon_.service().tune = [&](grpc::ServerContext*, const v1::TuneRequest&,
                               grpc::ServerWriter<v1::TuneEvent>* writer) {
    v1::TuneEvent e;
    e.mutable_progress()->set_done(1);
    writer->Write(e);
    if (mode == 0) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no GPU");
    if (mode == 1) return grpc::Status::OK;  // no artifact
    v1::TuneEvent last;
    *last.mutable_artifact() = FullArtifact();
    last.mutable_artifact()->set_cubin_sha256(std::string(64, '0'));
    writer->Write(last);
    return grpc::Status::OK;
  };
  StartOrDie();
  auto client = NewClient();
  int calls = 0;
  auto count = [&](const TuneProgress&) { return ++calls > 0; };
  EXPECT_THAT(client->Tune(TuneRequest{}, count),
              StatusIs(absl::StatusCode::kFailedPrecondition, "no GPU"));
  mode = 1;
  EXPECT_THAT(client->Tune(TuneRequest{}, count),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("without an artifact")));
  mode = 2;
  EXPECT_THAT(client->Tune(TuneRequest{}, count),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("sha256")));
  EXPECT_EQ(calls, 3);
}

TEST_F(ClientTest, TuneCallbackCanCancel) {
  daemon_.service().tune = [](grpc::ServerContext* context, const v1::TuneRequest&,
                              grpc::ServerWriter<v1::TuneEvent>* writer) {
    for (int i = 0; i < 1000 && !context->IsCancelled(); ++i) {
      v1::TuneEvent e;
      e.mutable_progress()->set_done(i);
      if (!writer->Write(e)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return grpc::Status::OK;
  };
  StartOrDie();
  int calls = 0;
  EXPECT_THAT(NewClient()->Tune(TuneRequest{}, [&](const TuneProgress&) { return ++calls < 2; }),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("callback")));
  EXPECT_EQ(calls, 2);
}

TEST_F(ClientTest, ListTemplatesAndGetDevices) {
  daemon_.service().list_templates = [](v1::ListTemplatesResponse* resp) {
    v1::TemplateInfo* t = resp->add_templates();
    t->set_name("rmsnorm");
    t->set_description("RMS norm");
    t->add_dtypes("f32");
    t->add_dtypes("bf16");
    v1::TemplateDim* d = t->add_dims();
    d->set_name("hidden");
    d->set_min(64);
    d->set_max(65536);
    d->set_example(8192);
    v1::TemplateParam* p = t->add_params();
    p->set_name("BLOCK");
    p->set_description("threads per block");
    p->add_values(128);
    p->add_values(256);
    p->set_default_(256);
    t->set_source_hash("feed");
    resp->add_errors("bad/bad.textproto:3: kernel: missing");
    return grpc::Status::OK;
  };
  daemon_.service().get_devices = [](v1::GetDevicesResponse* resp) {
    v1::Device* d = resp->add_devices();
    d->mutable_info()->set_ordinal(0);
    d->mutable_info()->set_name("NVIDIA H200");
    d->mutable_info()->set_cc_major(9);
    d->mutable_info()->set_cc_minor(0);
    d->mutable_info()->set_sm_count(132);
    d->mutable_info()->set_total_memory_bytes(int64_t{150} << 30);
    d->mutable_info()->set_uuid("GPU-1234");
    d->mutable_info()->set_driver_version("13.0");
    d->set_model_key("h200-key");
    d->set_copy_gbps(4100.5);
    d->set_healthy(false);
    d->set_status("worker restarting");
    resp->set_compile_only(true);
    return grpc::Status::OK;
  };
  StartOrDie();
  auto client = NewClient();
  ASSERT_OK_AND_ASSIGN(TemplateList list, client->ListTemplates());
  ASSERT_EQ(list.templates.size(), 1u);
  const TemplateInfo& t = list.templates[0];
  EXPECT_EQ(t.name, "rmsnorm");
  EXPECT_EQ(t.description, "RMS norm");
  EXPECT_THAT(t.dtypes, ElementsAre("f32", "bf16"));
  ASSERT_EQ(t.dims.size(), 1u);
  EXPECT_EQ(t.dims[0].name, "hidden");
  EXPECT_EQ(t.dims[0].min, 64);
  EXPECT_EQ(t.dims[0].max, 65536);
  EXPECT_EQ(t.dims[0].example, 8192);
  ASSERT_EQ(t.params.size(), 1u);
  EXPECT_EQ(t.params[0].description, "threads per block");
  EXPECT_THAT(t.params[0].values, ElementsAre(128, 256));
  EXPECT_EQ(t.params[0].default_value, 256);
  EXPECT_EQ(t.source_hash, "feed");
  EXPECT_THAT(list.errors, ElementsAre(HasSubstr("bad.textproto:3")));

  ASSERT_OK_AND_ASSIGN(DeviceList devices, client->GetDevices());
  EXPECT_TRUE(devices.compile_only);
  ASSERT_EQ(devices.devices.size(), 1u);
  const Device& d = devices.devices[0];
  EXPECT_EQ(d.name, "NVIDIA H200");
  EXPECT_EQ(d.cc_major, 9);
  EXPECT_EQ(d.sm_count, 132);
  EXPECT_EQ(d.total_memory_bytes, int64_t{150} << 30);
  EXPECT_EQ(d.uuid, "GPU-1234");
  EXPECT_EQ(d.driver_version, "13.0");
  EXPECT_EQ(d.model_key, "h200-key");
  EXPECT_DOUBLE_EQ(d.copy_gbps, 4100.5);
  EXPECT_FALSE(d.healthy);
  EXPECT_EQ(d.status, "worker restarting");
}

TEST_F(ClientTest, ResponseAboveTheReceiveLimitIsResourceExhausted) {
  daemon_.service().get_kernel = [](grpc::ServerContext*, const v1::GetKernelRequest&,
                                    v1::GetKernelResponse* resp) {
    SetCubin(*resp->mutable_artifact(), std::string(2 << 20, 'c'));
    return grpc::Status::OK;
  };
  StartOrDie();
  ClientOptions options;
  options.max_receive_message_bytes = 1 << 20;
  EXPECT_THAT(NewClient(options)->GetKernel(Request()),
              StatusIs(absl::StatusCode::kResourceExhausted, ::testing::_));
  ASSERT_OK_AND_ASSIGN(KernelArtifact big, NewClient()->GetKernel(Request()));
  EXPECT_EQ(big.cubin.size(), size_t{2} << 20);
}

// GetKernels splits past kMaxKernelsPerCall, asks again for the answers the daemon left
// for another call, and names each key's error by its index in the caller's requests.
TEST_F(ClientTest, GetKernelsSplitsRetriesAndNamesKeysByTheirIndex) {
  std::vector<int> batch_sizes;
  int retried = 0;
  daemon_.service().get_kernels = [&](grpc::ServerContext*, const v1::GetKernelsRequest& req,
                                      v1::GetKernelsResponse* resp) {
    batch_sizes.push_back(req.requests_size());
    for (int i = 0; i < req.requests_size(); ++i) {
      const int64_t tokens = req.requests(i).shape().at("tokens");
      v1::KernelResult* r = resp->add_results();
      if (tokens % 100 == 7) {
        r->set_code(grpc::StatusCode::INVALID_ARGUMENT);
        r->set_message("requests[" + std::to_string(i) + "].shape: dim 'tokens' is bad");
      } else if (tokens == 3 && retried++ == 0) {
        r->set_code(grpc::StatusCode::RESOURCE_EXHAUSTED);
        r->set_message("requests[" + std::to_string(i) + "]: did not fit");
        r->set_retry(true);
      } else {
        SetCubin(*r->mutable_response()->mutable_artifact(), "cubin " + std::to_string(tokens));
        r->mutable_response()->set_tuning_job_id(tokens);
      }
    }
    return grpc::Status::OK;
  };
  StartOrDie();
  std::vector<KernelRequest> requests(300, Request());
  for (int i = 0; i < 300; ++i) requests[i].shape["tokens"] = i;
  ASSERT_OK_AND_ASSIGN(auto results, NewClient()->GetKernels(requests));
  ASSERT_EQ(results.size(), 300u);
  EXPECT_THAT(batch_sizes, ElementsAre(256, 45));  // 44 left over, then the retried key first
  for (int i = 0; i < 300; ++i) {
    if (i % 100 == 7) {
      EXPECT_THAT(results[i].status(),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("requests[" + std::to_string(i) + "].shape: dim 'tokens'")));
      continue;
    }
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_EQ(results[i]->cubin, "cubin " + std::to_string(i));
    EXPECT_EQ(results[i]->tuning_job_id, i);
  }
  EXPECT_EQ(retried, 2);
  ASSERT_OK_AND_ASSIGN(auto none, NewClient()->GetKernels({}));
  EXPECT_TRUE(none.empty());
}

TEST_F(ClientTest, GetKernelsOfADaemonWithoutItAsksKeyByKey) {
  int asked = 0;
  daemon_.service().get_kernel = [&](grpc::ServerContext*, const v1::GetKernelRequest& req,
                                     v1::GetKernelResponse* resp) {
    ++asked;
    if (req.shape().at("tokens") == 2) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no entry");
    }
    SetCubin(*resp->mutable_artifact(), "cubin");
    return grpc::Status::OK;
  };  // and no get_kernels: UNIMPLEMENTED
  StartOrDie();
  std::vector<KernelRequest> requests(3, Request());
  for (int i = 0; i < 3; ++i) requests[i].shape["tokens"] = i;
  ASSERT_OK_AND_ASSIGN(auto results, NewClient()->GetKernels(requests));
  EXPECT_EQ(asked, 3);
  EXPECT_TRUE(results[0].ok());
  EXPECT_TRUE(results[1].ok());
  EXPECT_THAT(results[2].status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("requests[2]: no entry")));
}

TEST_F(ClientTest, GetKernelsWithoutADaemonFailsTheCallNamingTheTarget) {
  auto client = NewClient();
  EXPECT_THAT(client->GetKernels({Request()}),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("GetKernels: ktuned at " + daemon_.target())));
}

TEST_F(ClientTest, MissingDaemonFailsOnFirstCallNamingTheTarget) {
  // Not started: nothing listens on the socket.
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  EXPECT_THAT(client->GetKernel(Request()),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("GetKernel: ktuned at " + daemon_.target() + " is unavailable")));
  EXPECT_THAT(client->ListTemplates(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(daemon_.target())));
}

TEST(ConnectTest, RejectsBadOptions) {
  EXPECT_THAT(Connect("", {}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target")));
  ClientOptions key_only;
  key_only.tls_client_key_pem = "-----BEGIN PRIVATE KEY-----";
  EXPECT_THAT(Connect("localhost:1", key_only),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tls")));
  ClientOptions zero;
  zero.max_receive_message_bytes = 0;
  EXPECT_THAT(Connect("localhost:1", zero),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_receive")));
  ClientOptions tls;
  tls.use_tls = true;
  EXPECT_OK(Connect("localhost:1", tls).status());
}

TEST(PolicyTest, ParsesAndNames) {
  for (Policy p : {Policy::kCacheOnly, Policy::kTune, Policy::kFallback}) {
    EXPECT_THAT(ParsePolicy(PolicyName(p)), ::ktune::testing::IsOkAndHolds(p));
  }
  EXPECT_THAT(ParsePolicy("fast"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'fast'")));
  EXPECT_STREQ(ProvenanceName(Provenance::kDefault), "default");
}

TEST(DefaultDaemonTargetTest, PrefersTheEnvironment) {
  setenv("KTUNE_DAEMON", "unix:///x/y.sock", 1);
  EXPECT_EQ(DefaultDaemonTarget(), "unix:///x/y.sock");
  unsetenv("KTUNE_DAEMON");
  setenv("XDG_RUNTIME_DIR", "/run/user/7", 1);
  EXPECT_EQ(DefaultDaemonTarget(), "unix:///run/user/7/ktune/ktuned.sock");
}

// LoadedKernel's checks that come before the driver.
TEST(LoadedKernelTest, CorruptedCubinIsDataLossBeforeAnyDriverCall) {
  KernelArtifact a = ArtifactFromProto(FullArtifact());
  a.cubin[0] ^= 1;
  EXPECT_THAT(LoadedKernel::Load(a), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("sha256")));
}

TEST(LoadedKernelTest, MalformedLaunchesAreInvalidArgument) {
  KernelArtifact a = ArtifactFromProto(FullArtifact());
  a.launches[1].grid = {1, 1};
  EXPECT_THAT(LoadedKernel::Load(a),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("launches[1]")));
  a = ArtifactFromProto(FullArtifact());
  a.launches[0].args.push_back(9);
  EXPECT_THAT(LoadedKernel::Load(a),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("arg index 9")));
  a = ArtifactFromProto(FullArtifact());
  a.args[3].scalar_type = "f64";
  EXPECT_THAT(LoadedKernel::Load(a),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'eps'")));
  for (int bad : {3, -16, 512}) {
    a = ArtifactFromProto(FullArtifact());
    a.args[2].alignment = bad;
    EXPECT_THAT(LoadedKernel::Load(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("args[2] ('out').alignment")))
        << bad;
  }
}

TEST(LoadedKernelTest, TensorMapsAreCheckedBeforeAnyDriverCall) {
  // The full artifact with a launch that takes its map (LoadedKernel checks the maps some
  // launch takes; one no launch names, another path's, is left alone).
  auto with_map_launched = [] {
    KernelArtifact a = ArtifactFromProto(FullArtifact());
    a.launches[1].args.push_back(4);
    return a;
  };
  KernelArtifact a = with_map_launched();
  a.args[4].tensor_map.box = {64, 512};
  EXPECT_THAT(LoadedKernel::Load(a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("args[4] (x_map).tensor_map.box[1]: 512 is outside 1..256")));
  a = with_map_launched();
  a.args[4].tensor_map.box = {128, 128};  // 256 bytes, over SWIZZLE_128B's span
  EXPECT_THAT(LoadedKernel::Load(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("128-byte span of SWIZZLE_128B")));
  a = with_map_launched();
  a.args[4].tensor_map.buffer_arg = 3;  // eps, a scalar
  EXPECT_THAT(LoadedKernel::Load(a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor_map.buffer_arg: 3 is not a buffer arg")));
  a = with_map_launched();
  a.args[4].tensor_map.dims = {8192, 4097};  // one row past x
  EXPECT_THAT(LoadedKernel::Load(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("tensor_map.dims: the map reaches")));
  // A map no launch takes is not checked: the loader goes on (here to find no driver).
  a = ArtifactFromProto(FullArtifact());
  a.args[4].tensor_map.box = {64, 512};
  EXPECT_THAT(LoadedKernel::Load(a).status().message(), Not(HasSubstr("tensor_map")));
  // A client without tensor-map support sees an unknown scalar type (what the daemon
  // sends as scalar_type for them), not a crash.
  a = with_map_launched();
  a.args[4].scalar_type = "tensor_map_v2";
  EXPECT_THAT(LoadedKernel::Load(a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'x_map' has type 'tensor_map_v2'; expected i32, i64 or f32")));
}

TEST(LoadedKernelTest, NoDriverIsUnavailable) {
  if (LoadCudaApi().ok()) GTEST_SKIP() << "a CUDA driver is present here";
  EXPECT_THAT(LoadedKernel::Load(ArtifactFromProto(FullArtifact())),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("CUDA driver")));
}

}  // namespace
}  // namespace ktune::client
