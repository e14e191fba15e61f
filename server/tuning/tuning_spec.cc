#include "server/tuning/tuning_spec.h"


#include <algorithm>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "ktune/v1/spec.pb.h"
#include "server/base/file.h"
#include "server/base/status_macros.h"
#include "server/base/text_proto_file.h"
#include "server/templates/search_space.h"

namespace ktune {
namespace {


bool IsModelName(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

// Appends the values of `r` to `out`; `field` names the range in errors.
absl::Status ExpandRange(const v1::SpecRange& r, const TextProtoFile& rep, int line,
                         const std::string& field, std::vector<int64_t>* out) {
  // Dims are never negative; 0 is a flag's value (layernorm's with_bias), and the template
  // says which values it takes.
  if (r.first() < 0) return rep.Fail(line, field + ".first", "must be >= 0");
  if (r.last() < r.first()) {
    return rep.Fail(line, field + ".last",
                    absl::StrCat(r.last(), " is below first (", r.first(), ")"));
  }
  if ((r.step() != 0) == (r.factor() != 0)) {
    return rep.Fail(line, field,
                    "set exactly one of step (arithmetic) and factor (geometric)");
  }
  if (r.step() < 0) return rep.Fail(line, field + ".step", "must be >= 1");
  if (r.factor() < 0 || r.factor() == 1) return rep.Fail(line, field + ".factor", "must be >= 2");
  if (r.factor() != 0 && r.first() < 1) {
    return rep.Fail(line, field + ".first", "a geometric range (factor) must start at 1 or more");
  }
  size_t added = 0;
  for (int64_t v = r.first(); v <= r.last();) {
    if (++added > static_cast<size_t>(kMaxSpecDimValues)) {
      return rep.Fail(line, field,
                      absl::StrCat("gives more than ", kMaxSpecDimValues, " values"));
    }
    out->push_back(v);
    // Stop before the next value would overflow: it would be past any last anyway.
    if (r.step() != 0) {
      if (v > std::numeric_limits<int64_t>::max() - r.step()) break;
      v += r.step();
    } else {
      if (v > std::numeric_limits<int64_t>::max() / r.factor()) break;
      v *= r.factor();
    }
  }
  return absl::OkStatus();
}

absl::Status CheckEntry(const v1::SpecEntry& e, int i, const TextProtoFile& rep, SpecEntry* out) {
  const std::string at = absl::StrCat("entries[", i, "]");
  out->line = rep.LineOf({{"entries", i}});
  out->template_name = e.template_();
  if (e.template_().empty()) {
    return rep.Fail({{"entries", i}}, at + ".template", "required, e.g. template: \"rmsnorm\"");
  }
  if (e.dtypes().empty()) {
    return rep.Fail({{"entries", i}}, at + ".dtypes", "at least one, e.g. dtypes: [\"bf16\"]");
  }
  for (int d = 0; d < e.dtypes_size(); ++d) {
    const std::optional<DType> t = ParseDType(e.dtypes(d));
    if (!t || !IsRequestDType(*t)) {
      return rep.Fail({{"entries", i}, {"dtypes", d}}, absl::StrCat(at, ".dtypes"),
                      absl::StrCat("unknown dtype '", e.dtypes(d), "'; expected f32, f16, bf16, f8e4m3 or f8e5m2"));
    }
    if (std::find(out->dtypes.begin(), out->dtypes.end(), *t) != out->dtypes.end()) {
      return rep.Fail({{"entries", i}, {"dtypes", d}}, absl::StrCat(at, ".dtypes"),
                      absl::StrCat("'", e.dtypes(d), "' is listed twice"));
    }
    out->dtypes.push_back(*t);
  }
  if (e.dims().empty()) {
    return rep.Fail({{"entries", i}}, at + ".dims",
                    "at least one, e.g. dims { name: \"tokens\" values: [1, 16] }");
  }
  std::set<std::string> names;
  for (int d = 0; d < e.dims_size(); ++d) {
    const v1::SpecDim& dim = e.dims(d);
    const std::string dat = absl::StrCat(at, ".dims[", d, "]");
    const int line = rep.LineOf({{"entries", i}, {"dims", d}});
    if (dim.name().empty()) return rep.Fail(line, dat + ".name", "required");
    if (!names.insert(dim.name()).second) {
      return rep.Fail(line, dat + ".name", absl::StrCat("dim '", dim.name(), "' is given twice"));
    }
    SpecDim sd;
    sd.name = dim.name();
    sd.line = line;
    for (int64_t v : dim.values()) {
      if (v < 0) {
        return rep.Fail(rep.LineOf({{"entries", i}, {"dims", d}, {"values", 0}}), dat + ".values",
                        absl::StrCat(v, " is below 0"));
      }
      sd.values.push_back(v);
    }
    for (int r = 0; r < dim.range_size(); ++r) {
      const int rline = rep.LineOf({{"entries", i}, {"dims", d}, {"range", r}});
      if (absl::Status s = ExpandRange(dim.range(r), rep, rline,
                                       absl::StrCat(dat, ".range[", r, "]"), &sd.values);
          !s.ok()) {
        return s;
      }
    }
    if (sd.values.empty()) {
      return rep.Fail(line, dat, absl::StrCat("dim '", dim.name(), "' has no values; give values "
                                              "or a range"));
    }
    std::sort(sd.values.begin(), sd.values.end());
    sd.values.erase(std::unique(sd.values.begin(), sd.values.end()), sd.values.end());
    if (sd.values.size() > static_cast<size_t>(kMaxSpecDimValues)) {
      return rep.Fail(line, dat, absl::StrCat("has more than ", kMaxSpecDimValues, " values"));
    }
    out->dims.push_back(std::move(sd));
  }
  return absl::OkStatus();
}

// "FILE:LINE: field: reason" for a key the template rejects, at the dim at fault when
// there is one.
absl::Status KeyError(const TuningSpec& spec, const SpecEntry& e, size_t index,
                      absl::string_view field, absl::string_view reason, int line = 0) {
  return absl::InvalidArgumentError(absl::StrCat(spec.path, ":", line > 0 ? line : e.line,
                                                 ": entries[", index, "].", field, ": ", reason));
}

}  // namespace

std::string SpecKeyString(const SpecKey& key) {
  return absl::StrCat(key.template_name, " ", DTypeName(key.dtype), " ", ShapeString(key.shape));
}

// The spec's search block into spec->search, checked as a Tune request's would be; an
// error names the line of the block and the field ("search.budget: must be >= 0").
absl::Status ReadSearch(const v1::SpecSearch& p, const TextProtoFile& rep, TuningSpec* spec) {
  SearchSettings& s = spec->search;
  std::set<std::string>& set = spec->search_fields;
  if (!p.strategy().empty()) {
    s.strategy = p.strategy();
    set.insert("strategy");
  }
  if (p.budget() != 0) {
    s.budget = p.budget();
    set.insert("budget");
  }
  if (p.time_s() != 0) {
    s.time_limit_s = p.time_s();
    set.insert("time");
  }
  if (p.has_min_gain()) {
    s.min_gain = p.min_gain();
    set.insert("min_gain");
  }
  if (p.has_roofline_stop()) {
    s.roofline_stop = p.roofline_stop();
    set.insert("roofline_stop");
  }
  if (p.no_warm_start()) {
    s.warm_start = false;
    set.insert("warm_start");
  }
  absl::Status checked = CheckSearchSettings(s);
  if (checked.ok()) return checked;
  // CheckSearchSettings names fields in words ("min gain: ..."); the file has search.min_gain.
  std::string field = std::string(checked.message().substr(0, checked.message().find(':')));
  std::string reason = std::string(checked.message().substr(field.size() + 2));
  absl::StrReplaceAll({{" ", "_"}, {"time_limit", "time_s"}}, &field);
  return rep.Fail({{"search"}}, absl::StrCat("search.", field), reason);
}

absl::StatusOr<TuningSpec> ParseTuningSpec(absl::string_view text, const std::string& path) {
  v1::TuningSpec proto;
  KTUNE_ASSIGN_OR_RETURN(const TextProtoFile rep,
                         TextProtoFile::Parse(path, std::string(text), &proto));
  TuningSpec spec;
  spec.path = path;
  spec.model = proto.model();
  spec.description = proto.description();
  if (proto.model().empty()) {
    return rep.Fail(1, "model", "required, e.g. model: \"llama-3-8b\"");
  }
  if (!IsModelName(proto.model())) {
    return rep.Fail({{"model"}}, "model",
                    absl::StrCat("'", proto.model(), "' may hold only letters, digits and . _ -"));
  }
  if (proto.entries().empty()) {
    return rep.Fail(1, "entries", "at least one, e.g. entries { template: \"rmsnorm\" ... }");
  }
  for (int i = 0; i < proto.entries_size(); ++i) {
    SpecEntry e;
    if (absl::Status s = CheckEntry(proto.entries(i), i, rep, &e); !s.ok()) return s;
    spec.entries.push_back(std::move(e));
  }
  if (proto.has_search()) {
    if (absl::Status s = ReadSearch(proto.search(), rep, &spec); !s.ok()) return s;
  }
  return spec;
}

absl::StatusOr<TuningSpec> LoadTuningSpec(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("--spec: cannot read ", path, ": ", text.status().message()));
  }
  return ParseTuningSpec(*text, path);
}

// Entry `i` of `spec` against its template: every dim known and present with its values in
// the manifest's bounds, every dtype supported, and the template's own request check on the
// entry's extreme shapes. kInvalidArgument "FILE:LINE: entries[i].field: reason".
absl::Status CheckEntryAgainst(const KernelTemplate& tmpl, const TuningSpec& spec,
                               const SpecEntry& e, size_t i) {
  const v1::TemplateManifest& m = tmpl.manifest();

  // Dims first, each against the manifest, so the message points at the dim's line.
  std::set<std::string> manifest_dims;
  for (const v1::Dim& d : m.dims()) manifest_dims.insert(d.name());
  for (const SpecDim& d : e.dims) {
    if (!manifest_dims.count(d.name)) {
      return KeyError(spec, e, i, "dims",
                      absl::StrCat("unknown dim '", d.name, "'; template ", e.template_name,
                                   " has ", absl::StrJoin(manifest_dims, ", ")),
                      d.line);
    }
  }
  for (const v1::Dim& md : m.dims()) {
    auto it = std::find_if(e.dims.begin(), e.dims.end(),
                           [&](const SpecDim& d) { return d.name == md.name(); });
    if (it == e.dims.end()) {
      return KeyError(spec, e, i, "dims",
                      absl::StrCat("missing dim '", md.name(), "' of template ", e.template_name));
    }
    const int64_t max = md.max() != 0 ? md.max() : std::numeric_limits<int32_t>::max();
    for (int64_t v : it->values) {
      if (v < md.min() || v > max) {
        return KeyError(spec, e, i, "dims",
                        absl::StrCat("dim '", md.name(), "' = ", v, " is outside [", md.min(), ", ",
                                     max, "] of template ", e.template_name),
                        it->line);
      }
    }
  }
  for (DType t : e.dtypes) {
    if (!tmpl.SupportsDType(t)) {
      return KeyError(spec, e, i, "dtypes",
                      absl::StrCat("template ", e.template_name, " has no dtype ", DTypeName(t),
                                   "; it has ", absl::StrJoin(m.dtypes(), ", ")));
    }
  }
  // The template's own check too, so a spec never lets through what a request would not.
  // Its rules bound each dim on its own, so the shapes of every dim's smallest and of
  // every dim's largest value stand for all the keys (checked here once, not per key).
  Shape lowest, highest;
  for (const SpecDim& d : e.dims) {
    const auto [lo, hi] = std::minmax_element(d.values.begin(), d.values.end());
    lowest[d.name] = *lo;
    highest[d.name] = *hi;
  }
  for (DType t : e.dtypes) {
    for (const Shape* shape : {&lowest, &highest}) {
      if (absl::Status s = ValidateRequest(tmpl, t, *shape); !s.ok()) {
        return KeyError(spec, e, i, "dims", s.message());
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SpecKey>> ExpandTuningSpec(const TuningSpec& spec,
                                                      const TemplateRegistry& registry) {
  std::vector<SpecKey> keys;
  std::set<std::string> seen;
  for (size_t i = 0; i < spec.entries.size(); ++i) {
    const SpecEntry& e = spec.entries[i];
    absl::StatusOr<std::shared_ptr<const KernelTemplate>> tmpl = registry.Get(e.template_name);
    if (!tmpl.ok()) return KeyError(spec, e, i, "template", tmpl.status().message());
    if (absl::Status s = CheckEntryAgainst(**tmpl, spec, e, i); !s.ok()) return s;

    // The cross product, first dim slowest: an odometer over the dims' value indices.
    int64_t count = 1;
    for (const SpecDim& d : e.dims) {
      count *= static_cast<int64_t>(d.values.size());
      if (count * static_cast<int64_t>(e.dtypes.size()) + static_cast<int64_t>(keys.size()) >
          kMaxSpecKeys) {
        return absl::OutOfRangeError(absl::StrCat(spec.path, ":", e.line, ": entries[", i,
                                                  "]: the spec gives more than ", kMaxSpecKeys,
                                                  " keys"));
      }
    }
    for (DType t : e.dtypes) {
      std::vector<size_t> at(e.dims.size(), 0);
      for (int64_t n = 0; n < count; ++n) {
        SpecKey key;
        key.template_name = e.template_name;
        key.dtype = t;
        key.line = e.line;
        for (size_t d = 0; d < e.dims.size(); ++d) key.shape[e.dims[d].name] = e.dims[d].values[at[d]];
        if (seen.insert(SpecKeyString(key)).second) keys.push_back(std::move(key));
        for (size_t d = e.dims.size(); d-- > 0;) {
          if (++at[d] < e.dims[d].values.size()) break;
          at[d] = 0;
        }
      }
    }
  }
  return keys;
}

absl::StatusOr<std::vector<SpecKey>> SelectSpecKeys(std::vector<SpecKey> keys,
                                                    const std::vector<std::string>& only,
                                                    const std::vector<std::string>& skip,
                                                    absl::string_view only_field,
                                                    absl::string_view skip_field) {
  std::set<std::string> in_spec;
  for (const SpecKey& k : keys) in_spec.insert(k.template_name);
  const auto check = [&](const std::vector<std::string>& names,
                         absl::string_view field) -> absl::Status {
    for (const std::string& name : names) {
      if (in_spec.count(name) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ": no key of the spec is of template '", name, "' (its templates: ",
            absl::StrJoin(in_spec, ", "), ")"));
      }
    }
    return absl::OkStatus();
  };
  KTUNE_RETURN_IF_ERROR(check(only, only_field));
  KTUNE_RETURN_IF_ERROR(check(skip, skip_field));
  const std::set<std::string> keep(only.begin(), only.end());
  const std::set<std::string> drop(skip.begin(), skip.end());
  std::vector<SpecKey> selected;
  for (SpecKey& k : keys) {
    if ((keep.empty() || keep.count(k.template_name) > 0) && drop.count(k.template_name) == 0) {
      selected.push_back(std::move(k));
    }
  }
  if (selected.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(only_field, " and ", skip_field, " leave no key of the spec"));
  }
  return selected;
}

}  // namespace ktune
