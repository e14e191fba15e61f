#include "server/templates/registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/echo.h"
#include "server/base/file.h"
#include "server/base/status_macros.h"

namespace ktune {

absl::StatusOr<std::shared_ptr<const KernelTemplate>> TemplateRegistry::Get(
    const std::string& name) const {
  auto it = templates_.find(name);
  if (it == templates_.end()) {
    std::vector<std::string> known;
    for (const auto& [n, t] : templates_) known.push_back(n);
    return absl::NotFoundError(absl::StrCat("unknown template ", Echo(name), "; known: ",
                                            known.empty() ? "(none)" : absl::StrJoin(known, ", ")));
  }
  return it->second;
}

absl::StatusOr<std::unique_ptr<TemplateRegistry>> LoadTemplateRegistry(const std::string& dir) {
  KTUNE_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir));
  std::unique_ptr<TemplateRegistry> registry(new TemplateRegistry());
  const std::string include_dir = absl::StrCat(dir, "/include");
  if (IsDir(include_dir)) registry->include_dir_ = include_dir;
  KTUNE_ASSIGN_OR_RETURN(std::string headers_digest, DigestFolder(include_dir));
  for (const std::string& n : names) {
    const std::string folder = absl::StrCat(dir, "/", n);
    if (n == "include" || n[0] == '.' || !IsDir(folder)) continue;
    absl::StatusOr<std::shared_ptr<const KernelTemplate>> t =
        LoadKernelTemplate(folder, headers_digest);
    if (!t.ok()) {
      registry->errors_.push_back(t.status());
      continue;
    }
    registry->templates_.emplace((*t)->name(), *std::move(t));
  }
  return registry;
}

}  // namespace ktune
