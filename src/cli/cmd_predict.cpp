// TODO(owner): placeholder until this subcommand is implemented.
#include "cli/commands.h"
#include "core/error.h"

namespace minigpt::cli {

void add_predict_command(CLI::App& app, GlobalOptions& global) {
  CLI::App* cmd = app.add_subcommand("predict", "(not implemented yet)");
  cmd->callback([] { MINIGPT_FAIL("'predict' is not implemented yet"); });
}

}  // namespace minigpt::cli
