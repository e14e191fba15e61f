#include "server/templates/shape.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/base/echo.h"

namespace ktune {

std::string ShapeString(const Shape& shape) {
  return absl::StrJoin(shape, ",", absl::PairFormatter("="));
}

absl::StatusOr<Shape> ParseShape(absl::string_view text) {
  Shape shape;
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError("shape: empty; expected dim=value,...");
  }
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    absl::string_view name = absl::StripAsciiWhitespace(kv.first);
    absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    if (item.find('=') == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape: item ", Echo(item), " is not dim=value"));
    }
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("shape: item ", Echo(item), " has no dim name"));
    }
    int64_t v = 0;
    if (!absl::SimpleAtoi(value, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape: dim ", Echo(name), " has value ", Echo(value), ", not an integer"));
    }
    if (!shape.emplace(std::string(name), v).second) {
      return absl::InvalidArgumentError(absl::StrCat("shape: dim ", Echo(name), " given twice"));
    }
  }
  return shape;
}

double ShapeDistance(const Shape& a, const Shape& b) {
  double d = 0;
  for (const auto& [name, v] : a) {
    auto it = b.find(name);
    if (it == b.end()) return INFINITY;
    if (v == it->second) continue;
    if (v <= 0 || it->second <= 0) return INFINITY;
    d += std::abs(std::log2(static_cast<double>(v) / static_cast<double>(it->second)));
  }
  return d;
}

}  // namespace ktune
