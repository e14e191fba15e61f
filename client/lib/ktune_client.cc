#include "client/lib/ktune_client.h"

#include "server/base/paths.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstdlib>
#include <deque>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/lib/proto_convert.h"
#include "ktune/v1/ktune.grpc.pb.h"
#include "server/base/sha256.h"
#include "server/base/status_macros.h"

namespace ktune::client {
namespace {

static_assert(kMaxKernelsPerCall == v1::MAX_KERNELS_PER_CALL,
              "ktune_client.h's kMaxKernelsPerCall follows ktune.proto");

class GrpcKtuneClient : public KtuneClient {
 public:
  GrpcKtuneClient(std::string target, ClientOptions options,
                  std::shared_ptr<grpc::Channel> channel)
      : target_(std::move(target)),
        options_(std::move(options)),
        channel_(std::move(channel)),
        stub_(v1::Ktune::NewStub(channel_)) {}

  absl::StatusOr<KernelArtifact> GetKernel(const KernelRequest& request) override {
    grpc::ClientContext context;
    Prepare(context, request.deadline);
    v1::GetKernelResponse response;
    KTUNE_RETURN_IF_ERROR(
        Check("GetKernel", stub_->GetKernel(&context, ToProto(request), &response)));
    KernelArtifact artifact = ArtifactFromProto(response.artifact());
    artifact.tuning_job_id = response.tuning_job_id();
    KTUNE_RETURN_IF_ERROR(VerifyArtifact(artifact));
    return artifact;
  }

  absl::StatusOr<std::vector<absl::StatusOr<KernelArtifact>>> GetKernels(
      const std::vector<KernelRequest>& requests) override {
    std::vector<absl::StatusOr<KernelArtifact>> results(
        requests.size(), absl::InternalError("GetKernels: not answered"));
    absl::Duration deadline = absl::ZeroDuration();
    for (const KernelRequest& r : requests) deadline = std::max(deadline, r.deadline);
    std::deque<size_t> pending;
    for (size_t i = 0; i < requests.size(); ++i) pending.push_back(i);
    while (!pending.empty()) {
      std::vector<size_t> chunk;
      while (!pending.empty() && chunk.size() < static_cast<size_t>(kMaxKernelsPerCall)) {
        chunk.push_back(pending.front());
        pending.pop_front();
      }
      v1::GetKernelsRequest request;
      for (size_t i : chunk) *request.add_requests() = ToProto(requests[i]);
      grpc::ClientContext context;
      Prepare(context, deadline);
      v1::GetKernelsResponse response;
      const grpc::Status s = stub_->GetKernels(&context, request, &response);
      if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        // A daemon from before GetKernels: one call per key.
        for (size_t i : chunk) results[i] = Renamed(GetKernel(requests[i]), i);
        continue;
      }
      KTUNE_RETURN_IF_ERROR(Check("GetKernels", s));
      if (response.results_size() != static_cast<int>(chunk.size())) {
        return absl::InternalError(absl::StrCat("GetKernels: ", chunk.size(), " keys asked, ",
                                                response.results_size(), " answered"));
      }
      bool answered = false;
      std::vector<size_t> again;
      for (size_t j = 0; j < chunk.size(); ++j) {
        const v1::KernelResult& r = response.results(static_cast<int>(j));
        results[chunk[j]] = Renamed(ResultFromProto(r), chunk[j], j);
        answered = answered || r.code() == 0;
        if (r.retry()) again.push_back(chunk[j]);
      }
      // Left for another call: asked again, unless this call answered none (no progress).
      if (answered) pending.insert(pending.begin(), again.begin(), again.end());
    }
    return results;
  }

  absl::StatusOr<KernelArtifact> Tune(
      const TuneRequest& request,
      const std::function<bool(const TuneProgress&)>& on_progress) override {
    grpc::ClientContext context;
    // Tuning takes minutes: no default deadline, only the request's own.
    Prepare(context, request.deadline == absl::ZeroDuration() ? absl::InfiniteDuration()
                                                              : request.deadline);
    std::unique_ptr<grpc::ClientReader<v1::TuneEvent>> reader =
        stub_->Tune(&context, ToProto(request));
    v1::TuneEvent event;
    std::optional<KernelArtifact> artifact;
    bool cancelled = false;
    while (reader->Read(&event)) {
      if (event.has_progress()) {
        if (on_progress && !on_progress(ProgressFromProto(event.progress()))) {
          cancelled = true;
          context.TryCancel();
          break;
        }
      } else if (event.has_artifact()) {
        artifact = ArtifactFromProto(event.artifact());
      }
    }
    if (cancelled) {
      // Drain what is in flight so Finish does not wait on unread messages.
      while (reader->Read(&event)) {
      }
      reader->Finish().ok();
      return absl::CancelledError("Tune: cancelled by the progress callback");
    }
    KTUNE_RETURN_IF_ERROR(Check("Tune", reader->Finish()));
    if (!artifact) return absl::InternalError("Tune: the stream ended without an artifact");
    KTUNE_RETURN_IF_ERROR(VerifyArtifact(*artifact));
    return *std::move(artifact);
  }

  absl::StatusOr<TemplateList> ListTemplates() override {
    grpc::ClientContext context;
    Prepare(context, absl::ZeroDuration());
    v1::ListTemplatesResponse response;
    KTUNE_RETURN_IF_ERROR(Check(
        "ListTemplates",
        stub_->ListTemplates(&context, v1::ListTemplatesRequest(), &response)));
    return TemplatesFromProto(response);
  }

  absl::StatusOr<DeviceList> GetDevices() override {
    grpc::ClientContext context;
    Prepare(context, absl::ZeroDuration());
    v1::GetDevicesResponse response;
    KTUNE_RETURN_IF_ERROR(Check(
        "GetDevices", stub_->GetDevices(&context, v1::GetDevicesRequest(), &response)));
    return DevicesFromProto(response);
  }

  const std::string& target() const override { return target_; }

 private:
  // `deadline` zero: the client's default; infinite: none.
  void Prepare(grpc::ClientContext& context, absl::Duration deadline) const {
    if (deadline == absl::ZeroDuration()) deadline = options_.default_deadline;
    if (deadline != absl::InfiniteDuration() && deadline > absl::ZeroDuration()) {
      context.set_deadline(std::chrono::system_clock::now() +
                           absl::ToChronoNanoseconds(deadline));
    }
    if (!options_.bearer_token.empty()) {
      // Metadata rather than grpc::AccessTokenCredentials: gRPC refuses call credentials on
      // the insecure channel of a unix socket, ktuned's default.
      context.AddMetadata("authorization", absl::StrCat("Bearer ", options_.bearer_token));
    }
  }

  static absl::StatusOr<KernelArtifact> ResultFromProto(const v1::KernelResult& r) {
    if (r.code() != 0) {
      return absl::Status(static_cast<absl::StatusCode>(r.code()), r.message());
    }
    KernelArtifact artifact = ArtifactFromProto(r.response().artifact());
    artifact.tuning_job_id = r.response().tuning_job_id();
    KTUNE_RETURN_IF_ERROR(VerifyArtifact(artifact));
    return artifact;
  }

  // A key's error under its index in the caller's requests: the daemon's "requests[j]"
  // (its index in one call) becomes "requests[i]"; a message without one gets it in front.
  static absl::StatusOr<KernelArtifact> Renamed(absl::StatusOr<KernelArtifact> r, size_t i,
                                                std::optional<size_t> j = std::nullopt) {
    if (r.ok()) return r;
    absl::string_view message = r.status().message();
    const std::string theirs = j ? absl::StrCat("requests[", *j, "]") : "";
    if (!theirs.empty() && absl::StartsWith(message, theirs)) {
      message.remove_prefix(theirs.size());
      return absl::Status(r.status().code(), absl::StrCat("requests[", i, "]", message));
    }
    return absl::Status(r.status().code(), absl::StrCat("requests[", i, "]: ", message));
  }

  // The daemon's status unchanged (same code and message), except that an unreachable
  // daemon names the target, which gRPC's message leaves out or buries.
  absl::Status Check(const char* call, const grpc::Status& status) const {
    absl::Status s = StatusFromGrpc(status);
    if (s.code() == absl::StatusCode::kUnavailable) {
      return absl::UnavailableError(
          absl::StrCat(call, ": ktuned at ", target_, " is unavailable: ", s.message()));
    }
    return s;
  }

  const std::string target_;
  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Ktune::Stub> stub_;
};

}  // namespace

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kCacheOnly: return "cache_only";
    case Policy::kTune: return "tune";
    case Policy::kFallback: return "fallback";
    default: return "unspecified";
  }
}

absl::StatusOr<Policy> ParsePolicy(const std::string& name) {
  if (name == "cache_only") return Policy::kCacheOnly;
  if (name == "tune") return Policy::kTune;
  if (name == "fallback") return Policy::kFallback;
  return absl::InvalidArgumentError(
      absl::StrCat("policy: unknown policy '", name, "'; expected cache_only, tune or fallback"));
}

const char* ProvenanceName(Provenance provenance) {
  switch (provenance) {
    case Provenance::kExact: return "exact";
    case Provenance::kNearest: return "nearest";
    case Provenance::kDefault: return "default";
    default: return "unspecified";
  }
}

absl::Status VerifyArtifact(const KernelArtifact& artifact) {
  const std::string actual = Sha256Hex(artifact.cubin);
  if (actual != artifact.cubin_sha256) {
    return absl::DataLossError(absl::StrCat(
        "artifact of ", artifact.template_id, ": cubin sha256 is ", actual,
        " but the artifact says '", artifact.cubin_sha256, "' (", artifact.cubin.size(),
        " bytes); refusing a corrupted cubin"));
  }
  return absl::OkStatus();
}

std::string DefaultDaemonTarget() { return ::ktune::DefaultDaemonTarget(); }

absl::StatusOr<std::unique_ptr<KtuneClient>> Connect(const std::string& target,
                                                     const ClientOptions& options) {
  if (target.empty()) {
    return absl::InvalidArgumentError(
        "target: empty; expected unix:///path/to/ktuned.sock or host:port");
  }
  if (options.tls_client_cert_chain_pem.empty() != options.tls_client_key_pem.empty()) {
    return absl::InvalidArgumentError(
        "tls: a client certificate chain and its private key go together (mTLS); one is "
        "missing");
  }
  if (options.max_receive_message_bytes <= 0) {
    return absl::InvalidArgumentError("max_receive_message_bytes: must be positive");
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.use_tls || !options.tls_root_certs_pem.empty() ||
      !options.tls_client_cert_chain_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_root_certs_pem;
    ssl.pem_cert_chain = options.tls_client_cert_chain_pem;
    ssl.pem_private_key = options.tls_client_key_pem;
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(target, credentials, args);
  if (channel == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("target: gRPC rejected '", target, "'"));
  }
  return std::unique_ptr<KtuneClient>(
      std::make_unique<GrpcKtuneClient>(target, options, std::move(channel)));
}

}  // namespace ktune::client
