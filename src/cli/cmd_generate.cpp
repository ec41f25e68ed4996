// TODO(owner): placeholder until this subcommand is implemented.
#include "cli/commands.h"
#include "core/error.h"

namespace minigpt::cli {

void add_generate_command(CLI::App& app, GlobalOptions& global) {
  CLI::App* cmd = app.add_subcommand("generate", "(not implemented yet)");
  cmd->callback([] { MINIGPT_FAIL("'generate' is not implemented yet"); });
}

}  // namespace minigpt::cli
