// compile_bench: how fast ktune turns a template's candidates into cubins.
//
// For one template, dtype and shape it compiles every valid param point (default knobs)
// with 1 thread and with all cores, for each option variant below, then measures the
// cubin cache. It prints a Markdown table for bench/RESULTS.md. The variants answer "what
// makes NVRTC faster here": automatic precompiled headers (--pch) on top of ktune's own
// options (which include -minimal), and how much the fp16/bf16 headers cost by themselves.
// The last column compares machine code, not whole cubins (a cubin records its options).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/base/file.h"
#include "server/base/paths.h"
#include "server/base/sha256.h"
#include "server/compile/compile_pool.h"
#include "server/compile/cubin_sections.h"
#include "server/compile/nvrtc_compiler.h"
#include "server/templates/search_space.h"
#include "server/tuning/compile_request.h"

namespace ktune {
namespace {

struct Variant {
  std::string name;
  std::vector<std::string> options;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * (v.size() - 1) + 0.5)];
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

struct PassResult {
  double wall_s = 0;
  std::vector<double> ms;             // per candidate
  std::vector<std::string> cubin_sha;  // of the machine code, per candidate; "" if it failed
  int failed = 0;
};

PassResult CompileAll(Compiler* compiler, int threads, const std::vector<CompileRequest>& requests) {
  CompilePool pool(compiler, threads);
  const auto start = std::chrono::steady_clock::now();
  std::vector<absl::StatusOr<CompileResult>> results = pool.CompileAll(requests);
  PassResult pass;
  pass.wall_s = Seconds(start);
  for (const auto& r : results) {
    if (!r.ok() || !r->ok) {
      ++pass.failed;
      pass.cubin_sha.push_back("");
      if (!r.ok()) std::cerr << "compile error: " << r.status() << "\n";
      continue;
    }
    pass.ms.push_back(r->compile_ms);
    // The machine code only: a cubin also records the ptxas command line, so any change of
    // options changes its bytes even when the code is the same.
    Sha256Builder code;
    if (auto text = TextSections(r->cubin); text.ok()) {
      for (const auto& [name, bytes] : *text) code.AddField(name).AddField(bytes);
    }
    pass.cubin_sha.push_back(code.Finish());
  }
  return pass;
}

// NVRTC time for a kernel that does nothing, with and without the half-precision headers.
double TrivialCompileMs(const TemplateRegistry& registry, bool with_headers, int repeats) {
  auto compiler = NewTemplateCompiler(registry, nullptr);
  if (!compiler.ok()) return -1;
  CompileRequest r;
  r.source = absl::StrCat(with_headers ? "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" : "",
                          "template <int N> __global__ void k(float* x) { x[N] = 1.f; }\n");
  r.source_name = "trivial.cu";
  r.name_expressions = {"k<1>"};
  r.options = {"--gpu-architecture=sm_90a"};
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    auto res = (*compiler)->Compile(r);
    if (res.ok() && res->ok) ms.push_back(res->compile_ms);
  }
  return Percentile(ms, 0.5);
}

int Run(int argc, char** argv) {
  CLI::App app{"compile_bench: NVRTC compile throughput over a template's candidates"};
  std::string templates_dir, name = "rmsnorm", dtype_name = "bf16",
                             shape_text = "tokens=4096,hidden=4096", arch = "sm_90a";
  int limit = 0, repeats = 5;
  bool variants = true;
  app.add_option("--templates", templates_dir, "Templates folder (default: shipped)");
  app.add_option("--template", name)->capture_default_str();
  app.add_option("--dtype", dtype_name)->capture_default_str();
  app.add_option("--shape", shape_text)->capture_default_str();
  app.add_option("--arch", arch)->capture_default_str();
  app.add_option("--limit", limit, "Compile at most this many candidates (0 = all)");
  app.add_option("--repeats", repeats, "Repeats of the trivial-kernel compiles")->capture_default_str();
  app.add_flag("!--no-variants", variants, "Only the default options");
  CLI11_PARSE(app, argc, argv);

  auto registry = LoadTemplateRegistry(templates_dir.empty() ? DefaultTemplatesDir() : templates_dir);
  if (!registry.ok()) return std::cerr << registry.status() << "\n", 2;
  auto tmpl = (*registry)->Get(name);
  if (!tmpl.ok()) return std::cerr << tmpl.status() << "\n", 2;
  std::optional<DType> dtype = ParseDType(dtype_name);
  auto shape = ParseShape(shape_text);
  auto target = TargetFromArch(arch);
  if (!dtype || !shape.ok() || !target.ok()) return std::cerr << "bad --dtype/--shape/--arch\n", 2;
  if (auto s = ValidateRequest(**tmpl, *dtype, *shape); !s.ok()) return std::cerr << s << "\n", 2;
  Knobs knobs = DefaultConfig(**tmpl, *target).knobs;
  knobs.target = arch;
  auto space = EnumerateParams(*tmpl, *dtype, *shape, *target, knobs);
  if (!space.ok()) return std::cerr << space.status() << "\n", 1;
  std::vector<CompileRequest> requests;
  for (const Config& c : space->configs) {
    auto bound = Bind(*tmpl, *dtype, *shape, c, *target);
    if (!bound.ok() || !bound->instance) continue;
    requests.push_back(BuildCompileRequest(*bound->instance));
    if (limit > 0 && static_cast<int>(requests.size()) >= limit) break;
  }
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  std::printf("compile_bench: %s %s %s %s, %zu candidates (default knobs), NVRTC %s, %d cores\n\n",
              name.c_str(), dtype_name.c_str(), ShapeString(*shape).c_str(), arch.c_str(),
              requests.size(), NvrtcVersionString().c_str(), cores);

  // ktune's own options already include -minimal (nvrtc_compiler.cc), so the variant is
  // automatic PCH on top of them.
  std::vector<Variant> list = {{"default", {}}};
  if (variants) {
    // NVRTC refuses a --pch-dir that does not exist yet.
    const std::string pch_dir = absl::StrCat("/tmp/ktune-bench-pch-", ::getpid());
    if (auto s = MakeDirs(pch_dir); !s.ok()) return std::cerr << s << "\n", 1;
    list.push_back({"--pch (automatic)", {"--pch", absl::StrCat("--pch-dir=", pch_dir)}});
  }
  std::printf("| options | 1 thread: cand/s | p50 ms | p90 ms | %d threads: cand/s | failed | cubins same code as default |\n",
              cores);
  std::printf("|---|---|---|---|---|---|---|\n");
  std::vector<std::string> baseline;
  for (const Variant& v : list) {
    NvrtcOptions o;
    if (!(*registry)->include_dir().empty()) o.include_dirs.push_back((*registry)->include_dir());
    o.extra_options = v.options;
    auto compiler = NewNvrtcCompiler(o);
    if (!compiler.ok()) return std::cerr << compiler.status() << "\n", 1;
    PassResult one = CompileAll(compiler->get(), 1, requests);
    PassResult all = CompileAll(compiler->get(), cores, requests);
    if (baseline.empty()) baseline = one.cubin_sha;
    int same = 0;
    for (size_t i = 0; i < one.cubin_sha.size(); ++i) same += !one.cubin_sha[i].empty() && one.cubin_sha[i] == baseline[i];
    std::printf("| %s | %.1f | %.0f | %.0f | %.1f | %d | %d/%zu |\n", v.name.c_str(),
                requests.size() / one.wall_s, Percentile(one.ms, 0.5), Percentile(one.ms, 0.9),
                requests.size() / all.wall_s, one.failed, same, requests.size());
  }

  // The cubin cache: fill it, then read every candidate back.
  const std::string cache_dir = absl::StrCat("/tmp/ktune-bench-cache-", ::getpid());
  auto cache = CubinCache::Open(cache_dir);
  if (!cache.ok()) return std::cerr << cache.status() << "\n", 1;
  auto cached = NewTemplateCompiler(**registry, cache->get());
  if (!cached.ok()) return std::cerr << cached.status() << "\n", 1;
  CompileAll(cached->get(), cores, requests);
  PassResult hits = CompileAll(cached->get(), 1, requests);
  std::printf("\ncached compile (cubin cache hit, 1 thread): p50 %.3f ms, p90 %.3f ms over %zu candidates\n",
              Percentile(hits.ms, 0.5), Percentile(hits.ms, 0.9), hits.ms.size());
  std::system(absl::StrCat("rm -rf ", cache_dir, " /tmp/ktune-bench-pch-", ::getpid()).c_str());

  const double bare = TrivialCompileMs(**registry, false, repeats);
  const double headers = TrivialCompileMs(**registry, true, repeats);
  std::printf("trivial kernel, p50 of %d: %.0f ms alone, %.0f ms with cuda_fp16.h + cuda_bf16.h (headers cost %.0f ms)\n",
              repeats, bare, headers, headers - bare);
  return 0;
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) { return ktune::Run(argc, argv); }
