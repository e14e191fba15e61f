// The set of kernel templates read from a folder (--templates DIR) at start.
//
// Each subfolder NAME/ holding NAME.textproto is a template; `include/` holds headers the
// templates share. A template that fails to load is reported in errors() and left out;
// the others load. Immutable after LoadTemplateRegistry; safe to share between threads.
#ifndef KTUNE_SERVER_TEMPLATES_REGISTRY_H_
#define KTUNE_SERVER_TEMPLATES_REGISTRY_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/templates/kernel_template.h"

namespace ktune {

class TemplateRegistry {
 public:
  // kNotFound "unknown template 'x'; known: a, b".
  absl::StatusOr<std::shared_ptr<const KernelTemplate>> Get(const std::string& name) const;
  // Templates by name.
  const std::map<std::string, std::shared_ptr<const KernelTemplate>>& templates() const {
    return templates_;
  }
  // One status per folder that did not load, each naming file, line and reason.
  const std::vector<absl::Status>& errors() const { return errors_; }
  // The shared headers' folder, for the compiler's include path ("" when there is none).
  const std::string& include_dir() const { return include_dir_; }

 private:
  friend absl::StatusOr<std::unique_ptr<TemplateRegistry>> LoadTemplateRegistry(
      const std::string& dir);
  std::map<std::string, std::shared_ptr<const KernelTemplate>> templates_;
  std::vector<absl::Status> errors_;
  std::string include_dir_;
};

// Reads every template under `dir`. Fails only when `dir` itself cannot be read.
absl::StatusOr<std::unique_ptr<TemplateRegistry>> LoadTemplateRegistry(const std::string& dir);

}  // namespace ktune

#endif  // KTUNE_SERVER_TEMPLATES_REGISTRY_H_
