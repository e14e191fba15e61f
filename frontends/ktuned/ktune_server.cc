#include "frontends/ktuned/ktune_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/support/server_interceptor.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/descriptor.h"
#include "ktune/v1/ktune.grpc.pb.h"
#include "server/base/file.h"
#include "server/base/file_lock.h"
#include "server/base/paths.h"
#include "server/base/status_macros.h"
#include "server/compile/compile_pool.h"
#include "server/gpu/device_model.h"
#include "frontends/ktuned/artifact_cache.h"
#include "frontends/ktuned/convert.h"
#include "frontends/ktuned/health_checked_gpu.h"
#include "frontends/ktuned/kernel_batch.h"
#include "frontends/ktuned/log_limiter.h"
#include "frontends/ktuned/parsed_request.h"
#include "frontends/ktuned/reactors.h"
#include "frontends/ktuned/request_validation.h"
#include "frontends/ktuned/listener_guard.h"
#include "frontends/ktuned/listener_probe.h"
#include "frontends/ktuned/tls_pairing.h"
#include "server/tuning/catalog.h"
#include "server/tuning/kernel_resolver.h"
#include "server/tuning/tuning_queue.h"

namespace ktune {
namespace {

bool WantsTls(const ServerOptions& o);

// How often a line about requests that do not parse may reach the log, per method.
constexpr absl::Duration kBadRequestLogInterval = absl::Seconds(10);

// The Ktune method `name` (gRPC numbers a service's methods in ktune.proto's order, as the
// descriptor does). Its request type must be Request: a mismatch is a bug here, found at
// start.
template <class Request>
const google::protobuf::MethodDescriptor& KtuneMethod(const std::string& name) {
  const google::protobuf::MethodDescriptor* m =
      google::protobuf::DescriptorPool::generated_pool()->FindMethodByName("ktune.v1.Ktune." +
                                                                           name);
  if (m == nullptr || m->input_type() != Request::descriptor()) {
    std::fprintf(stderr, "ktuned: no method ktune.v1.Ktune.%s taking %s\n", name.c_str(),
                 Request::descriptor()->full_name().c_str());
    std::abort();
  }
  return *m;
}

bool SameToken(const std::string& a, const std::string& b) {
  // Constant time in the contents, so the token cannot be guessed byte by byte.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// OK when `token` is empty or `metadata` carries "authorization: Bearer <token>".
absl::Status CheckBearerToken(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                              const std::string& token) {
  if (token.empty()) return absl::OkStatus();
  auto range = metadata.equal_range("authorization");
  if (range.first == range.second) {
    return absl::UnauthenticatedError(
        "authorization: this daemon wants metadata 'authorization: Bearer <token>'");
  }
  for (auto it = range.first; it != range.second; ++it) {
    // The scheme is case-insensitive (RFC 7235: "bearer", "BEARER"); the token is not.
    absl::string_view value(it->second.data(), it->second.size());
    constexpr absl::string_view kScheme = "bearer ";
    if (value.size() < kScheme.size() ||
        !absl::EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
      continue;
    }
    if (SameToken(std::string(value.substr(kScheme.size())), token)) return absl::OkStatus();
  }
  return absl::UnauthenticatedError("authorization: wrong bearer token");
}

// gRPC's reflection service (its plugin's, not ours) never looks at the token. This
// interceptor does, for reflection calls only, and cancels a call without it: gRPC 1.51's
// interceptors cannot finish a call with a status of their own, so the caller sees CANCELLED
// and no answer. Health checking stays open (it tells nothing but SERVING or not).
class ReflectionTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  ReflectionTokenInterceptor(grpc::experimental::ServerRpcInfo* info, const std::string& token)
      : info_(info), token_(token) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::POST_RECV_INITIAL_METADATA) &&
        !CheckBearerToken(*methods->GetRecvInitialMetadata(), token_).ok()) {
      info_->server_context()->TryCancel();
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* const info_;
  const std::string& token_;
};

class ReflectionTokenFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ReflectionTokenFactory(std::string token) : token_(std::move(token)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (!absl::StartsWith(info->method(), "/grpc.reflection.")) return nullptr;
    return new ReflectionTokenInterceptor(info, token_);
  }

 private:
  const std::string token_;
};


v1::FleetTierStats FleetProto(const fleet::FleetTier& tier) {
  const fleet::FleetStats s = tier.stats();
  v1::FleetTierStats p;
  p.set_remote(tier.name());
  p.set_host_id(tier.host_id());
  p.set_degraded(s.degraded);
  p.set_hits(s.hits);
  p.set_misses(s.misses);
  p.set_publishes(s.publishes);
  p.set_kept_faster(s.kept_faster);
  p.set_lease_waits(s.lease_waits);
  p.set_takeovers(s.takeovers);
  p.set_refused(s.refused);
  p.set_errors(s.errors);
  p.set_queued(s.queued);
  p.set_dropped(s.dropped);
  return p;
}

struct GpuSlot {
  std::unique_ptr<HealthCheckedGpu> gpu;
  v1::DeviceInfo info;
  std::string model;
};

KernelResolverOptions ResolverOptions(const ServerOptions& options,
                                      const std::vector<GpuSlot>& gpus,
                                      std::string compile_only_reason, TuningQueue* queue,
                                      FleetSync* fleet) {
  KernelResolverOptions r;
  r.fleet = fleet;
  r.store = options.store;
  r.compiler = options.compiler;
  r.queue = queue;
  for (const GpuSlot& g : gpus) r.devices.push_back(g.info);
  r.compile_only_reason = std::move(compile_only_reason);
  r.compile_only_target = options.compile_only_target;
  r.threads = options.fallback_threads;
  r.fallback_queue = options.fallback_queue;
  return r;
}

// The Ktune service: requests checked and converted, kernels resolved by the KernelResolver,
// answers converted back and status mapped; Tune streams its job's progress.
class KtuneServiceImpl final : public v1::Ktune::CallbackService {
 public:
  KtuneServiceImpl(const ServerOptions& options, std::vector<GpuSlot>* gpus,
                   std::string compile_only_reason, TuningQueue* queue, FleetSync* fleet)
      : options_(options),
        gpus_(*gpus),
        compile_only_reason_(compile_only_reason),
        artifacts_(options.artifact_cache_bytes),
        resolver_(NewKernelResolver(
            ResolverOptions(options, gpus_, std::move(compile_only_reason), queue, fleet))) {
    vctx_.registry = options.registry;
    for (const GpuSlot& g : gpus_) vctx_.devices.push_back(g.info);
    vctx_.target = gpus_.empty() ? resolver_->Target(0) : options.compile_only_target;
    TakeBadRequests("GetKernel", &KtuneServiceImpl::GetKernel);
    TakeBadRequests("GetKernels", &KtuneServiceImpl::GetKernels);
    TakeBadRequests("Tune", &KtuneServiceImpl::Tune);
    TakeBadRequests("ListTemplates", &KtuneServiceImpl::ListTemplates);
    TakeBadRequests("ListEntries", &KtuneServiceImpl::ListEntries);
    TakeBadRequests("GetDevices", &KtuneServiceImpl::GetDevices);
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
    ResolveKey(*request, "", [once] { return once->Claimed(); },
               [once, response](absl::StatusOr<v1::GetKernelResponse> r) {
                 if (!once->Claim()) return;
                 if (!r.ok()) return once->reactor->Finish(ToGrpcStatus(r.status()));
                 *response = *std::move(r);
                 once->reactor->Finish(grpc::Status::OK);
               });
    return call;
  }

  grpc::ServerUnaryReactor* GetKernels(grpc::CallbackServerContext* ctx,
                                       const v1::GetKernelsRequest* request,
                                       v1::GetKernelsResponse* response) override {
    auto* call = new UnaryCall(ctx);
    std::shared_ptr<UnaryOnce> once = call->once();
    absl::Status s = CheckToken(ctx);
    if (s.ok()) s = CheckKernelBatchSize(request->requests_size());
    if (!s.ok()) {
      once->Finish(ToGrpcStatus(s));
      return call;
    }
    // A copy: the call may be finished (its deadline) while keys are still being handed
    // out, and its request freed with it.
    const std::vector<v1::GetKernelRequest> keys(request->requests().begin(),
                                                 request->requests().end());
    auto batch = std::make_shared<KernelBatch>(
        static_cast<int>(keys.size()), options_.max_message_bytes,
        [once, response](v1::GetKernelsResponse r) {
          if (!once->Claim()) return;
          *response = std::move(r);
          once->reactor->Finish(grpc::Status::OK);
        });
    for (size_t i = 0; i < keys.size(); ++i) {
      ResolveKey(keys[i], absl::StrCat("requests[", i, "]"), [once] { return once->Claimed(); },
                 [batch, i](absl::StatusOr<v1::GetKernelResponse> r) {
                   batch->Set(static_cast<int>(i), std::move(r));
                 });
    }
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
      absl::StatusOr<store::Lookup> hit = resolver_->Lookup(*q);
      if (hit.ok() && !hit->stale) {
        EndWithArtifact(*state, ToArtifact(hit->entry, false, q->reference, v1::EXACT));
        return stream;
      }
    }
    absl::StatusOr<std::shared_ptr<TuningJob>> job =
        resolver_->Tune(*q, TuneSearchSettings(*request), request->yield_to_lease());
    if (!job.ok()) {
      state->End(ToGrpcStatus(job.status()));
      return stream;
    }
    (*job)->Subscribe([state](const JobProgress& p) {
      v1::TuneEvent e;
      *e.mutable_progress() = ToProto(p);
      state->Push(std::move(e));
    });
    (*job)->OnDone([state, q = *q](const absl::StatusOr<TuneResult>& r) {
      if (!r.ok()) return state->End(ToGrpcStatus(r.status()));
      EndWithArtifact(*state, ToArtifact(r->entry, false, q.reference, v1::EXACT));
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
    absl::StatusOr<std::vector<CatalogEntry>> entries =
        ListCatalogEntries(*options_.store, *options_.registry, options_.compiler->Version(),
                           filter, request->stale_only());
    if (!entries.ok()) {
      reactor->Finish(ToGrpcStatus(entries.status()));
      return reactor;
    }
    for (const CatalogEntry& e : *entries) *response->add_entries() = ToProto(e.summary, e.stale);
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
      d->set_copy_gbps(StoredCopyGbps(*options_.store, g.model));
      d->set_healthy(g.gpu->healthy());
      d->set_status(g.gpu->why());
    }
    if (gpus_.empty()) {
      v1::Device* d = response->add_devices();
      d->set_model_key(resolver_->DeviceModel(0));
      d->set_healthy(false);
      d->set_status(compile_only_reason_);
    }
    if (options_.fleet != nullptr) *response->mutable_fleet() = FleetProto(*options_.fleet);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }



  // For shutdown: FALLBACK requests still waiting are answered now (KernelResolver::Stop).
  void StopResolving() { resolver_->Stop(); }

 private:
  // Where a fresh exact answer is kept: the store's change counter read before the lookup,
  // and the request's cache key. No generation: not kept.
  struct CacheSlot {
    std::optional<int64_t> generation;
    std::string key;
  };

  static KernelPolicy ToPolicy(v1::Policy p) {
    switch (p) {
      case v1::TUNE:
        return KernelPolicy::kTune;
      case v1::FALLBACK:
        return KernelPolicy::kFallback;
      default:  // CACHE_ONLY, and POLICY_UNSPECIFIED means the same
        return KernelPolicy::kCacheOnly;
    }
  }

  static v1::Provenance ProvenanceProto(KernelProvenance p) {
    switch (p) {
      case KernelProvenance::kNearest:
        return v1::NEAREST;
      case KernelProvenance::kDefault:
        return v1::DEFAULT;
      case KernelProvenance::kExact:
        break;
    }
    return v1::EXACT;
  }

  using KeyAnswer = std::function<void(absl::StatusOr<v1::GetKernelResponse>)>;

  // Answers one GetKernel key: from the artifact cache, else validated and handed to the
  // resolver. `done` is called once: at once for a hit or a bad key, else from the
  // resolver's callback. `where` names the key in a batch ("requests[3]"; "" alone): a bad
  // field becomes "requests[3].shape: ...", any other error "requests[3]: ...".
  // `abandoned`: true once nobody waits for the answer (no compile is started then).
  void ResolveKey(const v1::GetKernelRequest& request, const std::string& where,
                  std::function<bool()> abandoned, KeyAnswer done) {
    // A fresh exact hit is the same answer under every policy, so the cache serves them all.
    // The counter is read before the store is: a commit in between tags what is read now
    // with the older counter, so it is never served past that commit.
    // No counter (the cache is off, or it could not be read): neither served nor kept.
    CacheSlot slot;
    if (artifacts_.enabled()) {
      if (absl::StatusOr<int64_t> counter = resolver_->ChangeCounter(); counter.ok()) {
        slot.generation = *counter;
        slot.key = ArtifactCache::Key(request.template_id(), request.dtype(), request.shape(),
                                      request.gpu());
      }
    }
    if (slot.generation) {
      if (std::shared_ptr<const v1::KernelArtifact> a = artifacts_.Get(slot.key, *slot.generation)) {
        v1::GetKernelResponse response;
        *response.mutable_artifact() = *a;
        return done(std::move(response));
      }
    }
    absl::StatusOr<KernelQuery> q = ValidateGetKernel(request, vctx_);
    if (!q.ok()) return done(Named(q.status(), where, "."));
    q->abandoned = std::move(abandoned);
    auto query = std::make_shared<const KernelQuery>(*std::move(q));
    resolver_->Resolve(*query, ToPolicy(request.policy()),
                       [this, query, where, slot = std::move(slot), done = std::move(done)](
                           absl::StatusOr<ResolvedKernel> r) {
                         absl::StatusOr<v1::GetKernelResponse> a =
                             Answer(*query, slot, std::move(r));
                         if (!a.ok()) a = Named(a.status(), where, ": ");
                         done(std::move(a));
                       });
  }

  // `status` with its message behind `where` and `sep`; unchanged when `where` is empty.
  static absl::Status Named(const absl::Status& status, const std::string& where,
                            absl::string_view sep) {
    if (where.empty()) return status;
    return absl::Status(status.code(), absl::StrCat(where, sep, status.message()));
  }

  // The response for the resolver's answer; keeps a cacheable artifact.
  absl::StatusOr<v1::GetKernelResponse> Answer(const KernelQuery& q, const CacheSlot& slot,
                                               absl::StatusOr<ResolvedKernel> r) {
    if (!r.ok()) return r.status();
    absl::StatusOr<v1::KernelArtifact> a =
        ToArtifact(r->entry, r->stale, r->bound ? *r->bound : q.reference, ProvenanceProto(r->provenance));
    if (!a.ok()) return a.status();
    v1::GetKernelResponse response;
    if (r->cacheable && slot.generation) {
      auto kept = std::make_shared<const v1::KernelArtifact>(*std::move(a));
      artifacts_.Put(slot.key, *slot.generation, kept);
      *response.mutable_artifact() = *kept;
    } else {
      *response.mutable_artifact() = *std::move(a);
    }
    response.set_tuning_job_id(r->tuning_job_id);
    return response;
  }

  // Ends a Tune stream with its artifact as the last event, or with the error.
  static void EndWithArtifact(StreamState& state, absl::StatusOr<v1::KernelArtifact> a) {
    if (!a.ok()) return state.End(ToGrpcStatus(a.status()));
    v1::TuneEvent e;
    *e.mutable_artifact() = *std::move(a);
    state.Push(std::move(e));
    state.End(grpc::Status::OK);
  }

  absl::Status CheckToken(grpc::CallbackServerContext* ctx) const {
    return CheckBearerToken(ctx->client_metadata(), options_.token);
  }

  // gRPC's generated handlers answer request bytes that do not parse with UNIMPLEMENTED and
  // no message, before the method's handler (and so its token check) runs. Each method is
  // registered again for Parsed<Request> (parsed_request.h): a request that parses goes to
  // its handler as before, one that does not gets Unparsable's answer. (The generated
  // SetMessageAllocatorFor_* would now cast these handlers to the wrong type: not for use.)
  template <class Request, class Response>
  void TakeBadRequests(const std::string& name,
                       grpc::ServerUnaryReactor* (KtuneServiceImpl::*handler)(
                           grpc::CallbackServerContext*, const Request*, Response*)) {
    const google::protobuf::MethodDescriptor& m = KtuneMethod<Request>(name);
    MarkMethodCallback(
        m.index(),
        new grpc::internal::CallbackUnaryHandler<Parsed<Request>, Response>(
            [this, handler, &m](grpc::CallbackServerContext* ctx, const Parsed<Request>* request,
                                Response* response) -> grpc::ServerUnaryReactor* {
              if (request->ok) return (this->*handler)(ctx, &request->message, response);
              grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
              reactor->Finish(Unparsable(ctx, m));
              return reactor;
            }));
  }
  template <class Request>
  void TakeBadRequests(const std::string& name,
                       grpc::ServerWriteReactor<v1::TuneEvent>* (KtuneServiceImpl::*handler)(
                           grpc::CallbackServerContext*, const Request*)) {
    const google::protobuf::MethodDescriptor& m = KtuneMethod<Request>(name);
    MarkMethodCallback(
        m.index(),
        new grpc::internal::CallbackServerStreamingHandler<Parsed<Request>, v1::TuneEvent>(
            [this, handler, &m](grpc::CallbackServerContext* ctx, const Parsed<Request>* request)
                -> grpc::ServerWriteReactor<v1::TuneEvent>* {
              if (request->ok) return (this->*handler)(ctx, &request->message);
              auto* stream = new TuneStream(ctx);
              stream->state()->End(Unparsable(ctx, m));
              return stream;
            }));
  }

  // The answer to request bytes that do not parse as method `m`'s request: the token check
  // first, as for every call (no log line for a caller without the token); then
  // INVALID_ARGUMENT naming the method and the type, in the log at most once per method
  // and interval (a looping client must not flood it).
  grpc::Status Unparsable(grpc::CallbackServerContext* ctx,
                          const google::protobuf::MethodDescriptor& m) {
    if (absl::Status s = CheckToken(ctx); !s.ok()) return ToGrpcStatus(s);
    const std::string why =
        absl::StrCat("/", m.service()->full_name(), "/", m.name(),
                     ": the request bytes do not parse as ", m.input_type()->full_name());
    bad_requests_.Log(m.full_name(), absl::StrCat(why, " (from ", ctx->peer(), ")"));
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
  }

  const ServerOptions& options_;
  const std::vector<GpuSlot>& gpus_;
  const std::string compile_only_reason_;
  ArtifactCache artifacts_;
  ValidationContext vctx_;
  LogLimiter bad_requests_{kBadRequestLogInterval, [](const std::string& line) {
                             std::fprintf(stderr, "ktuned: %s\n", line.c_str());
                           }};
  // Last: destroyed first, its threads joined while the rest is still there.
  const std::unique_ptr<KernelResolver> resolver_;
};

class ServerImpl final : public KtuneServer {
 public:
  int port() const override { return port_; }
  bool compile_only() const override { return gpus_.empty(); }
  std::string compile_only_reason() const override { return compile_only_reason_; }
  bool serving() const override {
    if (listener_dead_) return false;
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

  // Probes the listener every options_.listener_probe_interval, if set.
  void WatchListener() {
    if (options_.listener_probe_interval <= absl::ZeroDuration()) return;
    ListenerWatchOptions w;
    w.listen = options_.listen;
    w.port = port_;
    w.tls = WantsTls(options_);
    w.interval = options_.listener_probe_interval;
    watch_ = StartListenerWatch(std::move(w), [this](const std::string& why) {
      listener_dead_ = true;
      UpdateHealth();
      if (options_.on_listener_dead) options_.on_listener_dead(why);
    });
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
    watch_.reset();  // its callback uses the health service, which goes with server_
    // Jobs first: every TUNE call and Tune stream then finishes (cancelled), so the
    // server's shutdown does not wait out a long tune; FALLBACK's waiting compiles are
    // dropped (answered UNAVAILABLE) rather than drained.
    service_->StopResolving();
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

  // `<socket>.lock`, held while this server may own the socket path (declared first, so it
  // is released last); null on TCP.
  std::unique_ptr<FileLock> socket_lock_;
  ServerOptions options_;
  std::vector<GpuSlot> gpus_;
  std::string compile_only_reason_;
  std::unique_ptr<CompilePool> pool_;
  std::unique_ptr<FleetSync> fleet_;  // with options_.fleet; before the queue that uses it
  std::unique_ptr<TuningQueue> queue_;
  std::unique_ptr<KtuneServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<ListenerWatch> watch_;
  std::atomic<bool> listener_dead_{false};
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


absl::Status CheckTls(const ServerOptions& o) {
  switch (CheckTlsPairing(!UnixSocketPath(o.listen).empty(), !o.tls_cert_pem.empty(),
                          !o.tls_key_pem.empty(), !o.tls_client_ca_pem.empty())) {
    case TlsMisfit::kUnixSocket:
      return absl::InvalidArgumentError(absl::StrCat(
          "tls: ", o.listen,
          " is a unix socket, which stays plaintext (its 0600 file mode guards it); TLS is "
          "for a HOST:PORT listener"));
    case TlsMisfit::kHalfPair:
      return absl::InvalidArgumentError(
          "tls: the server certificate and its private key go together; one is missing");
    case TlsMisfit::kClientCaAlone:
      return absl::InvalidArgumentError(
          "tls: client certificates (mTLS) need the server's own certificate and key too");
    case TlsMisfit::kNone:
      break;
  }
  return absl::OkStatus();
}

bool WantsTls(const ServerOptions& o) {
  return !o.tls_cert_pem.empty() || !o.tls_key_pem.empty() || !o.tls_client_ca_pem.empty();
}

// GPUs: ordinals until the first that is not there. None: compile-only, saying why.
void ProbeGpus(ServerImpl* s) {
  const ServerOptions& o = s->options_;
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
    slot.gpu = std::make_unique<HealthCheckedGpu>(*std::move(gpu), [s] { s->UpdateHealth(); });
    slot.info = *info;
    slot.model = DeviceModelKey(*info);
    s->gpus_.push_back(std::move(slot));
  }
}

std::shared_ptr<grpc::ServerCredentials> Credentials(const ServerOptions& o) {
  if (!WantsTls(o)) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(
      o.tls_client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                  : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = o.tls_client_ca_pem;
  ssl.pem_key_cert_pairs.push_back({o.tls_key_pem, o.tls_cert_pem});
  return grpc::SslServerCredentials(ssl);
}

// Builds and starts the gRPC server; a unix socket is born 0600 in a 0700 folder.
absl::Status Listen(ServerImpl* s) {
  const ServerOptions& o = s->options_;
  grpc::EnableDefaultHealthCheckService(true);
  if (o.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // No SO_REUSEPORT: a second ktuned on this port must fail to bind, not share the port and
  // split the connections with the first.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Idle connections that never speak HTTP/2 hold a descriptor each until this passes.
  builder.AddChannelArgument(
      GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
      static_cast<int>(absl::ToInt64Milliseconds(o.first_frame_timeout)));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, o.max_concurrent_streams);
  builder.SetMaxReceiveMessageSize(o.max_message_bytes);
  builder.SetMaxSendMessageSize(o.max_message_bytes);
  builder.AddListeningPort(o.listen, Credentials(o), &s->port_);
  builder.RegisterService(s->service_.get());
  if (o.reflection && !o.token.empty()) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> guards;
    guards.push_back(std::make_unique<ReflectionTokenFactory>(o.token));
    builder.experimental().SetInterceptorCreators(std::move(guards));
  }

  // Leaves the server stopped before it started: the destructor then has nothing to stop.
  auto abandon = [s](absl::Status why) {
    s->queue_->Shutdown();
    absl::MutexLock lock(&s->mu_);
    s->shutting_down_ = s->shut_down_ = true;
    return why;
  };
  const std::string socket = UnixSocketPath(o.listen);
  mode_t old_umask = 0;
  if (!socket.empty()) {
    const std::string dir = socket.substr(0, socket.rfind('/'));
    if (IsDefaultKtuneDir(dir)) {
      // ktune's own folder (the default socket's): refused unless it is ours alone.
      if (absl::Status mine = MakePrivateDir(dir); !mine.ok()) return abandon(mine);
    } else if (!dir.empty() && !IsDir(dir)) {
      if (absl::Status made = MakeDirs(dir); !made.ok()) return abandon(made);
      chmod(dir.c_str(), 0700);
    }
    // gRPC unlinks a socket path before binding it: without this lock a second ktuned
    // would take the path from a running one, which stays up, unreachable.
    absl::StatusOr<std::unique_ptr<FileLock>> lock = LockFileExclusive(socket + ".lock");
    if (!lock.ok()) {
      return abandon(absl::Status(
          lock.status().code(),
          absl::StrCat("listen: ", o.listen, " is in use: ", lock.status().message())));
    }
    s->socket_lock_ = *std::move(lock);
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
    return abandon(absl::UnavailableError(absl::StrCat(
        "cannot listen on ", o.listen,
        WantsTls(o) ? " (or the TLS certificate and key are not a usable pair; or another "
                      "process listens there)"
                    : " (another process may listen there)")));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<KtuneServer>> StartKtuneServer(ServerOptions options) {
  if (options.registry == nullptr || options.store == nullptr || options.compiler == nullptr) {
    return absl::InvalidArgumentError("registry, store and compiler are required");
  }
  if (options.listen.empty()) return absl::InvalidArgumentError("listen: required");
  KTUNE_RETURN_IF_ERROR(CheckTls(options));
  if (!options.insecure &&
      IsUnguardedExposure(options.listen, WantsTls(options), !options.token.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen: ", options.listen, " can be reached by others and neither TLS nor a token "
        "guards it; set tls_cert_pem/tls_key_pem or token, or insecure to serve it open"));
  }
  auto s = std::make_unique<ServerImpl>();
  s->options_ = std::move(options);
  const ServerOptions& o = s->options_;
  ProbeGpus(s.get());
  CompilePool* pool = o.pool;
  if (pool == nullptr) {
    s->pool_ = std::make_unique<CompilePool>(o.compiler, o.compile_threads);
    pool = s->pool_.get();
  }
  std::vector<TuningEnv> envs;
  std::vector<std::string> models;
  for (GpuSlot& g : s->gpus_) {
    envs.push_back({o.registry, o.compiler, pool, g.gpu.get(), o.store, o.idle});
    models.push_back(g.model);
  }
  if (o.fleet != nullptr) s->fleet_ = std::make_unique<FleetSync>(o.fleet, o.store, o.registry);
  s->queue_ = std::make_unique<TuningQueue>(std::move(envs), o.queue_capacity, s->fleet_.get(),
                                            std::move(models));
  s->service_ = std::make_unique<KtuneServiceImpl>(o, &s->gpus_, s->compile_only_reason_,
                                                   s->queue_.get(), s->fleet_.get());
  KTUNE_RETURN_IF_ERROR(Listen(s.get()));
  // SERVING compile-only (lookups work on any host) and while a GPU is healthy;
  // NOT_SERVING on a GPU host whose GPUs all fail (UpdateHealth follows them).
  s->SetHealthService(s->server_->GetHealthCheckService());
  s->WatchListener();
  return std::unique_ptr<KtuneServer>(std::move(s));
}

}  // namespace ktune
