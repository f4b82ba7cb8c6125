// The `strata` subcommands. Each Add*Command registers its flags on `app`
// and returns the function to run when that subcommand was chosen; the
// function returns the process exit code.
#ifndef STRATA_CLI_COMMANDS_H_
#define STRATA_CLI_COMMANDS_H_

#include <functional>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "trainer/trainer.h"

namespace strata {

using CommandFn = std::function<int()>;

CommandFn AddVersionCommand(CLI::App& app);
CommandFn AddSchedulerCommand(CLI::App& app);
CommandFn AddServerCommand(CLI::App& app);
CommandFn AddToyCommand(CLI::App& app);
CommandFn AddLocalCommand(CLI::App& app);
CommandFn AddStatusCommand(CLI::App& app);
CommandFn AddHealthCommand(CLI::App& app);
CommandFn AddPlotCommand(CLI::App& app);
CommandFn AddLedgerCommand(CLI::App& app);
CommandFn AddCertsCommand(CLI::App& app);
CommandFn AddWorkerCommand(CLI::App& app);
CommandFn AddGenerateCommand(CLI::App& app);
CommandFn AddExportCommand(CLI::App& app);
CommandFn AddDataCommand(CLI::App& app);

// The flags of a GPT trainer (model shape, data, optimization), shared by
// `strata worker` and `strata local`; and those options as worker flags.
void AddTrainerFlags(CLI::App* cmd, TrainerOptions* o);
std::vector<std::string> TrainerFlags(const TrainerOptions& o);
// The simulated straggler's flags of `o` (--slowdown, --jitter,
// --slowdown_steps; none at their defaults), which TrainerFlags includes.
std::vector<std::string> StragglerFlags(const TrainerOptions& o);
// With --init_from: the model flags `cmd` was not given take the file's
// shape (model/hf_gpt2.h HfGpt2Config), and the path becomes absolute.
// Errors: the file's, and INVALID_ARGUMENT when the heads are known from
// neither --heads nor a config.json beside the file.
absl::Status ApplyInitFromShape(const CLI::App& cmd, TrainerOptions& o);

// Prints "strata <cmd>: <status>" to stderr and returns 1 when !ok.
int ReportStatus(const char* command, const absl::Status& status);

}  // namespace strata

#endif  // STRATA_CLI_COMMANDS_H_
