#include "frontends/ktune/cache/svg_chart.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ktune::cli {
namespace {

// The plot area inside an SVG of width x height: margins leave room for ticks and titles.
struct Frame {
  double width, height, left, right, top, bottom;
  double x0() const { return left; }
  double x1() const { return width - right; }
  double y0() const { return height - bottom; }  // the bottom edge (SVG y grows down)
  double y1() const { return top; }
};

std::string Num(double v) { return absl::StrFormat("%.1f", v); }

// 10^k as a person writes it: 0.01, 0.1, 1, 10, ..., 100000, then 1e6.
std::string DecadeLabel(int k) {
  if (k >= 0 && k <= 5) return absl::StrCat(static_cast<int64_t>(std::llround(std::pow(10, k))));
  if (k < 0 && k >= -3) return absl::StrFormat("%.*f", -k, std::pow(10, k));
  return absl::StrCat("1e", k);
}

// A step of 1, 2 or 5 x 10^k that cuts [0, top] into about `n` parts.
double NiceStep(double top, int n) {
  if (top <= 0) return 1;
  const double raw = top / n;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

std::string Point(double cx, double cy, const ChartPoint& p) {
  const std::string title = p.label.empty() ? "" : absl::StrCat("<title>", XmlEscape(p.label), "</title>");
  if (p.winner) {
    return absl::StrCat("<circle class=\"winner\" cx=\"", Num(cx), "\" cy=\"", Num(cy),
                        "\" r=\"7\" fill=\"#d62728\" fill-opacity=\"0.25\" stroke=\"#d62728\" "
                        "stroke-width=\"2.5\">",
                        title, "</circle>\n");
  }
  return absl::StrCat("<circle class=\"trial\" cx=\"", Num(cx), "\" cy=\"", Num(cy),
                      "\" r=\"3.5\" fill=\"#1f77b4\" fill-opacity=\"0.55\">", title,
                      "</circle>\n");
}

std::string Text(double x, double y, absl::string_view text, absl::string_view extra = "") {
  return absl::StrCat("<text x=\"", Num(x), "\" y=\"", Num(y), "\" ", extra, ">",
                      XmlEscape(text), "</text>\n");
}

std::string Line(double x1, double y1, double x2, double y2, absl::string_view style) {
  return absl::StrCat("<line x1=\"", Num(x1), "\" y1=\"", Num(y1), "\" x2=\"", Num(x2),
                      "\" y2=\"", Num(y2), "\" ", style, "/>\n");
}

}  // namespace

std::string XmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

namespace {

// The roofline's log-log scale: whole decades [xl, xh] x [yl, yh] over the frame.
struct LogScale {
  Frame f;
  int xl, xh, yl, yh;
  double X(double lx) const { return f.x0() + (lx - xl) / (xh - xl) * (f.x1() - f.x0()); }
  double Y(double ly) const { return f.y0() - (ly - yl) / (yh - yl) * (f.y0() - f.y1()); }
};

// A decade of room around the `shown` points, and the roofs where they bend.
LogScale RooflineScale(const Frame& f, const RooflineChart& chart,
                       const std::vector<const ChartPoint*>& shown) {
  const bool memory_roof = chart.copy_gbps > 0;
  double min_x = 1, max_x = 1, min_y = 1, max_y = 1;
  if (!shown.empty()) {
    min_x = max_x = shown[0]->x;
    min_y = max_y = shown[0]->y;
    for (const ChartPoint* p : shown) {
      min_x = std::min(min_x, p->x);
      max_x = std::max(max_x, p->x);
      min_y = std::min(min_y, p->y);
      max_y = std::max(max_y, p->y);
    }
  }
  if (memory_roof && chart.compute_gflops && *chart.compute_gflops > 0) {
    const double ridge = *chart.compute_gflops / chart.copy_gbps;
    min_x = std::min(min_x, ridge);
    max_x = std::max(max_x, ridge);
    max_y = std::max(max_y, *chart.compute_gflops);
  } else if (memory_roof) {
    max_y = std::max(max_y, chart.copy_gbps * max_x);
  }
  const int xl = static_cast<int>(std::floor(std::log10(min_x))) - 1;
  const int xh = std::max(static_cast<int>(std::ceil(std::log10(max_x))) + 1, xl + 2);
  const int yl = static_cast<int>(std::floor(std::log10(min_y))) - 1;
  const int yh = std::max(static_cast<int>(std::ceil(std::log10(max_y))) + 1, yl + 2);
  return {f, xl, xh, yl, yh};
}

// The memory and compute roofs (the SVG lines); what is missing goes to *notes.
std::string RooflineRoofs(const RooflineChart& chart, const LogScale& s,
                          std::vector<std::string>* notes) {
  const bool memory_roof = chart.copy_gbps > 0;
  const int xl = s.xl, xh = s.xh, yl = s.yl, yh = s.yh;
  auto px = [&](double lx) { return s.X(lx); };
  auto py = [&](double ly) { return s.Y(ly); };
  std::string out;
  // The memory roof, y = copy_gbps * x, is a slope-1 line in log-log; clipped by hand to
  // the plot area (and to the ridge when a compute roof is drawn).
  if (memory_roof) {
    const double c = std::log10(chart.copy_gbps);
    double a = std::max<double>(xl, yl - c);
    double b = std::min<double>(xh, yh - c);
    const bool compute = chart.compute_gflops && *chart.compute_gflops > 0;
    if (compute) b = std::min(b, std::log10(*chart.compute_gflops) - c);
    if (a < b) {
      absl::StrAppend(&out, "<line class=\"memory-roof\" x1=\"", Num(px(a)), "\" y1=\"",
                      Num(py(a + c)), "\" x2=\"", Num(px(b)), "\" y2=\"", Num(py(b + c)),
                      "\" stroke=\"#2ca02c\" stroke-width=\"2\"/>\n");
      // Labelled part-way up, on its upper-left side: above the roof nothing is attainable,
      // so no trial is drawn there.
      const double at = a + 0.3 * (b - a);
      absl::StrAppend(&out, Text(px(at) - 8, py(at + c) - 8,
                                 absl::StrFormat("memory roof %.0f GB/s", chart.copy_gbps),
                                 "fill=\"#2ca02c\" text-anchor=\"end\""));
    }
    if (compute) {
      const double p = std::log10(*chart.compute_gflops);
      absl::StrAppend(&out, "<line class=\"compute-roof\" x1=\"", Num(px(p - c)), "\" y1=\"",
                      Num(py(p)), "\" x2=\"", Num(px(xh)), "\" y2=\"", Num(py(p)),
                      "\" stroke=\"#ff7f0e\" stroke-width=\"2\"/>\n");
    }
  } else {
    notes->push_back("no copy ceiling measured for this device: no memory roof");
  }
  return out;
}

}  // namespace

std::string RenderRoofline(const RooflineChart& chart) {
  const Frame f{560, 380, 72, 24, 34, 52};
  std::vector<const ChartPoint*> shown;
  for (const ChartPoint& p : chart.points) {
    if (p.x > 0 && p.y > 0) shown.push_back(&p);
  }
  const size_t hidden = chart.points.size() - shown.size();

  const LogScale scale = RooflineScale(f, chart, shown);
  const int xl = scale.xl, xh = scale.xh, yl = scale.yl, yh = scale.yh;
  auto px = [&](double lx) { return scale.X(lx); };
  auto py = [&](double ly) { return scale.Y(ly); };

  std::string svg = absl::StrFormat(
      "<svg class=\"roofline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" role=\"img\" font-family=\"sans-serif\" font-size=\"11\">\n",
      static_cast<int>(f.width), static_cast<int>(f.height), static_cast<int>(f.width),
      static_cast<int>(f.height));
  absl::StrAppend(&svg, "<title>", XmlEscape(chart.title), "</title>\n");
  absl::StrAppend(&svg, "<rect x=\"", Num(f.x0()), "\" y=\"", Num(f.y1()), "\" width=\"",
                  Num(f.x1() - f.x0()), "\" height=\"", Num(f.y0() - f.y1()),
                  "\" fill=\"#fbfbfb\" stroke=\"#999\"/>\n");
  // Decade grid and labels.
  for (int k = xl; k <= xh; ++k) {
    absl::StrAppend(&svg, Line(px(k), f.y0(), px(k), f.y1(), "stroke=\"#e2e2e2\""));
    absl::StrAppend(&svg, Text(px(k), f.y0() + 15, DecadeLabel(k), "text-anchor=\"middle\""));
  }
  for (int k = yl; k <= yh; ++k) {
    absl::StrAppend(&svg, Line(f.x0(), py(k), f.x1(), py(k), "stroke=\"#e2e2e2\""));
    absl::StrAppend(&svg, Text(f.x0() - 6, py(k) + 4, DecadeLabel(k), "text-anchor=\"end\""));
  }
  absl::StrAppend(&svg, Text((f.x0() + f.x1()) / 2, f.height - 12,
                             "arithmetic intensity (flop/byte)", "text-anchor=\"middle\""));
  absl::StrAppend(&svg, Text(16, (f.y0() + f.y1()) / 2, "achieved GFLOP/s",
                             absl::StrFormat("text-anchor=\"middle\" transform=\"rotate(-90 16 %s)\"",
                                             Num((f.y0() + f.y1()) / 2))));
  absl::StrAppend(&svg, Text(f.x0(), 20, chart.title, "font-size=\"13\" font-weight=\"bold\""));

  std::vector<std::string> notes;
  absl::StrAppend(&svg, RooflineRoofs(chart, scale, &notes));
  if (!chart.compute_gflops || *chart.compute_gflops <= 0) {
    notes.push_back("no compute ceiling measured: memory roof only");
  }
  if (hidden > 0) {
    notes.push_back(absl::StrCat(hidden, " trial(s) without flops or bytes not shown"));
  }
  // Notes in the top-left corner, which is above the memory roof: trials never land there.
  for (size_t i = 0; i < notes.size(); ++i) {
    absl::StrAppend(&svg, Text(f.x0() + 6, f.y1() + 14 + 14.0 * i, notes[i],
                               "class=\"note\" fill=\"#555\""));
  }
  // Trials first, the winner last so it is drawn on top.
  for (bool winners : {false, true}) {
    for (const ChartPoint* p : shown) {
      if (p->winner == winners) {
        absl::StrAppend(&svg, Point(px(std::log10(p->x)), py(std::log10(p->y)), *p));
      }
    }
  }
  absl::StrAppend(&svg, "</svg>\n");
  return svg;
}

std::string RenderParamChart(const ParamChart& chart) {
  const Frame f{300, 220, 56, 14, 28, 40};
  double top = 0;
  for (const ChartPoint& p : chart.points) top = std::max(top, p.y);
  const double step = NiceStep(top * 1.05, 4);
  const double y_max = std::max(step, std::ceil(top * 1.05 / step) * step);
  const size_t n = std::max<size_t>(chart.values.size(), 1);
  auto px = [&](double i) { return f.x0() + (i + 0.5) / n * (f.x1() - f.x0()); };
  auto py = [&](double y) { return f.y0() - y / y_max * (f.y0() - f.y1()); };

  std::string svg = absl::StrFormat(
      "<svg class=\"param-plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
      "height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" font-family=\"sans-serif\" "
      "font-size=\"10\">\n",
      static_cast<int>(f.width), static_cast<int>(f.height), static_cast<int>(f.width),
      static_cast<int>(f.height));
  absl::StrAppend(&svg, "<title>time by ", XmlEscape(chart.param), "</title>\n");
  absl::StrAppend(&svg, "<rect x=\"", Num(f.x0()), "\" y=\"", Num(f.y1()), "\" width=\"",
                  Num(f.x1() - f.x0()), "\" height=\"", Num(f.y0() - f.y1()),
                  "\" fill=\"#fbfbfb\" stroke=\"#999\"/>\n");
  for (double y = 0; y <= y_max + step / 2; y += step) {
    absl::StrAppend(&svg, Line(f.x0(), py(y), f.x1(), py(y), "stroke=\"#e2e2e2\""));
    absl::StrAppend(&svg, Text(f.x0() - 5, py(y) + 3, absl::StrFormat("%g", y),
                               "text-anchor=\"end\""));
  }
  for (size_t i = 0; i < chart.values.size(); ++i) {
    absl::StrAppend(&svg, Text(px(i), f.y0() + 13, chart.values[i], "text-anchor=\"middle\""));
  }
  absl::StrAppend(&svg, Text((f.x0() + f.x1()) / 2, f.height - 8, chart.param,
                             "text-anchor=\"middle\" font-weight=\"bold\""));
  absl::StrAppend(&svg, Text(12, (f.y0() + f.y1()) / 2, "time (us)",
                             absl::StrFormat("text-anchor=\"middle\" transform=\"rotate(-90 12 %s)\"",
                                             Num((f.y0() + f.y1()) / 2))));
  for (bool winners : {false, true}) {
    for (const ChartPoint& p : chart.points) {
      if (p.winner == winners) absl::StrAppend(&svg, Point(px(p.x), py(p.y), p));
    }
  }
  absl::StrAppend(&svg, "</svg>\n");
  return svg;
}

}  // namespace ktune::cli
