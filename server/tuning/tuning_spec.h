// A tuning spec (proto/ktune/v1/spec.proto): the keys one model needs, read from a text
// file, and their expansion into (template, dtype, shape) keys checked against the
// templates, for `ktune tune --spec`.
//
// Two steps, so a spec is known to be well-formed before any template is read and every
// key is known to be valid before anything is tuned: LoadTuningSpec checks the file on its
// own (syntax, required fields, ranges), ExpandTuningSpec checks each key against its
// template. Errors are kInvalidArgument "FILE:LINE: field: reason", the line being where
// the field (or, when it is missing, its parent) was written.
//
// Plain values and free functions; thread-compatible.
#ifndef KTUNE_SERVER_TUNING_TUNING_SPEC_H_
#define KTUNE_SERVER_TUNING_TUNING_SPEC_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/base/dtype.h"
#include "server/templates/registry.h"
#include "server/templates/shape.h"
#include "server/tuning/search_settings.h"

namespace ktune {

// The most values one dim may take, and the most keys a spec may expand to: a typo in a
// range (factor 1, a last of 1e12) should be an error, not hours of tuning.
inline constexpr int64_t kMaxSpecDimValues = 4096;
inline constexpr int64_t kMaxSpecKeys = 100000;

struct SpecDim {
  std::string name;
  std::vector<int64_t> values;  // ascending, no repeats, ranges expanded
  int line = 0;                 // 1-based, in the spec file
};

struct SpecEntry {
  std::string template_name;
  std::vector<DType> dtypes;
  std::vector<SpecDim> dims;
  int line = 0;
};

struct TuningSpec {
  std::string path;  // as given; errors start with it
  std::string model;
  std::string description;
  std::vector<SpecEntry> entries;
  // The spec's `search` block (the defaults where it has none), and which of its fields
  // the file set ("strategy", "budget", "time", "min_gain", "roofline_stop",
  // "warm_start"), so command-line flags can win field by field.
  SearchSettings search;
  std::set<std::string> search_fields;
};

// One key to tune, in spec order: entries in file order, then dtypes in the entry's
// order, then shapes with the first dim written varying slowest.
struct SpecKey {
  std::string template_name;
  DType dtype = DType::kF32;
  Shape shape;
  int line = 0;  // the entry that produced it (the first one, when two do)
};

// "rmsnorm bf16 hidden=4096,tokens=16": how keys are named in progress and summaries.
std::string SpecKeyString(const SpecKey& key);

// Reads and checks the spec file at `path`: kNotFound if it cannot be read,
// kInvalidArgument naming file, line and field for a defect.
absl::StatusOr<TuningSpec> LoadTuningSpec(const std::string& path);

// As LoadTuningSpec for `text`, reported as coming from `path`.
absl::StatusOr<TuningSpec> ParseTuningSpec(absl::string_view text, const std::string& path);

// Every key of `spec`, each checked against its template in `registry` (known template,
// supported dtype, every dim present and within its bounds, no unknown dim), repeats
// removed. kInvalidArgument "FILE:LINE: field: reason" for the first bad key; kOutOfRange
// when there would be more than kMaxSpecKeys keys.
absl::StatusOr<std::vector<SpecKey>> ExpandTuningSpec(const TuningSpec& spec,
                                                      const TemplateRegistry& registry);

// The keys of `keys` (in their order) whose template is in `only` (any, where `only` is
// empty) and not in `skip`: part of a model's spec, e.g. its memory-bound kernels without the
// GEMMs. kInvalidArgument naming `only_field` or `skip_field` for a template no key has, and
// when no key is left.
absl::StatusOr<std::vector<SpecKey>> SelectSpecKeys(std::vector<SpecKey> keys,
                                                    const std::vector<std::string>& only,
                                                    const std::vector<std::string>& skip,
                                                    absl::string_view only_field,
                                                    absl::string_view skip_field);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_TUNING_SPEC_H_
