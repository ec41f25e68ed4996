// TODO(owner): placeholder until this subcommand is implemented.
#include "cli/commands.h"
#include "core/error.h"

namespace minigpt::cli {

void add_info_command(CLI::App& app, GlobalOptions& global) {
  CLI::App* cmd = app.add_subcommand("info", "(not implemented yet)");
  cmd->callback([] { MINIGPT_FAIL("'info' is not implemented yet"); });
}

}  // namespace minigpt::cli
