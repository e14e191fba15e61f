#include "server/tuning/compile_request.h"

#include "server/base/status_macros.h"
#include "server/compile/nvrtc_compiler.h"

namespace ktune {

namespace {

// The file's base name: the program's name in NVRTC (and in device asserts' __FILE__).
std::string SourceName(const KernelTemplate& tmpl) {
  const std::string& path = tmpl.source_path();
  return path.substr(path.find_last_of('/') + 1);
}

}  // namespace

CompileRequest BuildCompileRequest(const Instance& instance) {
  CompileRequest r;
  r.source = instance.tmpl->source();
  r.source_name = SourceName(*instance.tmpl);
  r.name_expressions = instance.NameExpressions();
  r.options = instance.CompileOptions();
  return r;
}

CompileCacheKeyer TemplateKeyer(const KernelTemplate& tmpl) {
  return CompileCacheKeyer(SourceName(tmpl), tmpl.source());
}

absl::StatusOr<std::unique_ptr<Compiler>> NewTemplateCompiler(const TemplateRegistry& registry,
                                                              const CubinCache* cache,
                                                              const std::string& pch_dir,
                                                              CacheFiller* filler) {
  NvrtcOptions options;
  if (!registry.include_dir().empty()) options.include_dirs.push_back(registry.include_dir());
  options.pch_dir = pch_dir;
  KTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Compiler> compiler, NewNvrtcCompiler(options));
  if (cache == nullptr) return compiler;
  return NewCachingCompiler(std::move(compiler), cache, filler);
}

}  // namespace ktune
