// The one `strata` binary: `strata <subcommand> [flags]`, `strata --help`.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "cli/commands.h"
#include "common/malloc_tuning.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

// Every process logs through spdlog's default logger, on stderr: stdout
// carries commands' results (`strata status`, `strata generate`).
void InitLogging(const std::string& level) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("strata"));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::flush_on(spdlog::level::warn);
  // The processes `strata local` starts inherit the level.
  setenv("STRATA_LOG_LEVEL", level.c_str(), 1);
}

}  // namespace

int main(int argc, char** argv) {
  strata::TuneMallocForPayloads();
  CLI::App app(
      "Strata: parameter-server training for large models.\n"
      "Run `strata <subcommand> --help` for a subcommand's flags.");
  // At most one subcommand; none is answered below with the help text (an
  // unknown word is then reported as unexpected, naming it).
  app.require_subcommand(0, 1);
  // Global flags may also follow the subcommand.
  app.fallthrough();
  std::string log_level = "info";
  app.add_option("--log_level", log_level,
                 "Least severe log messages shown (also STRATA_LOG_LEVEL)")
      ->envname("STRATA_LOG_LEVEL")
      ->check(CLI::IsMember(
          {"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  std::map<CLI::App*, strata::CommandFn> commands;
  auto add = [&](strata::CommandFn (*adder)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    strata::CommandFn fn = adder(app);
    commands[app.get_subcommands({})[before]] = std::move(fn);
  };
  add(strata::AddVersionCommand);
  add(strata::AddSchedulerCommand);
  add(strata::AddServerCommand);
  add(strata::AddToyCommand);
  add(strata::AddLocalCommand);
  add(strata::AddWorkerCommand);
  add(strata::AddGenerateCommand);
  add(strata::AddExportCommand);
  add(strata::AddDataCommand);
  add(strata::AddStatusCommand);
  add(strata::AddHealthCommand);
  add(strata::AddPlotCommand);
  add(strata::AddLedgerCommand);
  add(strata::AddCertsCommand);
  CLI11_PARSE(app, argc, argv);
  InitLogging(log_level);
  for (auto& [sub, fn] : commands) {
    if (sub->parsed()) return fn();
  }
  std::fprintf(stderr, "%s\nA subcommand is required.\n", app.help().c_str());
  return 2;
}
