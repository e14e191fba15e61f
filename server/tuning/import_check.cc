#include "server/tuning/import_check.h"

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/base/dtype.h"
#include "server/base/sha256.h"
#include "server/base/status_macros.h"
#include "server/compile/cubin_sections.h"
#include "server/templates/search_space.h"
#include "server/templates/shape.h"
#include "server/templates/instance.h"
#include "server/templates/target.h"
#include "server/tuning/gpu_problem.h"
#include "server/tuning/launch_check.h"

namespace ktune {
namespace {

// Text from the file as an error may show it: escaped, so a control character cannot
// forge a line of the report, and short, so a huge field cannot swell the message.
std::string Echo(absl::string_view text) {
  constexpr size_t kMax = 100;
  const std::string escaped = absl::CHexEscape(text.substr(0, kMax));
  return text.size() > kMax ? absl::StrCat(escaped, "...") : escaped;
}

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

absl::Status CheckTime(absl::string_view field, double ns) {
  if (!std::isfinite(ns) || ns <= 0) {
    return Bad(field, absl::StrCat(ns, " is not a finite positive time"));
  }
  return absl::OkStatus();
}

absl::Status CheckNonNegative(absl::string_view field, double v) {
  if (!std::isfinite(v) || v < 0) return Bad(field, absl::StrCat(v, " is not finite and >= 0"));
  return absl::OkStatus();
}

// Every figure finite and non-negative; a time, where `timed`, positive.
absl::Status CheckMetrics(absl::string_view field, const TrialMetrics& m, bool timed) {
  const std::string f(field);
  if (timed) {
    KTUNE_RETURN_IF_ERROR(CheckTime(f + ".time_ns", m.time_ns));
  } else {
    KTUNE_RETURN_IF_ERROR(CheckNonNegative(f + ".time_ns", m.time_ns));
  }
  const std::pair<const char*, double> figures[] = {
      {"spread_ns", m.spread_ns},     {"repeats", static_cast<double>(m.repeats)},
      {"registers", static_cast<double>(m.registers)},
      {"spill_bytes", static_cast<double>(m.spill_bytes)},
      {"static_smem", static_cast<double>(m.static_smem)},
      {"dynamic_smem", static_cast<double>(m.dynamic_smem)},
      {"occupancy", m.occupancy},     {"waves", m.waves},
      {"last_wave", m.last_wave},     {"gbps", m.gbps},
      {"gflops", m.gflops},           {"ceiling_fraction", m.ceiling_fraction},
      {"batch", static_cast<double>(m.batch)}};
  for (const auto& [name, value] : figures) {
    KTUNE_RETURN_IF_ERROR(CheckNonNegative(absl::StrCat(f, ".", name), value));
  }
  if (m.occupancy > 1) {
    return Bad(f + ".occupancy", absl::StrCat(m.occupancy, " is not a fraction (0..1)"));
  }
  return absl::OkStatus();
}

absl::Status CheckDevice(const store::Device& d) {
  if (d.model_key.empty()) return Bad("model_key", "empty");
  if (d.cc_major <= 0 || d.cc_minor < 0) {
    return Bad("cc_major", absl::StrCat(d.cc_major, ".", d.cc_minor,
                                        " is not a compute capability"));
  }
  if (d.sm_count <= 0) return Bad("sm_count", absl::StrCat(d.sm_count, " is not positive"));
  KTUNE_RETURN_IF_ERROR(CheckNonNegative("l2_bytes", static_cast<double>(d.l2_bytes)));
  KTUNE_RETURN_IF_ERROR(CheckNonNegative("memory_bus_bits", d.memory_bus_bits));
  KTUNE_RETURN_IF_ERROR(
      CheckNonNegative("memory_clock_khz", static_cast<double>(d.memory_clock_khz)));
  return CheckNonNegative("copy_gbps", d.copy_gbps);
}

// The cubin: an ELF file matching its sha256 that holds every launch's kernel; each launch
// with positive geometry and the manifest's args only.
absl::Status CheckBinary(const KernelTemplate& tmpl, const store::Entry& e) {
  if (e.cubin.empty()) return Bad("cubin_base64", "empty");
  if (Sha256Hex(e.cubin) != e.cubin_sha256) {
    return Bad("cubin_sha256", "does not match the cubin");
  }
  absl::StatusOr<std::map<std::string, std::string>> text = TextSections(e.cubin);
  if (!text.ok()) return Bad("cubin_base64", text.status().message());
  if (e.launches.empty()) return Bad("launches", "none");
  std::set<std::string> arg_names;
  for (const v1::Arg& a : tmpl.manifest().args()) arg_names.insert(a.name());
  for (size_t i = 0; i < e.launches.size(); ++i) {
    const LaunchSpec& l = e.launches[i];
    const std::string field = absl::StrCat("launches[", i, "]");
    if (text->count(absl::StrCat(".text.", l.lowered_name)) == 0) {
      return Bad(field + ".lowered_name",
                 absl::StrCat("'", Echo(l.lowered_name), "' is not a kernel of the cubin"));
    }
    for (int d = 0; d < 3; ++d) {
      if (l.grid[d] == 0) return Bad(absl::StrCat(field, ".grid[", d, "]"), "0");
      if (l.block[d] == 0) return Bad(absl::StrCat(field, ".block[", d, "]"), "0");
    }
    for (size_t k = 0; k < l.args.size(); ++k) {
      if (arg_names.count(l.args[k]) == 0) {
        return Bad(absl::StrCat(field, ".args[", k, "]"),
                   absl::StrCat("'", Echo(l.args[k]), "' is not an arg of template '",
                                tmpl.name(), "'"));
      }
    }
  }
  return absl::OkStatus();
}

// The entry is what this template binds for its key and config: the config a candidate
// for the shape on the entry's device, the launches its launches (kernel, geometry, args).
// (A source hash other than the template's is not refused: the entry is then stale, as an
// entry of another version of the template is, and served only until it is tuned again.)
absl::Status CheckAgainstBinding(std::shared_ptr<const KernelTemplate> tmpl, DType dtype,
                                 const Shape& shape, const TargetInfo& target,
                                 const store::Entry& e) {
  absl::StatusOr<BindResult> bound = Bind(tmpl, dtype, shape, e.config, target);
  if (!bound.ok()) return Bad("config", bound.status().message());
  if (!bound->instance) {
    return Bad("config", absl::StrCat("not a candidate for this key on ", target.PortableTarget(),
                                      ": ", bound->rejected_because));
  }
  return CheckLaunchesMatch(*bound->instance, e.launches);
}

absl::Status CheckBundle(const TemplateRegistry& registry,
                         const std::map<std::string, store::Device>& devices,
                         const store::EntryBundle& b) {
  const store::Entry& e = b.entry;
  absl::StatusOr<std::shared_ptr<const KernelTemplate>> found =
      registry.Get(e.key.template_id);
  if (!found.ok()) {
    return Bad("key.template_id", absl::StrCat("unknown template '", Echo(e.key.template_id), "'"));
  }
  const KernelTemplate& tmpl = **found;
  const std::optional<DType> dtype = ParseDType(e.key.dtype);
  if (!dtype || !tmpl.SupportsDType(*dtype)) {
    return Bad("key.dtype", absl::StrCat("'", Echo(e.key.dtype), "' is not a dtype of template '",
                                         tmpl.name(), "'"));
  }
  absl::StatusOr<Shape> shape = ParseShape(e.key.shape);
  if (!shape.ok()) return Bad("key.shape", shape.status().message());
  if (ShapeString(*shape) != e.key.shape) {
    return Bad("key.shape", absl::StrCat("'", Echo(e.key.shape), "' is not canonical ('",
                                         ShapeString(*shape), "')"));
  }
  if (absl::Status s = ValidateRequest(tmpl, *dtype, *shape); !s.ok()) {
    return Bad("key.shape", s.message());
  }
  const auto device = devices.find(e.key.device_model);
  if (device == devices.end()) {
    return Bad("key.device_model",
               absl::StrCat("'", Echo(e.key.device_model),
                            "' has no device row in the file or the store"));
  }
  // The device's architecture and SM count; its other limits an H200-class device's, which
  // only refuse configs, never change a binding that passed.
  const TargetInfo target = TargetForStoredDevice(device->second, TargetInfo());

  if (absl::Status s = ValidateParams(tmpl, e.config.params); !s.ok()) {
    return Bad("config.params", s.message());
  }
  bool known_knobs = false;
  for (const Knobs& k : KnobChoices(tmpl, target)) known_knobs = known_knobs || k == e.config.knobs;
  if (!known_knobs) {
    return Bad("config.knobs",
               absl::StrCat("'", Echo(ConfigString(Config{{}, e.config.knobs})),
                            "' is not among template '", tmpl.name(), "''s knobs for ",
                            target.PortableTarget()));
  }
  KTUNE_RETURN_IF_ERROR(CheckBinary(tmpl, e));
  KTUNE_RETURN_IF_ERROR(CheckAgainstBinding(*found, *dtype, *shape, target, e));
  KTUNE_RETURN_IF_ERROR(CheckMetrics("metrics", e.metrics, /*timed=*/true));
  KTUNE_RETURN_IF_ERROR(CheckNonNegative("default_time_ns", e.default_time_ns));
  KTUNE_RETURN_IF_ERROR(CheckNonNegative("tuning_seconds", e.tuning_seconds));
  if (e.trials_total < 0 || e.trials_ok < 0 || e.trials_ok > e.trials_total) {
    return Bad("trials_ok", absl::StrCat(e.trials_ok, " of ", e.trials_total,
                                         " is not a count of trials"));
  }
  if (b.job.done < 0 || b.job.total < 0) {
    return Bad("job.done", absl::StrCat(b.job.done, " of ", b.job.total,
                                        " is not a count of candidates"));
  }
  for (size_t i = 0; i < b.trials.size(); ++i) {
    const store::Trial& t = b.trials[i];
    const std::string field = absl::StrCat("trials[", i, "]");
    KTUNE_RETURN_IF_ERROR(CheckNonNegative(field + ".compile_ms", t.compile_ms));
    KTUNE_RETURN_IF_ERROR(
        CheckMetrics(field + ".metrics", t.metrics, /*timed=*/t.outcome == Outcome::kOk));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckImportFile(const TemplateRegistry& registry,
                             const std::vector<store::Device>& known_devices,
                             const store::ExportFile& file) {
  std::map<std::string, store::Device> devices;
  for (const store::Device& d : known_devices) devices[d.model_key] = d;
  for (size_t i = 0; i < file.devices.size(); ++i) {
    const store::Device& d = file.devices[i];
    if (absl::Status s = CheckDevice(d); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("devices[", i, "] (", Echo(d.model_key), "): ", s.message()));
    }
    // The store keeps its own row of a model it knows (ImportEntries); judge by that one.
    devices.emplace(d.model_key, d);
  }
  for (size_t i = 0; i < file.entries.size(); ++i) {
    const store::EntryKey& k = file.entries[i].entry.key;
    if (absl::Status s = CheckBundle(registry, devices, file.entries[i]); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("entries[", i, "] (", Echo(k.template_id), "/", Echo(k.dtype), "/",
                       Echo(k.shape), " on ", Echo(k.device_model), "): ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace ktune
