// `ktune cache`: what the SQLite store holds and why. ls, show, stats, diff and report
// read the file directly, read-only (safe while ktuned writes: WAL); export, import and
// prune live in cache/cache_transfer.cc, the charts and pages of report in cache/.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "frontends/ktune/cache/cache_common.h"
#include "frontends/ktune/cache/report_html.h"
#include "frontends/ktune/commands.h"
#include "server/base/file.h"
#include "server/base/status_macros.h"
#include "server/templates/shape.h"

namespace ktune::cli {
namespace {

// Left-aligned columns, two spaces apart; the last column is not padded.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line.append(width[i] + 2 - r[i].size(), ' ');
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string Pct(double fraction) { return absl::StrFormat("%.1f%%", 100 * fraction); }

std::string SpreadPct(const TrialMetrics& m) {
  return m.time_ns > 0 ? absl::StrFormat("%.1f%%", 100 * m.spread_ns / m.time_ns) : "-";
}

// ---- ls ----

struct LsArgs {
  std::string db, nvrtc_version, template_id, dtype, device_model;
  bool stale = false;
  bool json = false;
};

int RunLs(const LsArgs& args) {
  const CacheView view =
      OpenCacheView(CacheDbPath(args.db),
                    EntryFilterFromFlags(args.template_id, args.dtype, args.device_model),
                    NvrtcVersionOr(args.nvrtc_version));
  if (view.exit_code != 0) return view.exit_code;

  std::vector<const store::EntrySummary*> shown;
  for (const store::EntrySummary& e : view.entries) {
    if (!args.stale || view.stale.count(e.id)) shown.push_back(&e);
  }
  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const store::EntrySummary* e : shown) {
      nlohmann::json params = nlohmann::json::object();
      for (const auto& [k, v] : e->config.params) params[k] = v;
      out.push_back({{"id", e->id},
                     {"key", KeyText(e->key)},
                     {"device_model", e->key.device_model},
                     {"template", e->key.template_id},
                     {"dtype", e->key.dtype},
                     {"shape", e->key.shape},
                     {"params", params},
                     {"knobs", {{"target", e->config.knobs.target},
                                {"maxrregcount", e->config.knobs.maxrregcount},
                                {"min_blocks", e->config.knobs.min_blocks},
                                {"fast_math", e->config.knobs.fast_math}}},
                     {"time_ns", e->metrics.time_ns},
                     {"spread_ns", e->metrics.spread_ns},
                     {"gbps", e->metrics.gbps},
                     {"gflops", e->metrics.gflops},
                     {"ceiling_fraction", e->metrics.ceiling_fraction},
                     // null when the default config's time was not measured.
                     {"default_time_ns", e->default_time_ns > 0
                                             ? nlohmann::json(e->default_time_ns)
                                             : nlohmann::json(nullptr)},
                     {"registers", e->metrics.registers},
                     {"occupancy", e->metrics.occupancy},
                     {"cubin_bytes", e->cubin_bytes},
                     {"source_hash", e->source_hash},
                     {"nvrtc_version", e->nvrtc_version},
                     {"stale", view.stale.count(e->id) > 0},
                     {"job_id", e->job_id},
                     {"created_unix_ms", e->created_unix_ms}});
    }
    std::printf("%s\n", out.dump(1).c_str());
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"ID", "KEY", "DEVICE", "PARAMS", "KNOBS",
                                                 "TIME_US", "GB/S", "CEIL", "VS_DEFAULT", "NVRTC",
                                                 "STALE", "CREATED_UTC"}};
  for (const store::EntrySummary* e : shown) {
    // The winner's speed-up over the template's default config, measured in the same job.
    const std::string vs_default =
        e->default_time_ns > 0 && e->metrics.time_ns > 0
            ? absl::StrFormat("%.2fx", e->default_time_ns / e->metrics.time_ns)
            : "-";
    rows.push_back({absl::StrCat(e->id), KeyText(e->key), e->key.device_model,
                    ParamsText(e->config.params), KnobsText(e->config.knobs),
                    Us(e->metrics.time_ns), absl::StrFormat("%.0f", e->metrics.gbps),
                    Pct(e->metrics.ceiling_fraction), vs_default, e->nvrtc_version,
                    view.stale.count(e->id) ? "stale" : "-", UtcTime(e->created_unix_ms)});
  }
  std::printf("%s", Table(rows).c_str());
  std::printf("%zu entries\n", shown.size());
  return kExitOk;
}

// ---- show ----

struct ShowArgs {
  std::string db, nvrtc_version, entry, device_model;
  int top = 20;
};

// An entry id, or TEMPLATE/DTYPE/SHAPE[@DEVICE_MODEL] (the KEY column of ls).
absl::StatusOr<int64_t> ResolveEntry(store::Store& store, const std::string& text,
                                     std::string device_model) {
  int64_t id = 0;
  if (absl::SimpleAtoi(text, &id)) return id;
  std::string key = text;
  if (size_t at = key.find('@'); at != std::string::npos) {
    device_model = key.substr(at + 1);
    key.resize(at);
  }
  std::vector<std::string> parts = absl::StrSplit(key, absl::MaxSplits('/', 2));
  if (parts.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "entry: '", text, "' is neither an id nor TEMPLATE/DTYPE/SHAPE[@DEVICE_MODEL]"));
  }
  KTUNE_ASSIGN_OR_RETURN(Shape shape, ParseShape(parts[2]));
  store::EntryFilter filter;
  filter.template_id = parts[0];
  filter.dtype = parts[1];
  if (!device_model.empty()) filter.device_model = device_model;
  KTUNE_ASSIGN_OR_RETURN(std::vector<store::EntrySummary> found, store.ListEntries(filter));
  std::vector<const store::EntrySummary*> match;
  for (const store::EntrySummary& s : found) {
    if (s.key.shape == ShapeString(shape)) match.push_back(&s);
  }
  if (match.empty()) return absl::NotFoundError(absl::StrCat("entry: no entry for ", text));
  if (match.size() > 1) {
    std::vector<std::string> models;
    for (const auto* s : match) models.push_back(absl::StrCat("'", s->key.device_model, "'"));
    return absl::InvalidArgumentError(absl::StrCat(
        "entry: ", text, " is tuned for ", match.size(), " device models (",
        absl::StrJoin(models, ", "), "); append @MODEL or give --device-model"));
  }
  return match[0]->id;
}

std::string FirstLine(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  if (line.size() > 100) line = line.substr(0, 97) + "...";
  return line;
}

// The entry's key, device, winner, metrics, cubin, launches and provenance.
std::string ShowEntry(const store::Entry& e, const absl::StatusOr<store::Device>& device,
                      bool stale, const store::Job* job) {
  const TrialMetrics& m = e.metrics;
  std::string out;
  absl::StrAppend(&out, "entry      ", e.id, "  ", KeyText(e.key), "\n");
  absl::StrAppend(&out, "device     ", e.key.device_model);
  if (device.ok()) {
    absl::StrAppend(&out, absl::StrFormat("  (%s, sm_%d%d, %d SMs, copy ceiling %s)",
                                          device->name, device->cc_major, device->cc_minor,
                                          device->sm_count,
                                          device->copy_gbps > 0
                                              ? absl::StrFormat("%.1f GB/s", device->copy_gbps)
                                              : std::string("not measured")));
  }
  absl::StrAppend(&out, "\n");
  absl::StrAppend(&out, "source     ", e.source_hash, "  nvrtc ", e.nvrtc_version, "  ",
                  stale ? "STALE (re-tuned on next demand)" : "fresh", "\n");
  absl::StrAppend(&out, "winner     ", ParamsText(e.config.params), "  ", KnobsText(e.config.knobs),
                  "\n");
  absl::StrAppend(&out, absl::StrFormat(
      "time       %s us (spread %s, %d samples, batch %d%s)  %.1f GB/s  %.2f GFLOP/s  %s of "
      "copy ceiling\n",
      Us(m.time_ns), SpreadPct(m), m.repeats, m.batch, m.l2_flushed ? ", L2 flushed" : "",
      m.gbps, m.gflops, Pct(m.ceiling_fraction)));
  absl::StrAppend(&out, absl::StrFormat(
      "resources  %d registers, %d B spilled, smem %d static + %d dynamic B, occupancy %s, "
      "%.2f waves (last %s full)\n",
      m.registers, m.spill_bytes, m.static_smem, m.dynamic_smem, Pct(m.occupancy), m.waves,
      Pct(m.last_wave)));
  absl::StrAppend(&out, "cubin      ", e.cubin.size(), " B  sha256 ", e.cubin_sha256, "\n");
  for (size_t i = 0; i < e.launches.size(); ++i) {
    const LaunchSpec& l = e.launches[i];
    absl::StrAppend(&out, absl::StrFormat(
        "launch %-3d %s  grid [%d,%d,%d]  block [%d,%d,%d]  smem %d B  args (%s)%s\n",
        static_cast<int>(i + 1), l.lowered_name, l.grid[0], l.grid[1], l.grid[2], l.block[0],
        l.block[1], l.block[2], l.shared_bytes, absl::StrJoin(l.args, ","),
        l.programmatic ? "  programmatic" : ""));
  }
  absl::StrAppend(&out, absl::StrFormat(
      "tuned      %d trials (%d ok) in %.1f s, created %s UTC", e.trials_total, e.trials_ok,
      e.tuning_seconds, UtcTime(e.created_unix_ms)));
  if (job) {
    absl::StrAppend(&out, absl::StrFormat(", job %d (%s, %s)", job->id,
                                          job->strategy.empty() ? "-" : job->strategy,
                                          store::JobStateName(job->state)));
  } else {
    absl::StrAppend(&out, ", its job and trials pruned");
  }
  absl::StrAppend(&out, "\n");
  if (job && !job->stop_reason.empty()) {
    absl::StrAppend(&out, "stopped    ", job->stop_reason, "\n");
  }

  return out;
}

// Why it won: the timed candidates fastest first, then what failed; `limit` rows each.
std::string ShowTrials(const store::Entry& e, const std::vector<store::Trial>& trials,
                       size_t limit) {
  if (trials.empty()) return "";
  std::vector<const store::Trial*> ok, failed;
  for (const store::Trial& t : trials) (t.outcome == Outcome::kOk ? ok : failed).push_back(&t);
  std::stable_sort(ok.begin(), ok.end(), [](const store::Trial* a, const store::Trial* b) {
    return a->metrics.time_ns < b->metrics.time_ns;
  });
  std::stable_sort(failed.begin(), failed.end(), [](const store::Trial* a, const store::Trial* b) {
    return a->outcome < b->outcome;
  });
  const TrialMetrics& m = e.metrics;
  std::string out;
  absl::StrAppend(&out, "\nwhy it won: ", ok.size(), " timed candidates, fastest first",
                  ok.size() > limit ? absl::StrCat(" (top ", limit, ")") : "",
                  "; * the winner; vs-best is time / the winner's\n",
                  ok.empty() || ok.front()->config == e.config
                      ? ""
                      : "(the winner is decided by a final round that re-times the fastest "
                        "three interleaved, so it need not rank first by its search time)\n");
  std::vector<std::vector<std::string>> rows = {
      {"", "RANK", "OUTCOME", "TIME_US", "VS-BEST", "SPREAD", "REGS", "OCC", "WAVES", "CEIL",
       "PARAMS", "KNOBS"}};
  for (size_t i = 0; i < ok.size() && i < limit; ++i) {
    const store::Trial& t = *ok[i];
    rows.push_back({t.config == e.config ? "*" : "", absl::StrCat(i + 1),
                    std::string(OutcomeName(t.outcome)), Us(t.metrics.time_ns),
                    m.time_ns > 0 ? absl::StrFormat("%.2fx", t.metrics.time_ns / m.time_ns) : "-",
                    SpreadPct(t.metrics), absl::StrCat(t.metrics.registers),
                    Pct(t.metrics.occupancy), absl::StrFormat("%.2f", t.metrics.waves),
                    Pct(t.metrics.ceiling_fraction), ParamsText(t.config.params),
                    KnobsText(t.config.knobs)});
  }
  absl::StrAppend(&out, Table(rows));
  if (!failed.empty()) {
    absl::StrAppend(&out, "\nfailed: ", failed.size(), " candidates\n");
    std::vector<std::vector<std::string>> frows = {{"OUTCOME", "PARAMS", "KNOBS", "REASON"}};
    for (size_t i = 0; i < failed.size() && i < limit; ++i) {
      const store::Trial& t = *failed[i];
      frows.push_back({std::string(OutcomeName(t.outcome)), ParamsText(t.config.params),
                       KnobsText(t.config.knobs), FirstLine(t.log)});
    }
    absl::StrAppend(&out, Table(frows));
  }
  return out;
}

int RunShow(const ShowArgs& args) {
  if (args.top < 0) return Fail(absl::InvalidArgumentError("--top: must be >= 0"));
  const std::string path = CacheDbPath(args.db);
  absl::StatusOr<std::unique_ptr<store::Store>> store = OpenCacheReadOnly(path);
  if (!store.ok()) return FailOpen(store.status());
  absl::StatusOr<int64_t> id = ResolveEntry(**store, args.entry, args.device_model);
  if (!id.ok()) return Fail(id.status());
  absl::StatusOr<store::EntryBundle> bundle = LoadEntryBundle(**store, *id);
  if (!bundle.ok()) return Fail(bundle.status());
  absl::StatusOr<std::set<int64_t>> stale = StaleIds(**store, NvrtcVersionOr(args.nvrtc_version));
  if (!stale.ok()) return Fail(stale.status());
  const store::Entry& e = bundle->entry;
  absl::StatusOr<store::Device> device = (*store)->GetDevice(e.key.device_model);
  // The entry's own job, not the stand-in for a pruned one.
  const store::Job* job = e.job_id != 0 ? &bundle->job : nullptr;
  const std::string out =
      absl::StrCat(ShowEntry(e, device, stale->count(e.id) > 0, job),
                   ShowTrials(e, bundle->trials,
                              args.top == 0 ? SIZE_MAX : static_cast<size_t>(args.top)));
  std::printf("%s", out.c_str());
  return kExitOk;
}

// ---- stats ----

struct StatsArgs {
  std::string db, nvrtc_version;
};

int RunStats(const StatsArgs& args) {
  const std::string path = CacheDbPath(args.db);
  const std::string nvrtc = NvrtcVersionOr(args.nvrtc_version);
  const CacheView view = OpenCacheView(path, {}, nvrtc);
  if (view.exit_code != 0) return view.exit_code;
  absl::StatusOr<store::StoreStats> stats = view.store->Stats();
  if (!stats.ok()) return Fail(stats.status());

  std::printf("database  %s (%lld bytes)\n", path.c_str(),
              static_cast<long long>(stats->file_bytes));
  std::printf("entries   %lld (%zu stale against the templates table and NVRTC %s)\n",
              static_cast<long long>(stats->entries), view.stale.size(), nvrtc.c_str());
  std::printf("jobs      %lld\ntrials    %lld\n", static_cast<long long>(stats->jobs),
              static_cast<long long>(stats->trials));

  std::map<std::pair<std::string, std::string>, std::pair<int, int>> per;  // entries, stale
  for (const store::EntrySummary& e : view.entries) {
    auto& c = per[{e.key.device_model, e.key.template_id}];
    ++c.first;
    if (view.stale.count(e.id)) ++c.second;
  }
  std::vector<std::vector<std::string>> rows = {{"DEVICE", "TEMPLATE", "ENTRIES", "STALE"}};
  for (const auto& [k, c] : per) {
    rows.push_back({k.first, k.second, absl::StrCat(c.first), absl::StrCat(c.second)});
  }
  std::printf("\nentries per device model and template\n%s", Table(rows).c_str());
  std::vector<std::vector<std::string>> outcomes = {{"OUTCOME", "TRIALS"}};
  int64_t failed = 0;
  for (const auto& [name, n] : stats->trials_by_outcome) {
    if (name == "ok") continue;
    outcomes.push_back({name, absl::StrCat(n)});
    failed += n;
  }
  std::printf("\nfailed trials by outcome: %lld\n", static_cast<long long>(failed));
  if (outcomes.size() > 1) std::printf("%s", Table(outcomes).c_str());
  return kExitOk;
}

// ---- diff ----

struct DiffArgs {
  std::string db1, db2;
};

int RunDiff(const DiffArgs& args) {
  using Key = std::tuple<std::string, std::string, std::string, std::string>;
  std::map<Key, store::EntrySummary> sides[2];
  const std::string paths[2] = {args.db1, args.db2};
  for (int i = 0; i < 2; ++i) {
    CacheView view = OpenCacheView(paths[i], {});
    if (view.exit_code != 0) return view.exit_code;
    for (store::EntrySummary& e : view.entries) {
      Key k{e.key.device_model, e.key.template_id, e.key.dtype, e.key.shape};
      sides[i].emplace(k, std::move(e));
    }
  }
  auto label = [](const store::EntrySummary& e) {
    return absl::StrCat(KeyText(e.key), " on ", e.key.device_model);
  };
  std::string out;
  for (int i = 0; i < 2; ++i) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& [k, e] : sides[i]) {
      if (sides[1 - i].count(k) == 0) {
        rows.push_back({"  " + label(e), Us(e.metrics.time_ns) + " us", ParamsText(e.config.params),
                        KnobsText(e.config.knobs)});
      }
    }
    absl::StrAppend(&out, "only in ", paths[i], ": ", rows.size(), "\n", Table(rows));
  }
  std::vector<std::vector<std::string>> rows;
  size_t same = 0;
  for (const auto& [k, a] : sides[0]) {
    auto it = sides[1].find(k);
    if (it == sides[1].end()) continue;
    const store::EntrySummary& b = it->second;
    if (a.config == b.config) {
      ++same;
      continue;
    }
    rows.push_back({"  " + label(a), "1: " + Us(a.metrics.time_ns) + " us",
                    ParamsText(a.config.params) + " " + KnobsText(a.config.knobs),
                    "2: " + Us(b.metrics.time_ns) + " us",
                    ParamsText(b.config.params) + " " + KnobsText(b.config.knobs),
                    a.metrics.time_ns > 0
                        ? absl::StrFormat("2/1 %.2fx", b.metrics.time_ns / a.metrics.time_ns)
                        : "-"});
  }
  absl::StrAppend(&out, "different winners: ", rows.size(), "\n", Table(rows));
  absl::StrAppend(&out, "same winner: ", same, "\n");
  std::printf("%s", out.c_str());
  return kExitOk;
}

// ---- report ----

struct ReportArgs {
  std::string db, nvrtc_version, out, template_id;
};

std::string PageName(const std::string& template_id) {
  std::string name = template_id;
  for (char& c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  }
  return name + ".html";
}

int RunReport(const ReportArgs& args) {
  const std::string path = CacheDbPath(args.db);
  const CacheView view = OpenCacheView(path, EntryFilterFromFlags(args.template_id, "", ""),
                                       NvrtcVersionOr(args.nvrtc_version));
  if (view.exit_code != 0) return view.exit_code;
  store::Store& store = *view.store;

  std::map<std::string, std::vector<ReportEntry>> pages;
  std::map<std::string, store::Device> devices;
  for (const store::EntrySummary& s : view.entries) {
    ReportEntry r;
    absl::StatusOr<store::EntryBundle> bundle = LoadEntryBundle(store, s.id);
    if (!bundle.ok()) return Fail(bundle.status());
    r.entry = std::move(bundle->entry);
    r.trials = std::move(bundle->trials);
    r.stale = view.stale.count(s.id) > 0;
    auto it = devices.find(s.key.device_model);
    if (it == devices.end()) {
      absl::StatusOr<store::Device> d = store.GetDevice(s.key.device_model);
      store::Device device;
      if (d.ok()) {
        device = *std::move(d);
      } else if (d.status().code() != absl::StatusCode::kNotFound) {
        return Fail(d.status());
      }
      device.model_key = s.key.device_model;
      it = devices.emplace(s.key.device_model, device).first;
    }
    r.device = it->second;
    pages[s.key.template_id].push_back(std::move(r));
  }
  if (absl::Status s = MakeDirs(args.out); !s.ok()) return Fail(s);
  std::vector<ReportIndexRow> index;
  for (const auto& [template_id, list] : pages) {
    const std::string file = PageName(template_id);
    if (absl::Status s = AtomicWriteFile(absl::StrCat(args.out, "/", file),
                                         RenderTemplatePage(template_id, list, path));
        !s.ok()) {
      return Fail(s);
    }
    index.push_back({template_id, file, list.size()});
    std::printf("%s/%s: %zu entries\n", args.out.c_str(), file.c_str(), list.size());
  }
  if (absl::Status s = AtomicWriteFile(absl::StrCat(args.out, "/index.html"),
                                       RenderReportIndex(index, path));
      !s.ok()) {
    return Fail(s);
  }
  std::printf("%s/index.html: %zu templates\n", args.out.c_str(), index.size());
  return kExitOk;
}

void AddDbFlags(CLI::App* app, std::string* db, std::string* nvrtc) {
  app->add_option("--db", *db, "SQLite file (default: the daemon's, ~/.cache/ktune/ktune.db)");
  if (nvrtc != nullptr) {
    app->add_option("--nvrtc-version", *nvrtc,
                    "NVRTC version that decides staleness (default: this build's)");
  }
}

// --remote and its companions. `required`: the subcommand is about the shared tier.
void AddRemoteFlags(CLI::App* app, RemoteFlags* remote, bool required) {
  CLI::Option* url = app->add_option(
      "--remote", remote->url,
      required ? "The fleet's shared tier: redis://HOST:PORT[/DB] or rediss://HOST:PORT[/DB]"
               : "Read the fleet's shared tier (redis://HOST:PORT[/DB], rediss://...) "
                 "instead of the SQLite store");
  if (required) url->required();
  app->add_option("--remote-password-file", remote->password_file,
                  "File holding the Redis password (AUTH)");
  app->add_option("--remote-ca", remote->ca,
                  "rediss://: CA certificates (PEM) to trust (default: the system's)");
}

void AddSelectionFlags(CLI::App* app, RemoteSelection* s) {
  app->add_option("--template", s->template_id, "Only this template");
  app->add_option("--dtype", s->dtype, "Only this dtype");
  app->add_option("--device-model", s->device_model, "Only this device model key");
}

}  // namespace

// The subcommands added so far, each with what runs it when it was the one parsed.
using Subcommands = std::vector<std::pair<CLI::App*, std::function<int()>>>;

// ls, show and stats: read-only views of one store (ls and stats also of the fleet tier).
void AddReadCommands(CLI::App* cache, Subcommands* subs) {
  auto ls = std::make_shared<LsArgs>();
  auto remote_ls = std::make_shared<CacheRemoteLsArgs>();
  CLI::App* app = cache->add_subcommand("ls", "List entries as an aligned table or --json");
  AddDbFlags(app, &ls->db, &ls->nvrtc_version);
  app->add_option("--template", ls->template_id, "Only this template");
  app->add_option("--dtype", ls->dtype, "Only this dtype");
  app->add_option("--device-model", ls->device_model, "Only this device model key");
  app->add_flag("--stale", ls->stale, "Only stale entries (other template source or NVRTC)");
  app->add_flag("--json", ls->json, "A JSON array instead of the table");
  AddRemoteFlags(app, &remote_ls->remote, /*required=*/false);
  subs->emplace_back(app, [ls, remote_ls] {
    if (remote_ls->remote.url.empty()) return RunLs(*ls);
    remote_ls->selection = {ls->template_id, ls->dtype, ls->device_model};
    remote_ls->json = ls->json;
    return RunCacheRemoteLs(*remote_ls);
  });

  auto show = std::make_shared<ShowArgs>();
  app = cache->add_subcommand(
      "show", "One entry: artifact, launch geometry, and why it won (its trials ranked)");
  AddDbFlags(app, &show->db, &show->nvrtc_version);
  app->add_option("entry", show->entry,
                  "Entry id, or KEY as ls prints it: TEMPLATE/DTYPE/SHAPE[@DEVICE_MODEL]")
      ->required();
  app->add_option("--device-model", show->device_model, "Device model, when KEY has several");
  app->add_option("--top", show->top, "Trials to list (0 = all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  subs->emplace_back(app, [show] { return RunShow(*show); });

  auto stats = std::make_shared<StatsArgs>();
  app = cache->add_subcommand(
      "stats", "Entries per device model and template, stale entries, failed trials, size");
  AddDbFlags(app, &stats->db, &stats->nvrtc_version);
  auto remote_stats = std::make_shared<CacheRemoteLsArgs>();
  AddRemoteFlags(app, &remote_stats->remote, /*required=*/false);
  subs->emplace_back(app, [stats, remote_stats] {
    return remote_stats->remote.url.empty() ? RunStats(*stats) : RunCacheRemoteStats(*remote_stats);
  });
}

// export, import, prune, push and pull: the store's entries in and out.
void AddTransferCommands(CLI::App* cache, Subcommands* subs) {
  auto exp = std::make_shared<CacheExportArgs>();
  CLI::App* app = cache->add_subcommand(
      "export", "Write entries with their evidence (trials, the device's ceiling) to a "
                "portable JSON file");
  AddDbFlags(app, &exp->db, nullptr);
  app->add_option("file", exp->file, "Export file to write")->required();
  app->add_option("--template", exp->template_id, "Only this template");
  app->add_option("--dtype", exp->dtype, "Only this dtype");
  app->add_option("--device-model", exp->device_model, "Only this device model key");
  subs->emplace_back(app, [exp] { return RunCacheExport(*exp); });

  auto imp = std::make_shared<CacheImportArgs>();
  app = cache->add_subcommand(
      "import",
      "Read an export file into the store, in one transaction, reporting per entry what "
      "happened. Refused (nothing imported, exit 2): a file with any entry that does not "
      "check out against the templates and its device (template, dtype, shape, params, "
      "knobs, times, counts, the cubin and its kernels), entries tuned with another NVRTC "
      "version, or for a device model the store has never seen while it knows others");
  AddDbFlags(app, &imp->db, &imp->nvrtc_version);
  app->add_option("file", imp->file, "Export file to read")->required();
  app->add_option("--templates", imp->templates_dir,
                  "Templates folder the entries are checked against (default: shipped)");
  app->add_option("--on-conflict", imp->on_conflict,
                  "When the store has the key already: keep-faster (the lower median time "
                  "stays; a tie keeps the existing), keep-existing, or replace")
      ->capture_default_str();
  app->add_flag("--allow-nvrtc-mismatch", imp->allow_nvrtc_mismatch,
                "Take entries tuned with another NVRTC version (they are stale here)");
  app->add_flag("--allow-other-device", imp->allow_other_device,
                "Take entries for device models this store has not seen");
  app->add_flag("--publish", imp->publish,
                "Also publish the imported entries to the fleet's shared tier (--remote)");
  AddRemoteFlags(app, &imp->remote, /*required=*/false);
  subs->emplace_back(app, [imp] { return RunCacheImport(*imp); });

  auto prune = std::make_shared<CachePruneArgs>();
  app = cache->add_subcommand(
      "prune", "Remove stale and/or old entries with their jobs and trials (one transaction)");
  AddDbFlags(app, &prune->db, &prune->nvrtc_version);
  app->add_flag("--stale", prune->stale, "Remove stale entries");
  app->add_option("--older-than", prune->older_than,
                  "Remove entries created longer ago than this: 30d, 2w, 12h, 90m");
  app->add_flag("--dry-run", prune->dry_run, "Say what would go; change nothing");
  subs->emplace_back(app, [prune] { return RunCachePrune(*prune); });

  auto push = std::make_shared<CachePushArgs>();
  app = cache->add_subcommand(
      "push", "Publish the store's entries (with their trials) to the fleet's shared tier; per "
              "key a faster entry there stays");
  AddDbFlags(app, &push->db, nullptr);
  AddRemoteFlags(app, &push->remote, /*required=*/true);
  AddSelectionFlags(app, &push->selection);
  subs->emplace_back(app, [push] { return RunCachePush(*push); });

  auto pull = std::make_shared<CachePullArgs>();
  app = cache->add_subcommand(
      "pull", "Import the fleet's shared tier into the store (keep-faster), each record checked "
              "as ktuned checks one; refused records are listed (exit 1)");
  AddDbFlags(app, &pull->db, &pull->nvrtc_version);
  AddRemoteFlags(app, &pull->remote, /*required=*/true);
  AddSelectionFlags(app, &pull->selection);
  app->add_option("--templates", pull->templates_dir,
                  "Templates folder the records are checked against (default: shipped)");
  subs->emplace_back(app, [pull] { return RunCachePull(*pull); });
}

// diff and report: two stores side by side, one store as HTML pages.
void AddCompareCommands(CLI::App* cache, Subcommands* subs) {
  auto diff = std::make_shared<DiffArgs>();
  CLI::App* app = cache->add_subcommand("diff", "Keys in one store only, and winners that differ");
  app->add_option("db1", diff->db1, "First SQLite file")->required();
  app->add_option("db2", diff->db2, "Second SQLite file")->required();
  subs->emplace_back(app, [diff] { return RunDiff(*diff); });

  auto report = std::make_shared<ReportArgs>();
  app = cache->add_subcommand(
      "report", "Self-contained HTML pages, one per template: per entry a roofline and the "
                "time of every candidate by param (inline SVG, no scripts)");
  AddDbFlags(app, &report->db, &report->nvrtc_version);
  app->add_option("--out", report->out, "Folder for the pages")->required();
  app->add_option("--template", report->template_id, "Only this template");
  subs->emplace_back(app, [report] { return RunReport(*report); });
}

Command AddCacheCommand(CLI::App& parent) {
  CLI::App* cache = parent.add_subcommand(
      "cache", "Inspect and maintain the tuning store (reads the SQLite file directly, "
               "read-only except import and prune; safe while ktuned runs)");
  cache->require_subcommand(1);
  Subcommands subs;
  AddReadCommands(cache, &subs);
  AddTransferCommands(cache, &subs);
  AddCompareCommands(cache, &subs);
  return {cache, [subs] {
            for (const auto& [app, run] : subs) {
              if (app->parsed()) return run();
            }
            return kExitUsage;
          }};
}

}  // namespace ktune::cli
