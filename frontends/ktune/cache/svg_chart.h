// Inline SVG charts for `ktune cache report`: a roofline per entry and a time-by-value plot
// per param. Hand-written SVG rather than a plotting library: the page must be one
// self-contained file with no scripts and no network, and two chart kinds do not justify
// a dependency. Plain functions, thread-safe.
#ifndef KTUNE_CLIENT_CLI_CACHE_SVG_CHART_H_
#define KTUNE_CLIENT_CLI_CACHE_SVG_CHART_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ktune::cli {

// Text made safe inside XML/HTML content and attribute values.
std::string XmlEscape(absl::string_view text);

// One measured candidate on a chart.
struct ChartPoint {
  double x = 0;
  double y = 0;
  bool winner = false;
  std::string label;  // shown on hover (an SVG <title>)
};

// Achieved GFLOP/s against arithmetic intensity (flop/byte), both axes log10, under the
// memory roof (copy_gbps x intensity) and, when one was measured, the compute roof.
// copy_gbps <= 0 or no compute roof: the chart says so in its corner. Points with x or y
// <= 0 cannot sit on log axes; their count is stated on the chart. The root element is
// <svg class="roofline">.
struct RooflineChart {
  std::string title;
  double copy_gbps = 0;
  std::optional<double> compute_gflops;
  std::vector<ChartPoint> points;
};
std::string RenderRoofline(const RooflineChart& chart);

// Kernel time (us) by the value of one param: values spaced evenly in sorted order, every
// candidate a point, the winner marked. The root element is <svg class="param-plot">.
struct ParamChart {
  std::string param;
  std::vector<std::string> values;  // the x categories, in order
  // x is an index into `values`.
  std::vector<ChartPoint> points;
};
std::string RenderParamChart(const ParamChart& chart);

}  // namespace ktune::cli

#endif  // KTUNE_CLIENT_CLI_CACHE_SVG_CHART_H_
