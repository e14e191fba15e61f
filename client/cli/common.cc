#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "server/base/paths.h"

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
