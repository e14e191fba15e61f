#include "server/base/config.h"

#include <cstdint>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "server/base/json_fields.h"

namespace ktune {

bool operator<(const Config& a, const Config& b) {
  return std::tie(a.params, a.knobs) < std::tie(b.params, b.knobs);
}

std::string ConfigString(const Config& config) {
  return absl::StrCat(
      absl::StrJoin(config.params, ",", absl::PairFormatter("=")),
      " maxrreg=", config.knobs.maxrregcount, " minb=", config.knobs.min_blocks,
      " fastmath=", config.knobs.fast_math ? 1 : 0, " ", config.knobs.target);
}

std::string ConfigToJson(const Config& config) {
  nlohmann::json j;
  j["params"] = nlohmann::json::object();
  for (const auto& [name, value] : config.params) j["params"][name] = value;
  j["knobs"] = {{"maxrregcount", config.knobs.maxrregcount},
                {"min_blocks", config.knobs.min_blocks},
                {"fast_math", config.knobs.fast_math},
                {"target", config.knobs.target}};
  return DumpJson(j);
}

std::optional<Config> ConfigFromJson(absl::string_view json, std::string* error) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  auto fail = [&](absl::string_view why) -> std::optional<Config> {
    if (error) *error = absl::StrCat("config json: ", why);
    return std::nullopt;
  };
  if (!j.is_object()) return fail("not a JSON object");
  Config c;
  if (!j.contains("params") || !j["params"].is_object()) return fail("missing object 'params'");
  for (const auto& [name, value] : j["params"].items()) {
    if (!GetInt64(value, &c.params[name])) {
      return fail(absl::StrCat("param ", name, " is not an int64 integer"));
    }
  }
  if (!j.contains("knobs") || !j["knobs"].is_object()) return fail("missing object 'knobs'");
  const auto& k = j["knobs"];
  auto bad_knob = [&](absl::string_view name, absl::string_view type) {
    return fail(absl::StrCat("knobs.", name, " is missing or not ", type));
  };
  if (!k.contains("maxrregcount") || !GetInt64(k["maxrregcount"], &c.knobs.maxrregcount)) {
    return bad_knob("maxrregcount", "an int64 integer");
  }
  if (!k.contains("min_blocks") || !GetInt64(k["min_blocks"], &c.knobs.min_blocks)) {
    return bad_knob("min_blocks", "an int64 integer");
  }
  if (!k.contains("fast_math") || !k["fast_math"].is_boolean()) {
    return bad_knob("fast_math", "a boolean");
  }
  if (!k.contains("target") || !k["target"].is_string()) return bad_knob("target", "a string");
  c.knobs.fast_math = k["fast_math"].get<bool>();
  c.knobs.target = k["target"].get<std::string>();
  return c;
}

}  // namespace ktune
