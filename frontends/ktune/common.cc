#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "frontends/ktune/commands.h"
#include "server/base/paths.h"
#include "server/base/status_macros.h"
#include "server/templates/search_space.h"

namespace ktune::cli {

absl::StatusOr<std::unique_ptr<TemplateRegistry>> LoadRegistryOrWarn(const std::string& dir) {
  const std::string path = dir.empty() ? DefaultTemplatesDir() : dir;
  absl::StatusOr<std::unique_ptr<TemplateRegistry>> registry = LoadTemplateRegistry(path);
  if (!registry.ok()) {
    return absl::NotFoundError(absl::StrCat("templates: ", registry.status().message()));
  }
  for (const absl::Status& e : (*registry)->errors()) {
    std::cerr << "ktune: warning: template skipped: " << e.message() << "\n";
  }
  return registry;
}

absl::StatusOr<DType> ParseDTypeFlag(const std::string& dtype) {
  std::optional<DType> d = ParseDType(dtype);
  if (!d) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype: unknown dtype '", dtype, "'; expected f32, f16, bf16, f8e4m3 or f8e5m2"));
  }
  return *d;
}

absl::StatusOr<TemplateRequest> ResolveTemplateRequest(const std::string& templates_dir,
                                                       const std::string& template_name,
                                                       const std::string& dtype,
                                                       const std::string& shape) {
  TemplateRequest r;
  KTUNE_ASSIGN_OR_RETURN(r.registry, LoadRegistryOrWarn(templates_dir));
  KTUNE_ASSIGN_OR_RETURN(r.tmpl, r.registry->Get(template_name));
  KTUNE_ASSIGN_OR_RETURN(r.dtype, ParseDTypeFlag(dtype));
  KTUNE_ASSIGN_OR_RETURN(r.shape, ParseShape(shape));
  KTUNE_RETURN_IF_ERROR(ValidateRequest(*r.tmpl, r.dtype, r.shape));
  return r;
}

std::string ParamsText(const std::map<std::string, int64_t>& params) {
  return absl::StrJoin(params, ",", absl::PairFormatter("="));
}

std::string KnobsText(const std::string& target, int64_t maxrregcount, int64_t min_blocks,
                      bool fast_math) {
  return absl::StrCat(target, maxrregcount ? absl::StrCat(" rreg", maxrregcount) : "",
                      min_blocks > 1 ? absl::StrCat(" minb", min_blocks) : "",
                      fast_math ? " fast" : "");
}

std::string KnobsText(const Knobs& k) {
  return KnobsText(k.target, k.maxrregcount, k.min_blocks, k.fast_math);
}

std::string Us(double ns) { return absl::StrFormat("%.2f", ns / 1000.0); }

int Fail(const absl::Status& status) {
  std::cerr << "ktune: " << status.message() << "\n";
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

}  // namespace ktune::cli
