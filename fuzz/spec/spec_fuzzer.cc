// Fuzzes the tuning spec loader (server/tuning/tuning_spec.h): ParseTuningSpec on the input,
// then ExpandTuningSpec against the shipped templates.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_support.h"
#include "server/tuning/tuning_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ktune::TuningSpec> spec = ktune::ParseTuningSpec(input, "fuzz.textproto");
  if (!spec.ok()) return 0;
  (void)ktune::ExpandTuningSpec(*spec, ktune::fuzz::ShippedRegistry());
  return 0;
}
