// Fuzzes the manifests' expression language (server/templates/expression.h): Parse, then
// Evaluate with every identifier bound. The input's first line is the expression; the bytes
// after it give the identifiers' values (8 bytes each, little-endian, reused cyclically;
// none: the identifiers are 0..n-1), and pick the dtype that sizeof() sees.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "server/templates/expression.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string text = input.substr(0, newline);
  const std::string values = newline == std::string::npos ? "" : input.substr(newline + 1);
  absl::StatusOr<ktune::Expression> e = ktune::Expression::Parse(text);
  if (!e.ok()) return 0;
  ktune::Scope scope;
  constexpr ktune::DType kDTypes[] = {ktune::DType::kF32, ktune::DType::kF16,
                                      ktune::DType::kBF16, ktune::DType::kI32};
  if (!values.empty()) scope.dtype = kDTypes[static_cast<uint8_t>(values[0]) % 4];
  int64_t i = 0;
  for (const std::string& id : e->identifiers()) {
    int64_t v = i;
    if (values.size() >= 8) {
      const size_t at = (static_cast<size_t>(i) * 8) % (values.size() - 7);
      std::memcpy(&v, values.data() + at, 8);
    }
    scope.values[id] = v;
    ++i;
  }
  (void)e->Evaluate(scope);
  ktune::Scope empty;  // unknown identifiers must be an error, not a crash
  (void)e->Evaluate(empty);
  return 0;
}
