#include "server/base/candidate.h"

#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace ktune {

bool operator<(const Knobs& a, const Knobs& b) {
  return std::tie(a.maxrregcount, a.min_blocks, a.fast_math, a.target) <
         std::tie(b.maxrregcount, b.min_blocks, b.fast_math, b.target);
}

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
  return j.dump();
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
    if (!value.is_number_integer()) return fail(absl::StrCat("param ", name, " is not an integer"));
    c.params[name] = value.get<int64_t>();
  }
  if (!j.contains("knobs") || !j["knobs"].is_object()) return fail("missing object 'knobs'");
  const auto& k = j["knobs"];
  if (!k.contains("maxrregcount") || !k["maxrregcount"].is_number_integer())
    return fail("knobs.maxrregcount");
  if (!k.contains("min_blocks") || !k["min_blocks"].is_number_integer())
    return fail("knobs.min_blocks");
  if (!k.contains("fast_math") || !k["fast_math"].is_boolean()) return fail("knobs.fast_math");
  if (!k.contains("target") || !k["target"].is_string()) return fail("knobs.target");
  c.knobs.maxrregcount = k["maxrregcount"].get<int64_t>();
  c.knobs.min_blocks = k["min_blocks"].get<int64_t>();
  c.knobs.fast_math = k["fast_math"].get<bool>();
  c.knobs.target = k["target"].get<std::string>();
  return c;
}

absl::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kOk: return "ok";
    case Outcome::kCompileFailed: return "compile_failed";
    case Outcome::kResourceLimit: return "resource_limit";
    case Outcome::kLaunchFailed: return "launch_failed";
    case Outcome::kWrongResult: return "wrong_result";
    case Outcome::kTimedOut: return "timed_out";
    case Outcome::kCrashed: return "crashed";
  }
  return "?";
}

std::optional<Outcome> ParseOutcome(absl::string_view name) {
  for (Outcome o : {Outcome::kOk, Outcome::kCompileFailed, Outcome::kResourceLimit,
                    Outcome::kLaunchFailed, Outcome::kWrongResult, Outcome::kTimedOut,
                    Outcome::kCrashed}) {
    if (OutcomeName(o) == name) return o;
  }
  return std::nullopt;
}

std::string LaunchesToJson(const std::vector<LaunchSpec>& launches) {
  nlohmann::json arr = nlohmann::json::array();
  for (const LaunchSpec& l : launches) {
    arr.push_back({{"lowered_name", l.lowered_name},
                   {"grid", l.grid},
                   {"block", l.block},
                   {"shared_bytes", l.shared_bytes},
                   {"args", l.args}});
  }
  return arr.dump();
}

std::optional<std::vector<LaunchSpec>> LaunchesFromJson(absl::string_view json,
                                                        std::string* error) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) {
    if (error) *error = "launches json: not an array";
    return std::nullopt;
  }
  std::vector<LaunchSpec> out;
  // nlohmann's typed getters throw on a type mismatch; keep that inside this function.
  try {
    for (const auto& e : j) {
      LaunchSpec l;
      l.lowered_name = e.at("lowered_name").get<std::string>();
      l.grid = e.at("grid").get<std::array<uint32_t, 3>>();
      l.block = e.at("block").get<std::array<uint32_t, 3>>();
      l.shared_bytes = e.at("shared_bytes").get<uint32_t>();
      l.args = e.at("args").get<std::vector<std::string>>();
      out.push_back(std::move(l));
    }
  } catch (const nlohmann::json::exception& e) {
    if (error) *error = absl::StrCat("launches json: ", e.what());
    return std::nullopt;
  }
  return out;
}

}  // namespace ktune
