// A candidate's config: one point of a template's search space (template params plus the
// global knobs), with its stable string and JSON forms.
//
// A plain value type and pure functions; thread-compatible.
#ifndef KTUNE_SERVER_BASE_CONFIG_H_
#define KTUNE_SERVER_BASE_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "server/base/knobs.h"

namespace ktune {

// One point of a template's search space. Params are ordered by name, so equal configs
// print and hash the same.
struct Config {
  std::map<std::string, int64_t> params;
  Knobs knobs;

  friend bool operator==(const Config& a, const Config& b) {
    return a.params == b.params && a.knobs == b.knobs;
  }
  friend bool operator!=(const Config& a, const Config& b) { return !(a == b); }
  friend bool operator<(const Config& a, const Config& b);
};

// "BLOCK=256,VEC=4 maxrreg=0 minb=1 fastmath=0 sm_90a": stable, for logs, keys and goldens.
std::string ConfigString(const Config& config);

// JSON object {"params":{...},"knobs":{...}}; the inverse fails with a message on any
// missing or mistyped field.
std::string ConfigToJson(const Config& config);
std::optional<Config> ConfigFromJson(absl::string_view json, std::string* error);

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_CONFIG_H_
