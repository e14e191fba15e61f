#include "server/base/launch_spec.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/base/json_fields.h"

namespace ktune {

std::string LaunchesToJson(const std::vector<LaunchSpec>& launches) {
  nlohmann::json arr = nlohmann::json::array();
  for (const LaunchSpec& l : launches) {
    nlohmann::json e = {{"lowered_name", l.lowered_name},
                        {"grid", l.grid},
                        {"block", l.block},
                        {"shared_bytes", l.shared_bytes},
                        {"args", l.args}};
    // Written only when set, so entries without it read as before (and as stores written
    // before it existed do).
    if (l.programmatic) e["programmatic"] = true;
    arr.push_back(std::move(e));
  }
  return DumpJson(arr);
}

std::optional<std::vector<LaunchSpec>> LaunchesFromJson(absl::string_view json,
                                                        std::string* error) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  std::vector<LaunchSpec> out;
  auto fail = [&](absl::string_view why) -> std::optional<std::vector<LaunchSpec>> {
    if (error) *error = absl::StrCat("launches json: ", why);
    return std::nullopt;
  };
  if (!j.is_array()) return fail("not an array");
  // Checked field by field rather than with nlohmann's typed getters, which throw on some
  // mismatches and silently convert others (-1 or true to uint32_t).
  auto dims = [](const nlohmann::json& e, const char* key, std::array<uint32_t, 3>* d) {
    if (!e.contains(key) || !e[key].is_array() || e[key].size() != 3) return false;
    for (size_t i = 0; i < 3; ++i) {
      if (!GetUint32(e[key][i], &(*d)[i])) return false;
    }
    return true;
  };
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& e = j[i];
    const std::string at = absl::StrCat("launch ", i, ": ");
    if (!e.is_object()) return fail(absl::StrCat(at, "not an object"));
    LaunchSpec l;
    if (!e.contains("lowered_name") || !e["lowered_name"].is_string()) {
      return fail(absl::StrCat(at, "lowered_name is missing or not a string"));
    }
    l.lowered_name = e["lowered_name"].get<std::string>();
    if (!dims(e, "grid", &l.grid)) {
      return fail(absl::StrCat(at, "grid is missing or not 3 uint32 integers"));
    }
    if (!dims(e, "block", &l.block)) {
      return fail(absl::StrCat(at, "block is missing or not 3 uint32 integers"));
    }
    if (!e.contains("shared_bytes") || !GetUint32(e["shared_bytes"], &l.shared_bytes)) {
      return fail(absl::StrCat(at, "shared_bytes is missing or not a uint32 integer"));
    }
    if (!e.contains("args") || !e["args"].is_array()) {
      return fail(absl::StrCat(at, "args is missing or not an array"));
    }
    for (const nlohmann::json& a : e["args"]) {
      if (!a.is_string()) return fail(absl::StrCat(at, "args holds a non-string"));
      l.args.push_back(a.get<std::string>());
    }
    if (e.contains("programmatic")) {
      if (!e["programmatic"].is_boolean()) {
        return fail(absl::StrCat(at, "programmatic is not a boolean"));
      }
      l.programmatic = e["programmatic"].get<bool>();
    }
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace ktune
