// `strata plot`: a run's curves (training and held-out loss, tokens/s, one
// line per worker) from its metrics JSON lines, drawn as SVG in one
// self-contained HTML page (no scripts, no network).
#ifndef STRATA_CLI_PLOT_H_
#define STRATA_CLI_PLOT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace strata {

// One line of a chart: (x, y) points in x order.
struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

// A step marked on a chart with a vertical line and a label (a switch of
// the job's consistency under --consistency auto).
struct PlotMark {
  double x = 0;
  std::string label;
};

struct PlotChart {
  std::string title;
  std::string y_label;
  std::vector<PlotSeries> series;  // empty ones are left out
  std::vector<PlotMark> marks;
};

// An <svg> element drawing `chart` (axes, ticks, a polyline per series
// with a class "series", a legend, and a line of class "mark" per mark).
// A chart without points says so.
std::string RenderSvg(const PlotChart& chart);

// The charts of the run in `dir`: every metrics-<name>.jsonl there (as
// `strata local` and `strata worker --metrics` write them), one series per
// file; each chart marks the steps where a line's "consistency" differs
// from the one before it in its file (the first worker to run a mode
// marks it). NOT_FOUND when `dir` holds none; INVALID_ARGUMENT naming file:line
// for a line that is not a JSON object with a numeric "step" (a last line
// still being written is skipped).
absl::StatusOr<std::vector<PlotChart>> ReadRunCharts(const std::string& dir);

// Writes the page for the run in `dir` to `out` ("" = <dir>/plot.html) and
// returns its path.
absl::StatusOr<std::string> PlotRun(const std::string& dir, std::string out);

}  // namespace strata

#endif  // STRATA_CLI_PLOT_H_
