// `strata plot --dir RUN`: the run's curves as one HTML page (cli/plot.h).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/plot.h"

namespace strata {

CommandFn AddPlotCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plot",
      "Draw a run's training and held-out loss and tokens/s, per worker, "
      "into one self-contained HTML page");
  auto dir = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("--dir", *dir,
                  "the run's directory (strata local --dir), holding "
                  "metrics-*.jsonl")
      ->required();
  cmd->add_option("--out", *out,
                  "the page to write (default: <dir>/plot.html)");
  return [dir, out] {
    absl::StatusOr<std::string> path = PlotRun(*dir, *out);
    if (!path.ok()) return ReportStatus("plot", path.status());
    std::printf("%s\n", path->c_str());
    return 0;
  };
}

}  // namespace strata
