// `ktune get`: asks ktuned for a template's tuned kernel (GetKernel) and prints what came
// back; --out writes the cubin.
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "frontends/ktune/commands.h"
#include "client/lib/ktune_client.h"
#include "server/templates/shape.h"

namespace ktune::cli {
namespace {

struct GetArgs {
  std::string template_id;
  std::string dtype;
  std::string shape;
  std::string policy = "cache_only";
  std::string daemon;
  std::string token;
  std::string out;
  int gpu = 0;
  double timeout_s = 0;
};

std::string JoinMap(const std::map<std::string, int64_t>& m) {
  return absl::StrJoin(m, ",", absl::PairFormatter("="));
}

std::string Dims(const std::vector<uint32_t>& v) { return absl::StrJoin(v, "x"); }

void PrintArtifact(const client::KernelArtifact& a) {
  std::ostringstream o;
  o << "provenance:  " << client::ProvenanceName(a.provenance)
    << (a.stale ? " (stale)" : "") << "\n";
  o << "key:         " << a.device_model << " " << a.template_id << " " << a.dtype << " "
    << JoinMap(a.shape) << " nvrtc " << a.nvrtc_version << " source "
    << a.template_source_hash.substr(0, 12) << "\n";
  if (a.entry_id != 0) o << "entry:       " << a.entry_id << "\n";
  if (a.tuning_job_id != 0) o << "tuning job:  " << a.tuning_job_id << "\n";
  o << "params:      " << JoinMap(a.params) << "\n";
  o << "knobs:       target=" << a.knobs.target << " maxrregcount=" << a.knobs.maxrregcount
    << " min_blocks=" << a.knobs.min_blocks << " fast_math=" << (a.knobs.fast_math ? 1 : 0)
    << "\n";
  o << std::fixed << std::setprecision(2);
  if (a.metrics.time_ns > 0) {
    o << "time:        " << a.metrics.time_ns / 1000.0 << " us (spread "
      << a.metrics.spread_ns / 1000.0 << " us)\n";
    o << "bandwidth:   " << a.metrics.gbps << " GB/s (" << a.metrics.ceiling_fraction * 100
      << "% of measured copy), " << a.metrics.gflops << " GFLOP/s\n";
    o << "resources:   " << a.metrics.registers << " registers, " << a.metrics.spill_bytes
      << " spill bytes, occupancy " << a.metrics.occupancy << "\n";
  } else {
    o << "time:        not measured\n";
  }
  o << "cubin:       " << a.cubin.size() << " bytes, sha256 " << a.cubin_sha256 << "\n";
  for (size_t i = 0; i < a.launches.size(); ++i) {
    const client::KernelLaunch& l = a.launches[i];
    std::vector<std::string> args;
    for (int32_t idx : l.args) {
      args.push_back(idx >= 0 && static_cast<size_t>(idx) < a.args.size() ? a.args[idx].name
                                                                          : "?");
    }
    o << "launch " << i << ":    " << l.lowered_name << " grid " << Dims(l.grid) << " block "
      << Dims(l.block) << " smem " << l.shared_bytes << " args(" << absl::StrJoin(args, ",")
      << ")" << (l.programmatic ? " programmatic" : "") << "\n";
  }
  for (const client::KernelArg& arg : a.args) {
    if (arg.is_buffer) {
      o << "arg:         " << arg.name << " buffer " << arg.dtype << "[" << arg.count << "]\n";
    } else if (arg.scalar_type == "f32") {
      o << "arg:         " << arg.name << " f32 = " << std::setprecision(6) << arg.number
        << std::setprecision(2) << "\n";
    } else if (arg.scalar_type == "tensor_map") {
      const client::TensorMapArg& t = arg.tensor_map;
      o << "arg:         " << arg.name << " tensor_map over " << t.buffer << " " << t.dtype
        << " dims [" << absl::StrJoin(t.dims, ", ") << "] strides ["
        << absl::StrJoin(t.strides, ", ") << "] box [" << absl::StrJoin(t.box, ", ")
        << "] swizzle " << t.swizzle << "\n";
    } else {
      o << "arg:         " << arg.name << " " << arg.scalar_type << " = " << arg.int_value
        << "\n";
    }
  }
  std::cout << o.str();
}

int RunGet(const GetArgs& args) {
  absl::StatusOr<client::Policy> policy = client::ParsePolicy(args.policy);
  if (!policy.ok()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--", policy.status().message())));
  }
  absl::StatusOr<Shape> shape = ParseShape(args.shape);
  if (!shape.ok()) return Fail(shape.status());
  client::ClientOptions options;
  options.bearer_token = args.token;
  if (args.timeout_s > 0) {
    options.default_deadline = absl::Seconds(args.timeout_s);
  } else if (*policy == client::Policy::kTune) {
    options.default_deadline = absl::InfiniteDuration();  // tuning takes minutes
  }
  const std::string target = args.daemon.empty() ? client::DefaultDaemonTarget() : args.daemon;
  absl::StatusOr<std::unique_ptr<client::KtuneClient>> daemon =
      client::Connect(target, options);
  if (!daemon.ok()) return Fail(daemon.status());
  client::KernelRequest request;
  request.template_id = args.template_id;
  request.dtype = args.dtype;
  request.shape = *shape;
  request.policy = *policy;
  request.gpu = args.gpu;
  absl::StatusOr<client::KernelArtifact> artifact = (*daemon)->GetKernel(request);
  if (!artifact.ok()) return Fail(artifact.status());
  PrintArtifact(*artifact);
  if (!args.out.empty()) {
    std::ofstream file(args.out, std::ios::binary | std::ios::trunc);
    file.write(artifact->cubin.data(), static_cast<std::streamsize>(artifact->cubin.size()));
    file.close();
    if (!file) {
      return Fail(absl::PermissionDeniedError(absl::StrCat("--out: cannot write ", args.out)));
    }
    std::cout << "wrote:       " << args.out << "\n";
  }
  return kExitOk;
}

}  // namespace

Command AddGetCommand(CLI::App& parent) {
  auto args = std::make_shared<GetArgs>();
  CLI::App* app = parent.add_subcommand(
      "get", "Ask ktuned for a template's tuned kernel (GetKernel) and print it");
  app->add_option("template", args->template_id, "Template name, e.g. rmsnorm")->required();
  app->add_option("--dtype", args->dtype, "f32, f16, bf16, f8e4m3 or f8e5m2")->required();
  app->add_option("--shape", args->shape, "Every dim, e.g. tokens=4096,hidden=8192")
      ->required();
  app->add_option("--policy", args->policy, "On a miss: cache_only, tune or fallback")
      ->capture_default_str();
  app->add_option("--daemon", args->daemon,
                  "ktuned's address, unix:///path or host:port (default: $KTUNE_DAEMON, "
                  "else unix://$XDG_RUNTIME_DIR/ktune/ktuned.sock)");
  app->add_option("--token", args->token, "Bearer token, if ktuned wants one");
  app->add_option("--gpu", args->gpu, "The daemon's GPU ordinal")->capture_default_str();
  app->add_option("--timeout", args->timeout_s,
                  "Seconds to wait (default: 30, none with --policy tune)")
      ->check([](const std::string& text) -> std::string {
        double v = 0;
        // CLI11's PositiveNumber lets nan through (no comparison with nan is false).
        if (!absl::SimpleAtod(text, &v) || !std::isfinite(v) || v <= 0) {
          return "a positive, finite number of seconds";
        }
        return "";
      });
  app->add_option("--out", args->out, "Write the cubin to this file");
  return {app, [args] { return RunGet(*args); }};
}

}  // namespace ktune::cli
