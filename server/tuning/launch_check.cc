#include "server/tuning/launch_check.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/echo.h"

namespace ktune {
namespace {

std::string WithoutSpaces(std::string s) {
  s.erase(std::remove_if(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); }),
          s.end());
  return s;
}

absl::Status Mismatch(const std::string& field, const std::string& got, const std::string& want) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", got, "; the template launches ",
                                                 want, " for this key and config"));
}

std::string Dims(const std::array<uint32_t, 3>& d) { return absl::StrJoin(d, "x"); }
std::string Dims(const std::array<int64_t, 3>& d) { return absl::StrJoin(d, "x"); }

}  // namespace

bool SymbolNamesKernel(const std::string& lowered, const std::string& expression) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(lowered.c_str(), nullptr, nullptr, &status), std::free);
  if (status != 0 || demangled == nullptr) {
    return WithoutSpaces(lowered) == WithoutSpaces(expression);
  }
  std::string name(demangled.get());
  // The parameter list starts at the first '(' outside the template arguments.
  int depth = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    if (name[i] == '>') --depth;
    if (name[i] == '(' && depth == 0) {
      name.resize(i);
      break;
    }
  }
  if (absl::StartsWith(name, "void ")) name.erase(0, 5);  // kernels return void
  name = WithoutSpaces(name);
  const std::string want = WithoutSpaces(expression);
  return name == want || absl::EndsWith(name, "::" + want);
}

absl::Status CheckLaunchesMatch(const Instance& instance,
                                const std::vector<LaunchSpec>& launches) {
  if (launches.size() != instance.launches.size()) {
    return Mismatch("launches", absl::StrCat(launches.size(), " launches"),
                    absl::StrCat(instance.launches.size()));
  }
  for (size_t i = 0; i < launches.size(); ++i) {
    const LaunchSpec& got = launches[i];
    const BoundLaunch& want = instance.launches[i];
    const std::string field = absl::StrCat("launches[", i, "]");
    if (!SymbolNamesKernel(got.lowered_name, want.name_expression)) {
      return Mismatch(field + ".lowered_name", Echo(got.lowered_name),
                      absl::StrCat("'", want.name_expression, "'"));
    }
    for (int d = 0; d < 3; ++d) {
      if (got.grid[d] != want.grid[d]) {
        return Mismatch(field + ".grid", Dims(got.grid), Dims(want.grid));
      }
      if (got.block[d] != want.block[d]) {
        return Mismatch(field + ".block", Dims(got.block), Dims(want.block));
      }
    }
    if (got.shared_bytes != want.shared_bytes) {
      return Mismatch(field + ".shared_bytes", absl::StrCat(got.shared_bytes),
                      absl::StrCat(want.shared_bytes));
    }
    if (got.args != want.args) {
      return Mismatch(field + ".args", absl::StrCat("(", absl::StrJoin(got.args, ", "), ")"),
                      absl::StrCat("(", absl::StrJoin(want.args, ", "), ")"));
    }
    // Launched early, a kernel that does not wait for the one before would read its inputs
    // half written. The other way round is only slower: an entry from before the template's
    // launch said programmatic launches plainly.
    if (got.programmatic && !want.programmatic) {
      return Mismatch(field + ".programmatic", "true", "false");
    }
  }
  return absl::OkStatus();
}

}  // namespace ktune
