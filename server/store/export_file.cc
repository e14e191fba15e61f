#include "server/store/export_file.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/base/config.h"
#include "server/base/launch_spec.h"
#include "server/base/outcome.h"
#include "server/base/status_macros.h"
#include "server/base/trial_metrics.h"

namespace ktune::store {
namespace {

using Json = nlohmann::json;

// ---- writing ----

Json MetricsJson(const TrialMetrics& m) {
  return Json{{"time_ns", m.time_ns},         {"spread_ns", m.spread_ns},
              {"repeats", m.repeats},         {"registers", m.registers},
              {"spill_bytes", m.spill_bytes}, {"static_smem", m.static_smem},
              {"dynamic_smem", m.dynamic_smem}, {"occupancy", m.occupancy},
              {"waves", m.waves},             {"last_wave", m.last_wave},
              {"gbps", m.gbps},               {"gflops", m.gflops},
              {"ceiling_fraction", m.ceiling_fraction}, {"batch", m.batch},
              {"l2_flushed", m.l2_flushed}};
}

Json DeviceJson(const Device& d) {
  return Json{{"model_key", d.model_key},
              {"name", d.name},
              {"cc_major", d.cc_major},
              {"cc_minor", d.cc_minor},
              {"sm_count", d.sm_count},
              {"l2_bytes", d.l2_bytes},
              {"memory_bus_bits", d.memory_bus_bits},
              {"memory_clock_khz", d.memory_clock_khz},
              {"copy_gbps", d.copy_gbps},
              {"uuid", d.uuid},
              {"driver_version", d.driver_version}};
}

Json BundleJson(const EntryBundle& b) {
  const Entry& e = b.entry;
  Json trials = Json::array();
  for (const Trial& t : b.trials) {
    trials.push_back(Json{{"config", Json::parse(ConfigToJson(t.config))},
                          {"candidate_hash", t.candidate_hash},
                          {"outcome", std::string(OutcomeName(t.outcome))},
                          {"compile_ms", t.compile_ms},
                          {"metrics", MetricsJson(t.metrics)},
                          {"log", t.log},
                          {"created_unix_ms", t.created_unix_ms}});
  }
  const Job& j = b.job;
  return Json{
      {"key", Json{{"device_model", e.key.device_model},
                   {"template_id", e.key.template_id},
                   {"dtype", e.key.dtype},
                   {"shape", e.key.shape}}},
      {"source_hash", e.source_hash},
      {"nvrtc_version", e.nvrtc_version},
      {"config", Json::parse(ConfigToJson(e.config))},
      {"cubin_base64", absl::Base64Escape(e.cubin)},
      {"cubin_sha256", e.cubin_sha256},
      {"launches", Json::parse(LaunchesToJson(e.launches))},
      {"metrics", MetricsJson(e.metrics)},
      {"trials_total", e.trials_total},
      {"trials_ok", e.trials_ok},
      {"tuning_seconds", e.tuning_seconds},
      {"created_unix_ms", e.created_unix_ms},
      {"default_time_ns", e.default_time_ns},
      {"job", Json{{"source_hash", j.source_hash},
                   {"nvrtc_version", j.nvrtc_version},
                   {"strategy", j.strategy},
                   {"state", std::string(JobStateName(j.state))},
                   {"done", j.done},
                   {"total", j.total},
                   {"error", j.error},
                   {"created_unix_ms", j.created_unix_ms},
                   {"updated_unix_ms", j.updated_unix_ms},
                   {"stop_reason", j.stop_reason}}},
      {"trials", std::move(trials)}};
}

// ---- reading ----

// A JSON object being read, with its path for error messages ("entries[2].metrics").
class Reader {
 public:
  Reader(const Json& j, std::string path, std::string file)
      : j_(j), path_(std::move(path)), file_(std::move(file)) {}

  absl::StatusOr<Reader> Object(const char* key) const {
    KTUNE_ASSIGN_OR_RETURN(const Json* v, Field(key));
    if (!v->is_object()) return Wrong(key, "an object");
    return Reader(*v, Path(key), file_);
  }
  absl::StatusOr<std::vector<Reader>> Array(const char* key) const {
    KTUNE_ASSIGN_OR_RETURN(const Json* v, Field(key));
    if (!v->is_array()) return Wrong(key, "an array");
    std::vector<Reader> out;
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_object()) return Wrong(absl::StrCat(key, "[", i, "]"), "an object");
      out.emplace_back((*v)[i], absl::StrCat(Path(key), "[", i, "]"), file_);
    }
    return out;
  }
  absl::StatusOr<std::string> String(const char* key) const {
    KTUNE_ASSIGN_OR_RETURN(const Json* v, Field(key));
    if (!v->is_string()) return Wrong(key, "a string");
    return v->get<std::string>();
  }
  absl::StatusOr<int64_t> Int(const char* key) const {
    KTUNE_ASSIGN_OR_RETURN(const Json* v, Field(key));
    if (!v->is_number_integer()) return Wrong(key, "an integer");
    return v->get<int64_t>();
  }
  absl::StatusOr<double> Double(const char* key) const {
    KTUNE_ASSIGN_OR_RETURN(const Json* v, Field(key));
    if (!v->is_number()) return Wrong(key, "a number");
    return v->get<double>();
  }
  bool Has(const char* key) const { return j_.contains(key); }
  absl::StatusOr<bool> Bool(const char* key) const {
    KTUNE_ASSIGN_OR_RETURN(const Json* v, Field(key));
    if (!v->is_boolean()) return Wrong(key, "true or false");
    return v->get<bool>();
  }
  // The raw JSON text of a field, for the parsers of server/base (config, launches).
  absl::StatusOr<std::string> Raw(const char* key) const {
    KTUNE_ASSIGN_OR_RETURN(const Json* v, Field(key));
    return v->dump();
  }
  absl::Status Invalid(const char* key, absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", Path(key), ": ", why));
  }

 private:
  std::string Path(absl::string_view key) const {
    return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
  }
  absl::StatusOr<const Json*> Field(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end()) return Invalid(key, "missing");
    return &*it;
  }
  absl::Status Wrong(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", Path(key), ": expected ", what));
  }

  const Json& j_;
  std::string path_;
  std::string file_;
};

absl::StatusOr<TrialMetrics> ReadMetrics(const Reader& parent) {
  KTUNE_ASSIGN_OR_RETURN(Reader r, parent.Object("metrics"));
  TrialMetrics m;
  KTUNE_ASSIGN_OR_RETURN(m.time_ns, r.Double("time_ns"));
  KTUNE_ASSIGN_OR_RETURN(m.spread_ns, r.Double("spread_ns"));
  KTUNE_ASSIGN_OR_RETURN(m.repeats, r.Int("repeats"));
  KTUNE_ASSIGN_OR_RETURN(m.registers, r.Int("registers"));
  KTUNE_ASSIGN_OR_RETURN(m.spill_bytes, r.Int("spill_bytes"));
  KTUNE_ASSIGN_OR_RETURN(m.static_smem, r.Int("static_smem"));
  KTUNE_ASSIGN_OR_RETURN(m.dynamic_smem, r.Int("dynamic_smem"));
  KTUNE_ASSIGN_OR_RETURN(m.occupancy, r.Double("occupancy"));
  KTUNE_ASSIGN_OR_RETURN(m.waves, r.Double("waves"));
  KTUNE_ASSIGN_OR_RETURN(m.last_wave, r.Double("last_wave"));
  KTUNE_ASSIGN_OR_RETURN(m.gbps, r.Double("gbps"));
  KTUNE_ASSIGN_OR_RETURN(m.gflops, r.Double("gflops"));
  KTUNE_ASSIGN_OR_RETURN(m.ceiling_fraction, r.Double("ceiling_fraction"));
  KTUNE_ASSIGN_OR_RETURN(m.batch, r.Int("batch"));
  KTUNE_ASSIGN_OR_RETURN(m.l2_flushed, r.Bool("l2_flushed"));
  return m;
}

absl::StatusOr<Config> ReadConfig(const Reader& r) {
  KTUNE_ASSIGN_OR_RETURN(std::string raw, r.Raw("config"));
  std::string error;
  std::optional<Config> c = ConfigFromJson(raw, &error);
  if (!c) return r.Invalid("config", error);
  return *std::move(c);
}

absl::StatusOr<Device> ReadDevice(const Reader& r) {
  Device d;
  KTUNE_ASSIGN_OR_RETURN(d.model_key, r.String("model_key"));
  KTUNE_ASSIGN_OR_RETURN(d.name, r.String("name"));
  KTUNE_ASSIGN_OR_RETURN(int64_t cc_major, r.Int("cc_major"));
  KTUNE_ASSIGN_OR_RETURN(int64_t cc_minor, r.Int("cc_minor"));
  KTUNE_ASSIGN_OR_RETURN(int64_t sm_count, r.Int("sm_count"));
  KTUNE_ASSIGN_OR_RETURN(d.l2_bytes, r.Int("l2_bytes"));
  KTUNE_ASSIGN_OR_RETURN(int64_t bus, r.Int("memory_bus_bits"));
  KTUNE_ASSIGN_OR_RETURN(d.memory_clock_khz, r.Int("memory_clock_khz"));
  KTUNE_ASSIGN_OR_RETURN(d.copy_gbps, r.Double("copy_gbps"));
  KTUNE_ASSIGN_OR_RETURN(d.uuid, r.String("uuid"));
  KTUNE_ASSIGN_OR_RETURN(d.driver_version, r.String("driver_version"));
  d.cc_major = static_cast<int>(cc_major);
  d.cc_minor = static_cast<int>(cc_minor);
  d.sm_count = static_cast<int>(sm_count);
  d.memory_bus_bits = static_cast<int>(bus);
  if (d.model_key.empty()) return r.Invalid("model_key", "empty");
  return d;
}

absl::StatusOr<Trial> ReadTrial(const Reader& r) {
  Trial t;
  KTUNE_ASSIGN_OR_RETURN(t.config, ReadConfig(r));
  KTUNE_ASSIGN_OR_RETURN(t.candidate_hash, r.String("candidate_hash"));
  KTUNE_ASSIGN_OR_RETURN(std::string outcome, r.String("outcome"));
  std::optional<Outcome> parsed = ParseOutcome(outcome);
  if (!parsed) return r.Invalid("outcome", absl::StrCat("unknown outcome \"", outcome, "\""));
  t.outcome = *parsed;
  KTUNE_ASSIGN_OR_RETURN(t.compile_ms, r.Double("compile_ms"));
  KTUNE_ASSIGN_OR_RETURN(t.metrics, ReadMetrics(r));
  KTUNE_ASSIGN_OR_RETURN(t.log, r.String("log"));
  KTUNE_ASSIGN_OR_RETURN(t.created_unix_ms, r.Int("created_unix_ms"));
  return t;
}

absl::StatusOr<JobState> ReadJobState(const Reader& r) {
  KTUNE_ASSIGN_OR_RETURN(std::string state, r.String("state"));
  if (std::optional<JobState> s = ParseJobState(state)) return *s;
  return r.Invalid("state", absl::StrCat("unknown job state \"", state, "\""));
}

absl::StatusOr<EntryBundle> ReadBundle(const Reader& r) {
  EntryBundle b;
  Entry& e = b.entry;
  KTUNE_ASSIGN_OR_RETURN(Reader key, r.Object("key"));
  KTUNE_ASSIGN_OR_RETURN(e.key.device_model, key.String("device_model"));
  KTUNE_ASSIGN_OR_RETURN(e.key.template_id, key.String("template_id"));
  KTUNE_ASSIGN_OR_RETURN(e.key.dtype, key.String("dtype"));
  KTUNE_ASSIGN_OR_RETURN(e.key.shape, key.String("shape"));
  KTUNE_ASSIGN_OR_RETURN(e.source_hash, r.String("source_hash"));
  KTUNE_ASSIGN_OR_RETURN(e.nvrtc_version, r.String("nvrtc_version"));
  KTUNE_ASSIGN_OR_RETURN(e.config, ReadConfig(r));
  KTUNE_ASSIGN_OR_RETURN(std::string cubin64, r.String("cubin_base64"));
  if (!absl::Base64Unescape(cubin64, &e.cubin)) return r.Invalid("cubin_base64", "not base64");
  KTUNE_ASSIGN_OR_RETURN(e.cubin_sha256, r.String("cubin_sha256"));
  KTUNE_ASSIGN_OR_RETURN(std::string launches, r.Raw("launches"));
  std::string error;
  std::optional<std::vector<LaunchSpec>> parsed = LaunchesFromJson(launches, &error);
  if (!parsed) return r.Invalid("launches", error);
  e.launches = *std::move(parsed);
  KTUNE_ASSIGN_OR_RETURN(e.metrics, ReadMetrics(r));
  KTUNE_ASSIGN_OR_RETURN(e.trials_total, r.Int("trials_total"));
  KTUNE_ASSIGN_OR_RETURN(e.trials_ok, r.Int("trials_ok"));
  KTUNE_ASSIGN_OR_RETURN(e.tuning_seconds, r.Double("tuning_seconds"));
  KTUNE_ASSIGN_OR_RETURN(e.created_unix_ms, r.Int("created_unix_ms"));
  KTUNE_ASSIGN_OR_RETURN(e.default_time_ns, r.Double("default_time_ns"));

  KTUNE_ASSIGN_OR_RETURN(Reader job, r.Object("job"));
  Job& j = b.job;
  j.key = e.key;
  KTUNE_ASSIGN_OR_RETURN(j.source_hash, job.String("source_hash"));
  KTUNE_ASSIGN_OR_RETURN(j.nvrtc_version, job.String("nvrtc_version"));
  KTUNE_ASSIGN_OR_RETURN(j.strategy, job.String("strategy"));
  KTUNE_ASSIGN_OR_RETURN(j.state, ReadJobState(job));
  KTUNE_ASSIGN_OR_RETURN(j.done, job.Int("done"));
  KTUNE_ASSIGN_OR_RETURN(j.total, job.Int("total"));
  KTUNE_ASSIGN_OR_RETURN(j.error, job.String("error"));
  KTUNE_ASSIGN_OR_RETURN(j.created_unix_ms, job.Int("created_unix_ms"));
  KTUNE_ASSIGN_OR_RETURN(j.updated_unix_ms, job.Int("updated_unix_ms"));
  // Files written before stop reasons were kept have none.
  if (job.Has("stop_reason")) {
    KTUNE_ASSIGN_OR_RETURN(j.stop_reason, job.String("stop_reason"));
  }

  KTUNE_ASSIGN_OR_RETURN(std::vector<Reader> trials, r.Array("trials"));
  for (const Reader& t : trials) {
    KTUNE_ASSIGN_OR_RETURN(Trial trial, ReadTrial(t));
    b.trials.push_back(std::move(trial));
  }
  return b;
}

}  // namespace

std::string ExportToJson(const ExportFile& file) {
  Json devices = Json::array();
  for (const Device& d : file.devices) devices.push_back(DeviceJson(d));
  Json entries = Json::array();
  for (const EntryBundle& b : file.entries) entries.push_back(BundleJson(b));
  Json root{{"format", std::string(kExportFormat)},
            {"version", file.version},
            {"exported_unix_ms", file.exported_unix_ms},
            {"devices", std::move(devices)},
            {"entries", std::move(entries)}};
  return root.dump(1) + "\n";
}

absl::StatusOr<ExportFile> ExportFromJson(absl::string_view json, absl::string_view name) {
  const std::string file(name);
  Json root = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, " is not a ktune export: not a JSON object"));
  }
  Reader r(root, "", file);
  absl::StatusOr<std::string> format = r.String("format");
  if (!format.ok() || *format != kExportFormat) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, " is not a ktune export: \"format\" is not \"", kExportFormat, "\""));
  }
  ExportFile out;
  KTUNE_ASSIGN_OR_RETURN(int64_t version, r.Int("version"));
  if (version > kExportVersion || version < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(file, " has export version ", version, "; this build reads version ",
                     kExportVersion, version > kExportVersion ? ": use a newer ktune" : ""));
  }
  out.version = static_cast<int>(version);
  KTUNE_ASSIGN_OR_RETURN(out.exported_unix_ms, r.Int("exported_unix_ms"));
  KTUNE_ASSIGN_OR_RETURN(std::vector<Reader> devices, r.Array("devices"));
  for (const Reader& d : devices) {
    KTUNE_ASSIGN_OR_RETURN(Device device, ReadDevice(d));
    out.devices.push_back(std::move(device));
  }
  KTUNE_ASSIGN_OR_RETURN(std::vector<Reader> entries, r.Array("entries"));
  for (const Reader& e : entries) {
    KTUNE_ASSIGN_OR_RETURN(EntryBundle bundle, ReadBundle(e));
    out.entries.push_back(std::move(bundle));
  }
  return out;
}

}  // namespace ktune::store
