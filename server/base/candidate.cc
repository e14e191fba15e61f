#include "server/base/candidate.h"

#include <cstdint>
#include <limits>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace ktune {
namespace {

// nlohmann stores a non-negative literal as unsigned, and get<int64_t>() wraps one above
// INT64_MAX to a negative number; get<uint32_t>() also takes booleans and truncates floats.
// These readers take exact integers only.
bool GetInt64(const nlohmann::json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (!v.is_number_integer()) return false;
  *out = v.get<int64_t>();
  return true;
}

bool GetUint32(const nlohmann::json& v, uint32_t* out) {
  int64_t x;
  if (!GetInt64(v, &x) || x < 0 || x > std::numeric_limits<uint32_t>::max()) return false;
  *out = static_cast<uint32_t>(x);
  return true;
}

// dump() throws on a string that is not UTF-8; replace such bytes instead, since no
// exception may leave this module.
std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

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
  return Dump(j);
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
  return Dump(arr);
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
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace ktune
