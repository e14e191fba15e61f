#include "server/service/ktune_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/stat.h>

#include <cmath>
#include <deque>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "ktune/v1/ktune.grpc.pb.h"
#include "server/base/file.h"
#include "server/base/sha256.h"
#include "server/base/status_macros.h"
#include "server/compile/compile_pool.h"
#include "server/gpu/device_model.h"
#include "server/service/artifact_cache.h"
#include "server/service/convert.h"
#include "server/service/request_validation.h"
#include "server/templates/instance.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"
#include "server/tuning/gpu_problem.h"
#include "server/tuning/tuning_queue.h"

namespace ktune {
namespace {

// A few threads for blocking side work (FALLBACK compiles). The destructor runs what was
// queued, then joins.
class Executor {
 public:
  explicit Executor(int threads) {
    for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Work(); });
  }
  ~Executor() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }
  void Run(std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    work_.push_back(std::move(fn));
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return stopping_ || !work_.empty();
        };
        mu_.Await(absl::Condition(&ready));
        if (work_.empty()) return;
        fn = std::move(work_.front());
        work_.pop_front();
      }
      fn();
    }
  }
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::function<void()>> work_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

// Who finishes a unary call: the handler, a job's completion, a fallback thread or the
// call's cancellation (deadline), whichever comes first. The winner (Claim() true) fills the
// response and calls Finish; nobody touches the reactor or the response after that, so the
// reactor may be deleted as soon as gRPC calls OnDone.
struct UnaryOnce {
  absl::Mutex mu;
  bool claimed ABSL_GUARDED_BY(mu) = false;
  grpc::ServerUnaryReactor* reactor = nullptr;
  bool Claim() {
    absl::MutexLock lock(&mu);
    if (claimed) return false;
    claimed = true;
    return true;
  }
  void Finish(const grpc::Status& s) {
    if (Claim()) reactor->Finish(s);
  }
};

grpc::Status CancelStatus(grpc::CallbackServerContext* ctx) {
  if (absl::FromChrono(ctx->deadline()) <= absl::Now()) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        "the caller's deadline passed first; the tuning job goes on");
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled");
}

class UnaryCall : public grpc::ServerUnaryReactor {
 public:
  explicit UnaryCall(grpc::CallbackServerContext* ctx)
      : ctx_(ctx), once_(std::make_shared<UnaryOnce>()) {
    once_->reactor = this;
  }
  const std::shared_ptr<UnaryOnce>& once() { return once_; }
  void OnCancel() override { once_->Finish(CancelStatus(ctx_)); }
  void OnDone() override { delete this; }

 private:
  grpc::CallbackServerContext* const ctx_;
  std::shared_ptr<UnaryOnce> once_;
};

// The state of one Tune stream, shared with the job's listener and completion callback
// (they may outlive the reactor). One write is in flight at a time; events queue behind it.
// Whoever decides to Finish does so exactly once, with no write in flight.
struct StreamState {
  absl::Mutex mu;
  grpc::ServerWriteReactor<v1::TuneEvent>* reactor = nullptr;
  std::deque<v1::TuneEvent> pending ABSL_GUARDED_BY(mu);
  v1::TuneEvent current;  // the event being written
  bool writing ABSL_GUARDED_BY(mu) = false;
  bool finished ABSL_GUARDED_BY(mu) = false;
  std::optional<grpc::Status> final_status ABSL_GUARDED_BY(mu);

  void Push(v1::TuneEvent event) {
    {
      absl::MutexLock lock(&mu);
      if (finished || final_status) return;
      pending.push_back(std::move(event));
      if (writing) return;
      writing = true;
      current = std::move(pending.front());
      pending.pop_front();
    }
    reactor->StartWrite(&current);
  }
  void End(grpc::Status status) {
    {
      absl::MutexLock lock(&mu);
      if (finished || final_status) return;
      final_status = std::move(status);
      if (writing) return;  // OnWriteDone finishes
      finished = true;
    }
    reactor->Finish(*final_status);
  }
  void WriteDone(bool ok) {
    grpc::Status finish;
    {
      absl::MutexLock lock(&mu);
      writing = false;
      if (finished) return;
      if (ok && !pending.empty()) {
        writing = true;
        current = std::move(pending.front());
        pending.pop_front();
      } else if (!ok || final_status) {
        finished = true;
        finish = ok ? *final_status
                    : grpc::Status(grpc::StatusCode::CANCELLED, "the stream was broken");
      } else {
        return;  // idle until the next Push or End
      }
    }
    if (writing_started(finish)) {
      reactor->StartWrite(&current);
    } else {
      reactor->Finish(finish);
    }
  }

 private:
  // Only this thread changes `writing`/`finished` between WriteDone's decision and here.
  bool writing_started(const grpc::Status&) {
    absl::MutexLock lock(&mu);
    return writing;
  }
};

class TuneStream : public grpc::ServerWriteReactor<v1::TuneEvent> {
 public:
  explicit TuneStream(grpc::CallbackServerContext* ctx)
      : ctx_(ctx), state_(std::make_shared<StreamState>()) {
    state_->reactor = this;
  }
  const std::shared_ptr<StreamState>& state() { return state_; }
  void OnWriteDone(bool ok) override { state_->WriteDone(ok); }
  void OnCancel() override { state_->End(CancelStatus(ctx_)); }
  void OnDone() override { delete this; }

 private:
  grpc::CallbackServerContext* const ctx_;
  std::shared_ptr<StreamState> state_;
};

bool SameToken(const std::string& a, const std::string& b) {
  // Constant time in the contents, so the token cannot be guessed byte by byte.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// One GPU as the tuning loop sees it, recording whether its calls work: a call that fails
// with kUnavailable or kInternal (the worker is gone, the driver or device failed) marks the
// GPU unhealthy, the next call that succeeds (a job starts with Info()) healthy again.
// Other errors are the request's, not the GPU's. A failing *candidate* is an OK Measurement
// and says nothing about the GPU. Health is tracked at this seam rather than from job
// results so that a job failing in the store or the registry does not blame the GPU.
//
// The Gpu calls come from the GPU's one queue thread (Gpu is not thread-safe); healthy()
// and why() from any thread. `on_change` runs on the calling thread after a change.
class HealthCheckedGpu final : public Gpu {
 public:
  HealthCheckedGpu(std::unique_ptr<Gpu> gpu, std::function<void()> on_change)
      : gpu_(std::move(gpu)), on_change_(std::move(on_change)) {}

  absl::StatusOr<v1::DeviceInfo> Info() override { return Record(gpu_->Info()); }
  absl::StatusOr<v1::Ceiling> MeasureCeiling() override {
    return Record(gpu_->MeasureCeiling());
  }
  absl::StatusOr<v1::ProblemReady> SetProblem(const v1::Problem& problem) override {
    return Record(gpu_->SetProblem(problem));
  }
  absl::StatusOr<v1::Measurement> Measure(const v1::KernelBinary& candidate,
                                          const v1::TimingOptions& timing) override {
    return Record(gpu_->Measure(candidate, timing));
  }

  bool healthy() const {
    absl::MutexLock lock(&mu_);
    return healthy_;
  }
  // Why not healthy; empty when healthy.
  std::string why() const {
    absl::MutexLock lock(&mu_);
    return why_;
  }

 private:
  template <typename T>
  absl::StatusOr<T> Record(absl::StatusOr<T> result) {
    const absl::Status& s = result.status();
    bool changed = false;
    {
      absl::MutexLock lock(&mu_);
      if (s.ok()) {
        changed = !healthy_;
        healthy_ = true;
        why_.clear();
      } else if (s.code() == absl::StatusCode::kUnavailable ||
                 s.code() == absl::StatusCode::kInternal) {
        changed = healthy_;
        healthy_ = false;
        why_ = s.ToString();
      }
    }
    if (changed && on_change_) on_change_();
    return result;
  }

  const std::unique_ptr<Gpu> gpu_;
  const std::function<void()> on_change_;
  mutable absl::Mutex mu_;
  bool healthy_ ABSL_GUARDED_BY(mu_) = true;  // it answered Info() at start
  std::string why_ ABSL_GUARDED_BY(mu_);
};

struct GpuSlot {
  std::unique_ptr<HealthCheckedGpu> gpu;
  v1::DeviceInfo info;
  std::string model;
};

class KtuneServiceImpl final : public v1::Ktune::CallbackService {
 public:
  KtuneServiceImpl(const ServerOptions& options, std::vector<GpuSlot>* gpus,
                   std::string compile_only_reason, std::string compile_only_model,
                   TargetInfo compile_only_target, TuningQueue* queue)
      : options_(options),
        gpus_(*gpus),
        compile_only_reason_(std::move(compile_only_reason)),
        compile_only_model_(std::move(compile_only_model)),
        compile_only_target_(compile_only_target),
        queue_(queue),
        artifacts_(options.artifact_cache_bytes),
        executor_(options.fallback_threads) {
    vctx_.registry = options.registry;
    for (const GpuSlot& g : gpus_) vctx_.devices.push_back(g.info);
    vctx_.target = compile_only_target_;
  }

  grpc::ServerUnaryReactor* GetKernel(grpc::CallbackServerContext* ctx,
                                      const v1::GetKernelRequest* request,
                                      v1::GetKernelResponse* response) override {
    auto* call = new UnaryCall(ctx);
    std::shared_ptr<UnaryOnce> once = call->once();
    if (absl::Status s = CheckToken(ctx); !s.ok()) {
      once->Finish(ToGrpcStatus(s));
      return call;
    }
    // A fresh exact hit is the same answer under every policy, so the cache serves them all.
    // The counter is read before the store is: a commit in between tags what is read now
    // with the older counter, so it is never served past that commit.
    // No counter (the cache is off, or it could not be read): neither served nor kept.
    std::optional<int64_t> generation;
    std::string cache_key;
    if (artifacts_.enabled()) {
      if (absl::StatusOr<int64_t> counter = options_.store->EntriesChangeCounter(); counter.ok()) {
        generation = *counter;
        cache_key = ArtifactCache::Key(request->template_id(), request->dtype(),
                                       request->shape(), request->gpu());
      }
    }
    if (generation) {
      if (std::shared_ptr<const v1::KernelArtifact> a = artifacts_.Get(cache_key, *generation)) {
        *response->mutable_artifact() = *a;
        once->Finish(grpc::Status::OK);
        return call;
      }
    }
    absl::StatusOr<KernelQuery> q = ValidateGetKernel(*request, vctx_);
    if (!q.ok()) {
      once->Finish(ToGrpcStatus(q.status()));
      return call;
    }
    const v1::Policy policy = request->policy();
    absl::StatusOr<store::Lookup> hit = Lookup(*q);
    if (hit.ok() && !hit->stale) {
      // Fresh: the answer whatever the policy, and kept for the next call.
      absl::StatusOr<v1::KernelArtifact> a = ArtifactFor(*q, hit->entry, false, v1::EXACT);
      if (!a.ok()) {
        once->Finish(ToGrpcStatus(a.status()));
        return call;
      }
      auto kept = std::make_shared<const v1::KernelArtifact>(*std::move(a));
      if (generation) artifacts_.Put(cache_key, *generation, kept);
      *response->mutable_artifact() = *kept;
      once->Finish(grpc::Status::OK);
      return call;
    }
    // From here on the hit, if any, is stale.
    auto answer = [this, once, response](const absl::StatusOr<v1::KernelArtifact>& a,
                                         int64_t job_id) {
      if (!once->Claim()) return;
      if (!a.ok()) {
        once->reactor->Finish(ToGrpcStatus(a.status()));
        return;
      }
      *response->mutable_artifact() = *a;
      response->set_tuning_job_id(job_id);
      once->reactor->Finish(grpc::Status::OK);
    };

    if (policy == v1::CACHE_ONLY || policy == v1::POLICY_UNSPECIFIED) {
      if (!hit.ok()) {
        answer(hit.status(), 0);
      } else {
        answer(ArtifactFor(*q, hit->entry, /*stale=*/true, v1::EXACT), 0);
      }
      return call;
    }
    if (!hit.ok() && hit.status().code() != absl::StatusCode::kNotFound &&
        hit.status().code() != absl::StatusCode::kDataLoss) {
      answer(hit.status(), 0);  // the store failed: no point compiling or tuning
      return call;
    }

    if (policy == v1::TUNE) {
      absl::StatusOr<std::shared_ptr<TuningJob>> job = Submit(*q, "exhaustive", 0);
      if (!job.ok()) {
        answer(job.status(), 0);
        return call;
      }
      const int64_t job_id = (*job)->id();
      (*job)->OnDone([this, q = *q, answer, job_id](const absl::StatusOr<TuneResult>& r) {
        if (!r.ok()) return answer(r.status(), job_id);
        answer(ArtifactFor(q, r->entry, false, v1::EXACT), job_id);
      });
      return call;
    }

    // FALLBACK: a stale entry answers now while its re-tune runs.
    if (hit.ok()) {
      const int64_t job_id = BackgroundTune(*q);
      answer(ArtifactFor(*q, hit->entry, /*stale=*/true, v1::EXACT), job_id);
      return call;
    }
    executor_.Run([this, q = *q, answer] {
      absl::StatusOr<v1::KernelArtifact> a = FallbackArtifact(q);
      answer(a, a.ok() ? BackgroundTune(q) : 0);
    });
    return call;
  }

  grpc::ServerWriteReactor<v1::TuneEvent>* Tune(grpc::CallbackServerContext* ctx,
                                                const v1::TuneRequest* request) override {
    auto* stream = new TuneStream(ctx);
    std::shared_ptr<StreamState> state = stream->state();
    if (absl::Status s = CheckToken(ctx); !s.ok()) {
      state->End(ToGrpcStatus(s));
      return stream;
    }
    absl::StatusOr<KernelQuery> q = ValidateTune(*request, vctx_);
    if (!q.ok()) {
      state->End(ToGrpcStatus(q.status()));
      return stream;
    }
    if (!request->force()) {
      absl::StatusOr<store::Lookup> hit = Lookup(*q);
      if (hit.ok() && !hit->stale) {
        absl::StatusOr<v1::KernelArtifact> a = ArtifactFor(*q, hit->entry, false, v1::EXACT);
        if (!a.ok()) {
          state->End(ToGrpcStatus(a.status()));
        } else {
          v1::TuneEvent e;
          *e.mutable_artifact() = *std::move(a);
          state->Push(std::move(e));
          state->End(grpc::Status::OK);
        }
        return stream;
      }
    }
    absl::StatusOr<std::shared_ptr<TuningJob>> job =
        Submit(*q, request->strategy().empty() ? "exhaustive" : request->strategy(),
               request->budget());
    if (!job.ok()) {
      state->End(ToGrpcStatus(job.status()));
      return stream;
    }
    (*job)->Subscribe([state](const JobProgress& p) {
      v1::TuneEvent e;
      *e.mutable_progress() = ToProto(p);
      state->Push(std::move(e));
    });
    (*job)->OnDone([this, state, q = *q](const absl::StatusOr<TuneResult>& r) {
      if (!r.ok()) return state->End(ToGrpcStatus(r.status()));
      absl::StatusOr<v1::KernelArtifact> a = ArtifactFor(q, r->entry, false, v1::EXACT);
      if (!a.ok()) return state->End(ToGrpcStatus(a.status()));
      v1::TuneEvent e;
      *e.mutable_artifact() = *std::move(a);
      state->Push(std::move(e));
      state->End(grpc::Status::OK);
    });
    return stream;
  }

  grpc::ServerUnaryReactor* ListTemplates(grpc::CallbackServerContext* ctx,
                                          const v1::ListTemplatesRequest*,
                                          v1::ListTemplatesResponse* response) override {
    auto* reactor = ctx->DefaultReactor();
    if (absl::Status s = CheckToken(ctx); !s.ok()) {
      reactor->Finish(ToGrpcStatus(s));
      return reactor;
    }
    for (const auto& [name, tmpl] : options_.registry->templates()) {
      *response->add_templates() = ToProto(*tmpl);
    }
    for (const absl::Status& e : options_.registry->errors()) {
      response->add_errors(std::string(e.message()));
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* ListEntries(grpc::CallbackServerContext* ctx,
                                        const v1::ListEntriesRequest* request,
                                        v1::ListEntriesResponse* response) override {
    auto* reactor = ctx->DefaultReactor();
    if (absl::Status s = CheckToken(ctx); !s.ok()) {
      reactor->Finish(ToGrpcStatus(s));
      return reactor;
    }
    store::EntryFilter filter;
    if (!request->template_id().empty()) filter.template_id = request->template_id();
    if (!request->dtype().empty()) filter.dtype = request->dtype();
    if (!request->device_model().empty()) filter.device_model = request->device_model();
    absl::StatusOr<std::vector<store::EntrySummary>> entries = options_.store->ListEntries(filter);
    if (!entries.ok()) {
      reactor->Finish(ToGrpcStatus(entries.status()));
      return reactor;
    }
    for (const store::EntrySummary& e : *entries) {
      bool stale = e.nvrtc_version != options_.compiler->Version();
      if (auto t = options_.registry->Get(e.key.template_id); t.ok()) {
        stale = stale || e.source_hash != (*t)->source_hash();
      }
      if (request->stale_only() && !stale) continue;
      *response->add_entries() = ToProto(e, stale);
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetDevices(grpc::CallbackServerContext* ctx,
                                       const v1::GetDevicesRequest*,
                                       v1::GetDevicesResponse* response) override {
    auto* reactor = ctx->DefaultReactor();
    if (absl::Status s = CheckToken(ctx); !s.ok()) {
      reactor->Finish(ToGrpcStatus(s));
      return reactor;
    }
    response->set_compile_only(gpus_.empty());
    for (const GpuSlot& g : gpus_) {
      v1::Device* d = response->add_devices();
      *d->mutable_info() = g.info;
      d->set_model_key(g.model);
      if (auto stored = options_.store->GetDevice(g.model); stored.ok()) {
        d->set_copy_gbps(stored->copy_gbps);
      }
      d->set_healthy(g.gpu->healthy());
      d->set_status(g.gpu->why());
    }
    if (gpus_.empty()) {
      v1::Device* d = response->add_devices();
      d->set_model_key(compile_only_model_);
      d->set_healthy(false);
      d->set_status(compile_only_reason_);
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  absl::Status CheckToken(grpc::CallbackServerContext* ctx) const {
    if (options_.token.empty()) return absl::OkStatus();
    const std::string want = absl::StrCat("Bearer ", options_.token);
    auto range = ctx->client_metadata().equal_range("authorization");
    if (range.first == range.second) {
      return absl::UnauthenticatedError(
          "authorization: this daemon wants metadata 'authorization: Bearer <token>'");
    }
    for (auto it = range.first; it != range.second; ++it) {
      if (SameToken(std::string(it->second.data(), it->second.size()), want)) {
        return absl::OkStatus();
      }
    }
    return absl::UnauthenticatedError("authorization: wrong bearer token");
  }

  TargetInfo TargetFor(int gpu) const {
    return gpus_.empty() ? compile_only_target_ : TargetForDevice(gpus_[gpu].info);
  }
  const std::string& ModelFor(int gpu) const {
    return gpus_.empty() ? compile_only_model_ : gpus_[gpu].model;
  }

  store::EntryKey KeyFor(const KernelQuery& q) const {
    return {ModelFor(q.gpu), q.tmpl->name(), std::string(DTypeName(q.dtype)),
            ShapeString(q.shape)};
  }

  absl::StatusOr<store::Lookup> Lookup(const KernelQuery& q) {
    const store::EntryKey key = KeyFor(q);
    if (key.device_model.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "no entry for ", key.template_id, " ", key.dtype, " ", key.shape,
          ": this host has no usable GPU and the store names no single device model"));
    }
    absl::StatusOr<store::Lookup> hit =
        options_.store->LookupEntry(key, q.tmpl->source_hash(), options_.compiler->Version());
    if (hit.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat("no entry for ", key.template_id, " ", key.dtype,
                                              " ", key.shape, " on ", key.device_model));
    }
    return hit;
  }

  absl::StatusOr<v1::KernelArtifact> ArtifactFor(const KernelQuery& q, const store::Entry& e,
                                                 bool stale, v1::Provenance p) const {
    return ToArtifact(e, stale, q.reference, p);
  }

  absl::StatusOr<std::shared_ptr<TuningJob>> Submit(const KernelQuery& q,
                                                    const std::string& strategy,
                                                    int64_t budget) {
    if (gpus_.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("tuning needs a GPU and this daemon has none usable: ",
                       compile_only_reason_));
    }
    TuneRequest r;
    r.template_name = q.tmpl->name();
    r.dtype = q.dtype;
    r.shape = q.shape;
    r.strategy = strategy;
    r.budget = budget;
    return queue_->Submit(r, q.gpu);
  }

  // A FALLBACK's background tune; 0 when none was started (no GPU, a full queue).
  int64_t BackgroundTune(const KernelQuery& q) {
    if (gpus_.empty()) return 0;
    absl::StatusOr<std::shared_ptr<TuningJob>> job = Submit(q, "exhaustive", 0);
    return job.ok() ? (*job)->id() : 0;
  }

  // The nearest stored shape whose config binds for the request's shape and whose cubin
  // holds every kernel the request's launches name (same name expressions and options),
  // else the default config compiled now.
  absl::StatusOr<v1::KernelArtifact> FallbackArtifact(const KernelQuery& q) {
    const TargetInfo target = TargetFor(q.gpu);
    const std::string& model = ModelFor(q.gpu);
    if (!model.empty()) {
      store::EntryFilter f;
      f.device_model = model;
      f.template_id = q.tmpl->name();
      f.dtype = std::string(DTypeName(q.dtype));
      KTUNE_ASSIGN_OR_RETURN(std::vector<store::EntrySummary> entries,
                             options_.store->ListEntries(f));
      std::vector<std::pair<double, const store::EntrySummary*>> near;
      for (const store::EntrySummary& e : entries) {
        absl::StatusOr<Shape> shape = ParseShape(e.key.shape);
        if (!shape.ok()) continue;
        const double d = ShapeDistance(q.shape, *shape);
        if (std::isfinite(d)) near.emplace_back(d, &e);
      }
      std::sort(near.begin(), near.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      if (near.size() > 8) near.resize(8);  // each try reads a cubin
      for (const auto& [distance, summary] : near) {
        absl::StatusOr<v1::KernelArtifact> a = NeighbourArtifact(q, *summary, target);
        if (a.ok()) return a;
      }
    }
    const Config config = DefaultConfig(*q.tmpl, target);
    KTUNE_ASSIGN_OR_RETURN(BindResult bound, Bind(q.tmpl, q.dtype, q.shape, config, target));
    if (!bound.instance) {
      return absl::FailedPreconditionError(
          absl::StrCat("template ", q.tmpl->name(), ": the default config does not fit shape ",
                       ShapeString(q.shape), ": ", bound.rejected_because));
    }
    KTUNE_ASSIGN_OR_RETURN(CompileResult compiled,
                           options_.compiler->Compile(BuildCompileRequest(*bound.instance)));
    if (!compiled.ok) {
      return absl::InternalError(absl::StrCat("template ", q.tmpl->name(),
                                              ": the default config does not compile:\n",
                                              compiled.log));
    }
    KTUNE_ASSIGN_OR_RETURN(v1::KernelBinary binary,
                           BuildKernelBinary(*bound.instance, compiled));
    store::Entry e;
    e.key = KeyFor(q);
    e.source_hash = q.tmpl->source_hash();
    e.nvrtc_version = options_.compiler->Version();
    e.config = config;
    e.cubin = compiled.cubin;
    e.cubin_sha256 = Sha256Hex(e.cubin);
    e.launches = LaunchSpecs(*bound.instance, binary);
    return ArtifactFor(q, e, false, v1::DEFAULT);
  }

  absl::StatusOr<v1::KernelArtifact> NeighbourArtifact(const KernelQuery& q,
                                                       const store::EntrySummary& summary,
                                                       const TargetInfo& target) {
    KTUNE_ASSIGN_OR_RETURN(store::Lookup hit, options_.store->GetEntry(summary.id));
    const store::Entry& e = hit.entry;
    KTUNE_ASSIGN_OR_RETURN(Shape their_shape, ParseShape(e.key.shape));
    KTUNE_ASSIGN_OR_RETURN(BindResult theirs, Bind(q.tmpl, q.dtype, their_shape, e.config, target));
    KTUNE_ASSIGN_OR_RETURN(BindResult ours, Bind(q.tmpl, q.dtype, q.shape, e.config, target));
    if (!theirs.instance || !ours.instance) {
      return absl::FailedPreconditionError(absl::StrCat("entry ", e.id, " does not bind: ",
                                                        ours.rejected_because));
    }
    if (theirs.instance->CompileOptions() != ours.instance->CompileOptions() ||
        theirs.instance->launches.size() != e.launches.size()) {
      return absl::FailedPreconditionError("another binary");
    }
    std::map<std::string, std::string> lowered;
    for (size_t i = 0; i < e.launches.size(); ++i) {
      lowered[theirs.instance->launches[i].name_expression] = e.launches[i].lowered_name;
    }
    store::Entry mine = e;
    mine.launches.clear();
    for (const BoundLaunch& l : ours.instance->launches) {
      auto it = lowered.find(l.name_expression);
      if (it == lowered.end()) return absl::FailedPreconditionError("kernel not in the cubin");
      LaunchSpec s;
      s.lowered_name = it->second;
      for (int i = 0; i < 3; ++i) {
        s.grid[i] = static_cast<uint32_t>(l.grid[i]);
        s.block[i] = static_cast<uint32_t>(l.block[i]);
      }
      s.shared_bytes = static_cast<uint32_t>(l.shared_bytes);
      s.args = l.args;
      mine.launches.push_back(std::move(s));
    }
    return ToArtifact(mine, hit.stale, *ours.instance, v1::NEAREST);
  }

  const ServerOptions& options_;
  const std::vector<GpuSlot>& gpus_;
  const std::string compile_only_reason_;
  const std::string compile_only_model_;
  const TargetInfo compile_only_target_;
  TuningQueue* const queue_;
  ArtifactCache artifacts_;
  ValidationContext vctx_;
  Executor executor_;  // last: joined first, while the rest is still there
};

class ServerImpl final : public KtuneServer {
 public:
  int port() const override { return port_; }
  bool compile_only() const override { return gpus_.empty(); }
  std::string compile_only_reason() const override { return compile_only_reason_; }
  bool serving() const override {
    if (gpus_.empty()) return true;
    for (const GpuSlot& g : gpus_) {
      if (g.gpu->healthy()) return true;
    }
    return false;
  }

  // Pushes serving() to gRPC health checking; called when a GPU's health changes (on its
  // queue thread) and once the server is up.
  void UpdateHealth() {
    absl::MutexLock lock(&health_mu_);
    if (health_ == nullptr) return;
    const bool up = serving();
    health_->SetServingStatus(up);
    health_->SetServingStatus("ktune.v1.Ktune", up);
  }
  void SetHealthService(grpc::HealthCheckServiceInterface* health) {
    {
      absl::MutexLock lock(&health_mu_);
      health_ = health;
    }
    UpdateHealth();
  }

  void Shutdown() override {
    {
      absl::MutexLock lock(&mu_);
      if (shutting_down_) {
        mu_.Await(absl::Condition(&shut_down_));
        return;
      }
      shutting_down_ = true;
    }
    // Jobs first: every TUNE call and Tune stream then finishes (cancelled), so the
    // server's shutdown does not wait out a long tune.
    queue_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
  }

  void Wait() override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&shut_down_));
  }

  ~ServerImpl() override { Shutdown(); }

  ServerOptions options_;
  std::vector<GpuSlot> gpus_;
  std::string compile_only_reason_;
  std::unique_ptr<CompilePool> pool_;
  std::unique_ptr<TuningQueue> queue_;
  std::unique_ptr<KtuneServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Mutex health_mu_;
  grpc::HealthCheckServiceInterface* health_ ABSL_GUARDED_BY(health_mu_) = nullptr;
  absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

// "unix:///a/b" and "unix:/a/b" -> "/a/b"; "" for a TCP address.
std::string UnixSocketPath(const std::string& listen) {
  if (!absl::StartsWith(listen, "unix:")) return "";
  std::string path = listen.substr(5);
  if (absl::StartsWith(path, "//")) path = path.substr(2);
  return path;
}

}  // namespace

absl::StatusOr<std::unique_ptr<KtuneServer>> StartKtuneServer(ServerOptions options) {
  if (options.registry == nullptr || options.store == nullptr || options.compiler == nullptr) {
    return absl::InvalidArgumentError("registry, store and compiler are required");
  }
  if (options.listen.empty()) return absl::InvalidArgumentError("listen: required");
  const bool tls = !options.tls_cert_pem.empty() || !options.tls_key_pem.empty() ||
                   !options.tls_client_ca_pem.empty();
  if (tls && !UnixSocketPath(options.listen).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls: ", options.listen,
        " is a unix socket, which stays plaintext (its 0600 file mode guards it); TLS is "
        "for a HOST:PORT listener"));
  }
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError(
        "tls: the server certificate and its private key go together; one is missing");
  }
  if (!options.tls_client_ca_pem.empty() && options.tls_cert_pem.empty()) {
    return absl::InvalidArgumentError(
        "tls: client certificates (mTLS) need the server's own certificate and key too");
  }
  auto s = std::make_unique<ServerImpl>();
  s->options_ = std::move(options);
  const ServerOptions& o = s->options_;

  // GPUs: ordinals until the first that is not there.
  if (!o.gpu_factory) s->compile_only_reason_ = "no GPU factory (compile-only by configuration)";
  for (int i = 0; o.gpu_factory && i < o.max_gpus; ++i) {
    absl::StatusOr<std::unique_ptr<Gpu>> gpu = o.gpu_factory(i);
    absl::StatusOr<v1::DeviceInfo> info =
        gpu.ok() ? (*gpu)->Info() : absl::StatusOr<v1::DeviceInfo>(gpu.status());
    if (!info.ok()) {
      if (i == 0) s->compile_only_reason_ = absl::StrCat("GPU 0: ", info.status().ToString());
      break;
    }
    GpuSlot slot;
    ServerImpl* server = s.get();
    slot.gpu = std::make_unique<HealthCheckedGpu>(*std::move(gpu),
                                                  [server] { server->UpdateHealth(); });
    slot.info = *info;
    slot.model = DeviceModelKey(*info);
    s->gpus_.push_back(std::move(slot));
  }

  // Without a GPU, lookups go to the one device model the store knows, if it knows one.
  std::string compile_only_model;
  TargetInfo compile_only_target = o.compile_only_target;
  if (s->gpus_.empty()) {
    absl::StatusOr<std::vector<store::Device>> devices = o.store->ListDevices();
    if (devices.ok() && devices->size() == 1) {
      const store::Device& d = devices->front();
      compile_only_model = d.model_key;
      compile_only_target.sm = d.cc_major * 10 + d.cc_minor;
      compile_only_target.has_arch_specific = d.cc_major >= 9;
      if (d.sm_count > 0) compile_only_target.sm_count = d.sm_count;
    }
  }

  s->pool_ = std::make_unique<CompilePool>(o.compiler, o.compile_threads);
  std::vector<TuningEnv> envs;
  for (GpuSlot& g : s->gpus_) {
    envs.push_back({o.registry, o.compiler, s->pool_.get(), g.gpu.get(), o.store});
  }
  s->queue_ = std::make_unique<TuningQueue>(std::move(envs), o.queue_capacity);
  s->service_ = std::make_unique<KtuneServiceImpl>(o, &s->gpus_, s->compile_only_reason_,
                                                   compile_only_model, compile_only_target,
                                                   s->queue_.get());

  grpc::EnableDefaultHealthCheckService(true);
  if (o.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(o.max_message_bytes);
  builder.SetMaxSendMessageSize(o.max_message_bytes);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (tls) {
    grpc::SslServerCredentialsOptions ssl(
        o.tls_client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                    : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = o.tls_client_ca_pem;
    ssl.pem_key_cert_pairs.push_back({o.tls_key_pem, o.tls_cert_pem});
    credentials = grpc::SslServerCredentials(ssl);
  }
  builder.AddListeningPort(o.listen, credentials, &s->port_);
  builder.RegisterService(s->service_.get());

  const std::string socket = UnixSocketPath(o.listen);
  mode_t old_umask = 0;
  if (!socket.empty()) {
    const std::string dir = socket.substr(0, socket.rfind('/'));
    if (!dir.empty() && !IsDir(dir)) {
      KTUNE_RETURN_IF_ERROR(MakeDirs(dir));
      chmod(dir.c_str(), 0700);
    }
    // The socket is born 0600: no window in which another user could connect.
    old_umask = umask(0077);
  }
  s->server_ = builder.BuildAndStart();
  if (!socket.empty()) {
    umask(old_umask);
    if (s->server_ != nullptr && chmod(socket.c_str(), 0600) != 0) {
      s->server_->Shutdown();
      return absl::PermissionDeniedError(absl::StrCat("chmod 0600 ", socket, " failed"));
    }
  }
  if (s->server_ == nullptr) {
    s->queue_->Shutdown();
    {
      absl::MutexLock lock(&s->mu_);
      s->shutting_down_ = s->shut_down_ = true;
    }
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", o.listen,
        tls ? " (or the TLS certificate and key are not a usable pair)" : ""));
  }
  // SERVING compile-only (lookups work on any host) and while a GPU is healthy;
  // NOT_SERVING on a GPU host whose GPUs all fail (UpdateHealth follows them).
  s->SetHealthService(s->server_->GetHealthCheckService());
  return std::unique_ptr<KtuneServer>(std::move(s));
}

}  // namespace ktune
