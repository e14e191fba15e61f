#include "frontends/ktune/cache/report_html.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "frontends/ktune/cache/svg_chart.h"
#include "frontends/ktune/commands.h"

namespace ktune::cli {
namespace {

constexpr absl::string_view kStyle = R"css(
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1280px; }
h1 { font-size: 22px; } h2 { font-size: 16px; margin-top: 32px; border-top: 1px solid #ccc; padding-top: 12px; }
table.facts { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
table.facts td { padding: 2px 12px 2px 0; vertical-align: top; }
table.facts td:first-child { color: #666; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
.params { display: flex; flex-wrap: wrap; gap: 8px; }
.stale { color: #b35900; font-weight: bold; }
.legend { font-size: 12px; color: #555; }
code { font-size: 12px; }
)css";

std::string Header(absl::string_view title) {
  return absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>",
      XmlEscape(title), "</title>\n<style>", kStyle, "</style>\n</head>\n<body>\n");
}

std::string TrialLabel(const Config& c, const TrialMetrics& m, bool winner) {
  return absl::StrFormat("%s%s %s: %.2f us, %.0f GB/s, %.1f GFLOP/s", winner ? "winner: " : "",
                         ParamsText(c.params), KnobsText(c.knobs), m.time_ns / 1000, m.gbps,
                         m.gflops);
}

// The x categories of each param and knob that takes more than one value among `ok`.
std::vector<std::pair<std::string, std::function<std::string(const Config&)>>> Axes(
    const std::vector<const store::Trial*>& ok) {
  std::vector<std::pair<std::string, std::function<std::string(const Config&)>>> axes;
  std::set<std::string> names;
  for (const store::Trial* t : ok) {
    for (const auto& [name, v] : t->config.params) names.insert(name);
  }
  for (const std::string& name : names) {
    axes.emplace_back(name, [name](const Config& c) {
      auto it = c.params.find(name);
      return it == c.params.end() ? std::string("-") : absl::StrCat(it->second);
    });
  }
  axes.emplace_back("maxrregcount", [](const Config& c) {
    return c.knobs.maxrregcount == 0 ? std::string("none") : absl::StrCat(c.knobs.maxrregcount);
  });
  axes.emplace_back("min_blocks", [](const Config& c) { return absl::StrCat(c.knobs.min_blocks); });
  axes.emplace_back("fast_math", [](const Config& c) {
    return std::string(c.knobs.fast_math ? "on" : "off");
  });
  axes.emplace_back("target", [](const Config& c) { return c.knobs.target; });
  return axes;
}

// Category order: numbers by value, then the rest as text.
bool ValueLess(const std::string& a, const std::string& b) {
  char* end_a = nullptr;
  char* end_b = nullptr;
  const double va = std::strtod(a.c_str(), &end_a);
  const double vb = std::strtod(b.c_str(), &end_b);
  const bool na = !a.empty() && *end_a == '\0';
  const bool nb = !b.empty() && *end_b == '\0';
  if (na != nb) return na;
  if (na) return va < vb;
  return a < b;
}

std::string EntrySection(const ReportEntry& r) {
  const store::Entry& e = r.entry;
  std::string html = absl::StrCat("<section class=\"entry\" id=\"entry-", e.id, "\">\n<h2>",
                                  XmlEscape(absl::StrCat(e.key.dtype, "  ", e.key.shape)),
                                  " <span class=\"legend\">entry ", e.id, "</span>",
                                  r.stale ? " <span class=\"stale\">stale</span>" : "", "</h2>\n");
  const TrialMetrics& m = e.metrics;
  absl::StrAppend(
      &html, "<table class=\"facts\">\n",
      "<tr><td>device</td><td>", XmlEscape(e.key.device_model), "</td></tr>\n",
      "<tr><td>winner</td><td><code>", XmlEscape(ParamsText(e.config.params)), "</code> ",
      XmlEscape(KnobsText(e.config.knobs)), "</td></tr>\n",
      absl::StrFormat("<tr><td>time</td><td>%.2f us (spread %.1f%%), %.0f GB/s, %.1f GFLOP/s, "
                      "%.1f%% of the copy ceiling</td></tr>\n",
                      m.time_ns / 1000, m.time_ns > 0 ? 100 * m.spread_ns / m.time_ns : 0.0,
                      m.gbps, m.gflops, 100 * m.ceiling_fraction),
      absl::StrFormat("<tr><td>resources</td><td>%d registers, occupancy %.0f%%, %.2f waves"
                      "</td></tr>\n",
                      m.registers, 100 * m.occupancy, m.waves),
      "<tr><td>evidence</td><td>", e.trials_total, " trials, ", e.trials_ok, " ok; ",
      r.trials.size(), " recorded; source ", XmlEscape(e.source_hash.substr(0, 12)), ", NVRTC ",
      XmlEscape(e.nvrtc_version), "</td></tr>\n</table>\n");

  std::vector<const store::Trial*> ok;
  for (const store::Trial& t : r.trials) {
    if (t.outcome == Outcome::kOk && t.metrics.time_ns > 0) ok.push_back(&t);
  }
  RooflineChart roof;
  roof.title = absl::StrCat(e.key.template_id, " ", e.key.dtype, " ", e.key.shape);
  roof.copy_gbps = r.device.copy_gbps;
  bool winner_seen = false;
  for (const store::Trial* t : ok) {
    const bool winner = !winner_seen && t->config == e.config;
    winner_seen |= winner;
    const double ai = t->metrics.gbps > 0 ? t->metrics.gflops / t->metrics.gbps : 0;
    roof.points.push_back(
        {ai, t->metrics.gflops, winner, TrialLabel(t->config, t->metrics, winner)});
  }
  if (!winner_seen) {  // trials pruned or not recorded: the entry's own figures
    const double ai = m.gbps > 0 ? m.gflops / m.gbps : 0;
    roof.points.push_back({ai, m.gflops, true, TrialLabel(e.config, m, true)});
  }
  absl::StrAppend(&html, "<div class=\"charts\">\n", RenderRoofline(roof),
                  "<div class=\"params\">\n");
  if (!ok.empty()) {
    for (const auto& [name, value_of] : Axes(ok)) {
      std::set<std::string> distinct;
      for (const store::Trial* t : ok) distinct.insert(value_of(t->config));
      if (distinct.size() < 2) continue;  // a knob held fixed says nothing
      ParamChart chart;
      chart.param = name;
      chart.values.assign(distinct.begin(), distinct.end());
      std::sort(chart.values.begin(), chart.values.end(), ValueLess);
      bool marked = false;
      for (const store::Trial* t : ok) {
        const std::string v = value_of(t->config);
        const double x =
            std::find(chart.values.begin(), chart.values.end(), v) - chart.values.begin();
        const bool winner = !marked && t->config == e.config;
        marked |= winner;
        chart.points.push_back({x, t->metrics.time_ns / 1000, winner,
                                TrialLabel(t->config, t->metrics, winner)});
      }
      absl::StrAppend(&html, RenderParamChart(chart));
    }
  } else {
    absl::StrAppend(&html, "<p class=\"legend\">No timed trials recorded for this entry.</p>\n");
  }
  absl::StrAppend(&html, "</div>\n</div>\n</section>\n");
  return html;
}

}  // namespace

std::string RenderTemplatePage(const std::string& template_id,
                               const std::vector<ReportEntry>& entries, const std::string& source) {
  std::string html = Header(absl::StrCat("ktune: ", template_id));
  absl::StrAppend(&html, "<h1>", XmlEscape(template_id), "</h1>\n<p class=\"legend\">",
                  entries.size(), entries.size() == 1 ? " entry" : " entries", " from <code>",
                  XmlEscape(source),
                  "</code>. Roofline: every timed trial of the entry's job a blue point, the "
                  "winner a red ring, under the device's measured copy ceiling. Param plots: "
                  "kernel time of each candidate by the value of one param or knob. Hover a "
                  "point for its config.</p>\n<p><a href=\"index.html\">all templates</a></p>\n");
  for (const ReportEntry& r : entries) absl::StrAppend(&html, EntrySection(r));
  absl::StrAppend(&html, "</body>\n</html>\n");
  return html;
}

std::string RenderReportIndex(const std::vector<ReportIndexRow>& rows, const std::string& source) {
  std::string html = Header("ktune cache report");
  absl::StrAppend(&html, "<h1>ktune cache report</h1>\n<p class=\"legend\">From <code>",
                  XmlEscape(source), "</code>.</p>\n<ul>\n");
  for (const ReportIndexRow& r : rows) {
    absl::StrAppend(&html, "<li><a href=\"", XmlEscape(r.file), "\">", XmlEscape(r.template_id),
                    "</a>: ", r.entries, " entries</li>\n");
  }
  absl::StrAppend(&html, "</ul>\n</body>\n</html>\n");
  return html;
}

}  // namespace ktune::cli
