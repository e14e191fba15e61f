// A request's shape: named dimensions and their sizes, e.g. {tokens: 4096, hidden: 8192}.
//
// Plain values; thread-compatible.
#ifndef KTUNE_SERVER_TEMPLATES_SHAPE_H_
#define KTUNE_SERVER_TEMPLATES_SHAPE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ktune {

// Ordered by name, so the canonical string of equal shapes is equal.
using Shape = std::map<std::string, int64_t>;

// "hidden=8192,tokens=4096": dims sorted by name; the store's key format.
std::string ShapeString(const Shape& shape);

// Parses "tokens=4096,hidden=8192" (any order, spaces allowed around items).
// kInvalidArgument naming the item on a missing '=', an empty name, a repeated dim, or a
// value that is not a decimal int64.
absl::StatusOr<Shape> ParseShape(absl::string_view text);

// How far apart two shapes of one template are, for FALLBACK's nearest stored neighbour:
// the sum over dims of |log2(a / b)|, so 4096 vs 8192 and 8192 vs 4096 are equally near and
// a factor of two costs 1 in any dim. Equal values cost 0; a dim where one side is 0 and the
// other is not (a flag, e.g. layernorm's with_bias) makes them unrelated: infinity, as does
// a dim missing from `b`.
double ShapeDistance(const Shape& a, const Shape& b);

}  // namespace ktune

#endif  // KTUNE_SERVER_TEMPLATES_SHAPE_H_
