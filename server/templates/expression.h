// Integer expressions of template manifests: launch geometry, buffer sizes, constraints and
// the cost model, over shape dims, params and knobs (grammar in proto/ktune/v1/manifest.proto).
//
// Written by hand rather than taken from a parser library: the grammar is a dozen
// operators, and what matters here (checked int64 overflow, division by zero as an error
// naming the expression, sizeof over ktune's dtypes) is what general libraries (exprtk,
// muparser: floating point) do not give. An Expression is immutable after Parse and safe to
// evaluate from many threads at once.
#ifndef KTUNE_SERVER_TEMPLATES_EXPRESSION_H_
#define KTUNE_SERVER_TEMPLATES_EXPRESSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "server/base/dtype.h"

namespace ktune {

// The values an expression may name. `dtype` answers sizeof(dtype).
struct Scope {
  absl::flat_hash_map<std::string, int64_t> values;
  DType dtype = DType::kF32;
};

class Expression {
 public:
  // Parses `text`. kInvalidArgument with the column and the reason on a syntax error
  // ("col 7: expected ')'"), an unknown function, or a sizeof of an unknown type.
  static absl::StatusOr<Expression> Parse(absl::string_view text);

  // Evaluates with int64 arithmetic. kInvalidArgument naming the expression on an unknown
  // identifier, overflow, or division/modulo by zero; ceil_div by a non-positive divisor is
  // an error too. Comparisons and logical operators give 0 or 1; && and || short-circuit,
  // and so does the ternary, so `b != 0 && a % b == 0` is safe.
  absl::StatusOr<int64_t> Evaluate(const Scope& scope) const;

  // The identifiers the expression names (no duplicates, in first-seen order), so a
  // manifest can be checked for unknown names at load, before any shape is known.
  const std::vector<std::string>& identifiers() const { return identifiers_; }
  const std::string& text() const { return text_; }

  struct Node;  // The parsed tree; defined in expression.cc.

 private:
  Expression(std::string text, std::shared_ptr<const Node> root,
             std::vector<std::string> identifiers);

  std::string text_;
  std::shared_ptr<const Node> root_;
  std::vector<std::string> identifiers_;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_TEMPLATES_EXPRESSION_H_
