// The one `strata` binary: `strata <subcommand> [flags]`, `strata --help`.
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "common/malloc_tuning.h"

int main(int argc, char** argv) {
  strata::TuneMallocForPayloads();
  CLI::App app(
      "Strata: parameter-server training for large models.\n"
      "Run `strata <subcommand> --help` for a subcommand's flags.");
  // At most one subcommand; none is answered below with the help text (an
  // unknown word is then reported as unexpected, naming it).
  app.require_subcommand(0, 1);
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
  add(strata::AddDataCommand);
  add(strata::AddStatusCommand);
  CLI11_PARSE(app, argc, argv);
  for (auto& [sub, fn] : commands) {
    if (sub->parsed()) return fn();
  }
  std::fprintf(stderr, "%s\nA subcommand is required.\n", app.help().c_str());
  return 2;
}
