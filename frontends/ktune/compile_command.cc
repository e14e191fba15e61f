// `ktune compile`: one candidate of a template, compiled to a cubin file, with what ptxas
// says of its resources.
#include <iomanip>
#include <iostream>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "frontends/ktune/commands.h"
#include "server/base/file.h"
#include "server/base/paths.h"
#include "server/base/sha256.h"
#include "server/base/status_macros.h"
#include "server/templates/instance.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"
#include "server/tuning/kernel_build.h"

namespace ktune::cli {
namespace {

struct CompileArgs {
  std::string template_name;
  std::string dtype;
  std::string shape;
  std::vector<std::string> params;
  std::string arch = "sm_90";
  int64_t maxrregcount = 0;
  int64_t min_blocks = 1;
  bool fast_math = false;
  std::string out;
  std::string templates_dir;
  std::string cache_dir;
  bool no_cache = false;
  bool reference = false;
};

// "BLOCK=256" items -> params over the template's defaults.
absl::Status ApplyParams(const std::vector<std::string>& items,
                         std::map<std::string, int64_t>* params) {
  for (const std::string& item : items) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    int64_t v = 0;
    if (item.find('=') == std::string::npos || !absl::SimpleAtoi(kv.second, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--param: '", item, "' is not NAME=INTEGER"));
    }
    if (!params->count(kv.first)) {
      std::vector<std::string> known;
      for (const auto& [name, value] : *params) known.push_back(name);
      return absl::InvalidArgumentError(
          absl::StrCat("--param: no param '", kv.first, "'; this template has ",
                       known.empty() ? "none" : absl::StrJoin(known, ", ")));
    }
    (*params)[kv.first] = v;
  }
  return absl::OkStatus();
}

std::string Dim3(const std::array<int64_t, 3>& d) {
  return absl::StrCat("[", d[0], ", ", d[1], ", ", d[2], "]");
}

// The candidate the flags name: the template's defaults with --param and the knobs over
// them; for --reference, the defaults (BindReference sets the reference's own).
absl::StatusOr<Config> ConfigFromArgs(const CompileArgs& args, const KernelTemplate& tmpl,
                                      const TargetInfo& target) {
  // The reference's launches (as the worker runs them to check every candidate) are bound
  // with the template's own reference params and default knobs: the candidate flags do not
  // apply to it.
  if (args.reference && (!args.params.empty() || args.maxrregcount != 0 ||
                         args.min_blocks != 1 || args.fast_math)) {
    return absl::InvalidArgumentError(
        "--reference compiles the template's reference kernel: it takes no --param, "
        "--maxrregcount, --min-blocks or --fast-math");
  }
  Config config = DefaultConfig(tmpl, target);
  KTUNE_RETURN_IF_ERROR(ApplyParams(args.params, &config.params));
  KTUNE_RETURN_IF_ERROR(ValidateParams(tmpl, config.params));
  if (args.maxrregcount != 0 && (args.maxrregcount < 16 || args.maxrregcount > 255)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--maxrregcount: ", args.maxrregcount, " is outside 16..255 (0 = none)"));
  }
  if (args.min_blocks < 1 || args.min_blocks > 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min-blocks: ", args.min_blocks, " is outside 1..32"));
  }
  config.knobs.target = args.arch;
  config.knobs.maxrregcount = args.maxrregcount;
  config.knobs.min_blocks = args.min_blocks;
  config.knobs.fast_math = args.fast_math;
  return config;
}

// The reference (its config then replaces *config) or the candidate *config, bound.
absl::StatusOr<Instance> BindInstance(const CompileArgs& args, const TemplateRequest& request,
                                      const TargetInfo& target, Config* config) {
  if (args.reference) {
    KTUNE_ASSIGN_OR_RETURN(Instance reference,
                           BindReference(request.tmpl, request.dtype, request.shape, target));
    *config = reference.config;
    return reference;
  }
  KTUNE_ASSIGN_OR_RETURN(BindResult bound,
                         Bind(request.tmpl, request.dtype, request.shape, *config, target));
  if (!bound.instance) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config ", ConfigString(*config), " is not a candidate for ", ShapeString(request.shape),
        ": ", bound.rejected_because));
  }
  return *std::move(bound.instance);
}

// NVRTC over the registry's headers, through the cubin cache unless --no-cache (*cache
// then holds it: it must outlive the compiler).
absl::StatusOr<std::unique_ptr<Compiler>> OpenCompiler(const CompileArgs& args,
                                                       const TemplateRegistry& registry,
                                                       std::unique_ptr<CubinCache>* cache) {
  if (!args.no_cache) {
    if (args.cache_dir.empty()) KTUNE_RETURN_IF_ERROR(MakePrivateDir(DefaultCacheDir()));
    const std::string dir =
        args.cache_dir.empty() ? absl::StrCat(DefaultCacheDir(), "/cubins") : args.cache_dir;
    KTUNE_ASSIGN_OR_RETURN(*cache, CubinCache::Open(dir));
  }
  return NewTemplateCompiler(registry, cache->get());
}

// Each launch's kernel: its lowered name, geometry and what ptxas says of its resources.
void PrintLaunches(const Instance& instance, const CompileResult& result) {
  for (size_t i = 0; i < instance.launches.size(); ++i) {
    const BoundLaunch& l = instance.launches[i];
    const CompiledKernel* k = nullptr;
    for (const CompiledKernel& c : result.kernels) {
      if (c.name_expression == l.name_expression) k = &c;
    }
    std::cout << "kernel    " << l.name_expression << "\n";
    std::cout << "lowered   " << (k ? k->lowered_name : "?") << "\n";
    std::cout << "grid      " << Dim3(l.grid) << "  block " << Dim3(l.block) << "  dynamic smem "
              << l.shared_bytes << " B\n";
    if (k) {
      const KernelResources& r = k->resources;
      std::cout << "registers " << r.registers << "  spills " << r.spill_stores + r.spill_loads
                << " B (stores " << r.spill_stores << ", loads " << r.spill_loads
                << ")  static smem " << r.static_smem << " B  stack " << r.stack_frame << " B\n";
    }
  }
}

int RunCompile(const CompileArgs& args) {
  absl::StatusOr<TemplateRequest> request = ResolveTemplateRequest(
      args.templates_dir, args.template_name, args.dtype, args.shape);
  if (!request.ok()) return Fail(request.status());
  absl::StatusOr<TargetInfo> target = TargetFromArch(args.arch);
  if (!target.ok()) return Fail(target.status());
  absl::StatusOr<Config> config = ConfigFromArgs(args, *request->tmpl, *target);
  if (!config.ok()) return Fail(config.status());
  absl::StatusOr<Instance> instance = BindInstance(args, *request, *target, &*config);
  if (!instance.ok()) return Fail(instance.status());
  std::unique_ptr<CubinCache> cache;
  absl::StatusOr<std::unique_ptr<Compiler>> compiler =
      OpenCompiler(args, *request->registry, &cache);
  if (!compiler.ok()) return Fail(compiler.status());
  absl::StatusOr<BuiltKernel> built = CompileKernel(*instance, **compiler);
  if (!built.ok()) return Fail(built.status());
  const CompileResult& result = built->compiled;

  std::cout << "template  " << args.template_name << " " << DTypeName(request->dtype) << " "
            << ShapeString(request->shape) << "\n";
  std::cout << "config    " << (args.reference ? "reference " : "") << ConfigString(*config)
            << "\n";
  if (!result.ok) {
    std::cerr << result.log << "\n";
    std::cerr << "ktune: compile failed (" << std::fixed << std::setprecision(1)
              << result.compile_ms << " ms)\n";
    return kExitFailure;
  }
  PrintLaunches(*instance, result);
  std::cout << "compile   " << std::fixed << std::setprecision(1) << result.compile_ms << " ms"
            << (result.cache_hit ? " (cubin cache hit)" : "") << "\n";
  // A compile that succeeds can still warn (ptxas: a wgmma pipeline serialized, a stack
  // frame); those lines of the log go to stderr, the rest stays out of the way.
  for (absl::string_view line : absl::StrSplit(result.log, '\n')) {
    if (absl::StrContains(line, "warning")) std::cerr << line << "\n";
  }
  if (!args.out.empty()) {
    if (absl::Status s = AtomicWriteFile(args.out, result.cubin); !s.ok()) return Fail(s);
    std::cout << "wrote     " << args.out << " (" << result.cubin.size() << " bytes, sha256 "
              << Sha256Hex(result.cubin) << ")\n";
  }
  return kExitOk;
}

}  // namespace

Command AddCompileCommand(CLI::App& parent) {
  auto args = std::make_shared<CompileArgs>();
  CLI::App* app = parent.add_subcommand(
      "compile", "Compile one candidate of a template to a cubin (params default to the "
                 "template's defaults)");
  app->add_option("template", args->template_name, "Template name")->required();
  app->add_option("--dtype", args->dtype, "f32, f16, bf16, f8e4m3 or f8e5m2")->required();
  app->add_option("--shape", args->shape, "Dims, e.g. tokens=4096,hidden=8192")->required();
  app->add_option("--param", args->params, "NAME=VALUE, repeatable");
  app->add_option("--arch", args->arch, "Target: sm_XY or sm_XYa")->capture_default_str();
  app->add_option("--maxrregcount", args->maxrregcount, "Register limit, 0 = none")
      ->capture_default_str();
  app->add_option("--min-blocks", args->min_blocks, "Launch-bounds min blocks per SM")
      ->capture_default_str();
  app->add_flag("--fast-math", args->fast_math, "Compile with --use_fast_math");
  app->add_option("--out", args->out, "Write the cubin here");
  app->add_option("--templates", args->templates_dir, "Templates folder (default: shipped)");
  app->add_option("--cache-dir", args->cache_dir, "Cubin cache folder (default: user cache)");
  app->add_flag("--no-cache", args->no_cache, "Always compile, never read or write the cache");
  app->add_flag("--reference", args->reference,
                "Compile the template's reference kernel (what checks every candidate) instead "
                "of a candidate");
  return {app, [args] { return RunCompile(*args); }};
}

}  // namespace ktune::cli
